"""A failover the store made on its own (Sentinel failing back unasked, issue 17's failover seed
17): recorded as a store fault with ``planned = false`` and given the outage window of a planned
one, so the sound queue is not failed for the store's flap, and nothing outside it is hidden."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from histories import History

from chaos.check.checker import check
from chaos.history.events import Event
from chaos.history.schema import Fault
from chaos.names import INVARIANTS
from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.reference.config import WorkerConfig
from chaos.reference.heartbeat import LeaseRenewer
from chaos.run.runner import make_runtime
from chaos.runtime.local import LocalRuntime
from chaos.runtime.pids import PID_DIR, read_record
from chaos.runtime.sentinel_watch import now_ms, replica_online
from chaos.runtime.valkey import SENTINEL_DOWN_AFTER_MS, SENTINEL_SERVICE
from chaos.scenario.loading import load_scenario
from tests.procs import wait_until

ROOT = Path(__file__).resolve().parent.parent

L, R, ALLOW = 4000, 250, 100
LIMIT = R + ALLOW
# The flap, as in the seed-17 run: valkey-2 (promoted by the planned failover) stops answering
# Sentinel at 2000; Sentinel fails back to valkey-1 at 3100; valkey-1 has its replica online
# again only at 13_000 (no demotion until Sentinel's 10 s INFO round): until then every WAIT 1
# waits its full second and the reaper sweeps about once per 1.25 s.
FLAP_DOWN, FLAP_SWITCH, FLAP_SYNCED = 2000, 3100, 13_000
UNPLANNED = Fault("unplanned-1", "failover", "valkey-2", target="sentinel", killed_ts=FLAP_DOWN,
                  down_ms=FLAP_SYNCED - FLAP_DOWN, promoted_ms=FLAP_SWITCH - FLAP_DOWN,
                  new_primary="valkey-1", planned=False)


def flapped(late_job_deadline: int, lag: int, unplanned: bool = True) -> History:
    """A planned failover at 500-1500, the unplanned flap after it; job a's lease (claimed
    L before ``late_job_deadline``, never renewed) is reaped ``lag`` ms after its deadline."""
    h = History(lease_ms=L, reap_interval_ms=R, tolerance_ms=ALLOW)
    # p's lease lapses at 1600, after the planned failover, and is reaped in time: the planned
    # outage's exemption ends there (at its first reap once the store is back)
    h.enqueue("p", ts=-2410)
    h.claim("p", attempt=1, worker="w2", ts=-2400)
    h.write(Fault("f1", "failover", "valkey-1", target="primary", killed_ts=500, down_ms=1000,
                  promoted_ms=900, new_primary="valkey-2"), ts=1500)
    h.reap("p", attempt=1, ts=1700)
    h.claim("p", attempt=2, worker="w1", ts=1710)
    h.complete("p", attempt=2, worker="w1", ts=1800)
    if unplanned:
        h.write(UNPLANNED, ts=FLAP_SYNCED + 50)  # recorded once the replica is back
    claimed = late_job_deadline - L
    h.enqueue("a", ts=claimed - 5)
    h.claim("a", attempt=1, worker="w1", ts=claimed)
    h.reap("a", attempt=1, ts=late_job_deadline + lag)
    h.claim("a", attempt=2, worker="w2", ts=late_job_deadline + lag + 10)
    h.complete("a", attempt=2, worker="w2", ts=late_job_deadline + lag + 100)
    return h


def failed(events: list[Event]) -> list[str]:
    verdict = check(events)
    return sorted(name for name in INVARIANTS if verdict.invariants[name].violations)


def test_a_late_reap_in_the_unplanned_flap_is_exempt_as_in_a_planned_failover():
    """Reaped 1209 ms late, deadline 9000: inside the flap's window, so exempt (seed 17's
    figure); the same history without the recorded flap fails reap_prompt, so the exemption is
    the record's doing, not a looser rule."""
    unrecorded = check(flapped(9000, 1209, unplanned=False).events())
    assert failed(flapped(9000, 1209, unplanned=False).events()) == ["reap_prompt"]
    assert unrecorded.invariants["reap_prompt"].examples[0]["lag_ms"] == 1209
    verdict = check(flapped(9000, 1209).events())
    assert failed(flapped(9000, 1209).events()) == []
    exempt = verdict.invariants["reap_prompt"].figures["exempt_store_outage"]
    assert exempt == unrecorded.invariants["reap_prompt"].figures["exempt_store_outage"] + 1
    (planned, unplanned) = verdict.store_faults
    assert "planned" not in planned and unplanned["planned"] is False
    assert (unplanned["killed_ts"], unplanned["down_ms"], unplanned["promoted_ms"]) == (
        FLAP_DOWN, FLAP_SYNCED - FLAP_DOWN, FLAP_SWITCH - FLAP_DOWN)


