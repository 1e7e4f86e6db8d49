"""The checker's BullMQ bound (chaos.queues.bullmq.bound), on hand-written histories: a run event
with ``dialect = "bullmq"`` makes recovery_bound judge each recovery on the stalled checks the
history shows (``sweep`` events): every worker's checks at most S + tolerance apart, and the job
back by S + max(L, S) + tolerance plus each gap between the checks that ran beyond S; a history
without them is judged on the worst case 2 x stalledInterval + max(lockDuration, stalledInterval),
and reap_prompt on its lag. Every other history keeps lease + reap interval."""

from __future__ import annotations

from typing import Any

import pytest
from histories import History

from chaos.check.checker import check
from chaos.history.schema import Run, Sweep
from chaos.queues.bullmq.bound import (
    bound_comparison,
    bullmq_bound_ms,
    bullmq_reap_lag_ms,
    checks_on_time_bound_ms,
)

LEASE, INTERVAL, TOLERANCE = 300, 1000, 100  # a short lock: lockDuration < stalledInterval


def _killed_holder(dialect: str, reap_after_renewal_ms: int) -> History:
    """w1 claims a, renews it at 100, is killed at 150; a is reaped ``reap_after_renewal_ms``
    after that renewal, claimed again by w2 and completed."""
    h = History(LEASE, INTERVAL, TOLERANCE, run=False)
    h.write(Run(scenario="hand-written", lease_ms=LEASE, reap_interval_ms=INTERVAL,
                tolerance_ms=TOLERANCE, dialect=dialect), 0)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=1)
    h.extend("a", attempt=1, worker="w1", ts=100)
    h.fault("kill", "w1", ts=150)
    reap_ts = 100 + reap_after_renewal_ms
    h.reap("a", attempt=1, ts=reap_ts)
    h.claim("a", attempt=2, worker="w2", ts=reap_ts + 1)
    h.complete("a", attempt=2, worker="w2", ts=reap_ts + 50)
    h.phase("end", ts=reap_ts + 60, drained=1)
    return h


def test_formulas():
    assert checks_on_time_bound_ms(1000, 500) == 1500  # L >= S: lease + one interval
    assert checks_on_time_bound_ms(300, 1000) == 2000  # L < S: two intervals
    assert bullmq_bound_ms(1000, 500) == 2000 and bullmq_bound_ms(300, 1000) == 3000
    assert bullmq_reap_lag_ms(1000, 500) == 1000 and bullmq_reap_lag_ms(300, 1000) == 2700
    assert bound_comparison(300, 1000, [1200, 2672]) == {
        "recoveries": 2, "worst_renewal_to_reap_ms": 2672,
        "lease_plus_interval_ms": 1300, "within_lease_plus_interval": False,
        "checks_on_time_ms": 2000, "within_checks_on_time": False,
        "bullmq_bound_ms": 3000, "within_bullmq_bound": True}
    assert bound_comparison(300, 1000, [])["within_bullmq_bound"] is None


def test_a_recovery_past_lease_plus_interval_passes_only_under_bullmqs_bound():
    """2672 ms after the renewal: past L + S + ε (1400) but within 2S + max(L, S) + ε (3100)."""
    bullmq = check(_killed_holder("bullmq", 2672).events())
    assert bullmq.passed, {n: r.examples for n, r in bullmq.invariants.items() if not r.ok}
    assert bullmq.invariants["recovery_bound"].figures["bound_ms"] == 3100
    figures = bullmq.invariants["recovery_bound"].figures["family_figures"]
    assert figures["within_lease_plus_interval"] is False
    echomq = check(_killed_holder("", 2672).events())
    assert not echomq.invariants["recovery_bound"].ok
    assert not echomq.invariants["reap_prompt"].ok
    assert "bullmq" not in echomq.invariants["recovery_bound"].figures


@pytest.mark.parametrize("late_ms", [3101, 3500])
def test_a_recovery_past_bullmqs_bound_fails_it(late_ms):
    verdict = check(_killed_holder("bullmq", late_ms).events())
    broken = sorted(name for name, result in verdict.invariants.items() if not result.ok)
    assert broken == ["reap_prompt", "recovery_bound"]
    (example,) = verdict.invariants["recovery_bound"].examples
    assert example["renewal_to_reap_ms"] == late_ms


def test_a_long_lock_keeps_lease_plus_interval():
    """lockDuration >= 2 x stalledInterval: BullMQ's bound is lease + two intervals."""
    h = History(2000, 500, TOLERANCE, run=False)
    h.write(Run(scenario="hand-written", lease_ms=2000, reap_interval_ms=500,
                tolerance_ms=TOLERANCE, dialect="bullmq"), 0)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=1)
    h.fault("kill", "w1", ts=10)
    h.reap("a", attempt=1, ts=3102)  # 3101 after the claim: past 2000 + 2 x 500 + 100
    verdict = check(h.events(), final=False)
    assert verdict.invariants["recovery_bound"].figures["bound_ms"] == 3100
    assert not verdict.invariants["recovery_bound"].ok


