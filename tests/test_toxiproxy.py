"""Conformance suite for the Toxiproxy-compatible server (``chaos.network.server``),
docs/design.md §3.

Written against Toxiproxy 2.x's published API and behaviour (README, api.go, toxics/*.go), over
real TCP on 127.0.0.1: raw HTTP for exact status codes and bodies, ``toxiproxy-python`` the way
the runtime drives it, and small upstream servers made here. Every test runs against the built-in
server and, when ``toxiproxy-server`` is on PATH, against the real one too.

Timing assertions are lower bounds only (a toxic delays *at least* this much); "no data" checks
wait a bounded time. Nothing asserts an upper wall-clock bound.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.network.server import TOXIPROXY_VERSION, ToxiproxyServer
from chaos.protocol.client import redis_client
from chaos.runtime.valkey import ValkeyServer, free_port

IO_TIMEOUT = 5.0  # the most any single socket read in this file may wait
QUIET_WAIT = 0.5  # how long "no bytes arrive" is watched for
LATE = 0.002  # timer slack allowed below a configured delay (clock and scheduling granularity)

# "Logger": Toxiproxy's Proxy struct has an exported zerolog.Logger field, encoded as {}.
PROXY_KEYS = ["name", "listen", "upstream", "enabled", "Logger", "toxics"]
TOXIC_KEYS = ["attributes", "name", "type", "stream", "toxicity"]


# --------------------------------------------------------------------------------------------
# The server under test: built-in (in-process) or the real toxiproxy-server (spawned)
# --------------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Api:
    kind: str
    host: str
    port: int

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> Reply:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=IO_TIMEOUT)
        try:
            payload = raw if raw is not None else (
                None if body is None else json.dumps(body).encode())
            connection.request(method, path, body=payload, headers=headers or {})
            response = connection.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()},
                         response.read())
        finally:
            connection.close()

    def client(self) -> Toxiproxy:
        client = Toxiproxy()
        client.update_api_consumer(self.host, self.port)
        return client

    def create(self, name: str, upstream: str, **extra: Any) -> dict[str, Any]:
        reply = self.call("POST", "/proxies", {"name": name, "listen": "127.0.0.1:0",
                                               "upstream": upstream, **extra})
        assert reply.status == 201, reply.body
        result: dict[str, Any] = reply.json
        return result

    def add_toxic(self, proxy: str, **toxic: Any) -> dict[str, Any]:
        reply = self.call("POST", f"/proxies/{proxy}/toxics", toxic)
        assert reply.status == 200, reply.body
        result: dict[str, Any] = reply.json
        return result

    def remove_toxic(self, proxy: str, toxic: str) -> None:
        assert self.call("DELETE", f"/proxies/{proxy}/toxics/{toxic}").status == 204

    def set_enabled(self, proxy: str, enabled: bool) -> dict[str, Any]:
        reply = self.call("POST", f"/proxies/{proxy}", {"enabled": enabled})
        assert reply.status == 200, reply.body
        result: dict[str, Any] = reply.json
        return result

    def delete_all(self) -> None:
        for name in self.call("GET", "/proxies").json:
            self.call("DELETE", f"/proxies/{name}")


def wait_for_version(api: Api, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError("toxiproxy-server exited during start-up")
        try:
            if api.call("GET", "/version").status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("toxiproxy-server API not answering")


@pytest.fixture(scope="module", params=["builtin", "toxiproxy-server"])
def server(request: pytest.FixtureRequest) -> Iterator[Api]:
    if request.param == "builtin":
        builtin = ToxiproxyServer(seed=1).start()
        yield Api("builtin", "127.0.0.1", builtin.port)
        builtin.stop()
        return
    binary = shutil.which("toxiproxy-server")
    if binary is None:
        pytest.skip("toxiproxy-server is not on PATH (no registry here carries it): only the "
                    "built-in server is checked")
    port = free_port()
    process = subprocess.Popen([binary, "-host", "127.0.0.1", "-port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        api = Api("toxiproxy-server", "127.0.0.1", port)
        wait_for_version(api, process)
        yield api
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def api(server: Api) -> Iterator[Api]:
    """The server, left without proxies after each test."""
    yield server
    server.delete_all()


# --------------------------------------------------------------------------------------------
# Upstream servers and sockets
# --------------------------------------------------------------------------------------------


@dataclass
class Upstream:
    """A TCP server on 127.0.0.1 handing each accepted socket to ``handler`` (or a queue)."""

    handler: Callable[[socket.socket], None] | None = None
    accepted: queue.Queue[socket.socket] = field(default_factory=queue.Queue)
    sockets: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            sock.settimeout(IO_TIMEOUT)
            self.sockets.append(sock)
            if self.handler is None:
                self.accepted.put(sock)
            else:
                threading.Thread(target=self.handler, args=(sock,), daemon=True).start()

    def accept(self) -> socket.socket:
        return self.accepted.get(timeout=IO_TIMEOUT)

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def echo(sock: socket.socket) -> None:
    try:
        while data := sock.recv(65536):
            sock.sendall(data)
    except OSError:
        pass
    finally:
        sock.close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture
def echo_upstream() -> Iterator[Upstream]:
    server = Upstream(handler=echo)
    yield server
    server.close()


def connect(listen: str) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AssertionError(f"EOF after {len(data)} of {size} bytes")
        data += chunk
    return data


def recv_to_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def assert_quiet(sock: socket.socket, wait: float = QUIET_WAIT) -> None:
    """No byte (and no EOF) arrives on ``sock`` within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        with pytest.raises(TimeoutError):
            sock.recv(1)
    finally:
        sock.settimeout(IO_TIMEOUT)


