"""What each fault kind does: one module per kind, named as the kind its declaration in
``chaos.scenario.faults`` answers to (a test holds the two registries to the same names).

A kind aimed at processes (``TargetKind``) applies itself to one target through the runtime and
returns what undoes it at the heal (None: nothing ever heals it, the target is gone). ``GROUP``
names the faults that do not stack: a target under one is no candidate for another of its group.
A store kind (``StoreKind``) strikes the store itself and reports what it did; it heals itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from chaos.faults.kinds import (
    bandwidth,
    block_heartbeat,
    clock_skew,
    cpu_hog,
    failover,
    heartbeat_lag,
    kill,
    kill_in_claim_gap,
    latency,
    partition,
    pause,
    reset_peer,
    slow_close,
    toxic,
    valkey_restart,
)
from chaos.faults.target import FaultTarget
from chaos.runtime.base import StoreFault

Undo = Callable[[], None]


class TargetKind(Protocol):
    GROUP: str

    # fault: the kind's own declaration (the registry pairs them by name)
    def apply(self, runtime: FaultTarget, fault: Any, name: str, fault_id: str) -> Undo | None:
        ...


class StoreKind(Protocol):
    def strike(self, runtime: FaultTarget, fault: Any) -> StoreFault: ...


ON_TARGETS: dict[str, TargetKind] = {
    "kill": kill, "kill_in_claim_gap": kill_in_claim_gap, "pause": pause, "latency": latency,
    "partition": partition, "bandwidth": bandwidth, "reset_peer": reset_peer,
    "slow_close": slow_close, "toxic": toxic,
    "clock_skew": clock_skew, "cpu_hog": cpu_hog, "block_heartbeat": block_heartbeat,
    "heartbeat_lag": heartbeat_lag,
}
ON_STORE: dict[str, StoreKind] = {"valkey_restart": valkey_restart, "failover": failover}
KINDS = sorted([*ON_TARGETS, *ON_STORE])
