"""reset_peer: a reset_peer toxic (TCP RST after timeout ms) on the target's proxy."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.faults.toxics import add_toxics
from chaos.scenario.faults import ResetPeer

GROUP = "network"


def apply(runtime: FaultTarget, fault: ResetPeer, name: str,
          fault_id: str) -> Callable[[], None]:
    return add_toxics(runtime, name, fault_id, "reset_peer", {"timeout": fault.timeout_ms or 0},
                      fault.stream, fault.toxicity)
