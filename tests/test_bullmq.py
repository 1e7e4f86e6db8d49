"""Real BullMQ under test (docs/bullmq.md): a real valkey-server, three real BullMQ worker
processes from ``sut/bullmq`` (npm ``bullmq``, installed with ``npm ci``), jobs added through
BullMQ's own add script (``chaos.queues.bullmq.load``), workers really SIGKILLed and SIGSTOPped, the
history recorded from MONITOR with the ``bullmq`` dialect, and the pure checker's verdict on it.

Without node or ``sut/bullmq/node_modules`` these tests skip, except under CI=true, where that is
a failure (the set-up must have installed them)."""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from chaos.check.checker import Verdict, check
from chaos.history.dialects import make_dialect
from chaos.history.events import Event, read_history, seq_key
from chaos.history.monitor import MonitorRecorder, RecorderHealth
from chaos.history.schema import Fault, Heal, Phase, Run
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.queues.bullmq.load import (
    BullMQFaultHistory,
    BullMQQueue,
    BullMQUnavailable,
    backlog,
    jobs_added,
    sut_dir,
)
from chaos.runtime.valkey import ValkeyServer
from tests.procs import wait_until

PREFIX = "bq"
_runs = itertools.count(1)

# Decided when each test runs, not when it is collected: a module installed in between
# (`npm ci` in another shell) is used, not skipped (conftest.py's bullmq_installed).
pytestmark = pytest.mark.usefixtures("bullmq_installed")


def _payload(handler_ms: int, fail_attempts: int = 0) -> str:
    return json.dumps({"handler_ms": handler_ms, "crash": False, "pad": "x",
                       **({"fail_attempts": fail_attempts} if fail_attempts else {})})


