"""runtime = "attach" (docs/attach.md) on a queue deployed as plain processes: the test, not the
run, starts a valkey-server, an ACL user per member and the Node example SUT's workers and
reaper (sut/node-echomq, `node worker.js` with the contract's CHAOS_* environment); the run
attaches with the `command` driver (`kill -9 {pid}`, `kill -STOP {pid}`, `kill -CONT {pid}`),
really SIGKILLs and SIGSTOPs them, and judges the MONITOR history. Kill and pause pass, the
`--break unfenced-complete` workers fail; the run refuses a queue holding jobs, a consumer it was
not told about and a member gone quiet; Ctrl-C thaws what it froze; a second run finds nothing
frozen. The scenario checks and `--dry-run` need no server."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from attach_support import (
    KILL,
    MEMBERS,
    NODE_SUT,
    PARTITION,
    PAUSE,
    PREFIX,
    actions,
    deployment_env,
    figures,
    journal,
    nothing_left_applied,
    report,
    run_cli,
    scenario_file,
    wait_until,
)
from test_sut_node import _missing

from chaos.errors import InfraError
from chaos.lifeline import die_with_parent
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.runtime.attach import AttachRuntime
from chaos.runtime.drivers import ActionLog, CommandDriver
from chaos.runtime.pids import RUNNER, record_process
from chaos.runtime.valkey import ValkeyServer
from chaos.scenario.loading import ScenarioError, load_scenario
from chaos.scenario.model import Scenario

COMMANDS = """
[attach.command]
kill = ["kill", "-9", "{pid}"]
pause = ["kill", "-STOP", "{pid}"]
resume = ["kill", "-CONT", "{pid}"]
"""


@pytest.fixture
def node_sut() -> None:
    """Skip without Node or its modules, except under CI, where that is a failure."""
    problem = _missing()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {problem}")
    pytest.skip(problem)


def process_state(pid: int) -> str:
    """R, S, T (stopped), ... of a live process; "gone" once it is not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


class Processes:
    """The Node example SUT deployed as plain processes by the test: each member logs in as an
    ACL user of its own named after it (how the recorder knows its calls), in a session of its
    own, and dies with the test process."""

    def __init__(self, server: ValkeyServer, directory: Path, queue: str) -> None:
        self.server, self.directory, self.queue = server, directory, queue
        self.url = f"redis://127.0.0.1:{server.port}"
        self.admin = redis_client(server.url, password=server.password, decode_responses=True)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start_all(self, members: tuple[str, ...], worker_break: str = "") -> None:
        env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_VALKEY_PASSWORD"}
        for name in members:
            self.start(name, env, worker_break)
        wait_until(self.connected, "every member connected as its own user")

    def start(self, name: str, env: dict[str, str], worker_break: str = "") -> None:
        password = secrets.token_hex(12)
        self.admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}",
                                   "~*", "&*", "+@all")
        url = f"redis://{name}:{password}@127.0.0.1:{self.server.port}"
        script = "reaper.js" if name == "reaper" else "worker.js"
        argv = ["node", str(NODE_SUT / script)]
        if worker_break and script == "worker.js":
            argv += ["--break", worker_break]
        with (self.directory / f"{name}.log").open("wb") as log:
            self.processes[name] = subprocess.Popen(
                argv, cwd=self.directory, env={**env, **deployment_env(name, url, self.queue)},
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent)

    def restart(self, name: str) -> None:
        """Start a member again (as its supervisor would after a kill), a new process."""
        self.start(name, {k: v for k, v in os.environ.items() if k != "ECHOMQ_VALKEY_PASSWORD"})
        wait_until(self.connected, f"{name} connected again")

    def connected(self) -> bool:
        users = {client.get("user") for client in self.admin.client_list()}
        return all(name in users for name in self.processes)

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def members(self, names: tuple[str, ...] = MEMBERS) -> str:
        return "".join(f'[[attach.members]]\nname = "{name}"\nrole = '
                       f'"{"reaper" if name == "reaper" else "worker"}"\ndriver = "command"\n'
                       f'values = {{ pid = "{self.pid(name)}", user = "{name}" }}\n'
                       for name in names)

    def states(self) -> dict[str, str]:
        return {name: process_state(process.pid) for name, process in self.processes.items()}

    def drained(self) -> bool:
        keys = QueueKeys(PREFIX, self.queue)
        return QueueClient(self.admin, keys).backlog() == (0, 0)

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if self.processes:
            self.admin.execute_command("ACL", "DELUSER", *self.processes)
        self.admin.close()


