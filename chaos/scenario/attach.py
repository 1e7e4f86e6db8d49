"""``runtime = "attach"`` (docs/attach.md): a queue already deployed. The run starts nothing of
it; the scenario names the server (``[valkey] url``, the password from ``ECHOMQ_VALKEY_PASSWORD``)
and its members, each with the driver that applies its faults:

- ``docker``: a container, by name or by labels, on a Docker engine given by URL (``unix://``,
  ``tcp://``, ``ssh://``; members may sit on different engines): ``docker kill``, ``docker
  pause`` / ``unpause``, ``docker start`` to bring a killed one back at the end;
- ``command``: argv templates run without a shell (``kill``, ``pause`` and ``resume``,
  ``partition`` and ``heal``, ``restart``), with placeholders filled from the member
  (``{name}``, ``{role}``), its ``values`` and its ``lookup`` commands (each prints one
  placeholder's value, e.g. a Kubernetes pod's name), run again before every action.

Either driver may carry ``partition`` and ``heal`` templates: the member's network is the
deployment's own, so a partition is whatever those commands do (a Toxiproxy toxic on a proxy the
member already uses, a NetworkPolicy); without them a member cannot be cut off, and the other
network faults (latency, bandwidth, ...) are refused for an attached queue.

This module is the declaration and its checks (and the words ``run --dry-run`` prints); what
the drivers do is ``chaos.runtime.attach``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from chaos.scenario.fields import Strict

NAME = r"^[A-Za-z0-9_.-]+$"
# "{word}" is a placeholder; "{{" and "}}" are literal braces; any other brace is left as it is
# (a kubectl JSONPath such as {.items[0].metadata.name} passes through untouched).
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
BUILTIN_PLACEHOLDERS = ("name", "role")
DOCKER_PLACEHOLDERS = ("container", "engine")  # a docker member's, once it is found
COMMANDS = ("kill", "pause", "resume", "partition", "heal", "restart")
# The fault kinds an attached member can take, and the action each needs of its driver.
ACTION_OF_KIND = {"kill": "kill", "pause": "pause", "partition": "partition"}
ENGINE_SCHEMES = ("unix://", "tcp://", "ssh://")
DEFAULT_ENGINE = "DOCKER_HOST, else unix:///var/run/docker.sock"

Argv = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
Values = dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str]
Lookups = dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], Argv]


def placeholders(argv: list[str]) -> list[str]:
    """The placeholder names an argv template uses, in order."""
    return [match.group(1) for part in argv for match in PLACEHOLDER.finditer(part)
            if match.group(1)]


def fill(argv: list[str], values: dict[str, str]) -> list[str]:
    """An argv template with its placeholders filled (every one must be in ``values``)."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) in ("{{", "}}"):
            return match.group(0)[0]
        return values[match.group(1)]

    return [PLACEHOLDER.sub(one, part) for part in argv]


class Commands(Strict):
    """Argv templates (no shell runs them), and where their placeholders come from."""

    kill: Argv | None = None  # the member dies (SIGKILL, kubectl delete pod --force ...)
    pause: Argv | None = None  # it freezes (SIGSTOP, docker pause ...): resume must undo it
    resume: Argv | None = None
    partition: Argv | None = None  # it is cut off from the server: heal must undo it
    heal: Argv | None = None
    restart: Argv | None = None  # at the end of the run, brings back a member a kill took down
    values: Values = {}  # placeholder -> a fixed value (a pid, a namespace)
    lookup: Lookups = {}  # placeholder -> a command printing its value (first line of stdout)


