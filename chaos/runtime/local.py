"""The local runtime: Valkey, Toxiproxy, the reaper(s) and the workers as children.

Everything binds 127.0.0.1. Each child runs in its own process group (so a terminal's Ctrl-C
reaches only the runner, which then tears down in order) and dies with the runner if the runner
itself is killed. ``close()`` is idempotent and runs on every exit path.

The reference workers and reapers are forked by the run's fork server (chaos.runtime.forkserver,
started first so it imports them while Valkey comes up); a foreign SUT's processes, Valkey and
Toxiproxy are spawned.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from chaos.errors import InfraError
from chaos.files import write_json_atomic
from chaos.network.client import ToxiproxyServerInfo, server_command, wait_for_api
from chaos.protocol.client import SENTINEL_SCHEME
from chaos.runtime import sockets
from chaos.runtime.base import Child, RuntimeBase, StoreFault, signal_child, signal_group
from chaos.runtime.forkserver import ForkServer, ForkServerError, Member, adopt_spare
from chaos.runtime.pids import forget_process, group_members, process_state, record_process
from chaos.runtime.sentinel_watch import SentinelWatch, wait_for_replica
from chaos.runtime.valkey import (
    SENTINEL_SERVICE,
    Persistence,
    ValkeyServer,
    adopt_early,
    free_port,
    single_server,
    valkey_server_binary,
)
from chaos.scenario.sut import fill


@dataclass
class LocalRuntime(RuntimeBase):
    servers: dict[str, ValkeyServer] = field(default_factory=dict)  # valkey nodes and sentinel
    watch: SentinelWatch | None = None  # with Sentinel: every primary switch, planned or not
    forkserver: ForkServer | None = None  # forks the reference workers and reapers
    _closed: bool = False

    def members(self) -> Mapping[str, Child]:
        return self.children

    def socket_owner(self, address: str) -> str | None:
        """Each member is a process group of its own (its session): the group that holds the
        socket's file descriptor is the member (a direct connection; not through a proxy)."""
        groups = {name: child.process.pid for name, child in list(self.children.items())
                  if child.alive}
        return sockets.socket_owner(address, groups)

    def start_valkey(self) -> str:
        self.start_fork_server()  # first: it imports while Valkey starts and the runner waits
        return super().start_valkey()

    def start_fork_server(self) -> None:
        """The fork server, if the scenario runs any reference worker or reaper."""
        sut = self.scenario.sut
        needed = sut.workers is None or (not sut.own_reaper and bool(self.scenario.reaper_names))
        if self.forkserver is None and needed and not self._closed:
            self.forkserver = adopt_spare() or ForkServer(self.logs / "forkserver.log")
            record_process(self.run_dir, "forkserver", self.forkserver.pid)

    def _fork_references(self, argvs: dict[str, list[str]]) -> list[Child]:
        """Reference workers or reapers, by name (each ``argv``: its ``python`` arguments,
        ``-m MODULE ...``), forked by the fork server: processes of their own, as if spawned."""
        if not argvs:
            return []
        self.start_fork_server()
        assert self.forkserver is not None
        env = self.child_env()
        assert all(argv[0] == "-m" for argv in argvs.values())
        members = [Member(name, argv[1], argv[2:], env, str(self.logs / f"{name}.log"))
                   for name, argv in argvs.items()]
        try:
            processes = self.forkserver.fork(members)
        except ForkServerError as error:
            raise InfraError(str(error)) from None
        started = []
        for member, process in zip(members, processes, strict=True):
            log = open(member.log, "ab")  # noqa: SIM115 - closed in close()
            child = self.children[member.name] = Child(member.name, process, log)
            record_process(self.run_dir, member.name, process.pid,
                           [sys.executable, *argvs[member.name]])
            started.append(child)
        return started

    def _start_own_valkey(self) -> tuple[str, str]:
        settings = self.scenario.valkey
        single = (adopt_early(self.run_dir / "valkey")
                  or single_server(self.scenario, self.run_dir))
        if single is not None:
            server = self._start_node("valkey", single)
            return server.url, server.password
        binary = valkey_server_binary(settings.server)
        persistence = Persistence(settings.appendonly, settings.appendfsync)
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
        self.watch = SentinelWatch(sentinel, self._node_at, self.servers.get,
                                   need_replica=self.scenario.wait_replicas > 0)
        self.watch.start()
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
        Sentinel for a coordinated failover (``sentinel``). Returns once a new primary serves
        (under ``wait_replicas``: with a replica online, or no WAIT can be satisfied)."""
        sentinel = self.servers.get("sentinel")
        if sentinel is None:
            raise InfraError("a failover needs valkey.replication = 'sentinel'")
        old = self._primary_name()
        if self.watch is not None:
            self.watch.expect(old)  # this switch is planned
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
        if self.scenario.wait_replicas:  # no WAIT can be satisfied before: still an outage
            wait_for_replica(self.servers[new], deadline)
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
        return self._node_at(str(port))

    def _node_at(self, port: str) -> str:
        by_port = {str(server.port): name for name, server in self.servers.items()}
        return by_port.get(port, f"port {port}")

    def unplanned_store_faults(self, final: bool = False) -> list[StoreFault]:
        if self.watch is None:
            return []
        return self.watch.unplanned(final)

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
        """The scenario's reapers: the SUT's own command, else the reference reaper; none for
        the ``no-reaper`` variant or ``sut.reaper = "none"``."""
        own, names = self.scenario.sut.own_reaper, self.scenario.reaper_names
        if own:
            return [self._spawn_sut(name, own, index) for index, name in enumerate(names, 1)]
        return self._fork_references(
            {name: self.reaper_args(name, str(self._clock_file(name))) for name in names})

    def start_workers(self) -> list[Child]:
        names = self.scenario.topology.worker_names
        if self.scenario.sut.workers is not None:
            return [self._start_worker(name) for name in names]
        return self._fork_references({name: self._worker_argv(name) for name in names})

    def _spawn_sut(self, name: str, template: list[str], index: int) -> Child:
        """A process of a foreign SUT, with the contract's environment (docs/sut.md)."""
        return self.spawn(name, fill(template, name, index), env=self.sut_env(name),
                          cwd=self.scenario.sut.cwd)

    def _start_worker(self, name: str, incarnation: int = 0) -> Child:
        index = self.scenario.topology.worker_names.index(name)
        if self.scenario.sut.workers is not None:
            return self._spawn_sut(name, self.scenario.sut.workers, index + 1)
        return self._fork_references({name: self._worker_argv(name, incarnation)})[0]

    def _worker_argv(self, name: str, incarnation: int = 0) -> list[str]:
        index = self.scenario.topology.worker_names.index(name)
        return self.worker_args(name, index, str(self._clock_file(name)),
                                str(self.ack_ledger_path(name)), str(self._control_file(name)),
                                incarnation)

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
        wait_stopped(child.process.pid)

    def resume(self, name: str) -> None:
        child = self.children[name]
        signal_group(child.process, signal.SIGCONT)
        child.paused = False

    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None:
        write_json_atomic(self._control_file(name),
                          {"kind": kind, "duration_ms": duration_ms, "fault_id": fault_id})
        signal_child(self.children[name].process, signal.SIGUSR1)

    # --- teardown -------------------------------------------------------------------------
    def stop_workers(self, timeout: float = 15.0) -> None:
        """Graceful: SIGTERM the workers (resuming frozen ones first), SIGKILL what has not
        exited after ``timeout``; then the same for the reapers, which run until the workers
        are gone (``wind_down_order``). Valkey and Toxiproxy stay up until ``close()``: the
        workers finish through them."""
        names = [name for name in self.children
                 if name not in self.servers and name != "toxiproxy"]
        for group in self.wind_down_order(names):
            self._stop_children([self.children[name] for name in group], timeout)

    def _stop_children(self, children: list[Child], timeout: float) -> None:
        for child in children:
            if child.paused:
                self.resume(child.name)
            signal_child(child.process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in children:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_child(child.process, signal.SIGKILL)
                child.process.wait()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.watch is not None:
            self.watch.stop()
        if self.links is not None:  # before the server goes: on a shared one nothing else will
            self.links.close()
        self.forget_sut_users()
        self._close_children()
        if self.forkserver is not None:  # after its members: they are gone, it ends
            self.forkserver.close()
            if self.forkserver.process.returncode is not None:
                forget_process(self.run_dir, "forkserver")
        self._retire()

    def kill_now(self) -> None:
        """SIGKILL every child and its process group at once, without waiting (a forced exit:
        the second Ctrl-C). Toxics need no removal: their server dies with the rest."""
        self._kill_children_now()
        if self.forkserver is not None:
            self.forkserver.kill_now()


# How long a pause waits for its group to be stopped (the kernel stops a process running on
# another core at its next interrupt; on a loaded machine that is not at once).
STOP_WAIT_S = 2.0


def wait_stopped(group: int) -> None:
    """Return once every process of ``group`` is stopped (or gone), so nothing the test or the
    nemesis does after a pause can be seen by the paused worker: without it, a job enqueued
    right after pausing every worker was claimed by one not yet stopped."""
    members = group_members(group)  # once: a stopping group forks nothing new
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if all(process_state(pid) in (None, "T", "t") for pid in members):
            return
        time.sleep(0.001)
