"""kill: SIGKILL the worker with its process group; nothing heals it."""

from __future__ import annotations

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import Kill

GROUP = "process"


def apply(runtime: FaultTarget, fault: Kill, name: str, fault_id: str) -> None:
    runtime.kill(name)
