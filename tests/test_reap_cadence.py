"""reap_cadence on hand-written histories (docs/design.md §4): every reaper the queue promises a
cadence (the run event's ``sweepers``) sweeps at least every reap_interval_ms + the allowance,
judged on its ``sweep`` events directly, whether anything lapsed or not; exempt while a fault
holds it or the store is down; blind where a sweep of an unknown sweeper may fill a gap; not
judged where the queue promises no cadence.

The broken variant: a reaper that sweeps every third interval (``sparse-reaper``), which no
lapse need show (every test here has no lapse at all unless it says so)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from histories import History
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.check.checker import check
from chaos.family import family_for
from chaos.history.schema import Fault, Run
from chaos.names import DEFAULT_SWEEP_ALLOWANCE_MS
from chaos.protocol.client import QueueKeys
from chaos.scenario.loading import load_scenario

R, L = 250, 1000
LIMIT = R + DEFAULT_SWEEP_ALLOWANCE_MS  # 450


def run_with(sweeps: dict[str, list[int]], end: int, sweepers: tuple[str, ...] = ("reaper",),
             *, reap_interval_ms: int = R, dialect: str = "", tolerance_ms: int = 100,
             faults: Sequence[tuple[str, str, int, int | None]] = (),
             store_down: tuple[int, int] | None = None, warmup_at: int = 0,
             blind_at: int | None = None,
             turned_away: dict[str, list[int]] | None = None, claimed: bool = True) -> History:
    """A run to ``end``: its phases (warmup at ``warmup_at``, drain at ``end`` - 400, end at
    ``end``), one job enqueued, claimed, completed early (nothing lapses), the given sweeps per
    sweeper ("": one the history names no sweeper of), faults (kind, worker, at, healed at or
    None), a store outage (killed at, back at) recorded as a valkey_restart, and from
    ``blind_at`` a feed that lost lines (a blind spot on every job); ``turned_away``: sweeps
    per sweeper that a shared sweep lock turned away (BullMQ's ``ran=0``); ``claimed`` False:
    the job is enqueued and never seen claimed (the history sees no worker at all)."""
    h = History(L, reap_interval_ms, tolerance_ms, run=False)
    h.write(Run(scenario="hand-written", lease_ms=L, reap_interval_ms=reap_interval_ms,
                tolerance_ms=tolerance_ms, dialect=dialect, sweepers=sweepers), 0)
    timeline: list[tuple[int, int, object]] = [
        (warmup_at, 0, lambda ts: h.phase("warmup", ts=ts)),
        (end - 400, 0, lambda ts: h.phase("drain", ts=ts)),
        (end, 9, lambda ts: h.phase("end", ts=ts, drained=1, aborted=0))]
    if blind_at is not None:
        timeline.append((blind_at, 0, lambda ts: h.blind(None, ts=ts,
                                                         why="monitor connection lost")))
    timeline.append((1, 1, lambda ts: h.enqueue("a", ts=ts)))
    if claimed:
        timeline += [(2, 1, lambda ts: h.claim("a", 1, "w1", ts=ts)),
                     (50, 1, lambda ts: h.complete("a", 1, "w1", ts=ts))]
    for sweeper, times in sweeps.items():
        timeline += [(ts, 2, lambda ts, sweeper=sweeper: h.sweep(sweeper, ts=ts))
                     for ts in times]
    for sweeper, times in (turned_away or {}).items():
        timeline += [(ts, 2, lambda ts, sweeper=sweeper: h.sweep(sweeper, ts=ts, ran=False))
                     for ts in times]
    for kind, worker, at, healed in faults:
        ids: dict[str, str] = {}
        timeline.append((at, 1, lambda ts, kind=kind, worker=worker, ids=ids:
                         ids.setdefault("id", h.fault(kind, worker, ts=ts))))
        if healed is not None:
            timeline.append((healed, 3, lambda ts, ids=ids: h.heal(ids["id"], ts=ts)))
    if store_down is not None:
        killed, back = store_down
        timeline.append((back, 1, lambda ts: h.write(
            Fault("s1", "valkey_restart", "valkey", killed_ts=killed, down_ms=back - killed), ts)))
    for ts, _, write in sorted(timeline, key=lambda entry: entry[:2]):
        write(ts)  # type: ignore[operator]
    return h


def every(period: int, start: int, until: int) -> list[int]:
    return list(range(start, until, period))


def cadence_of(h: History) -> tuple[list[str], dict]:
    verdict = check(h.events())
    return verdict.failed_invariants(), verdict.invariants["reap_cadence"].as_dict()


def test_a_reaper_sweeping_every_interval_passes_and_its_worst_gap_is_reported():
    failed, cadence = cadence_of(run_with({"reaper": every(R, 0, 3000)}, 3000))
    assert failed == [] and cadence["status"] == "ok"
    assert cadence["limit_ms"] == LIMIT and cadence["allowance_ms"] == DEFAULT_SWEEP_ALLOWANCE_MS
    assert cadence["per_sweeper"] == {"reaper": {"sweeps": 12, "max_gap_ms": R}}
    assert cadence["max_gap_ms"] == R and cadence["sweepers"] == ["reaper"]


def test_a_reaper_sweeping_every_third_interval_fails_with_nothing_lapsed():
    """sparse-reaper: every gap 750 ms. No lease lapsed, so no other invariant has anything
    to say; each late gap is an offence from the moment the limit passed."""
    sweeps = every(3 * R, 0, 3000)  # 0, 750, 1500, 2250
    failed, cadence = cadence_of(run_with({"reaper": sweeps}, 3000))
    assert failed == ["reap_cadence"]
    # three gaps between sweeps, and the last sweep (2250) to the drain's start (2600) is
    # within the limit: no tail offence
    assert cadence["violations"] == 3
    assert cadence["examples"][0] == {"reaper": "reaper", "sweep_ts": 0, "next_sweep_ts": 750,
                                      "gap_ms": 750, "allowed_ms": LIMIT,
                                      "reason": "swept late"}
    assert cadence["first_violation_ts"] == LIMIT
    assert cadence["per_sweeper"]["reaper"]["max_gap_ms"] == 750


def test_a_gap_exactly_at_the_limit_passes_and_one_ms_more_fails():
    on_limit = cadence_of(run_with({"reaper": [0, LIMIT, 2 * LIMIT]}, 2 * LIMIT + 400))
    assert on_limit[0] == []
    over = cadence_of(run_with({"reaper": [0, LIMIT + 1, 2 * LIMIT + 2]}, 2 * LIMIT + 402))
    assert over[0] == ["reap_cadence"] and over[1]["violations"] == 2


def test_a_gap_while_a_fault_held_the_reaper_is_exempt():
    """The reaper frozen from 1000 to 1900 (SIGSTOP): its gap across it is no broken promise,
    counted apart. The same gap with the fault on a worker instead is an offence."""
    sweeps = every(R, 0, 1000) + every(R, 2000, 3500)
    paused = cadence_of(run_with({"reaper": sweeps}, 3500,
                                 faults=[("pause", "reaper", 1000, 1900)]))
    assert paused[0] == [] and paused[1]["exempt_gaps"] == 1
    assert paused[1]["max_gap_ms"] == R  # the figure leaves the held gap out too
    elsewhere = cadence_of(run_with({"reaper": sweeps}, 3500,
                                    faults=[("pause", "w1", 1000, 1900)]))
    assert elsewhere[0] == ["reap_cadence"]
    assert elsewhere[1]["examples"][0]["gap_ms"] == 2000 - 750


def test_a_killed_reaper_is_not_judged_after_its_kill():
    sweeps = every(R, 0, 1000)
    failed, cadence = cadence_of(run_with({"reaper": sweeps}, 3500,
                                          faults=[("kill", "reaper", 1100, None)]))
    assert failed == [] and cadence["exempt_gaps"] == 1  # the tail, to the drain's start


def test_a_store_outage_exempts_the_gap_across_it():
    sweeps = every(R, 0, 1000) + every(R, 2250, 3500)
    down = cadence_of(run_with({"reaper": sweeps}, 3500, store_down=(1000, 2000)))
    assert down[0] == [] and down[1]["exempt_gaps"] == 1
    # a gap after the store was back is the reaper's own again
    late = every(R, 0, 1000) + every(R, 2250, 2600) + every(R, 3100, 4000)
    after = cadence_of(run_with({"reaper": late}, 4000, store_down=(1000, 2000)))
    assert after[0] == ["reap_cadence"] and after[1]["violations"] == 1
    assert after[1]["examples"][0]["sweep_ts"] == 2500


def test_after_a_failover_the_first_sweep_may_wait_out_a_wait_the_new_replica_cannot_ack():
    """Seen in failover.toml (wait_replicas = 1): the store back at 2000 (a replica online), the
    reaper's first sweep at 2083, its WAIT 1 unanswered for its full second, the next sweep at
    3082. The outage holds the reaper until its first sweep after the store was back (and at
    least one interval + the allowance after): that gap is the store's. A second slow gap is
    the reaper's own again."""
    sweeps = every(R, 0, 1000) + [2083] + every(R, 3082, 4500)
    failed, cadence = cadence_of(run_with({"reaper": sweeps}, 4500, store_down=(1000, 2000)))
    assert failed == [] and cadence["exempt_gaps"] == 2
    twice = every(R, 0, 1000) + [2083, 3082] + every(R, 4081, 5500)
    failed, cadence = cadence_of(run_with({"reaper": twice}, 5500, store_down=(1000, 2000)))
    assert failed == ["reap_cadence"]
    assert [(e["sweep_ts"], e["next_sweep_ts"]) for e in cadence["examples"]] == [(3082, 4081)]


def test_the_run_start_and_wind_down_are_judged_up_to_the_drain():
    """A reaper whose first sweep comes 600 ms into the run, one that stopped sweeping long
    before the drain began: both fail. Sweeping on through the drain until the runner stops it
    (after the workers) is the sound wind-down: nothing after the drain's start is a gap to
    judge but those between sweeps."""
    late_start = cadence_of(run_with({"reaper": every(R, 600, 3000)}, 3000))
    assert late_start[0] == ["reap_cadence"]
    assert late_start[1]["examples"][0]["reason"] == "no sweep yet when the run began"
    gone_quiet = cadence_of(run_with({"reaper": every(R, 0, 1500)}, 3000))
    assert gone_quiet[0] == ["reap_cadence"]
    (example,) = gone_quiet[1]["examples"]
    assert example["reason"] == "no sweep since, while the run went on"
    assert (example["sweep_ts"], example["next_sweep_ts"]) == (1250, 2600)
    # from before the run's first phase (the reapers start first) into the drain: fine
    sound = cadence_of(run_with({"reaper": every(R, 0, 3700)}, 3500, warmup_at=400))
    assert sound[0] == []


def test_a_promised_reaper_with_no_sweep_at_all_fails_and_a_broken_feed_blinds_it():
    """The sources that promise sweeps record each with the call that made it: a promised
    reaper with none swept none. Unless the history says lines were lost for every job (a
    broken feed): then the gap may be the feed's, and the run is unknown, not failed."""
    failed, cadence = cadence_of(run_with({}, 3000))
    assert failed == ["reap_cadence"]
    assert cadence["examples"][0]["reason"] == "no sweep at all while the run went on"
    assert cadence["no_reaper"] is True  # said as such: this deployment has no reaper
    verdict = check(run_with({}, 3000, blind_at=0).events())
    result = verdict.invariants["reap_cadence"]
    assert result.status == "blind" and result.blinded == 1 and verdict.word == "unknown"
    assert "no_reaper" not in result.figures  # the feed may have lost its sweeps
    # one of two promised reapers sweeping: a late reaper, not a deployment without one
    failed, cadence = cadence_of(run_with({"reaper": every(R, 0, 3000)}, 3000,
                                          ("reaper", "other")))
    assert failed == ["reap_cadence"] and "no_reaper" not in cadence


def test_a_history_that_never_saw_a_claim_blinds_a_reaper_it_never_saw_sweep():
    """Jobs enqueued and none ever claimed: the history may not see the workers at all (their
    key layout or dialect is not the scenario's), so a promised reaper with no sweep in it is
    no evidence either way: blind, never failed. A reaper seen sweeping, late, still fails."""
    verdict = check(run_with({}, 3000, claimed=False).events())
    result = verdict.invariants["reap_cadence"]
    assert result.status == "blind" and result.violations == 0 and result.blinded == 1
    failed, cadence = cadence_of(run_with({"reaper": every(3 * R, 0, 3000)}, 3000, claimed=False))
    assert "reap_cadence" in failed and cadence["violations"] > 0


def test_a_sweep_whose_sweeper_is_unknown_blinds_the_gap_it_falls_in():
    """An unattributed sweep (a connection the recorder could not resolve) inside a long gap
    may have been the reaper's: the gap is blinded, the verdict unknown, never failed."""
    h = run_with({"reaper": [0, 250, 1000, 1250, 1500], "": [600]}, 1900)
    verdict = check(h.events())
    result = verdict.invariants["reap_cadence"]
    assert result.status == "blind" and result.violations == 0 and result.blinded == 1
    assert result.figures["unattributed_sweeps"] == 1 and verdict.word == "unknown"
    # one outside the late gap blinds nothing
    clear = check(run_with({"reaper": [0, 250, 1000, 1250, 1500], "": [100]}, 1900).events())
    assert clear.invariants["reap_cadence"].status == "fail"


def test_each_promised_reaper_is_judged_on_its_own_sweeps():
    """Two reapers: one keeps its cadence, the other sweeps every third interval. The sound
    one's sweeps do not cover the other's gaps."""
    h = run_with({"reaper-1": every(R, 0, 3000), "reaper-2": every(3 * R, 100, 3000)}, 3000,
                 sweepers=("reaper-1", "reaper-2"))
    failed, cadence = cadence_of(h)
    assert failed == ["reap_cadence"]
    assert {example["reaper"] for example in cadence["examples"]} == {"reaper-2"}
    assert cadence["per_sweeper"] == {"reaper-1": {"sweeps": 12, "max_gap_ms": R},
                                      "reaper-2": {"sweeps": 4, "max_gap_ms": 750}}


def test_without_promised_sweepers_the_gaps_are_reported_not_judged():
    """A queue of the user's (the echomq family with its own reaper: the real EchoMQ consumer
    reaps once per loop) or a history recorded before sweeps were: never failed on them."""
    failed, cadence = cadence_of(run_with({"w1-reaper": every(3 * R, 0, 3000)}, 3000,
                                          sweepers=()))
    assert failed == [] and cadence["judged"] is False and "not judged" in cadence["not_judged"]
    assert cadence["per_sweeper"] == {"w1-reaper": {"sweeps": 4, "max_gap_ms": 750}}
    older = cadence_of(run_with({}, 3000, sweepers=()))
    assert older[0] == [] and older[1]["judged"] is False and older[1]["sweeps"] == 0


def test_the_summary_junit_and_page_show_the_cadence():
    from chaos.report.junit import junit_document
    from chaos.report.summary import build_report, summary_text

    verdict = check(run_with({"reaper": every(3 * R, 0, 3000)}, 3000).events())
    report = build_report("hand-written", verdict.word, verdict)
    text = summary_text(report)
    assert ("  cadence   sweep gap ms max 750 (reaper 750; 4 sweeps)  limit 450 (reap 250 + "
            "allowance 200)") in text
    assert "[FAIL] reap_cadence  3 violation(s)" in text
    assert 'name="reap_cadence"' in junit_document([(report, None)])
    unjudged = check(run_with({"w1": every(R, 0, 3000)}, 3000, sweepers=()).events())
    text = summary_text(build_report("hand-written", unjudged.word, unjudged))
    assert "not judged (the queue promises no sweep cadence)" in text
    assert "[skip] reap_cadence  not judged: the queue promises no sweep cadence" in text


# --- BullMQ: one judgement of its workers' stalled checks ---------------------------------------
def test_bullmq_checks_at_half_rate_fail_reap_cadence_with_its_own_limit():
    """BullMQ's workers each sweep on a timer of their own (the bullmq family promises every
    worker as a sweeper), judged on stalledInterval + tolerance as recovery_bound judges the
    checks around a recovery: every 1000 ms where S = 500 fails, every 500 ms passes."""
    half = run_with({"w1": every(1000, 0, 4000), "w2": every(1000, 30, 4000)}, 4000,
                    sweepers=("w1", "w2"), reap_interval_ms=500, dialect="bullmq",
                    tolerance_ms=250)
    failed, cadence = cadence_of(half)
    assert failed == ["reap_cadence"]
    assert cadence["limit_ms"] == 750 and cadence["allowance_ms"] == 250
    on_time = run_with({"w1": every(500, 0, 4000), "w2": every(500, 30, 4000)}, 4000,
                       sweepers=("w1", "w2"), reap_interval_ms=500, dialect="bullmq",
                       tolerance_ms=250)
    assert cadence_of(on_time)[0] == []


# --- property: any sound cadence passes, any skipped tick past the limit fails ------------------
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def grid_sweeps(draw: st.DrawFn) -> tuple[int, list[int]]:
    """A fixed-rate reaper on a loaded machine: tick k at k x R, each sweep late by up to the
    allowance (the scheduler waking it late), some ticks sweeping twice (a full batch)."""
    interval = draw(st.sampled_from([100, 250, 1000]))
    ticks = draw(st.integers(3, 60))
    sweeps = []
    for tick in range(ticks):
        at = tick * interval + draw(st.integers(0, DEFAULT_SWEEP_ALLOWANCE_MS), label="late by")
        sweeps.append(at)
        if draw(st.booleans()):
            sweeps.append(at + draw(st.integers(0, 5), label="again"))
    return interval, sweeps


@PROPERTY
@given(grid_sweeps())
def test_a_fixed_rate_reaper_late_by_up_to_the_allowance_passes(drawn: tuple[int, list[int]]):
    interval, sweeps = drawn
    end = max(sweeps) + 1
    failed, cadence = cadence_of(run_with({"reaper": sweeps}, end + 400,
                                          reap_interval_ms=interval))
    assert failed == [], cadence["examples"]
    assert cadence["max_gap_ms"] <= interval + DEFAULT_SWEEP_ALLOWANCE_MS


@PROPERTY
@given(grid_sweeps(), st.data())
def test_a_reaper_skipping_ticks_fails_on_exactly_the_late_gaps(
        drawn: tuple[int, list[int]], data: st.DataObject):
    """Ticks taken out at random: the offences are exactly the gaps the oracle finds longer
    than the limit (between sweeps, and from the last one to the drain's start)."""
    interval, sweeps = drawn
    kept = sorted(data.draw(st.lists(st.sampled_from(sweeps), min_size=1, unique=True),
                            label="kept"))
    end = max(sweeps) + 401
    limit = interval + DEFAULT_SWEEP_ALLOWANCE_MS
    late = [(a, b) for a, b in zip(kept, kept[1:], strict=False) if b - a > limit]
    if end - 400 - kept[-1] > limit:
        late.append((kept[-1], end - 400))
    if kept[0] > limit:
        late.insert(0, (0, kept[0]))
    failed, cadence = cadence_of(run_with({"reaper": kept}, end, reap_interval_ms=interval))
    assert cadence["violations"] == len(late)
    assert failed == (["reap_cadence"] if late else [])
    assert [(example["sweep_ts"], example["next_sweep_ts"])
            for example in cadence["examples"]] == late[:10]


@pytest.mark.parametrize("held_by", ["pause", "partition"])
def test_the_same_skipped_ticks_under_a_fault_on_the_reaper_pass(held_by: str):
    sweeps = every(R, 0, 1000) + every(R, 2000, 3000)
    failed, cadence = cadence_of(run_with({"reaper": sweeps}, 3000,
                                          faults=[(held_by, "reaper", 900, 1800)]))
    assert failed == [] and cadence["exempt_gaps"] == 1


# --- who promises a cadence: the queue family -------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("path", "overrides", "sweepers"), [
    ("scenarios/kill-worker.toml", [], ("reaper",)),
    ("scenarios/mutants/nonatomic-reap.toml", [], ("reaper-1", "reaper-2")),
    ("scenarios/mutants/no-reaper.toml", [], ()),
    # the user's own reaper (the Node example, the real EchoMQ contract): the contract's promise,
    # a reap every CHAOS_REAP_INTERVAL_MS (docs/sut.md)
    ("scenarios/node/kill-worker.toml", [], ("reaper",)),
    ("scenarios/echomq/kill-worker.toml", [], ("reaper",)),
    # workers that reap themselves (reaper = "none"): each of them promises it
    ("scenarios/echomq/kill-worker.toml", ['sut.reaper="none"'],
     ("worker-1", "worker-2", "worker-3")),
    # the built-in reaper beside the user's workers: the reference grid again
    ("scenarios/node/kill-worker.toml", ['sut.reaper="builtin"'], ("reaper",)),
    # BullMQ: every worker runs its own stalled-check timer
    ("scenarios/bullmq/kill-worker.toml", [], ("worker-1", "worker-2", "worker-3")),
], ids=["reference", "two-reapers", "no-reaper", "node", "echomq", "echomq-none", "node-builtin",
        "bullmq"])
