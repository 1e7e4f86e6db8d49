"""The black-box history source (docs/design.md §5): Valkey's MONITOR feed, decoded.

A recorder holds its own connection in MONITOR mode and reads every command the server runs, in
the order it runs them, each stamped with the server clock in µs. A script's call line (EVAL or
EVALSHA, with the caller's address) is followed by the commands the script ran (``[0 lua]``), so
the lines group into one ``Call`` per execution; a dialect decodes each call into history events
(``chaos.history.dialects``), and they are written to ``history-monitor.jsonl`` in the same
shape as ``history.jsonl``: the checker cannot tell the sources apart.

Each call is attributed to a connection: its address is resolved through CLIENT LIST (once per
address, on the recorder's second connection) to the client name the process set (the
reference worker names its connections ``<worker>`` and ``<worker>-heartbeat``), or to its ACL
user when it has one of its own; the events carry it as ``conn``.

Health: a recorder that falls behind, loses its connection for good, or meets lines it cannot
read or calls on the queue's keys it cannot decode says so in ``RecorderHealth`` (``monitor.json``
in the run directory), and a history with any of those is never a pass (``chaos.run.sources``).

A lost connection (a store restart) is retried for ``RECONNECT_TIMEOUT_S``. The feed resumes on a
connection that first runs the dialect's gap snapshot, then TIME, then MONITOR, pipelined: nothing
runs between them, so the snapshot is the store exactly as the feed resumes. The gap (``gaps``:
from the last line read to that TIME, server clock, µs) is *verified* when the snapshot holds
nothing the history does not (``GapCheck``): no write was missed, only reads and rejected calls
can have gone unseen; the runner events recorded in it are read back from the events stream.
An unverified gap makes the history incomplete evidence.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from chaos.history.dialects import Call, Dialect, toolkit_script
from chaos.history.readiness import FirstActions
from chaos.history.schema import (
    CLIENT_CALLS,
    HOLDER_EVIDENCE,
    TRANSITION_EVIDENCE,
    Blind,
    Phase,
    Run,
    Sweep,
)

MONITOR_HISTORY = "history-monitor.jsonl"
HEALTH_FILE = "monitor.json"
_END_MARKER = "echomq-chaos:monitor-end"
_UNNAMED = "id:"  # a connection known only by its client id
_ESCAPE = re.compile(r'\\(x[0-9a-fA-F]{2}|.)')
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ARGUMENT = re.compile(r'(?:[^"\\]+|\\.)*')  # what _QUOTED reads between a pair of quotes
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}
# A backslash that does not start one of the escapes sdscatrepr writes (\\ \" \n \r \t \a \b
# \xHH): such an argument (never the server's) is unescaped the slow way, byte for byte as before.
_ODD_ESCAPE = re.compile(r'\\(?![\\"nrtab]|x[0-9a-fA-F]{2})')
RECONNECT_TIMEOUT_S = 30.0  # how long a lost feed is retried (a restart: down + AOF load)
UNNAMED_RECHECK_S = 0.05  # how often an address known only by its client id is listed again
RECONNECT_PAUSE_S = 0.005  # between attempts: the store's own clients retry too; be first


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] == "x" and len(code) == 3:
        return chr(int(code[1:], 16))
    return _ESCAPES.get(code, code)


def _unescaped(arg: str) -> str:
    """One argument of a line with escapes: its bytes (\\xHH) read as UTF-8."""
    if "\\" in arg:
        if _ODD_ESCAPE.search(arg) is None:  # Python's escapes are a superset of these
            arg = arg.encode("latin-1").decode("unicode_escape")
        else:
            arg = _ESCAPE.sub(_unescape, arg)
    return arg if arg.isascii() else arg.encode("latin-1").decode("utf-8", "replace")


def _unescape_pieces(args: list[str]) -> bool:
    """Unescape, in place, the pieces of a line split at '" "'; False (``args`` then half
    done) when a piece is not what ``_QUOTED`` reads as one argument."""
    for index, arg in enumerate(args):
        if "\\" in arg:
            if _ARGUMENT.fullmatch(arg) is None:
                return False
            args[index] = _unescaped(arg)
        elif '"' in arg:
            return False
        elif not arg.isascii():
            args[index] = arg.encode("latin-1").decode("utf-8", "replace")
    return True


def parse_line(line: str) -> tuple[int, str, list[str]] | None:
    """One MONITOR line (``+<sec>.<usec> [<db> <client>] "ARG" ...``, without its CRLF): the
    server stamp in µs, the client (``host:port`` or ``lua``) and the arguments; None for a
    line that is not a command (``+OK``).

    The recorder's hot path (every line of the feed): one partition where the arguments begin,
    and escapes undone only in the arguments that have them. ``tests/test_monitor_parse.py``
    holds it equal to the plain reading on tricky lines."""
    if not line.startswith("+"):
        return None
    # The first " [" opens the client and the first "] " after it closes it, a quote next
    # (IPv6: [::1]:6379). Where '] "' is not that, the line is no command: a "] " before it
    # (not followed by a quote), or a " [" only after it (then the stamp holds '] "').
    head, quoted, rest = line.partition('] "')
    stamp, opened, client = head.partition(" [")
    seconds, _, micros = stamp[1:].partition(".")
    if not (quoted and opened and seconds.isdigit() and micros.isdigit()) or "] " in client:
        return None
    args = rest[:-1].split('" "')
    # Escaped bytes (sdscatrepr): \" \\ \n \r \t \a \b \xHH; the args are byte strings. A quote in
    # an argument is always escaped, so '" "' still splits them: when every piece reads as one
    # quoted argument (and the line ends its last one), the pieces are the arguments.
    if "\\" in rest and not (rest.endswith('"') and _unescape_pieces(args)):
        args = [_unescaped(arg) for arg in _QUOTED.findall(line, len(head) + 2)]
    # (MONITOR writes six digits of µs: then one int of both is the stamp, and cheaper)
    stamp_us = int(seconds + micros) if len(micros) == 6 else \
        int(seconds) * 1_000_000 + int(micros)
    return stamp_us, client.partition(" ")[2], args


@dataclass
class RecorderHealth:
    """What the recorder saw, and whether its history can be trusted (report.json
    ``history_recorder``)."""

    dialect: str
    lines_read: int = 0
    calls: int = 0  # script executions and top-level commands
    events: int = 0  # history events written
    unreadable_lines: int = 0  # lines that did not parse as MONITOR output
    undecoded_calls: int = 0  # calls on the queue's keys the dialect could not decode
    undecoded_examples: list[str] = field(default_factory=list)
    empty_claims: int = 0
    unscripted_writes: int = 0  # writes to the queue's keys outside any script
    unattributed_calls: int = 0  # callers CLIENT LIST no longer knew
    # calls whose worker argument names another member than the connection that made them
    misnamed_calls: int = 0
    misnamed_examples: list[str] = field(default_factory=list)
    calls_not_run: int = 0  # script calls that ran nothing (NOSCRIPT ...): no event
    toolkit_calls: int = 0  # the toolkit's own scripts (the exporter's trim): no transition
    # calls before the run's run event or after its end phase (a windowed recorder on a
    # deployment that runs on around the run): not this run's history, judged by no one
    outside_window: int = 0
    connection_lost: str = ""  # why the feed broke for good, if it did
    # Each time the feed broke and resumed: start_us, end_us (server clock), reason, verified
    # (no write missed), differences (the first few), missed_writes, runner_events_recovered.
    gaps: list[dict[str, Any]] = field(default_factory=list)
    caught_up: bool = False  # the end marker was read: every line before it was decoded
    lag_ms_at_end: float | None = None  # from sending the end marker to reading it
    max_lag_ms: float = 0.0  # server stamp of a line vs. when it was decoded, at worst

    @property
    def trustworthy(self) -> bool:
        return (self.caught_up and not self.connection_lost and not self.unreadable_lines
                and not self.undecoded_calls and not self.unverified_gaps())

    def unverified_gaps(self) -> list[dict[str, Any]]:
        return [gap for gap in self.gaps if not gap.get("verified")]

    def problems(self, gaps: bool = True) -> list[str]:
        """Why this history is not whole evidence (``gaps``: count unverified gaps too)."""
        found = []
        if self.connection_lost:
            found.append(f"the MONITOR connection broke ({self.connection_lost})")
        if not self.caught_up:
            found.append("the recorder never read the end marker (it fell behind or lost "
                         "lines)")
        if self.unreadable_lines:
            found.append(f"{self.unreadable_lines} unreadable MONITOR lines")
        if self.undecoded_calls:
            found.append(f"{self.undecoded_calls} calls on the queue's keys not decoded")
        if self.misnamed_calls:
            found.append(f"{self.misnamed_calls} calls named another worker than the "
                         "connection that made them (the holder is taken from the "
                         "connection), e.g. " + "; ".join(self.misnamed_examples[:2]))
        for gap in self.unverified_gaps() if gaps else ():
            found.append(
                f"the recorder could not see the server from {gap['start_us']} to "
                f"{gap['end_us']} µs (server clock; {gap['reason']}) and cannot tell that "
                f"nothing was written then: " + "; ".join(gap.get("differences", [])[:3]))
        return found

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "trustworthy": self.trustworthy}

    @classmethod
    def read(cls, run_dir: Path) -> RecorderHealth | None:
        path = run_dir / HEALTH_FILE
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        saved.pop("trustworthy", None)
        return cls(**saved)


class HistoryWriter:
    """Turns calls into history lines: seq in feed order, the caller's connection as ``conn``."""

    def __init__(self, dialect: Dialect, handle: IO[str], health: RecorderHealth,
                 resolve: Any = None, members: frozenset[str] = frozenset(),
                 renamed: Any = None, windowed: bool = False) -> None:
        self.dialect = dialect
        # windowed: the history is the run's own window of the feed, from its run event to its
        # end phase; else every call (a capture decoded whole)
        self.window = "before" if windowed else "open"
        self.handle = handle
        self.health = health
        self.resolve = resolve  # address -> connection name, or None
        self.renamed = renamed or (lambda address: None)  # a connection named itself anew
        self.members = members  # the run's workers and reapers: whom a connection can be
        self.last_ms = 0
        self.counter = 0
        # A dialect whose transitions are plain commands (no script) names every call's
        # connection before decoding it: its holders are the connections that sent them.
        self.names_every_caller = bool(getattr(dialect, "names_every_caller", False))
        # A dialect that reads some plain commands as transitions of their caller's (EchoMQ.Locks'
        # markers) says which: those are named too.
        self.names_caller = getattr(dialect, "names_caller", None)
        # Each member's first queue action (chaos.history.readiness): when it started working.
        self.first_actions = FirstActions(getattr(dialect, "ready_action", None))

    def write(self, call: Call) -> None:
        health = self.health
        health.calls += 1
        if toolkit_script(call):
            health.toolkit_calls += 1
            return
        command = call.args[0].upper()
        if command == "CLIENT" and len(call.args) > 1 and call.args[1].upper() == "SETNAME":
            self.renamed(call.client)  # resolved anew at its next call
        elif self.names_every_caller or command.startswith("EVAL") \
                or command.startswith("FCALL") or (
                    self.names_caller is not None and self.names_caller(call.args)):
            # the caller, for a dialect that takes a transition's holder from its connection
            call.conn = self.resolve(call.client) if self.resolve else ""
        decoded = self.dialect.decode(call)
        if self.window != "open" and not self._opens_window(decoded.events):
            health.outside_window += 1
            return
        if self.resolve is not None:
            self.first_actions.note(call, decoded, self.resolve, self.members)
        stamp_ms = call.stamp_us // 1000
        health.calls_not_run += decoded.not_run
        if decoded.undecoded:
            health.undecoded_calls += 1
            if len(health.undecoded_examples) < 5:
                health.undecoded_examples.append(" ".join(call.args)[:200])
            named = getattr(self.dialect, "jobs_named", None)
            self.blind(TRANSITION_EVIDENCE, "undecoded call",
                       named(call) if named is not None else None, stamp_ms)
        health.empty_claims += decoded.empty_claim
        health.unscripted_writes += decoded.unscripted_write
        if not decoded.events:
            return
        conn = call.conn if call.conn or not self.resolve else self.resolve(call.client)
        if conn is None:
            health.unattributed_calls += 1
            # (a sweep alone names no job: the checker blinds the reapers' gaps it falls in)
            if decoded.holder_from_connection and any(
                    event["type"] != Sweep.TYPE for event in decoded.events):
                # before the events: the checker meets the blind spot first
                self.blind(HOLDER_EVIDENCE, "unattributed call", [
                    event["id"] for event in decoded.events
                    if event.get("type") in CLIENT_CALLS and event.get("id")], stamp_ms)
        if conn in self.members:
            self._vet_names(decoded.events, conn)
        for event in decoded.events:
            self._emit(stamp_ms, event, conn)
            if self.window == "open" and event["type"] == Phase.TYPE and \
                    event.get("phase") == "end":
                self.window = "closed"

    def _opens_window(self, events: list[dict[str, str]]) -> bool:
        """Before the window: a call recording the run event opens it (from that event on)."""
        if self.window == "before":
            for index, event in enumerate(events):
                if event["type"] == Run.TYPE:
                    del events[:index]
                    self.window = "open"
                    return True
        return False

    def _vet_names(self, events: list[dict[str, str]], member: str) -> None:
        """A worker argument that names another member than the connection's is not trusted:
        the holder is the connection (the argument is kept as ``named``), and it is counted."""
        for event in events:
            named = event.get("worker")
            if event.get("type") in CLIENT_CALLS and named and named != member:
                self.health.misnamed_calls += 1
                if len(self.health.misnamed_examples) < 5:
                    self.health.misnamed_examples.append(
                        f"{event['type']} {event.get('id')} named {named!r} by {member!r}")
                event["named"], event["worker"] = named, member

    def blind(self, lacks: str, why: str, jobs: list[str] | None, stamp_ms: int) -> None:
        """Evidence the history lacks from ``stamp_ms`` on: for each of ``jobs``, or for every
        job when it names none (``chaos.check.evidence``)."""
        targets: list[str | None] = list(jobs) if jobs else [None]
        for job_id in targets:
            fields = {name: str(value) for name, value
                      in Blind(lacks, why, job_id).fields().items()}
            self._emit(stamp_ms, {**fields, "ts": str(stamp_ms)}, "")

    def write_recovered(self, events: list[dict[str, str]]) -> None:
        """Runner events of a gap, read back from the stream: in order, at their own ``ts``."""
        for event in events:
            self._emit(int(event.get("ts") or 0), event, "")

    def _emit(self, stamp_ms: int, event: dict[str, str], conn: str | None) -> None:
        millis = max(stamp_ms, self.last_ms)
        self.counter = self.counter + 1 if millis == self.last_ms else 0
        self.last_ms = millis
        record = {"seq": f"{millis}-{self.counter}", **event}
        if conn and event["type"] != "run":
            record["conn"] = conn
        self.handle.write(_json_line(record))
        self.health.events += 1


