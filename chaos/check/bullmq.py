"""The recovery bound BullMQ really has (docs/bullmq.md), judged per recovery on the stalled
checks the history shows, and the run's worst case against every formula.

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
refused, and each waits a full S more: one gap between runs grows to 2S:

    t + 2S + max(L, S)

(measured on BullMQ 6.7.0: 2672 ms from the renewal with L = 300, S = 1000, where the worker
killed had run the last check).

A gap longer than S comes about without a fault too: the worker whose check ran tries again
about S later, when its own key is about to expire, and can be turned away by it (timer and key
are both S long: a millisecond decides); the next check is then another worker's, up to S later
(measured: 927 ms with S = 500, the turned-away checker under no fault; docs/bullmq.md).

The history shows every check, those the key turned away too (``sweep`` events with the worker
whose connection made it and whether it ran), so each recovery is judged on the checks that
really ran (``StalledChecks``): every worker's checks around it came at most S + tolerance apart
(unless a fault held that worker between two), which is what "the checks run on time" means
and what a checker at half rate breaks whatever its phase; and the job is back by t + S + max(L,
S) + tolerance, plus each gap between the checks that ran, from the last one before the renewal
to the one that returned it, beyond S (a gap grows to 2S where the last checker died or was
turned away). A history without sweep events (recorded before they existed) is judged on the
worst case, 2S + max(L, S), for every recovery. ``reap_prompt`` keeps the worst case: a lapsed
lock is returned at most that bound - L after its deadline (t + L).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.check.cadence import SweepCadence
from chaos.history.windows import FaultWindows


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


@dataclass
class RecoveryChecks:
    """What the stalled checks a recovery waited on say of it: ``bound_ms`` from the renewal
    (tolerance left out), and the checks that came late."""

    bound_ms: int
    judged: bool  # False: no check seen around it, judged on the worst case
    slow_gaps: int = 0  # gaps between checks that ran longer than S
    late_checks: list[dict[str, Any]] = field(default_factory=list)


class StalledChecks:
    """Every stalled check of a history (``sweep`` events: server time, the worker whose
    connection made it, whether it ran or the ``stalled-check`` key turned it away) and the
    fault windows, to judge each recovery by the checks that really ran. One worker's checks
    are judged as any reaper's sweeps (``chaos.check.cadence``): at most S + tolerance apart,
    unless a fault held it or the store was down."""

    def __init__(self, sweeps: list[tuple[int, str, bool]], windows: FaultWindows,
                 lease_ms: int, interval_ms: int, limit_ms: int,
                 store_down: Sequence[tuple[int, int]] = ()) -> None:
        """``limit_ms``: the longest gap allowed between one worker's checks
        (``CheckConfig.sweep_limit_ms``: S + tolerance); ``store_down``: (down from, back at)
        per store fault."""
        self.times = sorted(ts for ts, _, ran in sweeps if ran)  # the checks that ran
        # each worker's checks, ran or turned away (each one its timer firing)
        self.cadence = SweepCadence(sweeps, windows, limit_ms, store_down)
        self.lease_ms, self.interval_ms = lease_ms, interval_ms

    def __bool__(self) -> bool:
        return bool(self.times)

    def gaps(self) -> list[int]:
        """Between consecutive checks that ran."""
        return [later - earlier for earlier, later in itertools.pairwise(self.times)]

    def worker_gaps(self) -> list[int]:
        """Between consecutive checks of one worker, where nothing held it."""
        return [gap for worker in self.cadence.named() for gap in self.cadence.gaps(worker)]

    def recovery(self, renewed_ts: int, reap_ts: int) -> RecoveryChecks:
        """A recovery from a renewal to the reap that returned the job: every worker's checks
        around it came every S + tolerance at most (no fault holding it between two), and its
        bound is S + max(L, S) plus each gap between the checks that ran beyond S."""
        interval = self.interval_ms
        cadence = self.cadence
        late = [{"checker": worker, "check_ts": earlier, "next_check_ts": later,
                 "gap_ms": later - earlier, "allowed_ms": cadence.limit_ms}
                for worker in cadence.named()  # (whose timer an unnamed check was is unknown)
                for earlier, later in cadence.late(worker, renewed_ts, reap_ts)]
        times = self.times
        first = bisect.bisect_right(times, renewed_ts)  # the first check after it
        last = bisect.bisect_right(times, reap_ts)  # past the reap's own check
        if first == 0 or first >= last:  # no check before the renewal, or none up to the reap
            return RecoveryChecks(bullmq_bound_ms(self.lease_ms, interval), False,
                                  late_checks=late)
        slow = [times[index] - times[index - 1] - interval for index in range(first, last)
                if times[index] - times[index - 1] > interval]
        return RecoveryChecks(checks_on_time_bound_ms(self.lease_ms, interval) + sum(slow),
                              True, len(slow), late)