def test_the_summary_states_the_worst_case_against_every_formula():
    from chaos.report.summary import build_report, summary_text

    verdict = check(_killed_holder("bullmq", 2672).events())
    text = summary_text(build_report("hand-written", "pass", verdict))
    assert ("bound 3100 (BullMQ: 2 x stalledInterval 1000 + max(lockDuration 300, "
            "stalledInterval) + tolerance 100)") in text
    assert ("bullmq    renewal-to-reap ms max 2672 (n=1): lease + interval 1300 EXCEEDED, "
            "S + max(L, S) 2000 EXCEEDED, 2S + max(L, S) 3000 held") in text
    echomq = summary_text(build_report("hand-written", "fail",
                                       check(_killed_holder("", 2672).events())))
    assert "(lease 300 + reap 1000 + tolerance 100)" in echomq and "bullmq " not in echomq


# --- each recovery judged on the stalled checks the history shows ---------------------------
def _with_checks(lease_ms: int, interval_ms: int, renewed_ts: int, reap_ts: int,
                 checks: list[tuple[int, str, bool]], kills: dict[str, int]) -> History:
    """``holder`` claims a at 1, renews it at ``renewed_ts`` and is killed just after; the
    workers' stalled checks (ts, worker, ran) and other kills as given; a is reaped at
    ``reap_ts`` (by the check that ran then), claimed again and completed."""
    h = History(lease_ms, interval_ms, TOLERANCE, run=False)
    h.write(Run(scenario="hand-written", lease_ms=lease_ms, reap_interval_ms=interval_ms,
                tolerance_ms=TOLERANCE, dialect="bullmq"), 0)
    timeline: list[tuple[int, int, Any]] = [(0, 0, lambda ts: h.enqueue("a", ts=ts)),
                                            (1, 1, lambda ts: h.claim("a", 1, "holder", ts=ts))]
    if renewed_ts > 1:
        timeline.append((renewed_ts, 2, lambda ts: h.extend("a", 1, "holder", ts=ts)))
    timeline.append((renewed_ts + 1, 3, lambda ts: h.fault("kill", "holder", ts=ts)))
    for worker, ts in kills.items():
        timeline.append((ts, 3, lambda ts, worker=worker: h.fault("kill", worker, ts=ts)))
    for ts, worker, ran in checks:
        timeline.append((ts, 4, lambda ts, worker=worker, ran=ran: h.write(Sweep(worker, ran),
                                                                           ts)))
    timeline.append((reap_ts, 5, lambda ts: h.reap("a", 1, ts=ts)))
    timeline.append((reap_ts + 1, 6, lambda ts: h.claim("a", 2, "other", ts=ts)))
    timeline.append((reap_ts + 50, 7, lambda ts: h.complete("a", 2, "other", ts=ts)))
    timeline.append((reap_ts + 60, 8, lambda ts: h.phase("end", ts=ts, drained=1)))
    for ts, _, write in sorted(timeline, key=lambda entry: entry[:2]):
        write(ts)
    return h


def _every(start: int, period: int, until: int, worker: str, ran: bool = True,
           ) -> list[tuple[int, str, bool]]:
    return [(ts, worker, ran) for ts in range(start, until, period)]


def test_a_recovery_on_checks_that_ran_on_time_is_judged_on_s_plus_max_l_s():
    """L 1000, S 500: w2's checks every 500 run, w3's 30 ms later are turned away. Renewed at
    100, marked at 500, its lock gone at 1100, it is back at 1500: 1400 after the renewal, within
    S + max(L, S) + ε = 1600. Back at 2000 instead (the check at 1500 left it), it fails, though
    within the worst case 2S + max(L, S) + ε = 2100 the checker once judged every recovery on."""
    checks = _every(0, 500, 2600, "w2") + _every(30, 500, 2600, "w3", ran=False)
    on_time = check(_with_checks(1000, 500, 100, 1500, checks, {}).events())
    assert on_time.passed, {n: r.examples for n, r in on_time.invariants.items() if not r.ok}
    figures = on_time.invariants["recovery_bound"].figures
    assert figures["bound_ms"] == 1600 and figures["family_figures"]["judged_per_recovery"]
    assert figures["family_figures"]["stalled_checks"] == 6
    assert figures["family_figures"]["stalled_checks_turned_away"] == 6
    late = check(_with_checks(1000, 500, 100, 2000, checks, {}).events())
    assert late.failed_invariants() == ["recovery_bound"]
    (example,) = late.invariants["recovery_bound"].examples
    assert example["renewal_to_reap_ms"] == 1900 and example["bound_ms"] == 1600


