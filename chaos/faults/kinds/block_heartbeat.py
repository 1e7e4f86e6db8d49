"""block_heartbeat: an order the worker carries out on itself (its control file, then SIGUSR1).

The heal is only recorded: the worker's heartbeat resumes by itself when duration_ms is over.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import BlockHeartbeat

GROUP = "stalled"


def apply(runtime: FaultTarget, fault: BlockHeartbeat, name: str,
          fault_id: str) -> Callable[[], None]:
    runtime.control(name, "block_heartbeat", fault.duration_ms, fault_id)
    return lambda: None
