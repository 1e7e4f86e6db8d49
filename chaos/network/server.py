"""A Toxiproxy-2.x-compatible server in pure asyncio: the same HTTP API, JSON, toxics and codes.

Why it exists (DESIGN §3): every worker reaches Valkey through a Toxiproxy proxy of its own so that
a network fault (latency, partition, reset …) can target one worker. The real ``toxiproxy-server``
is used when present, but no registry these machines reach carries it, so the toolkit ships this
stand-in. It is driven by the same ``toxiproxy-python`` client, and its conformance tests
(``tests/test_toxiproxy.py``) pass against either server.

What it reproduces, read from Toxiproxy 2.12.0's ``api.go``, ``proxy.go``, ``link.go``,
``toxic_collection.go`` and ``toxics/*.go``:

* The API on :8474 — ``/version``, ``/reset``, ``/populate``,
  ``/proxies[/{proxy}[/toxics[/{toxic}]]]`` with their methods (POST and PATCH both update),
  status codes (201 proxy created or populated, 200 toxic created, 204 deletes and reset,
  400/404/409, and 500 when a listener cannot bind), compact JSON in Go's field order, and errors
  as ``{"error": "...", "status": N}`` with the same messages ("proxy not found", "toxic already
  exists", "bad request body: …" …). Like Go's ``http.Error`` those error bodies end in a newline
  and are sent as ``text/plain``. A User-Agent starting with ``Mozilla/`` gets 403 (Toxiproxy's
  browser guard).
* ``GET /version`` answers ``{"version": "2.12.0"}`` plus a newline, as a 2.12.0 release build
  does; the ``Server`` response header (which Toxiproxy does not send) names this implementation,
  so a caller can tell the two apart without any client that parses the body noticing.
* Proxies: one listener per enabled proxy (``listen`` with port 0 picks a free port and reports it);
  each accepted client gets its own upstream connection and two links, upstream (client → server)
  and downstream (server → client). Disabling or deleting a proxy closes its listener and every
  connection; changing ``listen`` or ``upstream`` restarts it. EOF in either direction closes the
  other socket once the link's toxics have passed everything on (no half-close, as in Toxiproxy).
* Toxics, each applied per link with probability ``toxicity`` (rolled when the toxic starts on a
  link and again when it is updated, as Toxiproxy's ``ToxicStub.Run`` does):
  ``latency`` (each chunk leaves ``latency ± jitter`` ms after it arrived), ``bandwidth``
  (``rate`` KB/s, big chunks cut into 100 ms pieces), ``slow_close`` (EOF delayed ``delay`` ms),
  ``timeout`` (drops all data; closes the link after ``timeout`` ms without input, never when 0),
  ``reset_peer`` (on the first input waits ``timeout`` ms, then closes with SO_LINGER 0: a TCP RST),
  ``slicer`` (chunks cut around ``average_size`` ± ``size_variation`` bytes, ``delay`` µs apart),
  ``limit_data`` (closes once ``bytes`` bytes have passed on that link).
* Toxics added, updated or removed apply to live connections: chunks a toxic holds are passed on
  in order when it is removed. One exception, Toxiproxy's own: **removing a ``timeout`` toxic closes
  the connections it was on** (its ``Cleanup`` closes the link; data it dropped is gone). So a
  partition made with ``timeout`` 0 drops traffic while it lasts, and healing it closes the cut-off
  connections, which the clients then re-open. ``POST /reset`` removes toxics the same way.

Deliberate differences, where Toxiproxy crashes or hangs: ``bandwidth`` with ``rate`` <= 0 passes
data unthrottled (Toxiproxy loops forever); ``slicer`` never cuts below 1 byte (Toxiproxy recurses
without end on ``average_size`` 0); ``slow_close`` updated or removed while it holds the EOF still
closes (Toxiproxy loses the EOF); ``reset_peer`` resets even when added to a live connection
(Toxiproxy sets SO_LINGER only when a connection starts, so a later reset is a plain close).
Messages for malformed JSON follow Go's ``encoding/json`` wording approximately, not byte for byte.
A link reads from its source only while its first toxic holds at most 1 MiB (Toxiproxy's channel
buffers bound it similarly), and while the destination keeps up. The API bounds what a client may
cost (Toxiproxy does not; :class:`HttpLimits`): a body over 1 MiB gets 413, a request head not
complete within 10 s or a body within 30 s gets 408 (slowloris clients), an idle keep-alive
connection closes after 120 s; a head over 64 KiB gets 431. Nothing a client sends makes it
answer 500, except Toxiproxy's own ``listen tcp …`` when a proxy's listener cannot bind.

The no-toxic fast path is one ``transport.write`` per chunk received, on asyncio protocols.

Entry points: :func:`serve` (blocking, SIGINT/SIGTERM stop it), ``python -m chaos.network.server``
(:func:`main`), and :class:`ToxiproxyServer`, a background-thread handle for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import enum
import http
import json
import logging
import random
import secrets
import signal
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from chaos import __version__

TOXIPROXY_VERSION = "2.12.0"  # the Toxiproxy release whose API and behaviour this server follows
SERVER_HEADER = f"echomq-chaos/{__version__} (Toxiproxy {TOXIPROXY_VERSION} compatible)"
DEFAULT_PORT = 8474

# A link stops reading its source while its first toxic holds more than this many bytes.
MAX_BUFFERED_BYTES = 1 << 20

log = logging.getLogger("chaos.network.server")


# --------------------------------------------------------------------------------------------
# API errors, with Toxiproxy's messages and status codes (api.go)
# --------------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def bad_request_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing_field(what: str) -> ApiError:
    return ApiError(f"missing required field: {what}", 400)


ERR_PROXY_NOT_FOUND = ("proxy not found", 404)
ERR_PROXY_EXISTS = ("proxy already exists", 409)
ERR_INVALID_STREAM = ("stream was invalid, can be either upstream or downstream", 400)
ERR_INVALID_TOXIC_TYPE = ("invalid toxic type", 400)
ERR_TOXIC_EXISTS = ("toxic already exists", 409)
ERR_TOXIC_NOT_FOUND = ("toxic not found", 404)


def api_error(error: tuple[str, int]) -> ApiError:
    return ApiError(*error)


# --------------------------------------------------------------------------------------------
# JSON the way Go's encoding/json reads and writes it
# --------------------------------------------------------------------------------------------


def go_json(value: Any) -> bytes:
    """Compact JSON, with Go's HTML-safe escapes (``<``, ``>``, ``&``) and raw UTF-8."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text.encode()


