"""Locust drives the load: real Locust (a subprocess, its own CLI) against a real valkey-server.

The test process never imports locust (it monkey-patches with gevent on import); it reads what
Locust writes (its JSON/CSV statistics) and what the queue's history holds.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.load.sources import (
    fold_locust_csv,
    fold_locust_json,
    locust_summary,
    locustfile,
    percentile_of_histogram,
)
from chaos.protocol.client import QueueKeys, redis_client
from chaos.runtime.valkey import ValkeyServer

ROOT = Path(__file__).resolve().parent.parent


def run_locust(server: ValkeyServer, out: Path, queue: str, *args: str, seconds: int = 3,
               json_file: bool = True) -> subprocess.CompletedProcess[str]:
    """Locust headless for ``seconds``. With ``json_file`` its final statistics go to
    locust.json (the runner's way); without, it prints them, error report included."""
    env = dict(os.environ, ECHOMQ_VALKEY_PASSWORD=server.password)
    return subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile()), "--headless",
         "--host", server.url, "-t", f"{seconds}s", "--stop-timeout", "3",
         "--csv", str(out / "locust"), "--html", str(out / "locust.html"), "--only-summary",
         *(["--json-file", str(out / "locust")] if json_file else []),
         "--queue-prefix", "lt:", "--queue-name", queue, *args],
        env=env, capture_output=True, text=True, timeout=90, cwd=ROOT,
    )


def history_counts(server: ValkeyServer, queue: str) -> collections.Counter[str]:
    client = redis_client(server.url, password=server.password,
                                  decode_responses=True)
    try:
        entries = client.xrange(QueueKeys("lt:", queue).events)
    finally:
        client.close()
    return collections.Counter(fields["type"] for _, fields in entries)


@pytest.mark.integration
def test_producers_and_consumers_report_every_script_call_with_no_failures(
        valkey_server: ValkeyServer, tmp_path: Path):
    result = run_locust(valkey_server, tmp_path, "mixed", "-u", "4", "-r", "100",
                        "--producers", "2", "--consumers", "2", "--producer-rate", "40",
                        "--batch", "4", "--lease-ms", "150", "--work-min-ms", "60",
                        "--work-max-ms", "120", "--poll-ms", "10")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = locust_summary(tmp_path, users=4)
    operations = summary["operations"]
    assert set(operations) == {"enqueue", "claim", "complete", "extend"}
    for name, figures in operations.items():
        assert figures["requests"] > 0 and figures["failures"] == 0, (name, figures)
        assert figures["rps"] > 0
        assert 0 <= figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"]
    # Locust's counts are the queue's own: one request per job enqueued (batches count jobs,
    # not round trips), per claim that got a job, per accepted complete and extend, but for the
    # last calls made while it stops (at most a batch per producer, a few calls otherwise).
    history = history_counts(valkey_server, "mixed")
    assert history["enqueue"] % 4 == 0  # whole batches of 4
    assert history["enqueue"] - 2 * 4 <= operations["enqueue"]["requests"] <= history["enqueue"]
    for name in ("claim", "complete", "extend"):
        assert history[name] - 5 <= operations[name]["requests"] <= history[name], name
    # Paced: 2 producers x 40 jobs/s for about 3 s, never far beyond.
    assert history["enqueue"] <= 2 * 40 * 4
    for name in ("locust_stats.csv", "locust_failures.csv", "locust.html", "locust.json"):
        assert name in summary["files"]


@pytest.mark.integration
def test_a_server_error_surfaces_as_a_locust_failure(valkey_server: ValkeyServer,
                                                     tmp_path: Path):
    """With maxmemory at 1 byte every write script is refused (OOM): Locust must count the
    failures, name the error and exit non-zero (--exit-code-on-error)."""
    client = redis_client(valkey_server.url, password=valkey_server.password)
    client.config_set("maxmemory", "1")
    try:
        result = run_locust(valkey_server, tmp_path, "refused", "-u", "1", "--producers", "1",
                            "--producer-rate", "50", json_file=False)
    finally:
        client.config_set("maxmemory", "0")
        client.close()
    assert result.returncode == 1, result.stderr[-3000:]
    # Locust's final table: every enqueue failed; its error report names the server's error.
    output = result.stdout + result.stderr
    rows = [line.split() for line in output.splitlines() if line.startswith("EVALSHA")]
    enqueue = next(row for row in rows if row[1] == "enqueue")
    assert int(enqueue[2]) > 0 and enqueue[3] == f"{enqueue[2]}(100.00%)"
    assert "Error report" in output and "OutOfMemoryError" in output
    assert history_counts(valkey_server, "refused")["enqueue"] == 0


def test_bad_locust_options_are_named(valkey_server: ValkeyServer, tmp_path: Path):
    result = run_locust(valkey_server, tmp_path, "bad", "-u", "1", "--batch", "0", seconds=1)
    assert result.returncode != 0
    assert "--batch 0: must be >= 1" in result.stderr


