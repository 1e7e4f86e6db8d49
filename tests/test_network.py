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
                    f'exec {sys.executable} -m chaos.toxiproxy --host "$2" --port "$4"\n')
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