def assert_closed(sock: socket.socket) -> None:
    """The peer closed: EOF or a reset within IO_TIMEOUT (else TimeoutError fails the test),
    after any bytes still in flight."""
    with contextlib.suppress(ConnectionResetError):
        recv_to_eof(sock)


def round_trip(sock: socket.socket, payload: bytes = b"ping") -> float:
    started = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - started


def linked(api: Api, upstream: Upstream, name: str = "link"
           ) -> tuple[socket.socket, socket.socket, dict[str, Any]]:
    """A proxy to ``upstream`` and one connection through it: (client end, server end, proxy)."""
    proxy = api.create(name, upstream.address)
    client = connect(proxy["listen"])
    server = upstream.accept()
    client.sendall(b"hello")
    assert recv_exactly(server, 5) == b"hello"
    server.sendall(b"world")
    assert recv_exactly(client, 5) == b"world"
    return client, server, proxy


# --------------------------------------------------------------------------------------------
# HTTP API: endpoints, status codes, JSON shapes, errors
# --------------------------------------------------------------------------------------------


def test_version_is_json_with_the_version(api: Api):
    reply = api.call("GET", "/version")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.body.endswith(b"\n")
    version = reply.json["version"]
    assert isinstance(version, str) and version
    if api.kind == "builtin":
        assert version == TOXIPROXY_VERSION
        assert "echomq-chaos" in reply.headers["server"]


