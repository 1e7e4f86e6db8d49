"""The vocabulary the scenario file shares with the stages: protocol variant names and invariant
names. The scenario validates against these without importing the stages that implement them;
the protocol and the checker assert at import time that they implement exactly these."""

from __future__ import annotations

PROTOCOLS = (
    "sound",
    "unfenced-complete",
    "client-clock",
    "nonatomic-reap",
    "single-batch-reaper",
    "nonatomic-claim",
    "extend-resurrects",
    "no-reaper",
)
INVARIANTS = (
    "no_loss",
    "no_double_completion",
    "recovery_bound",
    "no_premature_reap",
    "exclusive_lease",
    "attempts_monotonic",
    "stall_limit",
)
