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
    "group_limit",
    "paused_group",
    "flow_order",
)
HISTORY_SOURCES = ("scripts", "monitor", "both")  # history.source: what the checker judges
# The checker's default allowance for the reaper's own wake-up and sweep (check.tolerance_ms for
# recovery_bound, check.reap_allowance_ms for reap_prompt): small, so a reaper that takes a
# lapsed lease a good part of an interval late is caught.
DEFAULT_ALLOWANCE_MS = 100
# reap_cadence's (check.sweep_allowance_ms): the same wake-up, but judged at every tick of the
# run, not only where a lease lapsed, so it must cover the scheduler's worst lateness on a
# loaded machine, not its usual: a sound reaper was seen up to 97 ms late (docs/design.md §4).
# Twice that still fails a reaper that skips a tick in two (a 2R gap) by 50 ms.
DEFAULT_SWEEP_ALLOWANCE_MS = 200
