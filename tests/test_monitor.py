"""The MONITOR history source (docs/design.md §5): the echomq decoder on real MONITOR lines
captured from the bundled valkey-server (chaos/queues/echomq/conformance.json, with the events
stream the scripts wrote in the same session), the recorder live against a real server, and one
short run recording both sources at once. Nothing here is a fake: the fixture is the server's own
output, and the live tests talk to a real valkey-server and real worker processes."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
import redis
from test_scenarios_e2e import ROOT, run_cli

from chaos.history.dialects import make_dialect
from chaos.history.dialects.echomq import SCRIPTS
from chaos.history.events import Event, read_history
from chaos.history.monitor import (
    HEALTH_FILE,
    MONITOR_HISTORY,
    HistoryWriter,
    MonitorRecorder,
    RecorderHealth,
    decode_lines,
    parse_line,
)
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.run.evaluate import evaluate
from chaos.run.sources import compare_histories
from chaos.runtime.valkey import ValkeyServer

SHA_OF = {name: sha for sha, name in SCRIPTS.items()}
FIXTURE = json.loads((ROOT / "chaos" / "queues" / "echomq" / "conformance.json").read_text())


def _decode(lines: list[str]) -> tuple[list[Event], RecorderHealth]:
    """Decoded as a recorder would, every call's connection resolved to the fixture's one
    (``worker-1``, its CLIENT SETNAME: the reaper's sweeps are that connection's)."""
    handle = io.StringIO()
    health = RecorderHealth("echomq")
    decode_lines(lines, HistoryWriter(make_dialect("echomq", "emq:", "jobs"), handle, health,
                                      resolve=lambda address: "worker-1"))
    events = [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()]
    return events, health


def test_parse_line_reads_escaped_arguments():
    (line,) = [line for line in FIXTURE["monitor"] if '"HSET" "emq:{jobs}:job:j1" "payload"'
               in line]
    stamp, client, args = parse_line(line) or (0, "", [])
    assert client == "lua" and stamp > 1_000_000_000_000_000
    assert args[:4] == ["HSET", "emq:{jobs}:job:j1", "payload", 'say "hi"\n\té']
    assert parse_line("+OK") is None


def test_decoder_on_captured_lines_gives_the_scripts_history():
    """Every transition the scripts wrote to the stream, decoded from what the scripts did (not
    from their XADD): same order, same fields, the same server clock within 1 ms."""
    stream = [Event.from_record(record) for record in FIXTURE["stream"]]
    decoded, health = _decode(FIXTURE["monitor"])
    comparison = compare_histories(stream, decoded)
    assert comparison["agree"], comparison
    kinds = [event.type for event in decoded]
    assert {"enqueue", "claim", "extend", "extend_rejected", "complete", "complete_rejected",
            "reap", "dead"} <= set(kinds)
    # Runner events (record.lua) come through as written, in the feed's order.
    assert kinds[0] == "phase" and kinds[-1] == "phase"
    assert [event.seq for event in decoded] == sorted(
        (event.seq for event in decoded), key=lambda seq: tuple(map(int, seq.split("-"))))
    poison = [e for e in decoded if e.type == "enqueue" and e.extra.get("kind") == "poison"]
    assert len(poison) == 1
    assert health.empty_claims == 1 and health.undecoded_calls == 0 and not health.unreadable_lines


def test_a_stall_inside_a_script_does_not_make_its_events_late():
    """TIME inside a script answers the call's start, stamped on the call's line: the same
    captured lines with the server stalled 5 ms inside a complete and inside a claim (every
    line of those scripts stamped 5 ms later) decode to the same history."""
    lines = list(FIXTURE["monitor"])
    complete, claim = (SHA_OF[name] for name in ("complete", "claim"))
    for sha in (complete, claim):
        call = next(i for i, line in enumerate(lines) if f'"EVALSHA" "{sha}"' in line)
        inner = call + 1
        while inner < len(lines) and "[0 lua]" in lines[inner]:
            stamp, rest = lines[inner][1:].split(" ", 1)
            lines[inner] = f"+{float(stamp) + 0.005:.6f} {rest}"
            inner += 1
        assert inner > call + 1
    stream = [Event.from_record(record) for record in FIXTURE["stream"]]
    decoded, _ = _decode(lines)
    comparison = compare_histories(stream, decoded)
    assert comparison["agree"], comparison


def test_a_dropped_line_or_an_unknown_script_is_visible():
    lines = FIXTURE["monitor"]
    # A lost line of a script (its ZADD into active): the claim is no longer decodable.
    claim_zadd = next(i for i, line in enumerate(lines)
                      if '"ZADD" "emq:{jobs}:active"' in line)
    _, health = _decode(lines[:claim_zadd] + lines[claim_zadd + 1:])
    assert health.undecoded_calls == 1
    # A script the dialect does not know, writing the queue's keys: decoded by its effect (a
    # runner event, XADD to the stream), unless the effect makes no transition it knows (a
    # job's state set to one no protocol of its has).
    call = next(line for line in lines if '"EVALSHA"' in line)
    sha = parse_line(call)[2][1]  # type: ignore[index]
    assert sha in SCRIPTS
    unknown = call.replace(sha, "0" * 40)
    events, health = _decode([unknown, *lines[lines.index(call) + 1:][:2]])
    assert health.undecoded_calls == 0 and [e.type for e in events] == ["phase"]
    stamp = call.split(" ", 1)[0]
    odd = f'{stamp} [0 lua] "HSET" "emq:{{jobs}}:job:j1" "state" "finished"'
    events, health = _decode([unknown, odd])
    assert health.undecoded_calls == 1 and not health.trustworthy
    assert [(e.type, e.job_id) for e in events] == [("blind", "j1")]


def live_recorder(server: ValkeyServer, keys: QueueKeys, directory: Path) -> MonitorRecorder:
    """A started recorder of ``keys``' queue on ``server``, writing into ``directory``."""
    recorder = MonitorRecorder(make_dialect("echomq", keys.prefix, keys.queue),
                               directory / MONITOR_HISTORY, "127.0.0.1", server.port,
                               server.password)
    recorder.start()
    return recorder


