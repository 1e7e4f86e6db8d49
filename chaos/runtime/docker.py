"""The Docker runtime (docs/design.md §6): Valkey, Toxiproxy, the reaper(s) and each worker as
containers.

The same scenario, history, checker and report as the local runtime; only how a process starts,
dies and freezes differs. Every container uses host networking and binds 127.0.0.1 only, and
carries the labels ``echomq-chaos`` and ``echomq-chaos.run=<run id>``: ``close()`` removes every
container with the run's label (also ones whose creation an interrupt cut short), on every exit
path, and ``echomq-chaos clean`` removes what a killed runner left behind.

Faults: kill = ``docker kill`` (SIGKILL), pause = ``docker pause`` (the cgroup freezer, so the
whole container stops, threads and all) and ``unpause``; network faults go through the Toxiproxy
container's API exactly as locally; clock skew rewrites the offset file in the run's ``clocks/``,
which is bind-mounted into every worker and reaper.

A foreign SUT (``[sut] workers`` with ``image``, docs/sut.md) runs each of its processes as a
container of ``sut.image`` running its argv, with the contract's ``CHAOS_*`` environment (its own
ACL user's URL) and nothing of the run's: no admin password, no mounts.

The Valkey password is the run's random one and reaches containers through the environment:
Valkey reads ``requirepass`` from stdin (``valkey-server -``), so it is never on a command line.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from chaos.errors import InfraError
from chaos.files import write_json_atomic
from chaos.lifeline import toolkit_python
from chaos.network.client import ToxiproxyServerInfo, wait_for_api
from chaos.runtime.base import Child, RuntimeBase
from chaos.runtime.engine import (
    ENGINE_TIMEOUT_S,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_RUNNER,
    LABEL_TOOL,
    ResolvedImage,
    connect_engine,
    labelled,
    remove_containers,
    resolve_image,
    runner_label,
)
from chaos.runtime.valkey import free_port, wait_for_valkey
from chaos.scenario.sut import fill

LABEL_RUN_DIR = "echomq-chaos.run-dir"
CLOCKS_IN_CONTAINER = "/clocks"
ACKS_IN_CONTAINER = "/acks"  # the run's acks/: each worker's acknowledgement ledger
CONTROL_IN_CONTAINER = "/control"  # the run's control/: faults a worker applies to itself
STATE_REFRESH_S = 0.2  # the runner asks who is alive every loop: one list call per this
# Valkey in the container: config from stdin, password from the environment.
VALKEY_SCRIPT = """exec valkey-server - --port {port} --bind 127.0.0.1 --protected-mode yes \\
  --save '' {persistence} --maxmemory-policy noeviction <<EOF
