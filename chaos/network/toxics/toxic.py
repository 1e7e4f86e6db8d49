"""What a toxic is, and how one runs on one link (Toxiproxy's ``toxics/toxic.go``).

A :class:`Toxic` is what a client configures on a proxy: a :class:`ToxicKind` (one module per
kind in this package, listed in :mod:`chaos.network.toxics.registry`), a stream, a toxicity and
integer attributes. Each live link of that stream runs it through a :class:`ToxicStage` of its
own (Toxiproxy's ``ToxicStub``): an inbox, a task running the kind's ``pipe`` over it, and the
next stage. The stage knows its link only through :class:`StageLink`, so the toxics depend on
nothing of the link, the proxy or the API above them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chaos.network.api_errors import ERR_INVALID_STREAM, api_error
from chaos.network.gojson import go_float32_json

log = logging.getLogger("chaos.network.server")


class Direction(enum.IntEnum):
    UPSTREAM = 0  # client -> server
    DOWNSTREAM = 1  # server -> client

    @classmethod
    def parse(cls, stream: str) -> Direction:
        try:
            return cls[stream.upper()]
        except KeyError:
            raise api_error(ERR_INVALID_STREAM) from None


class Chunk:
    """Bytes read from a socket and when (loop clock), as Toxiproxy's ``StreamChunk``."""

    __slots__ = ("data", "timestamp")

    def __init__(self, data: bytes, timestamp: float) -> None:
        self.data = data
        self.timestamp = timestamp


class TimedOut:
    """What :meth:`ToxicStage.get` returns when no input came within its timeout."""


TIMED_OUT = TimedOut()

PipeFunction = Callable[["ToxicStage", dict[str, int]], Awaitable[None]]


@dataclass(frozen=True)
class ToxicKind:
    """A toxic type: its integer attributes (Go struct field order) and its per-link behaviour."""

    name: str
    go_struct: str
    attributes: tuple[str, ...]
    pipe: PipeFunction
    closes_link_on_removal: bool = False  # Toxiproxy's CleanupToxic (the timeout toxic)
    # Toxiproxy's link.Start sets SO_LINGER 0 on both sockets of a connection whose chain holds
    # this kind when the connection opens (reset_peer): its every close is then an RST.
    lingers_zero: bool = False


@dataclass
class Toxic:
    """A toxic as the API shows it; live links run it through their :class:`ToxicStage`."""

    name: str
    kind: ToxicKind
    stream: str  # as the client spelled it: Toxiproxy echoes it back
    direction: Direction
    toxicity: float  # float32
    attributes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"attributes": dict(self.attributes), "name": self.name, "type": self.kind.name,
                "stream": self.stream, "toxicity": go_float32_json(self.toxicity)}


class Receiver(Protocol):
    """What a stage passes chunks on to: the next stage, or the link's sink."""

    def push(self, chunk: Chunk | None) -> None: ...


class StageLink(Protocol):
    """What a stage needs from the link it runs on (:class:`chaos.network.link.Link`)."""

    loop: asyncio.AbstractEventLoop
    rng: random.Random

    def input_taken(self) -> None:
        """A stage's inbox shrank (or was dropped): the link may read its source again."""

    def abort(self) -> None:
        """A toxic failed: close the connection."""

    def end_later(self, stage: ToxicStage, delay: float) -> None:
        """End the stream at ``stage`` after ``delay`` seconds, on a timer that removing or
        updating the toxic does not call off."""


class ToxicStage:
    """One toxic running on one link, like Toxiproxy's ``ToxicStub``: an inbox, a task running the
    toxic over it, and the next stage (or the sink) it passes chunks on to. ``None`` is EOF.

    Everything runs on the event loop thread, so relinking the chain is race-free: each change
    is one synchronous step between two awaits of the toxic tasks.
    """

    def __init__(self, link: StageLink, toxic: Toxic, next_stage: Receiver) -> None:
        self.link = link
        self.toxic = toxic
        self.next = next_stage
        self.inbox: deque[Chunk | None] = deque()
        self.inbox_bytes = 0
        self.held: Chunk | None = None  # taken from the inbox, not yet passed on
        self.has_held = False
        self.applies = False  # the toxicity roll; when False the stage is a pass-through
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        self.bytes_transmitted = 0  # limit_data's per-link count, kept across updates
        self._wakeup: asyncio.Future[None] | None = None

    # --- lifecycle, driven by the link ---------------------------------------------------
    def start(self) -> None:
        """Run the toxic with its current attributes, rolling toxicity anew (as Toxiproxy does
        each time a stub is (re)started)."""
        self.applies = self.link.rng.random() < self.toxic.toxicity
        if self.applies:
            attributes = dict(self.toxic.attributes)
            self.task = self.link.loop.create_task(self._run(attributes))
        else:
            self.pass_on_inbox()

    async def _run(self, attributes: dict[str, int]) -> None:
        try:
            await self.toxic.kind.pipe(self, attributes)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("toxic %s failed; closing its connection", self.toxic.name)
            self.link.abort()

    def interrupt(self) -> None:
        """Stop the toxic's task; a chunk it was holding goes back to the front of the inbox."""
        if self.task is not None:
            if self.task is not asyncio.current_task():
                self.task.cancel()
            self.task = None
        self._wakeup = None
        if self.has_held:
            held, self.held, self.has_held = self.held, None, False
            self.inbox.appendleft(held)
            if held is not None:
                self.inbox_bytes += len(held.data)

    def pass_on_inbox(self) -> None:
        while self.inbox and not self.closed:
            self.next.push(self.inbox.popleft())
        self.inbox_bytes = 0

    # --- the chain ---------------------------------------------------------------------
    def push(self, chunk: Chunk | None) -> None:
        if self.closed:
            return
        if not self.applies:
            self.next.push(chunk)
            return
        self.inbox.append(chunk)
        if chunk is not None:
            self.inbox_bytes += len(chunk.data)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    # --- what toxics call ------------------------------------------------------------------
    async def get(self, timeout: float | None = None) -> Chunk | None | TimedOut:
        """The next chunk (``None`` at EOF), or ``TIMED_OUT`` after ``timeout`` seconds."""
        loop = self.link.loop
        deadline = None if timeout is None else loop.time() + timeout
        while not self.inbox:
            wakeup = self._wakeup = loop.create_future()
            if deadline is None:
                await wakeup
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return TIMED_OUT
            timer = loop.call_later(remaining, _resolve, wakeup)
            try:
                await wakeup
            finally:
                timer.cancel()
        chunk = self.inbox.popleft()
        if chunk is not None:
            self.inbox_bytes -= len(chunk.data)
            self.link.input_taken()
        self.held, self.has_held = chunk, True
        return chunk

    def emit(self, chunk: Chunk | None) -> None:
        """Pass the held chunk (or what became of it) on to the next stage."""
        self.held, self.has_held = None, False
        self.next.push(chunk)

    def emit_part(self, part: Chunk, rest: Chunk) -> None:
        """Pass on a piece of the held chunk; ``rest`` is what is still held."""
        self.held = rest
        self.next.push(part)

    def drop(self) -> None:
        self.held, self.has_held = None, False

    def close(self) -> None:
        """End this link's stream here: EOF goes on, later input is dropped (``stub.Close()``)."""
        if self.closed:
            return
        self.closed = True
        self.held, self.has_held = None, False
        self.inbox.clear()
        self.inbox_bytes = 0
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.task = None
        self.next.push(None)
        self.link.input_taken()

    def dispose(self) -> None:
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.task = None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

