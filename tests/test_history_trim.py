"""The exporter trims what it has durably written, so Valkey's memory stays flat; a store rollback
stops the trimming and the surviving history still shows exactly what the store lost. A real
valkey-server, really SIGKILLed and restarted from a snapshot (SAVE's dump.rdb)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import chaos.history.events as events_module
from chaos.check.ledger import events_not_surviving
from chaos.history.events import (
    HistoryExporter,
    iter_history,
    read_history,
    save_surviving_history,
)
from chaos.runtime.valkey import ValkeyServer, valkey_server_binary

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent
STREAM = "trim-test:events"


@pytest.fixture
def server(tmp_path: Path):
    node = ValkeyServer(valkey_server_binary(None), tmp_path / "data", tmp_path / "valkey.log")
    node.start()
    yield node
    node.stop()


@pytest.fixture(autouse=True)
def trim_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_module, "TRIM_MIN", 10)
    monkeypatch.setattr(events_module, "TRIM_EVERY", 30)


def add(client, count: int, label: str) -> list[str]:
    return [client.xadd(STREAM, {"type": "enqueue", "id": f"{label}{n}", "ts": "1"})
            for n in range(count)]


def test_the_exporter_trims_what_it_wrote_and_the_store_kept_everything(server, tmp_path):
    client = server.client(decode_responses=True)
    history = tmp_path / "history.jsonl"
    exporter = HistoryExporter(client, STREAM, history, batch=25,
                               memory_path=tmp_path / "memory.jsonl")
    written = []
    for round_ in range(10):
        written += add(client, 40, f"r{round_}-")
        exporter.drain()
    sample = exporter.sample_memory()
    exporter.close()
    assert [event.seq for event in iter_history(history)] == written  # nothing lost, in order
    assert exporter.trimmed >= 300 and not exporter.trim_stopped
    assert client.xlen(STREAM) == len(written) - exporter.trimmed < 40 + 30
    assert sample["stream_length"] == client.xlen(STREAM) and sample["used_memory"] > 0
    assert 0 < sample["stream_bytes"] < sample["used_memory"]
    assert sample["runner_rss"] > 0
    assert json.loads((tmp_path / "memory.jsonl").read_text().splitlines()[-1]) == sample
    # the trimmed prefix counts as kept: no surviving history is written
    assert not save_surviving_history(client, STREAM, history, tmp_path / "surviving.jsonl",
                                      exporter.trimmed_to)
    assert not (tmp_path / "surviving.jsonl").exists()


def test_a_rollback_stops_trimming_and_the_surviving_history_shows_what_was_lost(server,
                                                                                tmp_path):
    client = server.client(decode_responses=True)
    history = tmp_path / "history.jsonl"
    exporter = HistoryExporter(client, STREAM, history, batch=25)
    before_snapshot = add(client, 100, "a")
    exporter.drain()
    assert exporter.trimmed > 0
    client.save()  # the snapshot the store will come back to
    lost = add(client, 60, "b")
    exporter.drain()  # exported (and trimmed) before the crash
    server.kill()
    server.restart()
    client = exporter.client = server.client(decode_responses=True)
    after = add(client, 50, "c")
    exporter.drain()
    exporter.close()
    assert exporter.trim_stopped  # what the stream holds is the evidence now
    exported = [event.seq for event in iter_history(history)]
    assert exported == before_snapshot + lost + after
    surviving_path = tmp_path / "surviving.jsonl"
    assert save_surviving_history(client, STREAM, history, surviving_path, exporter.trimmed_to,
                                  batch=7)
    surviving = read_history(surviving_path)
    assert [event.seq for event in surviving] == before_snapshot + after
    assert [e.seq for e in events_not_surviving(read_history(history), surviving)] == lost


def test_without_trimming_a_whole_stream_compares_alike(server, tmp_path):
    client = server.client(decode_responses=True)
    history = tmp_path / "history.jsonl"
    exporter = HistoryExporter(client, STREAM, history, batch=25, trim=False)
    add(client, 120, "x")
    exporter.drain()
    exporter.close()
    assert exporter.trimmed == 0 and client.xlen(STREAM) == 120
    with tempfile.TemporaryDirectory() as tmp:
        assert not save_surviving_history(client, STREAM, history, Path(tmp) / "s.jsonl", None)
        client.xdel(STREAM, client.xrange(STREAM)[50][0])  # one event the store lost
        assert save_surviving_history(client, STREAM, history, Path(tmp) / "s.jsonl", None)
        assert len(read_history(Path(tmp) / "s.jsonl")) == 119


def test_a_store_that_comes_back_empty_lost_the_trimmed_events_too(server, tmp_path):
    client = server.client(decode_responses=True)
    history = tmp_path / "history.jsonl"
    exporter = HistoryExporter(client, STREAM, history, batch=25)
    lost = add(client, 100, "a")
    exporter.drain()
    assert exporter.trimmed > 0
    server.kill()
    server.restart()  # nothing on disk: the stream is gone
    client = exporter.client = server.client(decode_responses=True)
    after = add(client, 40, "c")
    exporter.drain()
    exporter.close()
    assert exporter.trim_stopped
    surviving_path = tmp_path / "surviving.jsonl"
    assert save_surviving_history(client, STREAM, history, surviving_path, exporter.trimmed_to)
    assert [event.seq for event in read_history(surviving_path)] == after
    assert [e.seq for e in events_not_surviving(read_history(history),
                                                read_history(surviving_path))] == lost


@pytest.mark.parametrize("appendonly", ["true", "false"])
def test_a_store_restart_run_is_judged_the_same_with_its_stream_trimmed(tmp_path, appendonly):
    """The runner's exporter really trims during these runs (memory.jsonl says how much), and
    the verdicts are still the scenario's: a restart on an fsynced AOF loses nothing (no
    surviving history needed), one with nothing on disk is caught through the surviving
    history and the ledger."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "valkey-restart.toml"),
         "--out", str(out), "--set", f"valkey.appendonly={appendonly}",
         "--set", "phases.chaos_ms=3000"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    report = json.loads((out / "report.json").read_text())
    samples = [json.loads(line) for line in (out / "memory.jsonl").read_text().splitlines()]
    assert max(sample["trimmed"] for sample in samples) > 0, samples
    acks = report["ack_ledger"]
    if appendonly == "true":
        assert done.returncode == 0 and report["verdict"] == "pass", report.get("invariants")
        assert acks["compared_with"] == "history.jsonl" and acks["lost"] == 0
        assert not (out / "history-surviving.jsonl").exists()
        assert "trim_stopped" not in samples[-1]
    else:
        assert done.returncode == 1 and report["verdict"] == "fail"
        assert acks["compared_with"] == "history-surviving.jsonl" and acks["lost"] > 0
        assert "trim_stopped" in samples[-1]


