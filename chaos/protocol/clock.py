"""A process's own clock, which a ``clock_skew`` fault can shift at runtime.

``LocalClock.now_ms()`` is the wall clock in ms plus an offset read from an optional *offset file*:
a text file holding one integer, the offset in ms (e.g. ``2500`` or ``-10000``; surrounding
whitespace is ignored). An absent or empty file means offset 0. The file is re-read only when it
changes (its mtime, inode or size differ from the last read: one ``stat`` per call), so a fault
shifts a running process by rewriting the file with ``write_offset``, which writes a temporary file
in the same directory and renames it over the old one: a reader sees the old or the new offset,
never a torn one.

Every process builds one from its ``--clock-file``; only the ``client-clock`` protocol variant
uses it for leases. The sound protocol reads time only inside its scripts (server ``TIME``), so a
skewed process clock cannot move its leases: it is immune by design.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path


class LocalClock:
    """Wall clock + offset file. Thread-safe; cheap to call (one ``stat`` per call)."""

    def __init__(self, offset_file: str | os.PathLike[str] | None = None) -> None:
        self.offset_file = Path(offset_file) if offset_file is not None else None
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None  # (mtime_ns, inode, size) last read
        self._offset = 0

    def offset_ms(self) -> int:
        """The current offset: re-read from the file only when the file changed."""
        if self.offset_file is None:
            return 0
        with self._lock:
            try:
                stat = os.stat(self.offset_file)
            except FileNotFoundError:
                self._seen, self._offset = None, 0
                return 0
            seen = (stat.st_mtime_ns, stat.st_ino, stat.st_size)
            if seen != self._seen:
                self._offset = read_offset(self.offset_file)
                self._seen = seen
            return self._offset

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms()


def read_offset(path: str | os.PathLike[str]) -> int:
    """The offset in a file: absent or empty is 0; anything but an integer is an error."""
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return 0
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"clock offset file {path}: expected an integer ms offset, "
                         f"got {text[:40]!r}") from None


def write_offset(path: str | os.PathLike[str], offset_ms: int) -> None:
    """Set the offset atomically: write a temporary file beside ``path``, then rename it over."""
    target = Path(path)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                         suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="ascii") as stream:
            stream.write(f"{int(offset_ms)}\n")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