requirepass $ECHOMQ_VALKEY_PASSWORD
EOF
"""
_EXITED = re.compile(r"Exited \((-?\d+)\)")


@dataclass
class ContainerMember:
    """One container of the run, with its state as of the last refresh."""

    name: str
    container: Container
    runtime: DockerRuntime = field(repr=False)
    paused: bool = False
    killed: bool = False  # by a fault, on purpose
    expected_exit: bool = False

    @property
    def alive(self) -> bool:
        state, _ = self.runtime.state_of(self.name)
        return state in ("created", "running", "paused", "restarting")

    @property
    def exit_code(self) -> int | None:
        return self.runtime.state_of(self.name)[1]


@dataclass
class DockerRuntime(RuntimeBase):
    run_id: str = field(default_factory=lambda: secrets.token_hex(6))
    containers: dict[str, ContainerMember] = field(default_factory=dict)
    images: dict[str, ResolvedImage] = field(default_factory=dict)
    engine_version: str = ""
    _engine: docker.DockerClient | None = None
    _states: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    _states_at: float = 0.0
    _closed: bool = False
    # Containers being created (start_workers runs in threads): close() waits for them, or an
    # interrupt during set-up could remove the run's containers while one more is on its way.
    _starting: int = 0
    _starting_lock: threading.Lock = field(default_factory=threading.Lock)
    # How each container ended (taken in close(), before removal): evidence for the report.
    final_states: dict[str, dict[str, object]] = field(default_factory=dict)

    # --- engine and images ----------------------------------------------------------------
    @property
    def engine(self) -> docker.DockerClient:
        if self._engine is None:
            self._engine = connect_engine()
            self.engine_version = str(self._engine.version().get("Version", "?"))
        return self._engine

    def image(self, role: str) -> str:
        if role not in self.images:
            settings = self.scenario.docker
            official, offline = {
                "valkey": (settings.valkey_image, settings.valkey_offline_image),
                "toxiproxy": (settings.toxiproxy_image, settings.toxiproxy_offline_image),
                "worker": (settings.worker_image, None),
                "sut": (self.scenario.sut.image or "", None),
            }[role]
            self.images[role] = resolve_image(self.engine, role, official, offline)
        return self.images[role].name

    def describe(self) -> dict[str, object]:
        return {"kind": "docker", "engine": self.engine_version, "run_id": self.run_id,
                "images": {role: image.as_dict() for role, image in self.images.items()},
                "containers": self.final_states}

    def members(self) -> Mapping[str, ContainerMember | Child]:
        """The containers, and the runner's own children (Locust, when it drives the load)."""
        return {**self.containers, **self.children}

    # --- containers -------------------------------------------------------------------------
    def _run(self, name: str, image: str, *, entrypoint: list[str] | None, command: list[str],
             mounts: dict[str, dict[str, str]] | None = None,
             sut_env: dict[str, str] | None = None) -> ContainerMember:
        """``sut_env``: a foreign SUT's process, with that environment only."""
        environment = {"PYTHONUNBUFFERED": "1"} if sut_env is None else sut_env
        # valkey.url without a password: the one in the runner's environment, as locally
        password = self.password or os.environ.get("ECHOMQ_VALKEY_PASSWORD")
        if password and sut_env is None:
            environment["ECHOMQ_VALKEY_PASSWORD"] = password  # never on a command line
        labels = {LABEL_TOOL: "1", LABEL_RUN: self.run_id, LABEL_ROLE: name,
                  LABEL_RUN_DIR: str(self.run_dir.resolve()), LABEL_RUNNER: runner_label()}
        with self._starting_lock:
            self._starting += 1
        try:
            container = self.engine.containers.run(
                image, command=command, entrypoint=entrypoint, detach=True,
                name=f"emqc-{self.run_id}-{name}", labels=labels, environment=environment,
                network_mode="host", volumes=mounts or {}, stop_signal="SIGTERM")
        except docker.errors.DockerException as error:
            raise InfraError(f"starting container {name} from {image}: {error}") from None
        finally:
            with self._starting_lock:
                self._starting -= 1
        member = ContainerMember(name, container, self)
        self.containers[name] = member
        self._states[name] = ("running", None)
        return member

    def state_of(self, name: str) -> tuple[str, int | None]:
        """(state, exit code) of a container, refreshed for all of them at most every 0.2 s."""
        now = time.monotonic()
        if now - self._states_at >= STATE_REFRESH_S and not self._closed:
            self._states_at = now
            try:
                listed = self.engine.api.containers(
                    all=True, filters={"label": f"{LABEL_RUN}={self.run_id}"})
            except docker.errors.DockerException as error:
                raise InfraError(f"Docker engine: {error}") from None
            states: dict[str, tuple[str, int | None]] = {}
            for entry in listed:
                role = (entry.get("Labels") or {}).get(LABEL_ROLE, "")
                exited = _EXITED.search(entry.get("Status", ""))
                states[role] = (entry.get("State", "?"), int(exited[1]) if exited else None)
            self._states = {name: states.get(name, ("removed", None)) for name in self.containers}
        return self._states.get(name, ("removed", None))

    def log_tail(self, name: str, chars: int = 1500) -> str:
        member = self.containers.get(name)
        if member is None:
            return super().log_tail(name, chars)
        with contextlib.suppress(docker.errors.DockerException):
            return member.container.logs().decode(errors="replace")[-chars:]
        return ""

    # --- Valkey and Toxiproxy -----------------------------------------------------------------
    def _start_own_valkey(self) -> tuple[str, str]:
        image = self.image("valkey")
        self.password = secrets.token_hex(16)
        settings = self.scenario.valkey
        persistence = (f"--appendonly yes --appendfsync {settings.appendfsync}"
                       if settings.appendonly else "--appendonly no")
        for _ in range(5):  # a free port can be taken between probe and bind: try another
            port = free_port()
            url = f"valkey://127.0.0.1:{port}/0"
            member = self._run("valkey", image, entrypoint=["sh", "-c"],
                               command=[VALKEY_SCRIPT.format(port=port,
                                                             persistence=persistence)])
            if wait_for_valkey(url, self.password, partial(self._running, member), timeout=20):
                return url, self.password
            self._collect_log(member)
            remove_containers([member.container])
            del self.containers["valkey"]
        raise InfraError(f"Valkey container ({image}) did not start; its log ends:\n"
                         f"{super().log_tail('valkey')}")

    def _running(self, member: ContainerMember) -> bool:
        with contextlib.suppress(docker.errors.NotFound):
            member.container.reload()
            return member.container.status in ("created", "running")
        return False

    def _start_own_toxiproxy(self) -> ToxiproxyServerInfo:
        image = self.image("toxiproxy")
        port = free_port()
        # The official image's flags; the offline stand-in (chaos.network.server) takes them too.
        command = ["-host=127.0.0.1", f"-port={port}"]
        member = self._run("toxiproxy", image, entrypoint=None, command=command)
        api_url = f"http://127.0.0.1:{port}"
        version = wait_for_api(api_url, alive=lambda: self._running(member), timeout=30.0)
        return ToxiproxyServerInfo("docker", api_url, version, [image, *command])

    # --- workers and reaper -------------------------------------------------------------------
    def _python(self, name: str, args: list[str]) -> ContainerMember:
        acks = self.ack_ledger_path(name).parent
        acks.mkdir(parents=True, exist_ok=True)
        mounts = {str(self.clocks.resolve()): {"bind": CLOCKS_IN_CONTAINER, "mode": "ro"},
                  str(acks.resolve()): {"bind": ACKS_IN_CONTAINER, "mode": "rw"},
                  str(self._control_file(name).parent.resolve()): {
                      "bind": CONTROL_IN_CONTAINER, "mode": "ro"}}
        python = toolkit_python(*args, python="python3")  # the image's (3.11), safe-path mode
        return self._run(name, self.image("worker"), entrypoint=python[:1], command=python[1:],
                         mounts=mounts)

    def _clock_in_container(self, name: str) -> str:
        return f"{CLOCKS_IN_CONTAINER}/{self._clock_file(name).name}"

    def _sut(self, name: str, template: list[str], index: int) -> ContainerMember:
        """A process of a foreign SUT: its argv in a container of ``sut.image``. Only the
        contract's variables (and the Node example's switches, ECHOMQ_NODE_*, docs/sut.md)
        cross into the container: the host's PATH, HOME or paths mean nothing in it."""
        env = {key: value for key, value in self.sut_env(name).items()
               if key.startswith(("CHAOS_", "ECHOMQ_NODE_"))}
        argv = fill(template, name, index)
        return self._run(name, self.image("sut"), entrypoint=argv[:1], command=argv[1:],
                         sut_env=env)

    def start_reapers(self) -> list[ContainerMember]:
        own = self.scenario.sut.own_reaper
        return [self._sut(name, own, index) if own else
                self._python(name, self.reaper_args(name, self._clock_in_container(name)))
                for index, name in enumerate(self.scenario.reaper_names, 1)]

    def start_workers(self) -> list[ContainerMember]:
        names = self.scenario.topology.worker_names
        self.image("sut" if self.scenario.sut.foreign else "worker")  # once, before the pool
        # Containers start in parallel: one by one, a dozen would take seconds.
        with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
            return list(pool.map(self._start_worker, names))

    def _start_worker(self, name: str, incarnation: int = 0) -> ContainerMember:
        index = self.scenario.topology.worker_names.index(name)
        if self.scenario.sut.workers is not None:
            return self._sut(name, self.scenario.sut.workers, index + 1)
        return self._python(name, self.worker_args(
            name, index, self._clock_in_container(name),
            f"{ACKS_IN_CONTAINER}/{self.ack_ledger_path(name).name}",
            f"{CONTROL_IN_CONTAINER}/{self._control_file(name).name}", incarnation))

    def restart_worker(self, name: str, incarnation: int = 0) -> ContainerMember:
        """A new container for a worker whose container died (its log is kept first)."""
        old = self.containers[name]
        if old.alive:
            raise InfraError(f"{name} is still running")
        self._collect_log(old)
        remove_containers([old.container])
        return self._start_worker(name, incarnation)

    # --- faults ---------------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        member = self.containers[name]
        member.killed = True
        try:
            member.container.kill()  # SIGKILL
            member.container.wait(timeout=10)
        except docker.errors.DockerException as error:
            raise InfraError(f"docker kill {name}: {error}") from None
        self._states_at = 0.0  # the next look sees it gone

    def pause(self, name: str) -> None:
        member = self.containers[name]
        try:
            member.container.pause()  # the cgroup freezer: every thread stops at once
            member.container.reload()
        except docker.errors.DockerException as error:
            raise InfraError(f"docker pause {name}: {error}") from None
        if member.container.status != "paused":
            raise InfraError(f"docker pause {name}: the engine reports it "
                             f"{member.container.status}, not paused")
        member.paused = True

    def resume(self, name: str) -> None:
        member = self.containers[name]
        try:
            member.container.unpause()
        except docker.errors.DockerException as error:
            raise InfraError(f"docker unpause {name}: {error}") from None
        member.paused = False

    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None:
        """The order in the worker's control file (bind-mounted), then SIGUSR1 to it."""
        write_json_atomic(self._control_file(name),
                          {"kind": kind, "duration_ms": duration_ms, "fault_id": fault_id})
        try:
            self.containers[name].container.kill(signal="SIGUSR1")
        except docker.errors.DockerException as error:
            raise InfraError(f"docker kill -s USR1 {name}: {error}") from None

    # --- teardown ---------------------------------------------------------------------------------
    def stop_workers(self, timeout: float = 15.0) -> None:
        """SIGTERM every worker at once (thawing frozen ones first), then every reaper: the
        reapers run until the workers are gone (``wind_down_order``); the engine SIGKILLs what
        has not exited after ``timeout``."""
        names = [name for name in self.containers if name not in ("valkey", "toxiproxy")]

        def stop(member: ContainerMember) -> None:
            with contextlib.suppress(docker.errors.NotFound):
                if member.paused:
                    self.resume(member.name)
                member.container.stop(timeout=int(timeout))

        for group in self.wind_down_order(names):
            if group:
                with ThreadPoolExecutor(max_workers=min(8, len(group))) as pool:
                    list(pool.map(stop, [self.containers[name] for name in group]))

    def _collect_log(self, member: ContainerMember) -> None:
        with contextlib.suppress(docker.errors.DockerException, OSError):
            (self.logs / f"{member.name}.log").write_bytes(member.container.logs())

    def _final_state(self, member: ContainerMember) -> dict[str, object]:
        with contextlib.suppress(docker.errors.DockerException):
            member.container.reload()
            state = member.container.attrs.get("State", {})
            return {"status": state.get("Status"), "exit_code": state.get("ExitCode"),
                    "killed_by_fault": member.killed, "oom_killed": state.get("OOMKilled")}
        return {"status": "gone", "killed_by_fault": member.killed}

    def close(self) -> None:
        """Save each container's log, then remove every container with this run's label.
        A second Ctrl-C meanwhile is ignored: it must not leave containers behind."""
        if self._closed:
            return
        self._closed = True
        with _signals_ignored():
            if self.links is not None:
                self.links.close()
            self.forget_sut_users()  # from a server the run did not start
            if self._engine is not None:
                for member in self.containers.values():
                    self._collect_log(member)
                    self.final_states[member.name] = self._final_state(member)
                remove_containers(labelled(self._engine, self.run_id))
                deadline = time.monotonic() + ENGINE_TIMEOUT_S
                while self._starting and time.monotonic() < deadline:
                    time.sleep(0.05)
                remove_containers(labelled(self._engine, self.run_id))  # any late arrival
                self._engine.close()
            self._close_children()
        self._retire()

    def kill_now(self) -> None:
        """Remove every container of the run at once (``docker rm -f``: SIGKILL), no logs."""
        self._kill_children_now()
        if self._engine is not None:
            with contextlib.suppress(InfraError, docker.errors.DockerException):
                remove_containers(labelled(self._engine, self.run_id))


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, signal.SIG_IGN)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
