"""The example SUT that speaks the real EchoMQ contract (sut/node-echomq-real, docs/sut.md):
EchoMQ's keys, rows, scripts and login, judged on the MONITOR recorder's history alone
(the echomq dialect decoding its calls by effect). Real node processes, really SIGKILLed and
SIGSTOPped, against a real valkey-server whose `default` user they log in as: sound under a
kill and a pause, and each --break mode caught by the invariant it breaks."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from chaos.check.checker import check
from chaos.check.verdict import Verdict
from chaos.history.dialects import make_dialect
from chaos.history.events import Event, read_history
from chaos.history.monitor import MonitorRecorder, RecorderHealth
from chaos.history.schema import Fault, Heal, Phase, Run
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.runtime.valkey import ValkeyServer

SUT = Path(__file__).resolve().parent.parent / "sut" / "node-echomq-real"
LEASE_MS, HEARTBEAT_MS, REAP_MS, CONCURRENCY = 600, 200, 200, 2
WORKERS = ("worker-1", "worker-2", "worker-3")
_runs = itertools.count(1)
T = TypeVar("T")


@pytest.fixture(scope="module", autouse=True)
def node() -> None:
    """Skip without Node, except under CI, where that is a failure."""
    if shutil.which("node") is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but node is not on PATH")
    pytest.skip("node is not on PATH")


def _payload(handler_ms: int) -> str:
    return json.dumps({"handler_ms": handler_ms, "crash": False, "pad": "x"})


def _until(condition: Callable[[], T | None], what: str, timeout_s: float = 20.0) -> T:
    """Poll ``condition`` until it gives something true (the timeout is only a safety net)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


