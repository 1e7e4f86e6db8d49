"""heartbeat_lag: an order the worker carries out on itself (its control file, then SIGUSR1).

The heal is only recorded: the worker tells its heartbeat of the jobs it finished, and stops
lagging, by itself when duration_ms is over.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import HeartbeatLag

GROUP = "stalled"


def apply(runtime: FaultTarget, fault: HeartbeatLag, name: str,
          fault_id: str) -> Callable[[], None]:
    runtime.control(name, "heartbeat_lag", fault.duration_ms, fault_id)
    return lambda: None
