"""A run that exercised nothing says so, end to end: real valkey-server, real worker processes
really frozen and killed, through the CLI a user types (docs/reports-and-ci.md, "Exercised").
The rule itself, on hand-written histories: tests/test_exercised.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from test_monitor import live_recorder

from chaos.family import RecordedHolders
from chaos.history.events import read_history
from chaos.history.schema import Fault
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.runtime.valkey import ValkeyServer

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration

# Four short jobs, all done in the warmup; the pause, in the chaos phase, freezes a worker that
# holds nothing: the run passes, and must not read as one that proved recovery.
IDLE_PAUSE = """
name = "pause-idle-worker"
seed = 3
[topology]
workers = 2
concurrency = 2
lease_ms = 1000
reap_interval_ms = 250
[topology.handler]
distribution = "fixed"
fixed_ms = 50
[load]
rate = 20
max_jobs = 4
[phases]
warmup_ms = 700
chaos_ms = 1000
heal_ms = 200
[[faults]]
kind = "pause"
target = "worker-2"
at_ms = 300
duration_ms = 500
"""


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_a_pause_of_a_worker_holding_nothing_passes_unexercised_and_strict_exits_4(
        tmp_path: Path):
    scenario = tmp_path / "pause-idle-worker.toml"
    scenario.write_text(IDLE_PAUSE)
    result = run_cli("run", str(scenario), "--out", str(tmp_path / "run"), "--strict")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == "pass", result.stderr[-3000:]
    assert report["jobs"]["completed"] == 4 and report["stranded_lease_count"] == 0
    assert report["exercised"] is False
    (fault,) = report["exercise"]["faults"]
    assert (fault["kind"], fault["worker"], fault["held"], fault["exercised"]) == (
        "pause", "worker-2", 0, False)
    assert fault["reason"] == "stranded no lease (its target held none)"
    assert ("exercised no: no fault stranded a lease: pause f1 worker-2 at "
            f"chaos+{fault['at_ms']} ms stranded no lease (its target held none)") in result.stderr
    assert "scenario pause-idle-worker: PASS (not exercised: no fault stranded a lease)" \
        in result.stderr
    # --strict: a pass that exercised nothing is no evidence: exit 4, its report still a pass
    assert result.returncode == 4, result.stderr[-3000:]
    assert "--strict: pause-idle-worker passed without exercising recovery" in result.stderr
    # the offline re-check says the same, and agrees with the saved report
    again = run_cli("check", str(tmp_path / "run"), "--json")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    rechecked = json.loads(again.stdout)
    assert (rechecked["exercised"], rechecked["exercise"]) == (False, report["exercise"])


def test_the_kill_worker_scenario_exercises_recovery(tmp_path: Path):
    result = run_cli("run", str(ROOT / "scenarios" / "kill-worker.toml"),
                     "--out", str(tmp_path / "run"), "--strict")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == "pass" and report["exercised"] is True
    assert report["stranded_lease_count"] >= 1
    faults = report["exercise"]["faults"]
    assert sum(fault["stranded"] for fault in faults) == report["stranded_lease_count"]
    # the holder of the oldest lease was looked at again when killed, and held one
    oldest = faults[0]
    assert oldest["exercised"] is True and oldest["held"] >= 1, faults
    events = [Fault.decode(event) for event in read_history(tmp_path / "run" / "history.jsonl")
              if event.type == "fault"]
    assert [(event.target, event.holder_found) for event in events] == [
        ("holding_oldest_lease", True), ("random 1", None)]
    assert "  exercised yes: " in result.stderr


def test_holders_read_through_the_recorder_are_the_queue_as_of_the_question(
        valkey_server: ValkeyServer, raw_client: redis.Redis, tmp_path: Path):
    """The nemesis asks a MONITOR family's recorder who holds a lease: asked right after a
    claim, and right after that job's ack, the answer is the queue at that instant, not at the
    last line the recorder happened to have read (which named a holder 28 ms after its ack)."""
    keys = QueueKeys("held:", "q")
    recorder = live_recorder(valkey_server, keys, tmp_path)
    try:
        raw_client.client_setname("worker-1")
        queue = QueueClient(raw_client, keys)
        holders = RecordedHolders(queue, recorder.dialect, recorder.read_through)
        for number in range(20):
            queue.enqueue(f"j{number}", "x")
            claimed = queue.claim(30_000, "worker-1")
            assert claimed is not None
            assert holders.lease_holders_oldest_first() == ["worker-1"], number
            queue.complete(claimed.job_id, claimed.attempt, "worker-1")
            assert holders.lease_holders_oldest_first() == [], number
    finally:
        assert recorder.stop().trustworthy
