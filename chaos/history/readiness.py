"""When a process of the queue counts as started (docs/design.md §5): at its first queue action,
not when it connects. A worker connects, then may spend a second on its own start-up (Celery's
mingle, a BEAM's boot, a Node module loading) before its loop runs; a run that starts its phases
at the connection judges that start-up as if it were the queue at work.

Two readers of the same promise:

- with a MONITOR recorder, each call is seen with its keys: a process is ready at its first call
  its family's dialect reads as work (``ready_action``; by default a claim, even an empty one, a
  sweep, a reap, a blocking pop or a script that ran commands);
- without one (a history the scripts record), CLIENT LIST's ``cmd`` (the last command of each
  connection) is polled: a process is ready once a connection of its runs a queue command, not a
  connection's set-up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from chaos.history.dialects import Call, Decoded
from chaos.history.schema import Claim, Reap, Sweep

# The blocking pops a worker waits for work with (a claim attempt that sleeps in the server).
BLOCKING_POPS = frozenset({"BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN",
                           "BZPOPMAX", "BZMPOP", "XREADGROUP"})
WORK_EVENTS = frozenset({Claim.TYPE, Sweep.TYPE, Reap.TYPE})

# CLIENT LIST's ``cmd`` of a connection still setting itself up (or idle since it connected):
# every other command is the process at work.
SETUP_COMMANDS = frozenset({
    "NULL", "hello", "auth", "select", "ping", "echo", "info", "readonly", "readwrite", "quit",
    "time", "client|setname", "client|setinfo", "client|id", "client|info", "client|list",
    "client|tracking", "script|load", "script|exists", "function|load", "function|list",
    "command", "command|docs", "command|info", "command|count", "config|get", "acl|whoami",
    "cluster|info", "cluster|slots", "cluster|shards", "cluster|nodes", "sentinel", "role",
    "subscribe", "psubscribe", "ssubscribe",
})


def default_ready_action(call: Call, decoded: Decoded) -> str | None:
    """The call as a first queue action, in a few words; None when it is none (a connection's
    set-up, a read of its own state)."""
    command = call.args[0].upper() if call.args else ""
    if command in BLOCKING_POPS:
        return f"{command} {call.args[1] if len(call.args) > 1 else ''}".strip()
    for event in decoded.events:
        if event.get("type") in WORK_EVENTS:
            return f"its first {event['type']}"
    if decoded.empty_claim:
        return "a claim that found nothing"
    if command.startswith(("EVAL", "FCALL")) and call.commands:
        # a script that ran commands (an empty turn of a group ring claims nothing and writes
        # no event, but it is the loop at work): set-up loads scripts, it does not run them
        return f"a script ({call.commands[0][1][0].upper()} {' '.join(call.commands[0][1][1:2])})"
    return None


@dataclass(frozen=True)
class FirstAction:
    """A process's first queue action: when (server ms) and what."""

    stamp_ms: int
    what: str


class FirstActions:
    """Each member's first queue action, filled by the recorder's thread and read by the
    runner's: ``note`` is called for every call of the run's window with its decoding."""

    def __init__(self, ready_action: Callable[[Call, Decoded], str | None] | None = None) -> None:
        self.ready_action = ready_action or default_ready_action
        self._seen: dict[str, FirstAction] = {}
        self._ready_clients: set[str] = set()  # addresses already counted: not read again
        self._lock = threading.Lock()

    def note(self, call: Call, decoded: Decoded, resolve: Callable[[str], str | None],
             members: frozenset[str]) -> None:
        if call.client in self._ready_clients:
            return
        what = self.ready_action(call, decoded)
        if what is None:
            return
        member = call.conn or resolve(call.client)
        if member not in members:  # not (yet) known as one of the run's processes: ask again
            return
        self._ready_clients.add(call.client)
        with self._lock:
            self._seen.setdefault(member, FirstAction(call.stamp_us // 1000, what))

    def of(self, names: Iterable[str]) -> dict[str, FirstAction]:
        with self._lock:
            return {name: self._seen[name] for name in names if name in self._seen}


def working_members(clients: Iterable[dict[str, str]],
                    member_of: Callable[[dict[str, str]], str | None]) -> set[str]:
    """The members of which some connection in a CLIENT LIST reply last ran a queue command
    (``member_of``: a connection's member, None when it is none of the run's)."""
    working = set()
    for client in clients:
        if str(client.get("cmd", "NULL")) in SETUP_COMMANDS:
            continue
        member = member_of(client)
        if member is not None:
            working.add(member)
    return working