def test_create_proxy_is_201_with_the_real_listen_port(api: Api, echo_upstream: Upstream):
    reply = api.call("POST", "/proxies", {"name": "one", "listen": "127.0.0.1:0",
                                          "upstream": echo_upstream.address})
    assert reply.status == 201
    assert reply.headers["content-type"] == "application/json"
    proxy = reply.json
    assert list(proxy) == PROXY_KEYS and proxy["Logger"] == {}
    assert proxy["name"] == "one" and proxy["upstream"] == echo_upstream.address
    assert proxy["enabled"] is True and proxy["toxics"] == []
    host, port = proxy["listen"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    with connect(proxy["listen"]) as client:
        round_trip(client)


def test_create_existing_name_is_409(api: Api, echo_upstream: Upstream):
    api.create("dup", echo_upstream.address)
    reply = api.call("POST", "/proxies", {"name": "dup", "listen": "127.0.0.1:0",
                                          "upstream": echo_upstream.address})
    assert reply.status == 409
    assert reply.json == {"error": "proxy already exists", "status": 409}


@pytest.mark.parametrize("raw", [b"{", b"not json", b""])
def test_create_with_bad_json_is_400(api: Api, raw: bytes):
    reply = api.call("POST", "/proxies", raw=raw)
    assert reply.status == 400
    assert reply.json["status"] == 400
    assert reply.json["error"].startswith("bad request body: ")


def test_create_with_a_field_of_the_wrong_type_is_400(api: Api):
    reply = api.call("POST", "/proxies", {"name": 7, "upstream": "127.0.0.1:1"})
    assert reply.status == 400
    assert reply.json["error"].startswith("bad request body: json: cannot unmarshal number")


@pytest.mark.parametrize(("body", "missing"), [({"upstream": "127.0.0.1:1"}, "name"),
                                               ({"name": "x"}, "upstream")])
def test_create_without_a_required_field_is_400(api: Api, body: dict, missing: str):
    reply = api.call("POST", "/proxies", body)
    assert reply.status == 400
    assert reply.json == {"error": f"missing required field: {missing}", "status": 400}


def test_error_bodies_are_json_lines_as_go_http_error_sends_them(api: Api):
    reply = api.call("GET", "/proxies/nope")
    assert reply.status == 404
    assert reply.body == b'{"error":"proxy not found","status":404}\n'
    assert reply.headers["content-type"].startswith("text/plain")


def test_create_on_a_taken_port_is_500_naming_the_bind_error(api: Api, echo_upstream: Upstream):
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        reply = api.call("POST", "/proxies", {"name": "taken", "listen": address,
                                              "upstream": echo_upstream.address})
        assert reply.status == 500
        assert reply.json == {"error": f"listen tcp {address}: bind: address already in use",
                              "status": 500}
        assert api.call("GET", "/proxies/taken").status == 404
    finally:
        taken.close()


def test_index_show_and_unknown_proxy(api: Api, echo_upstream: Upstream):
    assert api.call("GET", "/proxies").json == {}
    first = api.create("b-first", echo_upstream.address)
    second = api.create("a-second", echo_upstream.address, enabled=False)
    index = api.call("GET", "/proxies")
    assert index.status == 200
    assert index.json == {"b-first": first, "a-second": second}
    assert second["enabled"] is False
    shown = api.call("GET", "/proxies/b-first")
    assert shown.status == 200 and shown.json == first
    assert api.call("GET", "/proxies/missing").json == {"error": "proxy not found",
                                                         "status": 404}


def test_wrong_method_is_405_and_unknown_path_404(api: Api):
    assert api.call("DELETE", "/proxies").status == 405
    assert api.call("GET", "/reset").status == 405
    assert api.call("GET", "/no/such/thing").status == 404


def test_browser_user_agents_are_refused(api: Api):
    reply = api.call("GET", "/proxies", headers={"User-Agent": "Mozilla/5.0 (X11; Linux)"})
    assert reply.status == 403
    assert api.call("GET", "/proxies", headers={"User-Agent": "curl/8"}).status == 200


def test_delete_proxy_is_204_closes_connections_and_stops_listening(api: Api,
                                                                    upstream: Upstream):
    client, server, proxy = linked(api, upstream, "gone")
    reply = api.call("DELETE", "/proxies/gone")
    assert reply.status == 204 and reply.body == b""
    assert_closed(client)
    assert_closed(server)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy["listen"])
    assert api.call("DELETE", "/proxies/gone").json == {"error": "proxy not found",
                                                        "status": 404}


def test_disabled_proxy_refuses_connections_and_reenabling_works(api: Api, upstream: Upstream):
    client, server, proxy = linked(api, upstream, "flip")
    disabled = api.set_enabled("flip", False)
    assert disabled["enabled"] is False and disabled["listen"] == proxy["listen"]
    assert_closed(client)
    assert_closed(server)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy["listen"])
    assert api.set_enabled("flip", True)["enabled"] is True
    with connect(proxy["listen"]) as again:
        accepted = upstream.accept()
        again.sendall(b"back")
        assert recv_exactly(accepted, 4) == b"back"


def test_changing_upstream_restarts_the_proxy_on_the_new_upstream(api: Api, upstream: Upstream):
    client, server, proxy = linked(api, upstream, "moving")
    other = Upstream()
    try:
        reply = api.call("POST", "/proxies/moving", {"upstream": other.address})
        assert reply.status == 200
        assert reply.json["upstream"] == other.address and reply.json["enabled"] is True
        assert_closed(client)
        with connect(reply.json["listen"]) as again:
            accepted = other.accept()
            again.sendall(b"new")
            assert recv_exactly(accepted, 3) == b"new"
    finally:
        other.close()


