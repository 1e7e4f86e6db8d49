"""EchoMQ's schedule moves decoded by effect (docs/echomq.md): a retry hands a job back into
the schedule (or, at its last attempt, dead-letters it: the holder failed it for good), a delay
puts it off without spending an attempt, a scheduled admission adds a job that waits there, a
promote gives a due job back to pending, and EchoMQ.Stalled's sweep counts stalls and
dead-letters at max_stalled. Each is run here on a real valkey-server by the example SUT's
scripts (sut/node-echomq-real/lua, written from EchoMQ's described effects), recorded live from
MONITOR, and held to three things: the store (what the scripts answered and left), the SHA1
fast path (equal to the effect decoder on the same capture), and the verdict."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from chaos.check.checker import CheckConfig, check
from chaos.history.dialects.echomq import EchoMQ
from chaos.history.events import Event, read_history
from chaos.history.monitor import (
    MONITOR_HISTORY,
    HistoryWriter,
    MonitorRecorder,
    RecorderHealth,
    decode_lines,
    resp_command,
)
from chaos.history.schema import Phase, Run
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.runtime.valkey import ValkeyServer

LUA = Path(__file__).resolve().parent.parent / "sut" / "node-echomq-real" / "lua"
LEASE_MS = 1000
MARK = "schedule-capture-done"
TRANSITIONS = ("enqueue", "claim", "extend", "complete", "retry", "promote", "reap", "dead")


class Contract:
    """EchoMQ's flat-queue calls, each one of the example SUT's scripts, loaded once and called
    by SHA1 on a connection named ``name`` (the recorder's holder)."""

    def __init__(self, server: ValkeyServer, queue: str, name: str = "worker-1") -> None:
        self.client: redis.Redis = redis_client(server.url, password=server.password,
                                                decode_responses=True, client_name=name)
        self.keys = QueueKeys("emq:", queue)
        self.base = self.keys.base
        self.shas = {path.stem: self.client.script_load(path.read_text())
                     for path in LUA.glob("*.lua")}
        for stem, sha in self.shas.items():
            assert sha == hashlib.sha1((LUA / f"{stem}.lua").read_bytes()).hexdigest()

    def run(self, script: str, keys: list[str], argv: list[Any]) -> Any:
        return self.client.evalsha(self.shas[script], len(keys), *keys, *map(str, argv))

    def row(self, job_id: str) -> str:
        return self.keys.job(job_id)

    def enqueue(self, job_id: str) -> int:
        return int(self.run("enqueue", [self.row(job_id), self.keys.pending], [job_id, "{}"]))

    def schedule_in(self, job_id: str, ms: int) -> int:
        return int(self.run("schedule", [self.row(job_id), self.keys.schedule],
                            [job_id, "{}", "in", ms]))

    def claim(self) -> tuple[str, int]:
        job_id, _, attempts = self.run("claim", [self.keys.pending, self.keys.active],
                                       [self.keys.job_prefix, LEASE_MS])
        return job_id, int(attempts)

    def retry(self, job_id: str, token: int, delay_ms: int, max_attempts: int = 3) -> str:
        return str(self.run("retry", [self.keys.active, self.keys.schedule, self.keys.dead,
                                      self.row(job_id)],
                            [job_id, token, delay_ms, max_attempts, "boom", self.base]))

    def delay_in(self, job_id: str, token: int, ms: int) -> int:
        return int(self.run("delay", [self.row(job_id), self.keys.active, self.keys.schedule],
                            [job_id, token, "in", ms]))

    def complete(self, job_id: str, token: int) -> int:
        return int(self.run("complete", [self.keys.active, self.row(job_id)],
                            [job_id, token, self.base]))

    def promote(self) -> int:
        return int(self.run("promote", [self.keys.schedule, self.keys.pending],
                            [self.base, 100]))

    def reap(self) -> int:
        return int(self.run("reap", [self.keys.active, self.keys.pending], [self.base]))

    def sweep_stalled(self, max_stalled: int) -> list[list[str]]:
        reply: list[list[str]] = self.run(
            "sweep_stalled", [self.keys.active, self.keys.pending, self.keys.dead],
            [self.base, max_stalled, 100])
        return reply

    def metric(self, name: str) -> int:
        return int(self.client.hget(self.base + f"metrics:{name}", "count") or 0)


class Capture:
    """A live recorder of the queue (the history as a run has it) and the raw MONITOR lines
    beside it (to decode again offline, fast path on and off)."""

    def __init__(self, server: ValkeyServer, keys: QueueKeys, directory: Path) -> None:
        self.keys, self.directory = keys, directory
        self.recorder = MonitorRecorder(EchoMQ(keys.prefix, keys.queue, LEASE_MS),
                                        directory / MONITOR_HISTORY, "127.0.0.1", server.port,
                                        server.password)
        self.recorder.start()
        self.feed = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        self.feed.sendall(resp_command("AUTH", server.password) + resp_command("MONITOR"))
        self.reader = self.feed.makefile("rb")
        assert [self.reader.readline() for _ in range(2)] == [b"+OK\r\n"] * 2
        self.marker = redis_client(server.url, password=server.password)

    def stop(self) -> tuple[list[Event], RecorderHealth, list[str]]:
        self.marker.echo(MARK)
        lines: list[str] = []
        while not lines or not lines[-1].endswith(f'"ECHO" "{MARK}"'):
            lines.append(self.reader.readline().decode("utf-8").rstrip("\r\n"))
        self.feed.close()
        self.marker.close()
        health = self.recorder.stop()
        return read_history(self.directory / MONITOR_HISTORY), health, lines


def offline(lines: list[str], fast_path: bool, queue: str = "sched"
            ) -> tuple[list[tuple[Any, ...]], RecorderHealth]:
    """The capture decoded again: each transition's type, job, attempt, deadline and own fields."""
    handle = io.StringIO()
    health = RecorderHealth("echomq")
    decode_lines(lines, HistoryWriter(EchoMQ("emq:", queue, LEASE_MS, fast_path=fast_path),
                                      handle, health))
    events = [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()]
    return [(e.type, e.job_id, e.attempt, e.deadline, e.ts, tuple(sorted(e.extra.items())))
            for e in events if e.type in TRANSITIONS], health


@pytest.fixture
def contract(valkey_server: ValkeyServer) -> Iterator[Contract]:
    driver = Contract(valkey_server, "sched")
    driver.client.delete(*(driver.base + name for name in (
        "pending", "active", "schedule", "dead", "metrics:completed", "metrics:failed",
        "events")))
    yield driver
    driver.client.close()


def moves(events: list[Event]) -> list[tuple[str, str | None, int | None, str]]:
    return [(e.type, e.job_id, e.attempt, e.extra.get("to") or e.extra.get("target") or "")
            for e in events if e.type in TRANSITIONS]


def test_retry_delay_schedule_and_promote_decode_by_effect(
        valkey_server: ValkeyServer, contract: Contract, tmp_path: Path):
    """Every schedule move once, on a real server: what the scripts answered and left in the
    store, the history the live recorder decoded, the fast path equal to the effect decoder,
    and a pass (each job completed or failed once; two handed back, three promoted)."""
    keys = contract.keys
    capture = Capture(valkey_server, keys, tmp_path)
    runner = QueueClient(contract.client, keys)
    runner.record(**Run(scenario="schedule", lease_ms=LEASE_MS, reap_interval_ms=100,
                        workers=("worker-1",), dialect="echomq").fields())
    retried, delayed, failed, done, later = (f"JOB000000000{n}" for n in range(1, 6))
    for job_id in (retried, delayed, failed, done):
        assert contract.enqueue(job_id) == 1
    assert contract.schedule_in(later, 80) == 1  # a scheduled admission, due first
    assert contract.claim() == (retried, 1)
    assert contract.retry(retried, 1, 100) == "scheduled"
    assert contract.claim() == (delayed, 1)
    assert contract.delay_in(delayed, 1, 100) == 1
    assert contract.claim() == (failed, 1)
    assert contract.retry(failed, 1, 100, max_attempts=1) == "dead"  # its last attempt
    assert contract.claim() == (done, 1)
    with pytest.raises(redis.ResponseError, match="EMQSTALE retry token mismatch"):
        contract.retry(done, 7, 100)  # a stale token: refused, nothing written
    assert contract.complete(done, 1) == 1
    assert contract.client.zcard(keys.schedule) == 3 and contract.promote() == 0  # not yet due
    time.sleep(0.15)
    assert contract.promote() == 3
    claimed = sorted(contract.claim() for _ in range(3))
    # a retry spends the attempt it failed (the next claim raises it); a delay spends none
    # more than a claim does: both were claimed once before
    assert claimed == [(retried, 2), (delayed, 2), (later, 1)]
    for job_id, token in claimed:
        assert contract.complete(job_id, token) == 1
    runner.record(**Phase("end", drained=True).fields())
    history, health, lines = capture.stop()

    # The store: four completed, one failed for good (dead, its row kept), nothing waiting.
    assert contract.metric("completed") == 4 and contract.metric("failed") == 1
    assert contract.client.zrange(keys.dead, 0, -1) == [failed]
    assert contract.client.hget(contract.row(failed), "state") == "dead"
    assert sum(contract.client.zcard(key) for key in (keys.pending, keys.active,
                                                      keys.schedule)) == 0
    # The history the recorder decoded, holder the connection's name.
    assert health.undecoded_calls == 0 and health.trustworthy, health.problems()
    assert moves(history) == [
        ("enqueue", retried, None, ""), ("enqueue", delayed, None, ""),
        ("enqueue", failed, None, ""), ("enqueue", done, None, ""), ("enqueue", later, None, ""),
        ("claim", retried, 1, ""), ("retry", retried, 1, "schedule"),
        ("claim", delayed, 1, ""), ("retry", delayed, 1, "schedule"),
        ("claim", failed, 1, ""), ("complete", failed, 1, "failed"),
        ("claim", done, 1, ""), ("complete", done, 1, ""),
        ("promote", later, None, ""), ("promote", retried, None, ""),
        ("promote", delayed, None, ""),
        ("claim", retried, 2, ""), ("claim", delayed, 2, ""), ("claim", later, 1, ""),
        ("complete", retried, 2, ""), ("complete", delayed, 2, ""), ("complete", later, 1, "")]
    by_type = {(e.type, e.job_id): e for e in history}
    later_due = int(by_type["enqueue", later].extra["due"])
    assert later_due == by_type["enqueue", later].ts + 80  # due = the script's clock + 80
    for job_id in (retried, delayed):  # handed back at its call's clock, due 100 ms on
        retry = by_type["retry", job_id]
        assert int(retry.extra["due"]) == retry.ts + 100 and retry.worker == "worker-1"
        assert int(by_type["promote", job_id].extra["due"]) == int(retry.extra["due"])
    assert int(by_type["promote", later].extra["due"]) == later_due
    assert all(by_type["promote", job_id].ts >= int(by_type["promote", job_id].extra["due"])
               for job_id in (retried, delayed, later))
    # The fast path (our own scripts by SHA1) and the effect decoder read the capture alike.
    fast, fast_health = offline(lines, fast_path=True)
    by_effect, effect_health = offline(lines, fast_path=False)
    assert fast == by_effect and len(fast) == len(moves(history))
    assert fast_health.undecoded_calls == effect_health.undecoded_calls == 0
    # The verdict: each job finished once, two handed back, three given back by the schedule.
    verdict = check(history)
    assert verdict.passed, {name: result.examples for name, result
                            in verdict.invariants.items() if not result.ok}
    no_loss = verdict.invariants["no_loss"].figures
    assert (no_loss["enqueued"], no_loss["completed"], no_loss["retried"],
            no_loss["promoted"]) == (5, 5, 2, 3)


def test_echomqs_retry_fence_is_the_token_alone(valkey_server: ValkeyServer,
                                                contract: Contract, tmp_path: Path):
    """EchoMQ fences a retry by the row's attempts, which only a claim changes: the old
    holder's retry after a re-claim writes nothing (no event, no offence), but after a reap and
    before anyone re-claims it is accepted, as its late complete is (docs/echomq.md): a call
    outside the live lease, which exclusive_lease fails."""
    keys = contract.keys
    capture = Capture(valkey_server, keys, tmp_path)
    runner = QueueClient(contract.client, keys)
    runner.record(**Run(scenario="fence", lease_ms=LEASE_MS, reap_interval_ms=100,
                        workers=("worker-1",), dialect="echomq").fields())
    job_id = "JOB0000000009"
    assert contract.enqueue(job_id) == 1
    assert contract.claim() == (job_id, 1)
    contract.client.zadd(keys.active, {job_id: 0})  # its lease lapsed long ago (a test's shortcut:
    # an unscripted write, which the recorder counts and decodes to nothing)
    assert contract.reap() == 1
    assert contract.retry(job_id, 1, 50) == "scheduled"  # the old holder, after the reap
    time.sleep(0.06)
    assert contract.promote() == 1
    assert contract.claim() == (job_id, 2)
    with pytest.raises(redis.ResponseError, match="EMQSTALE"):
        contract.retry(job_id, 1, 50)  # the old holder again, after the re-claim: refused
    assert contract.complete(job_id, 2) == 1
    runner.record(**Phase("end", drained=True).fields())
    history, health, lines = capture.stop()

    assert health.undecoded_calls == 0 and health.unscripted_writes == 1
    assert moves(history) == [
        ("enqueue", job_id, None, ""), ("claim", job_id, 1, ""), ("reap", job_id, 1, ""),
        ("retry", job_id, 1, "schedule"), ("promote", job_id, None, ""),
        ("claim", job_id, 2, ""), ("complete", job_id, 2, "")]
    assert offline(lines, fast_path=True)[0] == offline(lines, fast_path=False)[0]
    verdict = check(history, CheckConfig(LEASE_MS, 100), final=True)
    (offence,) = verdict.invariants["exclusive_lease"].examples
    assert (offence["op"], offence["attempt"], offence["reason"]) == (
        "retry", 1, "not the live lease's attempt")
    assert verdict.invariants["no_loss"].ok and verdict.invariants["attempts_monotonic"].ok


def test_the_stalled_sweep_recovers_then_dead_letters_at_max_stalled(
        valkey_server: ValkeyServer, contract: Contract, tmp_path: Path):
    """EchoMQ.Stalled's sweep with max_stalled = max_stalls + 1 (docs/echomq.md's mapping): a
    job is recovered max_stalls times (a reap), then dead-lettered (a dead, its stall counted on
    the row): stall_limit holds with max_stalls 1, and fails with any other limit."""
    keys = contract.keys
    capture = Capture(valkey_server, keys, tmp_path)
    runner = QueueClient(contract.client, keys)
    runner.record(**Run(scenario="stalls", lease_ms=LEASE_MS, reap_interval_ms=100,
                        workers=("worker-1",), dialect="echomq", max_stalls=1).fields())
    job_id = "JOB000000000S"
    assert contract.enqueue(job_id) == 1
    recovered: list[list[list[str]]] = []
    for attempt in (1, 2):
        assert contract.claim() == (job_id, attempt)
        contract.client.zadd(keys.active, {job_id: 0})  # lapsed (a test's shortcut)
        recovered.append(contract.sweep_stalled(max_stalled=1 + 1))
    runner.record(**Phase("end", drained=True).fields())
    history, health, lines = capture.stop()

    assert recovered == [[[job_id], []], [[], [job_id]]]
    assert contract.client.zrange(keys.dead, 0, -1) == [job_id]
    assert contract.client.hget(contract.row(job_id), "stalled") == "2"
    assert health.undecoded_calls == 0
    moves = [(e.type, e.attempt, e.extra.get("stalls")) for e in history
             if e.type in ("reap", "dead")]
    assert moves == [("reap", 1, "1"), ("dead", 2, "2")]
    assert offline(lines, fast_path=True)[0] == offline(lines, fast_path=False)[0]
    assert check(history, CheckConfig(LEASE_MS, 100, max_stalls=1), final=True) \
        .invariants["stall_limit"].ok
    assert not check(history, CheckConfig(LEASE_MS, 100, max_stalls=2), final=True) \
        .invariants["stall_limit"].ok