def decode_body(body: bytes) -> Any:
    """The first JSON value of a request body (Go's ``json.Decoder`` ignores what follows it)."""
    text = body.decode("utf-8", errors="replace").lstrip(" \t\r\n")
    if not text:
        raise bad_request_body("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as error:
        if error.pos >= len(text):
            raise bad_request_body("unexpected EOF") from None
        raise bad_request_body(
            f"invalid character {text[error.pos]!r} looking for beginning of value"
        ) from None
    return value


_GO_KIND = {str: "string", bool: "bool", int: "number", float: "number", list: "array",
            dict: "object"}


def type_error(value: Any, where: str, go_type: str) -> ApiError:
    kind = _GO_KIND.get(type(value), "value")
    if kind == "number":
        kind = f"number {json.dumps(value)}"
    return bad_request_body(
        f"json: cannot unmarshal {kind} into Go struct field {where} of type {go_type}"
    )


def object_fields(value: Any, names: Sequence[str], where: str) -> dict[str, Any]:
    """The known fields of a JSON object, matched case-insensitively like Go (last one wins).
    A JSON ``null`` leaves a field as it was, so those are left out."""
    if not isinstance(value, dict):
        raise bad_request_body(
            f"json: cannot unmarshal {_GO_KIND.get(type(value), 'value')} into Go value of "
            f"type {where}"
        )
    by_folded = {name.lower(): name for name in names}
    fields: dict[str, Any] = {}
    for key, item in value.items():
        name = by_folded.get(key.lower())
        if name is not None and item is not None:
            fields[name] = item
    return fields


def expect_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise type_error(value, where, "string")
    return value


def expect_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise type_error(value, where, "bool")
    return value


def expect_int(value: Any, where: str) -> int:
    # A JSON number with a fraction or an exponent does not fit Go's int64 (Python: float).
    if type(value) is not int or not -(1 << 63) <= value < (1 << 63):
        raise type_error(value, where, "int64")
    return value


def float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as Toxiproxy stores toxicity."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def expect_float32(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise type_error(value, where, "float32")
    try:
        return float32(float(value))
    except OverflowError:
        raise type_error(value, where, "float32") from None


def go_float32_json(value: float) -> int | float:
    """The number Go's encoder writes for a float32: its shortest round-trip form, ``1`` not
    ``1.0``."""
    text = repr(value)
    for digits in range(1, 10):
        candidate = f"{value:.{digits}g}"
        if float32(float(candidate)) == value:
            text = candidate
            break
    number = float(text)
    return int(number) if number.is_integer() and abs(number) < 1e21 else number


# --------------------------------------------------------------------------------------------
# Addresses, the way Go's net package splits and prints them
# --------------------------------------------------------------------------------------------


def split_host_port(address: str) -> tuple[str, int]:
    """``net.SplitHostPort`` plus a numeric or named port; raises ValueError with Go's wording."""
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise ValueError(f"address {address}: missing ']' in address")
        host, rest = address[1:end], address[end + 1:]
        if not rest.startswith(":"):
            raise ValueError(f"address {address}: missing port in address")
        port_text = rest[1:]
    else:
        if ":" not in address:
            raise ValueError(f"address {address}: missing port in address")
        host, port_text = address.rsplit(":", 1)
        if ":" in host:
            raise ValueError(f"address {address}: too many colons in address")
    if port_text.isdigit():
        port = int(port_text)
    else:
        try:
            port = socket.getservbyname(port_text, "tcp") if port_text else 0
        except OSError:
            raise ValueError(f"address {address}: unknown port") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"address {address}: invalid port")
    return host, port


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def resolve_tcp_address(address: str) -> str:
    """``net.ResolveTCPAddr(...).String()``: the host resolved to an IP (IPv4 first)."""
    host, port = split_host_port(address)
    if not host:
        return f":{port}"
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    if not infos:
        raise ValueError(f"lookup {host}: no such host")
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return join_host_port(str(infos[0][4][0]), port)


def bind_listener(address: str) -> tuple[socket.socket, str]:
    """A listening socket for ``address`` and the address it really has (Go's ``Addr()``)."""
    host, port = split_host_port(address)
    if host in ("", "::", "0.0.0.0") and socket.has_ipv6:
        family, bind_host = socket.AF_INET6, "::"  # dual stack, as Go listens on [::]
    else:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        infos.sort(key=lambda info: info[0] != socket.AF_INET)
        family, bind_host = infos[0][0], str(infos[0][4][0])
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and bind_host == "::":
            with contextlib.suppress(OSError):
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind((bind_host, port))
        listener.listen(511)
    except BaseException:
        listener.close()
        raise
    bound = listener.getsockname()
    return listener, join_host_port(str(bound[0]), int(bound[1]))


