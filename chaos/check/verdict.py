"""What the checker hands back: its configuration, each invariant's result, and the verdict.

``Verdict.as_dict()`` is the checker's part of ``report.json`` (schema 3: see
docs/reports-schema.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.check.evidence import BlindSpots
from chaos.check.exercised import Exercise
from chaos.history.events import Event
from chaos.history.schema import Phase, Run
from chaos.names import DEFAULT_ALLOWANCE_MS, DEFAULT_SWEEP_ALLOWANCE_MS, INVARIANTS
from chaos.registry import BoundModel, bound_model

UNDRAINED_LISTED = 1000  # undrained jobs listed by id in report.json; the count is complete
EXAMPLES = 10  # offending cases listed per invariant; the counts are always complete
# Every invariant, in report order, with the one line junit.xml and report.html show for it.
WHAT_IT_CHECKS = {
    "no_loss": "every enqueued job has an accepted complete (or, with max_stalls, a dead "
               "letter) after the drain; a job that left the queue without one is lost, a job "
               "still pending, leased or scheduled when the drain ends is undrained (verdict "
               "unknown)",
    "no_double_completion": "no job has more than one accepted complete",
    "recovery_bound": "every lease stranded by a cut-off fault (kill, pause, partition) is "
                      "reaped within lease_ms + reap_interval_ms + tolerance_ms of its "
                      "holder's last renewal",
    "reap_prompt": "every lapsed lease, faulted or not, is reaped within reap_interval_ms + "
                   "reap_allowance_ms of its deadline (server clock); a lease never reaped "
                   "counts as late once the reaper has run that long past its deadline",
    "no_premature_reap": "no lease is reaped before its deadline, and no reap of a lease no "
                         "longer live (already reaped or completed)",
    "exclusive_lease": "every accepted extend/complete comes from the worker holding the live "
                       "lease, with its attempt",
    "lease_length": "every lease granted (claim or extend) runs lease_ms (± 1 ms) from its "
                    "grant to the deadline it wrote to active, and records that length",
    "attempts_monotonic": "every claim of a job carries a higher attempt (fencing token) than "
                          "any earlier claim of it",
    "stall_limit": "with max_stalls set, a job is recovered at most max_stalls times and "
                   "dead-lettered only after exactly max_stalls",
    "needless_limit": "with max_needless set, at most that many needless redeliveries (a "
                      "lease reaped from a holder no fault cut off)",
    "live_lease_honoured": "no extend or finish of the live lease's holder is refused before "
                           "its deadline while no fault touches the holder or the store",
    "reap_cadence": "every reaper the queue promises a cadence of sweeps at least every "
                    "reap_interval_ms + sweep_allowance_ms (server clock), swept empty or not, "
                    "unless a fault holds it or the store is down",
    "group_limit": "a group's lane never has more leases live at once than the group's "
                   "limit (EchoMQ's glimit, as the history shows it set): a claim that makes "
                   "one more is an offence; not judged without grouped claims and a limit",
    "paused_group": "a paused group's jobs wait: no claim serves its lane until it is resumed, "
                    "and a job still waiting in a paused lane when the drain ends is held "
                    "(neither lost nor undrained) only where the store lists it there; not "
                    "judged without a pause",
    "flow_order": "a flow's parent (EchoMQ.Flows) is released and claimed only once each of "
                  "its children has settled (completed, or failed for good); not judged "
                  "without flows",
}
assert tuple(WHAT_IT_CHECKS) == INVARIANTS, "chaos.names lists the invariants judged here"
# Handler-duration buckets for needless_by_duration, as multiples of lease_ms: [low, high).
DURATION_BUCKETS = ((0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, 3.0),
                    (3.0, math.inf))


@dataclass(frozen=True)
class CheckConfig:
    lease_ms: int
    reap_interval_ms: int
    # recovery_bound's allowance beyond lease + interval: the reaper's wake-up and its sweep.
    tolerance_ms: int = DEFAULT_ALLOWANCE_MS
    # Invariants judged and reported but left out of the verdict: what a store set up to lose
    # acknowledged writes (fsync everysec, failover without WAIT) may break by design.
    report_only: tuple[str, ...] = ()
    max_stalls: int = 0  # the reaper's stall limit; 0: none (nothing may be dead-lettered)
    # reap_prompt's allowance beyond one reap interval after a deadline: the same wake-up and
    # sweep, judged on every lease (a lazy or backing-off reaper overshoots it).
    reap_allowance_ms: int = DEFAULT_ALLOWANCE_MS
    max_needless: int | None = None  # needless redeliveries tolerated; None: not judged
    dialect: str = ""  # the family that made the history (the run event's); "" the reference
    # The processes the queue family promises sweep at least every reap interval (the run
    # event's ``sweepers``); empty: reap_cadence is not judged.
    sweepers: tuple[str, ...] = ()
    # reap_cadence's allowance beyond one interval between two sweeps of a reaper: its wake-up
    # judged at every tick, so the worst on a loaded machine (chaos.names).
    sweep_allowance_ms: int = DEFAULT_SWEEP_ALLOWANCE_MS
    # "" the sweepers sweep on a grid; "loop": once a consumer loop (``chaos.check.cadence``,
    # ``ConsumerLoops``), the run event's ``reap_rhythm``
    reap_rhythm: str = ""

    @property
    def model(self) -> BoundModel:
        """The recovery bound of the family the history names (``chaos.registry``)."""
        return bound_model(self.dialect)

    @property
    def bound_ms(self) -> int:
        return self.model.bound_ms(self.lease_ms, self.reap_interval_ms) + self.tolerance_ms

    @property
    def reap_limit_ms(self) -> int:
        """reap_prompt's limit: a lapsed lease is reaped this long after its deadline, at most
        (the family's bound less the lease, + the allowance)."""
        return self.model.reap_lag_ms(self.lease_ms, self.reap_interval_ms) + self.reap_allowance_ms

    @property
    def sweep_limit_ms(self) -> int:
        """reap_cadence's limit: the longest gap between two sweeps of one sweeper. A reaper
        sweeps every reap interval, plus the allowance for its wake-up and the sweep itself; a
        family whose sweeps its recovery bound judges per recovery at the tolerance (BullMQ's
        stalled checks) is held to that instead (``BoundModel.sweep_slack``)."""
        slack = (self.tolerance_ms if self.model.sweep_slack == "tolerance"
                 else self.sweep_allowance_ms)
        return self.reap_interval_ms + slack

    @classmethod
    def from_history(cls, events: Iterable[Event]) -> CheckConfig:
        """From the ``run`` event the runner writes first."""
        for event in events:
            if event.type == Run.TYPE:
                return cls.from_run(Run.decode(event))
        raise ValueError("history has no 'run' event: cannot tell lease_ms and reap_interval_ms")

    @classmethod
    def from_run(cls, run: Run) -> CheckConfig:
        if run.lease_ms is None or run.reap_interval_ms is None:
            raise ValueError("the 'run' event lacks lease_ms or reap_interval_ms")
        return cls(
            lease_ms=run.lease_ms,
            reap_interval_ms=run.reap_interval_ms,
            tolerance_ms=DEFAULT_ALLOWANCE_MS if run.tolerance_ms is None else run.tolerance_ms,
            report_only=run.report_only,
            max_stalls=run.max_stalls or 0,
            reap_allowance_ms=(DEFAULT_ALLOWANCE_MS if run.reap_allowance_ms is None
                               else run.reap_allowance_ms),
            max_needless=run.max_needless,
            dialect=run.dialect,
            sweepers=run.sweepers,
            sweep_allowance_ms=(DEFAULT_SWEEP_ALLOWANCE_MS if run.sweep_allowance_ms is None
                                else run.sweep_allowance_ms),
            reap_rhythm=run.reap_rhythm,
        )


@dataclass
class LatencySummary:
    count: int = 0
    min_ms: int | None = None
    p50_ms: int | None = None
    p99_ms: int | None = None
    max_ms: int | None = None

    @classmethod
    def of(cls, values: list[int]) -> LatencySummary:
        if not values:
            return cls()
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            min_ms=ordered[0],
            p50_ms=percentile(ordered, 50),
            p99_ms=percentile(ordered, 99),
            max_ms=ordered[-1],
        )


