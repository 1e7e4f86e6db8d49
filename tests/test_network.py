"""Which Toxiproxy server a run uses, and that its proxies go away with the run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["--set", "phases.warmup_ms=300", "--set", "phases.chaos_ms=700",
         "--set", "phases.heal_ms=200", "--set", "toxiproxy.proxies=\"always\""]
pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_steady_state(out: Path, *extra: str, env: dict[str, str] | None = None) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "steady-state.toml"),
         "--out", str(out), *SHORT, *extra],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict = json.loads((out / "report.json").read_text())
    assert report["jobs"]["completed"] == report["jobs"]["enqueued"] > 0
    return report


def api(port: int, path: str, body: dict | None = None) -> object:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read() or b"null")


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            api(port, "/version")
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"no Toxiproxy API on port {port}")


def test_a_run_through_the_built_in_server_reports_it(tmp_path: Path):
    report = run_steady_state(tmp_path / "run", "--set", 'toxiproxy.server="builtin"')
    toxiproxy = report["run"]["toxiproxy"]
    assert toxiproxy["kind"] == "builtin" and toxiproxy["version"]
    assert sorted(toxiproxy["links"]) == ["worker-1", "worker-2", "worker-3"]


def test_an_existing_server_by_url_keeps_other_proxies_and_loses_ours(tmp_path: Path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "chaos", "toxiproxy", "serve", "--port",
                               str(port)], stderr=subprocess.PIPE, cwd=ROOT)
    try:
        wait_for(port)
        api(port, "/proxies", {"name": "someone-else", "listen": "127.0.0.1:0",
                               "upstream": "127.0.0.1:9"})
        report = run_steady_state(tmp_path / "run", "--set",
                                  f'toxiproxy.url="http://127.0.0.1:{port}"')
        toxiproxy = report["run"]["toxiproxy"]
        assert toxiproxy["kind"] == "external" and toxiproxy["command"] is None
        assert toxiproxy["api_url"] == f"http://127.0.0.1:{port}"
        # Our proxies are gone after the run; the one we did not make is untouched.
        proxies = api(port, "/proxies")
        assert isinstance(proxies, dict) and list(proxies) == ["someone-else"]
        assert server.poll() is None  # and a server we did not start is left running
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_toxiproxy_server_on_path_is_preferred_over_the_built_in_one(tmp_path: Path):
    """The real binary is in no registry these machines reach, so a stand-in named
    ``toxiproxy-server`` (serving the built-in API with the real binary's -host/-port flags)
    checks the selection and its command line, not the server itself."""
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "toxiproxy-server"
    shim.write_text(f'#!/bin/sh\n[ "$1" = -host ] && [ "$3" = -port ] || exit 64\n'
                    f'exec {sys.executable} -m chaos.network.server --host "$2" --port "$4"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}"}
    report = run_steady_state(tmp_path / "run", env=env)
    toxiproxy = report["run"]["toxiproxy"]
    assert toxiproxy["kind"] == "toxiproxy-server"
    assert toxiproxy["command"][:2] == [str(shim), "-host"]
    forced = run_steady_state(tmp_path / "forced", "--set", 'toxiproxy.server="builtin"', env=env)
    assert forced["run"]["toxiproxy"]["kind"] == "builtin"


def test_a_missing_toxiproxy_server_path_is_an_infrastructure_error(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "steady-state.toml"),
         "--out", str(tmp_path / "run"), *SHORT, "--set", 'toxiproxy.server="/nope/toxiproxy"'],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 3
    assert "toxiproxy.server = '/nope/toxiproxy': not an executable file" in result.stderr
    assert json.loads((tmp_path / "run" / "report.json").read_text())["verdict"] == "error"


EVERY_NETWORK_FAULT = """
name = "every-network-fault"
seed = 3
[topology]
workers = 6
concurrency = 2
lease_ms = 1000
reap_interval_ms = 250
[topology.handler]
distribution = "uniform"
min_ms = 50
max_ms = 200
[load]
rate = 30
[phases]
warmup_ms = 500
chaos_ms = 2500
heal_ms = 500
[[faults]]
kind = "bandwidth"
target = "worker-1"
at_ms = 100
duration_ms = 1500
rate_kb_s = 1
[[faults]]
kind = "reset_peer"
target = "worker-2"
at_ms = 100
duration_ms = 1500
timeout_ms = 100
[[faults]]
kind = "slow_close"
target = "worker-3"
at_ms = 100
duration_ms = 1500
delay_ms = 500
[[faults]]
kind = "toxic"
target = "worker-4"
at_ms = 100
duration_ms = 1500
toxic = "slicer"
attributes = { average_size = 8, size_variation = 4, delay = 1000 }
stream = "downstream"
[[faults]]
kind = "partition"
target = "worker-5"
at_ms = 100
duration_ms = 1500
mode = "disable"
[[faults]]
kind = "latency"
target = { random = 1 }
at_ms = 200
latency_ms = 50
jitter_ms = 25
toxicity = 0.5
"""


def test_every_network_fault_kind_is_applied_healed_and_survived(tmp_path: Path):
    """The sound protocol keeps its invariants under every kind of degraded link; each fault
    was accepted by the server (else the run would exit 3) and healed in the history."""
    path = tmp_path / "every.toml"
    path.write_text(EVERY_NETWORK_FAULT)
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "chaos", "run", str(path), "--out", str(out)],
                            capture_output=True, text=True, timeout=180, cwd=ROOT)
    report = json.loads((out / "report.json").read_text())
    assert result.returncode == 0, (result.stderr[-3000:], report.get("invariants"))
    applied = {fault["kind"]: fault for fault in report["run"]["faults"]}
    assert sorted(applied) == ["bandwidth", "latency", "partition", "reset_peer", "slow_close",
                               "toxic"]
    assert all(fault["healed_ts"] is not None for fault in applied.values())
    assert report["jobs"]["lost"] == 0 and report["jobs"]["double_completed"] == 0