def go_os_error(error: OSError) -> str:
    text = error.strerror or str(error)
    return text[:1].lower() + text[1:]


# --------------------------------------------------------------------------------------------
# Toxics: what a client configures (one per proxy) and how each one acts on a link
# --------------------------------------------------------------------------------------------


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


PipeFunction = Callable[["ToxicStage", dict[str, int]], Awaitable[None]]


@dataclass(frozen=True)
class ToxicKind:
    """A toxic type: its integer attributes (Go struct field order) and its per-link behaviour."""

    name: str
    go_struct: str
    attributes: tuple[str, ...]
    pipe: PipeFunction
    closes_link_on_removal: bool = False  # Toxiproxy's CleanupToxic (the timeout toxic)


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


class TimedOut:
    """What :meth:`ToxicStage.get` returns when no input came within its timeout."""


TIMED_OUT = TimedOut()


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
                link.dest.close()  # flushes what is buffered, then FIN (or RST after a reset)
        elif link.dest is not None:
            link.dest.write(chunk.data)


class ToxicStage:
    """One toxic running on one link, like Toxiproxy's ``ToxicStub``: an inbox, a task running the
    toxic over it, and the next stage (or the sink) it passes chunks on to. ``None`` is EOF.

    Everything runs on the event loop thread, so relinking the chain is race-free: each change
    is one synchronous step between two awaits of the toxic tasks.
    """

    def __init__(self, link: Link, toxic: Toxic) -> None:
        self.link = link
        self.toxic = toxic
        self.next: ToxicStage | Sink = link.sink
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
            self.link.connection.abort()

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
            if self.link.reading_paused:
                self.link.update_reading()
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
        if self.link.reading_paused:
            self.link.update_reading()

    def dispose(self) -> None:
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.task = None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def pipe_latency(stage: ToxicStage, attributes: dict[str, int]) -> None:
    latency, jitter = attributes["latency"], attributes["jitter"]
    loop = stage.link.loop
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        delay_ms = latency
        if jitter > 0:
            delay_ms += stage.link.rng.randrange(jitter * 2) - jitter
        # Measured from when the chunk was read, so latency does not throttle throughput.
        sleep = delay_ms / 1000 - (loop.time() - chunk.timestamp)
        if sleep > 0:
            await asyncio.sleep(sleep)
        chunk.timestamp += sleep  # so a second latency toxic in the chain adds its own delay
        stage.emit(chunk)


async def pipe_bandwidth(stage: ToxicStage, attributes: dict[str, int]) -> None:
    rate = attributes["rate"]  # KB/s, i.e. bytes per millisecond
    loop = stage.link.loop
    debt = 0.0  # seconds the link is behind its rate; negative after oversleeping
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        if rate <= 0:
            stage.emit(chunk)  # Toxiproxy spins forever here; we pass the data unthrottled
            continue
        debt += len(chunk.data) / rate / 1000
        piece = rate * 100  # what the rate allows in 100 ms
        while len(chunk.data) > piece:
            await asyncio.sleep(0.1)
            head, rest = chunk.data[:piece], Chunk(chunk.data[piece:], chunk.timestamp)
            stage.emit_part(Chunk(head, chunk.timestamp), rest)
            chunk = rest
            debt -= 0.1
        started = loop.time()
        await asyncio.sleep(max(debt, 0.0))
        debt -= loop.time() - started
        stage.emit(chunk)


async def pipe_slow_close(stage: ToxicStage, attributes: dict[str, int]) -> None:
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            await asyncio.sleep(attributes["delay"] / 1000)
            stage.close()
            return
        stage.emit(chunk)


async def pipe_timeout(stage: ToxicStage, attributes: dict[str, int]) -> None:
    # As Toxiproxy's select loop re-arms its timer on every chunk, the timeout counts from the
    # last input: the link closes after ``timeout`` ms without data. 0 never closes.
    timeout = attributes["timeout"] / 1000 if attributes["timeout"] > 0 else None
    while True:
        chunk = await stage.get(timeout)
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        stage.drop()  # data is dropped on the ground, never delivered later


async def pipe_reset_peer(stage: ToxicStage, attributes: dict[str, int]) -> None:
    await stage.get()  # the first input (data or EOF) is dropped and arms the reset
    stage.drop()
    # Toxiproxy sleeps here without listening for interrupts: removing or updating the toxic
    # does not call the reset off, so it runs on a timer of the connection, not in this task.
    stage.link.connection.schedule_reset(stage.link, attributes["timeout"] / 1000)
    stage.task = None


def slice_offsets(start: int, end: int, average: int, variation: int,
                  rng: random.Random) -> list[int]:
    """Toxiproxy's ``SlicerToxic.chunk``: pairs of offsets, halving around ``average`` bytes."""
    if (end - start) - average <= variation or end - start <= 1:
        return [start, end]
    middle = start + (end - start) // 2
    if variation > 0:
        middle += rng.randrange(variation * 2) - variation
    middle = min(max(middle, start + 1), end - 1)  # never an empty or out-of-range slice
    return (slice_offsets(start, middle, average, variation, rng)
            + slice_offsets(middle, end, average, variation, rng))