@pytest.fixture
def deploy(valkey_server: ValkeyServer, tmp_path: Path,
           node_sut: None) -> Iterator[Callable[..., Processes]]:
    made: list[Processes] = []

    def make(queue: str, worker_break: str = "",
             members: tuple[str, ...] = MEMBERS) -> Processes:
        directory = tmp_path / f"deployment-{queue}"
        directory.mkdir()
        made.append(Processes(valkey_server, directory, queue))  # torn down however far
        made[-1].start_all(members, worker_break)                  # its start gets
        return made[-1]

    yield make
    for deployment in made:
        deployment.close()


# --- the scenario: declared strictly, every action printed before anything runs -------------

BASE = 'name = "a"\nruntime = "attach"\n[valkey]\nurl = "redis://127.0.0.1:6379"\n'
MEMBER = '[[attach.members]]\nname = "worker-1"\ndriver = "command"\n'


@pytest.mark.parametrize("text, expected", [
    ('name = "a"\nruntime = "attach"\n', ["runtime = 'attach' needs an [attach] section"]),
    ('name = "a"\n' + MEMBER, ["attach: the deployed queue's members are for runtime = "
                               "'attach', not 'local'"]),
    ('name = "a"\nruntime = "attach"\n' + MEMBER, ["valkey.url must name"]),
    (BASE.replace("redis://", "redis://:secret@") + MEMBER,
     ["valkey.url: holds a password", "ECHOMQ_VALKEY_PASSWORD"]),
    (BASE + MEMBER + 'container = "w1"\n',
     ["container: a docker member's field; this member's driver is 'command'"]),
    (BASE + MEMBER.replace('"command"', '"docker"'),
     ["by container = NAME or by labels"]),
    (BASE + MEMBER.replace('"command"', '"docker"') + 'container = "w"\nlabels = {a = "b"}\n',
     ["(one of the two)"]),
    (BASE + MEMBER.replace('"command"', '"docker"') + 'container = "w"\nkill = ["x"]\n',
     ["kill: the docker driver kills"]),
    (BASE + MEMBER.replace('"command"', '"docker"') + 'container = "w"\nengine = "http://h"\n',
     ["attach.members.0.engine = 'http://h'", "unix://, tcp://, ssh://"]),
    (BASE + MEMBER + 'pause = ["kill", "-STOP", "{pid}"]\nvalues = {pid = "1"}\n',
     ["a pause command needs a resume command", "resume is not set"]),
    (BASE + MEMBER + 'kill = ["kill", "-9", "{pod}"]\n',
     ["{pod} is not a placeholder of this member", "{name}, {role}"]),
    (BASE + MEMBER + MEMBER, ["'worker-1' named more than once"]),
    (BASE + MEMBER + 'role = "reaper"\n', ["no member with role = 'worker'"]),
    (BASE + '[sut]\nlogin = "default"\n' + MEMBER, ["sut: [sut] describes processes"]),
    (BASE + '[history]\nsource = "scripts"\n' + MEMBER,
     ["history.source = 'scripts'", "MONITOR"]),
    (BASE + "[topology]\nworkers = 3\n" + MEMBER,
     ["topology.workers = 3: the attached queue has 1 worker member"]),
    (BASE + MEMBER + '[[faults]]\nkind = "latency"\ntarget = "worker-1"\nlatency_ms = 5\n',
     ["faults.0.kind = 'latency': an attached member takes kill, pause, partition faults "
      "only"]),
    (BASE + MEMBER + '[[faults]]\nkind = "pause"\ntarget = "worker-1"\nduration_ms = 5\n',
     ["faults.0.target = 'worker-1': member worker-1 has no pause command"]),
    (BASE + MEMBER + '[[faults]]\nkind = "kill"\ntarget = "worker-9"\n',
     ["faults.0.kind = 'kill': no member can take it"]),
])
def test_a_bad_attach_section_is_refused_naming_file_field_and_value(
        tmp_path: Path, text: str, expected: list[str]):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    message = str(raised.value)
    assert str(path) in message
    for part in expected:
        assert part in message, message


