"""``echomq-chaos capacity``: how many jobs/s can a scenario's worker pool take?

Brings up the scenario's Valkey, reaper(s) and workers once, then ramps the enqueue rate in
steps, each a fresh headless Locust run (producers only, the scenario's ``load`` settings) for
``step_ms``, judged as ``chaos.tools.capacity_judge`` says (the generator's delivery, the pool's
service rate, the backlog's slope with its standard error, the claim wait p99). The knee is the
highest rate within capacity before the first step that is not (``refine`` bisects further). A
knee is a rate the pool sustains: it is then **held** for ``hold_ms`` and judged again, the
backlog's slope read over the hold; a hold that fails steps down (``capacity_judge.step_down``)
and holds again, at most ``MAX_HOLDS`` times. No knee is above the pool's service rate (live
slots / mean claim-to-complete, Little's law, measured in the run): such a step is over.

The history is the one a run of the scenario is judged on (``chaos.run.sources``): the events
stream the protocol's scripts write, or, with ``[history] source = "monitor"`` (a foreign SUT: the
Node example, BullMQ), the MONITOR recorder's ``history-monitor.jsonl``, read as it is written
(``chaos.tools.capacity_history``). The backlog is the family's own: pending jobs of the echomq
protocol, or BullMQ's waiting jobs (wait, paused, prioritized, delayed).

Between steps the backlog drains (so each step starts empty) and, with ``fault``, the scenario's
fault schedule runs inside every step (``at_ms`` from the step's start) and killed workers are
restarted. Outputs in the output directory: ``capacity.json``, ``history.jsonl``, ``logs/`` and
each step's raw Locust files (``step01_stats.csv`` ...).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import redis

from chaos.errors import InfraError
from chaos.files import write_json_atomic
from chaos.history.events import Event, decode_entries
from chaos.history.monitor import MONITOR_HISTORY
from chaos.history.schema import Enqueue, Phase
from chaos.run.events import SearchFinished, search_finished
from chaos.run.progress import Progress
from chaos.run.runner import Run, try_teardown
from chaos.scenario.model import LoadMix, Scenario
from chaos.tools import bottleneck
from chaos.tools.bottleneck import MIN_DELIVERED
from chaos.tools.capacity_history import (
    HistoryTail,
    settle_name,
    step_events,
    step_name,
)
from chaos.tools.capacity_judge import (
    HOLD_SKIP,
    MAX_HOLDS,
    SAMPLE_PERIOD_S,
    CapacitySearch,
    Step,
    backlog_slope,
    claim_waits,
    growth_of,
    hold_times,
    judge,
    percentile,
    service_times,
    step_down,
)
from chaos.tools.capacity_result import HEADER, CapacityResult, ceiling_of, table

__all__ = ["CapacityResult", "CapacityRun", "CapacitySearch", "HistoryTail", "Step",
           "backlog_slope", "ceiling_of", "claim_waits", "confirm_knee", "judge", "percentile",
           "run_capacity", "step_events", "table"]

SAMPLE_S = SAMPLE_PERIOD_S
SETTLE_TIMEOUT_S = 30.0
RECORDER_WAIT_S = 10.0  # for the MONITOR recorder to write a step's closing phase


class CapacityRun:
    def __init__(self, scenario: Scenario, search: CapacitySearch, out: Path,
                 stream: TextIO) -> None:
        load = scenario.load.model_copy(update={"engine": "locust", "mix": LoadMix()})
        self.scenario = scenario.model_copy(update={"load": load})
        self.search = search
        self.out = out
        self.stream = stream
        self.progress = Progress(stream, self.scenario)
        self.progress.planned_s = (search.max_steps * search.step_ms
                                   + search.hold_ms) / 1000  # the panel's bar
        self.progress.status.planned_faults = len(scenario.faults) if search.fault else 0
        self.run = Run(self.scenario, out, self.progress)
        # capacity reads the recorder's history while the run goes on: a line on disk as written
        self.run.follows_history = True
        self.run.trim_history = False  # a step reads its events back from the stream (scripts)
        # The history a run is judged on: the recorder's, when the scripts record no claims.
        self.tail = (HistoryTail(out / MONITOR_HISTORY)
                     if self.scenario.history.source == "monitor" else None)
        self.unread: list[Event] = []  # read from the tail, after the last step's events
        topology = self.scenario.topology
        self.result = CapacityResult(scenario.name, search, workers=topology.workers,
                                     slots=topology.workers * topology.concurrency,
                                     recorder=self.tail is not None)
        self.service_ms: list[float] = []  # every completing attempt's claim -> complete

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
        self._ramp()
        if self.search.hold_ms and self.result.knee_rate is not None:
            self._hold()

    def _ramp(self) -> None:
        result = self.result
        for index, rate in enumerate(self.search.rates(), start=1):
            step = self._next(rate, "ramp", self.search.step_ms)
            if index == 1:
                for line in HEADER.splitlines():
                    self.progress.say(line)
            self.progress.say(step.row())
            if not step.within:
                generator = step.delivered_rate < MIN_DELIVERED * step.target_rate
                result.stopped_by = "generator limited" if generator else "over capacity"
                if not generator and result.knee_rate is not None:
                    self._refine(result.knee_rate, rate)
                return
            result.knee_rate = rate
        result.stopped_by = "max steps (knee not reached)"

    def _refine(self, fits: float, over: float) -> None:
        """Bisect between the knee and the first rate over it (``search.refine`` steps)."""
        for _ in range(self.search.refine):
            rate = round((fits + over) / 2, 3)
            step = self._next(rate, "refine", self.search.step_ms)
            self.progress.say(step.row())
            if step.within:
                fits = self.result.knee_rate = rate
            else:
                over = rate

    def _hold(self) -> None:
        """Hold the knee for ``search.hold_ms``; a hold that fails steps down and holds again."""
        def hold(rate: float) -> Step:
            step = self._next(rate, "hold", self.search.hold_ms)
            self.progress.say(step.row())
            return step

        confirm_knee(self.result, hold)

    def _next(self, rate: float, kind: str, length_ms: int) -> Step:
        self._settle()
        step = self._step(len(self.result.steps) + 1, rate, kind, length_ms)
        self.result.steps.append(step)
        return step

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

    def _step(self, index: int, rate: float, kind: str, length_ms: int) -> Step:
        run, queue = self.run, self.run.queue
        assert queue is not None
        step = Step(index, rate, kind, length_ms, live_workers_min=self.result.workers)
        load = self.scenario.load.model_copy(update={"rate": rate})
        locust = run.locust_load(load, name=f"locust-step{index:02d}", prefix=f"step{index:02d}")
        # Stream ids carry the server's ms, so this record's time starts the step's range.
        start_ts = queue.record(**Phase(step_name(index), rate=rate).fields())
        self.progress.enter(f"{'hold' if kind == 'hold' else 'step'} {index} at {rate:g} jobs/s",
                            f"for {length_ms} ms")
        step.backlog_start = self._backlog()[0]
        run.use_load(locust)
        locust.start()
        began = time.monotonic()
        nemesis = run.new_nemesis() if self.search.fault else None
        samples: list[tuple[float, int]] = []
        busy: list[float] = []  # leased / the live workers' slots (a killed worker has none)
        alive: list[int] = []  # live workers, each sample
        slots_each = self.scenario.topology.concurrency
        host_before, store_before = bottleneck.host_cpu_times(), bottleneck.store_cpu_s(
            queue.client)
        end = began + length_ms / 1000
        while (now := time.monotonic()) < end:
            if nemesis is not None:
                nemesis.tick(int((now - began) * 1000))
            samples.append((now - began, self._fresh_pending()))
            live = self._live_workers()
            step.live_workers_min = min(step.live_workers_min, live)
            alive.append(live)
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
        skip = HOLD_SKIP if kind == "hold" else 0.5
        growth = growth_of(samples, skip)
        step.backlog_growth_per_s, step.backlog_growth_se = growth.slope, growth.se
        step.backlog_growth_span_s = growth.span_s
        step.backlog_tail_max = max((count for _, count in samples[int(len(samples) * skip):]),
                                    default=0)
        step.backlog_samples = [(round(t, 2), count) for t, count in samples]
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
        # The pool's service rate, Little's law: the live slots over the mean time a completing
        # attempt held one, over every step so far (this one's included).
        self.service_ms += service_times(events)
        if self.service_ms and alive:
            mean_ms = sum(self.service_ms) / len(self.service_ms)
            self.result.service_ms_mean = step.service_ms_mean = round(mean_ms, 1)
            step.live_slots_mean = round(sum(alive) / len(alive) * slots_each, 2)
            step.service_rate = round(step.live_slots_mean * 1000 / mean_ms, 1)
        if waits:
            step.claim_wait_p50_ms = percentile(waits, 0.50)
            step.claim_wait_p99_ms = percentile(waits, 0.99)
        figures = locust.summary()["operations"].get("enqueue")
        if figures:
            step.enqueue_p99_ms = figures["p99_ms"]
            step.enqueue_failures = figures["failures"]
        judge(step, self.search)
        return step


def confirm_knee(result: CapacityResult, hold: Callable[[float], Step]) -> None:
    """Hold ``result``'s knee (``hold``: one hold at a rate, its judged step); a failed hold
    steps down (``step_down``) and holds again, at most ``MAX_HOLDS`` holds. The knee becomes
    the rate held, or None ("not held")."""
    rate: float | None = result.knee_rate
    for _ in range(MAX_HOLDS):
        if rate is None:
            break
        step = hold(rate)
        if step.within:
            result.knee_rate, result.held = rate, True
            return
        if step.delivered_rate < MIN_DELIVERED * step.target_rate:
            break  # the generator, not the pool: a lower rate says nothing more
        result.stopped_by = "over capacity"
        rate = step_down(rate, step, result.search.resolution)
    result.knee_rate, result.stopped_by = None, "not held"


def run_capacity(scenario: Scenario, search: CapacitySearch, out: Path,
                 stream: TextIO = sys.stderr) -> CapacityResult:
    search.validate(scenario)
    out.mkdir(parents=True, exist_ok=True)
    return CapacityRun(scenario, search, out, stream).execute()
