"""The Docker runtime end to end: real containers, really SIGKILLed and frozen by the engine.

These need a Docker engine and the images (``echomq-chaos images build``). Where there is none
they skip, saying how to enable them; with ECHOMQ_CHAOS_REQUIRE_DOCKER=1 (CI sets it) a missing
engine or image fails them instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import docker
import docker_support
import pytest
from docker_support import ROOT, docker_compose

from chaos.history.events import read_history
from chaos.runtime.docker import LABEL_RUN_DIR
from chaos.runtime.engine import LABEL_ROLE, LABEL_RUNNER, LABEL_TOOL, runner_label

pytestmark = pytest.mark.integration
engine = docker_support.engine  # the fixture, under its own name


def run_cli(*args: str, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def run_in_docker(engine: docker.DockerClient, name: str, out: Path) -> dict:
    """Run a fault scenario in containers: it passes, its recovery bound held for at least one
    stranded lease, and no container of it is left."""
    result = run_cli("run", str(ROOT / "scenarios" / f"{name}.toml"), "--runtime", "docker",
                     "--out", str(out))
    report = json.loads((out / "report.json").read_text())
    assert result.returncode == 0, result.stderr[-3000:]
    assert report["verdict"] == "pass"
    assert report["run"]["runtime"]["kind"] == "docker"
    bound = report["invariants"]["recovery_bound"]
    assert bound["ok"] and bound["count"] >= 1 and bound["max_ms"] <= bound["bound_ms"]
    assert containers_of(engine, out) == {}
    return report


def containers_of(client: docker.DockerClient, out: Path) -> dict[str, str]:
    """role -> state of the run's containers (one list call: no inspect to race a removal)."""
    listed = client.api.containers(all=True,
                                   filters={"label": f"{LABEL_RUN_DIR}={out.resolve()}"})
    return {entry["Labels"][LABEL_ROLE]: entry["State"] for entry in listed}


def test_kill_worker_in_containers_sigkills_and_recovers_within_the_bound(
        engine: docker.DockerClient, tmp_path: Path):
    out = tmp_path / "run"
    report = run_in_docker(engine, "kill-worker", out)
    assert report["faults"] == 2 and report["redeliveries"]["needed"] >= 1
    assert report["jobs"]["lost"] == 0 and report["jobs"]["double_completed"] == 0
    runtime = report["run"]["runtime"]
    assert set(runtime["images"]) == {"valkey", "worker"}  # no network fault: no Toxiproxy
    containers = runtime["containers"]
    assert set(containers) == {"valkey", "reaper", "worker-1", "worker-2", "worker-3",
                               "worker-4"}
    killed = {name for name, state in containers.items() if state["killed_by_fault"]}
    assert killed == {f["worker"] for f in report["run"]["faults"]}
    for name in killed:  # docker kill: SIGKILL, exit 128 + 9
        assert containers[name]["exit_code"] == 137, containers[name]
    for name in {"reaper", "worker-1", "worker-2", "worker-3", "worker-4"} - killed:
        assert containers[name]["exit_code"] == 0, containers[name]  # stopped by SIGTERM
    assert (out / "logs" / "valkey.log").read_text().count("Ready to accept connections") == 1


def test_pause_worker_in_containers_freezes_it_and_its_stale_completes_are_rejected(
        engine: docker.DockerClient, tmp_path: Path):
    out = tmp_path / "run"
    report = run_in_docker(engine, "pause-worker", out)
    assert report["redeliveries"]["needed"] >= 1 and report["jobs"]["double_completed"] == 0
    assert report["rejected"].get("complete_rejected", 0) >= 1
    events = read_history(out / "history.jsonl")
    fault = next(e for e in events if e.type == "fault")
    heal = next(e for e in events if e.type == "heal")
    assert fault.extra["kind"] == "pause"
    assert heal.ts - fault.ts >= 2500 - 100
    # Frozen by the cgroup freezer: not one call from it while paused, heartbeats included
    # (reap events name the lease holder, but the reaper sent them).
    own_calls = ("claim", "extend", "extend_rejected", "complete", "complete_rejected")
    assert not [e for e in events if e.worker == fault.worker and fault.ts < e.ts < heal.ts
                and e.type in own_calls]
    # Its leases lapsed and were reaped while it slept; when it woke, its completes were stale.
    reaped = {(e.job_id, e.attempt) for e in events
              if e.type == "reap" and e.worker == fault.worker and fault.ts < e.ts < heal.ts}
    stale = [e for e in events if e.type == "complete_rejected"]
    assert reaped and stale
    for event in stale:
        assert event.worker == fault.worker and event.ts >= heal.ts
        assert (event.job_id, event.attempt) in reaped
    assert report["run"]["runtime"]["containers"][fault.worker]["exit_code"] == 0