def test_dry_run_prints_every_action_against_every_member_and_starts_nothing(tmp_path: Path):
    path = scenario_file(
        tmp_path / "plan.toml", "plan", "redis://127.0.0.1:1", "jobs",
        '[[attach.members]]\nname = "worker-1"\ndriver = "command"\nvalues = { pid = "4242" }\n'
        '[[attach.members]]\nname = "worker-2"\ndriver = "docker"\ncontainer = "w2"\n'
        'engine = "tcp://10.0.0.2:2375"\npartition = ["toxiproxy-cli", "toxic", "add", "-n", '
        '"cut", "-t", "timeout", "-a", "timeout=0", "{container}"]\n'
        'heal = ["toxiproxy-cli", "toxic", "remove", "-n", "cut", "{container}"]\n'
        '[[attach.members]]\nname = "reaper"\nrole = "reaper"\ndriver = "command"\n'
        'values = { pid = "4343" }\n'
        'kill = ["kubectl", "delete", "pod", "{pod}", "--grace-period=0", "--force"]\n'
        'lookup = { pod = ["kubectl", "get", "pods", "-l", "member={name}", "-o", '
        '"jsonpath={.items[0].metadata.name}"] }\n',
        KILL + '[[faults]]\nkind = "partition"\ntarget = "worker-2"\nat_ms = 100\n', COMMANDS)
    done = run_cli("run", str(path), "--dry-run", "--out", str(tmp_path / "out"),
                   password="unused")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for line in ("kill      kill -9 4242", "pause     kill -STOP 4242",
                 "resume    kill -CONT 4242", "worker-2 (worker, docker: container w2 on "
                 "tcp://10.0.0.2:2375)", "kill      docker kill (SIGKILL) the container",
                 "partition toxiproxy-cli toxic add -n cut -t timeout -a timeout=0 {container}",
                 "heal      toxiproxy-cli toxic remove -n cut {container}",
                 "kill      kubectl delete pod {pod} --grace-period=0 --force",
                 "{pod}     = first line printed by: kubectl get pods -l member=reaper -o "
                 "jsonpath={.items[0].metadata.name}",
                 "refuses   partition faults (no command)",
                 "nothing is started or stopped",
                 "300  kill holding_oldest_lease", "100  partition worker-2"):
        assert line in out, f"{line!r} not in:\n{out}"
    assert not (tmp_path / "out").exists()


# --- refusals: a queue that is not the scenario's to judge ---------------------------------

def test_a_queue_holding_jobs_is_refused(valkey_server: ValkeyServer, tmp_path: Path):
    client = redis_client(valkey_server.url, password=valkey_server.password,
                          decode_responses=True)
    QueueClient(client, QueueKeys(PREFIX, "held")).enqueue("JOB0000000001", "{}")
    client.close()
    path = scenario_file(tmp_path / "held.toml", "held", f"redis://127.0.0.1:"
                         f"{valkey_server.port}", "held",
                         '[[attach.members]]\nname = "worker-1"\ndriver = "command"\n'
                         'values = { pid = "1" }\n', PAUSE.replace("worker-2", "worker-1"),
                         COMMANDS + "[attach]\nprobe_ms = 0\n")
    done = run_cli("run", str(path), "--out", str(tmp_path / "run"),
                   password=valkey_server.password)
    assert done.returncode == 3, done.stderr
    assert "refusing to attach: the queue (emq:{held}:*) already holds 1 waiting and 0 " \
           "leased job(s)" in done.stderr
    assert "run --force, or attach.force = true" in done.stderr
    assert actions(tmp_path / "run") == []  # nothing was touched

    # Forced: said, and the run goes on (here to find that no worker-1 ever connects)
    path.write_text(path.read_text().replace("probe_ms = 0",
                                             "probe_ms = 0\nconnect_timeout_s = 1.0"))
    done = run_cli("run", str(path), "--out", str(tmp_path / "forced"), "--force",
                   password=valkey_server.password)
    assert done.returncode == 3, done.stderr
    assert "!! attach (forced): the queue (emq:{held}:*) already holds 1 waiting" in done.stderr
    assert "not connected after 1s: worker-1 (no client whose ACL user or client name is " \
           "'worker-1'" in done.stderr
    assert actions(tmp_path / "forced") == []


