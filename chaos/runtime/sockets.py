"""Who owns a connection: a client address as the server sees it (``CLIENT LIST``'s ``addr``,
``127.0.0.1:53012``), mapped to the run's member whose process holds that socket.

Linux only, for processes on this machine that connect to the server directly: the socket's
inode comes from ``/proc/net/tcp`` (the connection whose local end is that address), its owner
from the ``socket:[inode]`` links in ``/proc/<pid>/fd``, and the pid belongs to the member whose
process group it is in (every member runs in a process group of its own). A connection through
a Toxiproxy proxy is the proxy's socket, owned by no member: such a process must log in as its
own user or name its connections (docs/sut.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PROC = Path("/proc")


def _inode_of(address: str) -> str | None:
    """The inode of the TCP socket whose local end is ``address`` (``host:port``, IPv4)."""
    host, _, port = address.rpartition(":")
    try:
        wanted_port = f"{int(port):04X}"
        octets = [int(part) for part in host.split(".")]
    except ValueError:
        return None
    if len(octets) != 4:
        return None
    wanted_host = "".join(f"{octet:02X}" for octet in reversed(octets))  # little-endian
    try:
        lines = (PROC / "net" / "tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and fields[1] == f"{wanted_host}:{wanted_port}":
            return fields[9]
    return None


def _process_group(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after it
    fields = stat.rpartition(")")[2].split()
    return int(fields[2]) if len(fields) > 2 else None


def socket_owner(address: str, groups: Mapping[str, int]) -> str | None:
    """The member (of ``groups``: member -> its process group id) whose process holds the
    socket of client ``address``; None when none does (or it cannot be told)."""
    inode = _inode_of(address)
    if inode is None:
        return None
    link = f"socket:[{inode}]"
    by_group = {group: name for name, group in groups.items()}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        group = _process_group(int(entry.name))
        if group not in by_group:
            continue
        try:
            descriptors = os.listdir(entry / "fd")
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(entry / "fd" / descriptor) == link:
                    return by_group[group]
            except OSError:
                continue
    return None
