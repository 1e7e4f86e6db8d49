"""Faults of the store itself, end to end: a real valkey-server SIGKILLed and restarted on its
data directory (and, with Sentinel, a real failover), real worker processes reconnecting, and the
acknowledgement ledger compared with what the store kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def run(scenario: str, out: Path, *extra: str) -> tuple[int, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / f"{scenario}.toml"),
         "--out", str(out), *extra], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (out / "report.json").exists(), result.stderr[-3000:]
    return result.returncode, json.loads((out / "report.json").read_text())


def test_valkey_restart_with_fsync_always_loses_nothing_acknowledged(tmp_path: Path):
    code, report = run("valkey-restart", tmp_path / "run")
    assert code == 0 and report["verdict"] == "pass", report.get("invariants")
    acks = report["ack_ledger"]
    assert acks["acknowledged"]["enqueue"] == report["run"]["load"]["enqueued_acknowledged"] > 50
    # A complete that ran just before the kill, its reply lost with the connection, is retried
    # and rejected: done but never acknowledged. Only a handful can be caught that way.
    assert acks["acknowledged"]["complete"] >= 0.9 * acks["acknowledged"]["enqueue"], acks
    assert acks["lost"] == 0 and acks["history_events_lost"] == 0, acks
    assert acks["compared_with"] == "history.jsonl"
    # Both crashes happened and every worker carried on after each.
    assert [f["kind"] for f in report["store_faults"]] == ["valkey_restart"] * 2
    for fault in report["store_faults"]:
        assert fault["clients_recovered"] == 3 and fault["producer_ms"] is not None, fault
        assert fault["max_client_ms"] >= fault["down_ms"] - 50, fault
    assert report["store_faults"][1]["down_ms"] >= 300  # duration_ms: down that long
    assert report["jobs"]["lost"] == 0


def test_a_restart_without_persistence_is_caught_by_the_ledger(tmp_path: Path):
    """The same crash with nothing on disk: the store comes back empty. The checker sees only
    the jobs that were in flight; the ledger sees every acknowledged transition that vanished."""
    out = tmp_path / "run"
    code, report = run("valkey-restart", out, "--set", "valkey.appendonly=false")
    assert code == 1 and report["verdict"] == "fail"
    acks = report["ack_ledger"]
    assert acks["lost"] > report["jobs"]["lost"] >= 1
    assert acks["lost_by_op"]["enqueue"] >= 20 and acks["history_events_lost"] >= acks["lost"]
    assert acks["compared_with"] == "history-surviving.jsonl"
    assert (out / "history-surviving.jsonl").stat().st_size > 0
    recheck = subprocess.run([sys.executable, "-m", "chaos", "check", str(out), "--json"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert recheck.returncode == 1
    assert json.loads(recheck.stdout)["ack_ledger"] == acks


@pytest.mark.parametrize("mode", ["kill", "sentinel"])
def test_failover_with_wait_loses_nothing_acknowledged(tmp_path: Path, mode: str):
    """Primary + replica + Sentinel, clients through Sentinel, WAIT 1 after every script."""
    code, report = run("failover", tmp_path / "run", "--set", f"faults.0.mode={mode}",
                       "--set", "phases.chaos_ms=6000")
    assert code == 0 and report["verdict"] == "pass", report.get("invariants")
    assert report["invariants"]["attempts_monotonic"]["ok"]
    acks = report["ack_ledger"]
    assert acks["lost"] == 0 and acks["acknowledged"]["complete"] > 20
    # the planned one (under load Sentinel may also fail back on its own: an unplanned fault)
    [fault] = [fault for fault in report["store_faults"] if fault.get("planned", True)]
    assert fault["kind"] == "failover" and fault["node"] == "valkey-1"
    assert fault["new_primary"] == "valkey-2" and fault["promoted_ms"] > 0
    # Every worker made progress on the new primary after the failover.
    assert fault["clients_recovered"] == 3 and fault["producer_ms"] is not None
    assert report["jobs"]["enqueued"] > acks["acknowledged"]["enqueue"] - 1 > 50