def run_completed(events: Iterable[Event]) -> bool:
    """Did the run reach its end normally (not aborted)? Only then is the drain judged."""
    return any(e.type == Phase.TYPE and Phase.decode(e).ended_normally for e in events)


def percentile(ordered: list[int], pct: float) -> int:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Offences:
    """Offending observations of one invariant: all counted, the first few kept as examples.

    With ``blind`` (the history's blind spots) and ``needs`` (the evidence the invariant needs,
    ``chaos.check.evidence.NEEDS``), an offence on a job that evidence was missing for by the
    time it was proven is counted apart as ``blinded``: it may be the missing call's doing."""

    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    # Server time at which the history first showed one (how fast a bug is caught).
    first_ts: int | None = None
    blind: BlindSpots | None = None
    needs: frozenset[str] = frozenset()
    blinded: int = 0
    blinded_examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, example: dict[str, Any], at_ts: int, proven_ts: int | None = None) -> None:
        """``proven_ts``: when the history proved it (default ``at_ts``; ``sys.maxsize`` for
        what only the run's end proves, a loss)."""
        blind = self.blind
        if blind and blind.covers(example.get("job"), at_ts if proven_ts is None
                                  else proven_ts, self.needs):
            self.blinded += 1
            if len(self.blinded_examples) < EXAMPLES:
                self.blinded_examples.append(example)
            return
        self.count += 1
        if self.first_ts is None or at_ts < self.first_ts:
            self.first_ts = at_ts
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)

    @property
    def evidence_missing(self) -> bool:
        """Is evidence this invariant needs missing anywhere in the history?"""
        return self.blind is not None and bool(self.blind) and self.blind.lacks_any(self.needs)