def test_each_family_says_which_processes_promise_a_cadence(path: str, overrides: list[str],
                                                            sweepers: tuple[str, ...]):
    scenario = load_scenario(ROOT / path, overrides)
    family = family_for(scenario, QueueKeys(scenario.valkey.prefix, scenario.valkey.queue))
    assert family.sweepers == sweepers


def test_bullmqs_standalone_stalled_checkers_promise_the_same_cadence():
    """Where certify runs BullMQ with its standalone stalled checkers beside the frozen workers
    (docs/certify.md), each runs the same stalled-check timer as a worker, and is judged so."""
    from chaos.tools.certify import Target, plan_battery

    planned = {run.entry.name: run.scenario for run in plan_battery(
        Target.from_file(ROOT / "scenarios" / "bullmq" / "kill-worker.toml", None), 1,
        only=["all-workers-frozen"])}
    scenario = planned["all-workers-frozen"]
    assert scenario is not None
    family = family_for(scenario, QueueKeys(scenario.valkey.prefix, scenario.valkey.queue))
    assert family.sweepers == ("worker-1", "worker-2", "reaper-1", "reaper-2")


# --- a shared sweep lock (BullMQ's stalled-check key): the checks that ran ---------------------

def locked_checks(workers: int, interval: int, lock_ms: int, until: int, offsets: list[int],
                  late: list[int]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """BullMQ's stalled checks as the server sees them: worker k's timer fires at its offset,
    then every interval + its lateness (drawn in turn from ``late``); the shared key, set for
    ``lock_ms`` by each check that runs, turns away every attempt while it exists (the server
    expires a key once its time is past: an attempt at exactly its end is turned away).
    Returns (ran, turned away) per worker."""
    attempts = []
    for k in range(workers):
        ts, n = offsets[k], 0
        while ts < until:
            attempts.append((ts, f"w{k + 1}"))
            ts += interval + late[(k + n) % len(late)]
            n += 1
    ran: dict[str, list[int]] = {f"w{k + 1}": [] for k in range(workers)}
    away: dict[str, list[int]] = {f"w{k + 1}": [] for k in range(workers)}
    lock_until = -1
    for ts, worker in sorted(attempts):
        if ts > lock_until:
            ran[worker].append(ts)
            lock_until = ts + lock_ms
        else:
            away[worker].append(ts)
    return ran, away


def bullmq_run(ran: dict[str, list[int]], away: dict[str, list[int]], end: int) -> History:
    return run_with(ran, end, sweepers=tuple(sorted(ran)), reap_interval_ms=500,
                    dialect="bullmq", tolerance_ms=250, turned_away=away)


@PROPERTY
@given(st.integers(1, 8), st.data())
def test_stock_bullmqs_lock_never_turns_a_check_away_past_its_interval(
        workers: int, data: st.DataObject):
    """Any number of workers, timers in or out of phase, each late by up to the tolerance:
    the key set for stalledInterval turns checks away only inside it, so reap_cadence passes."""
    offsets = data.draw(st.lists(st.integers(0, 499), min_size=workers, max_size=workers),
                        label="offsets")
    late = data.draw(st.lists(st.integers(0, 250), min_size=1, max_size=8), label="late by")
    ran, away = locked_checks(workers, 500, 500, 6000, offsets, late)
    failed, cadence = cadence_of(bullmq_run(ran, away, 6400))
    assert failed == [], cadence["examples"]


@pytest.mark.parametrize("workers, offsets, late", [
    (3, [0, 167, 333], [1]),    # out of phase, on time: turned away all through the second S
    (1, [0], [3]),              # one worker, 3 ms late a tick: turned away 503 ms after a run
    (8, [0] * 8, [0, 1, 2])])   # in phase, on time: the attempt at 2S is turned away
def test_checks_at_half_rate_with_every_timer_on_time_fail_reap_cadence(
        workers: int, offsets: list[int], late: list[int]):
    """The broken BullMQ of scenarios/bullmq/broken/half-rate-checks.toml: every worker's timer
    fires each stalledInterval (each one's own cadence is on time), but the key is set for
    twice that, so the checks that run come at half the rate. Only the lock's rule sees it."""
    ran, away = locked_checks(workers, 500, 1000, 6000, offsets, late)
    failed, cadence = cadence_of(bullmq_run(ran, away, 6400))
    assert failed == ["reap_cadence"]
    reasons = {example["reason"] for example in cadence["examples"]}
    assert all(reason.startswith("turned away by the sweep lock") for reason in reasons)
    # each worker's own timer kept its cadence: the gaps between one worker's attempts
    assert cadence["max_gap_ms"] <= 500 + max(late) + 1


def test_a_turned_away_check_across_a_store_restart_is_exempt_and_a_feed_gap_blinds_it():
    ran, away = locked_checks(3, 500, 1000, 6000, [0, 167, 333], [1])
    restarted = run_with(ran, 6400, sweepers=("w1", "w2", "w3"), reap_interval_ms=500,
                         dialect="bullmq", tolerance_ms=250, turned_away=away,
                         store_down=(400, 5900))
    assert cadence_of(restarted)[0] == []
    blinded = run_with(ran, 6400, sweepers=("w1", "w2", "w3"), reap_interval_ms=500,
                       dialect="bullmq", tolerance_ms=250, turned_away=away, blind_at=100)
    failed, _ = cadence_of(blinded)
    assert "reap_cadence" not in failed
    assert check(blinded.events()).invariants["reap_cadence"].blind


@pytest.mark.parametrize(("path", "line"), [
    ("scenarios/kill-worker.toml",
     "cadence   a sweep <= 450 ms after the previous one (reap_interval_ms 250 + "
     "sweep_allowance_ms 200), by each of reaper"),
    ("scenarios/bullmq/kill-worker.toml",
     "cadence   a sweep <= 750 ms after the previous one (reap_interval_ms 500 + "
     "tolerance_ms 250), by each of worker-1, worker-2, worker-3"),
    ("scenarios/mutants/no-reaper.toml", "cadence   not judged: no process here promises"),
])
def test_validate_and_the_dry_run_print_the_cadence_limit_beside_the_bound(path: str, line: str):
    """What `validate` and `run --dry-run` print (chaos.run.plan): the limit reap_cadence will
    judge, right after the recovery bound, from the same family and settings the run uses."""
    from chaos.run.plan import describe_plan

    lines = describe_plan(load_scenario(ROOT / path)).splitlines()
    index = next(i for i, text in enumerate(lines) if text.startswith("  bound"))
    assert lines[index + 1].strip().startswith(line)


def test_a_check_turned_away_in_the_same_ms_as_the_one_that_ran_meets_that_one():
    """The feed's order decides within a ms (measured: 8 workers, worker-3's check ran at t and
    worker-2's was turned away at t): sorting by name would have met worker-2's against the
    check before, 505 ms earlier, and failed a sound BullMQ."""
    ran = {"w3": [0, 500, 1000, 1505, 2005, 2505, 3005], "w2": []}
    away = {"w2": [2, 501, 1003, 1505, 2006, 2505, 3006], "w3": []}
    failed, cadence = cadence_of(bullmq_run(ran, away, 3400))
    assert "reap_cadence" not in failed, cadence["examples"]
    # and one more turned away 504 ms after the last that ran: caught
    late = {"w2": [2, 501, 1003, 1506, 2006, 2505, 3006, 3509], "w3": []}
    failed, cadence = cadence_of(bullmq_run(ran, late, 3600))
    assert failed == ["reap_cadence"]
    assert [example["sweep_ts"] for example in cadence["examples"]] == [3509]


def test_a_sweepers_start_up_before_the_run_began_is_not_judged_its_silence_after_is():
    """Celery's mingle: a worker sweeps once, then waits a second for its peers before its loop
    runs and sweeps every interval. The run begins (its first phase) once every process is at
    work (chaos.run.startup), so that second is start-up, not cadence: the same second after
    the run began is a broken promise, and so is a worker that stops sweeping once at work."""
    start_up = [100, 1200] + every(R, 1400, 6000)  # a 1,100 ms gap, then every interval
    failed, cadence = cadence_of(run_with({"reaper": start_up}, 6000, warmup_at=1300))
    assert failed == [] and cadence["per_sweeper"]["reaper"]["max_gap_ms"] == R
    late = cadence_of(run_with({"reaper": start_up}, 6000, warmup_at=50))
    assert late[0] == ["reap_cadence"] and late[1]["examples"][0]["gap_ms"] == 1100
    stopped = every(R, 1400, 3000)  # at work from 1400, silent from 2900 on
    silent = cadence_of(run_with({"reaper": [100, 1200, *stopped]}, 6000, warmup_at=1300))
    assert silent[0] == ["reap_cadence"]
    assert silent[1]["examples"][0]["reason"] == "no sweep since, while the run went on"
