"""The compose walkthrough of docs/docker.md, run as written against a real Docker engine.

The commands come from the doc's walkthrough block (the one marked for this test), each run by
bash as a user would paste it: up with headless Locust load, jobs flowing, one worker SIGKILLed
and brought back, down with nothing left behind. A doc change that breaks the walkthrough fails
here. What the test adds around the commands only keeps it apart from other stacks on the
machine (free ports, its own project name) and quick (a 5 s lease): variables the doc names.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Any

import docker
import docker_support
import pytest
from docker_support import ROOT, docker_compose

from chaos.protocol.client import QueueKeys, connect
from chaos.runtime.valkey import free_port
from tests.procs import wait_until

pytestmark = pytest.mark.integration
engine = docker_support.engine  # the fixture, under its own name

DOC = ROOT / "docs" / "docker.md"
MARKER = "tests/test_compose.py runs this block"
STEPS = ("up", "kill one worker", "bring workers back", "down")
WORKER_UP = re.compile(r"(worker-[0-9a-f]{8}) up")


def walkthrough() -> tuple[list[str], dict[str, str]]:
    """The block's ``export`` lines, and its commands by step (their order is the doc's)."""
    text = DOC.read_text()
    assert MARKER in text, f"{DOC.name} lost the walkthrough block marked {MARKER!r}"
    block = text[text.index(MARKER):].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [re.sub(r"\s+#.*$", "", line) for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    exports = [line for line in lines if line.startswith("export ")]
    commands = [line for line in lines if not line.startswith("export ")]
    assert len(commands) == len(STEPS), ("the walkthrough's steps changed: keep "
                                         f"tests/test_compose.py in step ({commands})")
    steps = dict(zip(STEPS, commands, strict=True))
    assert " up -d " in steps["up"] and "--scale worker=4" in steps["up"]
    assert steps["kill one worker"].startswith("docker kill --signal KILL ")
    assert steps["bring workers back"].endswith(" start worker")
    assert " down" in steps["down"]
    return exports, steps


def shell(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


def exported(exports: list[str], env: dict[str, str]) -> dict[str, str]:
    """The environment after the block's exports, evaluated once (the password is random)."""
    result = shell("\n".join([*exports, "env -0"]), env, timeout=30)
    return dict(item.split("=", 1) for item in result.stdout.split("\0") if "=" in item)


class Events:
    """The queue's events stream, read as it grows."""

    def __init__(self, client: Any, key: str) -> None:
        self.client, self.key, self.last = client, key, "0-0"
        self.seen: list[dict[str, str]] = []

    def read(self) -> list[dict[str, str]]:
        for entry_id, fields in self.client.xrange(self.key, f"({self.last}", count=50_000):
            self.last = entry_id
            self.seen.append(fields)
        return self.seen

    def of(self, kind: str, worker: str | None = None) -> list[dict[str, str]]:
        return [e for e in self.read()
                if e["type"] == kind and (worker is None or e.get("worker") == worker)]


