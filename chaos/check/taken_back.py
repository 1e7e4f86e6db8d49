"""Leases a fault left to lapse that their holder took back late (docs/design.md §4).

A lease held when a fault cut its holder off (a pause, a partition) whose deadline passed
before any reaper took it, and that the holder itself then renewed or completed once the fault
was over (the store still had it leased: nobody had reaped it), is no stranded lease: its
holder was back, nothing was recovered, nothing is judged against the bound. Yet the recovery
a reaper owed it never came (every reaper frozen too, or every consumer loop busy draining),
and a run showing "0 stranded" would hide it. They are counted and listed beside the stranded
ones (report.json ``invariants.recovery_bound.taken_back_late``, its examples, a summary line);
``reap_prompt`` judges how late each was, as for any lapsed lease.
"""

from __future__ import annotations

from typing import Any

from chaos.check.replay import LapsedLease, ReplayFacts

LISTED = 5  # leases named in the summary line


def taken_back_late(facts: ReplayFacts) -> list[dict[str, Any]]:
    """Each lease held at a cut-off fault and dismissed (its holder acted again), whose first
    accepted call after its deadline (no reap before it) came once the fault had struck."""
    first_late: dict[tuple[str, int], LapsedLease] = {}
    for lapsed in facts.lapsed:
        if not lapsed.reaped:
            first_late.setdefault((lapsed.job_id, lapsed.attempt), lapsed)
    rows = []
    for item in facts.dismissed:
        late = first_late.get((item.job_id, item.attempt))
        if late is None or late.worker != item.worker or late.seen_ts < item.fault_ts:
            continue
        rows.append({"job": item.job_id, "attempt": item.attempt, "worker": item.worker,
                     "fault_id": item.fault_id, "fault_ts": item.fault_ts,
                     "deadline": late.deadline, "taken_back_ts": late.seen_ts,
                     "lapsed_ms": late.seen_ts - late.deadline})
    return rows


def taken_back_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The summary's line for them (none when there are none)."""
    if not rows:
        return []
    listed = ", ".join(f"{row['job']} (attempt {row['attempt']}, {row['worker']}, "
                       f"{row['lapsed_ms']} ms past its deadline)" for row in rows[:LISTED])
    return [f"  lapsed    {len(rows)} lease(s) lapsed under a fault on their holder and were "
            f"taken back by it late, no reaper having taken them (neither stranded nor "
            f"recovered): {listed}" + (", ..." if len(rows) > LISTED else "")]
