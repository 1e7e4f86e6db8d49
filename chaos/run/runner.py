"""Runs one scenario end to end: bring up, load ∥ faults, heal, drain, check, report.

Phases (all on the runner's monotonic clock; the history carries the Valkey clock):
  warmup  load only, so the pool reaches a steady state
  chaos   load and the fault schedule
  heal    load stops; every fault that can be undone is undone (frozen workers resume)
  drain   wait until pending and active are empty, at most lease + reap interval + margin
then the wind-down (also on failure paths): the workers stop and finish what they hold while the
reapers still run; the reapers stop once the workers are gone (RuntimeBase.wind_down_order).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chaos.errors import InfraError
from chaos.family import family_for
from chaos.faults.nemesis import Nemesis, plan
from chaos.files import write_json_atomic, write_text_atomic
from chaos.history import schema
from chaos.history.events import MEMORY_SAMPLES, HistoryExporter, save_surviving_history
from chaos.load.sources import LOCUST_PREFIX, LoadSource, LocustLoad
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.run.events import run_finished
from chaos.run.preflight import Preflight, preflight
from chaos.run.progress import Progress, Status
from chaos.run.result import RunResult, finish
from chaos.run.startup import wait_until_started
from chaos.runtime.base import RuntimeBase
from chaos.runtime.local import LocalRuntime
from chaos.runtime.pids import (
    RUNNER,
    forget_process,
    record_process,
)
from chaos.runtime.valkey import split_password
from chaos.scenario.model import Load, Scenario

if TYPE_CHECKING:  # the checker, the reports and the recorder are imported when used: a run
    # reaches its first claim without them (docs/running.md, start-up)
    from chaos.history.monitor import MonitorRecorder
    from chaos.run.sources import LiveCounts

BACKLOG_SAMPLE_S = 0.25
# report.json's backlog keeps at most this many samples: past it every other one is dropped and
# the period doubles, so an hour's soak holds as many as a minute's run (its RSS stays flat).
BACKLOG_SAMPLES_KEPT = 2000


def thin_samples(samples: list[Any], kept: int) -> bool:
    """Past ``kept`` samples drop every other one, in place (the first stays); True when it did:
    the caller then samples half as often, so the samples stay evenly spread over the run."""
    if len(samples) <= kept:
        return False
    del samples[1::2]
    return True


def make_runtime(scenario: Scenario, run_dir: Path) -> RuntimeBase:
    """The runtime of the run, chosen once: child processes here (local), containers (docker),
    or a queue already deployed (attach). The runner asks it, never which it is."""
    if scenario.runtime == "docker":
        from chaos.runtime.docker import DockerRuntime  # the Docker SDK only when asked for

        return DockerRuntime(scenario, run_dir)
    if scenario.runtime == "attach":
        from chaos.runtime.attach import AttachRuntime

        return AttachRuntime(scenario, run_dir)
    return LocalRuntime(scenario, run_dir)


class Run:
    """One scenario's machinery: the runtime, the queue, the history exporter, the load source
    and the nemesis, driven through the stages below. ``run_scenario`` runs them all; the
    capacity search and the pytest plugin use the pieces they need."""

    # True where something reads the MONITOR recorder's history while the run goes on (capacity):
    # the recorder then puts each line on disk as it writes it.
    follows_history = False

    def __init__(self, scenario: Scenario, run_dir: Path, progress: Progress,
                 strict: bool = False) -> None:
        self.scenario = scenario
        self.strict = strict
        self.preflight: Preflight | None = None
        self.crashes: dict[str, int] = {}  # worker -> how many times it crashed
        self.run_dir = run_dir
        self.progress = progress
        self.history_path = run_dir / "history.jsonl"
        self.runtime = make_runtime(scenario, run_dir)
        self.runtime.say = progress.say
        self.keys = QueueKeys(scenario.valkey.prefix, scenario.valkey.queue)
        self.family = family_for(scenario, self.keys)  # the queue under test: chosen once
        self.queue: QueueClient | None = None
        self.exporter: HistoryExporter | None = None
        # This run's window of the events stream (docs/attach.md): the ids of its run event and
        # of its end phase, once recorded. A reused store holds other runs' events around it.
        self.history_begins_at = "-"
        self.history_ends_at: str | None = None
        self.trim_history = True  # the exporter trims the stream (a tool reading it sets False)
        self.recorder: MonitorRecorder | None = None  # history.source monitor | both
        self.live_counts: LiveCounts | None = None  # history.source monitor: the panel's
        self.load_source: LoadSource | None = None  # chosen by use_load, else the scenario's
        self.nemesis: Nemesis | None = None
        self.unplanned = 0  # store faults no one planned
        self.drained = False
        self.drain_ms: int | None = None
        # Each process's first queue action (chaos.run.startup): when the run found it at work
        self.startup: dict[str, Any] = {}
        self.backlog: list[dict[str, Any]] = []  # pending/active over time, for the report
        self.last_sample = 0.0
        self.backlog_period_s = BACKLOG_SAMPLE_S
        # The store stayed out of reach past the runner's retries: from then on each store call
        # is tried once, so the wind-down stops every process and keeps the evidence at once.
        self.store_gone = False

    # --- stages ---------------------------------------------------------------------------
    def bring_up(self) -> None:
        scenario, topo = self.scenario, self.scenario.topology
        proxied = " via toxiproxy" if scenario.uses_proxies else ""
        self.progress.enter("setup", f"valkey + {len(scenario.reaper_names)} reaper(s) + "
                                     f"{len(scenario.worker_names)} workers"
                                     f"{proxied}, protocol {scenario.protocol}")
        self.runtime.start_valkey()
        toxiproxy = self.runtime.start_network()
        if toxiproxy is not None:
            self.progress.say(f"toxiproxy: {toxiproxy.kind} {toxiproxy.version} at "
                              f"{toxiproxy.api_url}, {len(self.runtime.link_urls)} proxies")
        self.queue = QueueClient(self.runtime.client(), self.keys)
        self.preflight = preflight(self.queue.client, own_server=not scenario.valkey.url,
                                   strict=self.strict)
        for warning in self.preflight.warnings:
            self.progress.say(f"!! preflight: {warning}")
        if self.strict and self.preflight.warnings:
            raise InfraError("preflight (--strict): " + "; ".join(self.preflight.warnings))
        queue = self.queue
        self.runtime.admit_queue(queue, lambda: self.family.backlog(queue), self.family.key_base)
        if scenario.history.source != "scripts":
            self.start_recorder()
        # The run event opens this run's window of the stream: a reused store (attach, a given
        # server) still holds earlier runs' events before it, which are not this run's history.
        _, self.history_begins_at = self.queue.record_entry(**schema.Run(
            scenario=scenario.name, seed=scenario.seed, lease_ms=topo.lease_ms,
            reap_interval_ms=topo.reap_interval_ms, reap_limit=topo.reap_limit,
            heartbeat_ms=topo.effective_heartbeat_ms, tolerance_ms=scenario.check.tolerance_ms,
            workers=tuple(scenario.worker_names), concurrency=topo.concurrency,
            protocol=scenario.protocol, reapers=scenario.reaper_count,
            report_only=tuple(scenario.check.report_only),
            wait_replicas=scenario.wait_replicas,
            max_stalls=topo.max_stalls or 0, heartbeat=topo.heartbeat,
            reap_allowance_ms=scenario.check.reap_allowance_ms,
            max_needless=scenario.check.max_needless,
            dialect=self.family.dialect_name, sweepers=self.family.sweepers,
            sweep_allowance_ms=scenario.check.sweep_allowance_ms,
            reap_rhythm="" if scenario.sut.reap_rhythm == "grid" else scenario.sut.reap_rhythm,
        ).fields())
        self.exporter = HistoryExporter(self.runtime.client(), self.keys.events, self.history_path,
                                        trim=self.trim_history,
                                        memory_path=self.run_dir / MEMORY_SAMPLES,
                                        begins_at=self.history_begins_at)
        self.exporter.start()
        reapers = self.runtime.start_reapers()
        self.runtime.start_workers()
        self.startup = wait_until_started(
            self.queue, self.runtime, self.recorder,
            [child.name for child in reapers] + scenario.worker_names, self.progress.say)
        self.new_nemesis()

    def start_recorder(self) -> None:
        """The MONITOR recorder (docs/design.md §5), on its own connection to the server."""
        from chaos.history.monitor import MONITOR_HISTORY, MonitorRecorder
        from chaos.run.sources import LiveCounts

        assert self.queue is not None
        server = self.queue.client.connection_pool.connection_kwargs
        if "host" not in server:
            raise InfraError("history.source = monitor needs a direct server connection, not "
                             f"{self.runtime.url.split('@')[-1]}")
        self.recorder = MonitorRecorder(
            self.family.dialect(), self.run_dir / MONITOR_HISTORY, server["host"],
            int(server["port"]), server.get("password"), server.get("username"),
            members=[*self.scenario.worker_names, *self.scenario.reaper_names],
            socket_owner=self.runtime.socket_owner, line_buffered=self.follows_history,
            windowed=True)
        self.recorder.start()
        if self.scenario.history.source == "monitor":
            self.live_counts = LiveCounts(self.run_dir / MONITOR_HISTORY)

    def stop_recorder(self) -> None:
        """Read the feed up to now, close, and save the recorder's health (monitor.json)."""
        if self.recorder is not None:
            from chaos.history.monitor import HEALTH_FILE

            health = self.recorder.stop()
            self.recorder = None
            write_json_atomic(self.run_dir / HEALTH_FILE, health.as_dict())

    # --- what the capacity search and the pytest plugin use -------------------------------
    def new_nemesis(self) -> Nemesis:
        """A fresh nemesis for the scenario's fault schedule (its clock starts at 0); the
        run's teardown heals what it applied."""
        assert self.queue is not None
        self.nemesis = Nemesis(self.scenario, self.runtime,
                               self.family.lease_holders(self.queue, self.recorder))
        return self.nemesis

    def use_load(self, source: LoadSource) -> None:
        """The load source the run drives (``exercise`` starts it; the teardown stops it).
        Unless one is chosen, ``exercise`` uses the scenario's own."""
        self.load_source = source

    def locust_load(self, load: Load, name: str = "locust",
                    prefix: str = LOCUST_PREFIX) -> LocustLoad:
        """Locust driving ``load`` at this run's queue (``start`` returns once it enqueues)."""
        assert self.queue is not None
        source = self.family.locust_load(self.runtime, load, self.run_dir, name, prefix,
                                         ready=self.queue)
        source.say = self.progress.say  # e.g. remote workers connecting
        return source

    def scenario_load(self) -> LoadSource:
        """The scenario's own load source: Locust, or the built-in producer."""
        load = self.scenario.load
        if load.engine == "locust":
            self.progress.say(f"locust: {load.producers} producer(s) + {load.consumers} "
                              f"consumer(s) at {load.rate:g} jobs/s, {load.processes} "
                              "process(es)")
            return self.locust_load(load)
        return self.family.producer(self.runtime, load)

    def restart_stopped_workers(self) -> list[str]:
        """Start again every worker that is not running (a fault killed it); their names."""
        restarted = []
        for name, child in self.runtime.members().items():
            if name in self.scenario.worker_names and not child.alive:
                self.runtime.restart_worker(name)
                restarted.append(name)
        return restarted

    def status(self, force: bool = False) -> None:
        """Watch the children; every 250 ms sample the backlog and update the progress."""
        assert self.queue is not None
        self.watch_children()
        self.record_unplanned_store_faults()
        now = time.monotonic()
        if not force and now - self.last_sample < self.backlog_period_s:
            return
        self.last_sample = now
        pending, active = self._backlog()
        elapsed_ms = int((now - self.progress.started) * 1000)
        self.backlog.append({"t_ms": elapsed_ms, "phase": self.progress.phase,
                             "pending": pending, "active": active})
        if thin_samples(self.backlog, BACKLOG_SAMPLES_KEPT):
            self.backlog_period_s *= 2
        counts = self.exporter.counts if self.exporter else {}
        if self.live_counts is not None:  # judged on the monitor history: count that
            counts = self.live_counts.update()
        self.progress.update(Status(
            enqueued=counts.get("enqueue", 0), claimed=counts.get("claim", 0),
            completed=counts.get("complete", 0), reaped=counts.get("reap", 0),
            pending=pending, active=active,
            faults=len(self.nemesis.applied) if self.nemesis else 0))

    def watch_children(self) -> None:
        """A worker or reaper that dies without a planned fault is recorded as a crash fault;
        with ``topology.restart_crashed`` a crashed worker is started again under its name (the
        crash's heal, kind ``restart``, closes the fault window)."""
        assert self.queue is not None
        failure = getattr(self.load_source, "failure", "")
        if failure:  # the load's enqueue path broke for good (a producer command's protocol)
            raise InfraError(failure)
        for child in list(self.runtime.members().values()):
            if child.name in self.runtime.server_names():  # only a planned fault kills it
                if not child.alive and not child.killed:
                    raise InfraError(f"{child.name} exited during the run "
                                     f"(see logs/{child.name}.log)")
                continue
            if child.expected_exit:
                continue
            if child in (getattr(self.load_source, "child", None),  # Locust, a producer command
                         getattr(self.load_source, "command_child", None)):  # Locust's command
                if not child.alive:  # the load's own process: the run's machinery, not the SUT
                    raise InfraError(f"{child.name} exited during the run (code "
                                     f"{child.exit_code}; see logs/{child.name}.log)")
                continue
            if not child.alive and not child.killed:
                child.killed = True
                crashes = self.crashes[child.name] = self.crashes.get(child.name, 0) + 1
                fault_id = f"crash-{child.name}" + (f"-{crashes}" if crashes > 1 else "")
                self.progress.say(f"!! {child.name} exited unexpectedly "
                                  f"(code {child.exit_code}); recorded as a crash")
                self.queue.record(**schema.Fault(fault_id, "crash", child.name).fields())
                if (self.scenario.topology.restart_crashed
                        and child.name in self.scenario.worker_names):
                    self.runtime.restart_worker(child.name, crashes)
                    self.queue.record(**schema.Heal(fault_id, "restart", child.name).fields())

    def record_unplanned_store_faults(self, final: bool = False) -> None:
        """Sentinel failing over unasked: a store fault with planned = false (docs/faults.md)."""
        assert self.queue is not None
        for done in self.runtime.unplanned_store_faults(final):
            self.unplanned += 1
            self.progress.say(f"!! Sentinel failed over on its own: {done.node} -> "
                              f"{done.new_primary}, {done.down_ms} ms without a synced replica")
            self.queue.record(**schema.Fault(
                f"unplanned-{self.unplanned}", "failover", done.node, target="sentinel",
                killed_ts=done.killed_ts, down_ms=done.down_ms, promoted_ms=done.promoted_ms,
                new_primary=done.new_primary, planned=False).fields())

    def _phase(self, name: str) -> None:
        assert self.queue is not None
        self.queue.record(**schema.Phase(name).fields())
        self.progress.enter(name)

    def _hold(self, duration_ms: int, nemesis_clock_start: float | None = None) -> None:
        end = time.monotonic() + duration_ms / 1000
        while (now := time.monotonic()) < end:
            if nemesis_clock_start is not None and self.nemesis is not None:
                self.nemesis.tick(int((now - nemesis_clock_start) * 1000))
                due = self.nemesis.next_due_ms()
                wait_until = end if due is None else min(end, nemesis_clock_start + due / 1000)
            else:
                wait_until = end
            self.status()
            time.sleep(max(0.0, min(0.05, wait_until - time.monotonic())))

    def exercise(self) -> None:
        assert self.nemesis is not None
        if self.load_source is None:
            self.use_load(self.scenario_load())
        load = self.load_source
        assert load is not None
        phases = self.scenario.phases
        # The load is started (its first job answered, Locust enqueuing) before the warmup
        # begins: a load path's own start-up is not the warmup's (chaos.run.startup).
        load.start()
        self._phase("warmup")
        self._hold(phases.warmup_ms)
        self.status(force=True)
        self._phase("chaos")
        self._hold(phases.chaos_ms, nemesis_clock_start=time.monotonic())
        self.status(force=True)
        self._phase("heal")
        load.request_stop()
        self.nemesis.heal_all()
        load.stop()  # Locust: waits for it to write its reports
        self._hold(phases.heal_ms)
        self.status(force=True)
        self._phase("drain")
        self.drain()

    def _backlog(self) -> tuple[int, int]:
        """(waiting, active) of the queue under test."""
        assert self.queue is not None
        return self.family.backlog(self.queue)

    def drain(self) -> None:
        assert self.queue is not None
        started = time.monotonic()
        deadline = started + self.scenario.drain_timeout_ms / 1000
        while time.monotonic() < deadline:
            if self._backlog() == (0, 0):
                self.drained = True
                break
            self.status()
            time.sleep(0.05)
        self.drain_ms = int((time.monotonic() - started) * 1000)
        self.status(force=True)
        if not self.drained:
            self.progress.say(f"!! drain timed out after {self.drain_ms} ms with jobs left")

    def wind_down(self, aborted: bool = False, cause: str = "") -> None:
        """Stop children gracefully and write the last events (also on failure paths): the
        workers first, the reapers once they are gone, so what the workers do meanwhile is the
        queue as it runs (``RuntimeBase.wind_down_order`` says why).
        ``cause`` (interrupt | infra | internal) lets an offline re-check tell an aborted run
        from one that broke, exactly as the runner did."""
        if self.load_source is not None:
            self.load_source.stop()
        if self.nemesis is not None:
            self.nemesis.heal_all()
        self.runtime.stop_workers()
        if (queue := self.queue) is not None:
            end = schema.Phase("end", drained=self.drained, aborted=aborted, cause=cause)
            self._store_step(lambda: self.record_unplanned_store_faults(final=True))
            self._store_step(lambda: self._record_end(queue, end))
        self.stop_recorder()
        if self.exporter is not None:
            exporter = self.exporter
            self._store_step(lambda: exporter.drain(self.history_ends_at))
            self._store_step(self.save_surviving_history)

    def give_up_on_store(self) -> None:
        """The store stayed out of reach past the retries: one try per call from now on."""
        self.store_gone = True
        for client in (self.queue and self.queue.client, self.exporter and self.exporter.client):
            if client:
                client.set_retry(Retry(NoBackoff(), 0))

    def _store_step(self, step: Any) -> None:
        """A wind-down step that needs the store; once it is gone for good, a failed one is
        said and skipped, so the steps after it (the evidence on disk) still run."""
        if not self.store_gone:
            step()
            return
        try:
            step()
        except redis.exceptions.ConnectionError as error:
            print(f"   (skipped, the store is out of reach: {error})", file=sys.stderr)

    def _record_end(self, queue: QueueClient, end: schema.Phase) -> None:
        held = self.family.held(queue)
        if held:
            end = dataclasses.replace(end, held=held)
        _, self.history_ends_at = queue.record_entry(**end.fields())

    def save_surviving_history(self) -> None:
        """Read the store's stream back: if a store fault rolled back events the exporter had
        already copied, keep the store's version beside history.jsonl for the ledger check."""
        from chaos.check.ledger import SURVIVING_HISTORY

        # a fresh one: after a failover, ask Sentinel again
        client = self.runtime.client(retrying=not self.store_gone)
        try:
            save_surviving_history(client, self.keys.events, self.history_path,
                                   self.run_dir / SURVIVING_HISTORY,
                                   self.exporter.trimmed_to if self.exporter else None,
                                   begins_at=self.history_begins_at,
                                   ends_at=self.history_ends_at or "+")
        finally:
            client.close()

    def describe(self, wall_ms: int, load: dict[str, Any] | None) -> dict[str, Any]:
        """``report.json["run"]``: what the run did and saw (``load``: the load source's
        summary, if it could be read)."""
        enqueue = load.get("operations", {}).get("enqueue", {}) if load else {}
        source = self.load_source.describe() if self.load_source is not None else {
            "target_rate": self.scenario.load.rate, "engine": self.scenario.load.engine,
            "poison_sent": 0}
        return {
            "wall_ms": wall_ms,
            "drained": self.drained,
            "drain_ms": self.drain_ms,
            "startup": self.startup,
            "valkey_url": self.runtime.url.split("@")[-1],
            "protocol": self.scenario.protocol,
            "runtime": self.runtime.describe(),
            "toxiproxy": self.runtime.describe_network(),
            "load": {
                "target_rate": source["target_rate"],
                "engine": source["engine"],
                "enqueued_acknowledged": (enqueue.get("requests", 0)
                                          - enqueue.get("failures", 0)),
                "enqueue_errors": enqueue.get("failures", 0),
                "poison_sent": source["poison_sent"],
            },
            "crashes": self.crashes,
            "faults": [vars(applied) for applied in
                       (self.nemesis.applied if self.nemesis else [])],
            "faults_skipped": self.nemesis.skipped if self.nemesis else [],
            "backlog": self.backlog,
        }

    def load_summary(self) -> dict[str, Any] | None:
        """``report["load"]``: the load source's figures (None when no load ran, or its figures
        cannot be read: the report says so under "error" rather than lose the verdict)."""
        if self.load_source is None:
            return None
        try:
            return self.load_source.summary()
        except (OSError, ValueError, KeyError) as failure:
            print(f"   (load figures unreadable: {failure})", file=sys.stderr)
            return None

    def close(self) -> None:
        try_teardown(self.stop_recorder)
        if self.exporter is not None:
            self.exporter.close()
        self.runtime.close()


