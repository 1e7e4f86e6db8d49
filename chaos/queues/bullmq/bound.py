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
from chaos.registry import BoundModel


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


class StalledCheckJudge:
    """``recovery_bound``'s per-recovery hook for BullMQ (``BoundModel.per_recovery``): each
    recovery judged on the stalled checks that ran around it, counted as it goes; the figures
    and words the report shows."""

    late_reason = "a stalled check it waited on came late"

    def __init__(self, sweeps: list[tuple[int, str, bool]], windows: FaultWindows,
                 lease_ms: int, interval_ms: int, limit_ms: int,
                 store_down: Sequence[tuple[int, int]]) -> None:
        self.checks = StalledChecks(sweeps, windows, lease_ms, interval_ms, limit_ms,
                                    store_down)
        self.sweeps = len(sweeps)
        self.lease_ms, self.interval_ms, self.limit_ms = lease_ms, interval_ms, limit_ms
        self.judged_on_checks = self.slowed = self.late = 0

    def __bool__(self) -> bool:
        """Whether the history shows the checks (else every recovery gets the worst case)."""
        return bool(self.checks)

    @property
    def base_bound_ms(self) -> int:
        """The bound before the gaps and the tolerance: S + max(L, S)."""
        return checks_on_time_bound_ms(self.lease_ms, self.interval_ms)

    def recovery(self, renewed_ts: int, reap_ts: int) -> RecoveryChecks:
        judged = self.checks.recovery(renewed_ts, reap_ts)
        self.judged_on_checks += judged.judged
        self.slowed += bool(judged.slow_gaps)
        self.late += bool(judged.late_checks)
        return judged

    def figures(self, renewal_to_reap_ms: Iterable[int]) -> dict[str, Any]:
        """The worst case against every formula; with the checks, what they showed."""
        figures = bound_comparison(self.lease_ms, self.interval_ms, renewal_to_reap_ms)
        figures["judged_per_recovery"] = per_recovery = bool(self)
        if per_recovery:
            figures.update(
                stalled_checks=len(self.checks.times),
                stalled_checks_turned_away=self.sweeps - len(self.checks.times),
                max_check_gap_ms=max(self.checks.gaps(), default=None),
                max_worker_check_gap_ms=max(self.checks.worker_gaps(), default=None),
                recoveries_judged_on_checks=self.judged_on_checks,
                recoveries_after_a_slow_gap=self.slowed,
                recoveries_with_late_checks=self.late)
        return figures

    def words(self) -> dict[str, str]:
        """The bound's words where the checks were judged per recovery (none otherwise)."""
        if not self:
            return {}
        return {"formula": "stalledInterval + max(lockDuration, stalledInterval) + each gap "
                           "between the stalled checks that ran beyond stalledInterval",
                "terms": f"BullMQ, per recovery on the stalled checks that ran: "
                         f"stalledInterval {self.interval_ms} + max(lockDuration "
                         f"{self.lease_ms}, stalledInterval)",
                "beyond": ", + each gap between them beyond stalledInterval"}

    def lines(self, figures: dict[str, Any]) -> list[str]:
        """The summary's lines for these figures."""
        lines = [
            f"  bullmq    renewal-to-reap ms max {_ms(figures['worst_renewal_to_reap_ms'])} "
            f"(n={figures['recoveries']}): lease + interval "
            f"{figures['lease_plus_interval_ms']} {_within(figures['within_lease_plus_interval'])}"
            f", S + max(L, S) {figures['checks_on_time_ms']} "
            f"{_within(figures['within_checks_on_time'])}, 2S + max(L, S) "
            f"{figures['bullmq_bound_ms']} {_within(figures['within_bullmq_bound'])}"]
        if figures["judged_per_recovery"]:
            lines.append(
                f"  checks    stalled checks ran {figures['stalled_checks']}, turned away "
                f"{figures['stalled_checks_turned_away']}; longest gap "
                f"{figures['max_check_gap_ms']} ms between checks that ran, "
                f"{figures['max_worker_check_gap_ms']} ms between one worker's (limit "
                f"{self.limit_ms}); recoveries behind a gap over S "
                f"{figures['recoveries_after_a_slow_gap']}, on late checks "
                f"{figures['recoveries_with_late_checks']}")
        return lines


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)


def _within(held: bool | None) -> str:
    return "(no recovery)" if held is None else "held" if held else "EXCEEDED"


def per_recovery_judge(facts: Any, config: Any,
                       store_down: Sequence[tuple[int, int]]) -> StalledCheckJudge:
    """``BoundModel.per_recovery``: from the replay's facts and the check config."""
    return StalledCheckJudge(facts.sweeps, facts.windows, config.lease_ms,
                             config.reap_interval_ms, config.sweep_limit_ms, store_down)


# The scenario's names as BullMQ's Worker options call them (docs/bullmq.md); "" a setting
# BullMQ has no equivalent of (it runs no reaper process).
SETTING_NAMES = {"lease_ms": "lockDuration", "reap_interval_ms": "stalledInterval",
                 "heartbeat_ms": "lockRenewTime", "max_stalls": "maxStalledCount",
                 "reap_limit": "", "reapers": ""}

# What recovery_bound, reap_prompt and reap_cadence check on a BullMQ history, in place of the
# reference protocol's lines: the bound BullMQ has.
CHECKS = {
    "recovery_bound": "every lease stranded by a cut-off fault (kill, pause, partition) is "
                      "returned by BullMQ's stalled check within stalledInterval + "
                      "max(lockDuration, stalledInterval) + tolerance_ms of its holder's last "
                      "renewal, plus each gap between the stalled checks that ran beyond "
                      "stalledInterval (2 x stalledInterval + ... without their record), while "
                      "every worker's checks run at most stalledInterval + tolerance_ms apart",
    "reap_prompt": "every lapsed lock, faulted or not, is returned within 2 x stalledInterval "
                   "+ max(lockDuration, stalledInterval) - lockDuration + reap_allowance_ms of "
                   "its deadline (server clock); a lock never returned counts as late once the "
                   "stalled check has run that long past its deadline",
    "reap_cadence": "every worker runs its stalled check (run or turned away by the "
                    "stalled-check key) at most stalledInterval + tolerance_ms after its "
                    "previous one, unless a fault holds it or the store is down; and the key "
                    "turns no check away more than stalledInterval after the last that ran",
}


def _terms(lease_ms: int, interval_ms: int) -> str:
    return (f"BullMQ: 2 x stalledInterval {interval_ms} + max(lockDuration {lease_ms}, "
            "stalledInterval)")


def _reap_lag_terms(lease_ms: int, interval_ms: int) -> str:
    return "BullMQ: the bound - lockDuration"


BOUND = BoundModel(
    bound_ms=bullmq_bound_ms,
    formula="2 x stalledInterval + max(lockDuration, stalledInterval)",
    letters="2R+max(L,R)",
    terms=_terms,
    reap_lag_terms=_reap_lag_terms,
    explained=("2R + max(L, R), BullMQ's (its stalled checks run on the workers, "
               "docs/bullmq.md); the verdict allows the tolerance beyond it"),
    recovered_by="BullMQ's stalled check",
    late="the stalled checks ran late",
    sweep="stalled check",
    interval_name="stalledInterval",
    sweep_slack="tolerance",
    setting_names=SETTING_NAMES,
    checks=CHECKS,
    per_recovery=per_recovery_judge,
    lease_floor_is_interval=True,
)