def test_recorder_live_matches_the_stream_and_names_the_caller(valkey_server: ValkeyServer,
                                                               raw_client: redis.Redis,
                                                               tmp_path: Path):
    keys = QueueKeys("live:", "q")
    recorder = live_recorder(valkey_server, keys, tmp_path)
    raw_client.client_setname("worker-7")
    queue = QueueClient(raw_client, keys)
    for number in range(20):
        queue.enqueue(f"j{number}", "x")
    for _ in range(20):
        claimed = queue.claim(30, "worker-7")
        assert claimed is not None
        if int(claimed.job_id[1:]) % 2:
            queue.complete(claimed.job_id, claimed.attempt, "worker-7")
    time.sleep(0.05)
    queue.reap(100, sweeper="worker-7")
    queue.reap(100, sweeper="worker-7")  # nothing left to take: a sweep all the same
    health = recorder.stop()
    assert health.trustworthy and health.caught_up, health
    decoded = read_history(tmp_path / MONITOR_HISTORY)
    stream = [Event.from_record({"seq": i, **f})
              for i, f in raw_client.xrange(keys.events)]  # type: ignore[union-attr]
    comparison = compare_histories(stream, decoded)
    assert comparison["agree"], comparison
    assert comparison["counts"]["reap"] == [10, 10]
    assert comparison["counts"]["sweep"] == [2, 2]
    assert {event.extra.get("conn") for event in decoded} == {"worker-7"}
    assert [event.worker for event in decoded if event.type == "sweep"] == ["worker-7"] * 2


def test_a_claim_many_call_decodes_to_one_claim_event_per_job(valkey_server: ValkeyServer,
                                                             raw_client: redis.Redis,
                                                             tmp_path: Path):
    """claim_many (the reference worker's claim) seen through MONITOR: the same claim events,
    field for field, as the script wrote to the stream; an empty call is an empty claim."""
    keys = QueueKeys("many:", "q")
    recorder = live_recorder(valkey_server, keys, tmp_path)
    queue = QueueClient(raw_client, keys)
    for number in range(7):
        queue.enqueue(f"j{number}", "x")
    batches = [queue.claim_many(3, 5000, "worker-1") for _ in range(4)]
    assert [len(batch) for batch in batches] == [3, 3, 1, 0]
    for job in batches[0]:
        queue.complete(job.job_id, job.attempt, "worker-1")
    health = recorder.stop()
    assert health.trustworthy and health.caught_up, health
    assert health.empty_claims == 1, health
    decoded = read_history(tmp_path / MONITOR_HISTORY)
    stream = [Event.from_record({"seq": i, **f})
              for i, f in raw_client.xrange(keys.events)]  # type: ignore[union-attr]
    comparison = compare_histories(stream, decoded)
    assert comparison["agree"], comparison
    assert comparison["counts"]["claim"] == [7, 7]
    claims = [(e.job_id, e.attempt, e.deadline, e.ts) for e in decoded if e.type == "claim"]
    assert claims == [(e.job_id, e.attempt, e.deadline, e.ts) for e in stream
                      if e.type == "claim"]


