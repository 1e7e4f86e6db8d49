"""How the attach runtime acts on a member of a deployed queue (docs/attach.md): its driver.

- ``DockerDriver``: one container, found by name or by labels (exactly one match) on a Docker
  engine given by URL (``unix://``, ``tcp://``, ``ssh://`` through the ``ssh`` client), and
  acted on by its id from then on: ``kill`` (SIGKILL), ``pause`` / ``unpause`` (the cgroup
  freezer), ``start`` (a killed one, at the end of the run). Several engines in one run: one
  client per URL (``Engines``).
- ``CommandDriver``: argv templates, no shell: each placeholder filled from the member (``{name}``,
  ``{role}``), its fixed ``values`` and its ``lookup`` commands (run before each action; the
  first line of stdout is the value). A command that fails (exit status, timeout) is an
  ``InfraError`` naming the member, the action, the argv and the end of its output.

Either runs the member's ``partition`` / ``heal`` templates when it has them. Every action is
one line of ``logs/attach-actions.jsonl`` (``ActionLog``): when, whom, what, how it went. The
commands get the runner's environment less ``ECHOMQ_VALKEY_PASSWORD``: they act on processes,
never on the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
from docker.models.containers import Container

from chaos.errors import InfraError
from chaos.runtime.engine import ENGINE_TIMEOUT_S, engine_address
from chaos.scenario.attach import Attach, Member, fill

STATE_REFRESH_S = 0.2  # the runner asks who is alive every loop: one inspect per this
OUTPUT_KEPT = 600  # characters of a command's output kept in the log and in an error


class ActionLog:
    """``logs/attach-actions.jsonl``: one line per action on a member, written as it ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._handle: IO[str] | None = None

    def write(self, member: str, action: str, how: str, ok: bool, started: float,
              output: str = "") -> None:
        if self._handle is None:
            self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - close()
        self.count += 1
        self._handle.write(json.dumps({
            "at_ms": int(time.time() * 1000), "member": member, "action": action, "how": how,
            "ok": ok, "ms": round((time.monotonic() - started) * 1000, 1),
            **({"output": output[-OUTPUT_KEPT:]} if output else {})}) + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class Driver(ABC):
    """What the attach runtime asks of a member's driver."""

    def __init__(self, member: Member, attach: Attach, log: ActionLog) -> None:
        self.member = member
        self.attach = attach
        self.log = log

    @property
    def name(self) -> str:
        return self.member.name

    @abstractmethod
    def find(self) -> None:
        """Where is it? InfraError when it is not there, or not fit to be attached to."""

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...

    def builtin_values(self) -> dict[str, str]:
        return {"name": self.member.name, "role": self.member.role}

    def values_now(self) -> dict[str, str]:
        """Every placeholder's value now: fixed ones, and each lookup command's answer."""
        values = {**self.builtin_values(), **self.attach.values(self.member)}
        for key, argv in self.attach.lookups(self.member).items():
            output = self._run(f"lookup {key}", fill(argv, values))
            line = next((line.strip() for line in output.splitlines() if line.strip()), "")
            if not line:
                raise InfraError(f"{self.name}: lookup {key} printed nothing: "
                                 f"{shlex.join(fill(argv, values))}")
            values[key] = line
        return values

    def _run(self, action: str, argv: list[str]) -> str:
        """Run one command (no shell); its stdout. A failure is an InfraError that says which."""
        how = shlex.join(argv)
        env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_VALKEY_PASSWORD"}
        started = time.monotonic()
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, errors="replace", env=env,
                                  timeout=self.attach.command_timeout_s)
        except subprocess.TimeoutExpired:
            self.log.write(self.name, action, how, False, started, "timed out")
            raise InfraError(f"{self.name}: {action}: `{how}` did not finish within "
                             f"{self.attach.command_timeout_s:g} s "
                             "(attach.command_timeout_s)") from None
        except OSError as error:
            self.log.write(self.name, action, how, False, started, str(error))
            raise InfraError(f"{self.name}: {action}: cannot run `{how}`: "
                             f"{error.strerror or error}") from None
        output = (done.stdout + done.stderr).strip()
        self.log.write(self.name, action, how, done.returncode == 0, started, output)
        if done.returncode != 0:
            raise InfraError(f"{self.name}: {action}: `{how}` exited {done.returncode}"
                             + (f": {output[-OUTPUT_KEPT:]}" if output else ""))
        return done.stdout

    def _template(self, action: str, values: dict[str, str]) -> list[str] | None:
        argv = self.attach.template(self.member, action)
        return None if argv is None else fill(argv, values)

    def _command(self, action: str, values: dict[str, str]) -> None:
        argv = self._template(action, values)
        if argv is None:
            raise InfraError(f"{self.name}: no {action} command (attach.members.N.{action} or "
                             f"attach.command.{action})")
        self._run(action, argv)

    # --- the actions: the command driver's by default --------------------------------------------
    def alive(self, killed: bool) -> bool:
        return not killed  # a command member is as alive as the run left it

    def exit_code(self) -> int | None:
        return None

    @property
    def can_restart(self) -> bool:
        return self.attach.template(self.member, "restart") is not None

    def kill(self) -> None:
        self._command("kill", self.values_now())

    def pause(self, values: dict[str, str]) -> None:
        self._command("pause", values)

    def resume(self, values: dict[str, str]) -> None:
        self._command("resume", values)

    def partition(self, values: dict[str, str]) -> None:
        self._command("partition", values)

    def heal(self, values: dict[str, str]) -> None:
        self._command("heal", values)

    def restart(self) -> None:
        self._command("restart", self.values_now())

    def by_hand(self, action: str, values: dict[str, str]) -> str:
        """The command that undoes ``action``'s fault, for a person to run."""
        known = {key: "{" + key + "}" for key in self.attach.known_placeholders(self.member)}
        with contextlib.suppress(AssertionError):  # a docker member not found yet
            known.update(self.builtin_values())
        argv = self._template(action, {**known, **self.attach.values(self.member), **values})
        return shlex.join(argv) if argv else f"({action} {self.name} as your deployment does)"

    def log_tail(self, chars: int) -> str:
        return ""