def test_every_proxy_object_returned_has_the_same_keys_logger_included(
        api: Api, echo_upstream: Upstream):
    """Create, index, show, update (POST and PATCH) and populate, succeeding or failing part way,
    all return proxies as Toxiproxy does: its keys in its order, ``"Logger": {}`` among them."""
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        upstream = echo_upstream.address
        proxies = [api.create("keys", upstream),
                   api.call("GET", "/proxies").json["keys"],
                   api.call("GET", "/proxies/keys").json,
                   api.call("POST", "/proxies/keys", {"enabled": False}).json,
                   api.call("PATCH", "/proxies/keys", {"enabled": True}).json]
        populated = api.call("POST", "/populate", [
            {"name": "pop", "listen": "127.0.0.1:0", "upstream": upstream}])
        assert populated.status == 201
        proxies += populated.json["proxies"]
        failed = api.call("POST", "/populate", [
            {"name": "made", "listen": "127.0.0.1:0", "upstream": upstream},
            {"name": "unbound", "listen": f"127.0.0.1:{taken.getsockname()[1]}",
             "upstream": upstream}])
        assert failed.status == 500
        assert [proxy["name"] for proxy in failed.json["proxies"]] == ["made"]
        proxies += failed.json["proxies"]
        for proxy in proxies:
            assert list(proxy) == PROXY_KEYS and proxy["Logger"] == {}, proxy
    finally:
        taken.close()


def test_patch_updates_like_post(api: Api, echo_upstream: Upstream):
    api.create("patched", echo_upstream.address)
    reply = api.call("PATCH", "/proxies/patched", {"enabled": False})
    assert reply.status == 200 and reply.json["enabled"] is False
    assert api.call("PATCH", "/proxies/missing", {"enabled": False}).status == 404


def test_populate_creates_keeps_and_replaces(api: Api, echo_upstream: Upstream):
    other = Upstream(handler=echo)
    try:
        reply = api.call("POST", "/populate", [
            {"name": "p1", "listen": "127.0.0.1:0", "upstream": echo_upstream.address},
            {"name": "p2", "listen": "127.0.0.1:0", "upstream": echo_upstream.address,
             "enabled": False},
        ])
        assert reply.status == 201
        assert list(reply.json) == ["proxies"]
        p1, p2 = reply.json["proxies"]
        assert list(p1) == PROXY_KEYS and p1["enabled"] is True and p2["enabled"] is False
        api.add_toxic("p1", type="latency", attributes={"latency": 1})
        # Same listen and upstream: left exactly as it is (toxics included).
        again = api.call("POST", "/populate", [
            {"name": "p1", "listen": p1["listen"], "upstream": echo_upstream.address}])
        assert again.status == 201
        assert again.json["proxies"][0]["listen"] == p1["listen"]
        assert len(again.json["proxies"][0]["toxics"]) == 1
        # A new upstream: replaced by a fresh proxy (no toxics).
        moved = api.call("POST", "/populate", [
            {"name": "p1", "listen": p1["listen"], "upstream": other.address}])
        assert moved.status == 201
        assert moved.json["proxies"][0]["upstream"] == other.address
        assert moved.json["proxies"][0]["toxics"] == []
        with connect(moved.json["proxies"][0]["listen"]) as client:
            round_trip(client)
    finally:
        other.close()


def test_populate_rejects_a_proxy_without_name_naming_its_position(api: Api):
    reply = api.call("POST", "/populate", [{"name": "ok", "upstream": "127.0.0.1:1"},
                                           {"upstream": "127.0.0.1:1"}])
    assert reply.status == 400
    assert reply.json["error"] == "missing required field: name at proxy 2"
    assert reply.json["status"] == 400
    assert api.call("GET", "/proxies").json == {}  # checked before anything is created


def test_populate_with_bad_json_is_400(api: Api):
    reply = api.call("POST", "/populate", raw=b"[{")
    assert reply.status == 400
    assert reply.json["error"].startswith("bad request body: ")


