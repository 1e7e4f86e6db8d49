"""The built-in Toxiproxy API under hostile clients: random requests (malformed JSON, wrong types,
wrong methods, unknown names), raw garbage, huge bodies and slowloris connections. It must answer
each with a 4xx (never a 500, except Toxiproxy's own "listen tcp …" when a listener cannot bind),
refuse oversized bodies with 413, time slow clients out with 408, and keep serving everyone else.

Real server on 127.0.0.1 (in a thread), real sockets; hypothesis derandomized, bounded examples.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.network.server import HttpLimits, ToxiproxyServer
from chaos.runtime.valkey import free_port

LIMITS = HttpLimits(max_body_bytes=64 * 1024, header_timeout_s=0.5, body_timeout_s=0.5,
                    idle_timeout_s=2.0)
IO_TIMEOUT = 5.0


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])



@pytest.fixture(scope="module")
def server() -> Iterator[ToxiproxyServer]:
    with ToxiproxyServer(limits=LIMITS) as running:
        yield running


def call(server: ToxiproxyServer, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=IO_TIMEOUT)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def raw_exchange(server: ToxiproxyServer, data: bytes) -> bytes:
    """Send raw bytes, half-close, read until the server closes (bounded)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def assert_alive(server: ToxiproxyServer) -> None:
    status, body = call(server, "GET", "/version")
    assert status == 200 and b"version" in body


def assert_not_a_crash(status: int, body: bytes) -> None:
    assert 200 <= status < 500 or (status == 500 and body.startswith(b'{"error":"listen tcp')), \
        (status, body[:300])


NAMES = st.sampled_from(["fuzz", "known", "nope", "", "a b", "%2e%2e", "..", "known/x", "ü"])
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.floats(allow_nan=False), st.text(max_size=12),
                         st.sampled_from(["latency", "timeout", "bandwidth", "slicer", "upstream",
                                          "downstream", "127.0.0.1:0", "localhost:0", "known",
                                          "127.0.0.1:1", "nonsense:port", ":0", "[::1]:0"]))
FIELDS = st.sampled_from(["name", "listen", "upstream", "enabled", "type", "stream", "toxicity",
                          "attributes", "latency", "jitter", "rate", "delay", "timeout",
                          "average_size", "size_variation", "bytes", "extra"])
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(FIELDS, inner, max_size=5), max_leaves=10)
BODIES = st.one_of(
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(FIELDS, JSON_VALUES, max_size=6).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=60),
    st.sampled_from([b"", b"{", b"[", b'{"name":', b"null", b"\xff\xfe", b"1e999", b'"x"']),
)
PATHS = st.one_of(
    st.builds(lambda parts: "/" + "/".join(parts), st.lists(
        st.sampled_from(["proxies", "toxics", "version", "reset", "populate", "known", "fuzz",
                         "t1", "nope", ""]), max_size=5)),
    st.builds(lambda a, b: f"/proxies/{a}/toxics/{b}", NAMES, NAMES),
    st.text(max_size=15).map(lambda text: "/" + text),
).map(lambda path: quote(path, safe="/%"))  # what a client puts on the wire
METHODS = st.sampled_from(["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS", "TRACE",
                           "BREW"])

examples = {"api": 0, "raw": 0}


@fuzz(300)
@given(METHODS, PATHS, BODIES)
def test_random_api_requests_get_a_4xx_never_a_500(server: ToxiproxyServer, method: str,
                                                    path: str, body: bytes):
    if examples["api"] == 0:  # a proxy and a toxic to hit, with a dead upstream
        call(server, "POST", "/proxies", json.dumps(
            {"name": "known", "listen": "127.0.0.1:0",
             "upstream": f"127.0.0.1:{free_port()}"}).encode())
        call(server, "POST", "/proxies/known/toxics",
             json.dumps({"name": "t1", "type": "latency",
                         "attributes": {"latency": 1}}).encode())
    examples["api"] += 1
    status, reply = call(server, method, path, body if method != "GET" else None)
    assert_not_a_crash(status, reply)
    if status >= 400 and reply and method != "HEAD" and reply.startswith(b"{"):
        error = json.loads(reply)  # Toxiproxy's error shape
        assert {"error", "status"} <= set(error) and error["status"] == status
    if examples["api"] % 50 == 0:
        assert_alive(server)


REQUEST_LINES = st.sampled_from([b"GET /version HTTP/1.1", b"POST /proxies HTTP/1.1",
                                 b"GET", b"", b"\x00\x01", b"GET /version", b"G E T / H",
                                 b"POST /populate HTTP/1.0"])
