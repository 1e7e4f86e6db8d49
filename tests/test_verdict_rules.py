"""The tight verdict's rules, each on a hand-written history that only it catches: reap
promptness per lease, the holder's identity, the lease length, the needless-redelivery limit,
and undrained jobs (verdict ``unknown``, never a pass, never a loss)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from histories import History

from chaos.check.checker import CheckConfig, Verdict, check
from chaos.errors import EXIT_UNKNOWN
from chaos.history.schema import Fault, Run
from chaos.names import INVARIANTS
from chaos.run.evaluate import CLOCK_STEP_ALLOWANCE_MS, evaluate

L, R, ALLOW = 1000, 250, 100
LIMIT = R + ALLOW  # reap_prompt: deadline -> reap at most this


def assert_fails_only(verdict: Verdict, *expected: str) -> None:
    assert sorted(verdict.failed_invariants()) == sorted(expected), verdict.as_dict()
    for name in INVARIANTS:
        if name not in expected:
            assert verdict.invariants[name].violations == 0, name


def unfaulted_lapse(reap_lag: int) -> History:
    """w1 holds a, never renews it and no fault touches it; the reaper takes it ``reap_lag`` ms
    after its deadline (1010); w2 completes it."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.reap("a", attempt=1, ts=1010 + reap_lag)
    h.claim("a", attempt=2, worker="w2", ts=1020 + reap_lag)
    h.complete("a", attempt=2, worker="w2", ts=1100 + reap_lag)
    h.complete_rejected("a", attempt=1, worker="w1", ts=1200 + reap_lag, current_attempt=2)
    return h


# --- reap_prompt ----


@pytest.mark.parametrize(("lag", "ok"), [(0, True), (LIMIT, True), (LIMIT + 1, False)])
def test_every_lapsed_lease_is_reaped_within_one_interval_plus_the_allowance(lag: int, ok: bool):
    """No fault at all: recovery_bound has nothing to judge; only reap_prompt sees a lazy reap."""
    verdict = check(unfaulted_lapse(lag).events())
    assert_fails_only(verdict, *([] if ok else ["reap_prompt"]))
    result = verdict.invariants["reap_prompt"]
    assert result.figures["limit_ms"] == LIMIT
    assert result.figures["max_ms"] == lag
    assert verdict.recovery["deadline_to_reap"].max_ms == lag
    if not ok:
        assert result.examples[0]["lag_ms"] == lag
        assert result.first_violation_ts == 1010 + LIMIT


def test_a_lapsed_lease_its_holder_still_completes_past_the_bound_was_not_reaped_in_time():
    """The reaper never took a; its holder's complete, accepted 400 ms past the deadline,
    shows the lease lapsed and unreaped for longer than one interval + the allowance."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.complete("a", attempt=1, worker="w1", ts=1010 + LIMIT + 1)
    verdict = check(h.events())
    assert_fails_only(verdict, "reap_prompt")
    assert verdict.invariants["reap_prompt"].examples[0]["reason"].startswith("its holder")


def test_leases_that_lapse_during_a_store_outage_are_exempt_from_reap_prompt():
    h = unfaulted_lapse(reap_lag=2000)  # the reaper could not reach the store
    h.write(Fault("f1", "valkey_restart", "valkey", killed_ts=900, down_ms=2000), ts=3000)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.invariants["reap_prompt"].figures["exempt_store_outage"] == 1
    assert verdict.recovery["deadline_to_reap"].count == 0


def test_a_store_outage_exempts_only_until_the_reaper_is_back():
    """The reaper came back (its reap of a at 3010); b lapses at 5010, long after, and is reaped
    late: judged like any lease."""
    h = unfaulted_lapse(reap_lag=2000)
    h.write(Fault("f1", "failover", "valkey-1", killed_ts=900, down_ms=1500, promoted_ms=1400),
            ts=2500)
    h.enqueue("b", ts=3900)
    h.claim("b", attempt=1, worker="w2", ts=4010)
    h.reap("b", attempt=1, ts=5010 + LIMIT + 1)
    h.claim("b", attempt=2, worker="w2", ts=5500)
    h.complete("b", attempt=2, worker="w2", ts=5600)
    verdict = check(h.events())
    assert_fails_only(verdict, "reap_prompt")
    result = verdict.invariants["reap_prompt"]
    assert result.figures["exempt_store_outage"] == 1 and result.examples[0]["job"] == "b"


def never_reaped(watched_lag: int) -> History:
    """w1 holds a and stops renewing it; no fault touches it and no reaper ever takes it. The
    runner starts the drain phase ``watched_lag`` ms after a's deadline (1010), with the reaper
    still running; the end event comes long after (the stop: no evidence of a reaper)."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW, run=False)
    h.write(Run(scenario="hand-written", seed=1, lease_ms=L, reap_interval_ms=R,
                tolerance_ms=ALLOW, workers=("w1", "w2"), reapers=1), ts=0)
    h.phase("warmup", ts=0)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.phase("drain", ts=1010 + watched_lag)
    h.phase("end", ts=9000, drained=0, aborted=0)
    return h


