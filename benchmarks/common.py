"""What every benchmark section shares: a row of the table, medians, a throwaway valkey-server,
a queue filled on it, and redis-benchmark, the server-side baseline."""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.protocol.client import QueueKeys, connect, load_script_source
from chaos.runtime.valkey import ValkeyServer, valkey_server_binary


@dataclass
class Row:
    """One figure, as a ratio against a baseline measured in the same run.

    ``target`` is the issue's target for the ratio: ``(">=", 0.5)`` or ``("<=", 2.0)``."""

    section: str
    figure: str
    value: float | None
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: tuple[str, float] | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        ratio = self.ratio
        if self.target is None or ratio is None:
            return None
        op, bound = self.target
        return ratio >= bound if op == ">=" else ratio <= bound

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "target": list(self.target) if self.target else None,
                "ratio": self.ratio, "met": self.met}


def median(values: list[float]) -> float:
    return float(statistics.median(values))


@contextlib.contextmanager
def valkey_server(prefix: str, socket_only: bool = False) -> Iterator[ValkeyServer]:
    """A valkey-server on a free 127.0.0.1 port (or, ``socket_only``, a private unix socket),
    gone (with its files) when the block ends."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{prefix}-") as tmp:
        server = ValkeyServer(valkey_server_binary(None), Path(tmp) / "data",
                              Path(tmp) / "valkey.log", socket_only=socket_only)
        server.start()
        try:
            yield server
        finally:
            server.stop()


def address(server: ValkeyServer) -> tuple[str, int]:
    host, port = server.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def fill(url: str, password: str, keys: QueueKeys, jobs: int) -> None:
    """Enqueue ``jobs`` jobs with the protocol's enqueue script, pipelined: setup, not measured."""
    client = connect(url, password)
    sha = client.script_load(load_script_source("enqueue"))
    pipe = client.pipeline(transaction=False)
    for number in range(jobs):
        pipe.evalsha(sha, 2, keys.pending, keys.events, keys.job_prefix, f"j{number}", "")
    pipe.execute()
    client.close()


def redis_benchmark_path() -> str | None:
    return shutil.which("redis-benchmark")


def redis_benchmark_missing(what: str = "") -> str | None:
    """Why ``what`` (a section's figures that need redis-benchmark; all of them when empty) is
    skipped: a section's ``{"skipped": ...}``, naming the missing tool. None: it is installed."""
    if redis_benchmark_path() is not None:
        return None
    missing = "redis-benchmark not installed (apt-get install redis-tools)"
    return f"{what}: {missing}" if what else missing


def redis_benchmark(server: ValkeyServer, command: list[str], requests: int, clients: int,
                    pipeline: int, random_range: int | None = None) -> float:
    """Requests/s of one command, from redis-benchmark's CSV line."""
    if server.socket_path is not None:  # a private socket, no password (ValkeyServer)
        target = ["-s", str(server.socket_path)]
    else:
        host, port = address(server)
        # The password is a throwaway one of this benchmark's own server (redis-benchmark has
        # no other way to take it).
        target = ["-h", host, "-p", str(port), "-a", server.password]
    argv = [str(redis_benchmark_path()), *target, "-n", str(requests), "-c", str(clients),
            "-P", str(pipeline), "--csv",
            *(["-r", str(random_range)] if random_range else []), *command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    rows = list(csv.reader(io.StringIO(result.stdout)))
    if result.returncode != 0 or len(rows) < 2:
        raise RuntimeError(f"redis-benchmark failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout)[-500:]}")
    return float(rows[1][1])
