"""Completed-job retention (``topology.completed_retention_ms``): an accepted complete expires
the job's hash, a late call is still rejected, and the MONITOR recorder's shadow lets the hash go
with the store (live, and across a gap in its feed). Real servers throughout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from procs import wait_until
from test_monitor import live_recorder
from test_monitor_gaps import KEYS, _kill_once_seen, _recorder, _retry, _wait_for_gaps, server
from test_scenarios_e2e import run_cli

from chaos.history.events import iter_stream, read_history
from chaos.history.monitor import MONITOR_HISTORY
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.run.sources import compare_histories
from chaos.runtime.valkey import ValkeyServer

__all__ = ["server"]  # the fixture, used here by name

RETENTION_MS = 200


def _complete_one(queue: QueueClient, job_id: str) -> int:
    assert queue.enqueue(job_id, "x")
    claimed = queue.claim(60_000, "w1")
    assert claimed is not None and claimed.job_id == job_id
    assert queue.complete(job_id, claimed.attempt, "w1")
    return claimed.attempt


def test_a_completed_hash_expires_and_a_late_call_is_still_rejected(queue: QueueClient):
    keeping = queue
    expiring = QueueClient(queue.client, queue.keys, completed_retention_ms=RETENTION_MS)
    _complete_one(keeping, "kept")
    attempt = _complete_one(expiring, "gone")
    assert keeping.client.pttl(queue.keys.job("kept")) == -1  # no retention: kept for good
    assert 0 < keeping.client.pttl(queue.keys.job("gone")) <= RETENTION_MS
    wait_until(lambda: not queue.client.exists(queue.keys.job("gone")), "the hash to expire")
    # The stale holder's late calls find no attempts: rejected, and nothing comes back.
    assert expiring.extend("gone", attempt, 60_000, "w1") is None
    assert not expiring.complete("gone", attempt, "w1")
    assert not queue.client.exists(queue.keys.job("gone"))
    assert queue.client.hget(queue.keys.job("kept"), "state") == "completed"
    late = [e for e in iter_stream(queue.client, queue.keys.events)
            if e.job_id == "gone" and e.type == "complete_rejected"]
    assert [e.current_attempt for e in late] == [0]


def test_the_recorder_lets_an_expired_hash_go_with_the_store(valkey_server: ValkeyServer,
                                                              raw_client: redis.Redis,
                                                              tmp_path: Path):
    """A late complete after the hash expired: the recorder decodes it against what the store
    held then (no attempts), the same event as the script's own."""
    keys = QueueKeys("retain:", "q")
    recorder = live_recorder(valkey_server, keys, tmp_path)
    queue = QueueClient(raw_client, keys, completed_retention_ms=RETENTION_MS)
    attempt = _complete_one(queue, "j1")
    wait_until(lambda: not raw_client.exists(keys.job("j1")), "the hash to expire")
    assert not queue.complete("j1", attempt, "w1")
    _complete_one(queue, "j2")
    health = recorder.stop()
    assert health.trustworthy and health.caught_up, health
    comparison = compare_histories(list(iter_stream(raw_client, keys.events)),
                                   read_history(tmp_path / MONITOR_HISTORY))
    assert comparison["agree"], comparison
    assert comparison["counts"]["complete_rejected"] == [1, 1]


def test_hashes_that_expired_inside_a_gap_leave_it_verified(server: ValkeyServer,
                                                             tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    """The store restarts (its append-only file keeps each hash's expiry) and the completed
    hashes expire while the recorder is away: the gap check expects them gone."""
    import chaos.history.monitor as monitor_module

    monkeypatch.setattr(monitor_module, "RECONNECT_PAUSE_S", 1.5)  # past the retention
    client = server.client(decode_responses=True)
    recorder = _recorder(server, tmp_path)
    queue = QueueClient(client, KEYS, completed_retention_ms=RETENTION_MS)
    for number in range(3):
        _complete_one(queue, f"j{number}")
    _kill_once_seen(server, recorder, client, 9)
    started = time.monotonic()
    server.restart()
    _wait_for_gaps(recorder, 1)
    assert time.monotonic() - started > RETENTION_MS / 1000  # they did expire in the gap
    assert _retry(lambda: client.exists(*(KEYS.job(f"j{n}") for n in range(3)))) == 0
    health = recorder.stop()
    (gap,) = health.gaps
    assert gap["verified"] and gap["missed_writes"] == 0, gap


def test_the_bullmq_dialect_refuses_a_retention(tmp_path: Path):
    scenario = tmp_path / "bullmq-retention.toml"
    scenario.write_text('name = "bullmq-retention"\n'
                        '[sut]\nworkers = ["node", "worker.js"]\ndialect = "bullmq"\n'
                        'reaper = "none"\n'
                        '[topology]\ncompleted_retention_ms = 60000\n')
    result = run_cli("run", str(scenario), "--dry-run")
    assert result.returncode == 2
    assert "topology.completed_retention_ms = 60000" in result.stderr + result.stdout
    assert "removeOnComplete" in result.stderr + result.stdout
