"""The nemesis: turns a scenario's fault list into a seeded schedule and applies it.

The schedule is computed before the run (``plan``) so ``run --dry-run`` can print it; which
workers a ``random`` or ``holding_oldest_lease`` target hits is decided at the instant the fault
fires (among workers still alive and not already faulted), from a generator seeded by the
scenario seed, so a run is reproducible. ``holding_oldest_lease`` is the holder of the oldest
lease still live (a lapsed one strands nothing); when none is held it looks again shortly, for
up to ``LEASE_WAIT_MS``. It asks once more at the instant it applies the fault (its pick may
have finished its jobs meanwhile: another holder is hit instead, or it waits again); past the
wait, it hits its pick and the fault event says it found no holder (``holder_found`` 0), so the
verdict can say why the fault stranded nothing (``chaos.check.exercised``). Every fault is
written to the history with the Valkey clock read right after it took effect, and every heal
right before it is undone, so the fault window in the history always lies inside the real one.

What each kind does is its module in ``chaos.faults.kinds`` (its parameters, targets and
whether it cuts the holder off: its declaration in ``chaos.scenario.faults``). A kind applied to
a target returns what undoes it, run at the heal: when ``duration_ms`` is over, else when the
chaos phase ends; a kill returns nothing (the worker stays dead). A target under a fault is no
candidate for another of the same group (process, network, clock, stalled) until healed.
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from chaos.faults.kinds import ON_STORE, ON_TARGETS
from chaos.faults.target import FaultTarget
from chaos.history import schema
from chaos.scenario.faults import (
    FAULT_KINDS,
    HOLDING_OLDEST_LEASE,
    Fault,
    FaultBase,
    RandomTarget,
    describe_target,
    fault_parameters,
)
from chaos.scenario.model import Scenario


class HistoryWriter(Protocol):
    def record(self, **fields: object) -> int: ...
    def lease_holders_oldest_first(self) -> list[str]: ...


@dataclass(frozen=True, order=True)
class PlannedFault:
    at_ms: int  # from the start of the chaos phase
    index: int  # position in the scenario's fault list
    occurrence: int
    kind: str = field(compare=False)
    target: str = field(compare=False)  # as written: a name, "random 2", "holding_oldest_lease"
    duration_ms: int | None = field(compare=False, default=None)
    planned_at_ms: int | None = field(compare=False, default=None)  # when looked again: the plan's


# holding_oldest_lease when no worker holds a live lease (a quiet instant): look again every
# LEASE_POLL_MS, up to LEASE_WAIT_MS after the planned time, then skip it (a fault_skipped event).
LEASE_POLL_MS = 20
LEASE_WAIT_MS = 2000


@dataclass(order=True)
class _Heal:
    due_ms: int
    fault_id: str = field(compare=False)
    worker: str = field(compare=False)
    kind: str = field(compare=False)
    group: str = field(compare=False)  # the target is free for this group's faults once healed
    undo: Callable[[], None] = field(compare=False)


def plan(scenario: Scenario) -> list[PlannedFault]:
    """Every fault occurrence inside the chaos phase, in firing order. A fault with
    ``at_spread_ms`` fires each occurrence at a point drawn from [its time, + the spread), by a
    generator of the run's seed of its own (the targets' picks draw from another, so a spread
    changes no pick); a point past the chaos phase drops that occurrence."""
    planned = []
    spread = random.Random(f"fault-times:{scenario.seed}")
    for index, fault in enumerate(scenario.faults):
        at, occurrence = fault.at_ms, 0
        while at < scenario.phases.chaos_ms:
            fires = at + (spread.randrange(fault.at_spread_ms) if fault.at_spread_ms else 0)
            if fires < scenario.phases.chaos_ms:
                planned.append(PlannedFault(fires, index, occurrence, fault.kind,
                                            describe_target(fault), fault.duration_ms))
            if fault.every_ms is None:
                break
            at += fault.every_ms
            occurrence += 1
    return sorted(planned)


@dataclass
class AppliedFault:
    """One fault as applied (report.json ``run.faults``): ``duration_ms`` as asked, and
    ``applied_ms``, the recorded window (fault to heal, server clock: inside the real one);
    ``cut_short`` when the chaos phase's end healed it before its duration was over."""

    fault_id: str
    kind: str
    worker: str
    applied_ts: int
    healed_ts: int | None = None
    duration_ms: int | None = None
    applied_ms: int | None = None
    cut_short: bool = False