@pytest.mark.parametrize(("lag", "ok"), [(LIMIT, True), (LIMIT + 1, False)])
def test_a_lease_lapsed_and_never_reaped_while_the_reaper_ran_breaks_reap_prompt(lag: int,
                                                                               ok: bool):
    """Caught by the rule itself, not only as an undrained job (unknown) or by recovery_bound
    (no fault stranded a here): the no-reaper variant's stranded leases, and any reaper that
    skips a lease for good."""
    verdict = check(never_reaped(lag).events())
    assert_fails_only(verdict, *([] if ok else ["reap_prompt"]))
    assert verdict.jobs.undrained == 1 and verdict.jobs.lost == 0
    if not ok:
        example = verdict.invariants["reap_prompt"].examples[0]
        assert example["reason"] == "lapsed and never reaped while a reaper ran"
        assert (example["watched_until_ts"], example["lag_ms"]) == (1010 + lag, lag)
        assert verdict.invariants["reap_prompt"].first_violation_ts == 1010 + LIMIT


def test_a_later_reap_shows_the_reaper_ran_past_an_unreaped_lapsed_lease():
    """No phase after the claim, but the reaper took b 2 s after a's deadline: it was running,
    and skipped a."""
    h = never_reaped(0)
    h.claim("b", attempt=1, worker="w2", ts=2000)
    h.reap("b", attempt=1, ts=3010)
    verdict = check(h.events())
    assert_fails_only(verdict, "reap_prompt")
    assert verdict.invariants["reap_prompt"].examples[0]["watched_until_ts"] == 3010


def test_an_unreaped_lease_is_not_the_reapers_fault_while_a_fault_cut_every_reaper_off():
    h = never_reaped(LIMIT + 500)
    h.fault("kill", "reaper", ts=900)  # the run's own fault, before a lapsed
    assert_fails_only(check(h.events()))
    h = never_reaped(LIMIT + 500)
    h.fault("kill", "w2", ts=900)  # a worker's: the reaper still ran
    assert_fails_only(check(h.events()), "reap_prompt")


def test_the_reap_allowance_comes_from_the_config():
    verdict = check(unfaulted_lapse(LIMIT + 50).events(),
                    CheckConfig(L, R, ALLOW, reap_allowance_ms=ALLOW + 50))
    assert_fails_only(verdict)


# --- exclusive_lease: the holder's identity ------------------------------------------------------


