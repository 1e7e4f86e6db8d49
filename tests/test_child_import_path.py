"""The toolkit's Python children run the toolkit that started them, never a ``chaos/`` (or
``loadtests/``) folder in the directory the run was started from (chaos.lifeline.toolkit_python;
docs/running.md). Real runs from a directory holding a decoy of each package: every decoy module
leaves a marker file when imported, and the ones a child would run exit loudly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.load.sources import locust_argv
from chaos.protocol.client import QueueKeys
from chaos.runtime.valkey import ValkeyServer
from chaos.scenario.model import Load

ROOT = Path(__file__).resolve().parent.parent

# What a child would import from its working directory: the packages, and the modules the fork
# server, the reference workers and reapers, the built-in Toxiproxy and Locust's users run.
DECOYS = ("chaos/__init__.py", "chaos/runtime/__init__.py", "chaos/runtime/forkserver.py",
          "chaos/reference/__init__.py", "chaos/reference/worker.py",
          "chaos/reference/reaper.py", "chaos/network/__init__.py", "chaos/network/server.py",
          "loadtests/__init__.py", "loadtests/queue_users.py")
DECOY = """import pathlib
pathlib.Path({marker!r}).write_text("imported " + __name__)
{tail}
"""


def decoy_directory(where: Path) -> Path:
    """``where``, holding the decoy packages; the markers go to ``where/markers``."""
    (where / "markers").mkdir(parents=True)
    for module in DECOYS:
        path = where / module
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = where / "markers" / module.replace("/", ".")
        package = path.name == "__init__.py"
        path.write_text(DECOY.format(
            marker=str(marker),
            tail="" if package else f'raise SystemExit("decoy {module} imported")'))
    return where


def markers(where: Path) -> list[str]:
    return sorted(path.name for path in (where / "markers").iterdir())


def echomq_chaos() -> list[str]:
    """The installed command (README command 1), as a user runs it."""
    script = shutil.which("echomq-chaos", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-P", "-m", "chaos"]


@pytest.mark.integration
def test_a_run_from_a_directory_holding_a_chaos_package_runs_the_installed_toolkit(
        tmp_path: Path):
    """The fork server and what it forks (workers, reaper), the built-in Toxiproxy: a decoy
    imported by any of them would fail the run (exit 3) and leave its marker."""
    here = decoy_directory(tmp_path / "cwd")
    out = tmp_path / "run"
    done = subprocess.run(
        [*echomq_chaos(), "run", str(ROOT / "scenarios" / "steady-state.toml"),
         "--out", str(out), "--set", 'toxiproxy.proxies="always"',
         "--set", 'toxiproxy.server="builtin"', "--set", "phases.warmup_ms=200",
         "--set", "phases.chaos_ms=500", "--set", "phases.heal_ms=200"],
        cwd=here, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert markers(here) == []
    assert json.loads((out / "report.json").read_text())["verdict"] == "pass"
    logs = {path.stem: path.read_text() for path in (out / "logs").glob("*.log")}
    assert set(logs) >= {"reaper", "toxiproxy", "worker-1", "worker-2", "worker-3"}
    assert [name for name, text in logs.items() if "decoy" in text] == []
    assert "decoy" not in done.stderr  # the spare fork server's own errors go there


@pytest.mark.integration
def test_locust_started_as_the_runner_starts_it_imports_the_installed_locustfile_packages(
        valkey_server: ValkeyServer, tmp_path: Path):
    """Locust puts its working directory first on sys.path before it imports the locustfile,
    which imports ``loadtests.queue_users`` and ``chaos``: the runner's command line for it
    (``locust_argv``) must still run ours. Headless for a second: it imports the locustfile to
    start at all, so a decoy would end it at once."""
    here = decoy_directory(tmp_path / "cwd")
    argv = locust_argv(Load(rate=10, users=1), valkey_server.url, QueueKeys("ip:", "decoy"),
                       1000, "sound", tmp_path / "locust", ["-t", "1s"])
    done = subprocess.run(argv, cwd=here, capture_output=True, text=True, timeout=90,
                          env=dict(os.environ, ECHOMQ_VALKEY_PASSWORD=valkey_server.password))
    assert done.returncode == 0, done.stderr[-3000:]
    assert markers(here) == []
    assert (tmp_path / "locust.json").exists()  # Locust ran its users, and stopped
