"""slow_close: a slow_close toxic (close delayed by delay ms) on the target's proxy."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.faults.toxics import add_toxics
from chaos.scenario.faults import SlowClose

GROUP = "network"


def apply(runtime: FaultTarget, fault: SlowClose, name: str,
          fault_id: str) -> Callable[[], None]:
    return add_toxics(runtime, name, fault_id, "slow_close", {"delay": fault.delay_ms},
                      fault.stream, fault.toxicity)
