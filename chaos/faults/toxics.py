"""Network faults as Toxiproxy toxics on the target's own proxy, removed again at the heal."""

from __future__ import annotations

from collections.abc import Callable

from chaos.faults.target import FaultTarget
from chaos.network.client import ToxicSpec

BOTH = ["upstream", "downstream"]


def add_toxics(runtime: FaultTarget, name: str, fault_id: str, toxic_type: str,
               attributes: dict[str, int | float], stream: str | None = None,
               toxicity: float | None = None) -> Callable[[], None]:
    """Add one toxic per stream (both unless ``stream`` says one) to ``name``'s proxy; returns
    what removes them."""
    streams = BOTH if stream in (None, "both") else [str(stream)]
    toxics = [ToxicSpec(f"{fault_id}_{toxic_type}_{each}", toxic_type, each, dict(attributes),
                        1.0 if toxicity is None else toxicity) for each in streams]
    runtime.add_toxics(name, toxics)
    return lambda: runtime.remove_toxics(name, toxics)