async def pipe_slicer(stage: ToxicStage, attributes: dict[str, int]) -> None:
    average, variation = attributes["average_size"], attributes["size_variation"]
    delay = attributes["delay"] / 1_000_000
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        offsets = slice_offsets(0, len(chunk.data), average, variation, stage.link.rng)
        for index in range(1, len(offsets), 2):
            piece = Chunk(chunk.data[offsets[index - 1]:offsets[index]], chunk.timestamp)
            rest = Chunk(chunk.data[offsets[index]:], chunk.timestamp)
            if rest.data:
                stage.emit_part(piece, rest)
            else:
                stage.emit(piece)
            await asyncio.sleep(delay)


async def pipe_limit_data(stage: ToxicStage, attributes: dict[str, int]) -> None:
    limit = attributes["bytes"]
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        remaining = max(limit - stage.bytes_transmitted, 0)
        if remaining < len(chunk.data):
            chunk = Chunk(chunk.data[:remaining], chunk.timestamp)
        if chunk.data:
            stage.emit(chunk)
            stage.bytes_transmitted += len(chunk.data)
        else:
            stage.drop()
        if limit - stage.bytes_transmitted <= 0:
            stage.close()
            return


TOXIC_KINDS: dict[str, ToxicKind] = {kind.name: kind for kind in (
    ToxicKind("latency", "LatencyToxic", ("latency", "jitter"), pipe_latency),
    ToxicKind("bandwidth", "BandwidthToxic", ("rate",), pipe_bandwidth),
    ToxicKind("slow_close", "SlowCloseToxic", ("delay",), pipe_slow_close),
    ToxicKind("timeout", "TimeoutToxic", ("timeout",), pipe_timeout,
              closes_link_on_removal=True),
    ToxicKind("reset_peer", "ResetToxic", ("timeout",), pipe_reset_peer),
    ToxicKind("slicer", "SlicerToxic", ("average_size", "size_variation", "delay"), pipe_slicer),
    ToxicKind("limit_data", "LimitDataToxic", ("bytes",), pipe_limit_data),
)}


def decode_attributes(value: Any, kind: ToxicKind, into: dict[str, int]) -> None:
    """Decode ``attributes`` over ``into`` (absent keys keep their values, unknown ones are
    ignored), like Go decoding into the toxic's struct."""
    fields = object_fields(value, kind.attributes, f"toxics.{kind.go_struct}")
    for name, item in fields.items():
        into[name] = expect_int(item, f"{kind.go_struct}.attributes.{name}")


# --------------------------------------------------------------------------------------------
# Connections and links
# --------------------------------------------------------------------------------------------


class Link:
    """One direction of one proxied connection: source socket -> toxic stages -> destination."""

    def __init__(self, connection: Connection, direction: Direction,
                 source: asyncio.Transport) -> None:
        self.connection = connection
        self.direction = direction
        self.source = source
        self.dest: asyncio.Transport | None = None  # None while the upstream is being dialled
        self.loop = connection.loop
        self.rng = connection.proxy.rng
        self.sink = Sink(self)
        self.stages: list[ToxicStage] = []
        self.fast = False  # no toxic stages and destination open: write straight through
        self.source_done = False
        self.dest_paused = False
        self.reading_paused = False
        self.pending: list[bytes] = []  # read before the destination existed

    def attach(self, dest: asyncio.Transport, chain: list[Toxic]) -> None:
        self.dest = dest
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

    # --- input from the source socket (the fast path lives in _SocketSide.data_received) ----
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

    # --- the toxic chain, changed through the API ------------------------------------------
    def add(self, toxic: Toxic) -> None:
        if self.sink.closed:
            return  # the link already ended: a new toxic has nothing to act on
        stage = ToxicStage(self, toxic)
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


class _SocketSide(asyncio.Protocol):
    """The protocol of one socket of a connection (the client's or the upstream's)."""

    def __init__(self, connection: Connection, is_client: bool) -> None:
        self.connection = connection
        self.is_client = is_client
        self.outgoing: Link | None = None  # the link this socket's bytes go into
        self.incoming: Link | None = None  # the link that writes into this socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self.is_client:
            self.connection.client_connected(self, transport)
        else:
            self.connection.upstream_connected(self, transport)

    def data_received(self, data: bytes) -> None:
        link = self.outgoing
        assert link is not None
        if link.fast:
            link.dest.write(data)  # type: ignore[union-attr]  # fast implies dest is set
        else:
            link.feed(data)

    def eof_received(self) -> bool:
        if self.outgoing is not None:
            self.outgoing.feed_eof()
        return True  # keep the socket open for what the other direction still has to send

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.socket_lost(self)

    def pause_writing(self) -> None:
        if self.incoming is not None:
            self.incoming.dest_paused = True
            self.incoming.update_reading()

    def resume_writing(self) -> None:
        if self.incoming is not None:
            self.incoming.dest_paused = False
            self.incoming.update_reading()


