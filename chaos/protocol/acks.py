"""The client-side acknowledgement ledger's writer: one JSON line per acknowledged transition.

Every process that performs transitions (the producer, each worker) appends to its own
``acks/<name>.jsonl`` in the run directory, one ``write(2)`` to an ``O_APPEND`` file per
acknowledgement, issued after the server's reply and before the client acts on it. What the
lines mean and how they are compared with the surviving history: ``chaos.check.ledger``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

ACK_OPS = ("enqueue", "claim", "complete")
ACKS_DIR = "acks"  # inside the run directory


class AckLedger:
    """Append-only, one write per acknowledgement; thread-safe (a worker's slots share one)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None
        self._fd: int | None = None
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, op: str, job_id: str, **fields: Any) -> None:
        if self._fd is None:
            return
        line = json.dumps({"op": op, "id": job_id, **fields, "t": time.time_ns() // 1_000_000},
                          separators=(",", ":")) + "\n"
        with self._lock:
            os.write(self._fd, line.encode())

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
