"""The ``celery`` dialect: Celery 5 workers on kombu's Redis transport (kombu 5.7), decoded
from MONITOR by what their commands do (docs/celery.md). kombu runs no Lua of its own: every
transition is plain commands, most in a MULTI/EXEC transaction, so a call here is one command
line, and a transaction is decoded whole at its EXEC from the lines its connection sent since
MULTI. Keys (``P`` the transport's ``global_keyprefix``, the scenario's prefix):

    P<queue>, P<queue>\\x06\\x16<n>   the queue's lists (one per priority step): a message is the
                                    JSON envelope, the task id in its ``headers.id``
    Punacked                        hash, delivery tag -> [message, exchange, routing key]
    Punacked_index                  zset, delivery tag -> when it was delivered (client clock, s)
    Punacked_mutex                  the restore lock (redis-py's Lock: SET NX PX, released by a
                                    script that DELs it when it still holds the lock's token)

What each command does, as MONITOR shows it (never its reply):

    enqueue    LPUSH <queue list> <message>                       (Celery's send_task)
    claim      MULTI ZADD unacked_index <t> <tag>, HSET unacked <tag> <message> EXEC: the
               message a BRPOP took (its reply is unseen) reserved by the worker; the lease
               runs from t (kombu's own stamp, the claim's ts) to t + visibility_timeout
               (``lease_ms``), the attempt is the dialect's count
               of the task's claims, the holder the connection
    complete   MULTI ZREM unacked_index <tag>, HDEL unacked <tag> EXEC (the late ack): accepted
               whatever it removes (kombu has no fencing token): for the attempt its worker
               claimed last, so an ack of a worker whose reservation was restored and reserved
               again by another is a stale complete, and it removes that other reservation
    sweep      SET unacked_mutex <token> NX PX <ms>: a worker's restore_visible; ``ran`` by the
               shadow of the mutex (held by a SET not yet released or expired: turned away)
    reap       MULTI [ZREM unacked_index <tag>,] HDEL unacked <tag>, RPUSH|LPUSH <queue list>
               <message> EXEC by a worker holding the mutex (restore_by_tag inside a sweep), or
               by another worker than the holder
    retry      the same restore by the reservation's own holder outside a sweep (a warm
               shutdown's restore_unacked, a reject with requeue): handed back, ``to = wait``
    (nothing)  WATCH unacked, HGET unacked <tag>, MULTI ZREM unacked_index <tag>, HDEL unacked
               <tag> EXEC with no push: a restore whose HGET found the message gone (acked or
               restored by another already: a warm shutdown's restore of a task another worker
               ran). Told from an ack by the WATCH and the HGET of that tag its connection
               sent first (kombu's restores are redis-py transactions, WATCH then HGET then
               MULTI; an ack is a bare MULTI/EXEC): it changes no job, so no event (undecoded
               when the shadow still holds that reservation: the HGET would have found it)

Reads (BRPOP, LLEN, ZRANGE, HGET, WATCH) and kombu's bindings (SADD _kombu.binding.*) change no
job. Any other write to the queue's lists or the unacked keys makes the call undecoded. Runner
events (run, phase, fault, ...) are the echomq ``record`` script's calls, decoded by the
``echomq`` dialect.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from chaos.history.dialects import Call, Decoded
from chaos.history.dialects.echomq import SCRIPTS, EchoMQ

PRIORITY_SEP = "\x06\x16"  # kombu's separator between a queue and its priority step
_READS = frozenset(("BRPOP", "LLEN", "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "HGET",
                    "HGETALL", "HLEN", "ZCARD", "WATCH", "UNWATCH", "LRANGE", "EXISTS", "TYPE",
                    "PTTL", "TTL", "ZSCORE", "HKEYS", "GET"))


@dataclass(slots=True)
class _Reservation:
    job_id: str
    attempt: int
    worker: str
    deadline: int


@dataclass(slots=True)
class _Mutex:
    token: str = ""
    holder: str = ""  # the worker whose sweep holds it
    expires_us: int = 0  # server clock: SET's stamp + PX


@dataclass(slots=True)
class _Transaction:
    commands: list[tuple[int, list[str]]] = field(default_factory=list)
    # The tags its connection read (HGET unacked <tag>) under a WATCH of unacked before MULTI:
    # a restore of each (restore_by_tag, Channel._restore), never an ack
    restoring: frozenset[str] = frozenset()


def message_task(message: Any) -> tuple[str, bool]:
    """(task id, poison) of a kombu envelope: the id from its headers, poison when the task's
    first argument (the contract's payload) says ``"crash": true``."""
    headers = message.get("headers") or {}
    task_id = str(headers.get("id") or "")
    poison = False
    try:
        body = json.loads(base64.b64decode(message.get("body", "")))
        payload = body[0][0] if body and body[0] else ""
        poison = isinstance(payload, str) and '"crash":true' in payload.replace(" ", "")
    except (ValueError, TypeError, IndexError, KeyError):
        pass
    return task_id, poison


class Celery:
    name = "celery"
    # Its holders are the connections that sent plain commands: the recorder names every call.
    names_every_caller = True

    def __init__(self, prefix: str, queue: str, lease_ms: int | None) -> None:
        self.prefix = prefix
        self.queue_key = prefix + queue
        self.unacked = prefix + "unacked"
        self.index = prefix + "unacked_index"
        self.mutex_key = prefix + "unacked_mutex"
        self.lease_ms = lease_ms or 0
        self.runner = EchoMQ(prefix, queue)  # the runner's own events (record.lua)
        # The shadow: what replies would have told.
        self.tags: dict[str, str] = {}  # delivery tag -> task id
        self.reserved: dict[str, _Reservation] = {}  # delivery tag -> its live reservation
        self.attempts: dict[str, int] = {}  # task id -> claims seen
        self.claimed_by: dict[tuple[str, str], int] = {}  # (task id, worker) -> its last attempt
        self.stalls: dict[str, int] = {}  # task id -> times restored
        self.mutex = _Mutex()
        self.open: dict[str, _Transaction] = {}  # client address -> its MULTI so far
        # client address -> the tags it read since its WATCH of unacked (one still open)
        self.watching: dict[str, set[str]] = {}

    # --- keys ---------------------------------------------------------------------------
    def _is_queue(self, key: str) -> bool:
        return key == self.queue_key or key.startswith(self.queue_key + PRIORITY_SEP)

    def _ours(self, key: str) -> bool:
        return self._is_queue(key) or key in (self.unacked, self.index, self.mutex_key)

    def ready_action(self, call: Call, decoded: Decoded) -> str | None:
        """A worker is at work at its loop's first BRPOP on the queue's list
        (chaos.history.readiness), not at its first restore: with mingle on (Celery's default) a
        worker restores once while mingle waits a second for its peers' replies, before its loop
        runs, and a BRPOP on mingle's reply queue is no work on this queue either."""
        args = call.args
        if args and args[0].upper() == "BRPOP" and any(self._is_queue(key) for key in args[1:-1]):
            return f"BRPOP {self.queue_key}"
        return None

    def jobs_named(self, call: Call) -> list[str]:
        named: dict[str, None] = {}
        commands = [args for _, args in self.open.get(call.client, _Transaction()).commands]
        for args in [call.args, *commands]:
            for arg in args[1:]:
                job_id = self.tags.get(arg)
                if job_id:
                    named[job_id] = None
        return list(named)

    def lease_holders_oldest_first(self, now_ms: int, limit: int = 100) -> list[str]:
        """The holders of the ``limit`` earliest-deadline reservations the feed shows (live or
        lapsed but not yet restored: kombu's lease ends only at a restore), oldest first.
        Called from another thread than the recorder's: it reads a copy."""
        reservations = sorted(dict(self.reserved).values(), key=lambda held: held.deadline)
        return [held.worker for held in reservations[:limit] if held.worker]

    # --- decoding -----------------------------------------------------------------------
    def decode(self, call: Call) -> Decoded:
        args = call.args
        command = args[0].upper()
        if command.startswith("EVAL"):
            return self._script(call)
        if command == "MULTI":
            self.open[call.client] = _Transaction(
                restoring=frozenset(self.watching.get(call.client, ())))
            return Decoded([])
        if command in ("EXEC", "DISCARD", "UNWATCH"):  # each ends its connection's WATCH
            self.watching.pop(call.client, None)
        if command == "EXEC":
            transaction = self.open.pop(call.client, None)
            if transaction is None or not transaction.commands:  # (a WATCH's abort, too)
                return Decoded([])
            return self._decode(transaction.commands, call, transaction.restoring)
        if command == "DISCARD":
            self.open.pop(call.client, None)
            return Decoded([])
        transaction = self.open.get(call.client)
        if transaction is not None and command != "WATCH":
            transaction.commands.append((call.stamp_us, args))  # applied at EXEC
            return Decoded([])
        if command == "WATCH" and self.unacked in args[1:]:
            self.watching[call.client] = set()  # kombu's restore_by_tag / Channel._restore
        elif command == "HGET" and args[1:2] == [self.unacked] and len(args) == 3 \
                and call.client in self.watching:
            self.watching[call.client].add(args[2])  # the message it is about to put back
        return self._decode([(call.stamp_us, args)], call)

    def _script(self, call: Call) -> Decoded:
        args = call.args
        if args[0].upper().startswith("EVALSHA") and len(args) > 1 \
                and args[1].lower() in SCRIPTS:
            return self.runner.decode(call)
        keys = args[3:3 + int(args[2])] if len(args) > 2 and args[2].isdigit() else []
        if self.mutex_key in keys:
            # redis-py's Lock.release: GET the lock, DEL it when it still holds the token
            if any(sub[0].upper() == "DEL" and sub[1:2] == [self.mutex_key]
                   for _, sub in call.commands):
                self.mutex = _Mutex()
            return Decoded([])
        if any(self._ours(key) for key in keys) or any(
                len(sub) > 1 and self._ours(sub[1]) and sub[0].upper() not in _READS
                for _, sub in call.commands):
            return Decoded([], undecoded=True)  # a script of someone else's on kombu's keys
        return self.runner.decode(call) if args[0].upper().startswith("EVAL") \
            else Decoded([])

    def _decode(self, commands: list[tuple[int, list[str]]], call: Call,
                watched: frozenset[str] = frozenset()) -> Decoded:
        worker = call.conn or ""
        events: list[dict[str, str]] = []
        undecoded = False
        reserving: dict[str, tuple[int, str]] = {}  # tag -> (stamp µs, score) from ZADD
        stored: dict[str, str] = {}  # tag -> the message HSET stored
        removed: dict[str, int] = {}  # tag -> stamp µs of its HDEL
        pushed: list[tuple[int, str, str]] = []  # (stamp µs, command, message)
        for stamp, args in commands:
            name = args[0].upper()
            key = args[1] if len(args) > 1 else ""
            if not self._ours(key) or name in _READS:
                continue
            if key == self.mutex_key:
                if name == "SET":
                    events.append(self._sweep(stamp, args, worker))
                else:
                    undecoded = True
            elif self._is_queue(key) and name in ("LPUSH", "RPUSH"):
                pushed.extend((stamp, name, message) for message in args[2:])
            elif key == self.index and name == "ZADD" and len(args) == 4:
                reserving[args[3]] = (stamp, args[2])
            elif key == self.index and name == "ZREM":
                continue  # the HDEL beside it says what the transaction does
            elif key == self.unacked and name == "HSET" and len(args) == 4:
                stored[args[2]] = args[3]
            elif key == self.unacked and name == "HDEL":
                removed.update((tag, stamp) for tag in args[2:])
            else:
                undecoded = True
        try:
            for tag, message in stored.items():
                if tag not in reserving:
                    undecoded = True
                    continue
                stamp, score = reserving.pop(tag)
                events.append(self._claim(tag, message, stamp, score, worker))
            if reserving:  # an index entry without its message
                undecoded = True
            restoring = bool(removed) and bool(pushed)
            for tag, stamp in removed.items():
                event: dict[str, str] | None
                if tag in watched and not pushed:  # a restore that found nothing to put back
                    event = None if tag in self.reserved else {}
                else:
                    event = self._restore(tag, stamp, worker) if restoring \
                        else self._ack(tag, stamp, worker)
                if event is None:
                    undecoded = True
                elif event:
                    events.append(event)
            if not restoring:
                for stamp, _, message in pushed:
                    events.append(self._enqueue(message, stamp))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return Decoded(events, undecoded=True)
        return Decoded(events, undecoded=undecoded, holder_from_connection=True)

    # --- transitions --------------------------------------------------------------------
    def _sweep(self, stamp: int, args: list[str], worker: str) -> dict[str, str]:
        """A restore_visible's try for the mutex: it runs when the shadow's mutex is free (no
        SET since the last release, or that SET's PX past), else it is turned away."""
        options = [arg.upper() for arg in args[3:]]
        px = int(args[options.index("PX") + 4]) if "PX" in options else 0
        event = {"type": "sweep", "worker": worker, "ts": str(stamp // 1000)}
        if self.mutex.token and stamp < self.mutex.expires_us:
            event["ran"] = "0"
        else:
            self.mutex = _Mutex(args[2], worker, stamp + px * 1000)
        return event

    def _enqueue(self, raw: str, stamp: int) -> dict[str, str]:
        task_id, poison = message_task(json.loads(raw))
        if not task_id:
            raise ValueError("a message without a task id")
        event = {"type": "enqueue", "id": task_id, "ts": str(stamp // 1000)}
        if poison:
            event["kind"] = "poison"
        return event

    def _claim(self, tag: str, raw: str, stamp: int, score: str,
               worker: str) -> dict[str, str]:
        stored = json.loads(raw)
        task_id, _ = message_task(stored[0])
        if not task_id:
            raise ValueError("a reserved message without a task id")
        attempt = self.attempts[task_id] = self.attempts.get(task_id, 0) + 1
        # kombu's lease starts at its own stamp, the score (the worker's time() once the BRPOP
        # returned; the server's clock on one machine), a few ms before the server runs the
        # EXEC: its restore goes by score + visibility_timeout, so the claim's ts is the score
        started = round(float(score) * 1000)
        deadline = started + self.lease_ms
        self.tags[tag] = task_id
        self.reserved[tag] = _Reservation(task_id, attempt, worker, deadline)
        self.claimed_by[(task_id, worker)] = attempt
        return {"type": "claim", "id": task_id, "attempt": str(attempt), "worker": worker,
                "lease_ms": str(self.lease_ms), "deadline": str(deadline),
                "ts": str(min(started, stamp // 1000))}

    def _ack(self, tag: str, stamp: int, worker: str) -> dict[str, str] | None:
        """A late ack: accepted, for the attempt its worker claimed last; whatever reservation
        the tag had (another worker's, after a restore) is gone with it."""
        task_id = self.tags.get(tag)
        if task_id is None:
            return None
        attempt = self.claimed_by.get((task_id, worker))
        if attempt is None:
            # removing what is no longer there changes nothing; a live one is no ack of this
            # worker
            return {} if tag not in self.reserved else None
        self.reserved.pop(tag, None)
        return {"type": "complete", "id": task_id, "attempt": str(attempt), "worker": worker,
                "ts": str(stamp // 1000)}

    def _restore(self, tag: str, stamp: int, worker: str) -> dict[str, str] | None:
        """A reservation put back on the queue: a reap inside a sweep (or by another worker
        than its holder), a retry by its own holder otherwise."""
        task_id = self.tags.get(tag)
        held = self.reserved.pop(tag, None)
        if task_id is None or held is None:
            return None
        sweeping = self.mutex.token and self.mutex.holder == worker \
            and stamp < self.mutex.expires_us
        if not sweeping and held.worker == worker:
            return {"type": "retry", "id": task_id, "attempt": str(held.attempt),
                    "worker": worker, "to": "wait", "ts": str(stamp // 1000)}
        stalls = self.stalls[task_id] = self.stalls.get(task_id, 0) + 1
        return {"type": "reap", "id": task_id, "attempt": str(held.attempt),
                "worker": held.worker, "deadline": str(held.deadline), "stalls": str(stalls),
                "ts": str(stamp // 1000)}
