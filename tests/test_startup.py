"""What `run` starts before it knows it needs it (docs/running.md, start-up): its own
valkey-server, launched while the runner imports, and the spare fork server. Each is either
adopted by the run or stopped; neither outlives the runner. Real processes."""

from __future__ import annotations

from pathlib import Path

from procs import wait_until

from chaos.runtime import forkserver
from chaos.runtime.pids import start_ticks
from chaos.runtime.valkey import ValkeyServer, adopt_early, discard_early, valkey_server_binary
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def _server(tmp_path: Path) -> ValkeyServer:
    return ValkeyServer(valkey_server_binary(None), tmp_path / "data", tmp_path / "valkey.log")


def test_a_launched_server_is_waited_for_by_start_and_then_serves(tmp_path: Path):
    server = _server(tmp_path)
    server.launch()
    launched = server._launched
    assert launched is not None and server.process is None  # not waited for yet
    server.start()
    try:
        assert server.process is launched[0]  # the same process, adopted, not a second one
        with server.client() as client:
            assert client.ping()
    finally:
        server.stop()


def test_a_launched_server_never_adopted_is_stopped(tmp_path: Path):
    server = _server(tmp_path)
    server.launch()
    assert server._launched is not None
    process = server._launched[0]
    server.stop()
    assert process.poll() is not None and server._launched is None


def test_run_launches_its_server_early_and_the_runtime_adopts_it_by_its_data_dir(
        tmp_path: Path):
    from chaos.runtime import valkey

    scenario = load_scenario(str(ROOT / "benchmarks" / "scenarios" / "startup-8.toml"), [])
    valkey.launch_early(scenario, tmp_path)
    try:
        assert adopt_early(tmp_path / "elsewhere") is None
        server = adopt_early(tmp_path / "valkey")
        assert server is not None and server._launched is not None
        assert adopt_early(tmp_path / "valkey") is None  # adopted once
        server.start()
        with server.client() as client:
            assert client.ping()
        server.stop()
    finally:
        discard_early()
    # Not adopted: discard_early stops it.
    valkey.launch_early(scenario, tmp_path / "second")
    (early,) = valkey._early.values()
    assert early._launched is not None
    process = early._launched[0]
    discard_early()
    assert process.poll() is not None


def test_a_spare_fork_server_is_adopted_once_or_ended():
    forkserver.prestart()
    spare = forkserver.adopt_spare()
    assert spare is not None and spare.process.poll() is None
    assert forkserver.adopt_spare() is None
    spare.close()
    forkserver.prestart()
    (unused,) = forkserver._spare
    pid = unused.pid
    forkserver.discard_spare()
    assert unused.process.returncode is not None
    wait_until(lambda: start_ticks(pid) is None, "the spare fork server gone")
