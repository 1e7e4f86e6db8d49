"""The HTTP/1.1 under the API: reading requests, writing responses, one keep-alive connection loop.

Toxiproxy serves its API with Go's ``net/http``; this reproduces what a client can see of that
(the status line, ``Content-Type``, ``Content-Length``, ``Connection: close``, plain-text errors)
and bounds what a client may cost the server, which Toxiproxy does not (:class:`HttpLimits`): a
body over 1 MiB gets 413, a request head not complete within 10 s or a body within 30 s gets 408
(slowloris clients), an idle keep-alive connection closes after 120 s; a head over 64 KiB gets
431.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from chaos.network.version import SERVER_HEADER


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


DEFAULT_LIMITS = HttpLimits()


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       limits: HttpLimits = DEFAULT_LIMITS) -> Request | None:
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


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           handle: Callable[[Request], Awaitable[Response]],
                           limits: HttpLimits) -> None:
    """Answer the requests of one API connection with ``handle`` until it closes, or a request
    cannot be read (answered with its 4xx, then closed)."""
    try:
        while True:
            try:
                request = await read_request(reader, writer, limits)
            except (HttpError, ValueError, asyncio.LimitOverrunError,
                    asyncio.IncompleteReadError) as error:
                status = error.status if isinstance(error, HttpError) else 400
                phrase = http.HTTPStatus(status).phrase
                writer.write(encode_response(Response(
                    status, f"{status} {phrase}: {error}\n".encode(),
                    "text/plain; charset=utf-8"), False))
                with contextlib.suppress(ConnectionError, TimeoutError):
                    await asyncio.wait_for(writer.drain(), limits.header_timeout_s)
                break
            if request is None:
                break
            writer.write(encode_response(await handle(request), request.keep_alive))
            # A client that does not read its replies must not hold the connection forever.
            await asyncio.wait_for(writer.drain(), limits.body_timeout_s)
            if not request.keep_alive:
                break
    except (ConnectionError, TimeoutError, asyncio.CancelledError):
        pass
    finally:
        writer.close()
