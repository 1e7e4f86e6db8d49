"""latency: a latency toxic (latency ± jitter ms) on the target's proxy."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.faults.toxics import add_toxics
from chaos.scenario.faults import Latency

GROUP = "network"


def apply(runtime: FaultTarget, fault: Latency, name: str, fault_id: str) -> Callable[[], None]:
    return add_toxics(runtime, name, fault_id, "latency",
                      {"latency": fault.latency_ms, "jitter": fault.jitter_ms or 0},
                      fault.stream, fault.toxicity)
