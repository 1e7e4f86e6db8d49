"""A proxy (Toxiproxy's ``proxy.go`` and ``toxic_collection.go``): its listener, the connections it
accepted and their links, and its toxic list.

One listener per enabled proxy (``listen`` with port 0 picks a free port and reports it). Each
accepted client gets its own upstream connection and two links, upstream (client → server) and
downstream (server → client). Disabling or deleting a proxy closes its listener and every
connection; the API restarts it when ``listen`` or ``upstream`` change.

Toxics added, updated or removed apply to live connections: each live link of the toxic's
direction gets, changes or loses a stage (chunks a toxic holds are passed on in order when it is
removed, except that removing a ``timeout`` closes the links it was on, as Toxiproxy's does).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import Any, cast

from chaos.network.addresses import bind_listener, go_os_error, split_host_port
from chaos.network.api_errors import ApiError
from chaos.network.link import Link
from chaos.network.toxics.toxic import Direction, Toxic

log = logging.getLogger("chaos.network.server")


class SocketSide(asyncio.Protocol):
    """The protocol of one socket of a connection (the client's or the upstream's)."""

    def __init__(self, connection: Connection, is_client: bool) -> None:
        self.connection = connection
        self.is_client = is_client
        self.outgoing: Link | None = None  # the link this socket's bytes go into
        self.incoming: Link | None = None  # the link that writes into this socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream socket's transport: asyncio's own is an asyncio.Transport, uvloop's only
        # behaves as one (it does not subclass it).
        transport = cast(asyncio.Transport, transport)
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
        self.client_side: SocketSide | None = None
        self.links: list[Link] = []
        self.open_sockets = 0
        self.finished = False
        self.connect_task: asyncio.Task[None] | None = None

    def client_connected(self, side: SocketSide, transport: asyncio.Transport) -> None:
        self.client, self.client_side = transport, side
        self.open_sockets += 1
        side.outgoing = self.new_link(Direction.UPSTREAM, transport)
        self.links.append(side.outgoing)
        self.proxy.connections.add(self)
        self.connect_task = self.loop.create_task(self._dial_upstream())

    def new_link(self, direction: Direction, source: asyncio.Transport) -> Link:
        return Link(direction, source, self.loop, self.proxy.rng, self.abort)

    async def _dial_upstream(self) -> None:
        try:
            host, port = split_host_port(self.proxy.upstream)
            await self.loop.create_connection(
                lambda: SocketSide(self, is_client=False), host or "127.0.0.1", port)
        except (OSError, ValueError) as error:
            log.warning("proxy %s: cannot reach upstream %s: %s", self.proxy.name,
                        self.proxy.upstream, error)
            if self.client is not None:
                self.client.close()  # as Toxiproxy: the client is closed, the proxy goes on

    def upstream_connected(self, side: SocketSide, transport: asyncio.Transport) -> None:
        if self.finished:
            transport.abort()
            return
        assert self.client is not None and self.client_side is not None
        self.upstream = transport
        self.open_sockets += 1
        to_upstream = self.client_side.outgoing
        assert to_upstream is not None
        to_client = self.new_link(Direction.DOWNSTREAM, transport)
        self.links.append(to_client)
        self.client_side.incoming, side.outgoing, side.incoming = to_client, to_client, to_upstream
        for link in self.links:
            self.proxy.links[link.direction].add(link)
        to_upstream.attach(transport, self.proxy.chains[Direction.UPSTREAM])
        to_client.attach(self.client, self.proxy.chains[Direction.DOWNSTREAM])

    def socket_lost(self, side: SocketSide) -> None:
        self.open_sockets -= 1
        if side.incoming is not None:
            side.incoming.dest_lost()
        if side.outgoing is not None:
            side.outgoing.feed_eof()  # a closed source is EOF for its link, as in Toxiproxy
        if self.open_sockets <= 0:
            self.finish()

    def abort(self) -> None:
        """Close both sockets now (proxy disabled or deleted, or a toxic failed)."""
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
        for link in self.links:
            link.dispose()
            self.proxy.links[link.direction].discard(link)
        self.proxy.connections.discard(self)


@dataclass(eq=False)
class Proxy:
    """One proxy: what the API shows of it, its listener and connections, and its toxic list
    (one chain per direction, in the order the toxics were added)."""

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
        # "Logger": Toxiproxy's Proxy struct has an exported zerolog.Logger field, which Go
        # encodes as an empty object in every proxy it returns.
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "Logger": {},
                "toxics": [t.to_json() for t in self.toxics()]}

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
            lambda: SocketSide(Connection(self), is_client=True), sock=sock)
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