def test_the_documented_compose_walkthrough_runs_end_to_end(engine: docker.DockerClient):
    compose = docker_compose()
    exports, steps = walkthrough()
    project = f"emqc-walk-{os.getpid()}"
    ports = {name: str(free_port()) for name in (
        "ECHOMQ_VALKEY_PORT", "ECHOMQ_TOXIPROXY_PORT", "ECHOMQ_PROXY_PORT",
        "ECHOMQ_LOCUST_MASTER_PORT", "ECHOMQ_LOCUST_WEB_PORT")}
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("LOCUST_", "ECHOMQ_", "COMPOSE_"))}
    env = exported(exports, {
        **clean, **ports, "COMPOSE_PROJECT_NAME": project, "ECHOMQ_LEASE_MS": "5000",
        "PATH": f"{os.path.dirname(compose)}:{clean.get('PATH', '/usr/bin:/bin')}"})
    assert env["LOCUST_HEADLESS"] and env["ECHOMQ_VALKEY_PASSWORD"]

    def workers() -> list[Any]:
        return engine.containers.list(all=True, filters={"label": [
            f"com.docker.compose.project={project}", "com.docker.compose.service=worker"]})

    started = time.monotonic()
    down = False
    try:
        shell(steps["up"], env, timeout=120)
        client = connect(f"valkey://127.0.0.1:{ports['ECHOMQ_VALKEY_PORT']}/0",
                         env["ECHOMQ_VALKEY_PASSWORD"], socket_timeout=5)
        events = Events(client, QueueKeys("emq:", "jobs").events)

        # Headless Locust load reaches the workers, which waited for their proxy (no restart).
        wait_until(lambda: len(events.of("complete")) >= 50,
                   "the stack's workers completed no Locust jobs", timeout_s=60, poll_s=0.25)
        containers = workers()
        assert len(containers) == 4
        for container in containers:
            container.reload()
            assert container.attrs["RestartCount"] == 0, container.logs()[-2000:].decode()
            assert b"Traceback" not in container.logs()
        # LOCUST_PRODUCER_RATE reached the users (20 x 2 jobs/s, not Locust's 20 x 100), and
        # they are producers only: every complete is a stack worker's.
        before, window = len(events.of("enqueue")), time.monotonic()
        time.sleep(3)
        rate = (len(events.of("enqueue")) - before) / (time.monotonic() - window)
        assert 10 < rate < 100, rate
        assert all(e["worker"].startswith("worker-") for e in events.of("complete"))

        # Kill one worker: it stays down; what it held comes back after the 5 s lease.
        shell(steps["kill one worker"], env, timeout=30)
        killed = [c for c in workers() if c.attrs["State"]["ExitCode"] == 137]
        assert len(killed) == 1, [(c.name, c.status) for c in workers()]
        victim = killed[0]
        old_name = WORKER_UP.findall(victim.logs().decode())[-1]
        time.sleep(1)  # restart: on-failure leaves it down (Docker was told to kill it)
        victim.reload()
        assert victim.status == "exited"

        # Brought back as documented: every worker runs, the revived one under a new name.
        shell(steps["bring workers back"], env, timeout=60)
        victim.reload()
        assert victim.status == "running"
        new_name = wait_until(
            lambda: [n for n in WORKER_UP.findall(victim.logs().decode()) if n != old_name],
            "the revived worker did not come up", timeout_s=30, poll_s=0.25)[0]
        wait_until(lambda: events.of("complete", new_name),
                   "the revived worker completed nothing", timeout_s=30, poll_s=0.25)
        assert all(c.status == "running" for c in workers())

        # Every lease the killed worker held was reaped and its job completed by another (often
        # there is none: the workers' default jobs are short, and seldom in flight at a kill).
        claimed = {(e["id"], e["attempt"]) for e in events.of("claim", old_name)}
        done = {(e["id"], e["attempt"]) for e in events.of("complete", old_name)}
        stranded = {job for job, _ in claimed - done}
        wait_until(lambda: stranded <= {e["id"] for e in events.of("reap", old_name)},
                   f"{old_name}'s leases were not all reaped", timeout_s=30, poll_s=0.25)
        wait_until(lambda: stranded <= {e["id"] for e in events.of("complete")
                                        if e["worker"] != old_name},
                   f"{old_name}'s stranded jobs were not all completed",
                   timeout_s=30, poll_s=0.25)
        client.close()

        shell(steps["down"], env, timeout=120)
        down = True
        leftovers = engine.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"})
        assert leftovers == []
        assert engine.networks.list(filters={"label": f"com.docker.compose.project={project}"}) \
            == []
        assert not [n for n in engine.networks.list() if n.name.startswith(project)]
        assert time.monotonic() - started < 120
    finally:
        if not down:
            subprocess.run(["bash", "-c", steps["down"] + " --timeout 5"], cwd=ROOT, env=env,
                           capture_output=True, timeout=120)
