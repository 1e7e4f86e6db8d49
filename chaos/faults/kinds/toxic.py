"""toxic: any Toxiproxy toxic type with the attributes given, on the target's proxy."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.faults.toxics import add_toxics
from chaos.scenario.faults import Toxic

GROUP = "network"


def apply(runtime: FaultTarget, fault: Toxic, name: str, fault_id: str) -> Callable[[], None]:
    return add_toxics(runtime, name, fault_id, fault.toxic, dict(fault.attributes or {}),
                      fault.stream, fault.toxicity)
