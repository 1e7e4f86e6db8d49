"""What every runtime shares (docs/design.md §6): the Valkey URL and password, the per-process
Toxiproxy links, the worker and reaper command lines, clock offsets, the runner's own children.

``RuntimeBase`` is the base; ``chaos.runtime.local.LocalRuntime`` runs every process as a child
here, ``chaos.runtime.docker.DockerRuntime`` as containers. Each child runs in its own process
group, so kill, pause and resume signal the whole group (``signal_group``): a worker's heartbeat
process dies and freezes with it, as every process of a container does under ``docker kill`` /
``docker pause``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol
from urllib.parse import quote, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from chaos.errors import InfraError
from chaos.lifeline import die_with_parent, toolkit_env
from chaos.network.client import (
    Links,
    NetworkError,
    ToxicSpec,
    ToxiproxyServerInfo,
    wait_for_api,
)
from chaos.protocol.acks import ACKS_DIR
from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.protocol.clock import write_offset
from chaos.reference.config import CLAIM_GAP_SUFFIX, WorkerConfig
from chaos.reference.payload import HandlerDistribution
from chaos.runtime.pids import forget_process, record_process
from chaos.runtime.valkey import split_password
from chaos.scenario.model import Scenario

STORE_RETRIES = 40  # the runner's client retries ~15 s: longer than a restart or a failover


@dataclass(frozen=True)
class StoreFault:
    """What a store fault did, for its history event."""

    node: str  # the node killed (or demoted)
    killed_ts: int  # wall clock ms at the kill: the same host clock Valkey's TIME reads
    down_ms: int  # from the kill until the store served again
    promoted_ms: int | None = None  # failover: from the kill until Sentinel named a new primary
    new_primary: str | None = None


class Process(Protocol):
    """A child process as the runtime handles it: a ``subprocess.Popen``, or a member the fork
    server forked (``chaos.runtime.forkserver.ForkedProcess``)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


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
    process: Process
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
    # A foreign SUT's processes: each its own ACL user (named after it) and password
    sut_users: dict[str, str] = field(default_factory=dict)
    # How the runtime tells the user something mid-run (the runner's progress line)
    say: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr))

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

    # It starts the queue's processes (False: they were running before the run, attached to:
    # their connection is their start-up's end, chaos.run.startup)
    starts_members = True

    def start_timeout(self) -> float | None:
        """How long its processes have to connect (None: the runner's default for as many
        reference processes): a foreign SUT's ``sut.start_timeout_s``."""
        return self.scenario.sut.start_timeout_s if self.sut_users else None

    def admit_queue(self, queue: QueueClient, backlog: Callable[[], tuple[int, int]],
                    key_base: str) -> None:
        """Before anything is recorded: is the queue fit for this run? A run that starts its
        workers wants a queue no one has used (InfraError otherwise); the attach runtime
        checks the deployed queue its own way. ``backlog``: (waiting, leased) now;
        ``key_base``: how the queue's keys start."""
        if queue.queue_exists():
            raise InfraError(
                f"queue {queue.keys.base!r} on {self.url} already has keys; "
                "point the scenario at a fresh queue name (valkey.queue)"
            )

    def restart_valkey(self, down_ms: int) -> StoreFault:
        raise InfraError(f"valkey_restart is not supported by the {self.scenario.runtime} "
                         "runtime")

    def failover(self, mode: str, down_ms: int, timeout: float = 30.0) -> StoreFault:
        raise InfraError(f"failover is not supported by the {self.scenario.runtime} runtime")

    def wait_replicated(self, timeout: float = 30.0) -> None:
        """After a failover: until the old primary serves as the new one's replica (if any)."""
        return None  # one server: nothing replicates

    def unplanned_store_faults(self, final: bool = False) -> list[StoreFault]:
        """Failovers the store made on its own since the last call, once it serves with a
        replica again (``final``: also those still without one). Only a runtime that watches
        Sentinel (local) sees any."""
        return []

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
                "--max-stalls", str(topo.max_stalls or 0),
                *self._race_window_args()]

    def _race_window_args(self) -> list[str]:
        """nonatomic-reap: a scan-to-move window of two reap intervals. The first reaper to see
        a lapsed lease holds it that long; any other reaper scans again within one interval of
        being free (or is itself holding ids this scan sees too), so some id is always moved by
        both: the race is forced, not likely (a 100 ms window inside a 250 ms period was missed
        whenever the ticks fell apart)."""
        topo = self.scenario.topology
        if self.scenario.protocol != "nonatomic-reap" or topo.reapers < 2:
            return []
        return ["--race-window-ms", str(2 * topo.reap_interval_ms)]

    def _control_file(self, name: str) -> Path:
        path = self.run_dir / "control"
        path.mkdir(parents=True, exist_ok=True)
        return path / f"{name}.json"

    def worker_config(self, name: str, index: int, clock_file: str, ack_ledger: str,
                      control_file: str, incarnation: int = 0) -> WorkerConfig:
        """The ``index``-th reference worker's launch contract, from the scenario; each
        incarnation (a restart after a crash) draws other handler times."""
        topo = self.scenario.topology
        settings = self.scenario.valkey
        return WorkerConfig(
            url=self._valkey_url_for(name), name=name,
            keys=QueueKeys(settings.prefix, settings.queue), lease_ms=topo.lease_ms,
            heartbeat_ms=topo.effective_heartbeat_ms, heartbeat=topo.heartbeat,
            concurrency=topo.concurrency, poll_ms=topo.poll_ms,
            handler=HandlerDistribution(**topo.handler.model_dump()),
            seed=self.scenario.seed * 7919 + index + 104_729 * incarnation,
            protocol=self.scenario.protocol, clock_file=clock_file, control_file=control_file,
            ack_ledger=ack_ledger, wait_replicas=self.scenario.wait_replicas,
            completed_retention_ms=topo.completed_retention_ms)

    def worker_args(self, name: str, index: int, clock_file: str, ack_ledger: str,
                    control_file: str, incarnation: int = 0) -> list[str]:
        """``python`` arguments of the ``index``-th worker."""
        return ["-m", "chaos.reference.worker", *self.worker_config(
            name, index, clock_file, ack_ledger, control_file, incarnation).to_argv()]

    # --- a foreign SUT's processes (docs/sut.md): their environment is the whole contract ---
    def sut_user(self, name: str) -> str:
        """Create (or reset) process ``name``'s own ACL user; its password. The MONITOR
        recorder attributes each call to its caller's user (CLIENT LIST), so a foreign worker
        is identified by the URL it was given, whatever it names its connections."""
        password = self.sut_users.get(name) or secrets.token_hex(16)
        client = self.client()
        try:
            client.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}",
                                   "~*", "&*", "+@all")
        except redis.exceptions.RedisError as error:
            raise InfraError(f"cannot create the ACL user {name!r} for the SUT: {error}") \
                from None
        finally:
            client.close()
        self.sut_users[name] = password
        return password

    def forget_sut_users(self) -> None:
        """Delete the SUT's ACL users from a server the run did not start (its own server
        goes with it); best effort, at teardown."""
        if not self.sut_users or not self.scenario.valkey.url:
            return
        with contextlib.suppress(redis.exceptions.RedisError):
            client = connect(self.url, self.password)
            try:
                client.execute_command("ACL", "DELUSER", *self.sut_users)
            finally:
                client.close()
        self.sut_users.clear()

    def sut_url(self, name: str) -> str:
        """``CHAOS_VALKEY_URL`` of process ``name``: its own proxy when it has one, with the
        credentials of its own ACL user (``[sut] login = "default"``: the default user's, the
        run's password)."""
        if self.scenario.sut.login == "default":
            user, password = "default", self.password or ""
        else:
            user, password = name, self.sut_user(name)
        parts = urlsplit(self._valkey_url_for(name))
        address = parts.netloc.rsplit("@", 1)[-1]
        netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{address}"
        return urlunsplit(parts._replace(scheme="redis", netloc=netloc))

    def sut_env(self, name: str) -> dict[str, str]:
        """The environment of a foreign SUT process: the contract of docs/sut.md, and not the
        run's admin password."""
        topo, settings = self.scenario.topology, self.scenario.valkey
        env = {key: value for key, value in os.environ.items()
               if key != "ECHOMQ_VALKEY_PASSWORD" and not key.startswith("CHAOS_")}
        env.update({
            "CHAOS_VALKEY_URL": self.sut_url(name),
            "CHAOS_NAME": name,
            "CHAOS_QUEUE": settings.queue,
            "CHAOS_PREFIX": settings.prefix,
            "CHAOS_LEASE_MS": str(topo.lease_ms),
            "CHAOS_HEARTBEAT_MS": str(topo.effective_heartbeat_ms),
            "CHAOS_REAP_INTERVAL_MS": str(topo.reap_interval_ms),
            "CHAOS_REAP_LIMIT": str(topo.reap_limit),
            "CHAOS_CONCURRENCY": str(topo.concurrency),
            "CHAOS_MAX_STALLS": str(topo.max_stalls or 0),
            "CHAOS_POLL_MS": str(topo.poll_ms),
            "CHAOS_COMPLETED_RETENTION_MS": str(topo.completed_retention_ms),
        })
        return env

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

    def partition(self, name: str, fault_id: str, mode: str | None) -> Callable[[], None]:
        """Cut ``name`` off from the server; returns what heals it. Through its own proxy: a
        timeout-0 toxic both ways (``mode`` timeout: nothing passes, nothing closes; removing it
        closes those connections, so the target reconnects), or the proxy disabled (refuses
        new connections, drops open ones at once)."""
        if mode == "disable":
            self.set_link_enabled(name, False)
            return lambda: self.set_link_enabled(name, True)
        toxics = [ToxicSpec(f"{fault_id}_timeout_{stream}", "timeout", stream, {"timeout": 0})
                  for stream in ("upstream", "downstream")]
        self.add_toxics(name, toxics)
        return lambda: self.remove_toxics(name, toxics)

    def set_link_enabled(self, link: str, enabled: bool) -> None:
        try:
            self._network().set_enabled(link, enabled)
        except NetworkError as error:
            raise InfraError(str(error)) from None

    def set_clock_offset(self, name: str, offset_ms: int) -> None:
        write_offset(self._clock_file(name), offset_ms)

    # --- child processes of the runner ------------------------------------------------------
    def child_env(self) -> dict[str, str]:
        """The environment of the runner's own children (the toolkit's Python ones:
        ``chaos.lifeline.toolkit_python``); a foreign SUT's is ``sut_env``."""
        env = toolkit_env(os.environ)
        if self.password:
            env["ECHOMQ_VALKEY_PASSWORD"] = self.password  # never on a command line
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | None = None, pipes: bool = False) -> Child:
        """Start a child logging to ``logs/<name>.log``, torn down with its process group by
        ``close()`` whatever happens. A command that cannot be started is an InfraError.
        ``pipes``: its stdin and stdout are pipes to the caller (who keeps its stdout in the
        log: ``chaos.load.command``), its stderr goes to the log."""
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed in close()
        try:
            process = subprocess.Popen(
                argv, stdout=subprocess.PIPE if pipes else log,
                stderr=log if pipes else subprocess.STDOUT,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                env=self.child_env() if env is None else env, cwd=cwd, start_new_session=True,
                preexec_fn=die_with_parent,  # also for children not ours (toxiproxy-server)
            )
        except OSError as error:
            log.close()
            where = f" (in {cwd})" if cwd else ""
            raise InfraError(f"{name}: cannot start {argv[0]!r}{where}: "
                             f"{error.strerror or error}") from None
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

    def socket_owner(self, address: str) -> str | None:
        """The member whose process holds the connection of client ``address`` (as the server
        sees it); None when this runtime cannot tell (the local runtime can, for a direct
        connection: ``chaos.runtime.sockets``)."""
        return None

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

    def in_claim_gap(self, name: str, fault_id: str) -> bool:
        """Has the worker, on the claim_gap_hold order ``fault_id``, entered its claim gap?
        It says so in a file beside its control file (the reference worker's
        ``CLAIM_GAP_SUFFIX``), naming the order."""
        path = Path(f"{self._control_file(name)}{CLAIM_GAP_SUFFIX}")
        try:
            return path.read_text().strip() == fault_id
        except OSError:
            return False

    @abstractmethod
    def kill(self, name: str) -> None: ...

    @abstractmethod
    def pause(self, name: str) -> None: ...

    @abstractmethod
    def resume(self, name: str) -> None: ...

    @abstractmethod
    def stop_workers(self, timeout: float = 15.0) -> None:
        """Graceful stop of workers and reapers; Valkey and Toxiproxy stay up until close().
        Workers first, then the reapers (``wind_down_order``)."""

    def wind_down_order(self, names: Sequence[str]) -> tuple[list[str], list[str]]:
        """``names`` (the members to stop) split into what stops first, the workers (and any
        other client), and what stops once they are gone: the reapers.

        Why this order, rather than ending the judging at the drain's end: the wind-down is no
        chaos, yet the history goes on. A worker told to stop finishes the jobs it holds (the
        reference worker does, so does any graceful one), and those late completes, renewals and
        stale calls are evidence like any other: a double completion or a stray call there
        must still fail the run, which cutting the history at the drain's end would hide. What
        made that evidence lie was stopping the reaper with the workers: a worker's lease that
        lapsed while it finished was then never reaped, and its late complete read as a lease
        the reaper left unreaped (reap_prompt). With the reaper running until the last worker
        has exited, the wind-down is the queue as it really runs: a lapsed lease is reaped (a
        stale complete rejected, the job undrained), and nothing the runner did is judged as
        the queue's fault."""
        reapers = set(self.scenario.reaper_names)
        return ([name for name in names if name not in reapers],
                [name for name in names if name in reapers])

    @abstractmethod
    def close(self) -> None:
        """Tear everything down; idempotent, and runs on every exit path."""

    @abstractmethod
    def kill_now(self) -> None:
        """Kill everything at once, without waiting (a forced exit: the second Ctrl-C)."""

# Runtimes not yet closed, for kill_all_now() from a signal handler.
_LIVE_RUNTIMES: list[RuntimeBase] = []


def kill_all_now() -> None:
    for runtime in list(_LIVE_RUNTIMES):
        runtime.kill_now()


def signal_child(process: Process, signum: int) -> None:
    """Signal a child unless it was already reaped (its pid may belong to someone else now)."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)


def signal_group(process: Process, signum: int) -> None:
    """Signal a child and whatever it started (it leads its own session and group: a worker's
    heartbeat process, Locust's workers). Only while it is not reaped: until then its pid, and
    so its group id, cannot be anyone else's."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
    signal_child(process, signum)


def kill_group(process: Process) -> None:
    signal_group(process, signal.SIGKILL)
