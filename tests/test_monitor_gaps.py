"""The MONITOR recorder when the feed is not a plain run of script calls: a real valkey-server
restarted under it (the gap it could not see, checked against the store), the exporter trimming
the events stream beside it, and EVALSHA calls refused with NOSCRIPT. Real servers throughout:
SIGKILLed and restarted on the same port and append-only file."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from test_scenarios_e2e import ROOT, run_cli

import chaos.history.events as events_module
import chaos.history.monitor as monitor_module
from chaos.history.dialects import make_dialect
from chaos.history.events import HistoryExporter, iter_stream, read_history
from chaos.history.monitor import MONITOR_HISTORY, MonitorRecorder, RecorderHealth
from chaos.protocol.client import QueueClient, QueueKeys, load_script_source
from chaos.run.evaluate import evaluate
from chaos.run.sources import compare_histories
from chaos.runtime.valkey import Persistence, ValkeyServer, valkey_server_binary

KEYS = QueueKeys("gap:", "q")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ValkeyServer]:
    node = ValkeyServer(valkey_server_binary(None), tmp_path / "data", tmp_path / "valkey.log",
                        persistence=Persistence(appendonly=True, appendfsync="always"))
    node.start()
    yield node
    node.stop()


def _recorder(server: ValkeyServer, path: Path) -> MonitorRecorder:
    recorder = MonitorRecorder(make_dialect("echomq", KEYS.prefix, KEYS.queue),
                               path / MONITOR_HISTORY, "127.0.0.1", server.port,
                               server.password)
    recorder.start()
    return recorder


def _retry(action, seconds: float = 10.0):  # type: ignore[no-untyped-def]
    """``action`` once the restarted server takes commands (clients do not retry by
    themselves: a failed call is the caller's to retry)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except (redis.ConnectionError, redis.BusyLoadingError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _agree(client: redis.Redis, path: Path) -> dict:  # type: ignore[type-arg]
    stream = list(iter_stream(client, KEYS.events))
    return compare_histories(stream, read_history(path / MONITOR_HISTORY))


def _work(queue: QueueClient, first: int, count: int) -> None:
    """Enqueue, claim, extend and complete ``count`` jobs, and leave one lease to lapse."""
    for number in range(first, first + count):
        queue.enqueue(f"j{number}", "x")
    for _ in range(count):
        claimed = queue.claim(60_000, "w1")
        assert claimed is not None
        queue.extend(claimed.job_id, claimed.attempt, 60_000, "w1")
        queue.complete(claimed.job_id, claimed.attempt, "w1")


def test_a_quiet_restart_gap_is_verified_and_its_runner_events_recovered(
        server: ValkeyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The store is SIGKILLed and restarted; while the recorder is still away the runner
    records a fault event (as the nemesis does right after a restart), then work goes on. The
    gap holds no write: it is verified, the event is read back from the stream, and the
    history still matches the scripts' own, event for event."""
    monkeypatch.setattr(monitor_module, "RECONNECT_PAUSE_S", 1.5)  # the runner is first back
    client = server.client(decode_responses=True)
    recorder = _recorder(server, tmp_path)
    queue = QueueClient(client, KEYS)
    _work(queue, 0, 5)
    _kill_once_seen(server, recorder, client, 20)
    server.restart()
    _retry(lambda: queue.record(type="fault", fault="f1", kind="valkey_restart"))
    _wait_for_gaps(recorder, 1)  # the recorder is back before the queue is used again
    _work(queue, 5, 5)
    health = recorder.stop()
    (gap,) = health.gaps
    assert gap["verified"] and gap["missed_writes"] == 0, gap
    assert gap["runner_events_recovered"] == 1 and gap["start_us"] < gap["end_us"]
    assert health.trustworthy and not health.problems(), health.problems()
    comparison = _agree(client, tmp_path)
    assert comparison["agree"] and comparison["counts"]["complete"] == [10, 10], comparison
    faults = [e for e in read_history(tmp_path / MONITOR_HISTORY) if e.type == "fault"]
    assert [e.extra["fault"] for e in faults] == ["f1"]


def test_a_write_inside_the_gap_leaves_it_unverified(server: ValkeyServer, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    """A claim and a complete run while the recorder is away: the history lacks them, and the
    gap check names the job the store shows otherwise, so the history is not evidence."""
    monkeypatch.setattr(monitor_module, "RECONNECT_PAUSE_S", 1.5)
    client = server.client(decode_responses=True)
    recorder = _recorder(server, tmp_path)
    queue = QueueClient(client, KEYS)
    queue.enqueue("lost", "x")
    _kill_once_seen(server, recorder, client, 1)
    server.restart()
    claimed = _retry(lambda: queue.claim(60_000, "w1"))
    assert claimed is not None and queue.complete("lost", claimed.attempt, "w1")
    _wait_for_gaps(recorder, 1)
    # The shadow now holds the store's state: a late complete is rejected against attempt 1,
    # and a second restart with nothing written in its gap is verified on its own.
    assert not queue.complete("lost", claimed.attempt, "w1")
    _kill_once_seen(server, recorder, client, 3)  # the enqueue, the gap's blind, the late call
    server.restart()
    _wait_for_gaps(recorder, 2)
    health = recorder.stop()
    gap, quiet = health.gaps
    assert not gap["verified"] and gap["missed_writes"] == 1, gap
    assert "job lost" in gap["differences"][0] and "completed" in gap["differences"][0]
    assert quiet["verified"] and quiet["start_us"] > gap["end_us"], quiet
    (blind, late) = read_history(tmp_path / MONITOR_HISTORY)[1:]
    # the history says which job the gap hid writes of, from when: the checker blinds its
    # invariants on that job (chaos.check.evidence)
    assert (blind.type, blind.job_id, blind.extra["lacks"], blind.ts) == (
        "blind", "lost", "transition", gap["start_us"] // 1000)
    assert (late.type, late.attempt, late.current_attempt) == ("complete_rejected", 1, 1)
    assert not health.trustworthy
    assert any("could not see the server" in problem for problem in health.problems())
    saved = RecorderHealth(**{k: v for k, v in health.as_dict().items() if k != "trustworthy"})
    assert saved.unverified_gaps() == [gap]


def _wait_for_gaps(recorder: MonitorRecorder, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(recorder.health.gaps) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _kill_once_seen(server: ValkeyServer, recorder: MonitorRecorder, client: redis.Redis,
                    events: int) -> None:
    """SIGKILL the server once the recorder has read ``events`` events: a call's feed line
    leaves the server after its reply, so a kill right after a reply can take the line with it
    (the recorder then rightly finds the write in its gap). A PING closes the last call (its
    commands end where the next line begins)."""
    client.ping()
    deadline = time.monotonic() + 10
    while recorder.health.events < events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.health.events == events
    server.kill()


def test_a_server_that_never_comes_back_breaks_the_feed_for_good(
        server: ValkeyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(monitor_module, "RECONNECT_TIMEOUT_S", 0.5)
    recorder = _recorder(server, tmp_path)
    server.kill()
    recorder._thread.join(timeout=10)
    health = recorder.stop()
    assert "did not take MONITOR again" in health.connection_lost and not health.gaps
    assert not health.trustworthy


def test_noscript_calls_make_no_event(server: ValkeyServer, tmp_path: Path):
    """A SUT that calls EVALSHA before loading its scripts: the refused call (NOSCRIPT) is in
    the feed with no command after it; it ran nothing and must not read as a rejected extend
    or complete. The retried call (after SCRIPT LOAD, or as EVAL) is decoded as usual."""
    client = server.client(decode_responses=True)
    recorder = _recorder(server, tmp_path)
    queue = QueueClient(client, KEYS)
    queue.enqueue("j1", "x")
    claimed = queue.claim(60_000, "w1")
    assert claimed is not None
    client.script_flush()
    assert queue.extend("j1", claimed.attempt, 60_000, "w1")  # NOSCRIPT, load, retried
    client.script_flush()
    with pytest.raises(redis.exceptions.NoScriptError):
        queue.client.evalsha(queue._shas["complete"], 2, KEYS.active, KEYS.events,
                             KEYS.job_prefix, "j1", str(claimed.attempt), "w1")
    queue.client.eval(load_script_source("complete"), 2, KEYS.active, KEYS.events,
                      KEYS.job_prefix, "j1", str(claimed.attempt), "w1")
    health = recorder.stop()
    kinds = [e.type for e in read_history(tmp_path / MONITOR_HISTORY)]
    assert kinds == ["enqueue", "claim", "extend", "complete"]  # no invented rejection
    comparison = _agree(client, tmp_path)
    assert comparison["agree"], comparison
    assert health.calls_not_run == 2 and health.undecoded_calls == 0 and health.trustworthy


def test_the_exporter_trims_beside_a_recorder(server: ValkeyServer, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch):
    """The trim script runs on the queue's events stream: the recorder knows it as the
    toolkit's own (no transition, nothing undecoded), and both histories still agree."""
    monkeypatch.setattr(events_module, "TRIM_MIN", 5)
    monkeypatch.setattr(events_module, "TRIM_EVERY", 10)
    client = server.client(decode_responses=True)
    recorder = _recorder(server, tmp_path)
    exporter = HistoryExporter(client, KEYS.events, tmp_path / "history.jsonl", batch=7)
    queue = QueueClient(client, KEYS)
    for round_ in range(4):
        _work(queue, round_ * 5, 5)
        exporter.drain()
    exporter.close()
    health = recorder.stop()
    assert exporter.trimmed > 0 and not exporter.trim_stopped
    assert health.toolkit_calls >= 1 and health.undecoded_calls == 0 and health.trustworthy
    exported = read_history(tmp_path / "history.jsonl")
    comparison = compare_histories(exported, read_history(tmp_path / MONITOR_HISTORY))
    assert comparison["agree"] and comparison["counts"]["complete"] == [20, 20], comparison


@pytest.mark.integration
def test_valkey_restart_recorded_both_ways(tmp_path: Path):
    """scenarios/valkey-restart.toml (two SIGKILLs of the store, appendfsync always), recorded
    both ways: judged on the scripts' history it passes, and the recorder came back after each
    kill with the gap in monitor.json. Judged on the monitor history alone, the same run is
    never a fail: a pass when every gap held no write, else unknown."""
    out = tmp_path / "run"
    result = run_cli("run", str(ROOT / "scenarios" / "valkey-restart.toml"), "--out", str(out),
                     "--set", 'history.source="both"', "--set", "phases.chaos_ms=2500",
                     "--set", "phases.heal_ms=300")
    report = json.loads((out / "report.json").read_text())
    assert result.returncode == 0, result.stderr[-3000:]
    recorder = report["history_recorder"]
    assert report["verdict"] == "pass" and recorder["problems"] == [], recorder["problems"]
    gaps = recorder["health"]["gaps"]
    assert len(gaps) == 2 and not recorder["health"]["connection_lost"]
    assert all(gap["verified"] or gap["differences"] for gap in gaps), gaps
    assert sum(gap["runner_events_recovered"] for gap in gaps) <= 2
    monitor_faults = [e for e in read_history(out / MONITOR_HISTORY) if e.type == "fault"]
    assert [e.extra["fault_id"] for e in monitor_faults] == ["f1", "f2"]  # none lost, none twice
    scenario = json.loads((out / "scenario.json").read_text())
    scenario["history"]["source"] = "monitor"
    (out / "scenario.json").write_text(json.dumps(scenario))
    judged = evaluate(out, "finished")
    expected = "pass" if all(gap["verified"] for gap in gaps) else "unknown"
    assert judged.word == expected, (judged.word, gaps)
