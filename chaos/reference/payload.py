"""A job's payload (docs/sut.md): the JSON object ``{"handler_ms": int, "crash": bool, "pad":
str}`` the load sources enqueue, so any SUT's test handler knows how long to work and whether
to crash (a poison pill); ``pad`` is filler up to ``load.payload_bytes``.

The handler time is drawn from the scenario's handler distribution with a generator seeded by
the scenario's seed, so two runs of a scenario carry the same payloads. The reference worker
still draws its own handler times (seeded per worker, docs/design.md §2), so the runs of the
mutant zoo keep their timings; it reads ``crash`` from here.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from chaos.protocol.client import POISON


@dataclass(frozen=True)
class HandlerDistribution:
    distribution: str = "uniform"
    fixed_ms: int = 100
    min_ms: int = 50
    max_ms: int = 200
    median_ms: int = 100
    sigma: float = 0.5

    def draw_ms(self, rng: random.Random) -> float:
        if self.distribution == "fixed":
            return float(self.fixed_ms)
        if self.distribution == "uniform":
            return rng.uniform(self.min_ms, self.max_ms)
        return rng.lognormvariate(math.log(self.median_ms), self.sigma)


class PayloadMaker:
    """Payloads for one load source: handler times from ``handler`` with its own seeded
    generator, ``pad_bytes`` of filler each."""

    def __init__(self, handler: HandlerDistribution, pad_bytes: int, seed: int) -> None:
        self.handler = handler
        self.pad = "x" * pad_bytes
        self.rng = random.Random(seed)

    def make(self, crash: bool = False) -> str:
        handler_ms = round(self.handler.draw_ms(self.rng))
        return json.dumps({"handler_ms": handler_ms, "crash": crash, "pad": self.pad},
                          separators=(",", ":"))


def is_crash(payload: str) -> bool:
    """Does this payload order its handler to crash? (Also a bare ``poison`` payload, as
    enqueued by hand or by older tools.)"""
    if payload.startswith(POISON):
        return True
    try:
        decoded = json.loads(payload)
    except ValueError:
        return False
    return isinstance(decoded, dict) and decoded.get("crash") is True