class Nemesis:
    def __init__(self, scenario: Scenario, runtime: FaultTarget, history: HistoryWriter) -> None:
        self.scenario = scenario
        self.runtime = runtime
        self.history = history
        self.rng = random.Random(scenario.seed)
        self.pending = plan(scenario)
        self.heals: list[_Heal] = []
        self.heal_at_end: list[_Heal] = []
        self.dead: set[str] = set()
        # Who is under a fault not yet healed, by the kinds' GROUP (process, network, ...).
        self.busy: dict[str, set[str]] = defaultdict(set)
        self.applied: list[AppliedFault] = []
        self.skipped: list[str] = []

    def _candidates(self, fault: Fault, group: str) -> list[str]:
        """Who this fault may hit now: alive, and not already under a fault of its group."""
        return [name for name in self.scenario.target_names(fault)
                if name not in self.dead and name not in self.busy[group]]

    def _resolve(self, fault: PlannedFault) -> list[str]:
        spec = self.scenario.faults[fault.index]
        candidates = self._candidates(spec, ON_TARGETS[spec.kind].GROUP)
        if isinstance(spec.target, RandomTarget):
            return sorted(self.rng.sample(candidates, min(spec.target.random, len(candidates))))
        if spec.target == HOLDING_OLDEST_LEASE:  # the oldest lease of a worker we can still fault
            return self._holders(candidates)[:1]
        return [spec.target] if spec.target in candidates else []

    def _holders(self, candidates: list[str]) -> list[str]:
        """The candidates holding a live lease now, the oldest lease's holder first."""
        return [h for h in self.history.lease_holders_oldest_first() if h in candidates]

    def _holding_now(self, spec: Fault, pick: str) -> tuple[str, bool]:
        """``holding_oldest_lease``, looked at again at the instant the fault is applied:
        its pick if it still holds a live lease, else the oldest holder that can be faulted
        (the pick finished its jobs meanwhile); ``False`` when nobody holds one."""
        holders = self._holders(self._candidates(spec, ON_TARGETS[spec.kind].GROUP))
        if pick in holders:
            return pick, True
        return (holders[0], True) if holders else (pick, False)

    def next_due_ms(self) -> int | None:
        times = [f.at_ms for f in self.pending[:1]] + [h.due_ms for h in self.heals[:1]]
        return min(times) if times else None

    def tick(self, elapsed_ms: int) -> None:
        """Apply every fault and heal due by ``elapsed_ms`` into the chaos phase."""
        while self.heals and self.heals[0].due_ms <= elapsed_ms:
            self._heal(heapq.heappop(self.heals))
        while self.pending and self.pending[0].at_ms <= elapsed_ms:
            self._apply(self.pending.pop(0), elapsed_ms)

    def _apply(self, planned: PlannedFault, elapsed_ms: int) -> None:
        fault = self.scenario.faults[planned.index]
        if fault.is_store:
            self._apply_store(fault)
            return
        targets = self._resolve(planned)
        planned_at = planned.at_ms if planned.planned_at_ms is None else planned.planned_at_ms
        may_wait = elapsed_ms + LEASE_POLL_MS <= planned_at + LEASE_WAIT_MS
        holder_found: bool | None = None  # what the fault event says of a holder target
        if targets and planned.target == HOLDING_OLDEST_LEASE:
            pick, holder_found = self._holding_now(fault, targets[0])
            # nobody holds one any more: look again shortly, as for a quiet instant; past
            # the wait, the pick is hit and the event says it found no holder
            targets = [pick] if holder_found or not may_wait else []
        if (not targets and planned.target == HOLDING_OLDEST_LEASE and may_wait):
            bisect.insort(self.pending, replace(planned, at_ms=elapsed_ms + LEASE_POLL_MS,
                                                planned_at_ms=planned_at))
            return
        if not targets:
            self.skipped.append(
                f"{planned.kind} {planned.target} at {planned_at} ms: no live target")
            self.history.record(**schema.FaultSkipped(planned.kind, planned.target).fields())
            return
        kind = ON_TARGETS[fault.kind]
        for name in targets:
            fault_id = f"f{len(self.applied) + 1}"
            undo = kind.apply(self.runtime, fault, name, fault_id)
            if undo is None:  # nothing heals it: the target is gone for every fault
                self.dead.add(name)
            else:
                self.busy[kind.GROUP].add(name)
                heal = _Heal(elapsed_ms + (fault.duration_ms or 0), fault_id, name, fault.kind,
                             kind.GROUP, undo)
                if fault.duration_ms:
                    heapq.heappush(self.heals, heal)
                else:
                    self.heal_at_end.append(heal)  # holds until the chaos phase ends
            ts = self.history.record(**schema.Fault(
                fault_id, fault.kind, name, target=planned.target, duration_ms=fault.duration_ms,
                cuts_off=fault.cuts_off(), parameters=fault_parameters(fault),
                holder_found=holder_found).fields())
            self.applied.append(AppliedFault(fault_id, fault.kind, name, ts,
                                             duration_ms=fault.duration_ms))

    def _apply_store(self, fault: FaultBase) -> None:
        """Crash the store (or move its primary) and record it once it serves again: the event
        carries the kill instant (``killed_ts``), so client recovery is measured from there."""
        done = ON_STORE[fault.kind].strike(self.runtime, fault)
        fault_id = f"f{len(self.applied) + 1}"
        ts = self.history.record(**schema.Fault(
            fault_id, fault.kind, done.node, target=describe_target(fault),
            duration_ms=fault.duration_ms, cuts_off=fault.cuts_off(), killed_ts=done.killed_ts,
            down_ms=done.down_ms, promoted_ms=done.promoted_ms, new_primary=done.new_primary,
            parameters=fault_parameters(fault)).fields())
        self.applied.append(AppliedFault(fault_id, fault.kind, done.node, ts))

    def _heal(self, heal: _Heal, cut_short: bool = False) -> None:
        # Record first, while the fault still holds: the fault window in the history then lies
        # inside the real one, and everything the target does once healed follows it.
        ts = self.history.record(**schema.Heal(heal.fault_id, heal.kind, heal.worker).fields())
        heal.undo()
        self.busy[heal.group].discard(heal.worker)
        for applied in self.applied:
            if applied.fault_id == heal.fault_id:
                applied.healed_ts = ts
                applied.applied_ms = ts - applied.applied_ts
                applied.cut_short = cut_short and FAULT_KINDS[heal.kind].healed_at_chaos_end

    def heal_all(self) -> None:
        """End of chaos: faults not yet fired are recorded as skipped (a holding_oldest_lease
        fault still waiting for a holder, one planned too late), and every fault that can be
        undone is undone."""
        for planned in self.pending:
            planned_at = planned.at_ms if planned.planned_at_ms is None else planned.planned_at_ms
            self.skipped.append(f"{planned.kind} {planned.target} at {planned_at} ms: the chaos "
                                "phase ended before it found a target")
            self.history.record(**schema.FaultSkipped(planned.kind, planned.target).fields())
        self.pending.clear()
        while self.heals:  # their duration is not over: the phase's end cuts them short
            self._heal(heapq.heappop(self.heals), cut_short=True)
        while self.heal_at_end:
            self._heal(self.heal_at_end.pop(0))
