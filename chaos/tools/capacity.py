"""``echomq-chaos capacity``: how many jobs/s can a scenario's worker pool take?

Brings up the scenario's Valkey, reaper(s) and workers once, then ramps the enqueue rate in
steps, each a fresh headless Locust run (producers only, the scenario's ``load`` settings) for
``step_ms``. A step is within capacity when, over it:

- the load generator delivered its rate (at least ``MIN_DELIVERED`` of the target; otherwise
  Locust, not the pool, is the limit and the search stops saying so),
- the backlog stayed bounded: pending grew by at most ``backlog_growth`` x rate jobs per second
  over the step's second half (a least-squares slope of the 250 ms samples). Only the step's
  own jobs count: a job the reaper returned to pending (scored 0 there) is a fault's recovery,
  not the pool falling behind, so with ``fault`` the verdict does not depend on where the
  fault schedule's reaps fall in the step. A backlog that never exceeds what the claim-wait
  target allows (rate x ``p99_ms``, by Little's law) is not growth, however its few jobs
  tilt the slope; and
- the claim wait p99 (enqueue -> first claim, both on the Valkey clock from the history; a job
  still unclaimed when the step ends counts with the wait so far) is at most ``p99_ms``.

The history is the one a run of the scenario is judged on (``chaos.run.sources``): the events
stream the protocol's scripts write, or, with ``[history] source = "monitor"`` (a foreign SUT: the
Node example, BullMQ), the MONITOR recorder's ``history-monitor.jsonl``, read as it is written; a
step's events lie between its ``capacity-step-N`` phase and the ``capacity-settle-N`` phase
recorded once it ends. The backlog is the family's own: pending jobs of the echomq protocol, or
BullMQ's waiting jobs (wait, paused, prioritized, delayed).

The knee is the highest rate within capacity before the first step that is not. Between steps
the backlog drains (so each step starts empty) and, with ``fault``, the scenario's fault schedule
runs inside every step (``at_ms`` from the step's start) and killed workers are restarted.
Outputs in the output directory: ``capacity.json``, ``history.jsonl``, ``logs/`` and each step's
raw Locust files (``step01_stats.csv`` ...).
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import redis

from chaos.errors import EXIT_ABORTED, EXIT_FAIL, EXIT_INFRA, EXIT_PASS, InfraError
from chaos.files import write_json_atomic
from chaos.history.events import Event, decode_entries
from chaos.history.monitor import MONITOR_HISTORY
from chaos.history.schema import Claim, Complete, Enqueue, Phase
from chaos.run.events import SearchFinished, search_finished
from chaos.run.progress import Progress
from chaos.run.runner import Run, try_teardown
from chaos.scenario.loading import ScenarioError
from chaos.scenario.model import LoadMix, Scenario
from chaos.tools import bottleneck
from chaos.tools.bottleneck import MIN_DELIVERED, StepLoad

SCHEMA = 1
SAMPLE_S = 0.25
SETTLE_TIMEOUT_S = 30.0
RECORDER_WAIT_S = 10.0  # for the MONITOR recorder to write a step's closing phase


@dataclass(frozen=True)
class CapacitySearch:
    start_rate: float
    step_rate: float
    max_steps: int
    step_ms: int
    p99_ms: float
    backlog_growth: float = 0.05  # pending may grow by this share of the rate per second
    fault: bool = False
    # After the ramp, halve the interval between the knee and the first rate over it this
    # many times (each one more step): the knee to within step_rate / 2**refine.
    refine: int = 0

    def rates(self) -> list[float]:
        return [round(self.start_rate + i * self.step_rate, 3) for i in range(self.max_steps)]

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
        ]
        for option, value, ok, rule in checks:
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ScenarioError(f"{option} {value}: {rule}")
        if self.fault:
            if not scenario.faults:
                raise ScenarioError(f"--fault: scenario {scenario.name!r} has no [[faults]]")
            late = [f"faults.{i}.at_ms = {f.at_ms}" for i, f in enumerate(scenario.faults)
                    if f.at_ms >= self.step_ms]
            if late:
                raise ScenarioError(f"--fault with --step-ms {self.step_ms}: "
                                    f"{', '.join(late)} would never fire inside a step")


@dataclass
class Step:
    index: int
    target_rate: float
    delivered_rate: float = 0.0  # enqueues acknowledged per second (history, Valkey clock)
    enqueued: int = 0
    claim_wait_p50_ms: float | None = None
    claim_wait_p99_ms: float | None = None
    unclaimed_at_end: int = 0
    backlog_start: int = 0
    backlog_end: int = 0
    backlog_growth_per_s: float = 0.0
    backlog_tail_max: int = 0  # the most of the step's own jobs pending in its second half
    enqueue_p99_ms: float | None = None  # the enqueue call itself, as Locust measured it
    enqueue_failures: int = 0
    faults: int = 0
    completed: int = 0  # jobs completed in the step's events
    hold_p50_ms: float | None = None  # first claim -> complete
    slots_busy: float | None = None  # leased / live slots, mean over the step's second half
    live_workers_min: int = 0  # the fewest workers alive in the step (faults kill some)
    store_cpu: float | None = None  # the store's main thread, share of one core
    store_cpu_s: float | None = None  # its CPU seconds over the step
    host_cpu: float | None = None  # the host's, share of all its cores
    within: bool = False
    reason: str = ""

    def load(self) -> StepLoad:
        return StepLoad(self.target_rate, self.delivered_rate, self.slots_busy, self.store_cpu,
                        self.host_cpu, self.hold_p50_ms, self.live_workers_min)

    def row(self) -> str:
        wait = "-" if self.claim_wait_p99_ms is None else f"{self.claim_wait_p99_ms:.0f}"
        return (f"{self.index:>4}  {self.target_rate:>8g}  {self.delivered_rate:>9.1f}  "
                f"{wait:>10}  {self.backlog_end:>8}  {self.backlog_growth_per_s:>8.1f}  "
                f"{'ok' if self.within else 'OVER':<4}  {self.reason}")


@dataclass
class CapacityResult:
    scenario: str
    search: CapacitySearch
    steps: list[Step] = field(default_factory=list)
    knee_rate: float | None = None
    stopped_by: str = ""  # over capacity | generator limited | max steps | aborted | error
    error: str | None = None
    workers: int = 0
    slots: int = 0  # workers x concurrency
    bottleneck: str = ""  # pool | store | generator | host | unknown | none (tools.bottleneck)
    bottleneck_why: str = ""

    @property
    def over_rate(self) -> float | None:
        """The lowest rate that did not fit (None: every step fit)."""
        over = [step.target_rate for step in self.steps if not step.within]
        return min(over) if over else None

    def name_bottleneck(self) -> None:
        """What set the knee, from the lowest step that did not fit."""
        over = [step for step in self.steps if not step.within]
        first = min(over, key=lambda step: step.target_rate) if over else None
        first_hold = self.steps[0].hold_p50_ms if self.steps else None
        self.bottleneck, self.bottleneck_why = bottleneck.name(
            first.load() if first else None, first_hold)

    def store_ceiling(self) -> float | None:
        """Jobs/s at which the store's main thread would be busy all the time, at the CPU per
        completed job its steps measured (None without a figure)."""
        return ceiling_of(self.steps)

    @property
    def exit_code(self) -> int:
        if self.stopped_by == "aborted":
            return EXIT_ABORTED
        if self.stopped_by == "error":
            return EXIT_INFRA
        return EXIT_PASS if self.knee_rate is not None else EXIT_FAIL

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "scenario": self.scenario, "search": asdict(self.search),
            "knee_rate": self.knee_rate, "stopped_by": self.stopped_by,
            "workers": self.workers, "slots": self.slots, "bottleneck": self.bottleneck,
            "bottleneck_why": self.bottleneck_why, "store_ceiling": self.store_ceiling(),
            "steps": [asdict(step) for step in self.steps],
            **({"error": self.error} if self.error else {}),
        }


HEADER = ("step    target  delivered  wait p99ms   backlog  growth/s  cap   why\n"
          "----  --------  ---------  ----------  --------  --------  ----  ---")


def knee_line(result: CapacityResult) -> str:
    """The search's answer in one statement: the knee and the step that bounded it."""
    over = [step for step in result.steps if not step.within]
    last = (min(over, key=lambda step: step.target_rate) if over
            else result.steps[-1] if result.steps else None)  # refining steps come after it
    why = f" ({last.reason})" if last is not None and last.reason else ""
    if result.stopped_by.startswith("max steps") and last is not None:
        return (f"knee: not reached; every step fit, up to {last.target_rate:g} jobs/s "
                "(more with --steps or --step-rate)")
    if result.stopped_by == "generator limited" and last is not None:
        floor = (f"at least {result.knee_rate:g} jobs/s" if result.knee_rate is not None
                 else "unknown")
        return (f"knee: {floor}; at {last.target_rate:g} jobs/s the load generator, not the "
                f"pool, was the limit{why}")
    if result.stopped_by == "over capacity" and last is not None:
        if result.knee_rate is None:
            return (f"knee: none; the first step, {last.target_rate:g} jobs/s, did not "
                    f"fit{why}")
        return (f"knee: {result.knee_rate:g} jobs/s, the highest rate that fit; "
                f"{last.target_rate:g} jobs/s did not{why}")
    so_far = (f"{result.knee_rate:g} jobs/s fit so far" if result.knee_rate is not None
              else "no step finished")
    return f"knee: not found, the search {result.stopped_by or 'stopped'}; {so_far}"


