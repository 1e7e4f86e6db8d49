"""The checker's figures beside the invariants: the dead-letter and outcome counts, needless
redeliveries by delivery-to-ack time, throughput, and the store faults' client recovery.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from chaos.check.judgements import Standing
from chaos.check.replay import ReplayFacts
from chaos.check.verdict import DURATION_BUCKETS, DeadLetter, JobCounts, Outcomes
from chaos.history.events import Event
from chaos.history.schema import CLIENT_CALLS, Enqueue, Fault

UNENDED = "no complete"  # the row of needless redeliveries whose holder never completed


def by_duration(ran_ms: dict[int, int], ran_needless_ms: dict[int, int],
                 lease_ms: int, unended: int = 0) -> list[dict[str, Any]]:
    """Attempts that ran to the holder's own complete, and how many of them were needlessly
    redelivered, per bucket of the time from the claim (the delivery) to that complete (the
    ack), a multiple of the lease: no history records a handler's own start, so this is
    delivery to ack, not the handler's span (a job that waits in its worker before its handler
    starts counts its wait). Needless redeliveries whose holder's complete never came are
    a last row of their own (``no complete``) when there are any, so none is left out."""
    def inside(counts: dict[int, int], low: float, high: float) -> int:
        return sum(n for ms, n in counts.items() if low <= ms / lease_ms < high)

    rows = []
    for low, high in DURATION_BUCKETS:
        needless = inside(ran_needless_ms, low, high)
        label = f">={low:g}x" if math.isinf(high) else f"{low:g}-{high:g}x"
        rows.append({"bucket": label, "attempts": inside(ran_ms, low, high) + needless,
                     "needless": needless})
    if unended:
        rows.append({"bucket": UNENDED, "attempts": unended, "needless": unended})
    return rows


def store_fault_figure(fault: Fault) -> dict[str, Any]:
    """What the fault event of a store fault says; ``store_fault_recovery`` adds the clients."""
    figure: dict[str, Any] = {
        "fault_id": fault.fault_id, "kind": fault.kind, "node": fault.worker or None,
        "killed_ts": fault.killed_ts, "down_ms": fault.down_ms or 0,
        "clients_recovered": 0, "max_client_ms": None, "clients_ms": {}, "producer_ms": None,
    }
    if not fault.planned:  # the store did it on its own (Sentinel): judged as a planned one
        figure["planned"] = False
    if fault.promoted_ms is not None:
        figure["promoted_ms"] = fault.promoted_ms
        figure["new_primary"] = fault.new_primary
    return figure


def store_fault_recovery(events: Iterable[Event],
                         figures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A second pass, for runs with store faults only: per fault, ms from the kill to each
    worker's next transition (accepted or rejected: either way the store answered it) and to the
    producer's next enqueue. (Those can precede the fault event in the history: the runner records
    it once the store serves again.) Workers that did nothing after the kill (dead, or idle to the
    end) are left out, not counted as 0."""
    filled = [{**figure, "clients_ms": {}} for figure in figures]
    for event in events:
        worker = event.worker
        is_client = event.type in CLIENT_CALLS and worker
        if not is_client and event.type != Enqueue.TYPE:
            continue
        for figure in filled:
            if event.ts <= figure["killed_ts"]:  # before the kill (or in its very millisecond)
                continue
            if is_client and worker not in figure["clients_ms"]:
                figure["clients_ms"][worker] = event.ts - figure["killed_ts"]
            elif event.type == Enqueue.TYPE and figure["producer_ms"] is None:
                figure["producer_ms"] = event.ts - figure["killed_ts"]
    for figure in filled:
        clients = figure["clients_ms"] = dict(sorted(figure["clients_ms"].items()))
        figure["clients_recovered"] = len(clients)
        figure["max_client_ms"] = max(clients.values()) if clients else None
    return filled


def job_counts(facts: ReplayFacts, jobs: Standing, final: bool) -> JobCounts:
    return JobCounts(
        enqueued=len(facts.enqueued),
        completed=jobs.completed_enqueued,
        lost=len(jobs.lost) if final else 0,
        double_completed=len(jobs.double),
        unexpected=len(jobs.unexpected),
        dead_lettered=len(jobs.dead_lettered),
        undrained=len(jobs.undrained) if final else 0,
        held=len(jobs.held) if final else 0,
        removed=len(jobs.removed),
    )


def outcomes(facts: ReplayFacts, jobs: Standing, final: bool) -> Outcomes:
    """Jepsen's vocabulary: each enqueued job is exactly one of these."""
    return Outcomes(
        completed=jobs.completed_once,
        dead_lettered=len(jobs.dead_lettered),
        lost=len(jobs.lost) if final else 0,
        undrained=len(jobs.undrained) if final else 0,  # never completed: not duplicated
        held=len(jobs.held) if final else 0,
        removed=len(jobs.removed),
        duplicated=sum(1 for job_id in jobs.double if job_id in facts.enqueued),
        unexpected=len(jobs.unexpected),
        judged=final,
    )


def dead_letter(facts: ReplayFacts, max_stalls: int) -> DeadLetter:
    dead = facts.dead
    return DeadLetter(
        max_stalls=max_stalls,
        moved_to_dead=len(dead),
        poison=len(set(dead) & facts.poison),
        poison_enqueued=len(facts.poison),
        recoveries_before_dead={str(n): count for n, count in
                                sorted(Counter(n for n, _ in dead.values()).items())},
    )


def rate(count: int, start_ts: int | None, end_ts: int | None) -> float:
    """``count`` per second between two server times (0 when they span no time)."""
    if start_ts is None or end_ts is None or end_ts <= start_ts:
        return 0.0
    return round(count * 1000 / (end_ts - start_ts), 1)