class Member(Commands):
    """``[[attach.members]]``: one process of the deployed queue, named as its connections are
    (its ACL user, or the client name it sets: how the recorder knows its calls)."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=NAME)]
    role: Literal["worker", "reaper"] = "worker"
    driver: Literal["docker", "command"]
    # docker: the engine's URL (default: DOCKER_HOST, else the local socket), and the
    # container by its name or by labels that match it and no other
    engine: str | None = None
    container: str | None = None
    labels: dict[str, str] | None = None

    @field_validator("engine")
    @classmethod
    def _engine_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(ENGINE_SCHEMES):
            raise ValueError(f"expected a Docker engine URL starting with "
                             f"{', '.join(ENGINE_SCHEMES)}")
        return value

    @model_validator(mode="after")
    def _driver_fields(self) -> Member:
        if self.driver == "docker":
            if (self.container is None) == (self.labels is None):
                raise ValueError(f"member {self.name!r}: a docker member names its container "
                                 "by container = NAME or by labels = {KEY = VALUE, ...} "
                                 "(one of the two)")
            if self.labels is not None and not self.labels:
                raise ValueError(f"member {self.name!r}: labels = {{}} would match every "
                                 "container; name at least one label")
            process = [command for command in ("kill", "pause", "resume", "restart")
                       if getattr(self, command) is not None]
            if process:
                raise ValueError(f"member {self.name!r}: {', '.join(process)}: the docker "
                                 "driver kills, pauses, resumes and restarts through the "
                                 "engine; only partition and heal commands are its own")
        else:
            docker = [field for field in ("engine", "container", "labels")
                      if getattr(self, field) is not None]
            if docker:
                raise ValueError(f"member {self.name!r}: {', '.join(docker)}: a docker "
                                 "member's field; this member's driver is 'command'")
        return self


class Attach(Strict):
    """``[attach]``: the deployed queue's members, and how carefully the run attaches."""

    members: Annotated[list[Member], Field(min_length=1)]
    # Templates every command member uses unless it gives its own ("values" and "lookup"
    # merge, the member's winning); partition and heal also apply to docker members.
    command: Commands = Commands()
    # Attach even to a queue holding jobs, or with connections on its keys (or named like
    # the members) the scenario does not name; `run --force` does the same.
    force: bool = False
    # How long the run watches the server (MONITOR) for callers of the queue's keys before it
    # starts; 0: only CLIENT LIST's names are checked.
    probe_ms: Annotated[int, Field(ge=0, le=60_000)] = 1_000
    # A member all of whose connections have been idle longer than this is refused (frozen
    # or cut off: a fault left behind?); 0: not checked.
    idle_limit_ms: Annotated[int, Field(ge=0, le=86_400_000)] = 10_000
    command_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    # At the end of the run, bring back each member a kill took down (docker start, or the
    # member's restart command); false: leave that to the deployment's supervisor.
    restart_killed: bool = True
    # Each member must have a connection in CLIENT LIST within this long.
    connect_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0

    @model_validator(mode="after")
    def _members(self) -> Attach:
        names = [member.name for member in self.members]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"members: {', '.join(map(repr, twice))} named more than once")
        if not any(member.role == "worker" for member in self.members):
            raise ValueError("members: no member with role = 'worker'; the run needs workers "
                             "to judge")
        for index, member in enumerate(self.members):
            where = f"members.{index} ({member.name})"
            for command in COMMANDS:
                argv = self.template(member, command)
                if argv is not None:
                    self._known_placeholders(member, argv, f"{where}.{command}")
            for key, argv in self.lookups(member).items():
                known = (*BUILTIN_PLACEHOLDERS, *self.values(member))
                stray = [p for p in placeholders(argv) if p not in known]
                if stray:
                    raise ValueError(f"{where}.lookup.{key} = {argv!r}: {{{stray[0]}}} is not "
                                     f"known to a lookup; it may use {_braced(known)}")
            for do, undo in (("pause", "resume"), ("partition", "heal")):
                if member.driver == "docker" and do == "pause":
                    continue  # the engine pauses and unpauses it
                has_do = self.template(member, do) is not None
                has_undo = self.template(member, undo) is not None
                if has_do != has_undo:
                    missing = undo if has_do else do
                    raise ValueError(f"{where}: a {do} command needs a {undo} command to undo "
                                     f"it (and back); {missing} is not set")
        return self

    def _known_placeholders(self, member: Member, argv: list[str], where: str) -> None:
        known = self.known_placeholders(member)
        for name in placeholders(argv):
            if name not in known:
                raise ValueError(f"{where} = {argv!r}: {{{name}}} is not a placeholder of this "
                                 f"member; it has {_braced(known)} (declare others in values "
                                 "or lookup; write {{ and }} for literal braces)")

    def known_placeholders(self, member: Member) -> list[str]:
        docker = DOCKER_PLACEHOLDERS if member.driver == "docker" else ()
        return [*BUILTIN_PLACEHOLDERS, *docker, *self.values(member), *self.lookups(member)]

    def template(self, member: Member, command: str) -> list[str] | None:
        """The member's argv template for ``command``: its own, else ``[attach.command]``'s
        (for a docker member only partition and heal come from there)."""
        own: list[str] | None = getattr(member, command)
        if own is not None:
            return own
        if member.driver == "docker" and command not in ("partition", "heal"):
            return None
        shared: list[str] | None = getattr(self.command, command)
        return shared

    def values(self, member: Member) -> dict[str, str]:
        return {**self.command.values, **member.values}

    def lookups(self, member: Member) -> dict[str, list[str]]:
        return {**self.command.lookup, **member.lookup}

    def can(self, member: Member, action: str) -> bool:
        """Can the run apply ``action`` (kill, pause, partition) to this member?"""
        if member.driver == "docker" and action in ("kill", "pause"):
            return True
        return self.template(member, action) is not None

    def member(self, name: str) -> Member | None:
        return next((member for member in self.members if member.name == name), None)

    @property
    def worker_names(self) -> list[str]:
        return [member.name for member in self.members if member.role == "worker"]

    @property
    def reaper_names(self) -> list[str]:
        return [member.name for member in self.members if member.role == "reaper"]