def test_percentiles_follow_locusts_rule():
    # 100 requests: 90 at 1 ms, 9 at 5 ms, 1 at 40 ms.
    histogram = {1: 90, 5: 9, 40: 1}
    assert percentile_of_histogram(histogram, 0.50) == 1
    assert percentile_of_histogram(histogram, 0.95) == 5
    assert percentile_of_histogram(histogram, 0.98) == 5
    assert percentile_of_histogram(histogram, 0.99) == 40  # Locust: the 100th of 100 is p99
    assert percentile_of_histogram(histogram, 1.0) == 40
    assert percentile_of_histogram({}, 0.99) == 0


def test_folding_keeps_the_four_operations_and_the_contract_shape(tmp_path: Path):
    entries = [
        {"name": "enqueue", "method": "EVALSHA", "start_time": 100.0,
         "last_request_timestamp": 104.0, "num_requests": 400, "num_failures": 2,
         "response_times": {"1": 380, "3": 20}},
        {"name": "claim_empty", "method": "EVALSHA", "start_time": 100.0,
         "last_request_timestamp": 101.0, "num_requests": 7, "num_failures": 0,
         "response_times": {"0": 7}},
    ]
    folded = fold_locust_json(entries)
    assert folded == {"enqueue": {"requests": 400, "failures": 2, "rps": 100.0, "p50_ms": 1.0,
                                  "p95_ms": 3.0, "p99_ms": 3.0}}
    (tmp_path / "locust.json").write_text(json.dumps(entries))
    summary = locust_summary(tmp_path, users=3)
    assert summary == {"engine": "locust", "users": 3, "operations": folded,
                       "files": ["locust.json"]}
    # The CSV fallback reads Locust's own columns.
    (tmp_path / "stats.csv").write_text(
        "Type,Name,Request Count,Failure Count,Requests/s,50%,95%,99%\n"
        "EVALSHA,claim,10,1,2.5,1,4,9\n,Aggregated,10,1,2.5,1,4,9\n")
    assert fold_locust_csv(tmp_path / "stats.csv") == {
        "claim": {"requests": 10, "failures": 1, "rps": 2.5, "p50_ms": 1.0, "p95_ms": 4.0,
                  "p99_ms": 9.0}}


def test_socket_only_server_has_no_port_and_a_private_socket(tmp_path: Path):
    """The benchmark's server (redis-benchmark takes a password only on its command line):
    no TCP listener, no password, a socket only this user can reach."""
    from chaos.protocol.client import connect
    from chaos.runtime.valkey import valkey_server_binary

    server = ValkeyServer(valkey_server_binary(None), tmp_path / "s", tmp_path / "s.log",
                          socket_only=True)
    server.start()
    try:
        assert server.password == "" and server.url.startswith("unix://")
        assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700
        client = connect(server.url)
        assert client.ping() and client.config_get("port")["port"] == "0"
        client.close()
    finally:
        server.stop()


@pytest.mark.integration
def test_step_ramp_adds_users_per_step_and_ends_by_itself(valkey_server: ValkeyServer,
                                                          tmp_path: Path):
    shape = locustfile().parent / "step_ramp.py"
    env = dict(os.environ, ECHOMQ_VALKEY_PASSWORD=valkey_server.password)
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", f"{locustfile()},{shape}", "--headless",
         "--host", valkey_server.url, "--json-file", str(tmp_path / "locust"),
         "--queue-prefix", "lt:", "--queue-name", "ramp", "--producer-rate", "20",
         "--step-users", "1", "--step-seconds", "1", "--steps", "3", "ProducerUser"],
        env=env, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    for users in (1, 2, 3):
        assert f"Ramping to {users} users" in result.stderr
    assert "Ramping to 4 users" not in result.stderr and "Shape test stopping" in result.stderr
    # 1, then 2, then 3 users at 20 jobs/s each, 1 s per step: 120 jobs, plus at most one more
    # second of 3 users (Locust asks the shape once a second, maybe a little late).
    enqueued = history_counts(valkey_server, "ramp")["enqueue"]
    assert 20 < enqueued <= (1 + 2 + 3) * 20 + 3 * 20


def test_locust_is_started_at_its_first_enqueue_not_at_a_sweep_beside_it(
        queue, tmp_path: Path):
    """The runner starts the warmup once Locust enqueues (``LocustLoad.wait_until_enqueuing``):
    the reapers' sweeps, which go on meanwhile, are no sign of it. A real process stands for
    Locust (alive, enqueuing nothing), so only the stream decides."""
    import threading

    from chaos.errors import InfraError
    from chaos.history.schema import Enqueue, Sweep
    from chaos.load.sources import LocustLoad
    from chaos.runtime.base import Child

    load = LocustLoad.__new__(LocustLoad)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        load.child = Child("locust", process, None)  # type: ignore[arg-type]
        load.keys, load.run_dir, load.name = queue.keys, tmp_path, "locust"
        queue.record(**Sweep(worker="reaper").fields())
        sweeping = threading.Timer(0.2, lambda: queue.record(**Sweep(worker="reaper").fields()))
        sweeping.start()
        with pytest.raises(InfraError, match="enqueued nothing within 1s"):
            load.wait_until_enqueuing(queue, timeout=1.0)
        threading.Timer(0.2, lambda: queue.record(**Enqueue("j1").fields())).start()
        load.wait_until_enqueuing(queue, timeout=5.0)  # returns at the enqueue
    finally:
        process.kill()
        process.wait()