@dataclass
class InvariantResult:
    ok: bool  # no offence stands on the evidence
    violations: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    # Server time at which the history first showed a violation (how fast a bug is caught).
    first_violation_ts: int | None = None
    # ok, but evidence it needs is missing (chaos.check.evidence): neither passed nor failed
    blind: bool = False
    blinded: int = 0  # offences on jobs whose evidence is missing: not counted as violations
    blinded_examples: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""  # the judge raised (its traceback's last line): neither passed nor failed

    @classmethod
    def judged(cls, offences: Offences, **figures: Any) -> InvariantResult:
        ok = offences.count == 0
        return cls(ok, offences.count, offences.examples, figures, offences.first_ts,
                   blind=ok and offences.evidence_missing, blinded=offences.blinded,
                   blinded_examples=offences.blinded_examples)

    @property
    def status(self) -> str:
        """ok | fail | blind | error."""
        return ("error" if self.error else "fail" if not self.ok else
                "blind" if self.blind else "ok")

    def as_dict(self) -> dict[str, Any]:
        found = {"ok": self.ok, "status": self.status, "violations": self.violations,
                 **self.figures, "first_violation_ts": self.first_violation_ts,
                 "examples": self.examples}
        if self.blind or self.blinded:
            found.update(blind=self.blind, blinded=self.blinded,
                         blinded_examples=self.blinded_examples)
        if self.error:
            found["error"] = self.error
        return found


@dataclass
class JobCounts:
    enqueued: int = 0
    completed: int = 0
    lost: int = 0
    double_completed: int = 0
    unexpected: int = 0  # completed but never enqueued
    # the outcome: enqueued, never completed, dead-lettered past the stall limit (a job moved to
    # the dead set otherwise is counted by DeadLetter.moved_to_dead, not here)
    dead_lettered: int = 0
    undrained: int = 0  # still pending or leased when the drain ended: neither done nor lost
    held: int = 0  # waiting in a paused group's lane at the end, as the store listed it
    removed: int = 0  # removed by a user (EchoMQ's remove_job), never completed: not lost


