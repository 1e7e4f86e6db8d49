"""How a capacity step is judged (pure: a step's figures in, its verdict out).

A step (a ramp step, a refining step or a hold, ``chaos.tools.capacity``) is within capacity when:

- the load generator delivered its rate (at least ``MIN_DELIVERED`` of the target; otherwise
  Locust, not the pool, is the limit),
- its rate is at most the pool's **service rate**: the live slots over the mean claim-to-complete
  time of an attempt (Little's law: a slot busy H ms a job completes at most 1000 / H jobs/s),
  measured in the run. No sampling of a backlog can make a rate above it sustainable,
- the backlog does not grow: the fresh backlog's 250 ms samples (the step's own jobs; a job
  the reaper returned is recovery, not the pool falling behind) are averaged in ``BATCHES``
  consecutive batches and a least-squares line is fitted through the batch means; its slope's
  standard error comes from their residuals (batch means: a queue's backlog is autocorrelated
  over seconds near a full pool, where a standard error from the raw samples was half the
  slopes' real spread, docs/tuning-and-capacity.md). It is growth when the slope's lower
  one-sided 99% bound (Student's t, ``BATCHES`` - 2 degrees of freedom) is above
  ``backlog_growth`` x rate and the fitted rise over the window is at least ``MIN_RISE_JOBS``
  (a job or two waiting at the end of a window is not a trend). A ramp step reads its second
  half, and its growth counts only past the backlog the claim-wait target allows (rate x
  ``p99_ms``): a few seconds of a near-full pool tilt either way, and the hold decides. A hold
  reads all but its first ``HOLD_SKIP`` (the backlog's fill at the start), on its slope
  alone, and
- the claim wait p99 (enqueue -> first claim, Valkey clock; a job still unclaimed at the end
  counts with the wait so far) is at most ``p99_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from chaos.history.events import Event
from chaos.history.schema import Claim, Complete, Enqueue
from chaos.scenario.loading import ScenarioError
from chaos.scenario.model import Scenario
from chaos.tools.bottleneck import MIN_DELIVERED, StepLoad

BATCHES = 5  # the window's samples are averaged in this many batches
GROWTH_T = 4.541  # Student's t, one-sided 99%, BATCHES - 2 = 3 degrees of freedom
MIN_RISE_JOBS = 2.0  # the fitted rise over the window must reach this many jobs
HOLD_SKIP = 0.2  # a hold's slope leaves out this share of its start (the backlog filling)
MAX_HOLDS = 3  # a knee that fails its hold steps down at most this many times in all
SAMPLE_PERIOD_S = 0.25  # the backlog is sampled this often in a step


@dataclass(frozen=True)
class CapacitySearch:
    start_rate: float
    step_rate: float
    max_steps: int
    step_ms: int
    p99_ms: float
    backlog_growth: float = 0.0  # tolerated growth beyond noise: this share of the rate per s
    fault: bool = False
    # After the ramp, halve the interval between the knee and the first rate over it this
    # many times (each one more step): the knee to within step_rate / 2**refine.
    refine: int = 0
    hold_ms: int = 0  # the knee is held this long to confirm it (0: not held)

    def rates(self) -> list[float]:
        return [round(self.start_rate + i * self.step_rate, 3) for i in range(self.max_steps)]

    @property
    def resolution(self) -> float:
        """How far apart the rates tried around the knee are (a failed hold steps down this)."""
        return self.step_rate / 2 ** self.refine

    def validate(self, scenario: Scenario) -> None:
        """Bad arguments are ScenarioError (exit 2), naming the option and its value."""
        checks = [
            ("--start-rate", self.start_rate, self.start_rate > 0, "must be > 0"),
            ("--step-rate", self.step_rate, self.step_rate > 0, "must be > 0"),
            ("--steps", self.max_steps, 1 <= self.max_steps <= 100, "must be 1..100"),
            ("--step-ms", self.step_ms, 1000 <= self.step_ms <= 3_600_000,
             "must be 1000..3600000"),
            ("--p99-ms", self.p99_ms, self.p99_ms > 0, "must be > 0"),
            ("--backlog-growth", self.backlog_growth, 0 <= self.backlog_growth <= 1,
             "must be 0..1"),
            ("--refine", self.refine, 0 <= self.refine <= 6, "must be 0..6"),
            ("--hold-ms", self.hold_ms, self.hold_ms == 0 or 1000 <= self.hold_ms <= 3_600_000,
             "must be 0 (no hold) or 1000..3600000"),
        ]
        for option, value, ok, rule in checks:
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ScenarioError(f"{option} {value}: {rule}")
        if self.fault:
            if not scenario.faults:
                raise ScenarioError(f"--fault: scenario {scenario.name!r} has no [[faults]]")
            for option, length in (("--step-ms", self.step_ms), ("--hold-ms", self.hold_ms)):
                late = [f"faults.{i}.at_ms = {f.at_ms}" for i, f in enumerate(scenario.faults)
                        if length and f.at_ms >= length]
                if late:
                    raise ScenarioError(f"--fault with {option} {length}: "
                                        f"{', '.join(late)} would never fire inside a step")


@dataclass(frozen=True)
class Growth:
    """The backlog's trend over a window: slope (jobs/s), its standard error, the window."""

    slope: float = 0.0
    se: float = 0.0
    span_s: float = 0.0
    samples: int = 0

    @property
    def low(self) -> float:
        """The slope's lower one-sided 99% bound."""
        return self.slope - GROWTH_T * self.se

    def grows(self, tolerance: float) -> bool:
        return self.low > tolerance and self.slope * self.span_s >= MIN_RISE_JOBS

    def words(self) -> str:
        return f"{self.slope:+.2f} ± {self.se:.2f}/s over {self.span_s:.1f} s"


