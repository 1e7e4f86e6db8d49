"""partition: a timeout-0 toxic both ways (mode timeout), or the target's proxy disabled.

Timeout 0: nothing passes and nothing closes while it holds; removing it closes those
connections (Toxiproxy's own behaviour), so the target reconnects after the heal. A disabled
proxy refuses new connections and drops the open ones at once.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.faults.toxics import add_toxics
from chaos.scenario.faults import Partition

GROUP = "network"


def apply(runtime: FaultTarget, fault: Partition, name: str,
          fault_id: str) -> Callable[[], None]:
    if fault.mode == "disable":
        runtime.set_link_enabled(name, False)
        return lambda: runtime.set_link_enabled(name, True)
    return add_toxics(runtime, name, fault_id, "timeout", {"timeout": 0})
