"""The recovery bound BullMQ really has (docs/bullmq.md), and the run's worst case against it.

BullMQ has no reaper: every worker runs ``moveStalledJobsToWait`` every ``stalledInterval`` S
(throttled to one run per S by a shared key). A run first returns the jobs an earlier run marked
(the ``stalled`` set) whose lock (``PX lockDuration`` L, renewed by the holder) is gone, then marks
every active job. A job whose holder last renewed at t is marked by the first run after t (at most
S later) and returned by the first run at or after t + L that follows it, so it is back by

    t + S + max(L, S)

"lease + one reap interval" (t + L + S) holds only when L >= S; with a shorter lock the job can
wait up to 2S. Its lapsed lock is returned at most S + max(0, S - L) after its deadline (t + L).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def bullmq_bound_ms(lease_ms: int, reap_interval_ms: int) -> int:
    """Renewal to recovery, at worst: stalledInterval + max(lockDuration, stalledInterval)."""
    return reap_interval_ms + max(lease_ms, reap_interval_ms)


def bullmq_reap_lag_ms(lease_ms: int, reap_interval_ms: int) -> int:
    """Lock deadline to recovery, at worst: the bound minus the lock."""
    return bullmq_bound_ms(lease_ms, reap_interval_ms) - lease_ms


def bound_comparison(lease_ms: int, reap_interval_ms: int,
                     renewal_to_reap_ms: Iterable[int]) -> dict[str, Any]:
    """The measured worst case (renewal to reap, ms) against both formulas, for the report."""
    samples = list(renewal_to_reap_ms)
    worst = max(samples) if samples else None
    lease_plus_interval = lease_ms + reap_interval_ms
    bullmq = bullmq_bound_ms(lease_ms, reap_interval_ms)
    return {
        "recoveries": len(samples),
        "worst_renewal_to_reap_ms": worst,
        "lease_plus_interval_ms": lease_plus_interval,
        "bullmq_bound_ms": bullmq,
        "within_lease_plus_interval": None if worst is None else worst <= lease_plus_interval,
        "within_bullmq_bound": None if worst is None else worst <= bullmq,
    }