def test_an_accepted_complete_with_the_live_attempt_from_another_worker_breaks_exclusive_lease():
    """w2 re-read a's fencing token (attempt 1, w1's) and completed with it: the attempt is the
    live one, the worker is not its holder."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.complete("a", attempt=1, worker="w2", ts=300)
    h.complete_rejected("a", attempt=1, worker="w1", ts=400)
    verdict = check(h.events())
    assert_fails_only(verdict, "exclusive_lease")
    example = verdict.invariants["exclusive_lease"].examples[0]
    assert example["reason"] == "not the holder of the live lease"
    assert (example["worker"], example["live_worker"], example["live_attempt"]) == ("w2", "w1", 1)
    assert verdict.jobs.completed == 1  # the store acted on it: the job is done, not lost


# --- lease_length ----


@pytest.mark.parametrize(("granted", "ok"), [(L - 1, True), (L + 1, True), (L - 2, False),
                                             (L // 2, False)])
def test_every_granted_lease_runs_the_configured_lease_ms(granted: int, ok: bool):
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.extend("a", attempt=1, worker="w1", ts=300, lease_ms=granted)  # recorded honestly
    h.complete("a", attempt=1, worker="w1", ts=400)
    verdict = check(h.events())
    assert_fails_only(verdict, *([] if ok else ["lease_length"]))
    result = verdict.invariants["lease_length"]
    assert result.figures == {"lease_ms": L, "granted": 2, "misrecorded": 0}
    if not ok:
        assert result.examples[0]["op"] == "extend" and result.examples[0]["lease_ms"] == granted
        assert result.first_violation_ts == 300


def stretched_extend(deadline: int, recorded: int = L) -> History:
    """w1's extend at 300 records ``recorded`` as its lease_ms but writes ``deadline`` to
    active; w1 completes at 400, long before either deadline (nothing else is touched)."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.extend("a", attempt=1, worker="w1", ts=300, lease_ms=recorded, deadline=deadline)
    h.complete("a", attempt=1, worker="w1", ts=400)
    return h


@pytest.mark.parametrize(("deadline", "ok"), [(300 + L, True), (300 + L + 1, True),
                                              (300 + L + 2, False), (300 + 3 * L, False),
                                              (300 + L - 2, False)])
def test_a_lease_is_as_long_as_the_deadline_written_to_active_not_the_lease_ms_recorded(
        deadline: int, ok: bool):
    """The event says lease_ms = L; the deadline written says otherwise: the deadline is what
    the reaper goes by, so that is the lease granted, and the record disagreeing is an offence
    of its own (each grant counted once)."""
    verdict = check(stretched_extend(deadline).events())
    assert_fails_only(verdict, *([] if ok else ["lease_length"]))
    result = verdict.invariants["lease_length"]
    assert result.figures == {"lease_ms": L, "granted": 2, "misrecorded": 0 if ok else 1}
    if not ok:
        assert result.violations == 1
        (example,) = result.examples
        assert (example["op"], example["lease_ms"], example["recorded_lease_ms"],
                example["deadline"]) == ("extend", deadline - 300, L, deadline)
        assert result.first_violation_ts == 300


