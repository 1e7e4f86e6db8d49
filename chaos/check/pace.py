"""The run's pace: figures a change of the code moves whatever the reaper's phase against the
faults (docs/store.md, "trend"), as samples a comparison across runs can test.

- ``sweep_gap``: each sweeper's gaps between consecutive sweeps from the run's first phase on,
  where nothing held it (``SweepCadence.gaps``): the reaper's period itself;
- ``claim_wait``: each job's enqueue to its first claim (ms);
- ``completes_per_s``: accepted completes in each whole server second from the chaos phase's
  start to the last complete (one sample a second: the pool's throughput under the faults and
  while it works off their backlog);
- ``drain_ms`` (one a run): the drain phase's start to the last complete (0 when everything was
  done before the drain began; None without a drain phase).

Fault- and deadline-relative latencies (``recovery_samples``) carry where a fault falls against
the reaper's grid; these do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.check.cadence import SweepCadence
from chaos.check.verdict import LatencySummary

if TYPE_CHECKING:
    from chaos.check.replay import ReplayFacts

SAMPLE_KINDS = ("sweep_gap", "claim_wait", "completes_per_s")


@dataclass
class Pace:
    samples: dict[str, list[int]] = field(default_factory=dict)  # SAMPLE_KINDS
    drain_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """As report.json's ``pace``: a summary of each sample kind, and the drain."""
        return {**{kind: LatencySummary.of(values).__dict__
                   for kind, values in self.samples.items()}, "drain_ms": self.drain_ms}


def completes_per_second(facts: ReplayFacts) -> list[int]:
    """Completes in each whole server second from the chaos phase's start (the first phase's,
    without a chaos phase) to the last complete."""
    start = facts.chaos_ts if facts.chaos_ts is not None else facts.first_phase_ts
    end = facts.last_complete_ts
    if start is None or end is None:
        return []
    first, last = -(-start // 1000), end // 1000  # whole seconds only
    return [facts.completes_by_second.get(second, 0) for second in range(first, last)]


def pace(facts: ReplayFacts, sweep_limit_ms: int,
         store_down: list[tuple[int, int]]) -> Pace:
    cadence = SweepCadence(facts.sweeps, facts.windows, sweep_limit_ms, store_down,
                           since_ts=facts.first_phase_ts)
    gaps = [gap for sweeper in cadence.named() for gap in cadence.gaps(sweeper)]
    drain = None
    if facts.drain_ts is not None:
        last = facts.last_complete_ts
        drain = max(0, last - facts.drain_ts) if last is not None else 0
    return Pace({"sweep_gap": gaps, "claim_wait": list(facts.claim_waits),
                 "completes_per_s": completes_per_second(facts)}, drain)
