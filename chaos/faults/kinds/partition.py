"""partition: the target cut off from Valkey, until the heal.

How is the runtime's (``partition``): through the target's own Toxiproxy proxy, a timeout-0
toxic both ways (mode timeout: nothing passes and nothing closes while it holds; removing it
closes those connections, so the target reconnects after the heal) or the proxy disabled
(refuses new connections, drops the open ones at once); for an attached member, its partition
command, its heal command at the heal.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import Partition

GROUP = "network"


def apply(runtime: FaultTarget, fault: Partition, name: str,
          fault_id: str) -> Callable[[], None]:
    return runtime.partition(name, fault_id, fault.mode)
