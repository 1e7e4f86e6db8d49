"""Looking at real processes and sockets through /proc, for the teardown and lock-down tests."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.runtime.pids import PID_DIR, PidRecord, is_alive, read_record


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 30.0,
               poll_s: float = 0.01) -> Any:
    """Poll until ``condition()`` is truthy and return it (a guard against hanging forever, not a
    timing assertion): past ``timeout_s`` the test fails naming ``what``."""
    give_up = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)
    return value


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def children_of(parent: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent and fields[0] != "Z":
                children.append(int(entry.name))
    return children


def pid_records(run_dir: Path) -> list[PidRecord]:
    """The run's recorded processes (the runner's own record excluded)."""
    records = [read_record(path) for path in sorted((run_dir / PID_DIR).glob("*.json"))]
    return [r for r in records if r is not None and r.name != "runner"]


def wait_until_gone(records: list[PidRecord], timeout: float) -> float | None:
    """Seconds until none of ``records`` is alive any more (None: some outlived ``timeout``)."""
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        if not any(is_alive(record) for record in records):
            return elapsed
        if elapsed >= timeout:
            return None
        time.sleep(0.02)


def listening_addresses(pid: int) -> list[str]:
    """``HOST:PORT`` of every TCP socket ``pid`` listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                host_hex, port_hex = fields[1].split(":")
                found.append(f"{_host(host_hex, width)}:{int(port_hex, 16)}")
    return found


def _host(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    if width == 8:
        return ".".join(str(b) for b in raw[::-1])  # little-endian u32
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    joined = b"".join(words)
    if joined[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in joined[12:])
    return ":".join(joined[i:i + 2].hex() for i in range(0, 16, 2))


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())