def test_a_stalled_checker_at_half_rate_fails_whatever_its_recoveries_took():
    """Every worker checks every 2S while the run says S: the job is back within S + max(L, S)
    plus its slow gaps, and within the worst case, but the checks it waited on came late."""
    checks = _every(0, 1000, 3100, "w2") + _every(30, 1000, 3100, "w3", ran=False)
    events = _with_checks(1000, 500, 100, 2000, checks, {}).events()
    verdict = check(events)
    assert verdict.failed_invariants() == ["recovery_bound"]
    (example,) = verdict.invariants["recovery_bound"].examples
    assert example["reason"] == "a stalled check it waited on came late"
    assert {late["checker"] for late in example["late_checks"]} == {"w2", "w3"}
    assert all(late["gap_ms"] == 1000 and late["allowed_ms"] == 600
               for late in example["late_checks"])
    # Judged without the sweep events, as before they were recorded: the worst case holds it.
    unaware = check([event for event in events if event.type != "sweep"])
    assert unaware.passed and unaware.invariants["recovery_bound"].figures["bound_ms"] == 2100


def test_behind_a_checker_that_died_a_gap_grows_to_2s_and_the_bound_with_it():
    """L 300, S 1000. w1 checks at 0 and 1000 and is killed at 1100; w2's attempts at 999 and
    1999 were turned away by w1's key, its next at 2999 runs. The job (renewed at 100, marked at
    1000) is back at 2999, 2899 after its renewal: past S + max(L, S) + ε = 2100, within it plus
    the gap's 999 beyond S. Back only at 3999 (the check at 2999 left it), it fails (and past
    the worst case, reap_prompt with it)."""
    checks = [(0, "w1", True), (1000, "w1", True), (999, "w2", False), (1999, "w2", False),
              (2999, "w2", True), (3999, "w2", True)]
    verdict = check(_with_checks(300, 1000, 100, 2999, checks, {"w1": 1100}).events())
    assert verdict.passed, verdict.invariants["recovery_bound"]
    figures = verdict.invariants["recovery_bound"].figures["family_figures"]
    assert figures["recoveries_after_a_slow_gap"] == 1 and figures["max_check_gap_ms"] == 1999
    missed = check(_with_checks(300, 1000, 100, 3999, checks, {"w1": 1100}).events())
    assert missed.failed_invariants() == ["recovery_bound", "reap_prompt"]
    assert missed.invariants["recovery_bound"].examples[0]["bound_ms"] == 2100 + 999


def test_a_checker_turned_away_by_its_own_key_makes_a_2s_gap_without_any_fault():
    """L 300, S 1000, no fault but the holder's kill: w1's check at 1010 holds the key until
    2010, w1's own next attempt comes 1 ms early (2009) and w2's at 2000: both turned away; w2's
    at 3000 runs. Every worker checked every S, yet the checks that ran were 1990 apart: the job
    (renewed at 1110, marked at 3000) is back at 4000, 2890 after its renewal: past S + max(L,
    S) + ε = 2100, within it plus the gap's 990 beyond S (real BullMQ does it: docs/bullmq.md)."""
    checks = ([(10, "w1", True), (1010, "w1", True)] + _every(2009, 1000, 4100, "w1", ran=False)
              + _every(0, 1000, 3000, "w2", ran=False) + _every(3000, 1000, 4100, "w2"))
    verdict = check(_with_checks(300, 1000, 1110, 4000, checks, {}).events())
    assert verdict.passed, {n: r.examples for n, r in verdict.invariants.items() if not r.ok}
    figures = verdict.invariants["recovery_bound"].figures["family_figures"]
    assert figures["max_check_gap_ms"] == 1990 and figures["max_worker_check_gap_ms"] == 1000
    assert figures["recoveries_with_late_checks"] == 0


def test_the_summary_says_each_recovery_was_judged_on_the_checks_that_ran():
    from chaos.report.summary import build_report, summary_text

    checks = _every(0, 500, 2600, "w2") + _every(30, 500, 2600, "w3", ran=False)
    verdict = check(_with_checks(1000, 500, 100, 1500, checks, {}).events())
    text = summary_text(build_report("hand-written", "pass", verdict))
    assert ("bound 1600 (BullMQ, per recovery on the stalled checks that ran: stalledInterval "
            "500 + max(lockDuration 1000, stalledInterval) + tolerance 100, + each gap between "
            "them beyond stalledInterval)") in text
    assert ("checks    stalled checks ran 6, turned away 6; longest gap 500 ms between checks "
            "that ran, 500 ms between one worker's (limit 600); recoveries behind a gap over S "
            "0, on late checks 0") in text