def test_toxic_endpoints_and_json_shape(api: Api, echo_upstream: Upstream):
    api.create("tox", echo_upstream.address)
    created = api.call("POST", "/proxies/tox/toxics",
                       {"type": "latency", "attributes": {"latency": 5}})
    assert created.status == 200  # Toxiproxy answers 200 here, not 201
    toxic = created.json
    assert list(toxic) == TOXIC_KEYS
    assert toxic == {"attributes": {"latency": 5, "jitter": 0}, "name": "latency_downstream",
                     "type": "latency", "stream": "downstream", "toxicity": 1}
    listed = api.call("GET", "/proxies/tox/toxics")
    assert listed.status == 200 and listed.json == [toxic]
    assert api.call("GET", "/proxies/tox").json["toxics"] == [toxic]
    shown = api.call("GET", "/proxies/tox/toxics/latency_downstream")
    assert shown.status == 200 and shown.json == toxic
    updated = api.call("POST", "/proxies/tox/toxics/latency_downstream",
                       {"attributes": {"jitter": 2}, "toxicity": 0.5})
    assert updated.status == 200
    assert updated.json["attributes"] == {"latency": 5, "jitter": 2}  # latency kept
    assert updated.json["toxicity"] == 0.5
    named = api.add_toxic("tox", name="up", type="bandwidth", stream="upstream",
                          toxicity=0.25, attributes={"rate": 100})
    assert named == {"attributes": {"rate": 100}, "name": "up", "type": "bandwidth",
                     "stream": "upstream", "toxicity": 0.25}
    # Upstream toxics are listed before downstream ones.
    assert [t["name"] for t in api.call("GET", "/proxies/tox/toxics").json] == [
        "up", "latency_downstream"]
    deleted = api.call("DELETE", "/proxies/tox/toxics/latency_downstream")
    assert deleted.status == 204 and deleted.body == b""
    assert api.call("GET", "/proxies/tox/toxics/latency_downstream").json == {
        "error": "toxic not found", "status": 404}


def test_toxic_errors(api: Api, echo_upstream: Upstream):
    api.create("bad", echo_upstream.address)
    api.add_toxic("bad", type="timeout", attributes={"timeout": 0})
    cases = [
        ({"type": "timeout"}, 409, "toxic already exists"),
        ({"type": "nonsense"}, 400, "invalid toxic type"),
        ({"type": "latency", "stream": "sideways"}, 400,
         "stream was invalid, can be either upstream or downstream"),
    ]
    for body, status, error in cases:
        reply = api.call("POST", "/proxies/bad/toxics", body)
        assert (reply.status, reply.json) == (status, {"error": error, "status": status}), body
    bad_json = api.call("POST", "/proxies/bad/toxics", raw=b"{oops")
    assert bad_json.status == 400 and bad_json.json["error"].startswith("bad request body: ")
    bad_attribute = api.call("POST", "/proxies/bad/toxics",
                             {"type": "latency", "attributes": {"latency": "slow"}})
    assert bad_attribute.status == 400
    assert bad_attribute.json["error"].startswith("bad request body: json: cannot unmarshal")
    for method, path in [("GET", "/proxies/none/toxics"), ("POST", "/proxies/none/toxics"),
                         ("GET", "/proxies/none/toxics/x"), ("DELETE", "/proxies/none/toxics/x")]:
        reply = api.call(method, path, {"type": "latency"} if method == "POST" else None)
        assert reply.json == {"error": "proxy not found", "status": 404}, (method, path)
    for method in ("GET", "POST", "DELETE"):
        reply = api.call(method, "/proxies/bad/toxics/none", {} if method == "POST" else None)
        assert reply.json == {"error": "toxic not found", "status": 404}, method


def test_reset_removes_toxics_and_reenables_proxies(api: Api, echo_upstream: Upstream):
    one = api.create("r1", echo_upstream.address)
    api.create("r2", echo_upstream.address)
    api.add_toxic("r1", type="latency", attributes={"latency": 1000})
    api.add_toxic("r2", type="timeout", stream="upstream", attributes={"timeout": 0})
    api.set_enabled("r1", False)
    reply = api.call("POST", "/reset")
    assert reply.status == 204 and reply.body == b""
    proxies = api.call("GET", "/proxies").json
    assert all(p["enabled"] and p["toxics"] == [] for p in proxies.values())
    assert proxies["r1"]["listen"] == one["listen"]
    for proxy in proxies.values():
        with connect(proxy["listen"]) as client:
            round_trip(client)


# --------------------------------------------------------------------------------------------
# The toxiproxy-python client, as the runtime uses it
# --------------------------------------------------------------------------------------------


