"""pause: SIGSTOP the worker's process group; the heal sends SIGCONT."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import Pause

GROUP = "process"


def apply(runtime: FaultTarget, fault: Pause, name: str, fault_id: str) -> Callable[[], None]:
    runtime.pause(name)
    return lambda: runtime.resume(name)