@dataclass
class Outcomes:
    """Every job's outcome at the end of the drain, in Jepsen's queue vocabulary. Each enqueued
    job is exactly one of completed, dead_lettered, lost, undrained, held, removed, duplicated;
    unexpected jobs were completed but never enqueued. Counted only for a finished run
    (``judged``)."""

    completed: int = 0  # exactly one accepted complete
    dead_lettered: int = 0  # no accepted complete; dead-lettered (a stall limit is on)
    lost: int = 0  # left the queue neither completed nor dead-lettered (or dead with no limit)
    undrained: int = 0  # still pending or leased when the drain ended (it had not emptied)
    held: int = 0  # waiting in a paused group's lane (its operator's choice), the store agreeing
    removed: int = 0  # removed by a user (EchoMQ's remove_job) before it completed
    duplicated: int = 0  # more than one accepted complete
    unexpected: int = 0  # completed, never enqueued
    judged: bool = True


@dataclass
class DeadLetter:
    """Jobs the reaper moved to the dead set, and how many recoveries each had before.

    ``moved_to_dead`` counts every job with a ``dead`` event, whatever became of it after:
    with no stall limit (a loss, and a stall_limit violation), completed after all, or never
    enqueued. ``JobCounts.dead_lettered`` / ``Outcomes.dead_lettered`` is the outcome: an
    enqueued job never completed, dead-lettered under a stall limit (schema 3 renamed this
    one's ``jobs``: docs/reports-schema.md)."""

    max_stalls: int = 0
    moved_to_dead: int = 0
    poison: int = 0  # of which enqueued as poison jobs
    poison_enqueued: int = 0
    # how many recoveries (reaps) each dead job had before its dead event -> how many jobs
    recoveries_before_dead: dict[str, int] = field(default_factory=dict)


@dataclass
class Redeliveries:
    needed: int = 0  # the holder was killed, frozen or cut off: recovery did its job
    # the holder was alive and could reach Valkey (maybe slowly): the lease was too short for it
    needless: int = 0


