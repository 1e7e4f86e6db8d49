"""The nemesis: turns a scenario's fault list into a seeded schedule and applies it.

The schedule is computed before the run (``plan``) so ``run --dry-run`` can print it; which
workers a ``random`` or ``holding_oldest_lease`` target hits is decided at the instant the fault
fires (among workers still alive and not already faulted), from a generator seeded by the
scenario seed, so a run is reproducible. Every fault is written to the history with the Valkey
clock read right after it took effect, and every heal right before it is undone, so the fault
window in the history always lies inside the real one.

Process faults signal the worker (SIGKILL, SIGSTOP/SIGCONT). Network faults add Toxiproxy
toxics to the target's own proxy (or disable it) and heal by removing them. A clock skew
rewrites the target's local clock offset; only protocol variants that trust a local clock care.
A ``cpu_hog`` or ``block_heartbeat`` is an order the worker carries out on itself (the runtime
writes its control file and signals it): the worker stays alive and reachable, so leases it loses
under one are needless redeliveries. Their heal is recorded when the duration ends; there is
nothing to undo (the worker ends the hog or the block itself).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Protocol

from chaos.history import schema
from chaos.network.client import ToxicSpec
from chaos.runtime.local import StoreFault
from chaos.scenario.model import (
    HOLDING_OLDEST_LEASE,
    WORKER_CONTROL_KINDS,
    Fault,
    RandomTarget,
    Scenario,
)


class FaultTarget(Protocol):
    """What the nemesis needs from a runtime."""

    def kill(self, name: str) -> None: ...
    def pause(self, name: str) -> None: ...
    def resume(self, name: str) -> None: ...
    def add_toxics(self, link: str, toxics: list[ToxicSpec]) -> None: ...
    def remove_toxics(self, link: str, toxics: list[ToxicSpec]) -> None: ...
    def set_link_enabled(self, link: str, enabled: bool) -> None: ...
    def set_clock_offset(self, name: str, offset_ms: int) -> None: ...
    def restart_valkey(self, down_ms: int) -> StoreFault: ...
    def failover(self, mode: str, down_ms: int) -> StoreFault: ...
    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None: ...


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
    kind: str = field(compare=False)  # the fault's kind: what undoing it means
    toxics: list[ToxicSpec] = field(compare=False, default_factory=list)


# Toxic types that leave the holder unable to reach Valkey at all (vs. merely slowed).
CUTTING_TOXICS = {"timeout", "reset_peer", "limit_data"}


def cuts_off(fault: Fault) -> bool:
    """Can the target still act under this fault? Decides needed vs needless redeliveries."""
    if fault.kind in ("kill", "pause", "partition", "reset_peer"):
        return True
    return fault.kind == "toxic" and fault.toxic in CUTTING_TOXICS


def toxics_for(fault: Fault, fault_id: str) -> list[ToxicSpec]:
    """The toxics a network fault adds to its target's proxy (none for a disable partition)."""
    if fault.kind == "partition":
        if fault.mode == "disable":
            return []
        # timeout 0: nothing passes and nothing closes while it holds; removing it closes those
        # connections (Toxiproxy's own behaviour), so the target reconnects after the heal
        toxic_type, streams = "timeout", ["upstream", "downstream"]
        attributes: dict[str, int | float] = {"timeout": 0}
    else:
        streams = ["upstream", "downstream"] if fault.stream in (None, "both") else [fault.stream]
        by_kind: dict[str, tuple[str, dict[str, int | float]]] = {
            "latency": ("latency", {"latency": fault.latency_ms or 0,
                                    "jitter": fault.jitter_ms or 0}),
            "bandwidth": ("bandwidth", {"rate": fault.rate_kb_s or 0}),
            "reset_peer": ("reset_peer", {"timeout": fault.timeout_ms or 0}),
            "slow_close": ("slow_close", {"delay": fault.delay_ms or 0}),
            "toxic": (fault.toxic or "", dict(fault.attributes or {})),
        }
        toxic_type, attributes = by_kind[fault.kind]
    toxicity = 1.0 if fault.toxicity is None else fault.toxicity
    return [ToxicSpec(f"{fault_id}_{toxic_type}_{stream}", toxic_type, stream,
                      dict(attributes), toxicity) for stream in streams]