HEADERS = st.lists(st.sampled_from([
    b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999999999999",
    b"Content-Length: abc", b"Content-Length: +4", b"Content-Length: \xd9\xa3",
    b"Transfer-Encoding: chunked", b"Expect: 100-continue", b"Connection: close",
    b"Connection: keep-alive", b"User-Agent: Mozilla/5.0", b"no colon here", b": empty name",
    b"Host: x"]), max_size=5)
TAILS = st.sampled_from([b"", b"hello", b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nhi\r\n",
                         b"ffffffffffffffffff\r\n", b"3\r\nab", b"{}", b"[]",
                         b"0\r\nTrailer: x\r\n\r\n"])


@fuzz(200)
@given(REQUEST_LINES, HEADERS, TAILS, st.binary(max_size=40))
def test_raw_garbage_gets_a_4xx_or_a_closed_connection(server: ToxiproxyServer, line: bytes,
                                                       headers: list[bytes], tail: bytes,
                                                       noise: bytes):
    examples["raw"] += 1
    reply = raw_exchange(server, line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + tail
                         + noise)
    for status_line in (part.split(b"\r\n", 1)[0] for part in reply.split(b"HTTP/1.1 ")[1:]):
        status = int(status_line.split(b" ", 1)[0])
        assert status != 500, reply[:400]
    if examples["raw"] % 50 == 0:
        assert_alive(server)


def test_fuzzing_left_the_server_serving(server: ToxiproxyServer):
    assert_alive(server)
    status, body = call(server, "GET", "/proxies")
    assert status == 200 and isinstance(json.loads(body), dict)


def test_huge_bodies_are_refused_with_413_without_being_read(server: ToxiproxyServer):
    limit = LIMITS.max_body_bytes
    # Announced as a terabyte: refused at once, the body never sent.
    reply = raw_exchange(server, b"POST /proxies HTTP/1.1\r\nContent-Length: "
                         + str(10**12).encode() + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ")
    status, _ = call(server, "POST", "/populate", b"[" + b" " * limit + b"]")
    assert status == 413
    chunked = b"".join(b"%x\r\n%s\r\n" % (4096, b" " * 4096) for _ in range(limit // 4096 + 1))
    reply = raw_exchange(server, b"POST /populate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + chunked + b"0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ")
    # Exactly at the limit is read and judged on its content (here: not a list of proxies).
    status, body = call(server, "POST", "/populate", b"{" + b" " * (limit - 2) + b"}")
    assert status == 400 and b"cannot unmarshal object" in body
    assert_alive(server)


def test_slowloris_clients_time_out_and_never_block_the_others(server: ToxiproxyServer):
    """Twenty clients trickle a request head, one byte at a time; five send half a body. Each is
    answered 408 and closed about when its timeout says; meanwhile /version answers at once."""
    results: dict[int, tuple[bytes, float]] = {}

    def trickle(index: int) -> None:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT) as sock:
            if index < 5:
                sock.sendall(b"POST /proxies HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"na")
            head = b"GET /version HTTP/1.1\r\nHost: slow\r\nX-Pad: " + b"a" * 200
            try:
                for byte in head if index >= 5 else b"":
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
            except OSError:  # the server gave up on us mid-trickle: what we want
                pass
            reply = b""
            try:
                while chunk := sock.recv(4096):
                    reply += chunk
            except OSError:
                pass
        results[index] = (reply, time.monotonic() - started)

    threads = [threading.Thread(target=trickle, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)
    served = []
    while any(thread.is_alive() for thread in threads):
        asked = time.monotonic()
        assert_alive(server)
        served.append(time.monotonic() - asked)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert len(results) == 20 and len(served) >= 3
    for index, (reply, took) in results.items():
        assert reply.startswith(b"HTTP/1.1 408 "), (index, reply[:200])
        # Cut off by its timeout, long before a 200-byte trickle at 20 bytes/s would end.
        assert took < 200 * 0.05 / 2, (index, took)
    # Served while twenty connections hung: each /version took a fraction of a timeout.
    assert sorted(served)[len(served) // 2] < LIMITS.header_timeout_s


def test_an_idle_keep_alive_connection_is_closed(server: ToxiproxyServer):
    with socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
        idle = time.monotonic() - started
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.count(b"HTTP/1.1") == 1
    assert LIMITS.idle_timeout_s * 0.9 <= idle < IO_TIMEOUT


def test_default_limits_are_bounded():
    limits = HttpLimits()
    assert 0 < limits.max_body_bytes <= 16 << 20
    assert 0 < limits.header_timeout_s <= 60 and 0 < limits.body_timeout_s <= 60
    assert ToxiproxyServer().limits == limits


