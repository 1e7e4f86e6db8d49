"""Addresses the way Go's ``net`` package splits, resolves, binds and prints them, so ``listen``
and ``upstream`` read back as Toxiproxy reports them."""

from __future__ import annotations

import asyncio
import contextlib
import socket


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

