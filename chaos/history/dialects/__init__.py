"""History dialects: how one queue's script executions, as MONITOR lists them, become the typed
events of ``chaos.history.schema`` (docs/design.md §5). ``echomq``: the keys and scripts of §2;
every other family brings its own dialect in its package (``chaos.registry``).

A dialect sees each script execution as a ``Call`` (the calling line and the commands the script
ran) and never a reply: MONITOR shows commands only. What a reply would carry (the popped id,
the attempt HINCRBY returned) it reads from a shadow of the job hashes and the active set that it
keeps by applying every write it sees.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.history.events import TRIM_SCRIPT
from chaos.registry import dialect_names, family_spec


@dataclass(slots=True)
class Call:
    """One EVAL/EVALSHA (or a command outside any script) and the commands its script ran."""

    stamp_us: int  # the server clock when the call line was fed, µs
    client: str  # the caller's address (host:port), as MONITOR gives it
    args: list[str]  # the call line: command name first
    commands: list[tuple[int, list[str]]] = field(default_factory=list)  # (stamp µs, args)
    # The member whose connection made it (the recorder resolves it before decoding): "" not
    # known to the dialect, None when the connection could not be resolved.
    conn: str | None = ""


@dataclass(slots=True)
class Decoded:
    """What a dialect made of one call."""

    events: list[dict[str, str]]  # history fields (type, id, ..., ts), stream-style strings
    undecoded: bool = False  # it wrote the queue's keys in a way the dialect does not know
    empty_claim: bool = False  # a claim that found nothing pending (no event, as in §2)
    unscripted_write: bool = False  # a write to the queue's keys outside any script
    not_run: bool = False  # a script call MONITOR listed with no command after it: it ran
    # nothing (NOSCRIPT, a bad key count, an error before its first call), so no event
    holder_from_connection: bool = False  # its events' holder is the calling connection


# The toolkit's own scripts on the queue's keys that are no queue transition, by SHA1 (an
# EVALSHA's argument, or an EVAL's body hashed): every dialect passes over them.
TOOLKIT_SCRIPTS = {hashlib.sha1(TRIM_SCRIPT.encode()).hexdigest(): "exporter trim"}


def toolkit_script(call: Call) -> str | None:
    """What the call is when it runs one of ``TOOLKIT_SCRIPTS``, else None."""
    command = call.args[0].upper()
    if len(call.args) < 2 or not command.startswith("EVAL"):
        return None
    sha = call.args[1].lower() if command.startswith("EVALSHA") else script_sha1(call.args[1])
    return TOOLKIT_SCRIPTS.get(sha)


@functools.lru_cache(maxsize=256)
def script_sha1(body: str) -> str:
    """An EVAL's script body as SCRIPT LOAD names it (a client that EVALs sends the same few
    bodies every call: each is hashed once)."""
    return hashlib.sha1(body.encode()).hexdigest()


class Dialect(Protocol):
    name: str

    def decode(self, call: Call) -> Decoded: ...

    def jobs_named(self, call: Call) -> list[str]:
        """The jobs a call names (its keys and the members it writes): those an undecoded call
        leaves without evidence. Empty: it may concern any job."""
        ...


# Writes that put or take a job in a set or list of the queue, and where their members start.
_MEMBER_WRITES = {"ZADD": None, "ZREM": 2, "SADD": 2, "SREM": 2, "LPUSH": 2, "RPUSH": 2,
                  "LREM": 3}
_ZADD_OPTIONS = frozenset(("NX", "XX", "GT", "LT", "CH", "INCR"))


def jobs_named(calls: Iterable[list[str]], job_of: Callable[[str], str | None],
               member_keys: frozenset[str]) -> list[str]:
    """The jobs named by a call's commands (``calls``: its KEYS as one command's arguments, then
    each command the script ran): every key that is a job's own (``job_of``), and every member
    written to one of the queue's sets or lists (``member_keys``), in the order first named."""
    named: dict[str, None] = {}
    for args in calls:
        for key in args[1:] if args and args[0] == "KEYS" else args[1:2]:
            job_id = job_of(key)
            if job_id:
                named[job_id] = None
        command = args[0].upper() if args else ""
        if command in _MEMBER_WRITES and len(args) > 2 and args[1] in member_keys:
            start = _MEMBER_WRITES[command]
            if start is None:  # ZADD key [options] score member ...: members are every second
                first = 2
                while first < len(args) and args[first].upper() in _ZADD_OPTIONS:
                    first += 1
                members = args[first + 1::2]
            else:
                members = args[start:]
            for member in members:
                named[member] = None
    return list(named)


class GapCheck(Protocol):
    """A dialect that can tell whether a recorder's gap hid a transition (``chaos.history
    .monitor``): a read-only script the recorder runs just before MONITOR resumes, and what its
    reply shows that the dialect's shadow does not."""

    def gap_snapshot(self, since_ms: int) -> tuple[str, list[str], list[str]]:
        """The script, its KEYS and ARGV (``since_ms``: the gap's start, server clock)."""
        ...

    gap_jobs: list[str] | None  # the jobs the last differences named; None: any job

    def gap_differences(self, reply: Any, since_ms: int) -> tuple[list[str],
                                                                  list[dict[str, str]]]:
        """What the store holds that the shadow does not (empty: no write was missed), and the
        runner events recorded in the gap, oldest first; ``gap_jobs`` then names the jobs
        those differences concern."""
        ...


def make_dialect(name: str, prefix: str, queue: str, lease_ms: int | None = None) -> Dialect:
    """The MONITOR decoder of the family ``name`` (``chaos.registry``). ``lease_ms``: the
    scenario's lease, where the dialect needs it to read a script's clock (a call decoded by
    effect names no lease)."""
    factory = family_spec(name).dialect
    if factory is None:
        raise ValueError(f"the {name!r} family's own scripts record its history: it has no "
                         f"MONITOR dialect; expected one of {', '.join(dialect_names())}")
    dialect: Dialect = factory(prefix, queue, lease_ms)
    return dialect
