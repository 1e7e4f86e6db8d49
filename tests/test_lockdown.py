"""Locked down by default: loopback listeners only, a random Valkey password that is refused
when missing and never appears on a command line, no shell between the toolkit and its children."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import redis
from procs import listening_addresses, pid_records
from test_teardown import start_run, wait_for_line

from chaos.protocol.client import redis_client
from chaos.runtime.pids import PID_DIR
from chaos.runtime.valkey import ValkeyServer

ROOT = Path(__file__).resolve().parent.parent


def test_the_valkey_a_run_starts_refuses_clients_without_its_password(
        valkey_server: ValkeyServer):
    assert len(valkey_server.password) == 32 and valkey_server.url.startswith(
        "valkey://127.0.0.1:")
    anonymous = redis_client(valkey_server.url, socket_timeout=5)
    with pytest.raises(redis.exceptions.AuthenticationError):
        anonymous.ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        anonymous.set("k", "v")
    wrong = redis_client(valkey_server.url, password="0" * 32, socket_timeout=5)
    with pytest.raises(redis.exceptions.AuthenticationError):
        wrong.ping()
    right = redis_client(valkey_server.url, password=valkey_server.password,
                                   socket_timeout=5, decode_responses=True)
    assert right.ping()
    assert right.config_get("protected-mode") == {"protected-mode": "yes"}
    assert right.config_get("bind") == {"bind": "127.0.0.1"}
    other = ValkeyServer(valkey_server.binary, valkey_server.data_dir, valkey_server.log_path)
    assert other.password != valkey_server.password  # random per server, so per run


def test_no_shell_between_the_toolkit_and_its_children():
    """No subprocess call with shell=True, no os.system/os.popen: every child gets an argv list,
    so no user-supplied string is ever parsed by a shell."""
    offenders = []
    sources = sorted((ROOT / "chaos").rglob("*.py"))
    assert len(sources) > 10
    for path in sources:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant)
                                                   and keyword.value.value is False):
                    offenders.append(f"{path.name}:{node.lineno} shell=")
            function = node.func
            if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                    and function.value.id == "os" and function.attr in ("system", "popen")):
                offenders.append(f"{path.name}:{node.lineno} os.{function.attr}")
    assert offenders == []


@pytest.mark.integration
def test_a_run_is_locked_down(tmp_path: Path):
    """Every listener on 127.0.0.1, the password in no command line, refused without it."""
    out = tmp_path / "run"
    runner = start_run("steady-state", out, "--set", 'toxiproxy.proxies="always"',
                       "--set", 'load.engine="locust"',
                       "--set", "phases.warmup_ms=500", "--set", "phases.chaos_ms=1500")
    try:
        wait_for_line(runner, "phase chaos")
        records = pid_records(out)
        assert {r.name for r in records} >= {"valkey", "toxiproxy", "reaper", "worker-1"}
        # the load generator too: Locust, as `python -P -m loadtests` (loadtests/__main__.py)
        assert any(r.name == "locust" and "loadtests" in r.cmdline for r in records)
        conf = (out / "valkey" / "valkey.conf").read_text()
        assert oct((out / "valkey" / "valkey.conf").stat().st_mode & 0o777) == "0o600"
        password = next(line.split()[1] for line in conf.splitlines()
                        if line.startswith("requirepass "))
        assert len(password) >= 32
        listeners: list[str] = []
        for record in records:
            assert password not in " ".join(Path(f"/proc/{record.pid}/cmdline").read_bytes()
                                            .decode().split("\0"))
            listeners += listening_addresses(record.pid)
        # valkey, the Toxiproxy API and one proxy per worker; all loopback
        workers = sum(r.name.startswith("worker-") for r in records)
        assert len(listeners) == 2 + workers
        assert all(address.startswith("127.0.0.1:") for address in listeners), listeners
        valkey_pid = next(r.pid for r in records if r.name == "valkey")
        valkey_port = int(listening_addresses(valkey_pid)[0].rsplit(":", 1)[1])
        anonymous = redis_client(f"redis://127.0.0.1:{valkey_port}", socket_timeout=5)
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.ping()
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis_client(f"redis://127.0.0.1:{valkey_port}", password="wrong",
                          socket_timeout=5).ping()
        authed = redis_client(f"redis://127.0.0.1:{valkey_port}", password=password,
                               socket_timeout=5, decode_responses=True)
        assert authed.config_get("protected-mode") == {"protected-mode": "yes"}
        assert authed.config_get("bind")["bind"] == "127.0.0.1"
        output, _ = runner.communicate(timeout=60)
        assert runner.returncode == 0, output[-2000:]
        assert password not in output
        for path in out.rglob("*"):
            if path.is_file() and path.name != "valkey.conf":
                assert password.encode() not in path.read_bytes(), path
        assert not (out / PID_DIR).exists()  # every child stopped, every pid file removed
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_user_given_programs_are_argv0_never_a_shell_line(tmp_path: Path):
    """A path a user sets (valkey.server, toxiproxy.server) is looked up as one program; shell
    syntax in it is never run."""
    from chaos.errors import InfraError
    from chaos.network.client import NetworkError, server_command
    from chaos.runtime.valkey import valkey_server_binary
    from chaos.scenario.model import ToxiproxySettings

    marker = tmp_path / "ran"
    hostile = f"valkey-server; touch {marker}"
    with pytest.raises(InfraError, match="not an executable file"):
        valkey_server_binary(hostile)
    with pytest.raises(NetworkError, match="not an executable file"):
        server_command(ToxiproxySettings(server=f"toxiproxy-server && touch {marker}"), 1)
    kind, argv = server_command(ToxiproxySettings(server="builtin"), 8474)
    assert kind == "builtin" and argv[1:] == ["-P", "-m", "chaos.network.server", "--host",
                                              "127.0.0.1", "--port", "8474"]
    assert not marker.exists()
