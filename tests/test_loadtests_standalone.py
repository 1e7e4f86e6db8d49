"""Standalone Locust on ``loadtests/queue.py``, run the way docs/load.md tells a user to: the
documented help command lists the queue's options, and Valkey refusing the password stops the
run once, before any user starts, with a message naming ECHOMQ_VALKEY_PASSWORD (not a traceback
per user). Real locust processes against a real valkey-server.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.runtime.valkey import ValkeyServer, free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PASSWORD_VARIABLE = "ECHOMQ_VALKEY_PASSWORD"
pytestmark = pytest.mark.integration


def documented_command(comment: str) -> list[str]:
    """The command in docs/load.md's examples whose trailing comment is ``comment``, ready to
    run here: ``python`` and ``locust`` are this environment's."""
    for line in (ROOT / "docs" / "load.md").read_text().splitlines():
        command, _, note = line.partition("#")
        if note.strip() == comment:
            argv = shlex.split(command)
            program = {"python": sys.executable, "python3": sys.executable,
                       "locust": str(BIN / "locust")}[argv[0]]
            return [program, *argv[1:]]
    raise AssertionError(f"docs/load.md has no command commented {comment!r}")


def run_locust(*args: str, password: str | None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``locust -f loadtests/queue.py ARGS`` with ``password`` (None: none) in the environment."""
    env = {k: v for k, v in os.environ.items() if k != PASSWORD_VARIABLE}
    if password is not None:
        env[PASSWORD_VARIABLE] = password
    return subprocess.run([str(BIN / "locust"), "-f", "loadtests/queue.py", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_the_documented_help_command_lists_the_queue_options():
    result = subprocess.run(documented_command("all options"), cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    for option in ("--producer-rate", "--batch", "--lease-ms", "--queue-name", "--producers",
                   "--consumers", "--ack-ledger-dir", "--step-users"):
        assert option in result.stdout, f"{option} missing from the help"
    assert "--headless" in result.stdout  # and Locust's own: all options


MODES = {
    "headless": ["--headless", "-u", "4", "-r", "4", "-t", "5s"],
    "web-ui": ["--web-host", "127.0.0.1", "--web-port", "{port}"],
    "master": ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", "{port}",
               "--headless", "-u", "4", "-r", "4", "-t", "5s"],
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("password", [None, "not-the-password"], ids=["unset", "wrong"])
def test_a_refused_password_stops_the_run_once_naming_the_variable(
        valkey_server: ValkeyServer, mode: str, password: str | None):
    args = [arg.replace("{port}", str(free_port())) for arg in MODES[mode]]
    # Bounded: today the web UI and the master would wait for a user (or a worker) forever.
    result = run_locust("--host", valkey_server.url, *args, password=password, timeout=30)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert output.count(PASSWORD_VARIABLE) == 1, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    assert "Ramping to" not in output  # no user was spawned
    assert ("is set, but" in output) == (password is not None), output[-2000:]


def test_the_right_password_runs_and_an_unreachable_server_is_left_to_the_users(
        valkey_server: ValkeyServer):
    """The check stops only on refused credentials: with the password the run goes ahead, and a
    server not answering yet (a stack still starting) is the users' to count as failures."""
    ok = run_locust("--host", valkey_server.url, "--headless", "-u", "2", "-r", "2", "-t", "2s",
                    "--producers", "1", "--consumers", "1", password=valkey_server.password)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "EVALSHA  enqueue" in ok.stderr or "EVALSHA  enqueue" in ok.stdout
    closed = f"valkey://127.0.0.1:{free_port()}/0"
    down = run_locust("--host", closed, "--headless", "-u", "2", "-r", "2", "-t", "2s",
                      password=valkey_server.password)
    output = down.stdout + down.stderr
    assert "Ramping to 2 users" in output, output[-2000:]
    assert PASSWORD_VARIABLE not in output