def test_a_consumer_not_named_and_a_member_gone_quiet_are_refused(
        deploy: Callable[..., Processes], tmp_path: Path):
    deployment = deploy("quiet", members=("worker-1", "worker-2"))
    named = deployment.members(("worker-1",))  # worker-2 consumes too, unnamed here
    path = scenario_file(tmp_path / "stranger.toml", "stranger", deployment.url, "quiet", named,
                         PAUSE.replace("worker-2", "worker-1"), COMMANDS)
    done = run_cli("run", str(path), "--out", str(tmp_path / "stranger"),
                   password=deployment.server.password)
    assert done.returncode == 3, done.stderr
    assert "connections that are not members of the scenario:" in done.stderr
    assert "user worker-2" in done.stderr and "emq:{quiet}:" in done.stderr

    # worker-1 frozen by someone else (a run killed outright): refused, never thawed by us
    os.kill(deployment.pid("worker-1"), signal.SIGSTOP)
    try:
        path = scenario_file(tmp_path / "quiet.toml", "quiet", deployment.url, "quiet",
                             deployment.members(("worker-1", "worker-2")),
                             PAUSE.replace("worker-2", "worker-1"),
                             COMMANDS + "[attach]\nidle_limit_ms = 1000\nprobe_ms = 0\n")
        wait_until(lambda: all(int(c.get("idle", 0)) >= 2 for c in
                               deployment.admin.client_list() if c.get("user") == "worker-1"),
                   "worker-1's connections idle for 2 s", timeout_s=10)
        done = run_cli("run", str(path), "--out", str(tmp_path / "quiet"),
                       password=deployment.server.password)
        assert done.returncode == 3, done.stderr
        assert "worker-1: all 2 of its connections idle for at least" in done.stderr
        assert deployment.states()["worker-1"] == "T"  # left as found
        assert actions(tmp_path / "quiet") == []
    finally:
        os.kill(deployment.pid("worker-1"), signal.SIGCONT)


# --- real runs: pause, then kill (a second run on what the first left), the broken SUT --------

# A partition of a plain process: its ACL user loses every command (its calls fail, it stays
# alive and connected) until healed; run by the command driver as any user's script would be.
CUT_SCRIPT = """import sys, redis
client = redis.Redis.from_url(sys.argv[1], password=open(sys.argv[2]).read())
client.execute_command("ACL", "SETUSER", sys.argv[4], "-@all" if sys.argv[3] == "cut" else "+@all")
"""


def partition_commands(deployment: Processes, directory: Path) -> str:
    script, secret = directory / "cut.py", directory / "admin-password"
    script.write_text(CUT_SCRIPT)
    secret.write_text(deployment.server.password or "")
    secret.chmod(0o600)
    argv = [sys.executable, str(script), deployment.url, str(secret)]
    return (f"partition = {json.dumps([*argv, 'cut', '{user}'])}\n"
            f"heal = {json.dumps([*argv, 'heal', '{user}'])}\n")


FAULT_CYCLE = (("pause", PAUSE), ("kill", KILL), ("partition", PARTITION))


