"""The vocabulary the scenario file shares with the stages: protocol variant names, invariant
names and the checker's default allowance. The scenario validates against these without
importing the stages that implement them; the protocol and the checker assert at import time
that they implement exactly these."""

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
    "grace-reaper",
    "idle-backoff-reaper",
    "reused-token",
    "short-lease",
    "complete-skips-active",
    "padded-lease",
    "sparse-reaper",
)
INVARIANTS = (
    "no_loss",
    "no_double_completion",
    "recovery_bound",
    "reap_prompt",
    "no_premature_reap",
    "exclusive_lease",
    "lease_length",
    "attempts_monotonic",
    "stall_limit",
    "needless_limit",
    "live_lease_honoured",
    "reap_cadence",
)
HISTORY_SOURCES = ("scripts", "monitor", "both")  # history.source: what the checker judges
# The checker's default allowance for the reaper's own wake-up and sweep (check.tolerance_ms for
# recovery_bound, check.reap_allowance_ms for reap_prompt and reap_cadence): small, so a reaper
# that takes a lapsed lease a good part of an interval late, or sweeps late, is caught.
DEFAULT_ALLOWANCE_MS = 100
