"""Sweepers that reap once a loop (``[sut] reap_rhythm = "loop"``, EchoMQ.Consumer's rhythm:
sweep, drain what it can claim, park on the wake list at most the beat, sweep again), judged on
hand-written histories (``chaos.check.cadence.ConsumerLoops``):

- reap_cadence holds each park to the loop's next sweep within the interval + allowance; the
  drains between are measured, not judged (a loop busy with work sweeps when its work is done);
- each stranded lease must come back with the first sweep after its deadline (recovery_bound,
  at the tolerance; reap_prompt, at the allowance).

The broken variants: a loop that parks three beats (caught by reap_cadence alone, nothing
lapsing), and a sweep that passes a lapsed lease by (caught by recovery_bound and reap_prompt).
The sound loops pass over many random drains, parks and kill times; the same sound history
judged as if its sweepers kept a grid fails reap_cadence, which is why the rhythm is declared."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from histories import History, resequence, to_events
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.check.checker import check
from chaos.history.schema import Park, Run, Sweep

L, R, TOLERANCE = 1000, 250, 250


@dataclass
class Loop:
    """One consumer loop of a process: its connection and, per turn, (drain ms, park ms)."""

    worker: str
    client: str
    turns: list[tuple[int, int]]
    start: int = 0
    sweeps: list[int] = field(default_factory=list)
    parks: list[int] = field(default_factory=list)

    def lay_out(self, until: int, killed_at: int | None = None) -> None:
        ts, index = self.start, 0
        while ts < until and (killed_at is None or ts < killed_at):
            self.sweeps.append(ts)
            drain, park = self.turns[index % len(self.turns)]
            index += 1
            if killed_at is not None and ts + drain >= killed_at:
                return
            self.parks.append(ts + drain)
            ts += drain + park


def loop_history(loops: list[Loop], end: int, rhythm: str = "loop",
                 kill: tuple[str, int] | None = None, held_job_deadline: int | None = None,
                 skip_first_reap: bool = False) -> History:
    """A run to ``end`` over ``loops``; with ``kill`` (worker, at), that worker holds job "a"
    (claimed at ``kill_at - 200``, no renewal: EchoMQ.Consumer renews nothing) and dies; the
    job is reaped by the first sweep of another loop after its deadline, or with
    ``skip_first_reap`` by the first one more than the tolerance after that (the sweeps
    between passed it by)."""
    h = History(L, R, TOLERANCE, run=False)
    workers = tuple(sorted({loop.worker for loop in loops}))
    h.write(Run(scenario="loops", lease_ms=L, reap_interval_ms=R, tolerance_ms=TOLERANCE,
                workers=workers, dialect="echomq", sweepers=workers, reap_rhythm=rhythm), 0)
    for loop in loops:
        loop.lay_out(end - 500, kill[1] if kill and kill[0] == loop.worker else None)
    timeline: list[tuple[int, int, object]] = [
        (0, 0, lambda ts: h.phase("warmup", ts=ts)),
        (end - 400, 0, lambda ts: h.phase("drain", ts=ts)),
        (end, 9, lambda ts: h.phase("end", ts=ts, drained=1, aborted=0)),
        (1, 1, lambda ts: h.enqueue("a", ts=ts))]
    for loop in loops:
        timeline += [(ts, 2, lambda ts, loop=loop: h.write(Sweep(loop.worker, client=loop.client),
                                                          ts)) for ts in loop.sweeps]
        timeline += [(ts, 1, lambda ts, loop=loop: h.write(Park(loop.worker, loop.client, R), ts))
                     for ts in loop.parks]
    if kill is None:
        timeline += [(2, 1, lambda ts: h.claim("a", 1, loops[0].worker, ts=ts)),
                     (50, 1, lambda ts: h.complete("a", 1, loops[0].worker, ts=ts))]
    else:
        victim, at = kill
        claimed = at - 200
        deadline = claimed + L
        others = sorted(ts for loop in loops if loop.worker != victim for ts in loop.sweeps
                        if ts > deadline)
        # passed by: the first sweep that came more than the tolerance after the first one
        reap_at = next(ts for ts in others if ts > others[0] + TOLERANCE) if skip_first_reap \
            else others[0]
        taker = next(loop.worker for loop in loops if reap_at in loop.sweeps
                     and loop.worker != victim)
        timeline += [(claimed, 1, lambda ts: h.claim("a", 1, victim, ts=ts)),
                     (at, 1, lambda ts: h.fault("kill", victim, ts=ts)),
                     (reap_at, 3, lambda ts: h.reap("a", 1, ts=ts)),
                     (reap_at + 5, 3, lambda ts: h.claim("a", 2, taker, ts=ts)),
                     (reap_at + 60, 3, lambda ts: h.complete("a", 2, taker, ts=ts))]
    for ts, _, write in sorted(timeline, key=lambda entry: entry[:2]):
        write(ts)  # type: ignore[operator]
    return h


def busy_loops(seed: int = 1) -> list[Loop]:
    """Two processes of two loops each, draining up to 1.5 s (work found) and parking up to
    the beat (woken early now and then)."""
    rng = random.Random(seed)
    return [Loop(worker, f"127.0.0.1:{40000 + k}",
                 [(rng.choice((0, 40, 300, 900, 1500)), rng.randint(20, R)) for _ in range(9)],
                 start=rng.randint(0, 100))
            for k, worker in enumerate(("w1", "w1", "w2", "w2"))]


def test_sound_loops_pass_with_drains_longer_than_the_interval_and_a_grid_would_not():
    history = loop_history(busy_loops(), end=9000, kill=("w1", 3000))
    verdict = check(history.events())
    assert verdict.failed_invariants() == []
    cadence = verdict.invariants["reap_cadence"].as_dict()
    assert cadence["rhythm"] == "loop" and cadence["longest_drain_ms"] == 1500
    assert cadence["max_park_ms"] <= R
    assert cadence["max_gap_ms"] > R + 200  # the sweeps themselves are far apart
    bound = verdict.invariants["recovery_bound"].as_dict()
    assert bound["family_figures"]["longest_drain_ms"] == 1500
    assert bound["bound_ms"] == L + 1500 + R + TOLERANCE
    # the same deployment judged as if it swept on a grid: its drains read as late sweeps
    as_grid = check(loop_history(busy_loops(), end=9000, rhythm="", kill=("w1", 3000)).events())
    assert "reap_cadence" in as_grid.failed_invariants()


def test_a_loop_that_parks_three_beats_fails_reap_cadence_alone():
    loops = busy_loops()
    loops[2].turns = [(drain, 3 * R) for drain, _ in loops[2].turns]
    verdict = check(loop_history(loops, end=9000).events())
    assert verdict.failed_invariants() == ["reap_cadence"]
    example = verdict.invariants["reap_cadence"].as_dict()["examples"][0]
    assert example["reason"] == "parked past the interval" and example["reaper"] == "w2"
    assert example["gap_ms"] == 3 * R


def test_a_sweep_that_passes_a_lapsed_lease_by_fails_the_recovery():
    verdict = check(loop_history(busy_loops(), end=9000, kill=("w1", 3000),
                                 skip_first_reap=True).events())
    failed = verdict.failed_invariants()
    assert "recovery_bound" in failed and "reap_prompt" in failed
    assert "reap_cadence" not in failed


def test_loops_whose_parks_the_history_lacks_are_reported_not_judged():
    loops = busy_loops()
    history = loop_history(loops, end=9000)
    records = [record for record in history.records() if record["type"] != "park"]
    verdict = check(to_events(resequence(records)))
    cadence = verdict.invariants["reap_cadence"].as_dict()
    assert cadence.get("judged") is False and "none of their parks" in cadence["not_judged"]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), kill_at=st.integers(1500, 5000))
def test_sound_loops_pass_whatever_their_drains_parks_and_the_kill(seed: int,
                                                                   kill_at: int) -> None:
    verdict = check(loop_history(busy_loops(seed), end=10_000, kill=("w1", kill_at)).events())
    assert verdict.failed_invariants() == [], verdict.invariants


def test_a_park_woken_at_once_is_read_in_history_order_not_by_its_ms():
    """A park whose wake token was already there returns at once: park and sweep in one ms,
    then the loop drains 900 ms. Its turn is that drain, not a 900 ms park (a CI run misread
    it so before the loops were read in history order)."""
    loops = busy_loops()
    loops[0].turns = [(900, 0), (900, 0), (0, R)]
    verdict = check(loop_history(loops, end=9000).events())
    assert verdict.failed_invariants() == []
    cadence = verdict.invariants["reap_cadence"].as_dict()
    assert cadence["per_sweeper"]["w1"]["max_park_ms"] <= R


def frozen_loops_history() -> History:
    """Both processes frozen 2.5 s (pause-all, EchoMQ.Consumer with EchoMQ.Locks renewing): w1
    holds "a", w2 holds "b", both leases lapse in the freeze and no loop can sweep them. On the
    thaw w1's renewal of "a" and w2's complete of "b" come before any loop's first sweep, so
    nothing is reaped and nothing is stranded. w2's loop was mid-drain when frozen: after the
    thaw it drains the backlog for 3 s, then parks; every other drain is 10 ms."""
    h = History(L, R, TOLERANCE, run=False)
    h.write(Run(scenario="loops", lease_ms=L, reap_interval_ms=R, tolerance_ms=TOLERANCE,
                workers=("w1", "w2"), dialect="echomq", sweepers=("w1", "w2"),
                reap_rhythm="loop"), 0)
    freeze, thaw, end = 1100, 3600, 9000
    timeline: list[tuple[int, int, object]] = [
        (0, 0, lambda ts: h.phase("warmup", ts=ts)),
        (500, 0, lambda ts: h.phase("chaos", ts=ts)),
        (end - 400, 0, lambda ts: h.phase("drain", ts=ts)),
        (end, 9, lambda ts: h.phase("end", ts=ts, drained=1, aborted=0)),
        (1, 1, lambda ts: h.enqueue("a", ts=ts)), (1, 1, lambda ts: h.enqueue("b", ts=ts)),
        (1000, 3, lambda ts: h.claim("a", 1, "w1", ts=ts)),
        (1047, 3, lambda ts: h.claim("b", 1, "w2", ts=ts)),
        (freeze, 1, lambda ts: h.fault("pause", "w1", ts=ts, fault_id="f1")),
        (freeze, 1, lambda ts: h.fault("pause", "w2", ts=ts, fault_id="f2")),
        (thaw, 1, lambda ts: h.heal("f1", ts=ts)), (thaw, 1, lambda ts: h.heal("f2", ts=ts)),
        (thaw + 3, 3, lambda ts: h.extend("a", 1, "w1", ts=ts)),  # its renewal, 1603 ms late
        (thaw + 5, 3, lambda ts: h.complete("b", 1, "w2", ts=ts)),  # 1558 ms past its deadline
        (thaw + 100, 3, lambda ts: h.complete("a", 1, "w1", ts=ts))]
    turns = {"w1": ([*range(0, freeze, 260), *range(thaw + 10, end - 500, 260)], {}),
             "w2": ([*range(5, freeze, 260), *range(thaw + 3100, end - 500, 260)],
                    {1045: thaw + 3000})}  # the drain the freeze cut through
    for worker, (sweeps, long_drains) in turns.items():
        client = f"127.0.0.1:{40001 if worker == 'w1' else 40002}"
        for sweep in sweeps:
            park = long_drains.get(sweep, sweep + 10)
            timeline += [
                (sweep, 2, lambda ts, w=worker, c=client: h.write(Sweep(w, client=c), ts)),
                (park, 1, lambda ts, w=worker, c=client: h.write(Park(w, c, R), ts))]
    for ts, _, write in sorted(timeline, key=lambda entry: entry[:2]):
        write(ts)  # type: ignore[operator]
    return h


def test_a_drain_a_freeze_cut_through_is_measured_from_the_thaw():
    """w2's loop was mid-drain when frozen and drained 3 s after the thaw: that drain, from the
    heal, is the longest (it used to be left out, so the loops read as 10 ms drains)."""
    verdict = check(frozen_loops_history().events())
    assert verdict.failed_invariants() == []
    cadence = verdict.invariants["reap_cadence"].as_dict()
    assert cadence["longest_drain_ms"] == 3000
    assert cadence["per_sweeper"]["w2"]["longest_drain_ms"] == 3000
    assert cadence["per_sweeper"]["w1"]["longest_drain_ms"] == 10
    bound = verdict.invariants["recovery_bound"].as_dict()
    assert bound["family_figures"]["longest_drain_ms"] == 3000
    assert bound["bound_ms"] == L + 3000 + R + TOLERANCE
    assert bound["family_figures"]["drains_from_heal"] == 1
    assert "  loops     longest drain 3000 ms over" in "\n".join(bound["model"]["lines"])
    assert "(1 measured from the heal of a fault that froze it mid-drain)" in \
        "\n".join(bound["model"]["lines"])


def test_leases_that_lapse_in_a_freeze_and_are_taken_back_late_are_counted_and_listed():
    """Nothing stranded (both holders acted again) and nothing reaped, yet both leases lapsed
    in the freeze: the verdict counts and lists them, and the summary says so."""
    from chaos.report.summary import build_report, summary_text

    verdict = check(frozen_loops_history().events())
    bound = verdict.invariants["recovery_bound"].as_dict()
    assert bound["stranded"] == 0 and bound["count"] == 0
    assert bound["taken_back_late"] == 2
    assert [(row["job"], row["worker"], row["lapsed_ms"], row["fault_id"])
            for row in bound["taken_back_examples"]] == [
        ("a", "w1", 1603, "f1"), ("b", "w2", 1558, "f2")]
    text = summary_text(build_report("hand-written", "pass", verdict))
    assert "  lapsed    2 lease(s) lapsed under a fault on their holder and were taken back " \
        "by it late" in text and "a (attempt 1, w1, 1603 ms past its deadline)" in text
    # a lease its holder renewed before its deadline is not one of them
    records = [record for record in frozen_loops_history().records()
               if not (record["type"] == "fault" and record["worker"] == "w1")]
    quiet = check(to_events(resequence(records)))
    assert quiet.invariants["recovery_bound"].as_dict()["taken_back_late"] == 1
