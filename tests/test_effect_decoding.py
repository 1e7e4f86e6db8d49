"""Decode by effect (docs/design.md §5): a call is what it does to the queue's keys, not the
SHA1 or argument order of a script we know. Our own scripts decoded by effect give the history
the SHA1 table gives them, and scripts changed by one byte (no SHA1 matches) decode and judge
exactly as our own; the holder is then the calling connection."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import redis
from test_evidence import _OneByteOff
from test_monitor import FIXTURE, live_recorder

from chaos.files import write_json_atomic
from chaos.history.dialects.echomq import EchoMQ
from chaos.history.events import Event, read_history
from chaos.history.monitor import (
    HEALTH_FILE,
    MONITOR_HISTORY,
    HistoryWriter,
    RecorderHealth,
    decode_lines,
)
from chaos.history.schema import Phase, Run
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.run.evaluate import evaluate
from chaos.run.sources import compare_histories
from chaos.runtime.valkey import ValkeyServer

ACCEPTED = ("enqueue", "claim", "extend", "complete", "reap", "dead", "sweep")


def _decoded(dialect: EchoMQ) -> tuple[list[Event], RecorderHealth]:
    handle = io.StringIO()
    health = RecorderHealth("echomq")
    decode_lines(FIXTURE["monitor"], HistoryWriter(dialect, handle, health,
                                                   resolve=lambda address: "worker-1"))
    return [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()], health


def _transitions(events: list[Event]) -> list[tuple[object, ...]]:
    return [(e.type, e.job_id, e.attempt, e.deadline, e.lease_ms, e.ts,
             e.worker if e.type == "sweep" else None) for e in events if e.type in ACCEPTED]


def test_our_scripts_decoded_by_effect_give_what_their_sha1_gives():
    """The fast path (a known SHA1 gives the arguments' meaning) is held equal to the effect
    decoder on every accepted transition of a captured run: type, job, attempt, deadline, lease
    and server time, and on every sweep, the reaper (the calling connection) and its time.
    (A refused extend or complete writes nothing: by effect it is no transition, so only the
    fast path sees those.)"""
    lease_ms = next(int(r["lease_ms"]) for r in FIXTURE["stream"] if r["type"] == "claim")
    fast, fast_health = _decoded(EchoMQ("emq:", "jobs", lease_ms=lease_ms))
    by_effect, health = _decoded(EchoMQ("emq:", "jobs", lease_ms=lease_ms, fast_path=False))
    assert _transitions(by_effect) == _transitions(fast)
    assert {kind for kind, *_ in _transitions(by_effect)} == set(ACCEPTED)
    assert health.undecoded_calls == 0 and health.empty_claims == fast_health.empty_claims
    runner = [e.type for e in by_effect if e.type not in ACCEPTED]
    assert runner == [e.type for e in fast if e.type not in (*ACCEPTED, "extend_rejected",
                                                              "complete_rejected")]


def test_scripts_changed_by_one_byte_decode_and_judge_as_our_own(
        valkey_server: ValkeyServer, tmp_path: Path):
    """A worker whose scripts differ from ours by their last newline (it was FAIL "244 lost"
    when only SHA1s were known): its claims, renewals, completes and the reaper's sweeps
    decode by effect to the very transitions its scripts wrote to the stream, the holder taken
    from the connection's name, and the run passes."""
    keys = QueueKeys("effect:", "q")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = live_recorder(valkey_server, keys, run_dir)
    raw_client: redis.Redis = redis_client(valkey_server.url, password=valkey_server.password,
                                           decode_responses=True, client_name="w1")
    sound, off = QueueClient(raw_client, keys), _OneByteOff(raw_client, keys)
    off.record(**Run(scenario="effect", lease_ms=200, reap_interval_ms=100).fields())
    for number in range(6):
        off.enqueue(f"j{number}", "x")
    held = [off.claim(200, "w1") for _ in range(6)]
    assert all(held)
    for claimed in held[:3]:
        assert claimed is not None and off.extend(claimed.job_id, claimed.attempt, 200, "w1")
        assert off.complete(claimed.job_id, claimed.attempt, "w1")
    time.sleep(0.25)  # the other three lapse
    assert off.reap(100, sweeper="w1") == 3
    assert off.reap(100, sweeper="w1") == 0  # a sweep that finds nothing is one too
    for _ in range(3):
        claimed = off.claim(200, "w1")
        assert claimed is not None and off.complete(claimed.job_id, claimed.attempt, "w1")
    off.record(**Phase("end", drained=True).fields())
    health = recorder.stop()
    assert health.undecoded_calls == 0 and health.trustworthy, health
    decoded = read_history(run_dir / MONITOR_HISTORY)
    stream = [Event.from_record({"seq": i, **f}) for i, f in raw_client.xrange(keys.events)
              if f["type"] in ACCEPTED or f["type"] in ("run", "phase")]
    comparison = compare_histories(stream, decoded)
    assert comparison["agree"], comparison
    assert comparison["counts"]["reap"] == [3, 3] and comparison["counts"]["extend"] == [3, 3]
    assert comparison["counts"]["sweep"] == [2, 2]
    assert {e.worker for e in decoded if e.type == "claim"} == {"w1"}
    assert sound.claim(200, "w1") is None  # everything settled
    write_json_atomic(run_dir / HEALTH_FILE, health.as_dict())
    (run_dir / "scenario.json").write_text(json.dumps({"history": {"source": "monitor"}}))
    evaluation = evaluate(run_dir)
    assert evaluation.word == "pass", evaluation.report()["invariants"]


def _monitor_lines(calls: list[tuple[int, list[str], list[list[str]]]]) -> list[str]:
    """MONITOR lines for script calls: (server ms, the call line, the commands it ran)."""
    def quoted(args: list[str]) -> str:
        return " ".join('"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
                        for arg in args)

    lines = []
    for ms, call, commands in calls:
        lines.append(f"+{ms // 1000}.{ms % 1000:03d}000 [0 127.0.0.1:5000] {quoted(call)}")
        lines += [f"+{ms // 1000}.{ms % 1000:03d}001 [0 lua] {quoted(command)}"
                  for command in commands]
    return lines


def test_calls_shaped_like_echomqs_own_decode_and_its_fencing_gap_is_caught():
    """EchoMQ's scripts as MONITOR shows them (docs/echomq.md): pending scored 0, no worker
    argument, a complete that deletes the row and counts a metric, a reap that leaves the
    attempts alone. The holder's complete landing after its lease was reaped and before anyone
    re-claimed it is accepted by EchoMQ (the token did not change): a call from a lease no
    longer live, which exclusive_lease fails."""
    from chaos.check.checker import CheckConfig, check

    q = "emq:{jobs}:"
    job, row = "JOB0SaA6SUubU8", "emq:{jobs}:job:JOB0SaA6SUubU8"
    sha = ["EVALSHA", "f" * 40]
    t0 = 1_796_319_520_000
    calls = [
        (t0, [*sha, "2", row, q + "pending", job, "x"],
         [["EXISTS", row], ["HSET", row, "state", "pending", "attempts", "0", "payload", "x"],
          ["ZADD", q + "pending", "0", job]]),
        (t0 + 10, [*sha, "2", q + "pending", q + "active", q + "job:", "1000"],
         [["ZPOPMIN", q + "pending"], ["HINCRBY", row, "attempts", "1"],
          ["HSET", row, "state", "active"], ["TIME"], ["ZADD", q + "active", str(t0 + 1010), job],
          ["HGET", row, "payload"]]),
        (t0 + 500, [*sha, "1", q + "active", q, "1000", job, "1"],
         [["TIME"], ["HGET", row, "attempts"], ["ZADD", q + "active", str(t0 + 1500), job]]),
        (t0 + 1600, [*sha, "2", q + "active", q + "pending", q],
         [["TIME"], ["ZRANGEBYSCORE", q + "active", "-inf", str(t0 + 1600), "LIMIT", "0", "100"],
          ["ZREM", q + "active", job], ["HGET", row, "group"], ["ZADD", q + "pending", "0", job],
          ["HSET", row, "state", "pending"]]),
        (t0 + 1700, [*sha, "2", q + "active", row, job, "1", q],
         [["HGET", row, "attempts"], ["HGET", row, "group"], ["ZREM", q + "active", job],
          ["ZREM", q + "pending", job], ["DEL", row],
          ["HINCRBY", q + "metrics:completed", "count", "1"]]),
    ]
    handle = io.StringIO()
    health = RecorderHealth("echomq")
    decode_lines(_monitor_lines(calls), HistoryWriter(EchoMQ("emq:", "jobs", lease_ms=1000),
                                                      handle, health))
    events = [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()]
    assert health.undecoded_calls == 0
    assert [(e.type, e.attempt, e.deadline) for e in events] == [
        ("enqueue", None, None), ("claim", 1, t0 + 1010), ("extend", 1, t0 + 1500),
        ("sweep", None, None), ("reap", 1, t0 + 1500), ("complete", 1, None)]
    verdict = check(events, CheckConfig(1000, 250), final=True)
    assert verdict.invariants["exclusive_lease"].violations == 1
    assert verdict.invariants["no_double_completion"].ok and verdict.invariants["no_loss"].ok


def test_a_job_named_like_a_zadd_option_is_a_member_not_an_option():
    """``ZADD active <deadline> xx``: no options, so ``xx`` is the job (it was read as XX)."""
    q, row = "emq:{jobs}:", "emq:{jobs}:job:xx"
    t0 = 1_796_319_520_000
    calls = [
        (t0, ["EVALSHA", "f" * 40, "2", row, q + "pending", "xx", "x"],
         [["HSET", row, "state", "pending", "attempts", "0", "payload", "x"],
          ["ZADD", q + "pending", "0", "xx"]]),
        (t0 + 10, ["EVALSHA", "f" * 40, "2", q + "pending", q + "active", q + "job:", "1000"],
         [["ZPOPMIN", q + "pending"], ["HINCRBY", row, "attempts", "1"], ["TIME"],
          ["ZADD", q + "active", str(t0 + 1010), "xx"]]),
    ]
    handle = io.StringIO()
    health = RecorderHealth("echomq")
    decode_lines(_monitor_lines(calls), HistoryWriter(EchoMQ("emq:", "jobs", lease_ms=1000),
                                                      handle, health))
    events = [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()]
    assert [(e.type, e.job_id) for e in events] == [("enqueue", "xx"), ("claim", "xx")]
    assert health.undecoded_calls == 0


def test_a_reap_that_finds_nothing_is_a_sweep_of_its_connection_by_effect():
    """EchoMQ's reap (and its stalled sweep) as MONITOR shows them when nothing lapsed: TIME and
    a scan of the active set, no write. By effect that is a sweep, the reaper the connection
    that made it; a scan of another set (its promote, over the schedule) is none, and neither
    is a lookup of the active set that does not start at -inf. A sweep from a connection the
    recorder cannot resolve names no sweeper (the checker blinds the gaps it falls in) and,
    naming no job, blinds no job's holder."""
    q = "emq:{jobs}:"
    sha = ["EVALSHA", "e" * 40]
    t0 = 1_796_319_520_000
    calls = [
        (t0, [*sha, "2", q + "active", q + "pending", q],
         [["TIME"], ["ZRANGEBYSCORE", q + "active", "-inf", str(t0), "LIMIT", "0", "100"]]),
        (t0 + 5, [*sha, "3", q + "active", q + "pending", q + "dead", q, "1", "100"],
         [["TIME"], ["zrangebyscore", q + "active", "-INF", str(t0 + 5), "LIMIT", "0", "100"]]),
        (t0 + 10, [*sha, "2", q + "schedule", q + "pending", q, "100"],
         [["TIME"], ["ZRANGEBYSCORE", q + "schedule", "-inf", str(t0 + 10), "LIMIT", "0",
                     "100"]]),
        (t0 + 20, [*sha, "1", q + "active"],
         [["ZRANGEBYSCORE", q + "active", f"({t0 + 20}", "+inf", "LIMIT", "0", "10"]]),
        (t0 + 30, [*sha, "1", q + "active"],
         [["TIME"], ["ZRANGE", q + "active", "-inf", str(t0 + 30), "BYSCORE"]]),
    ]
    for connection, sweeper in (("w1-reaper", "w1-reaper"), (None, "")):
        handle = io.StringIO()
        health = RecorderHealth("echomq")
        decode_lines(_monitor_lines(calls), HistoryWriter(
            EchoMQ("emq:", "jobs", lease_ms=1000), handle, health,
            resolve=lambda address, connection=connection: connection))
        events = [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()]
        assert [(e.type, e.worker or "", e.ts) for e in events] == [
            ("sweep", sweeper, t0), ("sweep", sweeper, t0 + 5), ("sweep", sweeper, t0 + 30)]
        assert health.undecoded_calls == 0 and health.unattributed_calls == (
            0 if connection else 3)


def test_our_reap_scripts_sweep_as_their_connection_whatever_name_they_pass(
        valkey_server: ValkeyServer, tmp_path: Path):
    """The recorder takes a sweep's reaper from the connection that made it, by SHA1 and by
    effect alike: a reaper passing another name to reap.lua records that name in the stream,
    and the MONITOR history says whose connection swept."""
    keys = QueueKeys("sweeps:", "q")
    recorder = live_recorder(valkey_server, keys, tmp_path)
    client: redis.Redis = redis_client(valkey_server.url, password=valkey_server.password,
                                       decode_responses=True, client_name="reaper")
    queue = QueueClient(client, keys)
    assert queue.reap(100, sweeper="someone-else") == 0
    assert queue.reap(100, sweeper="reaper") == 0
    recorder.stop()
    stream = [fields["worker"] for _, fields in client.xrange(keys.events)
              if fields["type"] == "sweep"]
    assert stream == ["someone-else", "reaper"]
    decoded = [e.worker for e in read_history(tmp_path / MONITOR_HISTORY) if e.type == "sweep"]
    assert decoded == ["reaper", "reaper"]
