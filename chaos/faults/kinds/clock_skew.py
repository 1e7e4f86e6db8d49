"""clock_skew: rewrite the target's local clock offset; the heal sets it back to 0."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import ClockSkew

GROUP = "clock"


def apply(runtime: FaultTarget, fault: ClockSkew, name: str,
          fault_id: str) -> Callable[[], None]:
    runtime.set_clock_offset(name, fault.offset_ms)
    return lambda: runtime.set_clock_offset(name, 0)