class BullMQRun:
    """One short run by hand: recorder, runner events, N BullMQ workers, a producer."""

    def __init__(self, server: ValkeyServer, lease_ms: int, stalled_ms: int, workers: int = 3,
                 concurrency: int = 2, broken: str = "", heartbeat_ms: int = 0,
                 max_stalls: int = 0, job_options: dict[str, Any] | None = None,
                 tolerance_ms: int = 250) -> None:
        self.server = server
        self.lease_ms, self.stalled_ms = lease_ms, stalled_ms
        self.queue_name = f"q{next(_runs)}"
        self.path = Path(server.data_dir).parent / f"{self.queue_name}-history.jsonl"
        host, port = "127.0.0.1", server.port
        self.node_url = f"redis://:{server.password}@{host}:{port}/0" if server.password \
            else f"redis://{host}:{port}/0"
        self.client = redis_client(server.url, password=server.password, decode_responses=True)
        self.runner = QueueClient(self.client, QueueKeys(PREFIX, self.queue_name))
        self.recorder = MonitorRecorder(make_dialect("bullmq", PREFIX, self.queue_name),
                                        self.path, host, port, server.password)
        self.recorder.start()
        self.names = [f"worker-{n}" for n in range(1, workers + 1)]
        self.runner.record(**Run(
            scenario="bullmq-test", lease_ms=lease_ms, reap_interval_ms=stalled_ms,
            heartbeat_ms=heartbeat_ms or lease_ms // 2, workers=tuple(self.names),
            concurrency=concurrency, protocol="bullmq", reapers=0, max_stalls=max_stalls or None,
            tolerance_ms=tolerance_ms, dialect="bullmq").fields())
        self.runner.record(**Phase("warmup").fields())
        env = {**os.environ, "CHAOS_VALKEY_URL": self.node_url, "CHAOS_QUEUE": self.queue_name,
               "CHAOS_PREFIX": PREFIX, "CHAOS_LEASE_MS": str(lease_ms),
               "CHAOS_REAP_INTERVAL_MS": str(stalled_ms), "CHAOS_HEARTBEAT_MS": str(heartbeat_ms),
               "CHAOS_CONCURRENCY": str(concurrency), "CHAOS_MAX_STALLS": str(max_stalls),
               "CHAOS_BULLMQ_BREAK": broken}
        self.workers = {name: subprocess.Popen(
            ["node", str(sut_dir() / "worker.js")], env={**env, "CHAOS_NAME": name},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True) for name in self.names}
        for name, process in self.workers.items():
            self._wait_ready(name, process)
        self.producer = BullMQQueue(self.node_url, self.queue_name, PREFIX,
                                    job_options=job_options)
        self.enqueued: list[str] = []
        self.faults = itertools.count(1)

    def _wait_ready(self, name: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 20)
        line = process.stdout.readline() if ready else ""
        assert "ready" in line, f"{name} did not start: {line!r} (exit {process.poll()})"

    def key(self, suffix: str) -> str:
        return f"{PREFIX}:{self.queue_name}:{suffix}"

    def enqueue(self, count: int, handler_ms: int, rate: float = 0.0, kind: str = "",
                fail_attempts: int = 0, producer: BullMQQueue | None = None) -> None:
        for _ in range(count):
            job_id = f"job-{len(self.enqueued) + 1:05d}"
            assert (producer or self.producer).enqueue(
                job_id, _payload(handler_ms, fail_attempts), kind=kind)
            self.enqueued.append(job_id)
            if rate:
                time.sleep(1 / rate)

    def holder(self, timeout_s: float = 5.0) -> tuple[str, str]:
        """The oldest active job with a live lock, and its holder (as the nemesis picks
        ``holding_oldest_lease``)."""
        faults = BullMQFaultHistory(self.runner, self.client, PREFIX, self.queue_name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            holders = faults.lease_holders_oldest_first()
            for job_id in reversed(self.client.lrange(self.key("active"), 0, -1)):
                name = self.client.hget(self.key(job_id), "pb")
                if holders and name == holders[0] and name in self.workers \
                        and self.client.exists(self.key(f"{job_id}:lock")):
                    return job_id, name
            time.sleep(0.01)
        raise AssertionError("no active job with a live lock")

    def fault(self, kind: str, name: str) -> str:
        fault_id = f"f{next(self.faults)}"
        os.kill(self.workers[name].pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        self.runner.record(**Fault(fault_id, kind, name).fields())
        return fault_id

    def resume(self, fault_id: str, name: str) -> None:
        self.runner.record(**Heal(fault_id, "pause", name).fields())
        os.kill(self.workers[name].pid, signal.SIGCONT)

    def drain(self, timeout_s: float) -> bool:
        self.runner.record(**Phase("drain").fields())
        deadline = time.monotonic() + timeout_s
        assert jobs_added(self.client, PREFIX, self.queue_name) == len(self.enqueued)
        while time.monotonic() < deadline:
            if backlog(self.client, PREFIX, self.queue_name) == (0, 0):
                return True
            time.sleep(0.05)
        return False

    def finish(self, drained: bool) -> tuple[Verdict, list[Event], RecorderHealth]:
        self.runner.record(**Phase("end", drained=drained).fields())
        health = self.recorder.stop()
        self.close()
        events = read_history(self.path)
        return check(events), events, health

    def close(self) -> None:
        self.producer.close()
        for process in self.workers.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.client.close()


@pytest.fixture
def bullmq_runs(valkey_server: ValkeyServer) -> Iterator[list[BullMQRun]]:
    """Every run a test starts is torn down, whatever the test did."""
    runs: list[BullMQRun] = []
    yield runs
    for run in runs:
        if any(process.poll() is None for process in run.workers.values()):
            run.recorder.stop()
            run.close()


def _of(events: list[Event], kind: str, **fields: Any) -> list[Event]:
    return [event for event in events if event.type == kind and all(
        getattr(event, name, None) == value or event.extra.get(name) == value
        for name, value in fields.items())]


def test_kill_worker_mid_job_every_job_recovered_within_bullmqs_bound(valkey_server,
                                                                       bullmq_runs):
    run = BullMQRun(valkey_server, lease_ms=1000, stalled_ms=500)
    bullmq_runs.append(run)
    run.enqueue(12, handler_ms=600, rate=40)
    run.runner.record(**Phase("chaos").fields())
    job_id, victim = run.holder()
    run.fault("kill", victim)
    run.enqueue(12, handler_ms=300, rate=40)
    drained = run.drain(timeout_s=run.lease_ms / 1000 + 2 * run.stalled_ms / 1000 + 5)
    verdict, events, health = run.finish(drained)

    assert health.trustworthy and not health.undecoded_calls, health.problems()
    assert drained and verdict.passed, {name: result.examples for name, result
                                        in verdict.invariants.items() if not result.ok}
    assert verdict.jobs.enqueued == 24 and verdict.jobs.completed == 24
    # The killed worker's job came back: reaped from the killed holder, claimed and completed
    # by another worker with a higher attempt.
    (reap,) = _of(events, "reap", job_id=job_id)
    assert reap.worker == victim and reap.extra["stalls"] == "1"
    (complete,) = _of(events, "complete", job_id=job_id)
    assert complete.worker != victim and complete.attempt == 2
    bound = verdict.invariants["recovery_bound"].figures
    assert bound["stranded"] >= 1
    assert bound["family_figures"]["within_bullmq_bound"] is True
    # Judged per recovery on the stalled checks the history shows (sweep events, each with the
    # worker whose connection ran it): S + max(L, S) while they run on time.
    figures = bound["family_figures"]
    assert figures["judged_per_recovery"] and figures["stalled_checks"] > 0
    assert bound["bound_ms"] == 500 + max(1000, 500) + verdict.config.tolerance_ms
    sweeps = _of(events, "sweep")
    assert sweeps and {event.worker for event in sweeps} <= set(run.names)
    print("kill-worker (L=1000, S=500):", bound["family_figures"])
    # Every claim's holder is the connection that made the call (client name = worker name).
    claims = _of(events, "claim")
    assert claims and all(event.worker == event.extra.get("conn") for event in claims)


def test_woken_holder_complete_is_refused_and_recorded(valkey_server, bullmq_runs):
    """A SIGSTOPped worker woken after its lock lapsed and the job was re-run elsewhere: BullMQ
    refuses its moveToFinished, the history records a complete_rejected, nothing completes
    twice."""
    run = BullMQRun(valkey_server, lease_ms=600, stalled_ms=300)
    bullmq_runs.append(run)
    run.runner.record(**Phase("chaos").fields())
    run.enqueue(4, handler_ms=400)
    job_id, victim = run.holder()
    fault_id = run.fault("pause", victim)
    _wait_reclaimed(run, job_id, victim)
    run.resume(fault_id, victim)
    run.enqueue(4, handler_ms=100)
    drained = run.drain(timeout_s=6)
    verdict, events, health = run.finish(drained)

    assert health.trustworthy, health.problems()
    assert drained and verdict.passed, {name: result.examples for name, result
                                        in verdict.invariants.items() if not result.ok}
    rejected = _of(events, "complete_rejected", job_id=job_id)
    # BullMQ refuses the completion ("Missing lock" / "Lock mismatch"), then the worker's
    # attempt to fail the job instead, refused the same way.
    assert [(event.worker, event.extra["target"]) for event in rejected] == [
        (victim, "completed"), (victim, "failed")]
    assert all(event.attempt == 1 and event.current_attempt == 2 for event in rejected)
    assert len(_of(events, "complete", job_id=job_id)) == 1
    assert verdict.jobs.double_completed == 0 and verdict.rejected.get("complete_rejected")


def _wait_reclaimed(run: BullMQRun, job_id: str, holder: str, timeout_s: float = 6.0) -> None:
    wait_until(lambda: run.client.hget(run.key(job_id), "pb") not in (holder, None)
               and run.client.exists(run.key(f"{job_id}:lock")),
               f"{job_id} claimed again by another worker", timeout_s=timeout_s, poll_s=0.005)


def test_broken_bullmq_unfenced_finish_is_caught_by_exclusive_lease(valkey_server,
                                                                    bullmq_runs):
    """moveToFinished with its lock check patched out (in memory, at the worker's start-up):
    the woken holder's stale complete is accepted while another worker holds the job, and only
    exclusive_lease says so. One slot a worker, so the frozen one holds that job alone: with two,
    its second job could be anywhere between lapsed and re-claimed when it wakes (a stale
    finish of a job not re-claimed yet, or one still in its lease), which made the count of
    stale finishes a race (it failed about 1 run in 7)."""
    run = BullMQRun(valkey_server, lease_ms=600, stalled_ms=300, broken="unfenced-finish",
                    concurrency=1)
    bullmq_runs.append(run)
    run.runner.record(**Phase("chaos").fields())
    run.enqueue(4, handler_ms=900)
    job_id, victim = run.holder()
    fault_id = run.fault("pause", victim)
    _wait_reclaimed(run, job_id, victim)
    run.resume(fault_id, victim)  # its handler's time is up: it finishes at once, stale
    drained = run.drain(timeout_s=6)
    verdict, events, health = run.finish(drained)

    assert health.trustworthy, health.problems()
    broken = {name: result.examples for name, result in verdict.invariants.items()
              if not result.ok}
    assert sorted(broken) == ["exclusive_lease"] and not verdict.passed, broken
    # The accepted stale completes: the woken holder's, for a job claimed again since.
    reclaimed = {event.job_id for event in _of(events, "claim", attempt=2)}
    stale = [event for event in _of(events, "complete", worker=victim, attempt=1)
             if event.job_id in reclaimed]
    assert stale and job_id in reclaimed
    assert verdict.invariants["exclusive_lease"].violations == len(stale), broken


def test_broken_bullmq_without_stalled_check_is_caught_by_recovery_bound(valkey_server,
                                                                         bullmq_runs):
    """Every worker started with skipStalledCheck: a killed worker's jobs stay active for ever;
    recovery_bound fails ("never recovered"), the drain does not finish."""
    run = BullMQRun(valkey_server, lease_ms=400, stalled_ms=200, broken="skip-stalled-check")
    bullmq_runs.append(run)
    run.enqueue(6, handler_ms=500)
    run.runner.record(**Phase("chaos").fields())
    job_id, victim = run.holder()
    run.fault("kill", victim)
    drained = run.drain(timeout_s=2.5)
    verdict, _, health = run.finish(drained)

    assert health.trustworthy, health.problems()
    assert not drained and not verdict.passed
    assert not verdict.invariants["recovery_bound"].ok
    reasons = {example.get("reason") for example in verdict.invariants["recovery_bound"].examples}
    assert reasons == {"never recovered"}
    assert verdict.invariants["no_double_completion"].ok


def _failed(verdict: Verdict) -> list[str]:
    return sorted(verdict.failed_invariants())


def test_broken_bullmq_refusing_live_renewals_is_caught_by_live_lease_honoured(valkey_server,
                                                                              bullmq_runs):
    """extendLocks comparing the lock with the job id instead of the token: every renewal is
    refused while the lock is live and no fault touches anything. The jobs still finish within
    their lock (their handlers are shorter than it), so only live_lease_honoured says so."""
    run = BullMQRun(valkey_server, lease_ms=1000, stalled_ms=500, workers=2,
                    broken="refused-renewal")
    bullmq_runs.append(run)
    run.enqueue(6, handler_ms=600)  # renewed at least once, done before the lock lapses
    drained = run.drain(timeout_s=10)
    verdict, events, health = run.finish(drained)

    assert drained and health.trustworthy, health.problems()
    assert _failed(verdict) == ["live_lease_honoured"], verdict.invariants
    result = verdict.invariants["live_lease_honoured"]
    refused = _of(events, "extend_rejected")
    assert refused and result.violations == len(refused)
    assert all(0 < example["before_deadline_ms"] < 1000 for example in result.examples)
    assert verdict.jobs.completed == 6 and not _of(events, "extend")


def test_broken_bullmq_handing_out_one_token_twice_is_caught_by_attempts_monotonic(
        valkey_server, bullmq_runs):
    """Every worker fetching every job with one lock token: two live locks hold it at once.
    Nothing else goes wrong without a fault (each lock is its own job's), so only the reused
    token says so: attempts_monotonic (a fencing token handed out twice). Sound BullMQ hands a
    token out again only to the job its finish fetches next, once the lock that held it is
    gone."""
    run = BullMQRun(valkey_server, lease_ms=1000, stalled_ms=500, workers=2,
                    broken="shared-token")
    bullmq_runs.append(run)
    run.enqueue(8, handler_ms=300)
    drained = run.drain(timeout_s=10)
    verdict, events, health = run.finish(drained)

    assert drained and health.trustworthy and not health.misnamed_calls, health.problems()
    assert _failed(verdict) == ["attempts_monotonic"], verdict.invariants
    examples = verdict.invariants["attempts_monotonic"].examples
    assert examples[0]["reason"] == "a lock token handed out while a live lease holds it"
    assert examples[0]["token"] == "00000000-0000-4000-8000-000000000000:0"
    # Claims carry their token; judged without it (as before), the same history passes.
    claims = _of(events, "claim")
    assert claims and all(event.extra.get("token") for event in claims)
    unaware = check([msgspec.structs.replace(event, extra={
        name: value for name, value in event.extra.items() if name != "token"})
        for event in events])
    assert unaware.word == "pass", unaware.failed_invariants()


def test_a_lock_written_without_an_expiry_is_undecoded_never_a_rejected_extend(valkey_server,
                                                                                bullmq_runs):
    """extendLocks setting the lock without its PX (a lock that never lapses): the dialect does
    not know that write, so the renewal is undecoded (it once read as a rejected extend, which
    would now fail live_lease_honoured), its jobs are blind, and the verdict is unknown."""
    run = BullMQRun(valkey_server, lease_ms=1000, stalled_ms=500, workers=2,
                    broken="unexpiring-renewal")
    bullmq_runs.append(run)
    run.enqueue(4, handler_ms=600)
    drained = run.drain(timeout_s=10)
    verdict, events, health = run.finish(drained)

    assert drained and health.undecoded_calls >= 1, health
    assert not _of(events, "extend")  # no renewal decoded as one, accepted or refused ...
    completed = {event.job_id: event.seq for event in _of(events, "complete")}
    assert all(seq_key(completed[event.job_id]) < seq_key(event.seq)  # ... but those of a
               for event in _of(events, "extend_rejected"))  # job already done: normal
    assert {event.job_id for event in _of(events, "blind")} <= set(run.enqueued)
    assert verdict.word == "unknown" and not verdict.failed_invariants(), verdict.invariants
    assert "live_lease_honoured" in verdict.blind_invariants()


def _kill_in_the_worst_phase(run: BullMQRun, job_id: str, victim: str) -> None:
    """SIGKILL ``victim`` just after its first renewal that follows a stalled check: that check
    marked the job and the renewal unmarked it, so the next check only marks it again and the
    one after returns it: recovery ≈ 2 × stalledInterval after the renewal."""
    check_key, lock_key = run.key("stalled-check"), run.key(f"{job_id}:lock")
    last_check = run.client.get(check_key)
    deadline = time.monotonic() + 5 * run.stalled_ms / 1000
    while run.client.get(check_key) == last_check:
        assert time.monotonic() < deadline, "no stalled check ran"
        time.sleep(0.002)
    ttl = run.client.pttl(lock_key)
    while (now := run.client.pttl(lock_key)) <= ttl:
        assert now > 0 and time.monotonic() < deadline, "the lock was not renewed"
        ttl = now
        time.sleep(0.001)
    run.fault("kill", victim)


def test_short_lock_recovery_exceeds_lease_plus_interval_within_bullmqs_bound(valkey_server,
                                                                              bullmq_runs):
    """lockDuration < stalledInterval: a job can come back later than "lease + one reap
    interval" — with the checks on time, up to stalledInterval + max(lockDuration,
    stalledInterval) = 2 × stalledInterval after the last renewal. Killed in that phase, it
    does."""
    run = BullMQRun(valkey_server, lease_ms=300, stalled_ms=1000, workers=2)
    bullmq_runs.append(run)
    run.enqueue(2, handler_ms=1500)
    run.runner.record(**Phase("chaos").fields())
    job_id, victim = run.holder()
    _kill_in_the_worst_phase(run, job_id, victim)
    drained = run.drain(timeout_s=8)
    verdict, _, health = run.finish(drained)

    assert health.trustworthy, health.problems()
    assert drained and verdict.passed, {name: result.examples for name, result
                                        in verdict.invariants.items() if not result.ok}
    figures = verdict.invariants["recovery_bound"].figures["family_figures"]
    tolerance = verdict.config.tolerance_ms
    assert figures["lease_plus_interval_ms"] == 1300 and figures["checks_on_time_ms"] == 2000
    assert figures["worst_renewal_to_reap_ms"] > 1300 + tolerance
    assert figures["worst_renewal_to_reap_ms"] <= figures["bullmq_bound_ms"] + tolerance
    print("short lock (L=300, S=1000): renewal to reap", figures)


def test_poison_job_is_dead_lettered_after_max_stalls_recoveries(valkey_server, bullmq_runs):
    """A job whose handler kills its worker every time, maxStalledCount 1: recovered once, then
    failed by the stalled check (BullMQ's deferred failure): dead-lettered, not lost; the
    surviving worker completes everything else."""
    run = BullMQRun(valkey_server, lease_ms=400, stalled_ms=200, max_stalls=1)
    bullmq_runs.append(run)
    run.runner.record(**Phase("chaos").fields())
    run.enqueue(1, handler_ms=0, kind="poison")
    run.enqueue(6, handler_ms=100)
    drained = run.drain(timeout_s=6)
    crashed = sum(process.poll() is not None for process in run.workers.values())
    verdict, events, health = run.finish(drained)

    assert health.trustworthy, health.problems()
    assert drained and verdict.passed, {name: result.examples for name, result
                                        in verdict.invariants.items() if not result.ok}
    (dead,) = _of(events, "dead")
    assert dead.job_id == "job-00001" and dead.extra["stalls"] == "2"
    assert len(_of(events, "reap", job_id="job-00001")) == 1
    assert verdict.outcomes.dead_lettered == 1 and verdict.outcomes.completed == 6
    assert verdict.dead_letter.poison == 1
    assert crashed == 2  # the poison ran twice, on two workers


def test_the_producer_adds_jobs_from_the_scenarios_sut_cwd(valkey_server, tmp_path):
    """The jobs go in through the bullmq of the folder the workers run from (``[sut] cwd``),
    not the toolkit's own sut/bullmq: a folder without producer.js is refused (an
    infrastructure error, exit 3), one with it adds the jobs with its own."""
    import shutil
    from types import SimpleNamespace

    from chaos.family import family_for
    from chaos.scenario.loading import load_scenario

    folder = tmp_path / "their-bullmq"
    folder.mkdir()
    (folder / "node_modules").symlink_to(sut_dir() / "node_modules")
    scenario = load_scenario(sut_dir().parent.parent / "scenarios" / "bullmq" / "kill-worker.toml")
    scenario = scenario.model_copy(update={"sut": scenario.sut.model_copy(
        update={"cwd": str(folder)})})
    family = family_for(scenario, QueueKeys(PREFIX, f"q{next(_runs)}"))
    runtime: Any = SimpleNamespace(url=valkey_server.url, password=valkey_server.password,
                                   ack_ledger_path=lambda name: tmp_path / f"{name}.jsonl")
    with pytest.raises(BullMQUnavailable, match="has no producer.js"):
        family.producer(runtime, scenario.load)
    shutil.copy(sut_dir() / "producer.js", folder)
    producer: Any = family.producer(runtime, scenario.load)
    try:
        assert producer.bullmq.process.args[-1] == str(folder / "producer.js")
        assert producer.bullmq.enqueue("job-00001", _payload(10))
    finally:
        producer.bullmq.close()
    client = redis_client(valkey_server.url, password=valkey_server.password,
                          decode_responses=True)
    try:
        assert jobs_added(client, PREFIX, family.keys.queue) == 1
    finally:
        client.close()


def test_locust_producer_users_add_bullmq_jobs_through_bullmqs_own_add(valkey_server, tmp_path):
    """``loadtests/bullmq.py``: Locust users adding jobs with a handler time in their data; every
    add Locust counts is in the queue and in the acknowledgement ledger."""
    import sys

    queue = f"q{next(_runs)}"
    env = {**os.environ, "ECHOMQ_VALKEY_PASSWORD": valkey_server.password}
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(sut_dir().parent.parent / "loadtests" /
                                                   "bullmq.py"),
         "--headless", "--host", valkey_server.url, "-u", "2", "-r", "2", "-t", "2s",
         "--queue-prefix", PREFIX, "--queue-name", queue, "--producer-rate", "10",
         "--handler", '{"distribution": "uniform", "min_ms": 20, "max_ms": 40}',
         "--ack-ledger-dir", str(tmp_path),
         "--bullmq-dir", str(sut_dir()),  # as the runner passes its [sut] cwd
         "--only-summary", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    (stats,) = [entry for entry in json.loads(done.stdout) if entry["name"] == "enqueue"]
    assert stats["num_requests"] > 0 and stats["num_failures"] == 0
    acked = [json.loads(line) for path in tmp_path.glob("locust-*.jsonl")
             for line in path.read_text().splitlines()]
    assert len(acked) == stats["num_requests"]
    client = redis_client(valkey_server.url, password=valkey_server.password,
                          decode_responses=True)
    try:
        assert jobs_added(client, PREFIX, queue) >= len(acked)
        data = json.loads(client.hget(f"{PREFIX}:{queue}:{acked[0]['id']}", "data") or "{}")
        assert 20 <= data["handler_ms"] <= 40 and data["crash"] is False
    finally:
        client.close()


def test_retried_and_failed_jobs_are_decoded_and_judged(valkey_server, bullmq_runs):
    """BullMQ with attempts: a job whose handler throws is handed back for another attempt
    (moveToDelayed after a backoff, retryJob at once: a ``retry`` event that ends the lease), and
    one that fails its last attempt is finished as failed (a ``complete`` with target failed).
    Every call is decoded, the verdict is a pass, and each retried job completes once, under a
    higher attempt. (Before the dialect knew them, the retries were undecoded calls and the
    verdict unknown.)"""
    run = BullMQRun(valkey_server, lease_ms=2000, stalled_ms=1000, workers=2,
                    job_options={"attempts": 3, "backoff": {"type": "fixed", "delay": 50}})
    bullmq_runs.append(run)
    at_once = BullMQQueue(run.node_url, run.queue_name, PREFIX, name="producer-2",
                          job_options={"attempts": 2})  # no backoff: retried at once
    try:
        run.enqueue(6, handler_ms=20, fail_attempts=1)  # retried once, after a backoff
        run.enqueue(2, handler_ms=20, fail_attempts=3)  # fails all 3 attempts: failed for good
        run.enqueue(4, handler_ms=20, fail_attempts=1, producer=at_once)
    finally:
        at_once.close()
    drained = run.drain(timeout_s=20)
    verdict, events, health = run.finish(drained)

    assert drained and health.trustworthy and not health.undecoded_calls, health.problems()
    assert verdict.word == "pass", {name: (result.status, result.examples[:1]) for
                                    name, result in verdict.invariants.items()}
    delayed, at_once_ids, failing = run.enqueued[:6], run.enqueued[8:], run.enqueued[6:8]
    retries = {(event.job_id, event.attempt, event.extra["to"]) for event in _of(events, "retry")}
    assert retries == ({(job_id, 1, "delayed") for job_id in delayed}
                       | {(job_id, 1, "wait") for job_id in at_once_ids}
                       | {(job_id, attempt, "delayed") for job_id in failing
                          for attempt in (1, 2)}), retries
    completes = {event.job_id: (event.attempt, event.extra.get("target"))
                 for event in _of(events, "complete")}
    assert completes == {**{job_id: (2, None) for job_id in delayed + at_once_ids},
                         **{job_id: (3, "failed") for job_id in failing}}
    assert verdict.jobs.completed == 12 and verdict.outcomes.completed == 12
    # Judged without its retries (as if they were never decoded), the same history fails: the
    # next attempt's claim reads as a claim of a job still leased.
    unaware = check([event for event in events if event.type != "retry"])
    assert unaware.word == "fail" and unaware.invariants["exclusive_lease"].violations >= 12
