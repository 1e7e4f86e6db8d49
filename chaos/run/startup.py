"""Start-up: the run's phases begin once every process of the queue is at work (docs/design.md
§5, ``chaos.history.readiness``), not once it has connected. First each process's connection
shows in CLIENT LIST, known as the recorder knows it (its own ACL user, else the client name it
set); then each shows its first queue action: through the MONITOR recorder where one runs (the
call and its keys, read by the family's dialect), else through CLIENT LIST's last command of
each connection. A process that never gets there is an infrastructure error naming it, with
its log's tail (exit 3). Processes the run attaches to (``RuntimeBase.starts_members`` false)
were at work before it: their connection is enough."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chaos.errors import InfraError
from chaos.protocol.client import QueueClient
from chaos.runtime.base import RuntimeBase

if TYPE_CHECKING:
    from chaos.history.monitor import MonitorRecorder

POLL_S = 0.01  # CLIENT LIST is cheap; the run starts as soon as they are in


def start_timeout(runtime: RuntimeBase, count: int) -> float:
    """How long ``count`` processes may take to start."""
    timeout = runtime.start_timeout()
    if timeout is None:
        # Each child is a Python interpreter importing the toolkit (about 1 s of CPU here):
        # a 2-core machine starting 128 of them needs more than a fixed half minute.
        timeout = 30.0 + 0.5 * count
    return timeout


def wait_until_started(queue: QueueClient, runtime: RuntimeBase,
                       recorder: MonitorRecorder | None, names: list[str],
                       say: Callable[[str], None], timeout: float | None = None) -> dict[str, Any]:
    """Until each named process is connected, then at work; returns each one's start-up
    (``report.json``'s ``startup``): the server ms of its first queue action and what it was
    (the recorder's reading), or ``"cmd"`` where only CLIENT LIST could tell."""
    from chaos.history.monitor import member_of
    from chaos.history.readiness import working_members

    if timeout is None:
        timeout = start_timeout(runtime, len(names))
    began = time.monotonic()
    deadline = began + timeout
    members = frozenset(names)
    users = runtime.sut_users

    def member(client: dict[str, Any]) -> str | None:
        user = client.get("user", "default")
        return member_of(user if user != "default" else client.get("name") or "", members)

    connected: set[str] = set()
    working: dict[str, Any] = {}
    while time.monotonic() < deadline:
        clients = queue.client.client_list()
        connected |= {m for c in clients if (m := member(c)) is not None}
        if not runtime.starts_members:  # attached to, at work before: connected is started
            working.update({name: {"what": "connected (attached)"} for name in connected})
        elif recorder is not None:
            working.update({name: {"first_action_ms": action.stamp_ms, "what": action.what}
                            for name, action in recorder.first_actions.of(names).items()})
        else:
            working.update({name: {"what": "a queue command (CLIENT LIST)"}
                            for name in working_members(clients, member)})
        waiting = [name for name in names if name not in working]
        if not waiting:
            waited_ms = int((time.monotonic() - began) * 1000)
            say(f"started: {len(names)} process(es) at work after {waited_ms} ms")
            return {name: working[name] for name in names}
        for name in waiting:
            child = runtime.members().get(name)
            if child is not None and not child.alive:
                raise InfraError(f"{name} exited during start-up (code {child.exit_code}); "
                                 f"its log ends:\n{runtime.log_tail(name)}")
        time.sleep(POLL_S)
    unconnected = [name for name in waiting if name not in connected]
    how = [f"{name} (no client with its ACL user {name!r} in CLIENT LIST)" if name in users
           else f"{name} (no client whose ACL user or client name is {name!r} or "
                f"{name + '-...'!r} in CLIENT LIST)"
           for name in unconnected]
    idle = [name for name in waiting if name in connected]
    if idle:
        what = ("no call the queue's dialect reads as work (a claim, a sweep, a blocking pop "
                "on its keys)" if recorder is not None else "no queue command yet")
        how += [f"{name} (connected, but {what})" for name in idle]
    tail = runtime.log_tail(waiting[0])
    state = "connected" if unconnected else "at work"
    raise InfraError(f"not {state} after {timeout:g}s: {', '.join(how)}"
                     + (f"; {waiting[0]}'s log ends:\n{tail}" if tail else ""))
