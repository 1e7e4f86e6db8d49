"""History dialects: how one queue's script executions, as MONITOR lists them, become the typed
events of ``chaos.history.schema`` (docs/design.md §5). ``echomq``: the keys and scripts of §2;
``bullmq``: real BullMQ workers (docs/bullmq.md).

A dialect sees each script execution as a ``Call`` (the calling line and the commands the script
ran) and never a reply: MONITOR shows commands only. What a reply would carry (the popped id,
the attempt HINCRBY returned) it reads from a shadow of the job hashes and the active set that it
keeps by applying every write it sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class Call:
    """One EVAL/EVALSHA (or a command outside any script) and the commands its script ran."""

    stamp_us: int  # the server clock when the call line was fed, µs
    client: str  # the caller's address (host:port), as MONITOR gives it
    args: list[str]  # the call line: command name first
    commands: list[tuple[int, list[str]]] = field(default_factory=list)  # (stamp µs, args)


@dataclass(slots=True)
class Decoded:
    """What a dialect made of one call."""

    events: list[dict[str, str]]  # history fields (type, id, ..., ts), stream-style strings
    undecoded: bool = False  # it wrote the queue's keys in a way the dialect does not know
    empty_claim: bool = False  # a claim that found nothing pending (no event, as in §2)
    unscripted_write: bool = False  # a write to the queue's keys outside any script


class Dialect(Protocol):
    name: str

    def decode(self, call: Call) -> Decoded: ...


DIALECTS = ("echomq", "bullmq")


def make_dialect(name: str, prefix: str, queue: str) -> Dialect:
    if name == "echomq":
        from chaos.history.dialects.echomq import EchoMQ

        return EchoMQ(prefix, queue)
    if name == "bullmq":
        from chaos.history.dialects.bullmq import BullMQ

        return BullMQ(prefix, queue)
    raise ValueError(f"unknown history dialect {name!r}; expected one of {', '.join(DIALECTS)}")