def test_partition_in_containers_goes_through_the_toxiproxy_container(
        engine: docker.DockerClient, tmp_path: Path):
    out = tmp_path / "run"
    report = run_in_docker(engine, "partition-worker", out)
    assert report["redeliveries"]["needless"] == 0 and report["jobs"]["lost"] == 0
    toxiproxy = report["run"]["toxiproxy"]
    assert toxiproxy["kind"] == "docker" and toxiproxy["version"]
    assert toxiproxy["command"][0] == report["run"]["runtime"]["images"]["toxiproxy"]["name"]
    assert sorted(toxiproxy["links"]) == ["worker-1", "worker-2", "worker-3"]
    assert "toxiproxy" in report["run"]["runtime"]["containers"]


@pytest.mark.parametrize("moment", ["setup", "chaos", "chaos-twice"])
def test_sigint_leaves_no_labelled_container(engine: docker.DockerClient, tmp_path: Path,
                                             moment: str):
    out = tmp_path / "run"
    runner = subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "pause-worker.toml"),
         "--runtime", "docker", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert runner.stdout is not None
    deadline = time.monotonic() + 60
    if moment == "setup":  # as soon as the first container exists, before the rest are up
        while not containers_of(engine, out) and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        for line in runner.stdout:  # the chaos phase: worker-2 is frozen by then
            if "phase chaos" in line or time.monotonic() > deadline:
                break
        time.sleep(1.0)
        states = containers_of(engine, out)
        assert states.get("worker-2") == "paused", states
        assert len(states) == 5  # valkey, reaper, three workers
    assert containers_of(engine, out), "the run should have containers up"
    runner.send_signal(signal.SIGINT)
    if moment == "chaos-twice":  # mid-teardown: force-removes every container, exits at once
        time.sleep(0.3)
        runner.send_signal(signal.SIGINT)
    output, _ = runner.communicate(timeout=60)
    assert runner.returncode == 130
    # The second one really cut the orderly teardown short (not ignored, not too late).
    assert ("interrupted again" in output) == (moment == "chaos-twice"), output[-2000:]
    assert json.loads((out / "report.json").read_text())["verdict"] == "aborted"
    assert containers_of(engine, out) == {}


