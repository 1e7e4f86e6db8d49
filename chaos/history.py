"""The history: every queue transition and every fault, in stream order, on the Valkey clock.

The events stream is exported to ``history.jsonl`` while the run goes (one JSON object per line,
flushed per batch), so a crashed run still leaves a checkable history. The checker reads only this.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import valkey

# Fields every event may carry; anything else stays in ``extra``.
_INT_FIELDS = ("ts", "attempt", "deadline", "lease_ms", "current_attempt")


@dataclass(frozen=True)
class Event:
    seq: str  # the stream id: the total order of the history
    type: str
    ts: int  # server clock, ms
    job_id: str | None = None
    attempt: int | None = None
    worker: str | None = None
    deadline: int | None = None
    lease_ms: int | None = None
    current_attempt: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Event:
        """From one history line (or one stream entry plus its id as ``seq``)."""
        values = dict(record)
        seq = str(values.pop("seq"))
        kind = str(values.pop("type"))
        numbers: dict[str, int | None] = {}
        for name in _INT_FIELDS:
            raw = values.pop(name, None)
            numbers[name] = int(raw) if raw not in (None, "") else None
        job_id = values.pop("id", None)
        worker = values.pop("worker", None) or None
        return cls(
            seq=seq,
            type=kind,
            ts=numbers["ts"] or 0,
            job_id=str(job_id) if job_id is not None else None,
            attempt=numbers["attempt"],
            worker=str(worker) if worker is not None else None,
            deadline=numbers["deadline"],
            lease_ms=numbers["lease_ms"],
            current_attempt=numbers["current_attempt"],
            extra={key: str(value) for key, value in values.items()},
        )


def seq_key(seq: str) -> tuple[int, int]:
    millis, _, counter = seq.partition("-")
    return int(millis), int(counter or 0)


def read_history(path: str | Path) -> list[Event]:
    """Load ``history.jsonl``; a torn last line (crash mid-write) is skipped, nothing else is."""
    events: list[Event] = []
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text: {error}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not line.endswith("\n"):
                break
            raise ValueError(f"{path}:{number}: not a JSON object") from None
        events.append(_event(record, f"{path}:{number}"))
    events.sort(key=lambda event: seq_key(event.seq))
    return events


def _event(record: Any, where: str) -> Event:
    """One history line as an Event, or a ValueError naming the line and what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: not a JSON object")
    for name in ("seq", "type"):
        if not isinstance(record.get(name), str):
            raise ValueError(f"{where}: {name} = {record.get(name)!r}: expected a string")
    millis, _, counter = record["seq"].partition("-")
    if not (millis.isascii() and millis.isdigit() and (not counter or counter.isascii()
                                                          and counter.isdigit())):
        raise ValueError(f"{where}: seq = {record['seq']!r}: expected a stream id like 1-0")
    for name, value in record.items():
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ValueError(f"{where}: {name} = {value!r}: expected a string or an integer")
    try:
        return Event.from_record(record)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def write_records(handle: IO[str], entries: Iterable[tuple[str, dict[str, str]]]) -> int:
    count = 0
    for entry_id, fields in entries:
        handle.write(json.dumps({"seq": entry_id, **fields}, separators=(",", ":")) + "\n")
        count += 1
    handle.flush()
    return count


class HistoryExporter:
    """Copies the events stream into ``history.jsonl`` as the run goes, in a background thread."""

    def __init__(self, client: valkey.Valkey, stream: str, path: Path, batch: int = 2000) -> None:
        self.client = client
        self.stream = stream
        self.path = path
        self.batch = batch
        self.last_id = "0-0"
        self.exported = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._thread = threading.Thread(target=self._loop, name="history-export", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _read_batch(self) -> int:
        with self._lock:
            reply = self.client.xread({self.stream: self.last_id}, count=self.batch)
            if not reply:
                return 0
            entries = reply[0][1]
            written = write_records(self._handle, entries)
            self.last_id = entries[-1][0]
            self.exported += written
            return written

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._read_batch() < self.batch:
                    self._stop.wait(0.1)
            except Exception as error:  # keep exporting after a blip; the final drain retries
                self.error = error
                self._stop.wait(0.5)

    def drain(self) -> None:
        """Export everything still in the stream (call after the last event was written)."""
        while self._read_batch() == self.batch:
            pass

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._handle.close()


def iter_stream(client: valkey.Valkey, stream: str, batch: int = 5000) -> Iterator[Event]:
    """Every event of a stream, oldest first (for tests and tools that read Valkey directly)."""
    last = "-"
    while True:
        entries = client.xrange(stream, min=last, max="+", count=batch)
        if last != "-" and entries and entries[0][0] == last:
            entries = entries[1:]
        if not entries:
            return
        for entry_id, fields in entries:
            yield Event.from_record({"seq": entry_id, **fields})
        last = entries[-1][0]
