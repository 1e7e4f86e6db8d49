"""What every benchmark section shares: a row of the table, medians, a throwaway valkey-server."""

from __future__ import annotations

import contextlib
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.runtime import ValkeyServer, valkey_server_binary


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