class RealRun:
    """One run by hand: the recorder, runner events, a reaper, three workers and a producer,
    every one of them a `node sut.js` process that logs in as `default`."""

    def __init__(self, server: ValkeyServer, directory: Path, runs: list[RealRun],
                 worker_break: str = "", reaper_break: str = "",
                 worker_options: tuple[str, ...] = (), max_stalls: int | None = None) -> None:
        runs.append(self)  # torn down by the fixture, however far this gets
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.queue = f"real{next(_runs)}"
        self.keys = QueueKeys("emq:", self.queue)
        self.directory = directory
        self.path = directory / f"{self.queue}-history.jsonl"
        self.client = redis_client(server.url, password=server.password, decode_responses=True)
        self.runner = QueueClient(self.client, self.keys)
        self.recorder = MonitorRecorder(make_dialect("echomq", "emq:", self.queue), self.path,
                                        "127.0.0.1", server.port, server.password)
        self.recorder.start()
        self.health: RecorderHealth | None = None
        self.runner.record(**Run(
            scenario="echomq-real", lease_ms=LEASE_MS, reap_interval_ms=REAP_MS,
            heartbeat_ms=HEARTBEAT_MS, workers=WORKERS, concurrency=CONCURRENCY,
            protocol="echomq-real", reapers=1, dialect="echomq", max_stalls=max_stalls).fields())
        self.runner.record(**Phase("warmup").fields())
        self.env = {**os.environ, "CHAOS_QUEUE": self.queue, "CHAOS_PREFIX": "emq:",
                    "CHAOS_VALKEY_URL": f"redis://default:{server.password}@127.0.0.1:"
                                        f"{server.port}",
                    "CHAOS_LEASE_MS": str(LEASE_MS), "CHAOS_HEARTBEAT_MS": str(HEARTBEAT_MS),
                    "CHAOS_REAP_INTERVAL_MS": str(REAP_MS),
                    "CHAOS_CONCURRENCY": str(CONCURRENCY), "CHAOS_MAX_STALLS": str(max_stalls or 0)}
        # One at a time, each ready (every connection named) before the next starts: the
        # recorder caches CLIENT LIST's names, and a connection listed between its HELLO and
        # its CLIENT SETNAME would keep an `id:N` for the run.
        for name in WORKERS:
            self.start(name, "worker", worker_break, worker_options)
        self.start("reaper", "reaper", reaper_break)
        self.producer = self.start("producer", "producer", "", stdin=True)
        self.enqueued: list[str] = []
        self.faults = itertools.count(1)

    def start(self, name: str, mode: str, broken: str, options: tuple[str, ...] = (),
              stdin: bool = False) -> subprocess.Popen[str]:
        argv = ["node", "sut.js", mode, *(["--break", broken] if broken else []), *options]
        with (self.directory / f"{self.queue}-{name}.log").open("w") as log:
            process = subprocess.Popen(
                argv, cwd=SUT, env={**self.env, "CHAOS_NAME": name}, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.PIPE if stdin else None, text=True,
                start_new_session=True)
        self.processes[name] = process
        _until(lambda: "_ready" in self.log(name), f"{name} ready")
        return process

    def log(self, name: str) -> str:
        return (self.directory / f"{self.queue}-{name}.log").read_text()

    def enqueue(self, count: int, handler_ms: int) -> None:
        assert self.producer.stdin is not None
        self.producer.stdin.write("".join(_payload(handler_ms) + "\n" for _ in range(count)))
        self.producer.stdin.flush()
        want = len(self.enqueued) + count

        def enqueued() -> list[str] | None:
            found: list[str] = re.findall(r" enqueue id=(\S+)", self.log("producer"))
            return found if len(found) >= want else None

        self.enqueued = _until(enqueued, f"{want} enqueued")

    def held_by(self, name: str) -> dict[str, int]:
        """The jobs ``name`` holds now: claimed by it (its log), their row still at its token
        and their lease in active."""
        claims = dict(re.findall(r" claim id=(\S+) token=(\d+)", self.log(name)))
        return {job_id: int(token) for job_id, token in claims.items()
                if self.client.hget(self.key("job:" + job_id), "attempts") == token
                and self.client.zscore(self.keys.active, job_id) is not None}

    def key(self, suffix: str) -> str:
        return self.keys.base + suffix

    def holder(self) -> tuple[str, dict[str, int]]:
        """A worker holding a lease (as the nemesis picks ``holding_oldest_lease``), once every
        job enqueued is held and its claim logged: none is claimed between this look and the
        fault unseen."""
        def settled() -> dict[str, dict[str, int]] | None:
            holding = {name: self.held_by(name) for name in WORKERS}
            claimed = sum(len(held) for held in holding.values())
            if claimed < len(self.enqueued) or self.client.zcard(self.keys.pending):
                return None
            return holding

        holding = _until(settled, "every job held")
        return next((name, held) for name, held in holding.items() if held)

    def fault(self, kind: str, name: str) -> str:
        fault_id = f"f{next(self.faults)}"
        os.kill(self.processes[name].pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        self.runner.record(**Fault(fault_id, kind, name).fields())
        return fault_id

    def resume(self, fault_id: str, name: str) -> None:
        self.runner.record(**Heal(fault_id, "pause", name).fields())
        os.kill(self.processes[name].pid, signal.SIGCONT)

    def reclaimed(self, held: dict[str, int]) -> bool:
        """Every job of ``held`` re-claimed by another worker, which still holds it."""
        return all(int(self.client.hget(self.key("job:" + job_id), "attempts") or 0) > token
                   for job_id, token in held.items())

    def drain(self) -> bool:
        self.runner.record(**Phase("drain").fields())

        def empty() -> bool:  # read at one instant: a reap or promote moves jobs between them
            pipe = self.client.pipeline(transaction=True)
            pipe.zcard(self.keys.pending)
            pipe.zcard(self.keys.active)
            pipe.zcard(self.keys.schedule)
            return pipe.execute() == [0, 0, 0]

        try:
            _until(empty, "drained")
            return True
        except AssertionError:
            return False

    def finish(self, drained: bool) -> tuple[Verdict, list[Event], RecorderHealth]:
        self.runner.record(**Phase("end", drained=drained).fields())
        health = self.close()
        events = read_history(self.path)
        return check(events), events, health

    def completed_count(self) -> int:
        return int(self.client.hget(self.key("metrics:completed"), "count") or 0)

    def logged(self, pattern: str, names: tuple[str, ...] = WORKERS) -> list[str]:
        """Every match of ``pattern`` in the logs of ``names``."""
        return [found for name in names for found in re.findall(pattern, self.log(name))]

    def close(self) -> RecorderHealth:
        """Stop the recorder, SIGKILL every process still running (once; again is a no-op)."""
        if self.health is None:
            self.health = self.recorder.stop()
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()
        self.client.close()
        return self.health


@pytest.fixture
def runs(valkey_server: ValkeyServer) -> Iterator[list[RealRun]]:
    """Every run a test starts is torn down, whatever the test did."""
    started: list[RealRun] = []
    yield started
    for run in started:
        run.close()


def _run(server: ValkeyServer, directory: Path, runs: list[RealRun], fault: str,
         worker_break: str = "", reaper_break: str = "", worker_options: tuple[str, ...] = ()
         ) -> tuple[RealRun, Verdict, list[Event], RecorderHealth, str, dict[str, int]]:
    """Long jobs on four of the six slots; a holder killed, or paused until another worker has
    re-claimed every job it held (then resumed while that worker still holds them); short
    jobs; drain."""
    run = RealRun(server, directory, runs, worker_break, reaper_break, worker_options)
    run.enqueue(4, handler_ms=2000 if fault == "pause" else 800)
    run.runner.record(**Phase("chaos").fields())
    victim, held = run.holder()
    fault_id = run.fault(fault, victim)
    if fault == "pause":
        _until(lambda: run.reclaimed(held), "the paused worker's jobs re-claimed elsewhere")
        run.resume(fault_id, victim)
    run.enqueue(8, handler_ms=100)
    verdict, events, health = run.finish(run.drain())
    return run, verdict, events, health, victim, held


def _failed(verdict: Verdict) -> dict[str, list[dict[str, object]]]:
    return {name: result.examples for name, result in verdict.invariants.items()
            if not result.ok}


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_the_sound_sut_recovers_every_job_once(valkey_server: ValkeyServer, tmp_path: Path,
                                                runs: list[RealRun], fault: str):
    run, verdict, events, health, victim, held = _run(valkey_server, tmp_path, runs, fault)

    assert health.undecoded_calls == 0 and health.trustworthy, health.problems()
    assert verdict.jobs.enqueued == verdict.jobs.completed == len(run.enqueued) == 12
    assert run.completed_count() == 12  # EchoMQ's own count agrees
    assert verdict.invariants["no_loss"].ok and verdict.invariants["no_double_completion"].ok
    # The victim's leases were stranded and came back within the bound, promptly; each held
    # job was reaped from the victim, then claimed at attempt 2 and completed by another.
    assert verdict.stranded == len(held)
    assert verdict.invariants["recovery_bound"].ok and verdict.invariants["reap_prompt"].ok
    for job_id in held:
        (reap,) = [e for e in events if e.type == "reap" and e.job_id == job_id]
        assert reap.worker == victim
        (claim,) = [e for e in events if e.type == "claim" and e.job_id == job_id
                    and e.attempt == 2]
        (complete,) = [e for e in events if e.type == "complete" and e.job_id == job_id]
        assert claim.worker == complete.worker != victim
    # Attributed by the name each connection set (they all log in as `default`).
    assert {e.worker for e in events if e.type in ("claim", "extend", "complete")} \
        <= set(WORKERS)
    print(f"{fault}: jobs {verdict.jobs.enqueued}, stranded {verdict.stranded}, recovery "
          + json.dumps({name: vars(summary) for name, summary in verdict.recovery.items()}))
    assert verdict.passed, _failed(verdict)


# Every job's handler fails its first attempt: it is handed back into the schedule (due 100 ms
# on), promoted by the reaper, claimed again and completed at its second attempt.
RETRYING = ("--fail-attempts", "1", "--retry-delay-ms", "100")


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_retried_jobs_come_back_through_the_schedule(valkey_server: ValkeyServer,
                                                     tmp_path: Path, runs: list[RealRun],
                                                     fault: str):
    """Retries on: every job's first attempt fails and is retried (@retry into the schedule),
    promoted (@promote) and completed at a later attempt, while a holder is killed or paused.
    The history decodes with nothing undecoded, and what it shows is what the workers' and the
    reaper's own logs and the store say: each job completed once, every retry the workers saw
    accepted is a retry event and was promoted once, the paused worker's late retries refused."""
    run, verdict, events, health, victim, held = _run(valkey_server, tmp_path, runs, fault,
                                                      worker_options=RETRYING)

    assert health.undecoded_calls == 0 and health.trustworthy, health.problems()
    assert verdict.jobs.enqueued == verdict.jobs.completed == len(run.enqueued) == 12
    assert run.completed_count() == 12 and not run.client.exists(run.key("metrics:failed"))
    retried = run.logged(r" retry id=(\S+) token=\d+ delay_ms=\d+ result=scheduled")
    promoted = sum(int(n) for n in run.logged(r" promoted n=(\d+)", ("reaper",)))
    no_loss = verdict.invariants["no_loss"].figures
    assert sorted(e.job_id or "" for e in events if e.type == "retry") == sorted(retried)
    assert no_loss["retried"] == len(retried) == promoted == no_loss["promoted"]
    # Every job failed once at attempt 1 and was retried, but the victim's: those it held were
    # recovered from it (reaped, claimed again at attempt 2) before it could fail them.
    assert set(retried) == set(run.enqueued) - set(held)
    completes = [e for e in events if e.type == "complete"]
    assert len(completes) == 12 and all((e.attempt or 0) >= 2 for e in completes)
    if fault == "pause":  # the resumed victim's retries of the jobs it lost: refused (stale)
        assert len(run.logged(r" retry id=\S+ token=1 result=EMQSTALE", (victim,))) == len(held)
    assert verdict.stranded == len(held) and verdict.invariants["recovery_bound"].ok
    assert verdict.passed, _failed(verdict)
    print(f"{fault} with retries: jobs {verdict.jobs.enqueued}, retried {len(retried)}, "
          f"promoted {promoted}, stranded {verdict.stranded}")


def test_the_stall_limit_maps_to_echomq_stalled(valkey_server: ValkeyServer, tmp_path: Path,
                                               runs: list[RealRun]):
    """CHAOS_MAX_STALLS = 1: the reaper sweeps as EchoMQ.Stalled with max_stalled 2
    (docs/echomq.md's mapping). A job whose lease lapses twice (its holder killed, then the
    next one) is recovered once, then dead-lettered, its stalls counted on its row: stall_limit
    holds at max_stalls 1, and the job is dead-lettered, not lost."""
    run = RealRun(valkey_server, tmp_path, runs, max_stalls=1)
    run.enqueue(1, handler_ms=10_000)
    run.runner.record(**Phase("chaos").fields())
    first, held = run.holder()
    (job_id,) = held
    run.fault("kill", first)
    second = _until(lambda: next((name for name in WORKERS if name != first
                                  and job_id in run.held_by(name)), None), "claimed again")
    run.fault("kill", second)
    _until(lambda: run.client.zscore(run.keys.dead, job_id) is not None, "dead-lettered")
    run.enqueue(4, handler_ms=100)  # the third worker still works
    verdict, events, health = run.finish(run.drain())

    assert health.undecoded_calls == 0 and health.trustworthy, health.problems()
    assert run.client.hget(run.key("job:" + job_id), "stalled") == "2"
    assert run.client.hget(run.key("metrics:failed"), "count") == "1"
    assert run.logged(r" reaped n=(\d+) dead=(\d+)", ("reaper",)) == [("1", "0"), ("0", "1")]
    assert [(e.type, e.attempt, e.worker, e.extra.get("stalls")) for e in events
            if e.job_id == job_id and e.type in ("reap", "dead")] == [
        ("reap", 1, first, "1"), ("dead", 2, second, "2")]
    assert verdict.invariants["stall_limit"].ok and verdict.invariants["no_loss"].ok
    assert verdict.jobs.completed == 4 and verdict.passed, _failed(verdict)


@pytest.mark.parametrize(("fault", "worker_break", "reaper_break", "invariant", "op"), [
    ("kill", "", "lazy-reaper", "reap_prompt", ""),
    ("pause", "unfenced-complete", "", "exclusive_lease", "complete"),
    ("pause", "resurrecting-extend", "", "exclusive_lease", "extend"),
    ("pause", "unfenced-retry", "", "exclusive_lease", "retry"),
])
def test_each_break_is_caught(valkey_server: ValkeyServer, tmp_path: Path, runs: list[RealRun],
                              fault: str, worker_break: str, reaper_break: str, invariant: str,
                              op: str):
    run, verdict, events, health, victim, held = _run(
        valkey_server, tmp_path, runs, fault, worker_break, reaper_break,
        RETRYING if worker_break == "unfenced-retry" else ())

    assert health.undecoded_calls == 0 and health.trustworthy, health.problems()
    assert not verdict.passed
    failed = _failed(verdict)
    assert invariant in failed, failed
    if op:
        # The paused worker, resumed after its jobs were re-claimed, acted on one of them: the
        # sound SUT's refused call writes nothing, the broken one's is accepted (and the first
        # offence of the run: the other workers' first jobs finish later).
        assert any(offence["op"] == op and offence["worker"] == victim
                   and offence["job"] in held for offence in failed[invariant]), failed
    else:
        # Every stranded lease came back a whole lease late: past the bound, too.
        assert "recovery_bound" in failed, failed
        assert verdict.jobs.completed == len(run.enqueued)
    print(f"--break {worker_break or reaper_break}: failed {sorted(failed)}; "
          f"{failed[invariant][:2]}")


@pytest.mark.parametrize(("name", "failed"), [
    ("kill-worker", []),
    ("retries", []),
    ("broken/unfenced-complete", ["exclusive_lease"]),
    ("broken/sparse-reaper", ["reap_cadence"]),
])
def test_the_runner_judges_it_from_a_scenario_file(tmp_path: Path, name: str,
                                                   failed: list[str]):
    """The same SUT through `echomq-chaos run` (scenarios/echomq/): its processes log in as the
    default user (`[sut] login`), the producer mints branded ids, the kill finds its holder
    through the recorder, and the broken switch fails what it breaks."""
    import io

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" / f"{name}.toml")
    assert scenario.sut.login == "default" and scenario.sut.contract == "echomq"
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.checked is not None
    assert result.checked.failed_invariants() == failed, result.report["verdict"]
    assert result.verdict == ("fail" if failed else "pass"), result
    health = result.report["history_recorder"]["health"]
    assert health["undecoded_calls"] == 0 and health["unattributed_calls"] == 0, health
    # every fault applied (sparse-reaper has none: nothing need lapse for its sweeps to show)
    assert len(result.report["run"]["faults"]) == len(scenario.faults)
    assert not result.report["run"]["faults_skipped"]
    history = (result.run_dir / "history-monitor.jsonl").read_text()
    assert '"id":"JOB' in history.replace(" ", "")  # EchoMQ's branded ids
    if name == "retries":  # handed back through the schedule, given back, all completed
        no_loss = result.report["invariants"]["no_loss"]
        assert no_loss["retried"] == no_loss["promoted"] > 0, no_loss
        assert no_loss["completed"] == no_loss["enqueued"] and no_loss["undrained"] == 0


def test_group_lanes_through_the_users_own_producer_are_judged_as_they_ran(tmp_path: Path):
    """scenarios/echomq/groups-kill-worker.toml: every job goes in through the SUT's own
    producer command (grouped admission into three lanes, the ids its own), the workers claim
    by turning the ring, one is SIGKILLed. The verdict is true to the processes' own logs: the
    jobs the history enqueued are the ids the producer printed, each in the group it printed;
    every claim the workers logged is in the history with its group; every job completed once,
    no call undecoded; and the producer is gone with the run."""
    import io

    from test_sut_node import processes_in

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" /
                             "groups-kill-worker.toml")
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.verdict == "pass", result.report["verdict"]
    health = result.report["history_recorder"]["health"]
    assert health["undecoded_calls"] == 0 and health["unattributed_calls"] == 0, health
    assert len(result.report["run"]["faults"]) == 1  # the kill, and no producer "crash"
    events = [json.loads(line) for line in
              (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]
    logs = result.run_dir / "logs"
    printed = dict(re.findall(r" enqueue id=(\S+) group=(\S+)",
                              (logs / "producer.log").read_text()))
    enqueued = {event["id"]: event.get("group") for event in events if event["type"] == "enqueue"}
    assert enqueued == printed and set(printed.values()) == {"g1", "g2", "g3"}
    claimed_logged = {(found[0], found[1]) for name in scenario.worker_names
                      for found in re.findall(r" claim id=(\S+) token=(\d+) .*group=(\S+)",
                                              (logs / f"{name}.log").read_text())}
    claimed = {(event["id"], event["attempt"]) for event in events if event["type"] == "claim"}
    assert claimed_logged <= claimed and claimed_logged  # a killed worker's last line may be cut
    assert all(event.get("group") == enqueued[event["id"]] for event in events
               if event["type"] in ("claim", "reap"))
    completes = [event["id"] for event in events if event["type"] == "complete"]
    assert sorted(completes) == sorted(enqueued)  # each once
    assert processes_in(SUT.resolve()) == []  # the producer and the workers: gone


@pytest.mark.parametrize(("producer", "exit_code", "said"), [
    (["./no-such-producer"], 3, "producer: cannot start './no-such-producer'"),
    # answers nothing: reads one payload, then exits (a producer broken mid-run)
    (["node", "-e", "process.stdin.once('data', () => process.exit(5))"], 3,
     "producer: the producer command exited (code 5)"),
    # says something else than the protocol's `enqueue id=...` lines, and never ends
    (["node", "-e", "process.stdin.on('data', () => console.log('ok'))"], 3,
     "no `enqueue id=...` line within 1 s"),
])
def test_a_broken_producer_command_is_an_infrastructure_error_and_nothing_outlives_it(
        tmp_path: Path, producer: list[str], exit_code: int, said: str,
        monkeypatch: pytest.MonkeyPatch):
    import io

    from test_sut_node import processes_in

    import chaos.load.command as command

    monkeypatch.setattr(command, "REPLY_TIMEOUT_S", 1.0)  # the run is in this process
    monkeypatch.setattr(command, "FIRST_REPLY_TIMEOUT_S", 1.0)  # its start-up's allowance

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" /
                             "groups-kill-worker.toml")
    scenario = scenario.model_copy(update={"sut": scenario.sut.model_copy(
        update={"producer": producer})})
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.exit_code == exit_code, result.report.get("error")
    assert said in result.report["error"], result.report["error"]
    assert (tmp_path / "run" / "report.json").exists()  # a partial run keeps its evidence
    assert processes_in(SUT.resolve()) == []


