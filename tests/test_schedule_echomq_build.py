"""The real EchoMQ's schedule moves, decoded by effect (docs/echomq.md): EchoMQ's own scripts,
driven through its public API by tests/echomq/schedule_driver.exs on a real valkey-server and
recorded live from MONITOR, decode to what EchoMQ answered and left in the store, the SHA1 fast
path equal to the effect decoder. Needs an Elixir build of EchoMQ (echo_mq 2.6.x, docs/echomq.md
"Measured here"): ``ECHOMQ_BUILD`` (default /opt/echomq-build/echo/_build/prod/lib, holding
echo_data, echo_wire and echo_mq) and ``elixir`` on PATH; without them these tests skip, saying
which is missing (CI has no such build: tests/test_schedule_decoding.py runs the example SUT's
scripts there)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from echomq_build import BUILD, require_echomq_build
from test_schedule_decoding import LEASE_MS, Capture, moves, offline

from chaos.check.checker import CheckConfig, check
from chaos.history.schema import Phase, Run
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.runtime.valkey import ValkeyServer

DRIVER = Path(__file__).resolve().parent / "echomq" / "schedule_driver.exs"


@pytest.fixture(scope="module", autouse=True)
def echomq_build() -> None:
    require_echomq_build()


def _drive(server: ValkeyServer, queue: str, steps: str, tmp_path: Path
           ) -> tuple[list[tuple[str, Any]], Any, Any, list[str], QueueClient]:
    """The driver's steps on ``queue``, recorded: (its steps and EchoMQ's answers, the
    history, the recorder's health, the raw MONITOR lines, a client of the queue)."""
    keys = QueueKeys("emq:", queue)
    client = redis_client(server.url, password=server.password, decode_responses=True)
    runner = QueueClient(client, keys)
    capture = Capture(server, keys, tmp_path)
    runner.record(**Run(scenario=steps, lease_ms=LEASE_MS, reap_interval_ms=100,
                        workers=("worker-1",), dialect="echomq").fields())
    argv = ["elixir", *(part for app in ("echo_data", "echo_wire", "echo_mq")
                        for part in ("-pa", str(BUILD / app / "ebin"))), str(DRIVER)]
    env = {**os.environ, "CHAOS_PORT": str(server.port), "CHAOS_PASSWORD": server.password,
           "CHAOS_QUEUE": queue, "CHAOS_STEPS": steps}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("done"), done.stderr[-2000:]
    runner.record(**Phase("end", drained=True).fields())
    history, health, lines = capture.stop()
    steps_seen = []
    for line in done.stdout.splitlines():
        name, _, result = line.partition(" ")
        if result and name.isidentifier():
            steps_seen.append((name, json.loads(result)))
    return steps_seen, history, health, lines, runner


def test_the_real_echomqs_schedule_moves_decode_by_effect(valkey_server: ValkeyServer,
                                                          tmp_path: Path):
    steps, history, health, lines, runner = _drive(valkey_server, "realmoves", "moves", tmp_path)
    answers = dict(steps)
    assert answers["retry"] == ["ok", "scheduled"] and answers["delay"] == "ok"
    assert answers["retry_last"] == ["ok", "dead"] and answers["retry_stale"] == ["error", "stale"]
    assert answers["promote_early"] == ["ok", 0] and answers["promote"] == ["ok", 3]
    enqueued = [value[0] for name, value in steps if name == "enqueue"]
    later = answers["enqueue_in"][0]
    retried, delayed, failed, done = enqueued
    client = runner.client
    base = runner.keys.base
    assert client.hget(base + "metrics:completed", "count") == "4"
    assert client.hget(base + "metrics:failed", "count") == "1"
    assert client.zrange(runner.keys.dead, 0, -1) == [failed]
    assert sum(client.zcard(runner.keys.base + name) for name in ("pending", "active",
                                                                   "schedule")) == 0

    assert health.undecoded_calls == 0 and health.unattributed_calls == 0, health.problems()
    assert moves(history) == [
        *(("enqueue", job_id, None, "") for job_id in (*enqueued, later)),
        ("claim", retried, 1, ""), ("retry", retried, 1, "schedule"),
        ("claim", delayed, 1, ""), ("retry", delayed, 1, "schedule"),
        ("claim", failed, 1, ""), ("complete", failed, 1, "failed"),
        ("claim", done, 1, ""), ("complete", done, 1, ""),
        ("promote", later, None, ""), ("promote", retried, None, ""),
        ("promote", delayed, None, ""),
        *((kind, job_id, attempt, "") for job_id, attempt in sorted(
            [(retried, 2), (delayed, 2), (later, 1)]) for kind in ("claim", "complete"))]
    scheduled = next(e for e in history if e.type == "enqueue" and e.job_id == later)
    assert int(scheduled.extra["due"]) == scheduled.ts + 80
    for event in history:
        if event.type == "retry":
            assert int(event.extra["due"]) == event.ts + 100 and event.worker == "worker-1"
    assert offline(lines, True, "realmoves") == offline(lines, False, "realmoves")
    verdict = check(history)
    assert verdict.passed, {name: result.examples for name, result
                            in verdict.invariants.items() if not result.ok}
    no_loss = verdict.invariants["no_loss"].figures
    assert (no_loss["completed"], no_loss["retried"], no_loss["promoted"]) == (5, 2, 3)


def test_the_real_echomqs_retry_fence_is_the_token_alone(valkey_server: ValkeyServer,
                                                         tmp_path: Path):
    steps, history, health, lines, _ = _drive(valkey_server, "realfence", "fence", tmp_path)
    answers = dict(steps)
    assert answers["reap"] == ["ok", 1] and answers["retry"] == ["ok", "scheduled"]
    assert answers["retry_stale"] == ["error", "stale"] and answers["complete"] == "ok"
    job_id = steps[0][1][0]
    assert health.undecoded_calls == 0
    assert moves(history) == [
        ("enqueue", job_id, None, ""), ("claim", job_id, 1, ""), ("reap", job_id, 1, ""),
        ("retry", job_id, 1, "schedule"), ("promote", job_id, None, ""),
        ("claim", job_id, 2, ""), ("complete", job_id, 2, "")]
    assert offline(lines, True, "realfence") == offline(lines, False, "realfence")
    verdict = check(history, CheckConfig(50, 100), final=True)
    (offence,) = verdict.invariants["exclusive_lease"].examples
    assert (offence["op"], offence["reason"]) == ("retry", "not the live lease's attempt")


def test_the_real_echomqs_stalled_sweep_dead_letters_at_max_stalled(
        valkey_server: ValkeyServer, tmp_path: Path):
    steps, history, health, lines, runner = _drive(valkey_server, "realstalled", "stalled",
                                                   tmp_path)
    job_id = steps[0][1][0]
    sweeps = [value for name, value in steps if name == "sweep"]
    assert sweeps == [["ok", {"recovered": [job_id], "dead": []}],
                      ["ok", {"recovered": [], "dead": [job_id]}]]
    assert health.undecoded_calls == 0
    assert [(e.type, e.attempt, e.extra.get("stalls")) for e in history
            if e.type in ("reap", "dead")] == [("reap", 1, "1"), ("dead", 2, "2")]
    assert offline(lines, True, "realstalled") == offline(lines, False, "realstalled")
    # EchoMQ.Stalled max_stalled 2 is the toolkit's max_stalls 1: recovered once, then dead
    assert check(history, CheckConfig(30, 100, max_stalls=1), final=True) \
        .invariants["stall_limit"].ok