def _json_line(record: dict[str, str]) -> str:
    """``json.dumps(record, separators=(",", ":"))`` and a newline, byte for byte, by orjson
    where that is the same: an ASCII line without DEL (orjson writes other characters as they
    are, json escapes them)."""
    try:
        data = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # e.g. a lone surrogate, which json escapes
        data = b"\x7f"
    if data.isascii() and b"\x7f" not in data:
        return data.decode("ascii")
    return json.dumps(record, separators=(",", ":")) + "\n"


def member_of(name: str, members: frozenset[str]) -> str | None:
    """The member a connection's name (ACL user or client name) says it is: the name itself,
    or the longest member it starts with followed by "-" (``worker-1-heartbeat``)."""
    if name in members:
        return name
    prefixes = [member for member in members if name.startswith(member + "-")]
    return max(prefixes, key=len) if prefixes else None


def decode_lines(lines: list[str], writer: HistoryWriter) -> None:
    """Feed a whole capture of MONITOR lines to ``writer``, one call at a time."""
    last = _Grouper(writer).feed(lines, None)
    if last is not None:
        writer.write(last)


class _Grouper:
    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self.last_stamp_us = 0  # of the last command line read
        self.decoded_us = 0  # of the last call line read: every call before it is decoded

    def feed(self, lines: list[str], open_call: Call | None) -> Call | None:
        health = self.writer.health
        health.lines_read += len(lines)
        for line in lines:
            parsed = parse_line(line)
            if parsed is None:
                if line not in ("+OK", ""):
                    health.unreadable_lines += 1
                    self.writer.blind(TRANSITION_EVIDENCE, "unreadable MONITOR line", None,
                                      self.last_stamp_us // 1000)
                continue
            stamp, client, args = parsed
            self.last_stamp_us = stamp
            if client == "lua":
                if open_call is None:
                    health.unreadable_lines += 1  # a script's command with no call line
                    self.writer.blind(TRANSITION_EVIDENCE, "unreadable MONITOR line", None,
                                      stamp // 1000)
                else:
                    open_call.commands.append((stamp, args))
                continue
            if open_call is not None:
                self.writer.write(open_call)
            open_call = Call(stamp, client, args)
            self.decoded_us = stamp
        return open_call


class MonitorRecorder:
    """Records ``history-monitor.jsonl`` from MONITOR in a background thread (``start`` ..
    ``stop``). ``host``/``port``/``username``/``password``: the server's, as the run's own
    client has them. ``windowed``: only the run's own window of the feed, from its run event to
    its end phase (a store reused by run after run, as an attached deployment is)."""

    def __init__(self, dialect: Dialect, path: Path, host: str, port: int,
                 password: str | None, username: str | None = None,
                 members: list[str] | None = None,
                 socket_owner: Callable[[str], str | None] | None = None,
                 line_buffered: bool = False, windowed: bool = False) -> None:
        self.dialect = dialect
        self.path = path
        self.address = (host, port)
        self.auth = [a for a in (username, password) if a]
        self.health = RecorderHealth(dialect.name)
        self.names: dict[str, str] = {}  # caller address -> member (or connection name)
        self._unnamed_checked: dict[str, float] = {}  # unnamed address -> when looked again
        # The run's processes: a connection is the member its ACL user or client name is, or
        # starts with followed by "-" (the reference worker's ``worker-1-heartbeat``).
        self.members = frozenset(members or ())
        # A connection with neither a user of its own nor a name: the member whose process
        # holds its socket, when the runtime can tell (chaos.runtime.sockets).
        self.socket_owner = socket_owner
        # line_buffered: each history line is on disk as it is written, for a reader following
        # the file as the run goes on (capacity); else block-buffered (read once, at the end)
        self._handle = open(path, "w", encoding="utf-8",  # noqa: SIM115 - closed in stop()
                            buffering=1 if line_buffered else -1)
        self._writer = HistoryWriter(dialect, self._handle, self.health, self._resolve,
                                     self.members, lambda address: self.names.pop(address, None),
                                     windowed=windowed)
        self._grouper = _Grouper(self._writer)
        self._sock: socket.socket | None = None
        self._lister: socket.socket | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._marker_sent = 0.0
        self._lister_lock = threading.Lock()  # the reader resolves names, stop() sends a marker

    @property
    def first_actions(self) -> FirstActions:
        """Each member's first queue action so far (the runner waits for them)."""
        return self._writer.first_actions

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=5)
        if self.auth:
            sock.sendall(resp_command("AUTH", *self.auth))
            if not _read_reply(sock).startswith("+OK"):
                sock.close()
                raise OSError("MONITOR connection: AUTH refused")
        return sock

    def start(self) -> None:
        self._sock, _, _ = self._open_feed(None)
        self._lister = self._connect()
        self._thread.start()

    def _open_feed(self, since_ms: int | None) -> tuple[socket.socket, int, Any]:
        """A connection in MONITOR mode; with ``since_ms`` (resuming after a gap) the dialect's
        gap snapshot and TIME run on it just before MONITOR, nothing in between. Returns the
        socket, the server's TIME (µs) and the snapshot's reply (None without one)."""
        snapshot = getattr(self.dialect, "gap_snapshot", None)
        pipeline = [resp_command("AUTH", *self.auth)] if self.auth else []
        with_snapshot = since_ms is not None and snapshot is not None
        if with_snapshot:
            assert snapshot is not None and since_ms is not None
            script, keys, argv = snapshot(since_ms)
            pipeline.append(resp_command("EVAL", script, str(len(keys)), *keys, *argv))
        pipeline += [resp_command("TIME"), resp_command("MONITOR")]
        sock = socket.create_connection(self.address, timeout=5)
        try:
            sock.sendall(b"".join(pipeline))
            replies = [_read_value(sock) for _ in pipeline]
            refused = [reply for reply in replies if isinstance(reply, _Refused)]
            if refused:
                raise OSError(f"MONITOR connection refused: {refused[0]}")
        except OSError:
            sock.close()
            raise
        seconds, micros = replies[-2]
        sock.settimeout(0.2)
        return (sock, int(seconds) * 1_000_000 + int(micros),
                replies[-3] if with_snapshot else None)

    def _resolve(self, address: str) -> str | None:
        name = self.names.get(address)
        if name is not None and name.startswith(_UNNAMED) and self.members:
            # Known only by its id when last listed: perhaps listed before it logged in (or
            # its address was another, short-lived connection's): look again, at most every
            # UNNAMED_RECHECK_S for one address (the runner's own connections stay unnamed).
            now = time.monotonic()
            if now - self._unnamed_checked.get(address, 0.0) >= UNNAMED_RECHECK_S:
                self._unnamed_checked[address] = now
                name = None
        if name is None:
            try:
                self._refresh_names()
            except OSError:
                return None
            name = self.names.get(address)
            if name is not None and name.startswith(_UNNAMED) and self.socket_owner:
                owner = self.socket_owner(address)
                if owner is not None:
                    name = self.names[address] = owner
        return name

    def _refresh_names(self) -> None:
        assert self._lister is not None
        with self._lister_lock:
            self._lister.sendall(resp_command("CLIENT", "LIST"))
            listing = _read_reply(self._lister)
        for entry in listing.splitlines():
            fields = dict(part.split("=", 1) for part in entry.split(" ") if "=" in part)
            user = fields.get("user", "default")
            name = user if user != "default" else fields.get("name", "")
            self.names[fields.get("addr", "")] = (member_of(name, self.members) or name
                                                  or f"{_UNNAMED}{fields.get('id', '?')}")

    def _loop(self) -> None:
        grouper = self._grouper
        buffer, open_call = b"", None
        while True:
            assert self._sock is not None
            lost = "the server closed it"
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                if self._stopping.is_set() and time.monotonic() - self._marker_sent > 30:
                    break  # never caught up: health.caught_up stays False
                continue
            except OSError as error:
                chunk, lost = b"", str(error) or type(error).__name__
            if not chunk:
                # What was read is decoded (a call cut short by the break leaves its writes
                # unapplied: the gap check then finds them); a torn last line is the gap's.
                if open_call is not None:
                    self._writer.write(open_call)
                buffer, open_call = b"", None
                if self._stopping.is_set() or not self._resume(lost):
                    self.health.connection_lost = self.health.connection_lost or lost
                    break
                continue
            buffer += chunk
            cut = buffer.rfind(b"\r\n")
            if cut < 0:
                continue
            text = buffer[:cut].decode("utf-8", "replace")
            lines = text.split("\r\n")
            buffer = buffer[cut + 2:]
            end = next((i for i, line in enumerate(lines) if _END_MARKER in line), None) \
                if _END_MARKER in text else None  # (one search of the chunk, not one a line)
            if end is not None:
                lines = lines[:end]
            open_call = grouper.feed(lines, open_call)
            if lines and (parsed := parse_line(lines[-1])) is not None:
                lag = time.time() * 1000 - parsed[0] / 1000
                self.health.max_lag_ms = max(self.health.max_lag_ms, round(lag, 3))
            if end is not None:
                self.health.caught_up = True
                self.health.lag_ms_at_end = round(
                    (time.monotonic() - self._marker_sent) * 1000, 3)
                break
        if open_call is not None:
            self._writer.write(open_call)

    def _resume(self, reason: str) -> bool:
        """Reconnect (bounded) and record the gap; False when the server never came back."""
        since_us = self._grouper.last_stamp_us
        deadline, attempts = time.monotonic() + RECONNECT_TIMEOUT_S, 0
        while not self._stopping.is_set():
            attempts += 1
            try:
                sock, resumed_us, snapshot = self._open_feed(since_us // 1000)
                lister = self._connect()
            except OSError:
                if time.monotonic() > deadline:
                    self.health.connection_lost = (
                        f"{reason}; the server did not take MONITOR again within "
                        f"{RECONNECT_TIMEOUT_S:.0f} s ({attempts} attempts)")
                    return False
                time.sleep(RECONNECT_PAUSE_S)
                continue
            with self._lister_lock:
                for old in (self._sock, self._lister):
                    if old is not None:
                        old.close()
                self._sock, self._lister = sock, lister
            self.names.clear()  # every client reconnected: an address may name another now
            self._record_gap(since_us, resumed_us, reason, attempts, snapshot)
            return True
        return False

    def _record_gap(self, since_us: int, resumed_us: int, reason: str, attempts: int,
                    snapshot: Any) -> None:
        gap: dict[str, Any] = {"start_us": since_us, "end_us": resumed_us, "reason": reason,
                               "reconnect_attempts": attempts}
        differences = getattr(self.dialect, "gap_differences", None)
        if snapshot is None or differences is None:
            gap.update(verified=False, missed_writes=None, runner_events_recovered=0,
                       differences=[f"the {self.dialect.name} dialect cannot check a gap"])
            self._writer.blind(TRANSITION_EVIDENCE, "recorder gap", None, since_us // 1000)
        else:
            found, recovered = differences(snapshot, since_us // 1000)
            if found:  # the jobs whose writes it missed (any job, when it cannot name them)
                self._writer.blind(TRANSITION_EVIDENCE, "recorder gap", getattr(
                    self.dialect, "gap_jobs", None), since_us // 1000)
            self._writer.write_recovered(recovered)
            gap.update(verified=not found, missed_writes=len(found),
                       runner_events_recovered=len(recovered), differences=found[:5])
        self.health.gaps.append(gap)

    def read_through(self, stamp_us: int, timeout_s: float = 0.25) -> bool:
        """Wait (at most ``timeout_s``) until the feed has been read up to a command the server
        ran at ``stamp_us`` (its clock, µs) or later: every call before it is then decoded, so
        the dialect shows the queue as of that instant (the nemesis asks it who holds a lease,
        and a lagging feed names a holder that has acked its last job meanwhile). The caller
        sends a command after reading the clock, so there is one. False when it had not by
        then: the caller reads what there is."""
        deadline = time.monotonic() + timeout_s
        while self._grouper.decoded_us < stamp_us:
            if time.monotonic() >= deadline or not self._thread.is_alive():
                return False
            time.sleep(0.001)
        return True

    def stop(self) -> RecorderHealth:
        """Read up to an end marker sent now (so every command before it is decoded), then
        close. The health says whether that worked and how far behind the recorder was."""
        if self._thread.is_alive() and self._lister is not None:
            self._marker_sent = time.monotonic()
            self._stopping.set()
            try:
                with self._lister_lock:
                    self._lister.sendall(resp_command("ECHO", _END_MARKER))
                    _read_reply(self._lister)
            except OSError as error:
                self.health.connection_lost = self.health.connection_lost or str(error)
            self._thread.join(timeout=35)
        if self.health.connection_lost or not self.health.caught_up:
            # what came after the last line read is unseen, for every job
            self._writer.blind(TRANSITION_EVIDENCE, "the MONITOR connection broke"
                               if self.health.connection_lost else "the recorder fell behind",
                               None, self._grouper.last_stamp_us // 1000)
        for sock in (self._sock, self._lister):
            if sock is not None:
                sock.close()
        self._handle.close()
        return self.health


def resp_command(*args: str) -> bytes:
    """A command as a client sends it (RESP array of bulk strings)."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Refused(str):
    """An error reply (-ERR ..., -LOADING ...)."""


def _read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(1)  # one byte at a time: never read past the reply
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data[:-2].decode()


def _read_reply(sock: socket.socket) -> str:
    """One reply: a status or error line (+OK, -ERR ...), or a bulk string's data."""
    line = _read_line(sock)
    if line.startswith("$"):
        length = int(line[1:])
        return _read_exactly(sock, length + 2)[:-2].decode() if length >= 0 else ""
    return line


def _read_value(sock: socket.socket) -> Any:
    """One RESP2 reply, arrays nested: str, int, None, list, or ``_Refused``."""
    line = _read_line(sock)
    kind, rest = line[:1], line[1:]
    if kind == "+":
        return rest
    if kind == "-":
        return _Refused(rest)
    if kind == ":":
        return int(rest)
    if kind == "$":
        length = int(rest)
        return _read_exactly(sock, length + 2)[:-2].decode("utf-8", "replace") \
            if length >= 0 else None
    if kind == "*":
        length = int(rest)
        return [_read_value(sock) for _ in range(length)] if length >= 0 else None
    raise OSError(f"unexpected reply {line[:40]!r}")


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def callers_of(host: str, port: int, username: str | None, password: str | None,
               key_base: str, duration_s: float) -> dict[str, str]:
    """Who uses a queue: watch MONITOR for ``duration_s`` and return the address of every
    connection that ran a command naming a key that starts with ``key_base``, itself or through
    a script it called (address -> that command, shortened). Before an attached run starts
    (docs/attach.md): a consumer the scenario does not name would be unattributed evidence."""
    found: dict[str, str] = {}
    if duration_s <= 0:
        return found
    sock = socket.create_connection((host, port), timeout=5)
    try:
        auth = [a for a in (username, password) if a]
        pipeline = ([resp_command("AUTH", *auth)] if auth else []) + [resp_command("MONITOR")]
        sock.sendall(b"".join(pipeline))
        for _ in pipeline:
            reply = _read_value(sock)
            if isinstance(reply, _Refused):
                raise OSError(f"MONITOR refused: {reply}")
        deadline = time.monotonic() + duration_s
        buffer, caller = b"", ""
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(min(0.2, left))
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not chunk:
                raise OSError("the server closed the MONITOR connection")
            buffer += chunk
            cut = buffer.rfind(b"\r\n")
            if cut < 0:
                continue
            lines = buffer[:cut].decode("utf-8", "replace").split("\r\n")
            buffer = buffer[cut + 2:]
            for line in lines:
                parsed = parse_line(line)
                if parsed is None:
                    continue
                _, client, args = parsed
                if client != "lua":
                    caller = client
                if any(arg.startswith(key_base) for arg in args[1:]) and caller not in found:
                    found[caller] = " ".join(args)[:120]
    finally:
        sock.close()
    return found
