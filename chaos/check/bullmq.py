"""The recovery bound BullMQ really has (docs/bullmq.md), and the run's worst case against it.

BullMQ has no reaper: every worker runs ``moveStalledJobsToWait`` on a timer of its own, a
``stalledInterval`` S after its previous attempt, and a shared key (``SET stalled-check PX S``)
lets only one attempt in any S through. A run first returns the jobs an earlier run marked (the
``stalled`` set) whose lock (``PX lockDuration`` L, renewed by the holder) is gone, then marks
every active job. A job whose holder last renewed at t is marked by the first run after t and
returned by the first run at or after t + L that follows it.

While the worker whose run got through stays alive, its own next attempt gets through S later,
so runs are at most S apart and the job is back by t + S + max(L, S) ("checks on time"):
"lease + one reap interval" holds only when L >= S. But when that worker dies (or freezes) - as
it may, being the one a fault hits - every other worker's attempt in the S after its run was
refused, and each waits a full S more: one gap between runs grows to 2S. Hence the bound judged:

    t + 2S + max(L, S)

(measured on BullMQ 6.7.0: 2672 ms from the renewal with L = 300, S = 1000, where the worker
killed had run the last check). A lapsed lock is returned at most the bound - L after its
deadline (t + L).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def checks_on_time_bound_ms(lease_ms: int, reap_interval_ms: int) -> int:
    """Renewal to recovery while the stalled checks run every S: S + max(L, S)."""
    return reap_interval_ms + max(lease_ms, reap_interval_ms)


def bullmq_bound_ms(lease_ms: int, reap_interval_ms: int) -> int:
    """Renewal to recovery, at worst, with the worker that ran the last check gone:
    2S + max(L, S)."""
    return 2 * reap_interval_ms + max(lease_ms, reap_interval_ms)


def bullmq_reap_lag_ms(lease_ms: int, reap_interval_ms: int) -> int:
    """Lock deadline to recovery, at worst: the bound minus the lock."""
    return bullmq_bound_ms(lease_ms, reap_interval_ms) - lease_ms


def bound_comparison(lease_ms: int, reap_interval_ms: int,
                     renewal_to_reap_ms: Iterable[int]) -> dict[str, Any]:
    """The measured worst case (renewal to reap, ms) against each formula, for the report."""
    samples = list(renewal_to_reap_ms)
    worst = max(samples) if samples else None
    formulas = {
        "lease_plus_interval": lease_ms + reap_interval_ms,
        "checks_on_time": checks_on_time_bound_ms(lease_ms, reap_interval_ms),
        "bullmq_bound": bullmq_bound_ms(lease_ms, reap_interval_ms),
    }
    figures: dict[str, Any] = {"recoveries": len(samples), "worst_renewal_to_reap_ms": worst}
    for name, bound in formulas.items():
        figures[f"{name}_ms"] = bound
        figures[f"within_{name}"] = None if worst is None else worst <= bound
    return figures
