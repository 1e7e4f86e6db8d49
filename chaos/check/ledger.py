"""The client-side acknowledgement ledger: what each client was told succeeded, kept outside Valkey.

The history stream lives in the store under test, so a store crash or a failover can erase the
evidence together with the data. Every process that performs transitions (the runner's producer,
each worker) therefore appends one JSON line per *acknowledged* transition to its own file,
``acks/<name>.jsonl`` in the run directory:

    {"op": "enqueue", "id": "job-0000001", "t": 1767000000123}
    {"op": "claim", "id": "job-0000001", "attempt": 1, "worker": "worker-2", "deadline": 176...}
    {"op": "complete", "id": "job-0000001", "attempt": 1, "worker": "worker-2", "t": ...}

Recorded: producer enqueues, worker claims and accepted completes (extends and rejections are
not: a lost renewal loses no job, a rejection changes nothing). Each line is one ``write(2)`` to an
``O_APPEND`` file, issued after the server's reply and before the client acts on it. A SIGKILL of
the writer therefore loses nothing already acknowledged to it (the bytes are in the kernel); only an
OS crash could drop the unsynced tail. A line torn by such a crash is skipped when reading, so the
ledger can only under-count acknowledgements: the lost figure is never inflated.

When the store rolled back events the exporter had already copied (``history-surviving.jsonl``
then holds what the store kept), the checker judges ``judged_history``: the surviving events, the
rolled-back ones a client was acknowledged for, and the runner's own notes.

``compare_acks`` is pure: ledger + surviving history in, the acknowledged transitions the store no
longer shows out. An acknowledged transition matches a surviving event of the same op with the same
identity (enqueue: id; claim: id, attempt, worker, deadline; complete: id, attempt, worker), counted
as multisets, so a rolled-back claim re-issued with the same attempt still counts as one loss.
``compare_ack_files`` finds the same, streaming the ledger files beside the history (a long run's
ledger holds millions of lines: memory then holds only the acknowledgements in flight).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from chaos.check.figures import store_fault_recovery
from chaos.check.verdict import Verdict
from chaos.history import schema
from chaos.history.events import Event, line_blocks, read_history, replay_history, seq_key
from chaos.protocol.acks import ACK_OPS, ACKS_DIR

# The store's own events stream as read back at the end of a run, written only when it differs
# from history.jsonl (the exporter copied events out that the store later lost).
SURVIVING_HISTORY = "history-surviving.jsonl"
EXAMPLES = 10


class Ack(msgspec.Struct, frozen=True, gc=False):
    """One transition a client was told succeeded (built in C: a long run's ledger holds
    millions)."""

    op: str
    job_id: str
    attempt: int | None = None
    worker: str | None = None
    deadline: int | None = None
    source: str = ""  # the ledger file (client) it came from

    def identity(self) -> tuple[Any, ...]:
        return _identity(self.op, self.job_id, self.attempt, self.worker, self.deadline)


def _identity(op: str, job_id: str, attempt: int | None, worker: str | None,
              deadline: int | None) -> tuple[Any, ...]:
    if op == "enqueue":
        return (op, job_id)
    if op == "claim":
        return (op, job_id, attempt, worker, deadline)
    return (op, job_id, attempt, worker)


def _event_identity(event: Event) -> tuple[Any, ...]:
    """What an acknowledgement of this event would carry (see ``_identity``)."""
    return _identity(event.type, event.job_id or "", event.attempt, event.worker, event.deadline)


class _AckLine(msgspec.Struct, gc=False):
    """A ledger line of the writer's usual shape, decoded in C (``_ack_lines``)."""

    op: str
    id: str
    attempt: int | None = None
    worker: str | None = None
    deadline: int | None = None
    t: int = 0  # the client's wall clock when it was acknowledged (ms)


_decode_ack = msgspec.json.Decoder(_AckLine, strict=False).decode


_decode_ack_block = msgspec.json.Decoder(_AckLine, strict=False).decode_lines


def _ack_lines(path: Path) -> Iterator[_AckLine]:
    """One ledger file's acknowledgements in file order; a torn last line is skipped, nothing
    else is. Lines of the writer's own shape decode in C, a block at a time; a block with any
    other line goes line by line, the slow path wording the errors."""
    for block, number in line_blocks(path):
        try:
            records = _decode_ack_block(block)
        except msgspec.DecodeError:
            records = None
        if records is not None and all(record.op in ACK_OPS for record in records):
            yield from records
            continue
        for number, line in enumerate(block.splitlines(keepends=True), start=number + 1):  # noqa: B020
            try:
                record = _decode_ack(line)
                if record.op in ACK_OPS:
                    yield record
                    continue
            except msgspec.DecodeError:
                if not line.strip():
                    continue
            slow = _slow_ack(line, path, number)
            if slow is None:  # no newline after it: torn by a crash mid-write
                return
            yield slow