class Connection:
    """A client accepted by a proxy, its upstream connection, and the two links between them."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.loop = proxy.loop
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.client_side: _SocketSide | None = None
        self.links: list[Link] = []
        self.open_sockets = 0
        self.finished = False
        self.connect_task: asyncio.Task[None] | None = None
        self.reset_timers: list[asyncio.TimerHandle] = []

    def client_connected(self, side: _SocketSide, transport: asyncio.Transport) -> None:
        self.client, self.client_side = transport, side
        self.open_sockets += 1
        side.outgoing = Link(self, Direction.UPSTREAM, transport)
        self.links.append(side.outgoing)
        self.proxy.connections.add(self)
        self.connect_task = self.loop.create_task(self._dial_upstream())

    async def _dial_upstream(self) -> None:
        try:
            host, port = split_host_port(self.proxy.upstream)
            await self.loop.create_connection(
                lambda: _SocketSide(self, is_client=False), host or "127.0.0.1", port)
        except (OSError, ValueError) as error:
            log.warning("proxy %s: cannot reach upstream %s: %s", self.proxy.name,
                        self.proxy.upstream, error)
            if self.client is not None:
                self.client.close()  # as Toxiproxy: the client is closed, the proxy goes on

    def upstream_connected(self, side: _SocketSide, transport: asyncio.Transport) -> None:
        if self.finished:
            transport.abort()
            return
        assert self.client is not None and self.client_side is not None
        self.upstream = transport
        self.open_sockets += 1
        to_upstream = self.client_side.outgoing
        assert to_upstream is not None
        to_client = Link(self, Direction.DOWNSTREAM, transport)
        self.links.append(to_client)
        self.client_side.incoming, side.outgoing, side.incoming = to_client, to_client, to_upstream
        for link in self.links:
            self.proxy.links[link.direction].add(link)
        to_upstream.attach(transport, self.proxy.chains[Direction.UPSTREAM])
        to_client.attach(self.client, self.proxy.chains[Direction.DOWNSTREAM])

    def socket_lost(self, side: _SocketSide) -> None:
        self.open_sockets -= 1
        if side.incoming is not None:
            side.incoming.dest_lost()
        if side.outgoing is not None:
            side.outgoing.feed_eof()  # a closed source is EOF for its link, as in Toxiproxy
        if self.open_sockets <= 0:
            self.finish()

    def schedule_reset(self, link: Link, delay: float) -> None:
        self.reset_timers.append(self.loop.call_later(delay, self._reset, link))

    def _reset(self, link: Link) -> None:
        """SO_LINGER 0 on both sockets, then close the link's destination: the peer gets an RST,
        and so does the other side once its link closes in turn."""
        for transport in (self.client, self.upstream):
            raw = transport.get_extra_info("socket") if transport is not None else None
            if raw is not None:
                with contextlib.suppress(OSError):
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        link.sink.push(None)

    def abort(self) -> None:
        """Close both sockets now (proxy disabled or deleted)."""
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abort()
        self.finish()

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.connect_task is not None:
            self.connect_task.cancel()
        for timer in self.reset_timers:
            timer.cancel()
        for link in self.links:
            link.dispose()
            self.proxy.links[link.direction].discard(link)
        self.proxy.connections.discard(self)


# --------------------------------------------------------------------------------------------
# Proxies and the collection of them
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Proxy:
    name: str
    listen: str
    upstream: str
    loop: asyncio.AbstractEventLoop
    rng: random.Random
    enabled: bool = False
    chains: tuple[list[Toxic], list[Toxic]] = field(default_factory=lambda: ([], []))
    listener: asyncio.Server | None = None
    connections: set[Connection] = field(default_factory=set)
    links: tuple[set[Link], set[Link]] = field(default_factory=lambda: (set(), set()))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": [t.to_json() for t in self.toxics()]}

    # --- running --------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (``ApiError`` 500 with Go's ``listen tcp …`` message when that fails)."""
        if self.enabled:
            return
        try:
            sock, self.listen = bind_listener(self.listen)
        except (OSError, ValueError) as error:
            detail = go_os_error(error) if isinstance(error, OSError) else str(error)
            if isinstance(error, OSError) and error.errno is not None:
                detail = f"bind: {detail}"
            raise ApiError(f"listen tcp {self.listen}: {detail}", 500) from None
        self.listener = await self.loop.create_server(
            lambda: _SocketSide(Connection(self), is_client=True), sock=sock)
        self.enabled = True

    def stop(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        for connection in list(self.connections):
            connection.abort()

    # --- toxics ---------------------------------------------------------------------------
    def toxics(self) -> list[Toxic]:
        return [*self.chains[Direction.UPSTREAM], *self.chains[Direction.DOWNSTREAM]]

    def find_toxic(self, name: str) -> Toxic | None:
        return next((toxic for toxic in self.toxics() if toxic.name == name), None)

    def add_toxic(self, toxic: Toxic) -> None:
        self.chains[toxic.direction].append(toxic)
        for link in list(self.links[toxic.direction]):
            link.add(toxic)

    def update_toxic(self, toxic: Toxic) -> None:
        for link in list(self.links[toxic.direction]):
            link.update(toxic)

    def remove_toxic(self, toxic: Toxic) -> None:
        self.chains[toxic.direction].remove(toxic)
        for link in list(self.links[toxic.direction]):
            link.remove(toxic)

    def reset_toxics(self) -> None:
        for toxic in self.toxics():
            self.remove_toxic(toxic)


# --------------------------------------------------------------------------------------------
# The HTTP API
# --------------------------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    version: str = "HTTP/1.1"

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = "application/json"


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, go_json(value))


def error_response(error: ApiError) -> Response:
    # api.go's apiError goes through Go's http.Error: text/plain, newline-terminated.
    body = go_json({"error": error.message, "status": error.status}) + b"\n"
    return Response(error.status, body, "text/plain; charset=utf-8")


