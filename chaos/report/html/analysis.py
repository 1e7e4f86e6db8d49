"""What the HTML report draws, drawn from the history: a timeline kept small whatever the run's
size (rates, the backlog, phases, the fault windows), and the leases of the jobs each fault hit.

Replayed from the history's events, on the Valkey clock, so everything lines up with the faults.
The fault windows are ``chaos.history.windows``'s, the same the checker and the tuning model use.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from chaos.check.replay import lease_deadline
from chaos.check.verdict import StrandedLease
from chaos.history.events import Event
from chaos.history.schema import Fault, Heal, Phase, Run
from chaos.history.windows import UNKNOWN_WORKER, FaultWindow, FaultWindows

MAX_LEASE_ROWS = 12  # leases drawn per fault
BACKLOG_POINTS = 400  # the backlog is drawn as a poll would see it, not every flicker
RATE_BUCKET_MS = 50  # the history is counted in these; the plot re-bins them
BACKLOG_BUCKET_MS = 10  # at most one backlog state kept per bucket (memory: duration, not jobs)


@dataclass
class Timeline:
    """What one streamed pass over the history keeps for the page: small whatever the run's size
    (counts per 50 ms, one backlog state per 10 ms, the faults, phases, and a few reaps)."""

    t0: int = 0  # server ms of time zero: the start of the load (the warmup phase)
    end_ts: int = 0
    events: int = 0
    run: Run | None = None
    phases: list[tuple[str, int]] = field(default_factory=list)  # (name, start ts)
    windows: FaultWindows = field(default_factory=FaultWindows)
    backlog: list[tuple[int, int, int]] = field(default_factory=list)  # (ts, pending, active)
    counts: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    # fault id -> jobs of the faulted worker reaped during the fault or within the bound after
    reaped_during: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def faults(self) -> list[FaultWindow]:
        """Every fault, in the order applied, with its window (to the heal; a kill has none)."""
        return self.windows.windows

    def s(self, ts: int) -> float:
        """Seconds since time zero."""
        return (ts - self.t0) / 1000

    def drawn(self, bucket: int) -> bool:
        return drawn_bucket(bucket, self.t0, self.end_ts)

    def totals(self) -> dict[str, int]:
        """Events per type the rates plot, in the plot's window (what the page states beside
        the figure, and what the verdict's counts must equal)."""
        return {kind: total for kind, counts in sorted(self.counts.items())
                if (total := sum(n for bucket, n in counts.items() if self.drawn(bucket)))}

    def undrawn(self) -> dict[str, int]:
        """Events per type before the plot's window (before the load started)."""
        return {kind: total for kind, counts in sorted(self.counts.items())
                if (total := sum(n for bucket, n in counts.items() if not self.drawn(bucket)))}

    @property
    def final_backlog(self) -> tuple[int, int]:
        """(pending, active) after the last transition: where the backlog plot ends."""
        return (self.backlog[-1][1], self.backlog[-1][2]) if self.backlog else (0, 0)


# The transitions that move a job between waiting and leased (the backlog plot).
_BACKLOG_MOVES = frozenset(("enqueue", "claim", "complete", "reap", "dead", "retry", "promote"))