def test_nothing_after_the_end_phase_is_exported_and_no_rollback_is_read(server, tmp_path):
    """An attached deployment runs on after the run: its reaper's sweep lands right after the
    end phase (the same ms, seen in CI), and the exporter's background loop may read both
    before the drain learns where the run ended. The history stops at the end phase, and the
    store's stream compared up to it matches (the sweep after it is no rollback)."""
    client = server.client(decode_responses=True)
    client.xadd(STREAM, {"type": "phase", "phase": "end", "ts": "1"})  # an earlier run's
    begins = client.xadd(STREAM, {"type": "run", "scenario": "x", "ts": "1"})
    history = tmp_path / "history.jsonl"
    exporter = HistoryExporter(client, STREAM, history, batch=25, begins_at=begins)
    exporter.start()
    written = [begins, *add(client, 40, "a-")]
    # in one round trip: the run's end, then the deployment's sweep, in the same ms mostly
    pipe = client.pipeline(transaction=True)
    pipe.xadd(STREAM, {"type": "phase", "phase": "end", "ts": "2"})
    pipe.xadd(STREAM, {"type": "sweep", "worker": "reaper", "ts": "2"})
    end, _ = pipe.execute()
    written.append(end)
    deadline = time.monotonic() + 10
    while exporter.exported < len(written):  # the background loop got there first
        assert time.monotonic() < deadline
        time.sleep(0.01)
    exporter.drain(end)
    exporter.close()
    assert [event.seq for event in iter_history(history)] == written
    assert not save_surviving_history(client, STREAM, history, tmp_path / "surviving.jsonl",
                                      exporter.trimmed_to, begins_at=begins, ends_at=end)