def test_a_late_reap_after_the_flap_is_over_still_fails():
    """The replica was back at 13_000 and the reaper reaped since (c); a lease lapsing at 16_000
    and reaped one interval + allowance + 1 ms late is judged like any other."""
    h = flapped(9000, 1209)
    h.enqueue("c", ts=9190)  # lapses at 13_200 and is reaped in time: the reaper is back
    h.claim("c", attempt=1, worker="w1", ts=9200)
    h.reap("c", attempt=1, ts=13_300)
    h.claim("c", attempt=2, worker="w2", ts=13_310)
    h.complete("c", attempt=2, worker="w2", ts=13_400)
    h.enqueue("b", ts=11_990)
    h.claim("b", attempt=1, worker="w2", ts=12_000)
    h.reap("b", attempt=1, ts=16_000 + LIMIT + 1)
    h.claim("b", attempt=2, worker="w1", ts=16_500)
    h.complete("b", attempt=2, worker="w1", ts=16_600)
    verdict = check(h.events())
    assert failed(h.events()) == ["reap_prompt"]
    assert verdict.invariants["reap_prompt"].examples[0]["job"] == "b"


def test_a_fault_event_without_the_planned_field_reads_as_planned():
    """Histories written before the field: every store fault in them was the nemesis's."""
    fields = Fault("f1", "failover", "valkey-1", killed_ts=5, down_ms=10).fields()
    assert "planned" not in fields
    assert UNPLANNED.fields()["planned"] == 0


# --- the watch, on a real primary, replica and Sentinel ----------------------------------------


def sentinel_has_a_good_replica(port: int, password: str) -> bool:
    """Would Sentinel promote its replica now? Flagged nothing but ``slave``, its link up and
    answering pings (just after a restart Sentinel's view is stale: a flap provoked then is
    aborted with -failover-abort-no-good-slave, and the next try is 20 s away)."""
    with redis.Redis(host="127.0.0.1", port=port, password=password,
                     decode_responses=True, socket_timeout=2) as client:
        replicas = client.execute_command("SENTINEL", "REPLICAS", SENTINEL_SERVICE)
    for replica in replicas:
        fields = replica if isinstance(replica, dict) else dict(
            zip(replica[::2], replica[1::2], strict=True))
        if (fields.get("flags") == "slave" and fields.get("master-link-status") == "ok"
                and int(fields.get("last-ok-ping-reply", 10**6)) < 300
                # Sentinel takes a replica whose INFO is under 5 s old (its master down)
                and int(fields.get("info-refresh", 10**6)) < 3500):
            return True
    return False


def count_in(path: Path, text: str) -> int:
    return path.read_text(errors="replace").count(text) if path.exists() else 0


