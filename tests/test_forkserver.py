"""The fork server (chaos.runtime.forkserver): each reference process it forks is a real process
of its own (pid, session, log, environment, exit status), signals reach it and its group, and
nothing it forked outlives it. Real processes and a real valkey-server; no timing asserted."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from procs import children_of, wait_until

from chaos.runtime.forkserver import REAPER, WORKER, ForkServer, ForkServerError, Member
from chaos.runtime.pids import process_group
from chaos.runtime.valkey import ValkeyServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    forkserver = ForkServer(tmp_path / "forkserver.log")
    yield forkserver
    forkserver.kill_now()
    forkserver.close()


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _worker(name: str, valkey: ValkeyServer, tmp_path: Path) -> Member:
    env = {**os.environ, "ECHOMQ_VALKEY_PASSWORD": valkey.password}
    return Member(name, WORKER, ["--url", valkey.url, "--name", name, "--prefix", "fork:",
                                 "--queue", name, "--lease-ms", "5000"],
                  env, str(tmp_path / f"{name}.log"))


def _names(client: redis.Redis) -> set[str]:
    return {entry.get("name") for entry in client.client_list()}


def test_each_member_is_a_process_of_its_own_with_its_environment_and_log(
        server: ForkServer, valkey_server: ValkeyServer, raw_client: redis.Redis,
        tmp_path: Path):
    first, second = server.fork([_worker("fork-w1", valkey_server, tmp_path),
                                 _worker("fork-w2", valkey_server, tmp_path)])
    # Connected with the password it was given in its environment (the server has none).
    wait_until(lambda: {"fork-w1", "fork-w2"} <= _names(raw_client), "both workers connected")
    assert "ECHOMQ_VALKEY_PASSWORD" not in os.environ
    for member in (first, second):
        assert process_group(member.pid) == member.pid  # its own session and group
        assert member.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            member.wait(timeout=0.05)
    assert sorted(children_of(server.pid)) == sorted([first.pid, second.pid])
    # named after its member for ps -o comm / top (the command line is the fork server's)
    assert Path(f"/proc/{first.pid}/comm").read_text().strip() == "fork-w1"
    # SIGSTOP to the group freezes it (and its heartbeat process), SIGCONT thaws it.
    os.killpg(first.pid, signal.SIGSTOP)
    wait_until(lambda: _state(first.pid) == "T", "the worker stopped")
    os.killpg(first.pid, signal.SIGCONT)
    wait_until(lambda: _state(first.pid) not in ("T", None), "the worker running again")
    # SIGTERM: a graceful stop, exit 0; SIGKILL: -9, as subprocess.Popen says it.
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    second.kill()
    assert second.wait(timeout=10) == -signal.SIGKILL
    log = (tmp_path / "fork-w1.log").read_text()
    assert "fork-w1 up" in log and "fork-w1 stopped" in log
    assert "fork-w2 up" in (tmp_path / "fork-w2.log").read_text()


def test_a_members_exit_code_and_usage_error_reach_the_runner(server: ForkServer,
                                                             tmp_path: Path):
    env = dict(os.environ)
    refused, bad = server.fork([
        Member("reaper", REAPER, ["--url", "valkey://127.0.0.1:1", "--protocol", "no-reaper"],
               env, str(tmp_path / "reaper.log")),
        Member("worker", WORKER, ["--no-such-flag"], env, str(tmp_path / "worker.log"))])
    assert refused.wait(timeout=30) == 2
    assert "means no reaper runs at all" in (tmp_path / "reaper.log").read_text()
    assert bad.wait(timeout=30) == 2
    assert "required: --url, --name" in (tmp_path / "worker.log").read_text()


def test_it_forks_only_the_reference_implementation(server: ForkServer, tmp_path: Path):
    with pytest.raises(ForkServerError, match="runs only"):
        server.fork([Member("x", "os", [], dict(os.environ), str(tmp_path / "x.log"))])


def test_killing_the_server_takes_its_members_along(server: ForkServer,
                                                    valkey_server: ValkeyServer,
                                                    raw_client: redis.Redis, tmp_path: Path):
    member, = server.fork([_worker("fork-w3", valkey_server, tmp_path)])
    wait_until(lambda: "fork-w3" in _names(raw_client), "the worker connected")
    heartbeat = children_of(member.pid)
    assert len(heartbeat) == 1  # its heartbeat process
    server.kill_now()
    # PR_SET_PDEATHSIG: the member dies with the server, its heartbeat with the member.
    wait_until(lambda: _state(member.pid) is None and _state(heartbeat[0]) is None,
               "the member and its heartbeat gone")
    assert member.wait(timeout=10) == -signal.SIGKILL
    with pytest.raises(ForkServerError, match="gone|did not fork"):
        server.fork([_worker("fork-w4", valkey_server, tmp_path)])