def ceiling_of(steps: Iterable[Step]) -> float | None:
    """Completed jobs per second of the store's main-thread CPU over ``steps``."""
    measured = [step for step in steps if step.store_cpu_s and step.completed]
    cpu = sum(step.store_cpu_s or 0.0 for step in measured)
    return round(sum(step.completed for step in measured) / cpu, 1) if cpu > 0 else None


def table(result: CapacityResult) -> str:
    lines = [f"capacity of {result.scenario}: claim wait p99 <= {result.search.p99_ms:g} ms, "
             f"backlog growth <= {result.search.backlog_growth:g} x rate /s"
             + (", faults in every step" if result.search.fault else ""), HEADER]
    lines += [step.row() for step in sorted(result.steps, key=lambda step: step.target_rate)]
    lines.append(knee_line(result))
    if result.bottleneck:
        lines.append(f"bottleneck: {result.bottleneck}: {result.bottleneck_why}")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (the checker's convention)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def backlog_slope(samples: list[tuple[float, int]]) -> float:
    """Pending growth in jobs/s: least-squares slope over the second half of the samples."""
    tail = samples[len(samples) // 2:]
    if len(tail) < 2:
        return 0.0
    mean_t = sum(t for t, _ in tail) / len(tail)
    mean_p = sum(p for _, p in tail) / len(tail)
    spread = sum((t - mean_t) ** 2 for t, _ in tail)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (p - mean_p) for t, p in tail) / spread


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
    claimed: dict[str, int] = {}
    held: list[float] = []
    for event in events:
        if event.job_id is None:
            continue
        if event.type == Claim.TYPE:
            claimed.setdefault(event.job_id, event.ts)
        elif event.type == Complete.TYPE and event.job_id in claimed:
            held.append(float(event.ts - claimed.pop(event.job_id)))
    return held


def step_name(index: int) -> str:
    return f"capacity-step-{index}"


def settle_name(index: int) -> str:
    """The phase recorded once step ``index`` ends: its events end here."""
    return f"capacity-settle-{index}"


def _phase_at(events: list[Event], name: str) -> int | None:
    return next((i for i, event in enumerate(events)
                 if event.type == Phase.TYPE and event.extra.get("phase") == name), None)


def step_events(events: list[Event], index: int) -> tuple[list[Event], list[Event]] | None:
    """Step ``index``'s events (after its phase, before its settle phase) and what follows
    them; None while its settle phase is not among ``events``."""
    end = _phase_at(events, settle_name(index))
    if end is None:
        return None
    start = _phase_at(events[:end], step_name(index))
    return events[(start + 1 if start is not None else 0):end], events[end + 1:]


class HistoryTail:
    """A history file read while its writer appends to it: whole lines only, each once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""  # a line not yet written whole

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        return [Event.from_record(json.loads(line)) for line in lines if line.strip()]


class _Machinery(Run):
    """The scenario's machinery, with a recorder whose history capacity can read live."""

    follows_history = True


def judge(step: Step, search: CapacitySearch) -> None:
    reasons = []
    if step.delivered_rate < MIN_DELIVERED * step.target_rate:
        reasons.append(f"generator delivered {step.delivered_rate:.1f} < "
                       f"{MIN_DELIVERED:.0%} of target")
    # A few jobs waiting for a free slot come and go at any rate; a backlog no larger than the
    # claim-wait target allows (rate x target, Little's law) is the pool keeping up, however
    # its slope over a few samples tilts. Growth past that is the pool falling behind.
    allowed = step.target_rate * search.p99_ms / 1000
    if (step.backlog_growth_per_s > max(1.0, search.backlog_growth * step.target_rate)
            and step.backlog_tail_max > allowed):
        reasons.append(f"backlog grows {step.backlog_growth_per_s:.1f}/s")
    if step.claim_wait_p99_ms is None or step.claim_wait_p99_ms > search.p99_ms:
        reasons.append(f"claim wait p99 {step.claim_wait_p99_ms} ms > {search.p99_ms:g}")
    step.within = not reasons
    step.reason = "; ".join(reasons)


class CapacityRun:
    def __init__(self, scenario: Scenario, search: CapacitySearch, out: Path,
                 stream: TextIO) -> None:
        load = scenario.load.model_copy(update={"engine": "locust", "mix": LoadMix()})
        self.scenario = scenario.model_copy(update={"load": load})
        self.search = search
        self.out = out
        self.stream = stream
        self.progress = Progress(stream, self.scenario)
        self.progress.planned_s = search.max_steps * search.step_ms / 1000  # the panel's bar
        self.progress.status.planned_faults = len(scenario.faults) if search.fault else 0
        self.run = _Machinery(self.scenario, out, self.progress)
        self.run.trim_history = False  # a step reads its events back from the stream (scripts)
        # The history a run is judged on: the recorder's, when the scripts record no claims.
        self.tail = (HistoryTail(out / MONITOR_HISTORY)
                     if self.scenario.history.source == "monitor" else None)
        self.unread: list[Event] = []  # read from the tail, after the last step's events
        topology = self.scenario.topology
        self.result = CapacityResult(scenario.name, search, workers=topology.workers,
                                     slots=topology.workers * topology.concurrency)

    def execute(self) -> CapacityResult:
        try:
            self.run.bring_up()
            self._search()
            self.run.wind_down()
        except KeyboardInterrupt:
            self.result.stopped_by, self.result.error = "aborted", "interrupted"
            self.progress.say("!! interrupted: tearing down")
            try_teardown(lambda: self.run.wind_down(aborted=True))
        except (InfraError, redis.exceptions.ConnectionError) as failure:
            self.result.stopped_by, self.result.error = "error", str(failure)
            self.progress.say(f"!! infrastructure error: {failure}")
            try_teardown(lambda: self.run.wind_down(aborted=True))
        except Exception as failure:  # a bug: keep what was measured, say where
            self.result.stopped_by = "error"
            self.result.error = f"{type(failure).__name__}: {failure}"
            (self.out / "capacity-error.txt").write_text(traceback.format_exc())
            self.progress.say(f"!! internal error: {self.result.error} "
                              "(traceback in capacity-error.txt)")
            try_teardown(lambda: self.run.wind_down(aborted=True))
        finally:
            try:
                self.run.close()
            finally:
                self.progress.close()  # before the table is printed: no panel drawn after it
        if self.result.stopped_by not in ("aborted", "error"):
            self.result.name_bottleneck()
        summary = self.result.as_dict()
        write_json_atomic(self.out / "capacity.json", summary)
        search_finished.fire(SearchFinished(self.out, summary, self.result.exit_code,
                                            self.scenario.model_dump(mode="json")))
        return self.result

    def _search(self) -> None:
        result = self.result
        for index, rate in enumerate(self.search.rates(), start=1):
            self._settle()
            step = self._step(index, rate)
            result.steps.append(step)
            if index == 1:
                for line in HEADER.splitlines():
                    self.progress.say(line)
            self.progress.say(step.row())
            if not step.within:
                generator = step.delivered_rate < MIN_DELIVERED * step.target_rate
                result.stopped_by = "generator limited" if generator else "over capacity"
                if not generator and result.knee_rate is not None:
                    self._refine(len(result.steps) + 1, result.knee_rate, rate)
                return
            result.knee_rate = rate
        result.stopped_by = "max steps (knee not reached)"

    def _refine(self, first: int, fits: float, over: float) -> None:
        """Bisect between the knee and the first rate over it (``search.refine`` steps)."""
        for index in range(first, first + self.search.refine):
            rate = round((fits + over) / 2, 3)
            self._settle()
            step = self._step(index, rate)
            self.result.steps.append(step)
            self.progress.say(step.row())
            if step.within:
                fits = self.result.knee_rate = rate
            else:
                over = rate

    def _settle(self) -> None:
        """Wait for an empty backlog (and restart workers a fault killed) before a step."""
        queue = self.run.queue
        assert queue is not None
        for name in self.run.restart_stopped_workers():
            self.progress.say(f"restarted {name}")
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while self._backlog()[0] > 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    def _backlog(self) -> tuple[int, int]:
        """(waiting, active) of the queue under test."""
        queue = self.run.queue
        assert queue is not None
        return self.run.family.backlog(queue)

    def _live_workers(self) -> int:
        workers = set(self.scenario.worker_names)
        return sum(1 for name, child in self.run.runtime.members().items()
                   if name in workers and child.alive)

    def _fresh_pending(self) -> int:
        """What grows when the pool falls behind (the family's fresh backlog)."""
        queue = self.run.queue
        assert queue is not None
        return self.run.family.fresh_backlog(queue)

    def _step_events(self, index: int, start_ts: int) -> list[Event]:
        """The step's events from the judged history, once its settle phase is recorded."""
        run, queue = self.run, self.run.queue
        assert queue is not None
        queue.record(**Phase(settle_name(index)).fields())
        if self.tail is None:  # the scripts' events stream: complete as soon as it is read
            entries = queue.client.xrange(run.keys.events, min=f"{start_ts}-0")
            found = step_events(list(decode_entries(entries)), index)
            if found is None:
                raise InfraError(f"the events stream lacks the phase {settle_name(index)} "
                                 "just recorded")
            return found[0]
        deadline = time.monotonic() + RECORDER_WAIT_S
        while True:
            self.unread += self.tail.read()
            if (found := step_events(self.unread, index)) is not None:
                events, self.unread = found
                return events
            if time.monotonic() > deadline:
                raise InfraError(f"the MONITOR recorder did not write the phase "
                                 f"{settle_name(index)} within {RECORDER_WAIT_S:g} s "
                                 f"({MONITOR_HISTORY})")
            time.sleep(0.02)

    def _step(self, index: int, rate: float) -> Step:
        run, queue = self.run, self.run.queue
        assert queue is not None
        step = Step(index, rate, live_workers_min=self.result.workers)
        load = self.scenario.load.model_copy(update={"rate": rate})
        locust = run.locust_load(load, name=f"locust-step{index:02d}", prefix=f"step{index:02d}")
        # Stream ids carry the server's ms, so this record's time starts the step's range.
        start_ts = queue.record(**Phase(step_name(index), rate=rate).fields())
        self.progress.enter(f"step {index} at {rate:g} jobs/s",
                            f"for {self.search.step_ms} ms")
        step.backlog_start = self._backlog()[0]
        run.use_load(locust)
        locust.start()
        began = time.monotonic()
        nemesis = run.new_nemesis() if self.search.fault else None
        samples: list[tuple[float, int]] = []
        busy: list[float] = []  # leased / the live workers' slots (a killed worker has none)
        slots_each = self.scenario.topology.concurrency
        host_before, store_before = bottleneck.host_cpu_times(), bottleneck.store_cpu_s(
            queue.client)
        end = began + self.search.step_ms / 1000
        while (now := time.monotonic()) < end:
            if nemesis is not None:
                nemesis.tick(int((now - began) * 1000))
            samples.append((now - began, self._fresh_pending()))
            live = self._live_workers()
            step.live_workers_min = min(step.live_workers_min, live)
            # at most full: a killed worker's leases stay active until reaped, in no live slot
            busy.append(min(1.0, self._backlog()[1] / (live * slots_each)) if live else 1.0)
            run.status()  # watches the children; feeds the live panel (jobs, backlog, faults)
            time.sleep(min(SAMPLE_S, max(0.0, end - time.monotonic())))
        end_ts = queue.server_time_ms()
        wall_s = time.monotonic() - began
        host_after, store_after = bottleneck.host_cpu_times(), bottleneck.store_cpu_s(
            queue.client)
        step.host_cpu = bottleneck.host_busy(host_before, host_after)
        if store_before is not None and store_after is not None:
            step.store_cpu_s = round(store_after - store_before, 4)
            step.store_cpu = round(step.store_cpu_s / wall_s, 3)
        if tail := busy[len(busy) // 2:]:
            step.slots_busy = round(sum(tail) / len(tail), 3)
        locust.request_stop()
        if nemesis is not None:
            nemesis.heal_all()
            step.faults = len(nemesis.applied)
        locust.stop()
        step.backlog_end = self._backlog()[0]
        step.backlog_growth_per_s = round(backlog_slope(samples), 2)
        step.backlog_tail_max = max((count for _, count in samples[len(samples) // 2:]),
                                    default=0)
        events = self._step_events(index, start_ts)
        waits, step.unclaimed_at_end = claim_waits(events, end_ts)
        enqueue_ts = [event.ts for event in events if event.type == Enqueue.TYPE]
        step.enqueued = len(enqueue_ts)
        in_window = [ts for ts in enqueue_ts if ts <= end_ts]
        if in_window:
            # From the first job to the step's end (Locust's start-up and stop excluded).
            span_s = max((end_ts - min(in_window)) / 1000, 0.001)
            step.delivered_rate = round(len(in_window) / span_s, 1)
        held = hold_times(event for event in events if event.ts <= end_ts)
        step.completed = len(held)
        if held:
            step.hold_p50_ms = percentile(held, 0.50)
        if waits:
            step.claim_wait_p50_ms = percentile(waits, 0.50)
            step.claim_wait_p99_ms = percentile(waits, 0.99)
        figures = locust.summary()["operations"].get("enqueue")
        if figures:
            step.enqueue_p99_ms = figures["p99_ms"]
            step.enqueue_failures = figures["failures"]
        judge(step, self.search)
        return step


def run_capacity(scenario: Scenario, search: CapacitySearch, out: Path,
                 stream: TextIO = sys.stderr) -> CapacityResult:
    search.validate(scenario)
    out.mkdir(parents=True, exist_ok=True)
    return CapacityRun(scenario, search, out, stream).execute()