@pytest.mark.integration
def test_one_run_records_both_sources_and_they_agree(tmp_path: Path):
    """kill-worker, a few seconds of phases, recorded both ways: the same verdicts, the same
    events; then the same run directory with a recorder that lost its feed is never a pass."""
    out = tmp_path / "run"
    result = run_cli("run", str(ROOT / "scenarios" / "kill-worker.toml"), "--out", str(out),
                     "--set", 'history.source="both"', "--set", "phases.warmup_ms=500",
                     "--set", "phases.chaos_ms=2500", "--set", "phases.heal_ms=300")
    report = json.loads((out / "report.json").read_text())
    assert result.returncode == 0, result.stderr[-3000:]
    recorder = report["history_recorder"]
    assert report["verdict"] == "pass" and recorder["problems"] == []
    assert recorder["agreement"]["agree"], recorder["agreement"]
    assert recorder["agreement"]["events"]["counts"]["reap"][1] >= 1
    assert recorder["health"]["caught_up"] and recorder["health"]["lines_read"] > 0
    # The same evidence from a recorder that lost its connection: not a pass.
    health = json.loads((out / HEALTH_FILE).read_text())
    (out / HEALTH_FILE).write_text(json.dumps({**health, "connection_lost": "reset"}))
    assert evaluate(out, "finished").word != "pass"
    # A monitor history missing one transition: the sources disagree, not a pass.
    (out / HEALTH_FILE).write_text(json.dumps(health))
    lines = (out / MONITOR_HISTORY).read_text().splitlines(keepends=True)
    reap = next(i for i, line in enumerate(lines) if '"type":"reap"' in line)
    (out / MONITOR_HISTORY).write_text("".join(lines[:reap] + lines[reap + 1:]))
    checked = evaluate(out, "finished")
    assert checked.word != "pass"
    assert checked.recorder is not None and not checked.recorder["agreement"]["agree"]


def test_a_connection_listed_before_it_logged_in_is_named_once_it_has(
        valkey_server: ValkeyServer, raw_client: redis.Redis, tmp_path: Path):
    """CLIENT LIST shows a connection from its accept on, as the default user until its AUTH:
    listed in that instant (the recorder lists every client whenever it meets a new address),
    it was known by its client id for good, and every call it made after was unattributed
    (seen: a Node worker's claims, the run's start-up waiting for it until its timeout). An
    address known only by its id is listed again: its calls are its member's."""
    import socket

    keys = QueueKeys("late-login:", "q")
    raw_client.acl_setuser("worker-7", enabled=True, passwords=["+pw7"], commands=["+@all"],
                           keys=["*"], channels=["*"])
    recorder = MonitorRecorder(make_dialect("echomq", keys.prefix, keys.queue),
                               tmp_path / MONITOR_HISTORY, "127.0.0.1", valkey_server.port,
                               valkey_server.password, members=["worker-7"])
    recorder.start()
    late = socket.create_connection(("127.0.0.1", valkey_server.port))
    try:
        late.sendall(b"PING\r\n")  # in CLIENT LIST now, not logged in yet
        assert late.recv(100).startswith(b"-NOAUTH")
        address = f"127.0.0.1:{late.getsockname()[1]}"
        recorder._resolve(address)  # a new address met meanwhile: the whole list is read
        assert recorder.names[address].startswith("id:")
        late.sendall(b"AUTH worker-7 pw7\r\n")
        assert late.recv(100) == b"+OK\r\n"
        time.sleep(0.06)  # past the recheck interval
        late.sendall(b"BLPOP late-login:{q}:wake 0.01\r\n")  # its first queue action
        assert late.recv(100).startswith(b"*-1")
        QueueClient(raw_client, keys).enqueue("j1", "x")  # a line after it: it is decoded
        deadline = time.monotonic() + 5
        while not recorder.first_actions.of(["worker-7"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert recorder.first_actions.of(["worker-7"])["worker-7"].what.startswith("BLPOP")
        assert recorder.names[address] == "worker-7"
    finally:
        late.close()
        recorder.stop()
        raw_client.acl_deluser("worker-7")
