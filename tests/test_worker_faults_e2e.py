"""The failures lease-queue users report, end to end through the CLI: a CPU-bound handler and a
blocked heartbeat, a poison pill under a stall limit, handlers longer than the lease with the
heartbeat on and off, and the Valkey preflight against a server that may evict keys. Real
valkey-server, real worker processes (each with its heartbeat process), real SIGKILL."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import cast

import pytest
from test_scenarios_e2e import ROOT, run_cli, run_scenario

from chaos.history.events import read_history
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.reference.config import WorkerConfig
from chaos.reference.heartbeat import LeaseRenewer
from chaos.run.preflight import judge
from chaos.runtime.valkey import ValkeyServer, valkey_server_binary

pytestmark = pytest.mark.integration


def test_cpu_hog_is_survived_by_the_heartbeat_process_and_a_blocked_heartbeat_is_fenced(
        tmp_path: Path):
    report = run_scenario("cpu-bound-handler", tmp_path / "run")
    events = read_history(tmp_path / "run" / "history.jsonl")
    (hog,) = [e for e in events if e.type == "handler_hog"]
    # The hogging handler held the GIL for two leases, yet its lease was renewed throughout
    # (from the heartbeat process) and its own complete was accepted: never redelivered.
    assert not [e for e in events if e.type == "reap" and e.job_id == hog.job_id]
    renewals = [e for e in events if e.type == "extend" and e.job_id == hog.job_id]
    assert len(renewals) >= 3
    assert any(e.type == "complete" and e.job_id == hog.job_id and e.attempt == hog.attempt
               for e in events)
    assert "cpu_hog" not in report["needless_by_fault"]
    # The blocked heartbeat: its long handlers lost their leases (needless, counted against the
    # fault), the fenced late completes were rejected, and nothing was completed twice.
    assert report["needless_by_fault"].get("block_heartbeat", 0) >= 1
    assert report["redeliveries"]["needless"] == report["needless_by_fault"]["block_heartbeat"]
    assert report["rejected"].get("complete_rejected", 0) >= 1
    assert report["outcomes"]["duplicated"] == 0 and report["outcomes"]["lost"] == 0
    # Each rejected complete came from the holder of a lease lost under the block, exactly once.
    rejected = Counter((e.job_id, e.attempt) for e in events if e.type == "complete_rejected")
    assert set(rejected.values()) == {1}
    reaped = {(e.job_id, e.attempt) for e in events if e.type == "reap"}
    assert set(rejected) <= reaped


def test_cpu_hog_starves_a_heartbeat_thread(tmp_path: Path):
    report = run_scenario("cpu-bound-handler", tmp_path / "run",
                          "--set", 'topology.heartbeat="thread"')
    events = read_history(tmp_path / "run" / "history.jsonl")
    (hog,) = [e for e in events if e.type == "handler_hog"]
    assert any(e.type == "reap" and e.job_id == hog.job_id and e.attempt == hog.attempt
               for e in events)
    assert any(e.type == "complete_rejected" and e.job_id == hog.job_id
               and e.attempt == hog.attempt for e in events)
    assert report["needless_by_fault"].get("cpu_hog", 0) >= 1


def test_a_stop_ends_the_heartbeat_at_once_even_mid_block():
    # No lease is held, so the renewer never touches its queue.
    config = WorkerConfig(url="", name="w", keys=QueueKeys("emq:", "jobs"), lease_ms=3000,
                          heartbeat_ms=1000)
    renewer = LeaseRenewer(cast(QueueClient, None), config, on_lost=lambda *_: None)
    thread = threading.Thread(target=renewer.run, daemon=True)
    thread.start()
    renewer.block(60_000)
    time.sleep(1.2)  # past the first beat: the renewer now sits in the block
    started = time.monotonic()
    renewer.stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - started < 0.5


def test_poison_pill_is_dead_lettered_after_exactly_max_stalls_recoveries(tmp_path: Path):
    report = run_scenario("poison-pill", tmp_path / "run")
    events = read_history(tmp_path / "run" / "history.jsonl")
    (poison,) = [e.job_id for e in events if e.type == "enqueue" and e.extra.get("kind")]
    claims = [e for e in events if e.type == "claim" and e.job_id == poison]
    reaps = [e for e in events if e.type == "reap" and e.job_id == poison]
    dead = [e for e in events if e.type == "dead" and e.job_id == poison]
    assert len(claims) == 4 and len(reaps) == 3 and len(dead) == 1  # max_stalls = 3
    assert [e.attempt for e in reaps] + [dead[0].attempt] == [1, 2, 3, 4]
    assert dead[0].extra["stalls"] == "4"
    assert not [e for e in events if e.job_id == poison and e.seq > dead[0].seq]
    # Every claim of it crashed its worker (a crash fault), and each crashed worker came back.
    crashes = [e for e in events if e.type == "fault" and e.extra.get("kind") == "crash"]
    restarts = [e for e in events if e.type == "heal" and e.extra.get("kind") == "restart"]
    assert len(crashes) == 4 and len(restarts) == 4
    assert [c.worker for c in crashes] == [c.worker for c in claims]
    assert report["dead_letter"]["moved_to_dead"] == 1 and report["dead_letter"]["poison"] == 1
    assert report["dead_letter"]["recoveries_before_dead"] == {"3": 1}
    outcomes = report["outcomes"]
    assert outcomes["dead_lettered"] == 1 and outcomes["lost"] == 0
    assert outcomes["completed"] == report["jobs"]["enqueued"] - 1  # nothing else starved
    assert report["invariants"]["recovery_bound"]["ok"]
    assert sum(report["run"]["crashes"].values()) == 4


def test_long_handlers_heartbeat_on_no_needless_off_counted_per_duration(tmp_path: Path):
    on = run_scenario("long-handlers", tmp_path / "on")
    assert on["redeliveries"]["needless"] == 0
    rows = {row["bucket"]: row for row in on["needless_by_duration"]}
    assert sum(row["attempts"] for bucket, row in rows.items()
               if bucket not in ("0-0.5x", "0.5-1x")) >= 5  # handlers past the lease ran
    # Heartbeat off: the needless redeliveries the scenario holds to zero, and counts.
    done = run_cli("run", str(ROOT / "scenarios" / "long-handlers.toml"), "--out",
                   str(tmp_path / "off"), "--set", "topology.heartbeat_ms=0")
    off = json.loads((tmp_path / "off" / "report.json").read_text())
    assert (done.returncode, off["verdict"]) == (1, "fail"), done.stderr[-3000:]
    assert [name for name, result in off["invariants"].items() if not result["ok"]] == [
        "needless_limit"]
    assert off["invariants"]["needless_limit"]["violations"] == off["redeliveries"]["needless"]
    rows = {row["bucket"]: row for row in off["needless_by_duration"]}
    assert off["redeliveries"]["needless"] >= 5
    assert rows["0-0.5x"]["needless"] == rows["0.5-1x"]["needless"] == 0
    assert sum(row["needless"] for row in rows.values()) == off["redeliveries"]["needless"]
    assert off["outcomes"]["duplicated"] == 0  # the fencing token still held
    assert off["outcomes"]["completed"] + off["outcomes"]["dead_lettered"] == \
        off["jobs"]["enqueued"]


# --- preflight ----------------------------------------------------------------------------------


def test_judge_warns_on_eviction_and_on_no_persistence_of_a_given_server():
    safe = {"maxmemory-policy": "noeviction", "save": "3600 1", "appendonly": "no"}
    assert judge(safe, own_server=False) == []
    evicting = judge({**safe, "maxmemory-policy": "allkeys-lru", "maxmemory": "1000000"},
                     own_server=False)
    assert len(evicting) == 1 and "allkeys-lru" in evicting[0]
    volatile = {"maxmemory-policy": "noeviction", "save": "", "appendonly": "no"}
    assert len(judge(volatile, own_server=False)) == 1
    assert judge(volatile, own_server=True) == []  # the run's own throwaway server
    assert judge({**volatile, "appendonly": "yes"}, own_server=False) == []


@pytest.fixture
def evicting_server(tmp_path: Path):
    server = ValkeyServer(valkey_server_binary(None), tmp_path / "data",
                          tmp_path / "valkey.log")
    server.start()
    client = redis_client(server.url, password=server.password)
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.config_set("maxmemory", "64mb")
    client.close()
    yield server
    server.stop()


def test_preflight_strict_refuses_an_evicting_server_and_records_why(tmp_path: Path,
                                                                   evicting_server: ValkeyServer):
    url = evicting_server.url.replace("valkey://", f"valkey://:{evicting_server.password}@")
    scenario = str(ROOT / "scenarios" / "steady-state.toml")
    quick = ["--set", f'valkey.url="{url}"', "--set", "phases.chaos_ms=500",
             "--set", "phases.warmup_ms=200", "--set", "phases.heal_ms=100"]
    strict = run_cli("run", scenario, "--out", str(tmp_path / "strict"), "--strict", *quick)
    assert strict.returncode == 3, strict.stderr[-2000:]
    report = json.loads((tmp_path / "strict" / "report.json").read_text())
    assert report["verdict"] == "error" and "preflight" in report["error"]
    assert report["preflight"]["settings"]["maxmemory-policy"] == "allkeys-lru"
    assert report["preflight"]["evicts"] is True and report["preflight"]["strict"] is True
    assert len(report["preflight"]["warnings"]) == 2  # eviction, and nothing persisted
    # Without --strict the run goes on, warns, and records the same settings.
    lenient = run_cli("run", scenario, "--out", str(tmp_path / "lenient"), *quick,
                      "--set", 'valkey.queue="lenient"')
    assert lenient.returncode == 0, lenient.stderr[-2000:]
    assert "preflight: maxmemory-policy is 'allkeys-lru'" in lenient.stderr
    report = json.loads((tmp_path / "lenient" / "report.json").read_text())
    assert report["verdict"] == "pass" and report["preflight"]["evicts"] is True