def test_toxiproxy_python_client_round_trip(api: Api, echo_upstream: Upstream):
    client = api.client()
    assert client.running()
    assert b"version" in client.version()
    proxy = client.create(upstream=echo_upstream.address, name="py", listen="127.0.0.1:0")
    assert proxy.enabled is True and not proxy.listen.endswith(":0")
    assert set(client.proxies()) == {"py"}
    assert client.get_proxy("py").listen == proxy.listen
    with pytest.raises(ProxyExists):
        client.create(upstream=echo_upstream.address, name="py")
    proxy.add_toxic(type="latency", attributes={"latency": 1})
    proxy.add_toxic(name="cut", type="timeout", stream="upstream", toxicity=0.0,
                    attributes={"timeout": 0})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "cut"}
    assert toxics["cut"].stream == "upstream" and toxics["cut"].attributes == {"timeout": 0}
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="no_such_toxic")
    assert proxy.destroy_toxic("latency_downstream")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("latency_downstream")
    proxy.disable()
    assert client.get_proxy("py").enabled is False
    assert client.reset()
    assert client.get_proxy("py").enabled is True and proxy.toxics() == {}
    populated = client.populate([{"name": "py2", "listen": "127.0.0.1:0",
                                  "upstream": echo_upstream.address}])
    assert [p.name for p in populated] == ["py2"]
    client.destroy_all()
    assert client.proxies() == {}


# --------------------------------------------------------------------------------------------
# Toxics on real connections
# --------------------------------------------------------------------------------------------


