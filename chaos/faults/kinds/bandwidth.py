"""bandwidth: a bandwidth toxic (rate KB/s) on the target's proxy."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.faults.toxics import add_toxics
from chaos.scenario.faults import Bandwidth

GROUP = "network"


def apply(runtime: FaultTarget, fault: Bandwidth, name: str,
          fault_id: str) -> Callable[[], None]:
    return add_toxics(runtime, name, fault_id, "bandwidth", {"rate": fault.rate_kb_s},
                      fault.stream, fault.toxicity)
