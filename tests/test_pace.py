"""The run's pace (chaos.check.pace): sweep gaps, claim waits, completes a second and the drain,
from a hand-written history; and the run store keeps them as samples and figures."""

from __future__ import annotations

from histories import History

from chaos.check.checker import check
from chaos.store.record import capped, run_samples


def paced_history() -> History:
    h = History(sweepers=("reaper",))
    h.sweep("reaper", ts=0)
    h.phase("warmup", ts=100)
    for k, ts in enumerate((350, 600, 950, 1200, 1450)):  # gaps from the first phase on
        h.sweep("reaper", ts=ts)
        if k == 2:
            h.phase("chaos", ts=1000)
    h.enqueue("a", ts=1000)
    h.enqueue("b", ts=1010)
    h.claim("a", attempt=1, worker="w1", ts=1040)
    h.claim("b", attempt=1, worker="w1", ts=1100)
    h.complete("a", attempt=1, worker="w1", ts=1500)
    h.phase("drain", ts=2100)
    h.complete("b", attempt=1, worker="w1", ts=3200)
    h.phase("end", ts=3300, drained="1", aborted="0")
    return h


def test_the_pace_of_a_run() -> None:
    verdict = check(paced_history().events())
    pace = verdict.pace
    assert pace.samples["sweep_gap"] == [250, 350, 250, 250]  # the sweep at 0: before the run
    assert pace.samples["claim_wait"] == [40, 90]  # enqueue to the first claim, each job
    assert pace.samples["completes_per_s"] == [1, 0]  # seconds 1 and 2; 3 is not whole
    assert pace.drain_ms == 1100
    report = verdict.as_dict()["pace"]
    assert report["claim_wait"]["p50_ms"] == 40 and report["drain_ms"] == 1100
    stored = run_samples(verdict)
    assert stored["sweep_gap"] == [250, 350, 250, 250] and "reap" in stored


def test_a_long_runs_samples_are_capped_to_evenly_spaced_order_statistics() -> None:
    values = list(range(10_000, 0, -1))
    kept = capped(values, 101)
    assert len(kept) == 101 and kept[0] == 1 and kept[-1] == 10_000 and kept[50] == 5001
    assert capped([3, 1, 2], 101) == [3, 1, 2]