def fault_parameters(fault: Fault) -> dict[str, object]:
    """The kind-specific settings of a fault, for its history event."""
    names = ("latency_ms", "jitter_ms", "stream", "toxicity", "mode", "rate_kb_s", "delay_ms",
             "timeout_ms", "toxic", "offset_ms")
    return {name: getattr(fault, name) for name in names if getattr(fault, name) is not None}


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
        self.heal_at_end: list[_Heal] = []
        self.dead: set[str] = set()
        self.frozen: set[str] = set()
        self.degraded: set[str] = set()  # under a network fault not yet healed
        self.skewed: set[str] = set()
        self.stalled: set[str] = set()  # under a cpu_hog or block_heartbeat not yet over
        self.applied: list[AppliedFault] = []
        self.skipped: list[str] = []

    def _candidates(self, fault: Fault) -> list[str]:
        """Who this fault may hit now: alive, and not already under a fault of its family."""
        topology = self.scenario.topology
        if fault.kind == "clock_skew":
            names, busy = topology.worker_names + self.scenario.reaper_names, self.skewed
        elif fault.is_network:
            names, busy = self.scenario.proxied_names, self.degraded
        elif fault.kind in WORKER_CONTROL_KINDS:
            names, busy = topology.worker_names, self.stalled
        else:
            names, busy = topology.worker_names, self.frozen
        return [name for name in names if name not in self.dead and name not in busy]

    def _resolve(self, fault: PlannedFault) -> list[str]:
        spec = self.scenario.faults[fault.index].target
        candidates = self._candidates(self.scenario.faults[fault.index])
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

    def _apply(self, planned: PlannedFault, elapsed_ms: int) -> None:
        fault = self.scenario.faults[planned.index]
        if fault.is_store:
            self._apply_store(fault)
            return
        targets = self._resolve(planned)
        if not targets:
            self.skipped.append(
                f"{planned.kind} {planned.target} at {planned.at_ms} ms: no live target")
            self.history.record(**schema.FaultSkipped(planned.kind, planned.target).fields())
            return
        for name in targets:
            fault_id = f"f{len(self.applied) + 1}"
            heal = _Heal(elapsed_ms + (fault.duration_ms or 0), fault_id, name, fault.kind)
            if fault.kind == "kill":
                self.runtime.kill(name)
                self.dead.add(name)
            elif fault.kind == "pause":
                self.runtime.pause(name)
                self.frozen.add(name)
            elif fault.kind == "clock_skew":
                self.runtime.set_clock_offset(name, fault.offset_ms or 0)
                self.skewed.add(name)
            elif fault.kind in WORKER_CONTROL_KINDS:
                self.runtime.control(name, fault.kind, fault.duration_ms or 0, fault_id)
                self.stalled.add(name)
            elif fault.kind == "partition" and fault.mode == "disable":
                self.runtime.set_link_enabled(name, False)
                self.degraded.add(name)
            else:
                heal.toxics = toxics_for(fault, fault_id)
                self.runtime.add_toxics(name, heal.toxics)
                self.degraded.add(name)
            if fault.kind != "kill" and fault.duration_ms:
                heapq.heappush(self.heals, heal)
            elif fault.kind != "kill":
                self.heal_at_end.append(heal)  # no duration: holds until the chaos phase ends
            ts = self.history.record(**schema.Fault(
                fault_id, fault.kind, name, target=planned.target, duration_ms=fault.duration_ms,
                cuts_off=cuts_off(fault), parameters=fault_parameters(fault)).fields())
            self.applied.append(AppliedFault(fault_id, fault.kind, name, ts))

    def _apply_store(self, fault: Fault) -> None:
        """Crash the store (or move its primary) and record it once it serves again: the event
        carries the kill instant (``killed_ts``), so client recovery is measured from there."""
        if fault.kind == "valkey_restart":
            done = self.runtime.restart_valkey(fault.duration_ms or 0)
        else:
            done = self.runtime.failover(fault.mode or "kill", fault.duration_ms or 0)
        fault_id = f"f{len(self.applied) + 1}"
        ts = self.history.record(**schema.Fault(
            fault_id, fault.kind, done.node, target=describe_target(fault),
            duration_ms=fault.duration_ms, cuts_off=True, killed_ts=done.killed_ts,
            down_ms=done.down_ms, promoted_ms=done.promoted_ms, new_primary=done.new_primary,
            parameters=fault_parameters(fault)).fields())
        self.applied.append(AppliedFault(fault_id, fault.kind, done.node, ts))

    def _heal(self, heal: _Heal) -> None:
        # Record first, while the fault still holds: the fault window in the history then lies
        # inside the real one, and everything the target does once healed follows it.
        ts = self.history.record(**schema.Heal(heal.fault_id, heal.kind, heal.worker).fields())
        if heal.kind == "pause":
            self.runtime.resume(heal.worker)
            self.frozen.discard(heal.worker)
        elif heal.kind == "clock_skew":
            self.runtime.set_clock_offset(heal.worker, 0)
            self.skewed.discard(heal.worker)
        elif heal.kind in WORKER_CONTROL_KINDS:
            self.stalled.discard(heal.worker)  # the worker ended it itself
        elif heal.toxics:
            self.runtime.remove_toxics(heal.worker, heal.toxics)
            self.degraded.discard(heal.worker)
        else:  # a partition by disabling the proxy
            self.runtime.set_link_enabled(heal.worker, True)
            self.degraded.discard(heal.worker)
        for applied in self.applied:
            if applied.fault_id == heal.fault_id:
                applied.healed_ts = ts

    def heal_all(self) -> None:
        """End of chaos: drop faults not yet fired, undo every fault that can be undone."""
        self.pending.clear()
        while self.heals:
            self._heal(heapq.heappop(self.heals))
        while self.heal_at_end:
            self._heal(self.heal_at_end.pop(0))