def test_a_grant_of_the_right_length_recorded_as_another_is_an_offence():
    """The deadline written is ts + L (the right length), the record says L / 2: the evidence
    misstates the lease, so lease_length fails on the cross-check alone."""
    verdict = check(stretched_extend(300 + L, recorded=L // 2).events())
    assert_fails_only(verdict, "lease_length")
    result = verdict.invariants["lease_length"]
    assert (result.violations, result.figures["misrecorded"]) == (1, 1)
    (example,) = result.examples
    assert (example["lease_ms"], example["recorded_lease_ms"]) == (L, L // 2)
    assert "disagrees with the deadline written" in example["reason"]


def test_every_deadline_is_the_one_written_to_active():
    """A claim recording L but writing a deadline L + 500 ahead: a reap at ts + L + 100 is
    before that deadline (premature: the reaper went by another clock than the lease's), and a
    reap later than the written deadline is measured from it by reap_prompt."""
    def claimed_then_reaped(reap_ts: int) -> History:
        h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
        h.enqueue("a", ts=0)
        h.claim("a", attempt=1, worker="w1", ts=0, deadline=L + 500)
        h.reap("a", attempt=1, ts=reap_ts)
        h.claim("a", attempt=2, worker="w2", ts=reap_ts + 10)
        h.complete("a", attempt=2, worker="w2", ts=reap_ts + 20)
        return h

    early = check(claimed_then_reaped(L + 100).events())
    assert_fails_only(early, "lease_length", "no_premature_reap")
    assert early.invariants["no_premature_reap"].examples[0]["deadline"] == L + 500
    on_time = check(claimed_then_reaped(L + 500 + LIMIT).events())
    assert_fails_only(on_time, "lease_length")  # measured from L + 500, not from L
    assert on_time.recovery["deadline_to_reap"].max_ms == LIMIT


# --- needless_limit ----


def needless_once() -> History:
    """w1 is alive and unfaulted but does not renew: its lease is reaped on time, needlessly."""
    return unfaulted_lapse(reap_lag=100)


@pytest.mark.parametrize(("max_needless", "ok"), [(None, True), (1, True), (0, False)])
def test_needless_redeliveries_past_the_scenarios_limit_fail(max_needless: int | None, ok: bool):
    verdict = check(needless_once().events(),
                    CheckConfig(L, R, ALLOW, max_needless=max_needless))
    assert verdict.redeliveries.needless == 1
    assert_fails_only(verdict, *([] if ok else ["needless_limit"]))
    result = verdict.invariants["needless_limit"]
    assert result.figures == {"max_needless": max_needless, "needless": 1}
    if not ok:
        assert result.violations == 1
        assert result.examples[0]["job"] == "a" and result.examples[0]["holder_under"] == "none"
        assert result.first_violation_ts == 1110


# --- undrained ----


def overloaded(drained: int) -> History:
    """a is done; b is still leased and c still pending when the drain ends."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    for job in "abc":
        h.enqueue(job, ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.complete("a", attempt=1, worker="w1", ts=100)
    h.claim("b", attempt=1, worker="w1", ts=110)
    h.extend("b", attempt=1, worker="w1", ts=400)
    h.phase("end", ts=500, drained=drained, aborted=0)
    return h


def test_jobs_left_in_a_queue_that_did_not_drain_are_undrained_and_the_verdict_unknown():
    verdict = check(overloaded(drained=0).events())
    assert_fails_only(verdict)  # nothing broke ...
    assert verdict.unknown and not verdict.passed  # ... yet it is no pass
    assert verdict.undrained == [{"job": "b", "state": "active"}, {"job": "c", "state": "pending"}]
    assert verdict.jobs.lost == verdict.outcomes.lost == 0
    assert verdict.jobs.undrained == verdict.outcomes.undrained == 2
    assert verdict.invariants["no_loss"].figures["undrained"] == 2
    assert verdict.as_dict()["undrained"]["count"] == 2


def test_jobs_missing_from_a_queue_that_drained_are_lost():
    verdict = check(overloaded(drained=1).events())
    assert_fails_only(verdict, "no_loss")
    assert not verdict.unknown
    assert verdict.jobs.lost == 2 and verdict.undrained == []


def test_an_undrained_run_is_judged_unknown_with_its_own_exit_code(tmp_path: Path):
    """The run directory's evaluation (what `run`, `check` and `report` say): unknown, exit 4."""
    overloaded(drained=0).write_jsonl(tmp_path / "history.jsonl")
    evaluation = evaluate(tmp_path)
    assert evaluation.word == "unknown" and evaluation.exit_code == EXIT_UNKNOWN
    report = evaluation.report()
    assert report["verdict"] == "unknown"
    assert json.loads(json.dumps(report))["undrained"]["jobs"][0] == {"job": "b",
                                                                       "state": "active"}


def test_a_broken_invariant_beside_undrained_jobs_is_a_fail(tmp_path: Path):
    h = overloaded(drained=0)
    h.claim("c", attempt=1, worker="w2", ts=450, lease_ms=L // 2)  # short lease
    h.phase("end", ts=600, drained=0, aborted=0)
    h.write_jsonl(tmp_path / "history.jsonl")
    assert evaluate(tmp_path).word == "fail"


@pytest.mark.parametrize("word", ["pass", "fail"])
def test_a_run_whose_clock_stepped_is_unknown_whatever_it_would_have_been(tmp_path: Path,
                                                                           word: str):
    """The history spans 1500 ms of Valkey-clock time; the run took less on the monotonic clock
    (the runner's wall_ms, or report.json's for a re-check): the clock was stepped forward and
    every deadline with it. Within CLOCK_STEP_ALLOWANCE_MS of the span it is judged as usual."""
    h = overloaded(drained=1)
    if word == "pass":
        h.complete("b", attempt=1, worker="w1", ts=450)
        h.claim("c", attempt=1, worker="w2", ts=460)
        h.complete("c", attempt=1, worker="w2", ts=470)
    h.phase("end", ts=1500, drained=1, aborted=0)
    h.write_jsonl(tmp_path / "history.jsonl")
    assert evaluate(tmp_path, "finished", wall_ms=1500 - CLOCK_STEP_ALLOWANCE_MS).word == word
    assert evaluate(tmp_path, "finished").clock_step is None  # no duration known: judged
    stepped = evaluate(tmp_path, "finished", wall_ms=1500 - CLOCK_STEP_ALLOWANCE_MS - 1)
    assert stepped.word == "unknown" and stepped.exit_code == EXIT_UNKNOWN
    assert stepped.verdict is not None and stepped.verdict.passed == (word == "pass")
    report = stepped.report(run={"wall_ms": 1500 - CLOCK_STEP_ALLOWANCE_MS - 1})
    assert report["clock_step"]["stepped_ms"] == CLOCK_STEP_ALLOWANCE_MS + 1
    assert f"({word})" in report["clock_step"]["reason"]
    # A re-check (`echomq-chaos check`) reads the run's duration from report.json.
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert evaluate(tmp_path).word == "unknown"
    from chaos.report.summary import summary_text
    assert "clock stepped" in summary_text(report)


# --- how reports show them ----


def test_every_report_shows_an_unknown_verdict_and_its_undrained_jobs():
    from chaos.report.html.page import render_html
    from chaos.report.junit import testsuite
    from chaos.report.summary import build_report, summary_text

    events = overloaded(drained=0).events()
    verdict = check(events)
    report = build_report("hand-written", "unknown", verdict)
    text = summary_text(report)
    assert "UNKNOWN" in text and "undrained 2" in text and "b (active), c (pending)" in text
    suite = testsuite(report, None)
    assert suite.get("failures") == "1"  # never green: the drain case fails ...
    drain = [case for case in suite if case.get("name") == "drain"]
    assert drain and drain[0][0].get("type") == "Undrained"
    assert all(case.find("failure") is None for case in suite  # ... and no invariant does
               if case.tag == "testcase" and case.get("name") != "drain")
    page = render_html(report, events, verdict)
    assert "<span class='badge'>UNKNOWN</span>" in page
    assert "2 job(s) undrained" in page


def test_reports_tell_leases_stranded_by_a_cut_off_fault_from_leases_under_a_slowing_one():
    from chaos.report.summary import build_report, summary_text

    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.fault("latency", "w1", ts=100, duration_ms=2000, cuts_off=False)
    h.reap("a", attempt=1, ts=1100)
    h.claim("a", attempt=2, worker="w2", ts=1110)
    h.complete("a", attempt=2, worker="w2", ts=1200)
    verdict = check(h.events())
    assert (verdict.stranded, verdict.slowed) == (0, 1)
    assert verdict.redeliveries.needless == 1
    text = summary_text(build_report("hand-written", "pass", verdict))
    assert "0 leases stranded by a cut-off fault, 1 under a slowing fault" in text
    assert "reap-deadline ms min 100" in text


@pytest.mark.parametrize(("granted", "ok"), [(L, True), (L // 2, False)])
def test_lease_length_is_judged_against_the_given_config_without_a_run_event(granted, ok):
    h = History(lease_ms=L, run=False)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10, lease_ms=granted)
    h.complete("a", attempt=1, worker="w1", ts=100)
    verdict = check(h.events(), CheckConfig(L, R, ALLOW))
    assert_fails_only(verdict, *([] if ok else ["lease_length"]))
    assert verdict.invariants["lease_length"].figures["granted"] == 1
