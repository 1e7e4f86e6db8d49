"""What the attach tests share (docs/attach.md): the Node example SUT's settings as a deployment
of its own would have them, scenario files that attach to it, the command line, and the
checks that nothing a run froze stays frozen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NODE_SUT = ROOT / "sut" / "node-echomq"
PREFIX = "emq:"
# The deployment's own settings (what its workers were started with); the scenario says the same
LEASE_MS, HEARTBEAT_MS, REAP_MS, CONCURRENCY = 1000, 333, 250, 4
WORKERS = ("worker-1", "worker-2", "worker-3")
MEMBERS = (*WORKERS, "reaper")


def deployment_env(name: str, url: str, queue: str) -> dict[str, str]:
    """The contract's environment (docs/sut.md) of one member, as its deployment sets it."""
    return {"CHAOS_VALKEY_URL": url, "CHAOS_NAME": name, "CHAOS_QUEUE": queue,
            "CHAOS_PREFIX": PREFIX, "CHAOS_LEASE_MS": str(LEASE_MS),
            "CHAOS_HEARTBEAT_MS": str(HEARTBEAT_MS), "CHAOS_REAP_INTERVAL_MS": str(REAP_MS),
            "CHAOS_CONCURRENCY": str(CONCURRENCY), "CHAOS_POLL_MS": "20"}


def timing(chaos_ms: int) -> str:
    """The scenario's view of the deployment (the same settings) and its phases."""
    return f"""
[topology]
concurrency = {CONCURRENCY}
lease_ms = {LEASE_MS}
heartbeat_ms = {HEARTBEAT_MS}
reap_interval_ms = {REAP_MS}
[topology.handler]
distribution = "uniform"
min_ms = 200
max_ms = 600
[load]
rate = 40
[phases]
warmup_ms = 700
chaos_ms = {chaos_ms}
heal_ms = 500
drain_margin_ms = 3000
"""


PAUSE = timing(2800) + """
[[faults]]
kind = "pause"
target = "worker-2"
at_ms = 300
duration_ms = 2000
"""
KILL = timing(1500) + """
[[faults]]
kind = "kill"
target = "holding_oldest_lease"
at_ms = 300
"""
PARTITION = timing(2800) + """
[[faults]]
kind = "partition"
target = "worker-3"
at_ms = 300
duration_ms = 2000
"""


def scenario_file(path: Path, name: str, url: str, queue: str, members: str, faults: str,
                  extra: str = "") -> Path:
    path.write_text(f'name = "{name}"\nruntime = "attach"\nseed = 11\n'
                    f'[valkey]\nurl = "{url}"\nprefix = "{PREFIX}"\nqueue = "{queue}"\n'
                    f"{faults}\n{extra}\n{members}")
    return path


def run_cli(*args: str, password: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ECHOMQ_VALKEY_PASSWORD": password}
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def report(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    return loaded


def journal(run_dir: Path) -> dict[str, Any]:
    """attach.json: what the run left applied to each member (nothing, after any exit)."""
    loaded: dict[str, Any] = json.loads((run_dir / "attach.json").read_text())
    return loaded


def nothing_left_applied(run_dir: Path) -> None:
    members = journal(run_dir)["members"]
    assert members, "no member in attach.json"
    for name, state in members.items():
        assert not state["paused"] and not state["cut_off"], (name, state)
    assert report(run_dir)["run"]["runtime"]["left_undone"] == []


def actions(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "logs" / "attach-actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def figures(result: subprocess.CompletedProcess[str]) -> str:
    """The verdict's summary lines, for the test log (the figures the report quotes)."""
    keep = ("scenario ", "  jobs", "  faults", "  recovery", "  prompt", "  reclaim",
            "  outcomes", "  [FAIL]")
    return "\n".join(line for line in result.stderr.splitlines() if line.startswith(keep))


def wait_until(condition: Any, what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never happened within {timeout_s:g} s: {what}")
