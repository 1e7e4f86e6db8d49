"""Load from many hosts (docs/load.md): a run with ``load.remote_workers = 2`` starts a Locust
master and waits for two workers started elsewhere, as separate processes (here on 127.0.0.1),
with the project's locustfile and no password of their own: they get the server's address and
credentials from the master. The report counts each worker's users and requests."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from chaos.load.sources import locustfile
from chaos.report.summary import summary_text
from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _worker(port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items()
           if key != "ECHOMQ_VALKEY_PASSWORD" and not key.startswith("LOCUST_")}
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(locustfile()), "--worker",
         "--master-host", "127.0.0.1", "--master-port", str(port)],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True)


def test_a_run_takes_its_load_from_two_remote_locust_workers(tmp_path: Path):
    port = _free_port()
    workers = [_worker(port, tmp_path / f"worker-{n}.log") for n in (1, 2)]
    try:
        scenario = load_scenario(ROOT / "scenarios" / "kill-worker.toml", [
            'load.engine="locust"', "load.remote_workers=2", f'load.master_bind="127.0.0.1:{port}"',
            "load.users=4", "load.remote_wait_s=60", "phases.warmup_ms=500",
            "phases.chaos_ms=2500"])
        progress = io.StringIO()
        result = run_scenario(scenario, tmp_path / "run", progress)
        assert result.passed, (result, progress.getvalue()[-2000:])
        for worker in workers:  # the master told them to quit
            assert worker.wait(timeout=30) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    said = progress.getvalue()
    assert "waiting for 2 remote worker(s)" in said and "2 of 2 remote worker(s) connected" in said
    account = result.report["load"]["remote_workers"]
    assert account["expected"] == 2 and account["connected"] == 2 and account["lost"] == []
    assert sorted(w["users"] for w in account["workers"]) == [2, 2]
    assert all(w["requests"] > 0 for w in account["workers"]), account
    enqueued = result.report["load"]["operations"]["enqueue"]["requests"]
    assert sum(w["requests"] for w in account["workers"]) == enqueued
    password = result.report.get("run", {}).get("valkey", {}).get("password", "")
    assert not password  # never in the report


def test_a_remote_worker_lost_mid_run_is_reported(tmp_path: Path):
    """One of the two workers is SIGKILLed a second into the load: the run goes on with the
    other, and the report names the lost one (never hidden)."""
    port = _free_port()
    workers = [_worker(port, tmp_path / f"worker-{n}.log") for n in (1, 2)]
    killer = threading.Timer(4.0, workers[1].kill)  # start-up ~2 s, then load
    try:
        scenario = load_scenario(ROOT / "scenarios" / "kill-worker.toml", [
            'load.engine="locust"', "load.remote_workers=2", f'load.master_bind="127.0.0.1:{port}"',
            "load.users=4", "load.remote_wait_s=60", "phases.warmup_ms=500",
            "phases.chaos_ms=2500"])
        killer.start()
        result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    finally:
        killer.cancel()
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
    account = result.report["load"]["remote_workers"]
    assert account["connected"] == 2 and len(account["lost"]) == 1, account
    assert "lost" in summary_text(result.report)