def _slow_ack(line: bytes, path: Path, number: int) -> _AckLine | None:
    try:
        record = json.loads(line)
    except ValueError:
        if not line.endswith(b"\n"):
            return None
        raise ValueError(f"{path}:{number}: not a JSON object") from None
    if not isinstance(record, dict) or record.get("op") not in ACK_OPS or "id" not in record:
        text = line.decode("utf-8", "replace").rstrip("\n")
        raise ValueError(f"{path}:{number}: expected op in {ACK_OPS} and an id, "
                         f"got {text[:80]!r}")
    t = record.get("t")
    return _AckLine(record["op"], str(record["id"]), _int(record.get("attempt")),
                    record.get("worker"), _int(record.get("deadline")),
                    t if isinstance(t, int) else 0)


def _ledger_files(directory: str | os.PathLike[str]) -> list[Path]:
    return sorted(Path(directory).glob("*.jsonl"))


def read_acks(directory: str | os.PathLike[str]) -> list[Ack]:
    """Every ``*.jsonl`` ledger in ``directory`` (files by name, lines in order: the ledger
    order); a torn last line is skipped, nothing else is."""
    return [Ack(line.op, line.id, line.attempt, line.worker, line.deadline, path.stem)
            for path in _ledger_files(directory) for line in _ack_lines(path)]


def _int(value: Any) -> int | None:
    return None if value in (None, "") else int(value)


@dataclass
class AckComparison:
    acknowledged: dict[str, int] = field(default_factory=dict)  # per op
    lost: dict[str, int] = field(default_factory=dict)  # per op: acknowledged, not surviving
    examples: list[dict[str, Any]] = field(default_factory=list)
    jobs_affected: int = 0  # distinct jobs with at least one lost acknowledged transition

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    def as_dict(self) -> dict[str, Any]:
        return {"acknowledged": self.acknowledged, "lost": self.lost_total,
                "lost_by_op": self.lost, "jobs_affected": self.jobs_affected,
                "examples": self.examples}


def _cancel_or_hold(key: tuple[Any, ...], waiting: dict[tuple[Any, ...], int],
                    held: dict[tuple[Any, ...], int]) -> None:
    """One ``key`` arrives: it cancels one waiting on the other side, else it waits in ``held``."""
    count = waiting.get(key)
    if count is None:
        held[key] = held.get(key, 0) + 1
    elif count == 1:
        del waiting[key]
    else:
        waiting[key] = count - 1

class _Matcher:
    """Acknowledgements against events, as multisets of identities, met in any order: each
    ack cancels an unmatched event of its identity or waits for one, and the other way round.
    What is left unmatched at the end is what a whole-ledger count would find, so fed in
    time order (``compare_ack_files``) it holds only the few identities in flight."""

    def __init__(self) -> None:
        self.events: dict[tuple[Any, ...], int] = {}  # seen, no ack for them yet
        self.acks: dict[tuple[Any, ...], int] = {}  # acknowledged, no event for them yet
        self.acknowledged = dict.fromkeys(ACK_OPS, 0)

    def event(self, key: tuple[Any, ...]) -> None:
        _cancel_or_hold(key, self.acks, self.events)

    def ack(self, op: str, key: tuple[Any, ...]) -> None:
        self.acknowledged[op] += 1
        _cancel_or_hold(key, self.events, self.acks)

    def comparison(self, ledger: Callable[[], Iterable[Ack]]) -> AckComparison:
        """The result; ``ledger``: the acknowledgements again, in ledger order, read only when
        some are lost, to name them (of several alike, the last ones are the lost ones)."""
        result = AckComparison(acknowledged=self.acknowledged,
                               lost=dict.fromkeys(ACK_OPS, 0))
        lost = self.acks
        for key, count in lost.items():
            result.lost[key[0]] += count
        result.jobs_affected = len({key[1] for key in lost})
        if lost:
            alike: dict[tuple[Any, ...], list[tuple[int, Ack]]] = {}
            for position, ack in enumerate(ledger()):
                key = ack.identity()
                if key in lost:
                    alike.setdefault(key, []).append((position, ack))
            named = sorted(item for key, items in alike.items() for item in items[-lost[key]:])
            result.examples = [_example(ack) for _, ack in named[:EXAMPLES]]
        return result


def _example(ack: Ack) -> dict[str, Any]:
    example: dict[str, Any] = {"op": ack.op, "job": ack.job_id, "client": ack.source}
    example.update({name: value for name, value in (
        ("attempt", ack.attempt), ("worker", ack.worker), ("deadline", ack.deadline))
        if value is not None})
    return example


def compare_acks(acks: Iterable[Ack], surviving: Iterable[Event]) -> AckComparison:
    """Acknowledged transitions with no matching event in the surviving history."""
    matcher = _Matcher()
    for event in surviving:
        if event.type in ACK_OPS:
            matcher.event(_event_identity(event))
    ledger = list(acks)
    for ack in ledger:
        matcher.ack(ack.op, ack.identity())
    return matcher.comparison(lambda: ledger)