def growth_of(samples: list[tuple[float, int]], skip: float = 0.5) -> Growth:
    """The backlog's slope over (seconds, backlog) samples after the first ``skip`` share: a
    least-squares line through the means of ``BATCHES`` consecutive batches, its standard error
    from their residuals."""
    tail = samples[int(len(samples) * skip):]
    n = len(tail)
    size = n // BATCHES
    if size < 1:
        return Growth(samples=n)
    tail = tail[n - size * BATCHES:]  # whole batches: the oldest samples left out
    batches = [tail[i * size:(i + 1) * size] for i in range(BATCHES)]
    points = [(sum(t for t, _ in batch) / size, sum(p for _, p in batch) / size)
              for batch in batches]
    mean_t = sum(t for t, _ in points) / BATCHES
    mean_p = sum(p for _, p in points) / BATCHES
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return Growth(samples=n)
    slope = sum((t - mean_t) * (p - mean_p) for t, p in points) / spread
    residual = sum((p - mean_p - slope * (t - mean_t)) ** 2 for t, p in points)
    se = math.sqrt(residual / (BATCHES - 2) / spread)
    return Growth(round(slope, 3), round(se, 3), round(tail[-1][0] - tail[0][0], 2), n)


def backlog_slope(samples: list[tuple[float, int]]) -> float:
    """Pending growth in jobs/s: least-squares slope over the second half of the samples."""
    return growth_of(samples).slope if len(samples[len(samples) // 2:]) >= 3 else _slope2(
        samples[len(samples) // 2:])


def _slope2(tail: list[tuple[float, int]]) -> float:
    if len(tail) < 2 or tail[0][0] == tail[-1][0]:
        return 0.0
    return (tail[-1][1] - tail[0][1]) / (tail[-1][0] - tail[0][0])


@dataclass
class Step:
    index: int
    target_rate: float
    kind: str = "ramp"  # ramp | refine | hold
    length_ms: int = 0
    delivered_rate: float = 0.0  # enqueues acknowledged per second (history, Valkey clock)
    enqueued: int = 0
    claim_wait_p50_ms: float | None = None
    claim_wait_p99_ms: float | None = None
    unclaimed_at_end: int = 0
    backlog_start: int = 0
    backlog_end: int = 0
    backlog_growth_per_s: float = 0.0
    backlog_growth_se: float = 0.0  # the slope's standard error (autocorrelation-robust)
    backlog_growth_span_s: float = 0.0  # the window the slope was read over
    backlog_tail_max: int = 0  # the most of the step's own jobs pending in the window read
    enqueue_p99_ms: float | None = None  # the enqueue call itself, as Locust measured it
    enqueue_failures: int = 0
    faults: int = 0
    completed: int = 0  # jobs completed in the step's events
    hold_p50_ms: float | None = None  # first claim -> complete
    slots_busy: float | None = None  # leased / live slots, mean over the step's second half
    live_workers_min: int = 0  # the fewest workers alive in the step (faults kill some)
    live_slots_mean: float | None = None  # live workers x concurrency, mean over the step
    service_ms_mean: float | None = None  # claim -> complete of an attempt, mean over the run
    service_rate: float | None = None  # live_slots_mean / service_ms_mean (Little's law)
    store_cpu: float | None = None  # the store's main thread, share of one core
    store_cpu_s: float | None = None  # its CPU seconds over the step
    host_cpu: float | None = None  # the host's, share of all its cores
    backlog_samples: list[tuple[float, int]] = field(default_factory=list)
    within: bool = False
    reason: str = ""

    def load(self) -> StepLoad:
        # how few workers were alive is said only where a fault killed some
        return StepLoad(self.target_rate, self.delivered_rate, self.slots_busy, self.store_cpu,
                        self.host_cpu, self.hold_p50_ms,
                        self.live_workers_min if self.faults else None)

    def growth(self) -> Growth:
        return Growth(self.backlog_growth_per_s, self.backlog_growth_se,
                      self.backlog_growth_span_s)

    def row(self) -> str:
        wait = "-" if self.claim_wait_p99_ms is None else f"{self.claim_wait_p99_ms:.0f}"
        label = f"{self.index}h" if self.kind == "hold" else str(self.index)
        return (f"{label:>4}  {self.target_rate:>8g}  {self.delivered_rate:>9.1f}  "
                f"{wait:>10}  {self.backlog_end:>8}  "
                f"{self.backlog_growth_per_s:>+6.2f}±{self.backlog_growth_se:<5.2f}  "
                f"{'ok' if self.within else 'OVER':<4}  {self.reason}")


def judge(step: Step, search: CapacitySearch) -> None:
    reasons = []
    if step.delivered_rate < MIN_DELIVERED * step.target_rate:
        reasons.append(f"generator delivered {step.delivered_rate:.1f} < "
                       f"{MIN_DELIVERED:.0%} of target")
    if step.service_rate is not None and step.target_rate > step.service_rate:
        reasons.append(f"above the service rate {step.service_rate:.1f} jobs/s "
                       f"({step.live_slots_mean:g} slots / {step.service_ms_mean:.1f} ms mean "
                       "claim-to-complete)")
    growth = step.growth()
    # A ramp step's few seconds are a screen (the hold decides): its slope over a backlog no
    # larger than the claim-wait target allows (rate x target, Little's law) is read as noise,
    # since a near-full pool's short windows tilt either way (docs/tuning-and-capacity.md).
    allowed = step.target_rate * search.p99_ms / 1000
    if (growth.grows(search.backlog_growth * step.target_rate)
            and (step.kind == "hold" or step.backlog_tail_max > allowed)):
        reasons.append(f"backlog grows {growth.words()}")
    if step.claim_wait_p99_ms is None or step.claim_wait_p99_ms > search.p99_ms:
        reasons.append(f"claim wait p99 {step.claim_wait_p99_ms} ms > {search.p99_ms:g}")
    step.within = not reasons
    step.reason = "; ".join(reasons)


def step_down(rate: float, failed: Step, resolution: float) -> float | None:
    """The next rate to hold after a hold at ``rate`` failed: one resolution lower, and lower
    still while above the service rate that hold measured (None: nothing left above 0)."""
    lower = round(rate - resolution, 3)
    while failed.service_rate is not None and lower > failed.service_rate:
        lower = round(lower - resolution, 3)
    return lower if lower > 0 else None


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (the checker's convention)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def claim_waits(events: Iterable[Event], end_ts: int) -> tuple[list[float], int]:
    """Enqueue -> first claim waits (ms) of the jobs enqueued in ``events`` (a step's history);
    a job not yet claimed by ``end_ts`` counts with ``end_ts - enqueue``. Also: how many."""
    enqueued: dict[str, int] = {}
    claimed: dict[str, int] = {}
    for event in events:
        kind, job_id = event.type, event.job_id
        if job_id is None:
            continue
        if kind == Enqueue.TYPE:
            enqueued[job_id] = event.ts
        elif kind == Claim.TYPE and job_id in enqueued and job_id not in claimed:
            claimed[job_id] = event.ts
    waits = [float(claimed.get(job_id, end_ts) - ts) for job_id, ts in enqueued.items()]
    return waits, sum(1 for job_id in enqueued if job_id not in claimed)


def hold_times(events: Iterable[Event]) -> list[float]:
    """First claim -> complete (ms) of each job claimed and completed in ``events``."""
    return _claim_to_complete(events, first_claim=True)


def service_times(events: Iterable[Event]) -> list[float]:
    """Claim -> complete (ms) of each completing attempt in ``events``: its latest claim (a
    reclaimed job's earlier attempt ended with its worker, not in this one's slot)."""
    return _claim_to_complete(events, first_claim=False)


def _claim_to_complete(events: Iterable[Event], first_claim: bool) -> list[float]:
    claimed: dict[str, int] = {}
    held: list[float] = []
    for event in events:
        if event.job_id is None:
            continue
        if event.type == Claim.TYPE:
            if first_claim:
                claimed.setdefault(event.job_id, event.ts)
            else:
                claimed[event.job_id] = event.ts
        elif event.type == Complete.TYPE and event.job_id in claimed:
            held.append(float(event.ts - claimed.pop(event.job_id)))
    return held
