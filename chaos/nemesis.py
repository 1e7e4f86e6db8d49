"""The nemesis: turns a scenario's fault list into a seeded schedule and applies it.

The schedule is computed before the run (``plan``) so ``run --dry-run`` can print it; which
workers a ``random`` or ``holding_oldest_lease`` target hits is decided at the instant the fault
fires (among workers still alive and not already faulted), from a generator seeded by the
scenario seed, so a run is reproducible. Every fault and every heal is written to the history
with the Valkey clock read right after it took effect.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Protocol

from chaos.scenario import HOLDING_OLDEST_LEASE, Fault, RandomTarget, Scenario


class FaultTarget(Protocol):
    """What the nemesis needs from a runtime."""

    def kill(self, name: str) -> None: ...
    def pause(self, name: str) -> None: ...
    def resume(self, name: str) -> None: ...


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


@dataclass(order=True)
class _Heal:
    due_ms: int
    fault_id: str = field(compare=False)
    worker: str = field(compare=False)
    kind: str = field(compare=False)


def describe_target(fault: Fault) -> str:
    if isinstance(fault.target, RandomTarget):
        return f"random {fault.target.random}"
    return fault.target


def plan(scenario: Scenario) -> list[PlannedFault]:
    """Every fault occurrence inside the chaos phase, in firing order."""
    planned = []
    for index, fault in enumerate(scenario.faults):
        at, occurrence = fault.at_ms, 0
        while at < scenario.phases.chaos_ms:
            planned.append(PlannedFault(at, index, occurrence, fault.kind, describe_target(fault),
                                        fault.duration_ms))
            if fault.every_ms is None:
                break
            at += fault.every_ms
            occurrence += 1
    return sorted(planned)


@dataclass
class AppliedFault:
    fault_id: str
    kind: str
    worker: str
    applied_ts: int
    healed_ts: int | None = None


class Nemesis:
    def __init__(self, scenario: Scenario, runtime: FaultTarget, history: HistoryWriter) -> None:
        self.scenario = scenario
        self.runtime = runtime
        self.history = history
        self.rng = random.Random(scenario.seed)
        self.pending = plan(scenario)
        self.heals: list[_Heal] = []
        self.dead: set[str] = set()
        self.frozen: set[str] = set()
        self.applied: list[AppliedFault] = []
        self.skipped: list[str] = []

    def _candidates(self) -> list[str]:
        return [name for name in self.scenario.topology.worker_names
                if name not in self.dead and name not in self.frozen]

    def _resolve(self, fault: PlannedFault) -> list[str]:
        spec = self.scenario.faults[fault.index].target
        candidates = self._candidates()
        if isinstance(spec, RandomTarget):
            return sorted(self.rng.sample(candidates, min(spec.random, len(candidates))))
        if spec == HOLDING_OLDEST_LEASE:  # the oldest lease of a worker we can still fault
            holders = [h for h in self.history.lease_holders_oldest_first() if h in candidates]
            return holders[:1]
        return [spec] if spec in candidates else []

    def next_due_ms(self) -> int | None:
        times = [f.at_ms for f in self.pending[:1]] + [h.due_ms for h in self.heals[:1]]
        return min(times) if times else None

    def tick(self, elapsed_ms: int) -> None:
        """Apply every fault and heal due by ``elapsed_ms`` into the chaos phase."""
        while self.heals and self.heals[0].due_ms <= elapsed_ms:
            self._heal(heapq.heappop(self.heals))
        while self.pending and self.pending[0].at_ms <= elapsed_ms:
            self._apply(self.pending.pop(0), elapsed_ms)

    def _apply(self, fault: PlannedFault, elapsed_ms: int) -> None:
        targets = self._resolve(fault)
        if not targets:
            self.skipped.append(f"{fault.kind} {fault.target} at {fault.at_ms} ms: no live target")
            self.history.record(type="fault_skipped", kind=fault.kind, target=fault.target)
            return
        for worker in targets:
            fault_id = f"f{len(self.applied) + 1}"
            if fault.kind == "kill":
                self.runtime.kill(worker)
                self.dead.add(worker)
            else:
                self.runtime.pause(worker)
                self.frozen.add(worker)
                duration = fault.duration_ms or 0
                heapq.heappush(self.heals, _Heal(elapsed_ms + duration, fault_id, worker, "resume"))
            ts = self.history.record(type="fault", kind=fault.kind, worker=worker,
                                     fault_id=fault_id, target=fault.target,
                                     duration_ms=fault.duration_ms)
            self.applied.append(AppliedFault(fault_id, fault.kind, worker, ts))

    def _heal(self, heal: _Heal) -> None:
        # Record first, while the worker is still frozen: the fault window in the history then
        # lies inside the real frozen time, and everything the worker does on waking follows it.
        ts = self.history.record(type="heal", kind=heal.kind, worker=heal.worker,
                                 fault_id=heal.fault_id)
        self.runtime.resume(heal.worker)
        self.frozen.discard(heal.worker)
        for applied in self.applied:
            if applied.fault_id == heal.fault_id:
                applied.healed_ts = ts

    def heal_all(self) -> None:
        """End of chaos: drop faults not yet fired, undo every fault that can be undone."""
        self.pending.clear()
        while self.heals:
            self._heal(heapq.heappop(self.heals))
