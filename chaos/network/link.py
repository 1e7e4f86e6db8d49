"""One direction of one proxied connection (Toxiproxy's ``link.go``): the source socket, the chain
of toxic stages the proxy's toxics for that direction run in, and the sink writing into the
destination socket.

With no toxic on it, a link is on its fast path: one ``transport.write`` per chunk received
(:class:`chaos.network.proxy.SocketSide` writes straight through). A link reads from its source
only while its first toxic holds at most ``MAX_BUFFERED_BYTES`` (Toxiproxy's channel buffers
bound it similarly), and while the destination keeps up. EOF closes the destination once the
toxics have passed everything on (no half-close, as in Toxiproxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import Callable

from chaos.network.toxics.toxic import Chunk, Direction, Toxic, ToxicStage

# A link stops reading its source while its first toxic holds more than this many bytes.
MAX_BUFFERED_BYTES = 1 << 20


class Sink:
    """The end of a link: writes into the destination socket, closes it on EOF."""

    __slots__ = ("link", "closed")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.closed = False

    def push(self, chunk: Chunk | None) -> None:
        if self.closed:
            return
        link = self.link
        if chunk is None:
            self.closed = True
            link.fast = False
            if link.dest is not None:
                link.dest.close()  # flushes what is buffered, then FIN (RST once it lingers 0)
        elif link.dest is not None:
            link.dest.write(chunk.data)


class Link:
    """One direction of one proxied connection: source socket -> toxic stages -> destination."""

    def __init__(self, direction: Direction, source: asyncio.Transport,
                 loop: asyncio.AbstractEventLoop, rng: random.Random,
                 abort: Callable[[], None]) -> None:
        self.direction = direction
        self.source = source
        self.dest: asyncio.Transport | None = None  # None while the upstream is being dialled
        self.loop = loop
        self.rng = rng
        self.abort = abort  # closes the whole connection (a toxic failed)
        self.sink = Sink(self)
        self.stages: list[ToxicStage] = []
        self.fast = False  # no toxic stages and destination open: write straight through
        self.source_done = False
        self.dest_paused = False
        self.reading_paused = False
        self.pending: list[bytes] = []  # read before the destination existed
        self.end_timers: list[asyncio.TimerHandle] = []

    def attach(self, dest: asyncio.Transport, chain: list[Toxic]) -> None:
        self.dest = dest
        if any(toxic.kind.lingers_zero for toxic in chain):
            for transport in (self.source, dest):
                linger_zero(transport)
        for toxic in chain:
            self.add(toxic)
        self.fast = not self.stages
        pending, self.pending = self.pending, []
        for data in pending:
            self.feed(data)
        if self.source_done:
            self.source_done = False
            self.feed_eof()
        self.update_reading()

    # --- input from the source socket (the fast path lives in SocketSide.data_received) ----
    def feed(self, data: bytes) -> None:
        if self.dest is None:
            self.pending.append(data)
            self.reading_paused = True
            self.source.pause_reading()
        elif self.stages:
            head = self.stages[0]
            head.push(Chunk(data, self.loop.time()))
            if head.inbox_bytes > MAX_BUFFERED_BYTES:
                self.update_reading()
        else:
            self.sink.push(Chunk(data, 0.0))

    def feed_eof(self) -> None:
        if self.source_done:
            return
        self.source_done = True
        if self.dest is None:
            return  # replayed by attach()
        if self.stages:
            self.stages[0].push(None)
        else:
            self.sink.push(None)

    def dest_lost(self) -> None:
        self.sink.closed = True
        self.fast = False

    def update_reading(self) -> None:
        buffered = self.stages[0].inbox_bytes if self.stages else 0
        pause = self.dest_paused or buffered > MAX_BUFFERED_BYTES or self.dest is None
        if pause != self.reading_paused:
            self.reading_paused = pause
            if pause:
                self.source.pause_reading()
            else:
                self.source.resume_reading()

    # --- what its toxic stages call (toxic.StageLink) --------------------------------------
    def input_taken(self) -> None:
        if self.reading_paused:
            self.update_reading()

    def end_later(self, stage: ToxicStage, delay: float) -> None:
        self.end_timers.append(self.loop.call_later(delay, self._end_at, stage))

    def _end_at(self, stage: ToxicStage) -> None:
        if stage in self.stages:
            stage.close()
        else:
            self.sink.push(None)  # the toxic was removed meanwhile: the link ends all the same

    # --- the toxic chain, changed through the API ------------------------------------------
    def add(self, toxic: Toxic) -> None:
        if self.sink.closed:
            return  # the link already ended: a new toxic has nothing to act on
        stage = ToxicStage(self, toxic, self.sink)
        if self.stages:
            self.stages[-1].next = stage
        self.stages.append(stage)
        self.fast = False
        stage.start()

    def update(self, toxic: Toxic) -> None:
        for stage in self.stages:
            if stage.toxic is toxic and not stage.closed:
                stage.interrupt()
                stage.start()

    def remove(self, toxic: Toxic) -> None:
        index = next((i for i, s in enumerate(self.stages) if s.toxic is toxic), None)
        if index is None:
            return
        stage = self.stages[index]
        stage.interrupt()
        del self.stages[index]
        if index > 0:
            self.stages[index - 1].next = stage.next
        if toxic.kind.closes_link_on_removal:
            stage.close()  # Toxiproxy's timeout Cleanup: the link ends here
        else:
            stage.pass_on_inbox()  # in order, ahead of anything the previous stage sends now
            stage.closed = True
        self.fast = not self.stages and not self.sink.closed
        self.update_reading()

    def dispose(self) -> None:
        for stage in self.stages:
            stage.dispose()
        for timer in self.end_timers:
            timer.cancel()


def linger_zero(transport: asyncio.Transport) -> None:
    """SO_LINGER 0: closing the socket from now on sends an RST instead of a FIN."""
    raw = transport.get_extra_info("socket")
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