def test_proxy_without_toxics_passes_bytes_both_ways_intact(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    payload = bytes(range(256)) * 4000  # ~1 MB each way
    sender = threading.Thread(target=client.sendall, args=(payload,))
    sender.start()
    assert recv_exactly(server, len(payload)) == payload
    sender.join()
    server.sendall(payload)
    assert recv_exactly(client, len(payload)) == payload
    client.close()
    assert_closed(server)  # the client's close reaches the server


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_delays_each_round_trip_by_at_least_the_latency(api: Api,
                                                                echo_upstream: Upstream,
                                                                stream: str):
    proxy = api.create("slow", echo_upstream.address)
    api.add_toxic("slow", type="latency", stream=stream, attributes={"latency": 150})
    with connect(proxy["listen"]) as client:
        for _ in range(2):
            assert round_trip(client) >= 0.150 - LATE


def test_latency_with_jitter_stays_above_latency_minus_jitter(api: Api, echo_upstream: Upstream):
    proxy = api.create("jitter", echo_upstream.address)
    api.add_toxic("jitter", type="latency", attributes={"latency": 100, "jitter": 50})
    with connect(proxy["listen"]) as client:
        for _ in range(3):
            assert round_trip(client) >= 0.050 - LATE


def test_latency_added_to_a_live_connection_applies_and_removal_keeps_held_data(
        api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    api.add_toxic("link", type="latency", attributes={"latency": 300})
    started = time.monotonic()
    server.sendall(b"late")
    assert recv_exactly(client, 4) == b"late"
    assert time.monotonic() - started >= 0.300 - LATE
    # Data held by the toxic when it is removed is passed on, not dropped.
    server.sendall(b"held")
    time.sleep(0.05)
    api.remove_toxic("link", "latency_downstream")
    assert recv_exactly(client, 4) == b"held"
    server.sendall(b"free")
    assert recv_exactly(client, 4) == b"free"


def test_timeout_zero_cuts_the_link_and_removal_closes_it(api: Api, upstream: Upstream):
    """The partition fault: nothing passes while the toxic is on; Toxiproxy's removal closes the
    connections it was on (TimeoutToxic.Cleanup), and new connections pass traffic again."""
    client, server, proxy = linked(api, upstream)
    api.add_toxic("link", type="timeout", attributes={"timeout": 0})
    server.sendall(b"lost")
    assert_quiet(client)
    api.remove_toxic("link", "timeout_downstream")
    assert recv_to_eof(client) == b""  # the dropped bytes never arrive: EOF
    assert_closed(server)
    with connect(proxy["listen"]) as again:
        accepted = upstream.accept()
        accepted.sendall(b"flows")
        assert recv_exactly(again, 5) == b"flows"


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_timeout_cuts_only_its_own_direction(api: Api, upstream: Upstream, stream: str):
    client, server, _ = linked(api, upstream)
    api.add_toxic("link", type="timeout", stream=stream, attributes={"timeout": 0})
    cut_from, cut_to, open_from, open_to = (
        (client, server, server, client) if stream == "upstream" else
        (server, client, client, server))
    cut_from.sendall(b"dropped")
    assert_quiet(cut_to)
    open_from.sendall(b"passes")
    assert recv_exactly(open_to, 6) == b"passes"


def test_timeout_closes_the_connection_after_the_timeout(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    started = time.monotonic()
    api.add_toxic("link", type="timeout", attributes={"timeout": 300})
    assert recv_to_eof(client) == b""
    assert time.monotonic() - started >= 0.300 - LATE
    assert_closed(server)


@pytest.mark.parametrize(("stream", "timeout_ms"), [("upstream", 0), ("downstream", 200)])
def test_reset_peer_resets_a_connection_opened_while_it_is_on(api: Api, echo_upstream: Upstream,
                                                              stream: str, timeout_ms: int):
    """Toxiproxy sets SO_LINGER 0 on a connection that starts with a reset_peer in its chain: the
    first input is dropped and, ``timeout`` ms later, the connection ends with an RST."""
    proxy = api.create("rst", echo_upstream.address)
    api.add_toxic("rst", type="reset_peer", stream=stream, attributes={"timeout": timeout_ms})
    with connect(proxy["listen"]) as client:
        started = time.monotonic()
        client.sendall(b"reset toxic payload\n")
        with pytest.raises(ConnectionResetError):
            while client.recv(1000):
                pass
        assert time.monotonic() - started >= timeout_ms / 1000 - LATE


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_reset_peer_added_to_an_open_connection_ends_it_with_a_normal_close(
        api: Api, upstream: Upstream, stream: str):
    """A connection already open when the toxic is added keeps its normal close (Toxiproxy sets
    SO_LINGER 0 only as a connection starts): nothing happens until input arrives on the
    toxic's stream; that input is dropped, and ``timeout`` ms later both ends get a FIN."""
    client, server, proxy = linked(api, upstream)
    api.add_toxic("link", type="reset_peer", stream=stream, attributes={"timeout": 200})
    sender = client if stream == "upstream" else server
    assert_quiet(client, 0.2)
    assert_quiet(server, 0.2)
    started = time.monotonic()
    sender.sendall(b"dropped")
    assert recv_to_eof(client) == b""  # a ConnectionResetError here would be an RST
    assert recv_to_eof(server) == b""
    assert time.monotonic() - started >= 0.200 - LATE
    # A connection opened now starts with the toxic in its chain: it is reset.
    with connect(proxy["listen"]) as again:
        accepted = upstream.accept()
        (again if stream == "upstream" else accepted).sendall(b"dropped")
        with pytest.raises(ConnectionResetError):
            recv_to_eof(again)


def test_limit_data_closes_after_that_many_bytes(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    api.add_toxic("link", type="limit_data", attributes={"bytes": 1000})
    server.sendall(b"x" * 600)
    server.sendall(b"y" * 600)
    received = recv_to_eof(client)
    assert received == b"x" * 600 + b"y" * 400
    assert_closed(server)


def test_limit_data_upstream(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    api.add_toxic("link", type="limit_data", stream="upstream", attributes={"bytes": 10})
    client.sendall(b"0123456789abcdef")
    assert recv_to_eof(server) == b"0123456789"


def test_bandwidth_lower_bounds_the_transfer_time(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    rate_kb_s, size = 100, 40_000  # 40 KB at 100 KB/s: at least 0.4 s
    api.add_toxic("link", type="bandwidth", attributes={"rate": rate_kb_s})
    started = time.monotonic()
    server.sendall(b"b" * size)
    assert recv_exactly(client, size) == b"b" * size
    assert time.monotonic() - started >= size / (rate_kb_s * 1000) - LATE


def test_slicer_delivers_every_byte_in_order(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    api.add_toxic("link", type="slicer",
                  attributes={"average_size": 64, "size_variation": 32, "delay": 100})
    api.add_toxic("link", name="up_slicer", type="slicer", stream="upstream",
                  attributes={"average_size": 10, "size_variation": 0, "delay": 0})
    payload = bytes(range(256)) * 40
    server.sendall(payload)
    assert recv_exactly(client, len(payload)) == payload
    client.sendall(payload)
    assert recv_exactly(server, len(payload)) == payload


def test_slicer_waits_its_delay_between_slices(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    # Slices are at most average_size + size_variation = 10 bytes: 100 bytes make at least 10
    # slices, so the last one leaves at least 9 delays of 20 ms after the first.
    api.add_toxic("link", type="slicer",
                  attributes={"average_size": 10, "size_variation": 0, "delay": 20_000})
    started = time.monotonic()
    server.sendall(bytes(range(100)))
    assert recv_exactly(client, 100) == bytes(range(100))
    assert time.monotonic() - started >= 9 * 0.020 - LATE


def test_slow_close_delays_the_close(api: Api, upstream: Upstream):
    client, server, _ = linked(api, upstream)
    api.add_toxic("link", type="slow_close", attributes={"delay": 300})
    server.sendall(b"last words")
    started = time.monotonic()
    server.close()
    assert recv_to_eof(client) == b"last words"
    assert time.monotonic() - started >= 0.300 - LATE


def test_toxicity_zero_never_applies(api: Api, echo_upstream: Upstream):
    proxy = api.create("lucky", echo_upstream.address)
    api.add_toxic("lucky", type="timeout", toxicity=0.0, attributes={"timeout": 0})
    for _ in range(10):
        with connect(proxy["listen"]) as client:
            round_trip(client)  # a timeout toxic would hold this until IO_TIMEOUT


def test_toxicity_is_decided_per_connection(api: Api, echo_upstream: Upstream):
    proxy = api.create("coin", echo_upstream.address)
    api.add_toxic("coin", type="timeout", toxicity=0.5, attributes={"timeout": 0})
    outcomes = set()
    for _ in range(24):  # all 24 alike has probability 2 * 0.5**24
        with connect(proxy["listen"]) as client:
            client.sendall(b"?")
            client.settimeout(0.1)
            try:
                outcomes.add(client.recv(1) == b"?")
            except TimeoutError:
                outcomes.add(False)
    assert outcomes == {True, False}


def test_toxic_update_applies_to_live_connections(api: Api, echo_upstream: Upstream):
    proxy = api.create("tune", echo_upstream.address)
    api.add_toxic("tune", type="latency", attributes={"latency": 50})
    with connect(proxy["listen"]) as client:
        assert round_trip(client) >= 0.050 - LATE
        reply = api.call("POST", "/proxies/tune/toxics/latency_downstream",
                         {"attributes": {"latency": 250}})
        assert reply.status == 200
        assert round_trip(client) >= 0.250 - LATE


def test_unreachable_upstream_closes_the_client(api: Api):
    dead = free_port()
    proxy = api.create("dead", f"127.0.0.1:{dead}")
    with connect(proxy["listen"]) as client:
        assert_closed(client)


# --------------------------------------------------------------------------------------------
# A real Valkey client through the proxy
# --------------------------------------------------------------------------------------------


def test_valkey_through_the_proxy(api: Api, valkey_server: ValkeyServer):
    upstream = valkey_server.url.split("//", 1)[1].split("/", 1)[0]
    proxy = api.create("valkey", upstream)
    host, port = proxy["listen"].rsplit(":", 1)
    client = redis_client(f"redis://{host}:{port}", password=valkey_server.password,
                          socket_timeout=IO_TIMEOUT)
    try:
        assert client.ping()
        client.set("toxiproxy:key", "value")
        assert client.get("toxiproxy:key") == b"value"
        api.add_toxic("valkey", type="latency", attributes={"latency": 100})
        started = time.monotonic()
        assert client.ping()
        assert time.monotonic() - started >= 0.100 - LATE
    finally:
        client.close()


# --------------------------------------------------------------------------------------------
# The built-in server's entry points
# --------------------------------------------------------------------------------------------


def test_module_entry_point_announces_itself_and_stops_on_sigterm():
    process = subprocess.Popen([sys.executable, "-m", "chaos.network.server", "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline().strip()
        prefix = "toxiproxy-compatible server listening on 127.0.0.1:"
        assert line.startswith(prefix), line
        api = Api("builtin", "127.0.0.1", int(line[len(prefix):]))
        assert api.call("GET", "/version").json == {"version": TOXIPROXY_VERSION}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_stopping_the_in_process_server_closes_proxied_connections(upstream: Upstream):
    builtin = ToxiproxyServer().start()
    api = Api("builtin", "127.0.0.1", builtin.port)
    try:
        client, server, proxy = linked(api, upstream)
    finally:
        builtin.stop()
    assert_closed(client)
    assert_closed(server)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy["listen"])