def _commands_of(run_dir: Path) -> list[int]:
    """Live processes whose command line names ``run_dir`` (Locust: its --csv prefix)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(run_dir).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_locust_enqueues_through_the_users_own_producer_as_its_logs_say(tmp_path: Path):
    """scenarios/echomq/locust-own-producer.toml: Locust's producer users send every payload
    through the SUT's own producer command (the runner's relay), one worker SIGKILLed. The
    verdict is true to the processes' own logs: the ids the history enqueued, and the
    acknowledgement ledger's, are exactly those the producer printed; each is completed once
    by the workers' logs (a job the killed worker's log shows no complete of was claimed by
    it: its last line may be cut); Locust counted no more enqueues than the command
    acknowledged; and nothing the run started outlives it."""
    import io
    from collections import Counter

    from test_sut_node import processes_in

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" /
                             "locust-own-producer.toml")
    assert scenario.load.engine == "locust" and scenario.sut.producer is not None
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.verdict == "pass", result.report["verdict"]
    health = result.report["history_recorder"]["health"]
    assert health["undecoded_calls"] == 0 and health["unattributed_calls"] == 0, health
    faults = result.report["run"]["faults"]
    assert [fault["kind"] for fault in faults] == ["kill"]  # and no producer "crash"
    logs = result.run_dir / "logs"
    printed = re.findall(r" enqueue id=(\S+) group=g\d", (logs / "producer.log").read_text())
    assert printed and len(set(printed)) == len(printed)
    events = [json.loads(line) for line in
              (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]
    assert sorted(event["id"] for event in events if event["type"] == "enqueue") == \
        sorted(printed)
    ledger = [json.loads(line) for line in
              (result.run_dir / "acks" / "producer.jsonl").read_text().splitlines()]
    assert sorted(entry["id"] for entry in ledger if entry["op"] == "enqueue") == sorted(printed)
    worker_logs = {name: (logs / f"{name}.log").read_text() for name in scenario.worker_names}
    completed = Counter(found for text in worker_logs.values()
                        for found in re.findall(r" complete id=(\S+) token=\d+ result=ok", text))
    assert set(completed) <= set(printed) and set(completed.values()) == {1}
    killed = worker_logs[faults[0]["worker"]]
    assert all(f" claim id={job_id} " in killed for job_id in set(printed) - set(completed))
    assert len(set(printed) - set(completed)) <= scenario.topology.concurrency
    locust = result.report["load"]
    assert locust["engine"] == "locust"
    sent = locust["operations"]["enqueue"]
    assert 0 < sent["requests"] - sent["failures"] <= len(printed), sent
    assert processes_in(SUT.resolve()) == [] and _commands_of(result.run_dir) == []


def test_a_producer_command_that_dies_under_locust_is_an_infrastructure_error(
        tmp_path: Path):
    """Locust's users drive a command that reads one payload and exits: exit 3 naming it,
    the history and report written, nothing left running."""
    import io

    from test_sut_node import processes_in

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" /
                             "locust-own-producer.toml")
    scenario = scenario.model_copy(update={"sut": scenario.sut.model_copy(update={
        "producer": ["node", "-e", "process.stdin.once('data', () => process.exit(5))"]})})
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.exit_code == 3, result.report.get("error")
    assert "producer" in result.report["error"] and "code 5" in result.report["error"], \
        result.report["error"]
    assert (tmp_path / "run" / "report.json").exists()
    assert (tmp_path / "run" / "history-monitor.jsonl").exists()
    assert processes_in(SUT.resolve()) == [] and _commands_of(result.run_dir) == []


def test_a_producer_command_is_refused_where_it_cannot_run(tmp_path: Path):
    from chaos.scenario.loading import ScenarioError, load_scenario

    path = SUT.parent.parent / "scenarios" / "echomq" / "locust-own-producer.toml"
    with pytest.raises(ScenarioError, match="load.remote_workers = 2: Locust's producer users"):
        load_scenario(path, overrides=["load.remote_workers=2"])
    path = SUT.parent.parent / "scenarios" / "echomq" / "groups-kill-worker.toml"
    text = path.read_text().replace('workers = ["node", "sut.js", "worker", "--lanes", "1"]\n',
                                    "").replace('reaper = ["node", "sut.js", "reaper"]\n', "")
    text = text.replace('login = "default"\ncontract = "echomq"\n', "")
    (tmp_path / "s.toml").write_text(text.replace('"../../sut/node-echomq-real"',
                                                  f'"{SUT}"'))
    with pytest.raises(ScenarioError, match="a producer of your own enqueues for workers of"):
        load_scenario(tmp_path / "s.toml")


@pytest.mark.parametrize("seed", [23])
def test_group_lanes_with_every_worker_frozen_are_judged_as_the_workers_logged(
        tmp_path: Path, seed: int):
    """scenarios/echomq/groups-pause-all.toml: every worker frozen past its lease, the leases
    reaped back to their lanes, the frozen holders' stale calls landing before anyone
    re-claimed. EchoMQ's fence is the attempt alone, so a woken holder can still complete a job
    another then completes too: whatever the verdict, the completes it counts accepted are
    exactly those the workers' own logs say returned ok, and its double completions are the
    logs' surplus over the jobs completed."""
    import io

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" /
                             "groups-pause-all.toml", [f"seed={seed}"])
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    health = result.report["history_recorder"]["health"]
    assert health["undecoded_calls"] == 0, health
    logged_ok = sum(len(re.findall(r" complete id=\S+ token=\d+ result=ok",
                                   (result.run_dir / "logs" / f"{name}.log").read_text()))
                    for name in scenario.worker_names)
    events = [json.loads(line) for line in
              (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]
    accepted = [event["id"] for event in events if event["type"] == "complete"]
    assert len(accepted) == logged_ok
    doubled = result.report["invariants"]["no_double_completion"]["double_completed"]
    assert doubled == logged_ok - len(set(accepted))
    if doubled:  # a double completion in someone else's queue is a failure like ours
        assert result.verdict == "fail" and "no_double_completion" in \
            result.checked.failed_invariants()
    print(f"seed {seed}: {logged_ok} completes ok in the logs, {len(set(accepted))} jobs, "
          f"{doubled} completed twice; verdict {result.verdict}")


def test_group_lanes_recover_through_echomq_stalled_too(tmp_path: Path):
    """With a reap batch set (CHAOS_REAP_LIMIT), the reaper recovers as EchoMQ.Stalled does
    (sweep_stalled.lua): a grouped job goes back into its own lane with one live lease fewer in
    its group, or its lane would wait for ever behind a count no lease holds (seen under
    certify's kill-busy-workers: 48 jobs left in the lanes, before the fix)."""
    import io

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(SUT.parent.parent / "scenarios" / "echomq" /
                             "groups-kill-worker.toml", ["topology.reap_limit=1"])
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.verdict == "pass", result.report["verdict"]
    assert result.report["invariants"]["recovery_bound"]["count"] >= 1
    reaped = [json.loads(line) for line in
              (result.run_dir / "history-monitor.jsonl").read_text().splitlines()
              if '"type":"reap"' in line.replace(" ", "")]
    assert reaped and all(event.get("group") for event in reaped)
