"""The checker: a pure function from a history to a verdict (DESIGN §4).

It never talks to Valkey. It replays the history in stream order, keeping for every job its
current lease (attempt, holder, deadline), and for every worker the intervals during which a
fault held it (killed: from the kill on; paused or partitioned: until healed). A reap counts as
a needed redelivery when the holder was cut off (fault event ``cuts_off`` = 1) and as a needless
one when it was alive and only slowed (latency, bandwidth, clock skew).

Invariants:
  no_loss               every enqueued job has an accepted complete by the end of the drain
                        (or was dead-lettered, when a stall limit ``max_stalls`` is on)
  no_double_completion  at most one accepted complete per job
  recovery_bound        a lease stranded by a fault is reaped within lease_ms + reap_interval_ms
                        + tolerance_ms of the fault
  no_premature_reap     no lease is reaped before its deadline (last renewal + lease_ms)
  exclusive_lease       no accepted extend or complete from anything but the live lease
  attempts_monotonic    every claim of a job carries a higher attempt (fencing token) than any
                        earlier claim of it: a store that rolls the counter back (a crash
                        without fsync, a failover to a lagging replica) hands one lease out twice
  stall_limit           with ``max_stalls`` on: a job is recovered (reaped) at most max_stalls
                        times, and a dead-lettered job exactly max_stalls times before its
                        ``dead`` event; without it, nothing is ever dead-lettered

Figures for store faults (``valkey_restart``, ``failover``: fault events carrying ``killed_ts``):
per fault, how long after the kill each worker's next transition (and the producer's next
enqueue) landed: the time clients took to recover.

More figures: every job's outcome at the end of the drain in Jepsen's vocabulary (``outcomes``:
completed, dead_lettered, lost, duplicated, unexpected), the dead-letter figures
(``dead_letter``), needless redeliveries by the fault the holder was under (``needless_by_fault``)
and by how long the redelivered attempt's handler ran, as a multiple of the lease
(``needless_by_duration``).
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.history.events import Event, seq_key
from chaos.names import INVARIANTS

EXAMPLES = 10  # offending cases listed per invariant; the counts are always complete
# Every invariant, in report order, with the one line junit.xml and report.html show for it.
WHAT_IT_CHECKS = {
    "no_loss": "every enqueued job has an accepted complete after the drain",
    "no_double_completion": "no job has more than one accepted complete",
    "recovery_bound": "every stranded lease is reaped within lease_ms + reap_interval_ms "
                      "+ tolerance_ms of its fault",
    "no_premature_reap": "no lease is reaped before its deadline",
    "exclusive_lease": "no accepted extend/complete from anything but the live lease",
    "attempts_monotonic": "every claim of a job carries a higher attempt (fencing token) than "
                          "any earlier claim of it",
    "stall_limit": "with max_stalls set, a job is recovered at most max_stalls times and "
                   "dead-lettered only after exactly max_stalls",
}
assert tuple(WHAT_IT_CHECKS) == INVARIANTS, "chaos.names lists the invariants judged here"
# Handler-duration buckets for needless_by_duration, as multiples of lease_ms: [low, high).
DURATION_BUCKETS = ((0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, 3.0),
                    (3.0, math.inf))
CLIENT_EVENTS = ("claim", "extend", "complete", "extend_rejected", "complete_rejected")


@dataclass(frozen=True)
class CheckConfig:
    lease_ms: int
    reap_interval_ms: int
    tolerance_ms: int = 250
    # Invariants judged and reported but left out of the verdict: what a store set up to lose
    # acknowledged writes (fsync everysec, failover without WAIT) may break by design.
    report_only: tuple[str, ...] = ()
    max_stalls: int = 0  # the reaper's stall limit; 0: none (nothing may be dead-lettered)

    @property
    def bound_ms(self) -> int:
        return self.lease_ms + self.reap_interval_ms + self.tolerance_ms

    @classmethod
    def from_history(cls, events: Iterable[Event]) -> CheckConfig:
        """From the ``run`` event the runner writes first."""
        for event in events:
            if event.type == "run":
                if event.lease_ms is None or "reap_interval_ms" not in event.extra:
                    raise ValueError("the 'run' event lacks lease_ms or reap_interval_ms")
                return cls(
                    lease_ms=event.lease_ms,
                    reap_interval_ms=int(event.extra["reap_interval_ms"]),
                    tolerance_ms=int(event.extra.get("tolerance_ms", 250)),
                    report_only=tuple(n for n in event.extra.get("report_only", "").split(",")
                                      if n),
                    max_stalls=int(event.extra.get("max_stalls") or 0),
                )
        raise ValueError("history has no 'run' event: cannot tell lease_ms and reap_interval_ms")


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
    return any(e.type == "phase" and e.extra.get("phase") == "end"
               and e.extra.get("aborted", "0") == "0" for e in events)


def percentile(ordered: list[int], pct: float) -> int:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class InvariantResult:
    ok: bool
    violations: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    # Server time at which the history first showed a violation (how fast a bug is caught).
    first_violation_ts: int | None = None

    def flag(self, example: dict[str, Any], at_ts: int) -> None:
        self.ok = False
        self.violations += 1
        if self.first_violation_ts is None or at_ts < self.first_violation_ts:
            self.first_violation_ts = at_ts
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "violations": self.violations, **self.figures,
                "first_violation_ts": self.first_violation_ts, "examples": self.examples}


@dataclass
class JobCounts:
    enqueued: int = 0
    completed: int = 0
    lost: int = 0
    double_completed: int = 0
    unexpected: int = 0  # completed but never enqueued
    dead_lettered: int = 0  # never completed, dead-lettered past the stall limit


@dataclass
class Outcomes:
    """Every job's outcome at the end of the drain, in Jepsen's queue vocabulary. Each enqueued
    job is exactly one of completed, dead_lettered, lost, duplicated; unexpected jobs were
    completed but never enqueued. Counted only for a finished run (``judged``)."""

    completed: int = 0  # exactly one accepted complete
    dead_lettered: int = 0  # no accepted complete; dead-lettered (a stall limit is on)
    lost: int = 0  # neither completed nor dead-lettered (or dead-lettered with no stall limit)
    duplicated: int = 0  # more than one accepted complete
    unexpected: int = 0  # completed, never enqueued
    judged: bool = True


@dataclass
class DeadLetter:
    """Jobs dead-lettered past the stall limit, and how many recoveries each had before."""

    max_stalls: int = 0
    jobs: int = 0
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
    final: bool = True  # the end-of-run judgements (no loss, never recovered) were made
    # Per store fault (valkey_restart, failover): its figure; the clients' recovery is filled in
    # by ``store_fault_recovery``, a second pass over the history made only when there are some.
    store_faults: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Outcomes = field(default_factory=Outcomes)
    dead_letter: DeadLetter = field(default_factory=DeadLetter)
    needless_by_fault: dict[str, int] = field(default_factory=dict)
    needless_by_duration: list[dict[str, Any]] = field(default_factory=list)
    stranded_leases: list[StrandedLease] = field(default_factory=list)  # not in as_dict()

    def failed_invariants(self) -> list[str]:
        return [name for name, result in self.invariants.items() if not result.ok]

    def as_dict(self) -> dict[str, Any]:
        return {
            "invariants": {name: result.as_dict() for name, result in self.invariants.items()},
            "jobs": asdict(self.jobs),
            "redeliveries": asdict(self.redeliveries),
            "recovery": {name: asdict(summary) for name, summary in self.recovery.items()},
            "stranded_leases": self.stranded,
            "faults": self.faults,
            "rejected": self.rejected,
            "events": self.events,
            "throughput_per_s": self.throughput_per_s,
            "report_only": list(self.config.report_only),
            "store_faults": self.store_faults,
            "outcomes": asdict(self.outcomes),
            "dead_letter": asdict(self.dead_letter),
            "needless_by_fault": self.needless_by_fault,
            "needless_by_duration": self.needless_by_duration,
        }


@dataclass(slots=True)
class _Lease:
    attempt: int
    worker: str
    deadline: int
    renewed: str  # history position (seq) of the claim or latest accepted extend
    claimed_ts: int  # when its handler started (for needless_by_duration)


@dataclass
class StrandedLease:
    """A lease its holder held when a fault hit it; open until the holder renews it or it ends.
    The verdict keeps them all, so reports can draw each recovery (fault → reap → re-claim)."""

    job_id: str
    attempt: int
    worker: str
    fault_ts: int
    fault_id: str
    reap_ts: int | None = None
    reclaim_ts: int | None = None
    recomplete_ts: int | None = None
    dismissed: bool = False  # its holder acted after the fault: it was not stranded after all


@dataclass
class _FaultWindow:
    start: tuple[int, int]  # history positions (seq), so same-millisecond events still order
    end: tuple[int, int] | None  # None: not healed (a kill never is)
    cuts_off: bool = True  # the holder could not act (kill, pause, partition), not just slowed
    kind: str = ""


def lease_deadline(event: Event) -> int:
    """The lease deadline on the server clock: renewal time + lease length."""
    if event.lease_ms is not None:
        return event.ts + event.lease_ms
    return event.deadline if event.deadline is not None else event.ts


def check(events: Iterable[Event], config: CheckConfig | None = None,
          final: bool | None = True) -> Verdict:
    """Judge a history in one pass (a list, or a stream of events: ``history.replay_history``).

    ``config``: default from the history's ``run`` event. ``final=False`` (an aborted run) skips
    the end-of-run judgements; ``final=None`` decides from the history (``run_completed``)."""
    # The checker's tables (millions of ids and leases for a long run) hold no reference
    # cycles, yet the cyclic collector would rescan them again and again as they grow.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(events, config, final)
    finally:
        if collecting:
            gc.enable()


def _check(events: Iterable[Event], config: CheckConfig | None, final: bool | None) -> Verdict:
    no_loss = InvariantResult(ok=True)
    no_double = InvariantResult(ok=True)
    bound = InvariantResult(ok=True)
    premature = InvariantResult(ok=True)
    exclusive = InvariantResult(ok=True)
    monotonic = InvariantResult(ok=True)
    stall_limit = InvariantResult(ok=True)

    enqueued: set[str] = set()
    poison: set[str] = set()  # enqueued with kind=poison
    reap_times: dict[str, list[int]] = {}  # job -> when each of its recoveries happened
    dead: dict[str, tuple[int, int]] = {}  # job -> (recoveries before its dead event, ts)
    # Handler durations (claim to the holder's own complete, accepted or rejected), in ms ->
    # attempts: of leases completed live, and of leases needlessly reaped first.
    ran_ms: dict[int, int] = {}
    ran_needless_ms: dict[int, int] = {}
    lapsed: dict[tuple[str, int], tuple[str, int, bool]] = {}  # (job, attempt) -> (worker,
    # claimed_ts, needless): leases reaped from under a holder that may still complete late
    needless_by_fault: Counter[str] = Counter()
    highest_claim: dict[str, int] = {}  # job -> the highest attempt any claim of it carried
    store_fault_events: list[Event] = []
    completes: Counter[str] = Counter()
    leases: dict[str, _Lease] = {}
    held_by: dict[str, set[str]] = {}  # worker -> job ids it holds a live lease on
    windows: dict[str, list[_FaultWindow]] = {}
    open_windows: dict[str, _FaultWindow] = {}  # fault_id -> its window, until healed
    open_stranded: dict[str, list[StrandedLease]] = {}  # job id -> stranded leases not yet resolved
    awaiting_reclaim: dict[str, list[StrandedLease]] = {}
    awaiting_recomplete: dict[str, list[StrandedLease]] = {}
    stranded: list[StrandedLease] = []
    redeliveries = Redeliveries()
    rejected: Counter[str] = Counter()
    fault_count = 0
    first_enqueue_ts: int | None = None
    last_complete_ts: int | None = None
    second_complete_ts: dict[str, int] = {}  # job -> when it was completed a second time
    last_ts = 0
    event_count = 0
    first_run: Event | None = None  # the run event, for the config
    completed_run = False  # the history shows the run's normal end (run_completed)

    def release(job_id: str) -> None:
        lease = leases.pop(job_id, None)
        if lease is not None:
            held_by.get(lease.worker, set()).discard(job_id)

    def faulted_between(worker: str, start_seq: str, end_seq: str) -> bool:
        worker_windows = windows.get(worker)
        if not worker_windows:
            return False
        start, end = seq_key(start_seq), seq_key(end_seq)
        return any(
            window.cuts_off and window.start <= end and (window.end is None or window.end >= start)
            for window in worker_windows
        )

    def slowed_by(worker: str, start_seq: str, end_seq: str) -> str:
        """The kind of the first fault that slowed (not cut off) the holder in the window."""
        start, end = seq_key(start_seq), seq_key(end_seq)
        for window in windows.get(worker, []):
            if window.start <= end and (window.end is None or window.end >= start):
                return window.kind or "fault"
        return "none"

    def ended_late(event: Event) -> None:
        """The complete (rejected, or accepted by a broken protocol) of a lease reaped earlier:
        how long that handler ran."""
        late = lapsed.pop((job_id, event.attempt or 0), None)
        if late is not None and late[0] == event.worker:
            counts = ran_needless_ms if late[2] else ran_ms
            ran = event.ts - late[1]
            counts[ran] = counts.get(ran, 0) + 1

    def holder_acted(job_id: str, attempt: int | None, worker: str | None) -> None:
        """The holder acted after its fault: it was back, the lease was not stranded."""
        kept = []
        for item in open_stranded.get(job_id, []):
            if item.attempt == attempt and item.worker == worker:
                item.dismissed = True
            else:
                kept.append(item)
        if kept:
            open_stranded[job_id] = kept
        else:
            open_stranded.pop(job_id, None)

    # The hot path: a history is mostly enqueue, claim, extend, complete, millions of them in a
    # long run, so these branches avoid calls and allocations; the recovery bookkeeping is only
    # touched for a job it holds.
    for event in events:
        event_count += 1
        job_id = event.job_id or ""
        kind = event.type
        if event.ts > last_ts:
            last_ts = event.ts
        if kind == "enqueue":
            enqueued.add(job_id)
            if event.extra and event.extra.get("kind") == "poison":
                poison.add(job_id)
            if first_enqueue_ts is None:
                first_enqueue_ts = event.ts

        elif kind == "claim":
            previous = leases.get(job_id)
            if previous is not None:  # two holders of one job at once
                exclusive.flag({"job": job_id, "op": "claim", "attempt": event.attempt,
                                "worker": event.worker, "seq": event.seq,
                                "live_attempt": previous.attempt, "live_worker": previous.worker},
                               event.ts)
                release(job_id)
            attempt = event.attempt or 0
            worker = event.worker or "?"
            highest = highest_claim.get(job_id)  # one lookup: this is the hot path
            if highest is None or attempt > highest:
                highest_claim[job_id] = attempt
            else:
                monotonic.flag({"job": job_id, "attempt": attempt, "worker": worker,
                                "seq": event.seq, "earlier_attempt": highest}, event.ts)
            leases[job_id] = _Lease(attempt, worker, lease_deadline(event), event.seq, event.ts)
            holding = held_by.get(worker)
            if holding is None:
                held_by[worker] = {job_id}
            else:
                holding.add(job_id)
            if job_id in awaiting_reclaim:
                for item in awaiting_reclaim.pop(job_id):
                    item.reclaim_ts = event.ts
                    awaiting_recomplete.setdefault(job_id, []).append(item)

        elif kind == "complete" or kind == "extend":
            lease = leases.get(job_id)
            live = lease is not None and lease.attempt == event.attempt
            if not live:
                exclusive.flag({
                    "job": job_id, "op": kind, "attempt": event.attempt,
                    "worker": event.worker, "seq": event.seq,
                    "live_attempt": lease.attempt if lease else None,
                }, event.ts)
            if kind == "extend":
                if live:
                    assert lease is not None
                    lease.deadline = lease_deadline(event)
                    lease.renewed = event.seq
            else:
                count = completes.get(job_id, 0) + 1
                completes[job_id] = count
                last_complete_ts = event.ts
                if count == 2:
                    second_complete_ts[job_id] = event.ts
                if live:
                    assert lease is not None
                    if lease.worker == event.worker:
                        ran = event.ts - lease.claimed_ts
                        ran_ms[ran] = ran_ms.get(ran, 0) + 1
                    release(job_id)
                elif lapsed:
                    ended_late(event)
                if job_id in awaiting_recomplete:
                    for item in awaiting_recomplete.pop(job_id):
                        item.recomplete_ts = event.ts
            if job_id in open_stranded:
                holder_acted(job_id, event.attempt, event.worker)

        elif kind == "reap" or kind == "dead":
            # A dead-letter is the reaper's recovery of a lapsed lease too (the same checks on
            # the lease), but the job leaves the queue instead of going back to pending.
            lease = leases.get(job_id)
            if lease is None or lease.attempt != event.attempt:
                premature.flag({"job": job_id, "attempt": event.attempt, "seq": event.seq,
                                "reason": "reaped a lease that was not live"}, event.ts)
            else:
                if event.ts < lease.deadline:
                    premature.flag({"job": job_id, "attempt": event.attempt, "seq": event.seq,
                                    "reap_ts": event.ts, "deadline": lease.deadline,
                                    "early_ms": lease.deadline - event.ts}, event.ts)
                needless = False
                if kind == "dead":
                    pass  # not redelivered: the job left the queue
                elif faulted_between(lease.worker, lease.renewed, event.seq):
                    redeliveries.needed += 1
                else:
                    redeliveries.needless += 1
                    needless = True
                    needless_by_fault[slowed_by(lease.worker, lease.renewed, event.seq)] += 1
                lapsed[(job_id, lease.attempt)] = (lease.worker, lease.claimed_ts, needless)
            if kind == "reap":
                reap_times.setdefault(job_id, []).append(event.ts)
            else:
                dead[job_id] = (len(reap_times.get(job_id, [])), event.ts)
            release(job_id)
            for item in open_stranded.pop(job_id, []):
                if item.attempt == event.attempt:
                    item.reap_ts = event.ts
                    awaiting_reclaim.setdefault(job_id, []).append(item)

        elif event.type == "fault":
            fault_count += 1
            if "killed_ts" in event.extra:  # a store fault: figures only, it strands no lease
                store_fault_events.append(event)
            worker = event.worker or "?"
            fault_id = event.extra.get("fault_id", event.seq)
            # A fault that only slows the holder (latency, bandwidth, clock skew) leaves it able
            # to finish: a lease lost under it is a needless redelivery, not a needed one.
            window = _FaultWindow(seq_key(event.seq), None,
                                  cuts_off=event.extra.get("cuts_off", "1") != "0",
                                  kind=event.extra.get("kind", ""))
            windows.setdefault(worker, []).append(window)
            open_windows[fault_id] = window
            for held in sorted(held_by.get(worker, set())):
                lease = leases[held]
                item = StrandedLease(held, lease.attempt, worker, event.ts, fault_id)
                stranded.append(item)
                open_stranded.setdefault(held, []).append(item)

        elif event.type == "heal":
            healed = open_windows.pop(event.extra.get("fault_id", ""), None)
            if healed is not None:
                healed.end = seq_key(event.seq)

        elif event.type.endswith("_rejected"):
            rejected[event.type] += 1
            if kind == "complete_rejected" and lapsed:
                ended_late(event)

        elif event.type == "run" and first_run is None:
            first_run = event

        elif (event.type == "phase" and event.extra.get("phase") == "end"
              and event.extra.get("aborted", "0") == "0"):
            completed_run = True

    if config is None:
        config = CheckConfig.from_history([first_run] if first_run is not None else [])
    if final is None:
        final = completed_run
    stranded = [item for item in stranded if not item.dismissed]

    # --- judgements over the whole history ----------------------------------------------
    double = {job_id: count for job_id, count in completes.items() if count > 1}
    for job_id, count in sorted(double.items()):
        no_double.flag({"job": job_id, "accepted_completes": count},
                       second_complete_ts[job_id])
    completed = set(completes)  # jobs with at least one accepted complete
    unexpected = sorted(completed - enqueued)
    # Dead-lettered jobs are accounted for only when a stall limit is on; otherwise lost.
    dead_lettered = sorted((set(dead) & enqueued) - completed) if config.max_stalls else []
    lost = sorted(enqueued - completed - set(dead_lettered))
    if final:
        for job_id in lost:
            lease = leases.get(job_id)
            # Loss is only certain once the run is over: caught at the end of the history.
            state = "active" if lease else "dead" if job_id in dead else "pending"
            no_loss.flag({"job": job_id, "state": state,
                          "attempt": lease.attempt if lease else None}, last_ts)
    _judge_stall_limit(stall_limit, config.max_stalls, reap_times, dead)
    completed_enqueued = len(completed & enqueued)
    no_loss.figures = {"enqueued": len(enqueued), "completed": completed_enqueued,
                       "lost": len(lost) if final else 0, "judged": final}

    reap_latency = []
    for item in stranded:
        if item.reap_ts is None:
            if final:
                bound.flag({"job": item.job_id, "attempt": item.attempt, "worker": item.worker,
                            "fault_ts": item.fault_ts, "reason": "never recovered"},
                           item.fault_ts + config.bound_ms)
            continue
        latency = item.reap_ts - item.fault_ts
        reap_latency.append(latency)
        if latency > config.bound_ms:
            bound.flag({"job": item.job_id, "attempt": item.attempt, "worker": item.worker,
                        "fault_ts": item.fault_ts, "reap_ts": item.reap_ts,
                        "recovery_latency_ms": latency},
                       item.fault_ts + config.bound_ms)  # broken the moment the bound passed
    summary = LatencySummary.of(reap_latency)
    bound.figures = {
        "bound_ms": config.bound_ms,
        "lease_ms": config.lease_ms,
        "reap_interval_ms": config.reap_interval_ms,
        "tolerance_ms": config.tolerance_ms,
        "stranded": len(stranded),
        **asdict(summary),
    }
    samples = {
        "reap": reap_latency,
        "reclaim": [i.reclaim_ts - i.fault_ts for i in stranded if i.reclaim_ts is not None],
        "recomplete": [i.recomplete_ts - i.fault_ts for i in stranded
                       if i.recomplete_ts is not None],
    }
    recovery = {name: LatencySummary.of(values) for name, values in samples.items()}
    invariants = {  # in INVARIANTS order
        "no_loss": no_loss,
        "no_double_completion": no_double,
        "recovery_bound": bound,
        "no_premature_reap": premature,
        "exclusive_lease": exclusive,
        "attempts_monotonic": monotonic,
        "stall_limit": stall_limit,
    }
    no_double.figures = {"double_completed": len(double)}
    jobs = JobCounts(
        enqueued=len(enqueued),
        completed=completed_enqueued,
        lost=len(lost) if final else 0,
        double_completed=len(double),
        unexpected=len(unexpected),
        dead_lettered=len(dead_lettered),
    )
    once = {job_id for job_id, count in completes.items() if count == 1}
    outcomes = Outcomes(
        completed=len(once & enqueued),
        dead_lettered=len(dead_lettered),
        lost=len(lost) if final else 0,
        duplicated=len(set(double) & enqueued),
        unexpected=len(unexpected),
        judged=final,
    )
    dead_letter = DeadLetter(
        max_stalls=config.max_stalls,
        jobs=len(dead),
        poison=len(set(dead) & poison),
        poison_enqueued=len(poison),
        recoveries_before_dead={str(n): count for n, count in
                                sorted(Counter(n for n, _ in dead.values()).items())},
    )
    return Verdict(
        passed=all(result.ok for name, result in invariants.items()
                   if name not in config.report_only),
        config=config,
        invariants=invariants,
        jobs=jobs,
        redeliveries=redeliveries,
        recovery=recovery,
        stranded=len(stranded),
        faults=fault_count,
        rejected=dict(rejected),
        events=event_count,
        throughput_per_s=_rate(sum(completes.values()), first_enqueue_ts, last_complete_ts),
        recovery_samples=samples,
        final=final,
        store_faults=[store_fault_figure(fault) for fault in store_fault_events],
        stranded_leases=stranded,
        outcomes=outcomes,
        dead_letter=dead_letter,
        needless_by_fault=dict(needless_by_fault),
        needless_by_duration=_by_duration(ran_ms, ran_needless_ms, config.lease_ms),
    )


def _judge_stall_limit(result: InvariantResult, max_stalls: int,
                       reap_times: dict[str, list[int]], dead: dict[str, tuple[int, int]]) -> None:
    for job_id, (recoveries, dead_ts) in sorted(dead.items()):
        if not max_stalls:
            result.flag({"job": job_id, "recoveries": recoveries,
                         "reason": "dead-lettered, but no stall limit is on"}, dead_ts)
        elif recoveries != max_stalls:
            result.flag({"job": job_id, "recoveries": recoveries, "max_stalls": max_stalls,
                         "reason": "dead-lettered after a number of recoveries other than "
                                   "max_stalls"}, dead_ts)
    if max_stalls:
        for job_id, times in sorted(reap_times.items()):
            if len(times) > max_stalls:
                result.flag({"job": job_id, "recoveries": len(times), "max_stalls": max_stalls,
                             "reason": "recovered past the stall limit"}, times[max_stalls])
    result.figures = {"max_stalls": max_stalls, "dead_lettered": len(dead)}


def _by_duration(ran_ms: dict[int, int], ran_needless_ms: dict[int, int],
                 lease_ms: int) -> list[dict[str, Any]]:
    """Attempts whose handler ran to the holder's own complete, and how many of them were
    needlessly redelivered, per handler-duration bucket (a multiple of the lease)."""
    def inside(counts: dict[int, int], low: float, high: float) -> int:
        return sum(n for ms, n in counts.items() if low <= ms / lease_ms < high)

    rows = []
    for low, high in DURATION_BUCKETS:
        needless = inside(ran_needless_ms, low, high)
        label = f">={low:g}x" if math.isinf(high) else f"{low:g}-{high:g}x"
        rows.append({"bucket": label, "attempts": inside(ran_ms, low, high) + needless,
                     "needless": needless})
    return rows


def store_fault_figure(fault: Event) -> dict[str, Any]:
    """What the fault event of a store fault says; ``store_fault_recovery`` adds the clients."""
    figure: dict[str, Any] = {
        "fault_id": fault.extra.get("fault_id"), "kind": fault.extra.get("kind"),
        "node": fault.worker, "killed_ts": int(fault.extra["killed_ts"]),
        "down_ms": int(fault.extra.get("down_ms", 0)),
        "clients_recovered": 0, "max_client_ms": None, "clients_ms": {}, "producer_ms": None,
    }
    if "promoted_ms" in fault.extra:
        figure["promoted_ms"] = int(fault.extra["promoted_ms"])
        figure["new_primary"] = fault.extra.get("new_primary")
    return figure


def store_fault_recovery(events: Iterable[Event],
                         figures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A second pass, for runs with store faults only: per fault, ms from the kill to each
    worker's next transition (accepted or rejected: either way the store answered it) and to the
    producer's next enqueue. (Those can precede the fault event in the history: the runner records
    it once the store serves again.) Workers that did nothing after the kill (dead, or idle to the
    end) are left out, not counted as 0."""
    filled = [{**figure, "clients_ms": {}} for figure in figures]
    for event in events:
        worker = event.worker
        is_client = event.type in CLIENT_EVENTS and worker
        if not is_client and event.type != "enqueue":
            continue
        for figure in filled:
            if event.ts <= figure["killed_ts"]:  # before the kill (or in its very millisecond)
                continue
            if is_client and worker not in figure["clients_ms"]:
                figure["clients_ms"][worker] = event.ts - figure["killed_ts"]
            elif event.type == "enqueue" and figure["producer_ms"] is None:
                figure["producer_ms"] = event.ts - figure["killed_ts"]
    for figure in filled:
        clients = figure["clients_ms"] = dict(sorted(figure["clients_ms"].items()))
        figure["clients_recovered"] = len(clients)
        figure["max_client_ms"] = max(clients.values()) if clients else None
    return filled


def _rate(count: int, start_ts: int | None, end_ts: int | None) -> float:
    if start_ts is None or end_ts is None or end_ts <= start_ts:
        return 0.0
    return round(count * 1000 / (end_ts - start_ts), 1)