def _braced(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join("{" + name + "}" for name in names) or "none"


def describe_attach(attach: Attach) -> list[str]:
    """Every action the run may take on every member, as ``run --dry-run`` prints it: what the
    drivers run, with fixed values filled in and looked-up ones named with their command."""
    lines = []
    for member in attach.members:
        if member.driver == "docker":
            where = (f"container {member.container}" if member.container is not None else
                     "the one container labelled "
                     + ",".join(f"{k}={v}" for k, v in (member.labels or {}).items()))
            lines.append(f"    {member.name} ({member.role}, docker: {where} on "
                         f"{member.engine or DEFAULT_ENGINE})")
            actions = [("kill", "docker kill (SIGKILL) the container"),
                       ("pause", "docker pause the container (the cgroup freezer)"),
                       ("resume", "docker unpause the container"),
                       ("restart", "docker start the container after a kill, at the end"
                        + ("" if attach.restart_killed else " (off: restart_killed = false)"))]
        else:
            lines.append(f"    {member.name} ({member.role}, command)")
            actions = []
        values = {"name": member.name, "role": member.role, **attach.values(member)}
        for key in attach.lookups(member):
            values[key] = "{" + key + "}"
        if member.driver == "docker":
            values.update(container="{container}", engine="{engine}")
        for command in COMMANDS:
            argv = attach.template(member, command)
            if argv is not None:
                shown = " ".join(_quoted(part) for part in fill(argv, values))
                note = (" (after a kill, at the end)" + ("" if attach.restart_killed else
                                                          " (off: restart_killed = false)")
                        if command == "restart" else "")
                actions.append((command, shown + note))
        if member.driver == "command":
            missing = [action for action in ACTION_OF_KIND if not attach.can(member, action)]
            if missing:
                actions.append(("refuses", f"{', '.join(missing)} faults (no command)"))
        elif not attach.can(member, "partition"):
            actions.append(("refuses", "partition faults (no partition/heal commands)"))
        for key, argv in attach.lookups(member).items():
            shown = " ".join(_quoted(part) for part in fill(
                argv, {"name": member.name, "role": member.role, **attach.values(member)}))
            actions.append((f"{{{key}}}", f"= first line printed by: {shown} (before each "
                                           "action)"))
        lines.extend(f"      {action:9} {text}" for action, text in actions)
    return lines


def _quoted(part: str) -> str:
    return repr(part) if not part or any(c.isspace() or c in "'\"" for c in part) else part