@pytest.mark.integration
def test_the_watch_records_sentinel_failing_back_on_its_own(tmp_path: Path):
    """A planned failover (the primary SIGKILLed), then the new primary SIGSTOPped until
    Sentinel gives up on it and fails back: the first switch is the plan's, the second is handed
    over as an unplanned store fault, whose window runs from the new primary's last reply to
    Sentinel until the primary has a replica online again (the watch demotes the stopped node)."""
    runtime = make_runtime(load_scenario(ROOT / "scenarios" / "failover.toml"), tmp_path)
    try:
        runtime.start_valkey()
        assert isinstance(runtime, LocalRuntime) and runtime.watch is not None
        planned = runtime.failover("kill", 0)
        sentinel = runtime.servers["sentinel"]
        wait_until(lambda: sentinel_has_a_good_replica(sentinel.port, sentinel.password),
                   "Sentinel seeing valkey-1 as a replica it could promote", timeout_s=30)
        watch = runtime.watch
        assert (watch.switches[0].old, watch.switches[0].planned) == ("valkey-1", True)
        assert watch.switches[0].new == planned.new_primary == "valkey-2"
        # On a loaded host Sentinel may already have flapped on its own (seed 17): stop whichever
        # node is the primary now, and judge the switch that follows.
        seen, current = len(watch.switches), watch.switches[-1].new
        other = "valkey-1" if current == "valkey-2" else "valkey-2"
        stopped = runtime.servers[current]
        assert stopped.process is not None
        before = now_ms()
        os.kill(stopped.process.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 20
            while len(watch.switches) == seen and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            os.kill(stopped.process.pid, signal.SIGCONT)
        switch = watch.switches[seen]
        assert (switch.old, switch.new, switch.planned) == (current, other, False), \
            watch.switches
        faults: list = []
        deadline = time.monotonic() + 20
        while len(faults) < seen and time.monotonic() < deadline:  # every unplanned one, in order
            faults += runtime.unplanned_store_faults()
            time.sleep(0.1)
        fault = faults[-1]
        assert (fault.node, fault.new_primary) == (current, other), faults
        assert before - SENTINEL_DOWN_AFTER_MS <= fault.killed_ts <= switch.switched_ts, faults
        assert fault.promoted_ms == switch.switched_ts - fault.killed_ts
        # from the +sdown (down-after past the last reply), which the switch follows
        assert fault.promoted_ms > SENTINEL_DOWN_AFTER_MS
        assert switch.synced_ts is not None
        assert fault.down_ms == switch.synced_ts - fault.killed_ts >= fault.promoted_ms
        assert replica_online(runtime.servers[other])
        assert runtime.unplanned_store_faults(final=True) == []  # handed over once
    finally:
        runtime.close()


@pytest.mark.integration
def test_a_run_with_a_sentinel_flap_records_it_and_does_not_fail_the_sound_queue(tmp_path: Path):
    """failover.toml, and once the planned failover is over (Sentinel could promote the old
    primary, now the new one's replica), the new primary SIGSTOPped until Sentinel fails back:
    seed 17's flap,
    provoked while the load still runs (chaos 6 s: room for the planned failover, ~3 s, and the
    flap). The run records it as an unplanned store fault and does not fail the sound queue."""
    out = tmp_path / "run"
    runner = subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "failover.toml"),
         "--out", str(out), "--set", "phases.chaos_ms=6000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        sentinel_log = out / "logs" / "sentinel.log"
        wait_until(lambda: count_in(sentinel_log, "+switch-master") >= 1, "the planned switch",
                   timeout_s=60)
        wait_until(lambda: count_in(out / "logs" / "valkey-1.log",
                                    "REPLICA sync: Finished with success") >= 1,
                   "valkey-1 in sync as a replica after its restart", timeout_s=30)
        conf = dict(line.split(" ", 1) for line in
                    (out / "sentinel" / "sentinel.conf").read_text().splitlines()
                    if line.startswith(("port ", "requirepass ")))
        wait_until(lambda: sentinel_has_a_good_replica(int(conf["port"]),
                                                     conf["requirepass"].strip('"')),
                   "Sentinel seeing a replica it could promote", timeout_s=30)
        # the primary now: the last switch's new port (on a loaded host Sentinel may already
        # have flapped on its own, seed 17)
        switches = count_in(sentinel_log, "+switch-master")
        last = [line for line in sentinel_log.read_text().splitlines() if "+switch-master" in line]
        port = last[-1].split()[-1]
        current = next(name for name in ("valkey-1", "valkey-2")
                       if f"port {port}\n" in (out / name / "valkey.conf").read_text())
        other = "valkey-1" if current == "valkey-2" else "valkey-2"
        record = read_record(out / PID_DIR / f"{current}.json")
        assert record is not None
        os.kill(record.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: count_in(sentinel_log, "+switch-master") > switches,
                       "Sentinel failing over from the stopped primary", timeout_s=30)
        finally:
            os.kill(record.pid, signal.SIGCONT)
        _, stderr = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    report = json.loads((out / "report.json").read_text())
    assert f"Sentinel failed over on its own: {current} -> {other}" in stderr, stderr[-3000:]
    planned, *unplanned_ones = report["store_faults"]
    unplanned = unplanned_ones[-1]
    assert planned["fault_id"] == "f1" and "planned" not in planned
    assert len(unplanned_ones) == switches  # every switch after the planned one
    assert unplanned["planned"] is False and unplanned["fault_id"] == f"unplanned-{switches}"
    assert (unplanned["node"], unplanned["new_primary"]) == (current, other)
    assert unplanned["killed_ts"] > planned["killed_ts"] + planned["down_ms"] - 1000
    assert unplanned["down_ms"] >= unplanned["promoted_ms"] > SENTINEL_DOWN_AFTER_MS
    assert report["verdict"] in ("pass", "unknown"), report["invariants"]
    assert report["ack_ledger"]["lost"] == 0


# --- the heartbeat after a failover ------------------------------------------------------------


def hb_connections(client: redis.Redis) -> set[int]:
    return {entry["id"] for entry in client.client_list() if entry.get("name") == "hb-flap"}


def test_a_failed_renewal_drops_the_heartbeats_connection_so_the_next_asks_anew(
        valkey_server, raw_client):
    """WAIT 1 on a server with no replica: every renewal runs but fails (NotReplicated), as on a
    primary Sentinel has just failed away from. As the reaper does, the heartbeat then drops its
    connection, so its next renewal opens a new one (in a run: asking Sentinel where the primary
    is) instead of staying on the stale node for good."""
    keys = QueueKeys("test:", "hb-flap")
    setup = QueueClient(raw_client, keys)
    setup.enqueue("a")
    claimed = setup.claim(60_000, "w1")
    assert claimed is not None
    queue = QueueClient(redis_client(valkey_server.url, password=valkey_server.password,
                                     client_name="hb-flap"), keys, wait_replicas=1)
    config = WorkerConfig(url=valkey_server.url, name="w1", keys=keys, lease_ms=60_000,
                          heartbeat_ms=100)
    renewer = LeaseRenewer(queue, config, on_lost=lambda job_id, attempt: None)
    renewer.hold("a", claimed.attempt)
    beating = threading.Thread(target=renewer.run, daemon=True)
    beating.start()
    try:
        seen: set[int] = set()
        wait_until(lambda: bool(seen.update(hb_connections(raw_client)) or len(seen) >= 2),
                   "a second connection after a failed renewal", timeout_s=15)
        first = min(seen)
        wait_until(lambda: first not in hb_connections(raw_client), "the first one closed",
                   timeout_s=5)
    finally:
        renewer.stop.set()
        beating.join(timeout=5)
        queue.client.close()