def run_scenario(scenario: Scenario, run_dir: Path, stream: TextIO = sys.stderr,
                 strict: bool = False) -> RunResult:
    """Run one scenario; always leaves history.jsonl and report.json in ``run_dir``.
    ``strict``: a preflight warning about the server is an infrastructure error (exit 3)."""
    progress = Progress(stream, scenario, planned_faults=len(plan(scenario)))
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = scenario.model_dump(mode="json")
    if scenario.valkey.url:  # the run directory is shared evidence: no secrets in it
        resolved["valkey"]["url"] = split_password(scenario.valkey.url)[0]
    write_json_atomic(run_dir / "scenario.json", resolved)
    # While this record names a live process, `echomq-chaos clean` leaves the run alone.
    record_process(run_dir, RUNNER, os.getpid())
    run = Run(scenario, run_dir, progress, strict)
    outcome, error = "error", None
    started = time.monotonic()
    try:
        run.bring_up()
        run.exercise()
        run.wind_down()
        outcome = "finished"
    except KeyboardInterrupt:
        outcome, error = "aborted", "interrupted (SIGINT or SIGTERM)"
        progress.say("!! interrupted: tearing down (interrupt again to exit at once)")
        try_teardown(lambda: run.wind_down(aborted=True, cause="interrupt"))
    except (InfraError, redis.exceptions.ConnectionError) as failure:
        # A store out of reach past the runner's own retries (e.g. Sentinel naming no primary
        # for longer: its TILT mode after a stall) is the infrastructure's failure, not a bug.
        error = (str(failure) if isinstance(failure, InfraError) else
                 f"the store stayed out of reach past the runner's retries: "
                 f"{type(failure).__name__}: {failure}")
        if not isinstance(failure, InfraError):
            write_text_atomic(run_dir / "runner-error.txt", traceback.format_exc())
        progress.say(f"!! infrastructure error: {error}")
        if not isinstance(failure, InfraError):
            run.give_up_on_store()
        try_teardown(lambda: run.wind_down(aborted=True, cause="infra"))
    except Exception as failure:  # an unexpected bug: keep the evidence, say where
        error = f"{type(failure).__name__}: {failure}"
        write_text_atomic(run_dir / "runner-error.txt", traceback.format_exc())
        progress.say(f"!! internal error: {error} (traceback in runner-error.txt)")
        try_teardown(lambda: run.wind_down(aborted=True, cause="internal"))
    finally:
        try:
            run.close()
        finally:
            progress.close()
    wall_ms = int((time.monotonic() - started) * 1000)
    try:
        result = finish(run, outcome, error, wall_ms, stream)
        run_finished.fire(result)  # the run directory is complete: listeners may read it
        return result
    except KeyboardInterrupt:  # Ctrl-C while checking: still leave a report (`check` redoes it)
        from chaos.report.summary import build_report

        if not (run_dir / "report.json").exists():
            write_json_atomic(run_dir / "report.json", build_report(
                scenario.name, "aborted", None,
                error="interrupted while checking the history; re-check with "
                      "`echomq-chaos check`"))
        raise
    finally:
        forget_process(run_dir, RUNNER)


def try_teardown(action: Any) -> None:
    """One teardown step: a failure is printed, and teardown goes on (the report, or
    capacity.json, says what happened)."""
    try:
        action()
    except Exception as failure:
        print(f"   (teardown step failed: {failure})", file=sys.stderr)