@dataclass
class Verdict:
    passed: bool
    config: CheckConfig
    invariants: dict[str, InvariantResult]
    jobs: JobCounts
    redeliveries: Redeliveries
    recovery: dict[str, LatencySummary]
    stranded: int
    faults: int
    rejected: dict[str, int]
    events: int
    throughput_per_s: float  # accepted completes per second, first enqueue to last complete
    # The latencies behind ``recovery`` (ms after the fault), so runs can be pooled (``sweep``).
    recovery_samples: dict[str, list[int]] = field(default_factory=dict)
    # The run's pace (chaos.check.pace.Pace: sweep gaps, claim waits, completes a second, the
    # drain): what a code change moves whatever the reaper's phase against the faults.
    pace: Any = None
    final: bool = True  # the end-of-run judgements (no loss, never recovered) were made
    # Per store fault (valkey_restart, failover): its figure; the clients' recovery is filled in
    # by ``store_fault_recovery``, a second pass over the history made only when there are some.
    store_faults: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Outcomes = field(default_factory=Outcomes)
    dead_letter: DeadLetter = field(default_factory=DeadLetter)
    needless_by_fault: dict[str, int] = field(default_factory=dict)
    needless_by_duration: list[dict[str, Any]] = field(default_factory=list)
    stranded_leases: list[StrandedLease] = field(default_factory=list)  # ``stranded`` of them
    # Leases held when a fault only slowed their holder (latency, bandwidth, clock skew,
    # block_heartbeat): not stranded, a reap of one is a needless redelivery.
    slowed: int = 0
    # Jobs still pending or leased when the drain ended ({"job", "state"}, the first
    # UNDRAINED_LISTED): the run could not tell whether the queue would have finished them.
    undrained: list[dict[str, Any]] = field(default_factory=list)
    undrained_count: int = 0
    # What the history says of the run itself, noted in the checker's own pass so a caller
    # (``chaos.run.evaluate``) need not wrap every event: the first run event, the last end
    # event, and the server time the history spans (None: no events).
    run_event: Run | None = None
    end_event: Phase | None = None
    span_ms: int | None = None

    # What the history lacks (chaos.check.evidence.BlindSpots.summary): why invariants are blind.
    evidence_missing: list[dict[str, Any]] = field(default_factory=list)
    # Planned faults that found no target when due ({"kind", "target", "ts"}): the run did not
    # test what its scenario says, so it is no pass.
    faults_skipped: list[dict[str, Any]] = field(default_factory=list)
    # Did a fault strand a lease, so recovery was put to the test (chaos.check.exercised)?
    exercise: Exercise = field(default_factory=lambda: Exercise(None, "not judged"))

    def _judged(self) -> list[InvariantResult]:
        """The results that make the verdict (report-only ones are left out)."""
        return [result for name, result in self.invariants.items()
                if name not in self.config.report_only]

    @property
    def unknown(self) -> bool:
        """No invariant broken, and none raised, but jobs were left undrained, evidence an
        invariant needs is missing, or a planned fault never found its target: the checker
        cannot decide (Jepsen's ``:unknown``): never a pass, never a fail."""
        judged = self._judged()
        if any(result.status in ("fail", "error") for result in judged):
            return False
        return (self.undrained_count > 0 or any(result.blind for result in judged)
                or bool(self.faults_skipped))

    @property
    def checker_error(self) -> bool:
        """No invariant broken, but one judge raised: its verdict is neither pass nor fail."""
        judged = self._judged()
        return any(result.error for result in judged) and not any(
            result.status == "fail" for result in judged)

    @property
    def word(self) -> str:
        """pass | fail | unknown | checker_error: what the history says of a finished run."""
        return ("checker_error" if self.checker_error else "unknown" if self.unknown
                else "pass" if self.passed else "fail")

    def failed_invariants(self) -> list[str]:
        return [name for name, result in self.invariants.items() if not result.ok]

    def blind_invariants(self) -> list[str]:
        return [name for name, result in self.invariants.items() if result.status == "blind"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "invariants": {name: result.as_dict() for name, result in self.invariants.items()},
            "jobs": asdict(self.jobs),
            "redeliveries": asdict(self.redeliveries),
            "recovery": {name: asdict(summary) for name, summary in self.recovery.items()},
            "stranded_lease_count": self.stranded,
            "faults": self.faults,
            "rejected": self.rejected,
            "events": self.events,
            "throughput_per_s": self.throughput_per_s,
            **({"pace": self.pace.as_dict()} if self.pace is not None else {}),
            "report_only": list(self.config.report_only),
            "store_faults": self.store_faults,
            "outcomes": asdict(self.outcomes),
            "dead_letter": asdict(self.dead_letter),
            "needless_by_fault": self.needless_by_fault,
            "needless_by_duration": self.needless_by_duration,
            "stranded_leases": [item.as_dict() for item in self.stranded_leases],
            "slowed_lease_count": self.slowed,
            "undrained": {"count": self.undrained_count, "jobs": self.undrained},
            "evidence": {"missing": self.evidence_missing,
                         "blind_invariants": self.blind_invariants(),
                         "blinded_offences": {name: result.blinded for name, result
                                              in self.invariants.items() if result.blinded}},
            "checker_errors": {name: result.error for name, result in self.invariants.items()
                               if result.error},
            "faults_skipped": self.faults_skipped,
            "exercised": self.exercise.exercised,
            "exercise": self.exercise.as_dict(),
        }


@dataclass
class StrandedLease:
    """A lease its holder held when a fault hit it; open until the holder renews it or it ends.
    The verdict keeps them all, so reports can draw each recovery (fault → reap → re-claim)."""

    job_id: str
    attempt: int
    worker: str
    fault_ts: int
    fault_id: str
    renewed_ts: int = 0  # the holder's last renewal (claim or accepted extend) before the fault
    reap_ts: int | None = None
    reclaim_ts: int | None = None
    recomplete_ts: int | None = None
    dismissed: bool = False  # its holder acted after the fault: it was not stranded after all

    def as_dict(self) -> dict[str, Any]:
        """As report.json lists it (``dismissed`` is the replay's own note, always false here)."""
        return {"job": self.job_id, "attempt": self.attempt, "worker": self.worker,
                "fault_id": self.fault_id, "fault_ts": self.fault_ts,
                "renewed_ts": self.renewed_ts, "reap_ts": self.reap_ts,
                "reclaim_ts": self.reclaim_ts, "recomplete_ts": self.recomplete_ts}