def test_clean_removes_containers_whose_runner_is_gone(engine: docker.DockerClient,
                                                       tmp_path: Path):
    from chaos.scenario.model import DockerSettings

    image = DockerSettings().worker_image
    dead_runner = f"{2**22 + 17}:1"  # above pid_max: no such process
    started = []
    try:
        for runner in (dead_runner, runner_label()):
            started.append(engine.containers.run(
                image, ["python3", "-c", "import time; time.sleep(120)"], detach=True,
                network_mode="none", labels={LABEL_TOOL: "1", LABEL_RUNNER: runner,
                                             LABEL_RUN_DIR: str(tmp_path)}))
        started[0].pause()  # a frozen left-over goes too
        result = run_cli("clean", "--runs", str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert started[0].name in result.stdout and started[1].name not in result.stdout
        names = {c.name for c in engine.containers.list(all=True,
                                                        filters={"label": LABEL_TOOL})}
        assert started[0].name not in names and started[1].name in names
        result = run_cli("clean", "--runs", str(tmp_path), "--all")
        assert result.returncode == 0 and started[1].name in result.stdout
        assert engine.containers.list(all=True,
                                      filters={"label": f"{LABEL_RUN_DIR}={tmp_path}"}) == []
    finally:
        for container in started:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def test_compose_file_validates(tmp_path: Path):
    compose = docker_compose()
    command = [compose, "-f", str(ROOT / "compose" / "docker-compose.yml"), "config"]
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_VALKEY_PASSWORD"}
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode != 0 and "set ECHOMQ_VALKEY_PASSWORD" in refused.stderr
    env["ECHOMQ_VALKEY_PASSWORD"] = "s3cret"
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    services = lines[lines.index("services:") + 1:]
    names = [line.strip(" :") for line in services if re.fullmatch(r"  [a-z-]+:", line)]
    assert sorted(names) == ["locust-master", "locust-worker", "reaper", "toxiproxy",
                             "toxiproxy-setup", "valkey", "worker"]
    assert result.stdout.count("network_mode: host") == len(names)
    assert "/project/loadtests/queue.py" in result.stdout
    # The password is only ever an environment value, never part of a command.
    assert all(line.strip() == "ECHOMQ_VALKEY_PASSWORD: s3cret"
               for line in lines if "s3cret" in line)


def test_no_engine_is_an_infrastructure_error_with_a_report(tmp_path: Path):
    out = tmp_path / "run"
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-such-engine.sock"}
    result = run_cli("run", str(ROOT / "scenarios" / "kill-worker.toml"), "--runtime", "docker",
                     "--out", str(out), env=env, timeout=60)
    assert result.returncode == 3, result.stderr[-2000:]
    assert "no Docker engine answering" in result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "error" and "no Docker engine" in report["error"]


def test_compose_stack_runs_scaled_workers_behind_toxiproxy(engine: docker.DockerClient,
                                                            tmp_path: Path):
    """The reference stack really comes up (offline stand-ins, free ports): two workers reach
    Valkey through the Toxiproxy proxy, and jobs enqueued there get completed."""
    from chaos.protocol.client import QueueClient, QueueKeys, connect
    from chaos.runtime.valkey import free_port
    from chaos.scenario.model import DockerSettings

    compose = docker_compose()
    settings = DockerSettings()
    ports = {name: str(free_port()) for name in
             ("ECHOMQ_VALKEY_PORT", "ECHOMQ_TOXIPROXY_PORT", "ECHOMQ_PROXY_PORT")}
    env = {**os.environ, **ports, "ECHOMQ_VALKEY_PASSWORD": "compose-test-secret",
           "ECHOMQ_VALKEY_IMAGE": settings.valkey_offline_image,
           "ECHOMQ_TOXIPROXY_IMAGE": settings.toxiproxy_offline_image,
           "ECHOMQ_WORKER_IMAGE": settings.worker_image, "ECHOMQ_QUEUE": "compose"}
    base = [compose, "-p", f"emqc-test-{os.getpid()}", "-f",
            str(ROOT / "compose" / "docker-compose.yml")]
    try:
        up = subprocess.run([*base, "up", "-d", "--scale", "worker=2", "valkey", "toxiproxy",
                             "toxiproxy-setup", "reaper", "worker"],
                            capture_output=True, text=True, env=env, timeout=120)
        assert up.returncode == 0, up.stderr
        client = connect(f"valkey://127.0.0.1:{ports['ECHOMQ_VALKEY_PORT']}/0",
                         "compose-test-secret", socket_timeout=2)
        queue = QueueClient(client, QueueKeys("emq:", "compose"))
        deadline = time.monotonic() + 60
        workers: set[str] = set()
        while time.monotonic() < deadline and len(workers) < 2:
            workers = {c["name"] for c in client.client_list()  # not their heartbeats
                       if c["name"].startswith("worker-") and "-heartbeat" not in c["name"]}
            time.sleep(0.2)
        assert len(workers) == 2, "the two scaled workers did not connect"
        api = f"http://127.0.0.1:{ports['ECHOMQ_TOXIPROXY_PORT']}"
        with urllib.request.urlopen(f"{api}/proxies", timeout=10) as response:
            proxies = json.loads(response.read())
        assert proxies["valkey"]["listen"] == f"127.0.0.1:{ports['ECHOMQ_PROXY_PORT']}"
        assert proxies["valkey"]["upstream"] == f"127.0.0.1:{ports['ECHOMQ_VALKEY_PORT']}"
        ids = [queue.enqueue(f"job-{n}", "x") for n in range(10)]
        while time.monotonic() < deadline and queue.backlog() != (0, 0):
            time.sleep(0.1)
        assert queue.backlog() == (0, 0)
        completed = [e for e in client.xrange(queue.keys.events) if e[1]["type"] == "complete"]
        assert len(completed) == len(ids)
        assert {e[1]["worker"] for e in completed} <= workers
        client.close()
    finally:
        subprocess.run([*base, "down", "--timeout", "5"], capture_output=True, env=env,
                       timeout=120)
