"""failover: the runtime moves the primary role to the replica (mode kill by default)."""

from __future__ import annotations

from chaos.faults.target import FaultTarget
from chaos.runtime.base import StoreFault
from chaos.scenario.faults import Failover


def strike(runtime: FaultTarget, fault: Failover) -> StoreFault:
    return runtime.failover(fault.mode or "kill", fault.duration_ms or 0)