def test_run_after_run_on_one_deployment_each_is_judged_on_its_own_history(
        deploy: Callable[..., Processes], tmp_path: Path):
    """A nightly job attaches to the same deployment night after night: the store keeps every
    earlier run's events (no cleanup between runs), and each run is judged on its own window of
    both sources, with its own counts. Pause, kill, partition in turn
    (ECHOMQ_CHAOS_ATTACH_RUNS runs, 5 by default; the probe of docs/attach.md runs 20)."""
    runs = int(os.environ.get("ECHOMQ_CHAOS_ATTACH_RUNS", "5"))
    deployment = deploy("attached")
    commands = COMMANDS + partition_commands(deployment, tmp_path)
    keys = QueueKeys(PREFIX, "attached")
    for index in range(runs):
        kind, faults = FAULT_CYCLE[index % len(FAULT_CYCLE)]
        wait_until(deployment.drained, "the last run's jobs drained")
        held_before = deployment.admin.xlen(keys.events)
        run_dir = tmp_path / f"run-{index}-{kind}"
        path = scenario_file(tmp_path / f"run-{index}.toml", f"attach-{kind}", deployment.url,
                             "attached", deployment.members(), faults, commands)
        done = run_cli("run", str(path), "--out", str(run_dir),
                       password=deployment.server.password)
        print(f"run {index} ({kind}), the stream held {held_before} entries before it:")
        print(figures(done))
        assert done.returncode == 0, done.stderr[-3000:]
        seen = report(run_dir)
        # its own jobs only: what its producer was acknowledged for, each completed once
        acknowledged = seen["ack_ledger"]["acknowledged"]["enqueue"]
        assert seen["jobs"]["enqueued"] == acknowledged > 0, (seen["jobs"], acknowledged)
        assert seen["jobs"]["completed"] == acknowledged
        assert seen["ack_ledger"]["history_events_lost"] == 0
        assert not (run_dir / "history-surviving.jsonl").exists()
        for history in ("history.jsonl", "history-monitor.jsonl"):
            types = [json.loads(line)["type"] for line in (run_dir / history).open()]
            assert types[0] == "run" and types.count("run") == 1, history
        assert seen["stranded_lease_count"] >= 1
        assert seen["history_recorder"]["health"]["unattributed_calls"] == 0
        nothing_left_applied(run_dir)
        done_actions = [(a["action"], a["how"]) for a in actions(run_dir)]
        if kind == "pause":
            assert done_actions == [
                ("pause", f"kill -STOP {deployment.pid('worker-2')}"),
                ("resume", f"kill -CONT {deployment.pid('worker-2')}")]
            assert set(deployment.states().values()) <= {"S", "R"}  # nothing frozen or dead
        elif kind == "partition":
            assert [action for action, _ in done_actions] == ["partition", "heal"]
            assert done_actions[0][1].endswith("cut worker-3")
        else:
            killed = [a for a in actions(run_dir) if a["action"] == "kill"]
            assert len(killed) == 1
            victim = killed[0]["member"]
            assert killed[0]["how"] == f"kill -9 {deployment.pid(victim)}"
            # SIGKILLed for real, and left dead (no restart command: its supervisor's
            # business, which the test plays before the next run)
            assert deployment.processes[victim].wait(timeout=5) == -signal.SIGKILL
            assert journal(run_dir)["members"][victim]["killed"]
            deployment.restart(victim)


def test_attached_processes_with_the_unfenced_complete_break_fail(
        deploy: Callable[..., Processes], tmp_path: Path):
    deployment = deploy("attached-broken", worker_break="unfenced-complete")
    path = scenario_file(tmp_path / "broken.toml", "attach-broken", deployment.url,
                         "attached-broken", deployment.members(), PAUSE, COMMANDS)
    done = run_cli("run", str(path), "--out", str(tmp_path / "broken"),
                   password=deployment.server.password)
    print(figures(done))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "[FAIL] no_double_completion" in done.stderr
    nothing_left_applied(tmp_path / "broken")
    assert set(deployment.states().values()) <= {"S", "R"}


@pytest.mark.parametrize("how", ["ctrl-c", "error"])
def test_a_frozen_member_is_thawed_on_every_way_out(deploy: Callable[..., Processes],
                                                    tmp_path: Path, how: str):
    """Ctrl-C (the orderly teardown), Ctrl-C twice (the forced exit: it thaws before it goes)
    and an error (worker-1's kill command fails while worker-2 is frozen): worker-2 runs on."""
    queue = f"interrupted-{how}"  # a queue each: an aborted run leaves jobs in its own
    deployment = deploy(queue, members=("worker-1", "worker-2", "reaper"))
    members = deployment.members(("worker-1", "worker-2", "reaper"))
    faults = PAUSE.replace("duration_ms = 2000", "duration_ms = 2500")
    if how == "error":
        worker_1 = 'name = "worker-1"\n'
        assert worker_1 in members  # the edit below must land, or the kill would just work
        members = members.replace(worker_1, worker_1 + 'kill = ["false"]\n')
        faults += '[[faults]]\nkind = "kill"\ntarget = "worker-1"\nat_ms = 800\n'
    path = scenario_file(tmp_path / "long.toml", "attach-interrupted", deployment.url,
                         queue, members, faults, COMMANDS)
    run_dir = tmp_path / "interrupted"
    runner = subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(path), "--out", str(run_dir)],
        env={**os.environ, "ECHOMQ_VALKEY_PASSWORD": deployment.server.password},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def paused() -> bool:
            return any(a["action"] == "pause" for a in actions(run_dir))

        wait_until(lambda: paused() or runner.poll() is not None, "worker-2 paused",
                   timeout_s=60)
        assert paused(), runner.communicate()[1][-2000:]
        assert deployment.states()["worker-2"] == "T"
        if how.startswith("ctrl-c"):
            runner.send_signal(signal.SIGINT)
        _, stderr = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == (3 if how == "error" else 130), stderr[-2000:]
    assert deployment.states()["worker-2"] in ("S", "R")
    assert not journal(run_dir)["members"]["worker-2"]["paused"]
    assert "resume" in [a["action"] for a in actions(run_dir) if a["member"] == "worker-2"]
    if how == "error":
        assert "worker-1: kill: `false` exited 1" in stderr
        assert deployment.states()["worker-1"] in ("S", "R")
    nothing_left_applied(run_dir)


