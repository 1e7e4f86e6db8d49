"""The runtime's side of the SUT contract (docs/sut.md), with small real processes as the SUT:
the environment each gets, its own ACL user, and the bad inputs (exit 3, never a silent pass)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

from chaos.errors import EXIT_INFRA
from chaos.run.runner import run_scenario
from chaos.run.sources import LiveCounts
from chaos.scenario.loading import scenario_from_dict

# A SUT that connects with the URL it was given, says who it is, writes its environment down
# and then waits on a list of its own (a blocking pop: at work, as far as its start-up goes), but
# it claims nothing.
IDLER = """
import json, os, sys, time, redis
client = redis.Redis.from_url(os.environ["CHAOS_VALKEY_URL"])
whoami = client.execute_command("ACL", "WHOAMI")
with open(sys.argv[1], "w") as out:
    json.dump({"env": dict(os.environ), "whoami": whoami.decode(), "argv": sys.argv}, out)
while True:
    client.blpop(["elsewhere"], 0.05)
"""
# One that connects and only ever pings: never at work on any queue.
PINGER = """
import os, time, redis
client = redis.Redis.from_url(os.environ["CHAOS_VALKEY_URL"])
while True:
    client.ping()
    time.sleep(0.05)
"""


def scenario(tmp_path: Path, workers: list[str], **sut: Any) -> Any:
    return scenario_from_dict({
        "name": "sut-contract",
        "topology": {"workers": 2, "concurrency": 3, "lease_ms": 300, "reap_interval_ms": 100},
        "load": {"rate": 50, "max_jobs": 3},
        "phases": {"warmup_ms": 100, "chaos_ms": 300, "heal_ms": 0, "drain_margin_ms": 100},
        "sut": {"workers": workers, "cwd": str(tmp_path), **sut},
    }, "test")


def test_each_sut_process_gets_the_contract_and_an_acl_user_of_its_own(tmp_path: Path):
    (tmp_path / "idler.py").write_text(IDLER)
    out = io.StringIO()
    result = run_scenario(scenario(tmp_path, [sys.executable, "idler.py", "{name}.json"],
                                   reaper="none"), tmp_path / "run", out)
    seen = {name: json.loads((tmp_path / f"{name}.json").read_text())
            for name in ("worker-1", "worker-2")}
    for name, found in seen.items():
        env = found["env"]
        assert found["whoami"] == name  # the URL's own credentials, not the default user
        assert env["CHAOS_NAME"] == name and found["argv"][1] == f"{name}.json"
        assert (env["CHAOS_QUEUE"], env["CHAOS_PREFIX"]) == ("jobs", "emq:")
        assert (env["CHAOS_LEASE_MS"], env["CHAOS_HEARTBEAT_MS"]) == ("300", "100")
        assert (env["CHAOS_REAP_INTERVAL_MS"], env["CHAOS_CONCURRENCY"]) == ("100", "3")
        assert env["CHAOS_MAX_STALLS"] == "0"
        assert "ECHOMQ_VALKEY_PASSWORD" not in env  # the run's admin password stays with it
    assert seen["worker-1"]["env"]["CHAOS_VALKEY_URL"] != seen["worker-2"]["env"][
        "CHAOS_VALKEY_URL"]
    # It claimed nothing: the jobs are undrained, and the run says why rather than pass.
    assert result.verdict == "unknown", result
    problems = result.report["history_recorder"]["problems"]
    assert any("no claim was ever decoded" in problem for problem in problems), problems
    assert "no claim was ever decoded" in out.getvalue()


def test_a_missing_command_is_an_infrastructure_error(tmp_path: Path):
    result = run_scenario(scenario(tmp_path, ["./no-such-worker", "{name}"]),
                          tmp_path / "run", io.StringIO())
    assert result.exit_code == EXIT_INFRA
    assert "cannot start './no-such-worker'" in result.report["error"]
    assert "worker-1" in result.report["error"]


def test_a_command_exiting_during_start_up_shows_its_log_tail(tmp_path: Path):
    crash = [sys.executable, "-c", "print('cannot parse my config'); raise SystemExit(7)"]
    result = run_scenario(scenario(tmp_path, crash, reaper="none"), tmp_path / "run",
                          io.StringIO())
    assert result.exit_code == EXIT_INFRA
    error = result.report["error"]
    assert "exited during start-up (code 7)" in error and "cannot parse my config" in error


def test_a_worker_that_never_connects_is_named(tmp_path: Path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    result = run_scenario(scenario(tmp_path, sleeper, reaper="none", start_timeout_s=1.0),
                          tmp_path / "run", io.StringIO())
    assert result.exit_code == EXIT_INFRA
    error = result.report["error"]
    assert "not connected after 1s" in error
    assert "worker-1 (no client with its ACL user 'worker-1' in CLIENT LIST)" in error


def test_acl_users_are_removed_from_a_server_the_run_did_not_start(tmp_path: Path,
                                                                   raw_client: Any):
    (tmp_path / "idler.py").write_text(IDLER)
    server = raw_client.connection_pool.connection_kwargs
    url = f"redis://:{server['password']}@{server['host']}:{server['port']}/0"
    data = scenario(tmp_path, [sys.executable, "idler.py", "{name}.json"],
                    reaper="none").model_dump()
    data["valkey"]["url"] = url
    data["valkey"]["queue"] = "acl-cleanup"
    run_scenario(scenario_from_dict(data, "test"), tmp_path / "run", io.StringIO())
    whoami = json.loads((tmp_path / "worker-1.json").read_text())["whoami"]
    assert whoami == "worker-1"  # the user existed during the run
    assert raw_client.execute_command("ACL", "USERS") == ["default"]


def test_live_counts_read_a_growing_history_line_by_line(tmp_path: Path):
    path = tmp_path / "history-monitor.jsonl"
    counts = LiveCounts(path)
    assert counts.update() == {}  # not written yet
    with open(path, "w") as handle:
        handle.write('{"type":"enqueue"}\n{"type":"claim"}\n{"type":"cl')
        handle.flush()
        assert counts.update() == {"enqueue": 1, "claim": 1}  # the half line waits
        handle.write('aim"}\n{"type":"complete"}\n')
        handle.flush()
        assert counts.update() == {"enqueue": 1, "claim": 2, "complete": 1}


def test_a_worker_that_connects_but_never_works_is_named_with_its_log(tmp_path: Path):
    """Started means at work, not connected (chaos.run.startup): a process whose connections
    only ever set up and ping is not started, and the run says so (exit 3) rather than
    judge its start-up as the queue at work."""
    (tmp_path / "pinger.py").write_text(PINGER)
    result = run_scenario(scenario(tmp_path, [sys.executable, "pinger.py"], reaper="none",
                                   start_timeout_s=1.0), tmp_path / "run", io.StringIO())
    assert result.exit_code == EXIT_INFRA
    error = result.report["error"]
    assert "not at work after 1s" in error
    assert "worker-1 (connected, but no call the queue's dialect reads as work" in error
    assert (tmp_path / "run" / "report.json").exists()
