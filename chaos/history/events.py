"""The history: every queue transition and every fault, in stream order, on the Valkey clock.

The events stream is exported to ``history.jsonl`` while the run goes (one JSON object per line,
flushed per batch), so a crashed run still leaves a checkable history. The checker reads only this.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import compress, count, islice, repeat
from operator import gt, ne, or_
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec
import orjson
import redis

T = TypeVar("T")
_loads = orjson.loads  # raises orjson.JSONDecodeError, a ValueError

# Fields every event may carry; anything else stays in ``extra``.
_INT_FIELDS = ("ts", "attempt", "deadline", "lease_ms", "current_attempt")
_KNOWN_FIELDS = frozenset(("seq", "type", "id", "worker", *_INT_FIELDS))


# A msgspec Struct: the history's lines decode straight into it, in C (``_decode_line``), and
# it is cheaper to build than a dataclass (gc=False: it holds only strings, ints and a dict of
# strings, never a cycle). Not frozen; nothing mutates an event once built.
class Event(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    seq: str  # the stream id: the total order of the history (``_bad_seq`` vets it)
    type: str
    ts: int = 0  # server clock, ms
    job_id: str | None = msgspec.field(default=None, name="id")
    attempt: int | None = None
    worker: str | None = None
    deadline: int | None = None
    lease_ms: int | None = None
    current_attempt: int | None = None
    extra: dict[str, str] = {}
    # A few transitions' own fields (an extend's rtt_ms, a poison enqueue's kind, a reap's
    # stalls): decoded in C with the rest, so a block of the usual lines still decodes in one
    # call, then moved into ``extra`` (``_settled``), where the schema reads them. None once
    # an event is handed out.
    moved_rtt_ms: str | None = msgspec.field(default=None, name="rtt_ms")
    moved_kind: str | None = msgspec.field(default=None, name="kind")
    moved_stalls: str | None = msgspec.field(default=None, name="stalls")

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Event:
        """From one history line (or one stream entry plus its id as ``seq``).

        Empty strings read as absent numbers; a worker of "" reads as no worker."""
        get = record.get
        job_id = get("id")
        worker = get("worker")
        ts = get("ts")
        attempt = get("attempt")
        deadline = get("deadline")
        lease_ms = get("lease_ms")
        current = get("current_attempt")
        known = 2 + (job_id is not None) + (worker is not None) + (ts is not None) \
            + (attempt is not None) + (deadline is not None) + (lease_ms is not None) \
            + (current is not None)
        return cls(
            str(record["seq"]),
            str(record["type"]),
            int(ts) if ts else 0,  # absent, "" or 0 all read as 0
            str(job_id) if job_id is not None else None,
            int(attempt) if attempt is not None and attempt != "" else None,
            str(worker) if worker else None,
            int(deadline) if deadline is not None and deadline != "" else None,
            int(lease_ms) if lease_ms is not None and lease_ms != "" else None,
            int(current) if current is not None and current != "" else None,
            {key: str(value) for key, value in record.items() if key not in _KNOWN_FIELDS}
            if len(record) > known else {},  # only runner events carry more fields
        )


def seq_key(seq: str) -> tuple[int, int]:
    millis, _, counter = seq.partition("-")
    return int(millis), int(counter or 0)


class HistoryOrderError(ValueError):
    """A history file whose lines are not in stream order (the exporter writes them in order)."""


def iter_history(path: str | Path) -> Iterator[Event]:
    """Stream ``history.jsonl`` in file order, a block of lines at a time (memory holds one
    block, however long the run).

    A torn last line (crash mid-write) is skipped, nothing else is. Raises
    ``HistoryOrderError`` on the first line whose stream id is older than the line before:
    ``replay_history`` then falls back to loading and sorting the whole file.

    A block of the exporter's usual lines decodes in one C call and is vetted in a few more
    (``_Order.vetted``); a block with any other line (a runner event's own fields, a torn
    tail, bad input) takes the line-by-line path, which also names a bad line exactly."""
    order = _Order(path)
    usual = True  # the last block decoded whole: a file of unusual lines is not halved each time
    for block, number in line_blocks(path):
        events = _block_events(block, [_UNUSUAL_LINES if usual else 0])
        usual = events is not None
        if events is not None and order.vetted(events):
            yield from _settled(block, events)
            continue
        for line_number, event in _line_events(block, path, number):
            order.check(event.seq, line_number)
            yield event


def _block_events(block: bytes, budget: list[int]) -> list[Event] | None:
    """A block's events: the usual lines decoded in C, a run at a time around any other line
    (a runner event's own fields), which takes the precise path alone. None when a line is no
    event (or a torn tail), or when more than a few lines are unusual (a monitor history's
    own fields on every line): the line-by-line path then takes the block."""
    try:
        return _decode_block(block)
    except _REFUSED as error:
        if budget[0] <= 0:
            return None
        # The decoder names the element it refused (``$[i]``): the i-th line when no line is
        # blank. Any line boundary splits correctly; a good guess only saves decoding again.
        found = _REFUSED_AT(str(error))
        start = _line_start(block, int(found.group(1))) if found else None
    if start is None:  # no guess: halve the block
        start = block.find(b"\n", len(block) // 2) + 1
        if start in (0, len(block)):
            start = block.rfind(b"\n", 0, len(block) - 1) + 1
    end = block.find(b"\n", start) + 1 or len(block)
    if start == 0 and end == len(block):  # one line
        budget[0] -= 1
        try:
            event = _slow_event(block, "", 0)
        except ValueError:
            return None
        return None if event is None else [event]
    events: list[Event] = []
    for part in (block[:start], block[start:end], block[end:]):
        decoded = _block_events(part, budget) if part else []
        if decoded is None:
            return None
        events += decoded
    return events


_REFUSED_AT = re.compile(r"at `\$\[([0-9]+)\]`$").search


def _line_start(block: bytes, index: int) -> int | None:
    """Where the block's line ``index`` (from 0) starts; None past its end."""
    start = 0
    for _ in range(index):
        start = block.find(b"\n", start) + 1
        if start == 0 or start == len(block):
            return None
    return start


_UNUSUAL_LINES = 8  # per block, isolated by halving it; more take the line-by-line path


# Fields of a few event types, decoded in C into ``moved_<field>`` and handed out in ``extra``.
_MOVED_FIELDS = ("rtt_ms", "kind", "stalls")


def _settled(block: bytes, events: list[Event]) -> list[Event]:
    """A decoded block's events as handed out: a worker of "" reads as no worker, and the
    transitions' own fields move into ``extra``."""
    if b'"worker":""' in block:
        for event in events:
            if event.worker == "":
                event.worker = None
    for field in _MOVED_FIELDS:
        if b'"%s"' % field.encode() in block:
            attribute = "moved_" + field
            for event in events:
                value = getattr(event, attribute)
                if value is not None:
                    event.extra = {**event.extra, field: value}
                    setattr(event, attribute, None)
    return events


_BLOCK_BYTES = 1 << 16  # a block of lines: ~200 events, so a runner event's block is small


def line_blocks(path: str | Path) -> Iterator[tuple[bytes, int]]:
    """A file of JSON lines in blocks of whole lines (the last may lack its newline), each with
    the number of lines before it."""
    number = 0
    carry = b""
    with open(path, "rb") as handle:
        while True:
            data = handle.read(_BLOCK_BYTES)
            if not data:
                if carry:
                    yield carry, number
                return
            block = carry + data if carry else data
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry = block
                continue
            if cut < len(block):
                block, carry = block[:cut], block[cut:]
            else:
                carry = b""
            yield block, number
            number += block.count(b"\n")


def _line_events(block: bytes, path: str | Path, number: int) -> Iterator[tuple[int, Event]]:
    """A block's events line by line, each with its line number; stops at a torn last line."""
    decode, refused = _decode_line, _REFUSED
    for number, line in enumerate(block.splitlines(keepends=True), start=number + 1):  # noqa: B020
        try:
            event = _settled(line, [decode(line)])[0]
        except refused:
            if not line.strip():
                continue
            slow = _slow_event(line, path, number)
            if slow is None:  # a torn last line
                return
            event = slow
        yield number, event


class _Order:
    """Vets each stream id and that the file is in stream order."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.last_seq, self.last_length, self.last_dash = "0-0", 3, 1

    def check(self, seq: str, number: int) -> None:
        """One line's id, after the line before (raises naming the line)."""
        dash = seq.find("-")
        # the stream id vetted by two C calls (a regex per event costs five times more)
        if dash == 0 or not (seq.isascii() and seq.replace("-", "", 1).isdecimal()):
            raise _bad_seq(self.path, number, seq)
        # Same length, dash at the same place: string order is numeric order (the usual
        # case, far cheaper than parsing); otherwise compare the parsed ids.
        if not (len(seq) == self.last_length and dash == self.last_dash
                and seq >= self.last_seq) and seq_key(seq) < seq_key(self.last_seq):
            raise HistoryOrderError(f"{self.path}:{number}: stream id {seq} is out of order")
        self.last_seq, self.last_length, self.last_dash = seq, len(seq), dash

    def vetted(self, events: list[Event]) -> bool:
        """A block's ids vetted in a few C calls, for the usual case: each id digits, one dash,
        at the same place in all of them (so the milliseconds have one length, and string
        order is numeric order except between counters of different lengths, which are then
        compared as numbers). False: let ``check`` judge them one by one."""
        if not events:
            return True
        seqs = [event.seq for event in events]
        dashes = set(map(str.find, seqs, repeat("-")))
        joined = "".join(seqs)
        if not (len(dashes) == 1 and min(dashes) > 0 and joined.count("-") == len(seqs)
                and joined.isascii() and joined.replace("-", "").isdecimal()):
            return False
        if seq_key(seqs[0]) < seq_key(self.last_seq):
            return False
        lengths = list(map(len, seqs))
        suspects = map(or_, map(gt, seqs, islice(seqs, 1, None)),
                       map(ne, lengths, islice(lengths, 1, None)))
        for index in compress(count(), suspects):
            if seq_key(seqs[index + 1]) < seq_key(seqs[index]):
                return False
        self.last_seq, self.last_length, self.last_dash = seqs[-1], lengths[-1], min(dashes)
        return True


def read_history(path: str | Path) -> list[Event]:
    """Load ``history.jsonl`` into memory, sorted by stream id; a torn last line (crash
    mid-write) is skipped, nothing else is."""
    events: list[Event] = []
    with open(path, "rb") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        try:
            event = _settled(line, [_decode_line(line)])[0]
            seq = event.seq
            if seq.find("-") == 0 or not (seq.isascii() and seq.replace("-", "", 1).isdecimal()):
                raise _bad_seq(path, number, seq)
        except _REFUSED:
            if not line.strip():
                continue
            slow = _slow_event(line, path, number)
            if slow is None:
                break
            event = slow
        events.append(event)
    events.sort(key=lambda event: seq_key(event.seq))
    return events


# Lines of the exporter's usual shape (known fields only, numbers as digit strings) decode in C;
# any other line (extra fields, "" for an absent number, bad input) raises
# _REFUSED and takes ``_slow_event``, which also words the errors.
_decode_line = msgspec.json.Decoder(Event, strict=False).decode
_decode_block = msgspec.json.Decoder(Event, strict=False).decode_lines
_REFUSED = msgspec.DecodeError  # ValidationError is one too


def _slow_event(line: bytes, path: str | Path, number: int) -> Event | None:
    """One line the fast decoder refused, as an Event; None for a torn last line (a crash
    mid-write: it lacks its newline); a ValueError naming the line otherwise."""
    try:
        record = _loads(line)
    except ValueError:
        if not line.endswith(b"\n"):
            return None
        raise _unreadable(path, number, line) from None
    return _event(record, line, path, number)


def _bad_seq(path: str | Path, number: int, seq: str) -> ValueError:
    return ValueError(f"{path}:{number}: seq = {seq!r}: expected a stream id like 1-0")


def _unreadable(path: str | Path, number: int, line: bytes) -> ValueError:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as error:
        return ValueError(f"{path}:{number}: not UTF-8 text: {error}")
    return ValueError(f"{path}:{number}: not a JSON object")


_STREAM_ID = re.compile(r"[0-9]+(?:-[0-9]*)?").fullmatch


def _event(record: Any, line: bytes, path: str | Path, number: int) -> Event:
    """One history line as an Event, or a ValueError naming the line and what is wrong."""
    # The exporter's lines hold strings only. In valid JSON every key ends in `":`, and a `"`
    # inside a string is escaped, so when each `":` is followed by `"` every value is a string:
    # two byte counts in C instead of a type test per field. Any other line (numbers, bools,
    # spaces, ...) gets the slow, precise checks, and their error messages.
    if (type(record) is dict and line.count(b'":') == line.count(b'":"')
            and "type" in record and _STREAM_ID(record.get("seq", ""))):
        # Event.from_record for a record of strings (no str() to call, "" reads as absent):
        # the hot path of a long check, inlined.
        get = record.get
        ts, attempt, deadline = get("ts"), get("attempt"), get("deadline")
        lease_ms, current = get("lease_ms"), get("current_attempt")
        try:
            return Event(
                record["seq"], record["type"], int(ts) if ts else 0, get("id"),
                int(attempt) if attempt else None, get("worker") or None,
                int(deadline) if deadline else None, int(lease_ms) if lease_ms else None,
                int(current) if current else None,
                {} if record.keys() <= _KNOWN_FIELDS
                else {key: value for key, value in record.items() if key not in _KNOWN_FIELDS})
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None
    return _checked_event(record, f"{path}:{number}")


def _checked_event(record: Any, where: str) -> Event:
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


def replay_history(path: str | Path, consume: Callable[[Iterable[Event]], T]) -> T:
    """``consume`` the history in stream order: streamed from the file when it is in order (as
    the exporter writes it: memory stays flat however long the run), else loaded and sorted."""
    try:
        return consume(iter_history(path))
    except HistoryOrderError:
        return consume(read_history(path))


def write_records(handle: IO[str], entries: Iterable[tuple[str, dict[str, str]]]) -> int:
    count = 0
    for entry_id, fields in entries:
        handle.write(json.dumps({"seq": entry_id, **fields}, separators=(",", ":")) + "\n")
        count += 1
    handle.flush()
    return count


EXPORT_POLL_S = 0.1  # the exporter's wait after a short batch (it has caught up)
# The exporter trims what it has exported every TRIM_INTERVAL_S, or sooner once TRIM_EVERY
# events piled up, but never fewer than TRIM_MIN at once (the stream of a run's first moments,
# which tools watch with XLEN, stays whole).
TRIM_INTERVAL_S, TRIM_EVERY, TRIM_MIN = 1.0, 10_000, 200
MEMORY_SAMPLE_S = 10.0  # how often the exporter samples memory into MEMORY_SAMPLES
MEMORY_SAMPLES = "memory.jsonl"  # in the run directory

# Trim the stream up to (not including) the last exported entry, but only while the stream
# still holds exactly what was exported up to it (ARGV[2] entries from ARGV[3], the run's first
# entry or the last trim's kept one, up to it). Otherwise the store rolled back (a restart from an
# older snapshot, a failover to a replica that had not seen them), and what the stream holds is
# the evidence of that rollback (the surviving history): it must not be trimmed. -1: not trimmed.
TRIM_SCRIPT = """
local expected = tonumber(ARGV[2])
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return -1 end
if #redis.call('XRANGE', KEYS[1], ARGV[3], '(' .. ARGV[1], 'COUNT', expected + 1) ~= expected then
  return -1
end
return redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
"""


def process_rss_bytes() -> int:
    """This process's resident set size now (not its peak), from /proc; 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class HistoryExporter:
    """Copies the events stream into ``history.jsonl`` as the run goes, in a background thread.

    ``trim``: every ``TRIM_INTERVAL_S`` (or ``TRIM_EVERY`` events), fsync the file and XTRIM the
    stream up to the last exported entry (kept: it marks how far the store had it), so
    Valkey's memory stays flat however long the run; it stops trimming for good the first time
    that entry is gone (a store rollback: ``trim_stopped`` says so), keeping the evidence.
    ``memory_path``: every ``MEMORY_SAMPLE_S`` a line there with Valkey's used_memory, the
    stream's length and memory (the evidence's share of used_memory) and this process's RSS
    (the runner's, the exporter's thread included).

    ``begins_at``: the run's first entry (its run event). A stream the store kept from earlier
    runs (an attached deployment, a reused server) holds their events before it: they are not
    this run's history, so neither exported nor counted (their first trim removes them)."""

    def __init__(self, client: redis.Redis, stream: str, path: Path, batch: int = 2000,
                 trim: bool = True, memory_path: Path | None = None,
                 begins_at: str = "-") -> None:
        self.client = client
        self.stream = stream
        self.path = path
        self.batch = batch
        self.begins_at = begins_at
        self.last_id = entry_before(begins_at)
        self.exported = 0
        self.trim = trim
        self.trimmed = 0  # entries removed from the stream
        self.trim_stopped = ""  # why trimming stopped, when it did
        self.trimmed_to: str | None = None  # the last trim's kept entry: the store had all before
        self._untrimmed = 0  # exported since the last trim
        self._next_trim = time.monotonic() + TRIM_INTERVAL_S
        self.memory_path = memory_path
        self._next_sample = 0.0
        self.counts: Counter[str] = Counter()  # events exported so far, by type (progress)
        self.ended = False  # the run's end phase exported: nothing after it is the run's
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._thread = threading.Thread(target=self._loop, name="history-export", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _read_batch(self, ends_at: str | None = None) -> int:
        """Export the next batch, up to the run's end phase and nothing after it: a deployment
        that runs on (an attached reaper sweeping in the same millisecond as the end phase)
        appends entries that are not this run's, and the background loop may read them before
        the drain learns where the run ended (``ends_at``, the end phase's entry)."""
        with self._lock:
            if self.ended:
                return 0
            reply = self.client.xread({self.stream: self.last_id}, count=self.batch)
            if not reply:
                return 0
            entries = reply[0][1]
            for index, (_, fields) in enumerate(entries):
                if fields.get("type") == "phase" and fields.get("phase") == "end":
                    entries, self.ended = entries[:index + 1], True
                    break
            if ends_at is not None:
                last = seq_key(ends_at)
                entries = [entry for entry in entries if seq_key(entry[0]) <= last]
                if not entries:
                    return 0
            written = write_records(self._handle, entries)
            self.counts.update(fields.get("type", "?") for _, fields in entries)
            self.last_id = entries[-1][0]
            self.exported += written
            self._untrimmed += written
            if (self.trim and not self.trim_stopped and self._untrimmed >= TRIM_MIN
                    and (self._untrimmed >= TRIM_EVERY or time.monotonic() >= self._next_trim)):
                self._trim()
            return written

    def _trim(self) -> None:
        """The file first reaches the disk, then the stream lets go of what it holds."""
        os.fsync(self._handle.fileno())
        expected = self._untrimmed - 1 + (1 if self.trimmed_to else 0)  # + the kept entry
        removed = int(self.client.eval(TRIM_SCRIPT, 1, self.stream, self.last_id, expected,
                                       self.trimmed_to or self.begins_at))
        if removed < 0:
            self.trim_stopped = (f"the stream no longer holds what was exported up to "
                                 f"{self.last_id} (a store rollback): it is kept whole from here")
            return
        self.trimmed += removed
        self.trimmed_to = self.last_id
        self._untrimmed = 0
        self._next_trim = time.monotonic() + TRIM_INTERVAL_S

    def sample_memory(self) -> dict[str, Any]:
        """One memory sample, also appended to ``memory_path``."""
        info = self.client.info("memory")
        sample = {"unix_ms": int(time.time() * 1000), "used_memory": info.get("used_memory"),
                  "stream_length": int(self.client.xlen(self.stream)),
                  "stream_bytes": int(self.client.memory_usage(self.stream) or 0),
                  "exported": self.exported, "trimmed": self.trimmed,
                  "runner_rss": process_rss_bytes(),
                  **({"trim_stopped": self.trim_stopped} if self.trim_stopped else {})}
        if self.memory_path is not None:
            with open(self.memory_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(sample, separators=(",", ":")) + "\n")
        return sample

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.memory_path is not None and time.monotonic() >= self._next_sample:
                    self._next_sample = time.monotonic() + MEMORY_SAMPLE_S
                    self.sample_memory()
                if self._read_batch() < self.batch:
                    self._stop.wait(EXPORT_POLL_S)
            except Exception as error:  # keep exporting after a blip; the final drain retries
                self.error = error
                self._stop.wait(0.5)

    def drain(self, ends_at: str | None = None) -> None:
        """Export everything still in the stream (call after the last event was written), up to
        ``ends_at`` (the run's last entry, its end phase) when given: a deployment that runs on
        after the run (an attached reaper's sweeps) appends entries that are not this run's."""
        self._stop.set()  # the background loop must not export past ends_at meanwhile
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        while self._read_batch(ends_at) == self.batch:
            pass
        if self.memory_path is not None:  # the run's last point
            self.sample_memory()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._handle.close()


def entry_before(entry_id: str) -> str:
    """The greatest stream id before ``entry_id`` ("0-0" for "-"): where an exclusive read
    (XREAD) starts to include ``entry_id``."""
    if entry_id == "-":
        return "0-0"
    ms, _, seq = entry_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-{2**64 - 1}" if int(ms) > 0 else "0-0"


def stream_entries(client: redis.Redis, stream: str, batch: int = 5000, first: str = "-",
                   last_entry: str = "+") -> Iterator[tuple[str, dict[str, str]]]:
    """Every (id, fields) entry of a stream from ``first`` to ``last_entry`` (ids, inclusive),
    oldest first."""
    last, skip = first, None
    while True:
        entries = client.xrange(stream, min=last, max=last_entry, count=batch)
        if skip is not None and entries and entries[0][0] == skip:
            entries = entries[1:]
        if not entries:
            return
        yield from entries
        last = skip = entries[-1][0]


def decode_entries(entries: Iterable[tuple[str, dict[str, str]]]) -> Iterator[Event]:
    """Stream entries (id, fields) as events."""
    for entry_id, fields in entries:
        yield Event.from_record({"seq": entry_id, **fields})


def iter_stream(client: redis.Redis, stream: str, batch: int = 5000) -> Iterator[Event]:
    """Every event of a stream, oldest first (for tests and tools that read Valkey directly)."""
    return decode_entries(stream_entries(client, stream, batch))


def save_surviving_history(client: redis.Redis, stream: str, history_path: Path,
                           out_path: Path, trimmed_to: str | None, batch: int = 5000,
                           begins_at: str = "-", ends_at: str = "+") -> bool:
    """Compare the stream the store holds now with the exported history, a page at a time
    (memory stays flat however long the run); when they differ (a store fault rolled events
    back), write what survived to ``out_path`` and return True.

    ``trimmed_to``: the exporter's last trim point (``HistoryExporter.trimmed_to``), None when
    it never trimmed. The store held every event before it when it let go of them, so while the
    stream still starts at or before that point (a rollback to an older snapshot restores an
    older start), the exported events before its first entry count as surviving; a stream that
    starts later, or is empty, lost them with everything else (a store that came back empty).

    ``begins_at``, ``ends_at``: the run's first and last entries (its run event and its end
    phase): what the stream holds before and after them is other runs' history, or what the
    deployment went on doing after this run, not this run's."""
    first = client.xrange(stream, min=begins_at, max=ends_at, count=1)
    first_key = seq_key(first[0][0]) if first else None
    if trimmed_to is None or first_key is None or first_key > seq_key(trimmed_to):
        first_key = None  # no trimmed prefix survives: the stream must hold everything
    exported = iter_history(history_path) if history_path.exists() else iter(())
    entries = stream_entries(client, stream, batch, begins_at, ends_at)
    same = True
    try:
        for event in exported:
            if first_key is not None and seq_key(event.seq) < first_key:
                continue  # trimmed after export, and kept
            entry = next(entries, None)
            if entry is None or entry[0] != event.seq:
                same = False
                break
        else:
            same = next(entries, None) is None
    except HistoryOrderError:
        same = False  # never written by the exporter: compare whole, below
    if same:
        return False
    with open(out_path, "w", encoding="utf-8") as handle:
        if first_key is not None and history_path.exists():
            with open(history_path, "rb") as history:
                for line in history:
                    if line.strip() and seq_key(_loads(line)["seq"]) < first_key:
                        handle.write(line.decode("utf-8"))
        for page in _pages(stream_entries(client, stream, batch, begins_at, ends_at), batch):
            write_records(handle, page)
    return True


def _pages(items: Iterable[T], size: int) -> Iterator[list[T]]:
    page: list[T] = []
    for item in items:
        page.append(item)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page