class CommandDriver(Driver):
    def find(self) -> None:
        """The lookups answer (a member that cannot be found fails now, not at its fault)."""
        self.values_now()

    def describe(self) -> dict[str, Any]:
        return {"driver": "command", "values": self.attach.values(self.member),
                **{action: argv for action in ("kill", "pause", "resume", "partition", "heal",
                                               "restart")
                   if (argv := self.attach.template(self.member, action)) is not None}}


class Engines:
    """One Docker client per engine URL, made when a member first needs it."""

    def __init__(self) -> None:
        self.clients: dict[str, docker.DockerClient] = {}
        self.versions: dict[str, str] = {}

    def get(self, url: str, member: str) -> docker.DockerClient:
        if url not in self.clients:
            try:
                client = docker.DockerClient(base_url=url, timeout=ENGINE_TIMEOUT_S,
                                             use_ssh_client=url.startswith("ssh://"))
                self.versions[url] = str(client.version().get("Version", "?"))
            except docker.errors.DockerException as error:
                raise InfraError(f"{member}: no Docker engine answering at {url} "
                                 f"({_first_line(error)})") from None
            self.clients[url] = client
        return self.clients[url]

    def close(self) -> None:
        for client in self.clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self.clients.clear()


class DockerDriver(Driver):
    def __init__(self, member: Member, attach: Attach, engines: Engines, log: ActionLog) -> None:
        super().__init__(member, attach, log)
        self.url = member.engine or engine_address()
        self.engines = engines
        self.container: Container | None = None
        self._state: tuple[str, int | None] = ("running", None)
        self._state_at = 0.0

    @property
    def _container(self) -> Container:
        assert self.container is not None, "find() first"
        return self.container

    def find(self) -> None:
        client = self.engines.get(self.url, self.name)
        member = self.member
        try:
            if member.container is not None:
                try:
                    found = [client.containers.get(member.container)]
                except docker.errors.NotFound:
                    found = []
                what = f"container {member.container!r}"
            else:
                labels = [f"{key}={value}" for key, value in (member.labels or {}).items()]
                found = client.containers.list(all=True, filters={"label": labels})
                what = f"a container labelled {','.join(labels)}"
        except docker.errors.DockerException as error:
            raise InfraError(f"{self.name}: finding it on {self.url}: "
                             f"{_first_line(error)}") from None
        if len(found) != 1:
            names = ", ".join(sorted(str(c.name) for c in found))
            raise InfraError(f"{self.name}: {len(found)} matches for {what} on {self.url}"
                             + (f" ({names}); the labels must pick exactly one" if found else
                                "; is it deployed there?"))
        container = self.container = found[0]
        if container.status == "paused":
            raise InfraError(f"{self.name}: container {container.name} on {self.url} is paused "
                             "(left frozen by a run killed outright?); the run thaws only what "
                             f"it froze: `docker -H {self.url} unpause {container.name}` first")
        if container.status != "running":
            raise InfraError(f"{self.name}: container {container.name} on {self.url} is "
                             f"{container.status}, not running; start it first")

    def describe(self) -> dict[str, Any]:
        found = self.container
        return {"driver": "docker", "engine": self.url,
                "engine_version": self.engines.versions.get(self.url, "?"),
                "container": found.name if found is not None else None,
                "id": found.short_id if found is not None else None,
                **({"labels": self.member.labels} if self.member.labels else {}),
                **{action: argv for action in ("partition", "heal")
                   if (argv := self.attach.template(self.member, action)) is not None}}

    def builtin_values(self) -> dict[str, str]:
        return {**super().builtin_values(), "engine": self.url,
                "container": str(self._container.name)}

    def _engine_call(self, action: str, how: str, call: Any) -> None:
        started = time.monotonic()
        try:
            call()
        except InfraError as error:
            self.log.write(self.name, action, how, False, started, str(error))
            raise InfraError(f"{self.name}: {how}: {error}") from None
        except docker.errors.DockerException as error:
            self.log.write(self.name, action, how, False, started, _first_line(error))
            raise InfraError(f"{self.name}: {how}: {_first_line(error)}") from None
        except Exception as error:  # the SDK lets requests' timeouts through
            self.log.write(self.name, action, how, False, started, str(error))
            raise InfraError(f"{self.name}: {how}: {type(error).__name__}: {error}") from None
        self.log.write(self.name, action, how, True, started)
        self._state_at = 0.0  # the next look sees what it did

    def _how(self, verb: str) -> str:
        return f"docker -H {self.url} {verb} {self._container.name}"

    def alive(self, killed: bool) -> bool:
        return self._refresh()[0] in ("created", "running", "paused", "restarting")

    def exit_code(self) -> int | None:
        return self._refresh()[1]

    def _refresh(self) -> tuple[str, int | None]:
        now = time.monotonic()
        if now - self._state_at >= STATE_REFRESH_S and self.container is not None:
            self._state_at = now
            try:
                client = self.engines.get(self.url, self.name)
                state = client.api.inspect_container(self.container.id)["State"]
                self._state = (str(state.get("Status", "?")),
                               None if state.get("Running") else state.get("ExitCode"))
            except docker.errors.NotFound:
                self._state = ("removed", None)
            except docker.errors.DockerException as error:
                raise InfraError(f"{self.name}: Docker engine {self.url}: "
                                 f"{_first_line(error)}") from None
        return self._state

    @property
    def can_restart(self) -> bool:
        return True

    def kill(self) -> None:
        container = self._container

        def kill() -> None:
            container.kill()  # SIGKILL
            container.wait(timeout=10)

        self._engine_call("kill", self._how("kill"), kill)

    def pause(self, values: dict[str, str]) -> None:
        container = self._container

        def pause() -> None:
            container.pause()
            container.reload()
            if container.status != "paused":
                raise InfraError(f"the engine reports it {container.status}, not paused")

        self._engine_call("pause", self._how("pause"), pause)

    def resume(self, values: dict[str, str]) -> None:
        if self._status() == "paused":  # a pause that failed half-way may have left it running
            self._engine_call("resume", self._how("unpause"), self._container.unpause)

    def restart(self) -> None:
        if self._status() != "running":
            self._engine_call("restart", self._how("start"), self._container.start)

    def _status(self) -> str:
        try:
            self._container.reload()
        except docker.errors.DockerException as error:
            raise InfraError(f"{self.name}: Docker engine {self.url}: "
                             f"{_first_line(error)}") from None
        return str(self._container.status)

    def by_hand(self, action: str, values: dict[str, str]) -> str:
        if action in ("resume", "restart"):
            return self._how("unpause" if action == "resume" else "start")
        return super().by_hand(action, values)

    def log_tail(self, chars: int) -> str:
        with contextlib.suppress(docker.errors.DockerException):
            return str(self._container.logs(tail=50).decode(errors="replace"))[-chars:]
        return ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