def test_what_is_left_applied_is_undone_by_close_and_by_a_forced_exit(tmp_path: Path):
    """The runtime's own safety net, on real processes (no server needed): a second Ctrl-C
    (``kill_now``) thaws a frozen member at once; ``close`` heals a partition and runs the
    restart command of a member a kill took down."""
    sleepers = [subprocess.Popen(["sleep", "60"], start_new_session=True,
                                 preexec_fn=die_with_parent) for _ in range(2)]
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        scenario = Scenario.model_validate({
            "name": "undo", "runtime": "attach", "valkey": {"url": "redis://127.0.0.1:1"},
            "attach": {"idle_limit_ms": 0, "command": {
                "kill": ["kill", "-9", "{pid}"], "pause": ["kill", "-STOP", "{pid}"],
                "resume": ["kill", "-CONT", "{pid}"],
                "partition": ["touch", f"{marks}/{{name}}.cut"],
                "heal": ["rm", f"{marks}/{{name}}.cut"],
                "restart": ["touch", f"{marks}/{{name}}.restarted"]},
                "members": [{"name": f"worker-{n}", "driver": "command",
                             "values": {"pid": str(sleeper.pid)}}
                            for n, sleeper in enumerate(sleepers, 1)]}})
        runtime = AttachRuntime(scenario, tmp_path / "run")
        runtime.start_workers()
        runtime.pause("worker-1")
        assert process_state(sleepers[0].pid) == "T"
        runtime.kill_now()
        assert process_state(sleepers[0].pid) in ("S", "R")
        runtime.partition("worker-1", "f1", None)
        runtime.kill("worker-2")
        assert sleepers[1].wait(timeout=5) == -signal.SIGKILL
        assert (marks / "worker-1.cut").exists()
        assert journal(tmp_path / "run")["members"]["worker-1"]["undo"] == [
            f"rm {marks}/worker-1.cut"]  # what a person would run if the runner were SIGKILLed
        runtime.close()
        assert not (marks / "worker-1.cut").exists()
        assert (marks / "worker-2.restarted").exists()
        assert runtime.left_undone == []
        assert [(a["member"], a["action"]) for a in actions(tmp_path / "run")] == [
            ("worker-1", "pause"), ("worker-1", "resume"), ("worker-1", "partition"),
            ("worker-2", "kill"), ("worker-1", "heal"), ("worker-2", "restart")]
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_a_command_never_gets_the_servers_password_and_a_failure_names_it_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The commands act on processes, never on the server: no ECHOMQ_VALKEY_PASSWORD; a
    lookup's first line is its placeholder's value; a failing command is an InfraError naming
    the member, the action, the argv, its exit status and output."""
    scenario = Scenario.model_validate({
        "name": "env", "runtime": "attach", "valkey": {"url": "redis://127.0.0.1:1"},
        "attach": {"members": [{
            "name": "worker-1", "driver": "command",
            "lookup": {"seen": ["printenv", "ECHOMQ_VALKEY_PASSWORD"], "pod": ["echo", "p-{name}"]},
            "kill": ["ls", "/no/such/{pod}"]}]}})
    assert scenario.attach is not None
    driver = CommandDriver(scenario.attach.members[0], scenario.attach,
                           ActionLog(tmp_path / "actions.jsonl"))
    monkeypatch.setenv("ECHOMQ_VALKEY_PASSWORD", "s3cret")
    with pytest.raises(InfraError, match="lookup seen: `printenv ECHOMQ_VALKEY_PASSWORD` "
                                         "exited 1"):
        driver.values_now()
    monkeypatch.delenv("ECHOMQ_VALKEY_PASSWORD")
    scenario.attach.members[0].lookup.pop("seen")
    assert driver.values_now()["pod"] == "p-worker-1"
    with pytest.raises(InfraError) as raised:
        driver.kill()
    assert str(raised.value).startswith("worker-1: kill: `ls /no/such/p-worker-1` exited 2: ")
    assert "No such file" in str(raised.value)


def test_clean_undoes_what_a_killed_runner_left_applied(tmp_path: Path):
    """A runner SIGKILLed mid-fault never runs its wind-down: ``echomq-chaos clean`` reads its
    ``attach.json`` and runs the undo commands there (the frozen member thawed, the partition
    healed), keeps what failed in the journal, names the killed member, and leaves a run whose
    runner still lives alone."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True,
                               preexec_fn=die_with_parent)
    marks = tmp_path / "marks"
    marks.mkdir()
    runs = tmp_path / "runs"
    try:
        def attach_runtime(run: str, heal: list[str]) -> AttachRuntime:
            scenario = Scenario.model_validate({
                "name": "left", "runtime": "attach", "valkey": {"url": "redis://127.0.0.1:1"},
                "attach": {"idle_limit_ms": 0, "command": {
                    "kill": ["true"], "pause": ["kill", "-STOP", "{pid}"],
                    "resume": ["kill", "-CONT", "{pid}"],
                    "partition": ["touch", f"{marks}/{run}-{{name}}.cut"], "heal": heal},
                    "members": [{"name": "worker-1", "driver": "command",
                                 "values": {"pid": str(sleeper.pid)}},
                                {"name": "worker-2", "driver": "command",
                                 "values": {"pid": "0"}}]}})
            runtime = AttachRuntime(scenario, runs / run)
            runtime.start_workers()
            return runtime

        left = attach_runtime("killed", ["rm", f"{marks}/killed-{{name}}.cut"])
        left.pause("worker-1")
        left.partition("worker-2", "f1", None)
        left.kill("worker-1")
        failing = attach_runtime("failing", ["false"])
        failing.partition("worker-2", "f1", None)
        alive = attach_runtime("alive", ["rm", f"{marks}/alive-{{name}}.cut"])
        alive.partition("worker-2", "f1", None)
        record_process(runs / "alive", RUNNER, os.getpid())  # its runner: this test, alive
        assert process_state(sleeper.pid) == "T"
        assert (marks / "killed-worker-2.cut").exists()
        # ... and the runners die here without a wind-down: nothing calls close()

        cleaned = subprocess.run([sys.executable, "-m", "chaos", "clean", "--runs", str(runs),
                                  "--no-containers"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout
        assert process_state(sleeper.pid) in ("S", "R"), cleaned
        assert not (marks / "killed-worker-2.cut").exists(), cleaned
        assert (marks / "alive-worker-2.cut").exists()
        assert f"worker-1: ran kill -CONT {sleeper.pid}" in cleaned
        assert "worker-1 was killed by the run and is not restarted" in cleaned
        assert "worker-2: LEFT UNDONE: false (exit 1" in cleaned
        killed = journal(runs / "killed")["members"]
        assert killed["worker-1"]["undo"] == killed["worker-2"]["undo"] == []
        assert not killed["worker-1"]["paused"] and not killed["worker-2"]["cut_off"]
        assert journal(runs / "failing")["members"]["worker-2"]["undo"] == ["false"]
        assert journal(runs / "alive")["members"]["worker-2"]["cut_off"]  # left alone
        assert [line for line in cleaned.splitlines() if str(runs / "alive") in line] == [
            f"{runs / 'alive'}: still running (runner pid {os.getpid()}); left alone"]
        alive.close()
        assert not (marks / "alive-worker-2.cut").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