class HttpError(Exception):
    """A request we cannot or will not read; the connection is answered ``status`` and closed."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


MAX_HEADER_BYTES = 1 << 16


@dataclass(frozen=True)
class HttpLimits:
    """What one API client may cost the server (Toxiproxy itself sets none of these): a body
    bigger than ``max_body_bytes`` is refused with 413; a request whose head or body trickles in
    slower than the timeouts allow (a slowloris client) gets 408; an idle keep-alive connection
    is closed after ``idle_timeout_s``. Each connection is its own task, so a slow one never
    holds up the others."""

    max_body_bytes: int = 1 << 20
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 120.0


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       limits: HttpLimits = HttpLimits()) -> Request | None:
    try:  # the first byte may take as long as a keep-alive connection may idle ...
        first = await asyncio.wait_for(reader.readexactly(1), limits.idle_timeout_s)
    except (asyncio.IncompleteReadError, TimeoutError):
        return None
    try:  # ... the rest of the head must follow promptly
        head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                              limits.header_timeout_s)
    except asyncio.IncompleteReadError:
        raise HttpError("truncated request") from None
    except asyncio.LimitOverrunError:
        raise HttpError("request head too large", 431) from None
    except TimeoutError:
        raise HttpError("request head not received in time", 408) from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise HttpError(f"bad request line {lines[0]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        body = await asyncio.wait_for(read_body(reader, headers, limits.max_body_bytes),
                                      limits.body_timeout_s)
    except TimeoutError:
        raise HttpError("request body not received in time", 408) from None
    except asyncio.IncompleteReadError:
        raise HttpError("truncated request body") from None
    path = unquote(urlsplit(target).path)
    return Request(method.upper(), path, headers, body, version.strip().upper())


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str],
                    max_bytes: int) -> bytes:
    too_large = HttpError(f"request body larger than {max_bytes} bytes", 413)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size_text = size_line.split(b";")[0].strip() or b"0"
            if not all(c in b"0123456789abcdefABCDEF" for c in size_text) or len(size_text) > 16:
                raise HttpError("bad chunk size")
            size = int(size_text, 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > max_bytes:
                raise too_large
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if headers.get("content-length"):
        text = headers["content-length"]
        if not (text.isascii() and text.isdigit()):
            raise HttpError("bad content length")
        if int(text) > max_bytes:
            raise too_large
        return await reader.readexactly(int(text))
    return b""


def encode_response(response: Response, keep_alive: bool) -> bytes:
    status = http.HTTPStatus(response.status)
    lines = [f"HTTP/1.1 {status.value} {status.phrase}",
             f"Date: {email.utils.formatdate(usegmt=True)}",
             f"Server: {SERVER_HEADER}",
             f"X-Toxiproxy-Request-Id: {secrets.token_hex(10)}"]
    if response.content_type and response.body:
        lines.append(f"Content-Type: {response.content_type}")
    if response.content_type and response.content_type.startswith("text/plain"):
        lines.append("X-Content-Type-Options: nosniff")
    if response.status != 204:
        lines.append(f"Content-Length: {len(response.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


Handler = Callable[..., Awaitable[Response]]


class ToxiproxyApi:
    """Toxiproxy's API handlers over one collection of proxies, all on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seed: int | None = None,
                 limits: HttpLimits = HttpLimits()) -> None:
        self.loop = loop
        self.limits = limits
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}
        # Handlers await (binding a listener), so one lock keeps each API call atomic, as
        # Toxiproxy's collection and proxy mutexes do.
        self.lock = asyncio.Lock()
        self.routes: list[tuple[tuple[str, ...], dict[str, Handler]]] = [
            (("reset",), {"POST": self.reset}),
            (("proxies",), {"GET": self.proxy_index, "POST": self.proxy_create}),
            (("populate",), {"POST": self.populate}),
            (("proxies", "*"), {"GET": self.proxy_show, "POST": self.proxy_update,
                                "PATCH": self.proxy_update, "DELETE": self.proxy_delete}),
            (("proxies", "*", "toxics"), {"GET": self.toxic_index, "POST": self.toxic_create}),
            (("proxies", "*", "toxics", "*"), {"GET": self.toxic_show,
                                               "POST": self.toxic_update,
                                               "PATCH": self.toxic_update,
                                               "DELETE": self.toxic_delete}),
            (("version",), {"GET": self.version}),
        ]

    async def handle(self, request: Request) -> Response:
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return Response(403, b"User agent not allowed\n", "text/plain; charset=utf-8")
        segments = tuple(request.path.split("/")[1:]) if request.path.startswith("/") else ()
        for pattern, methods in self.routes:
            if len(pattern) != len(segments) or not all(
                    want == "*" and got or want == got for want, got in zip(pattern, segments,
                                                                            strict=True)):
                continue
            handler = methods.get(request.method)
            if handler is None:
                return Response(405, b"", None)
            arguments = [got for want, got in zip(pattern, segments, strict=True) if want == "*"]
            async with self.lock:
                try:
                    return await handler(request, *arguments)
                except ApiError as error:
                    return error_response(error)
                except Exception as error:  # a bug here must not take the API down
                    log.exception("%s %s failed", request.method, request.path)
                    return error_response(ApiError(f"internal error: {error}", 500))
        return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def proxy(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise api_error(ERR_PROXY_NOT_FOUND) from None

    # --- /version, /reset -----------------------------------------------------------------
    async def version(self, request: Request) -> Response:
        body = f'{{"version": "{TOXIPROXY_VERSION}"}}\n'.encode()
        return Response(200, body, "application/json;charset=utf-8")

    async def reset(self, request: Request) -> Response:
        for proxy in list(self.proxies.values()):
            await proxy.start()
            proxy.reset_toxics()
        return Response(204, b"", None)

    # --- proxies --------------------------------------------------------------------------
    async def proxy_index(self, request: Request) -> Response:
        return json_response({name: self.proxies[name].to_json() for name in sorted(self.proxies)})

    def parse_proxy(self, value: Any, defaults: dict[str, Any], where: str) -> dict[str, Any]:
        fields = object_fields(value, ("name", "listen", "upstream", "enabled"), where)
        parsed = dict(defaults)
        for name, item in fields.items():
            if name == "enabled":
                parsed[name] = expect_bool(item, f"Proxy.{name}")
            else:
                parsed[name] = expect_str(item, f"Proxy.{name}")
        return parsed

    async def proxy_create(self, request: Request) -> Response:
        spec = self.parse_proxy(decode_body(request.body),
                                {"name": "", "listen": "", "upstream": "", "enabled": True},
                                "toxiproxy.Proxy")
        if not spec["name"]:
            raise missing_field("name")
        if not spec["upstream"]:
            raise missing_field("upstream")
        if spec["name"] in self.proxies:
            raise api_error(ERR_PROXY_EXISTS)
        proxy = self.new_proxy(spec)
        if spec["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return json_response(proxy.to_json(), 201)

    def new_proxy(self, spec: dict[str, Any]) -> Proxy:
        return Proxy(spec["name"], spec["listen"], spec["upstream"], self.loop, self.rng)

    async def differs(self, proxy: Proxy, listen: str, upstream: str) -> bool:
        try:
            resolved = await resolve_tcp_address(listen)
        except (OSError, ValueError) as error:
            raise ApiError(str(error), 500) from None
        return proxy.listen != resolved or proxy.upstream != upstream

    async def populate(self, request: Request) -> Response:
        created: list[Proxy] = []
        try:
            value = decode_body(request.body)
            if not isinstance(value, list):
                raise bad_request_body(
                    f"json: cannot unmarshal {_GO_KIND.get(type(value), 'value')} into Go "
                    "value of type []toxiproxy.Proxy")
            specs = [self.parse_proxy(item, {"name": "", "listen": "", "upstream": "",
                                             "enabled": True}, "toxiproxy.Proxy")
                     for item in value]
            for number, spec in enumerate(specs, 1):
                if not spec["name"]:
                    raise missing_field(f"name at proxy {number}")
                if not spec["upstream"]:
                    raise missing_field(f"upstream at proxy {number}")
            for spec in specs:
                existing = self.proxies.get(spec["name"])
                if existing is not None:
                    if not await self.differs(existing, spec["listen"], spec["upstream"]):
                        created.append(existing)  # same addresses: left exactly as it is
                        continue
                    existing.stop()
                proxy = self.new_proxy(spec)
                if spec["enabled"]:
                    await proxy.start()
                self.proxies[proxy.name] = proxy
                created.append(proxy)
        except ApiError as error:
            body = {"error": error.message, "status": error.status,
                    "proxies": [p.to_json() for p in created] or None}
            return json_response(body, error.status)
        return json_response({"proxies": [p.to_json() for p in created] or None}, 201)

    async def proxy_show(self, request: Request, name: str) -> Response:
        return json_response(self.proxy(name).to_json())

    async def proxy_update(self, request: Request, name: str) -> Response:
        proxy = self.proxy(name)
        spec = self.parse_proxy(decode_body(request.body),
                                {"name": proxy.name, "listen": proxy.listen,
                                 "upstream": proxy.upstream, "enabled": proxy.enabled},
                                "toxiproxy.Proxy")
        if await self.differs(proxy, spec["listen"], spec["upstream"]):
            proxy.stop()  # a new address drops every connection, as in Toxiproxy
            proxy.listen, proxy.upstream = spec["listen"], spec["upstream"]
        if spec["enabled"] != proxy.enabled:
            if spec["enabled"]:
                await proxy.start()
            else:
                proxy.stop()
        return json_response(proxy.to_json())

    async def proxy_delete(self, request: Request, name: str) -> Response:
        self.proxy(name).stop()
        del self.proxies[name]
        return Response(204, b"", None)

    # --- toxics ---------------------------------------------------------------------------
    async def toxic_index(self, request: Request, name: str) -> Response:
        return json_response([toxic.to_json() for toxic in self.proxy(name).toxics()])

    async def toxic_create(self, request: Request, name: str) -> Response:
        proxy = self.proxy(name)
        value = decode_body(request.body)
        fields = object_fields(value, ("name", "type", "stream", "toxicity", "attributes"),
                               "toxics.ToxicWrapper")
        toxic_name = expect_str(fields.get("name", ""), "ToxicWrapper.name")
        type_name = expect_str(fields.get("type", ""), "ToxicWrapper.type")
        stream = expect_str(fields.get("stream", "downstream"), "ToxicWrapper.stream")
        toxicity = expect_float32(fields.get("toxicity", 1.0), "ToxicWrapper.toxicity")
        if "attributes" in fields and not isinstance(fields["attributes"], dict):
            raise type_error(fields["attributes"], "ToxicWrapper.attributes",
                             "toxics.NoopToxic")
        direction = Direction.parse(stream)
        toxic_name = toxic_name or f"{type_name}_{stream}"
        kind = TOXIC_KINDS.get(type_name)
        if kind is None:
            raise api_error(ERR_INVALID_TOXIC_TYPE)
        if proxy.find_toxic(toxic_name) is not None:
            raise api_error(ERR_TOXIC_EXISTS)
        attributes = dict.fromkeys(kind.attributes, 0)
        if "attributes" in fields:
            decode_attributes(fields["attributes"], kind, attributes)
        toxic = Toxic(toxic_name, kind, stream, direction, toxicity, attributes)
        proxy.add_toxic(toxic)
        return json_response(toxic.to_json())  # 200: Toxiproxy sets no 201 here

    def toxic(self, proxy: Proxy, name: str) -> Toxic:
        toxic = proxy.find_toxic(name)
        if toxic is None:
            raise api_error(ERR_TOXIC_NOT_FOUND)
        return toxic

    async def toxic_show(self, request: Request, name: str, toxic_name: str) -> Response:
        return json_response(self.toxic(self.proxy(name), toxic_name).to_json())

    async def toxic_update(self, request: Request, name: str, toxic_name: str) -> Response:
        proxy = self.proxy(name)
        toxic = self.toxic(proxy, toxic_name)
        fields = object_fields(decode_body(request.body), ("attributes", "toxicity"),
                               "toxics.ToxicWrapper")
        attributes = dict(toxic.attributes)
        if "attributes" in fields:
            decode_attributes(fields["attributes"], toxic.kind, attributes)
        toxicity = expect_float32(fields.get("toxicity", toxic.toxicity), "toxicity")
        toxic.attributes, toxic.toxicity = attributes, toxicity
        proxy.update_toxic(toxic)
        return json_response(toxic.to_json())

    async def toxic_delete(self, request: Request, name: str, toxic_name: str) -> Response:
        proxy = self.proxy(name)
        proxy.remove_toxic(self.toxic(proxy, toxic_name))
        return Response(204, b"", None)

    # --- the HTTP connection loop ---------------------------------------------------------
    async def serve_http(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    request = await read_request(reader, writer, self.limits)
                except (HttpError, ValueError, asyncio.LimitOverrunError,
                        asyncio.IncompleteReadError) as error:
                    status = error.status if isinstance(error, HttpError) else 400
                    phrase = http.HTTPStatus(status).phrase
                    writer.write(encode_response(Response(
                        status, f"{status} {phrase}: {error}\n".encode(),
                        "text/plain; charset=utf-8"), False))
                    with contextlib.suppress(ConnectionError, TimeoutError):
                        await asyncio.wait_for(writer.drain(), self.limits.header_timeout_s)
                    break
                if request is None:
                    break
                writer.write(encode_response(await self.handle(request), request.keep_alive))
                # A client that does not read its replies must not hold the connection forever.
                await asyncio.wait_for(writer.drain(), self.limits.body_timeout_s)
                if not request.keep_alive:
                    break
        except (ConnectionError, TimeoutError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def shutdown(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()


# --------------------------------------------------------------------------------------------
# Running it: serve() / main() in the foreground, ToxiproxyServer in a background thread
# --------------------------------------------------------------------------------------------


async def run_server(host: str, port: int, stop: asyncio.Event,
                     on_ready: Callable[[int], None], seed: int | None = None,
                     limits: HttpLimits = HttpLimits()) -> None:
    """Serve the API on ``host:port`` (0 = a free port) until ``stop`` is set, then close every
    listener and connection."""
    loop = asyncio.get_running_loop()
    api = ToxiproxyApi(loop, seed, limits)
    server = await asyncio.start_server(api.serve_http, host, port, limit=MAX_HEADER_BYTES,
                                        reuse_address=True)
    try:
        bound_port = int(server.sockets[0].getsockname()[1])
        on_ready(bound_port)
        await stop.wait()
    finally:
        server.close()
        api.shutdown()
        # Let aborted transports run their connection_lost callbacks before the loop closes.
        await asyncio.sleep(0)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, seed: int | None = None) -> None:
    """Run the server in the foreground until SIGINT or SIGTERM. Prints one line to stderr when
    it listens: ``toxiproxy-compatible server listening on HOST:PORT``."""

    async def main_task() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)

        def announce(bound_port: int) -> None:
            print(f"toxiproxy-compatible server listening on {join_host_port(host, bound_port)}",
                  file=sys.stderr, flush=True)

        await run_server(host, port, stop, announce, seed)

    asyncio.run(main_task())


class ToxiproxyServer:
    """The server on its own event loop in a background thread, for tests and embedding.

    ``start()`` returns once the API listens; ``port`` and ``url`` then tell where.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 seed: int | None = None, limits: HttpLimits = HttpLimits()) -> None:
        self.host = host
        self.port = port
        self.seed = seed
        self.limits = limits
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{join_host_port(self.host, self.port)}"

    def start(self, timeout: float = 10.0) -> ToxiproxyServer:
        ready = threading.Event()

        def on_ready(bound_port: int) -> None:
            self.port = bound_port
            ready.set()

        async def main_task() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run_server(self.host, self.port, self._stop, on_ready, self.seed,
                             self.limits)

        def run() -> None:
            try:
                asyncio.run(main_task())
            except BaseException as error:  # reported by start()
                self._error = error
                ready.set()

        self._thread = threading.Thread(target=run, name="toxiproxy-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"toxiproxy-compatible server not listening after {timeout}s")
        if self._error is not None:
            raise RuntimeError(f"toxiproxy-compatible server failed: {self._error}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port number, 0 (any free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535)")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.network.server",
        description=f"A Toxiproxy {TOXIPROXY_VERSION}-compatible server (HTTP API and toxics).")
    # -host/-port too: toxiproxy-server's own flags, so this can stand in for its image
    parser.add_argument("--host", "-host", default="127.0.0.1",
                        help="API address (default 127.0.0.1)")
    parser.add_argument("--port", "-port", type=tcp_port, default=DEFAULT_PORT,
                        help=f"API port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for toxicity rolls, jitter and slicing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    try:
        serve(args.host, args.port, seed=args.seed)
    except OSError as error:
        print(f"toxiproxy-compatible server: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
