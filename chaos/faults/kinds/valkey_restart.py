"""valkey_restart: the runtime kills the run's valkey-server and restarts it after duration_ms."""

from __future__ import annotations

from chaos.faults.target import FaultTarget
from chaos.runtime.base import StoreFault
from chaos.scenario.faults import ValkeyRestart


def strike(runtime: FaultTarget, fault: ValkeyRestart) -> StoreFault:
    return runtime.restart_valkey(fault.duration_ms or 0)