def build_timeline(events: Iterable[Event], bound_ms: int = 0) -> Timeline:
    """Replay the history once: phases, fault windows, event counts by type over time, and the
    backlog (pending: enqueued or reaped, not yet claimed; active: claimed, not yet completed
    or reaped: sets as large as the backlog, not as the run)."""
    timeline = Timeline()
    first_ts: int | None = None
    warmup_ts: int | None = None
    pending: set[str] = set()
    active: set[str] = set()
    windows = timeline.windows
    for event in events:
        timeline.events += 1
        ts, kind, job = event.ts, event.type, event.job_id or ""
        if first_ts is None:
            first_ts = ts
        timeline.end_ts = max(timeline.end_ts, ts)
        timeline.counts[kind][ts // RATE_BUCKET_MS] += 1
        if kind == Run.TYPE and timeline.run is None:
            timeline.run = Run.decode(event)
        elif kind == Phase.TYPE:
            name = Phase.decode(event).name or "?"
            timeline.phases.append((name, ts))
            if name == "warmup" and warmup_ts is None:
                warmup_ts = ts
        elif kind == Fault.TYPE or kind == Heal.TYPE:
            windows.observe(event)
        elif kind in _BACKLOG_MOVES:
            if kind == "enqueue":
                if "due" not in event.extra:  # (a scheduled one waits in the schedule)
                    pending.add(job)
            elif kind == "claim":
                pending.discard(job)
                active.add(job)
            elif kind in ("complete", "dead"):  # dead: past max_stalls, never pending again
                active.discard(job)
            elif kind == "retry":  # handed back: waits again (in the schedule, until promoted)
                active.discard(job)
                if event.extra.get("to") == "wait":
                    pending.add(job)
            elif kind == "promote":
                pending.add(job)
            else:
                active.discard(job)
                pending.add(job)
                for span in windows.of(event.worker or ""):
                    until = (span.end_ts if span.end_ts is not None else ts) + bound_ms
                    jobs = timeline.reaped_during[span.fault_id]
                    if span.start_ts <= ts <= until and len(jobs) < MAX_LEASE_ROWS:
                        jobs.append(job)
            state = (ts, len(pending), len(active))
            backlog = timeline.backlog
            if backlog and backlog[-1][0] // BACKLOG_BUCKET_MS == ts // BACKLOG_BUCKET_MS:
                backlog[-1] = state
            else:
                backlog.append(state)
    timeline.t0 = warmup_ts if warmup_ts is not None else (first_ts or 0)
    return timeline


def drawn_bucket(bucket: int, t0: int, end_ts: int) -> bool:
    """Is a count bucket on the plot: from the one time zero falls in to the end?"""
    start = bucket * RATE_BUCKET_MS
    return start + RATE_BUCKET_MS > t0 and start <= end_ts


def rate_series(counts: Counter[int], t0: int, end_ts: int, bin_ms: int) -> tuple[list[float],
                                                                                  list[float]]:
    """Events per second in bins of ``bin_ms`` (x = bin start, seconds since t0). Every count
    from the bucket time zero falls in to the end is drawn: the bucket straddling t0 in the
    first bin, one at the very end in the last (``Timeline.totals`` counts the same window)."""
    bins = max(1, -(-(end_ts - t0) // bin_ms))
    totals = [0] * bins
    for bucket, count in counts.items():
        if drawn_bucket(bucket, t0, end_ts):
            index = (bucket * RATE_BUCKET_MS - t0) // bin_ms
            totals[min(bins - 1, max(0, index))] += count
    return ([i * bin_ms / 1000 for i in range(bins)], [c * 1000 / bin_ms for c in totals])


def sample_backlog(backlog: list[tuple[int, int, int]], t0: int, end_ts: int,
                   points: int = BACKLOG_POINTS) -> list[tuple[int, int, int]]:
    """The backlog as a poll every (duration / points) ms would see it: the state after the
    last event at or before each instant (a job enqueued and claimed in the same millisecond
    never shows as pending, as it never would to a poller)."""
    step = max(BACKLOG_BUCKET_MS, (end_ts - t0) // points)
    samples: list[tuple[int, int, int]] = []
    index, state = 0, (0, 0)
    for at in range(t0, end_ts + step, step):
        while index < len(backlog) and backlog[index][0] <= at:
            state = backlog[index][1:]
            index += 1
        samples.append((at, *state))
    return samples


def events_of_jobs(events: Iterable[Event], jobs: set[str]) -> dict[str, list[Event]]:
    """A second pass: every event of the few jobs the lease charts draw."""
    found: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.job_id in jobs:
            found[event.job_id].append(event)
    return found


@dataclass
class LeaseBar:
    worker: str
    start: int
    deadline: int
    end: int | None = None
    outcome: str = ""  # complete | reap | "" (still open at the end of the history)
    extends: list[int] = field(default_factory=list)


def job_leases(job_events: list[Event]) -> tuple[list[LeaseBar], list[Event]]:
    """A job's leases (claim to complete or reap) and the calls outside a live lease."""
    bars: list[LeaseBar] = []
    live: dict[int, LeaseBar] = {}
    stray: list[Event] = []
    for event in job_events:
        attempt = event.attempt or 0
        if event.type == "claim":
            bar = LeaseBar(event.worker or UNKNOWN_WORKER, event.ts, lease_deadline(event))
            bars.append(bar)
            live[attempt] = bar
        elif event.type == "extend" and attempt in live:
            live[attempt].deadline = lease_deadline(event)
            live[attempt].extends.append(event.ts)
        elif event.type in ("complete", "reap", "dead") and attempt in live:
            bar = live.pop(attempt)
            bar.end, bar.outcome = event.ts, event.type
        elif event.type.endswith("_rejected") or event.type in ("complete", "extend"):
            stray.append(event)  # rejected, or accepted although not the live lease (a bug)
    return bars, stray


def fault_jobs(span: FaultWindow, stranded: list[StrandedLease],
               timeline: Timeline) -> tuple[list[str], int]:
    """The jobs drawn for one fault: the leases it stranded, then leases of that worker reaped
    while the fault lasted (needless redeliveries under a slowing fault); capped."""
    jobs: dict[str, None] = {}
    for item in stranded:
        if item.fault_id == span.fault_id:
            jobs.setdefault(item.job_id, None)
    for job in timeline.reaped_during.get(span.fault_id, []):
        jobs.setdefault(job, None)
    names = list(jobs)
    return names[:MAX_LEASE_ROWS], max(0, len(names) - MAX_LEASE_ROWS)