def compare_ack_files(directory: Path, events: Iterable[Event]) -> AckComparison:
    """``compare_acks`` of the ledger files in ``directory`` against a history in stream
    order, both streamed: every ``_STEP`` events, each file is read up to the acknowledgements
    stamped (``t``) by then (an ack is written just after its event), so memory holds what is
    in flight, not the run. Clocks that disagree only make the in-flight share larger; the
    result does not depend on the interleaving."""
    readers = [_LedgerReader(path) for path in _ledger_files(directory)]
    matcher = _Matcher()
    seen = 0
    for event in events:
        if event.type not in ACK_OPS:
            continue
        matcher.event(_event_identity(event))
        seen += 1
        if seen % _STEP == 0:
            for reader in readers:
                reader.feed(matcher, event.ts)
    for reader in readers:
        reader.feed(matcher, None)
    return matcher.comparison(lambda: read_acks(directory))


_STEP = 4096  # history events between two reads of the ledger files


class _LedgerReader:
    """One ledger file, read as far as asked."""

    def __init__(self, path: Path) -> None:
        self.lines = _ack_lines(path)
        self.next = next(self.lines, None)

    def feed(self, matcher: _Matcher, until_t: int | None) -> None:
        """Every acknowledgement stamped up to ``until_t`` (None: all the rest)."""
        line, lines, ack = self.next, self.lines, matcher.ack
        while line is not None and (until_t is None or line.t <= until_t):
            ack(line.op, _identity(line.op, line.id, line.attempt, line.worker, line.deadline))
            line = next(lines, None)
        self.next = line


def events_not_surviving(history: Iterable[Event], surviving: Iterable[Event]) -> list[Event]:
    """Events the exporter copied out of the store that the store no longer holds (rolled back)."""
    kept = {event.seq for event in surviving}
    return [event for event in history if event.seq not in kept]


# Events the runner writes about the run (not queue transitions): kept from the exporter's copy
# even if the store lost them, since they describe what was done to the store.
RUNNER_EVENTS = frozenset(kind.TYPE for kind in schema.RUNNER_EVENTS)


def judged_history(history: list[Event], surviving: list[Event],
                   acks: Iterable[Ack]) -> list[Event]:
    """The history as clients experienced it, once a store rolled events back: what the store
    kept, plus every rolled-back transition a client was told succeeded (it acted on those), plus
    the runner's own notes. A rolled-back transition nobody was acknowledged for took effect for
    no one (e.g. a write on a stale primary whose WAIT failed), so it is not judged."""
    # The acknowledgements the surviving events do not already account for.
    acked = Counter(ack.identity() for ack in acks)
    acked.subtract(_event_identity(e) for e in surviving if e.type in ACK_OPS)
    kept = list(surviving)
    for event in events_not_surviving(history, surviving):
        if event.type in RUNNER_EVENTS:
            kept.append(event)
        elif event.type in ACK_OPS and acked[key := _event_identity(event)] > 0:
            acked[key] -= 1
            kept.append(event)
    return sorted(kept, key=lambda event: seq_key(event.seq))


def check_with_ledger(run_dir: Path, history_path: Path,
                      judge: Callable[[Iterable[Event]], Verdict],
                      ) -> tuple[Verdict, dict[str, Any] | None]:
    """Judge a run directory's evidence: ``judge`` (the checker) gets history.jsonl streamed, or,
    when the store rolled events back (``history-surviving.jsonl`` exists), ``judged_history``;
    store faults get their clients' recovery (a second pass); and ``report.json["ack_ledger"]``
    (None without a ledger, ``acks/``)."""
    surviving_path = run_dir / SURVIVING_HISTORY
    directory = run_dir / ACKS_DIR
    if not surviving_path.exists():  # the store kept everything: stream, memory stays flat
        verdict = replay_history(history_path, judge)
        if verdict.store_faults:
            verdict.store_faults = replay_history(
                history_path, lambda events: store_fault_recovery(events, verdict.store_faults))
        if not directory.is_dir():
            return verdict, None
        comparison = replay_history(history_path,
                                    lambda events: compare_ack_files(directory, events))
        rolled_back: list[Event] = []
    else:
        acks = read_acks(directory) if directory.is_dir() else None
        history, surviving = read_history(history_path), read_history(surviving_path)
        judged = judged_history(history, surviving, acks or [])
        verdict = judge(judged)
        verdict.store_faults = store_fault_recovery(judged, verdict.store_faults)
        if acks is None:
            return verdict, None
        comparison = compare_acks(acks, surviving)
        rolled_back = events_not_surviving(history, surviving)
    return verdict, {
        **comparison.as_dict(),
        "history_events_lost": len(rolled_back),
        "history_events_lost_by_type": dict(Counter(e.type for e in rolled_back)),
        "compared_with": SURVIVING_HISTORY if surviving_path.exists() else "history.jsonl",
    }
