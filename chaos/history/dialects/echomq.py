"""The ``echomq`` dialect: the keys and scripts of docs/design.md §2 (``chaos/protocol/lua/``).

A call is recognised by its script's SHA1 (computed here from the shipped sources, mutants
included; an EVAL's body is hashed the same way), which gives the meaning of its arguments
(lease, attempt, worker). Whether the transition happened is read from what the script wrote,
never from its events-stream XADD, so the history does not depend on the scripts recording:

    enqueue    HSET <job> payload ...                    else a repeat id: nothing
    claim      HINCRBY <job> attempts + ZADD active      else an empty claim: nothing
               (claim_many: per job, one claim event each)
    extend     ZADD active <deadline> <id>               else extend_rejected
    complete   HSET <job> state completed                else complete_rejected
    reap       per id: ZREM active, then ZADD pending 0 (reap) or ZADD dead (dead)
    sweep      ZRANGEBYSCORE active -inf ...: a scan for lapsed leases (reap, reap_scan,
               reap_client_clock), whatever it moves; the worker is the calling connection
    record     XADD events <fields>: a runner event (run, phase, fault, ...), taken as written

``ts`` is the server clock of the script's own TIME command. Valkey answers TIME inside a script
with the time the call started (the same value all through the script; measured on 9.1), and
MONITOR stamps the call's own line just after that: ``ts`` is the call line's stamp (floored to
ms, as the scripts do). Where a write carries a value computed from TIME (enqueue's pending score,
dead's score, a claim or extend's deadline minus its lease) and it lies between one ms before
that stamp and the TIME line's own stamp, it is the exact ``ts``. (A server whose TIME reads the
clock as it runs answers inside those bounds too, and every script but the claims runs TIME
first, so the call's stamp is close there as well.)

Every shipped script runs a command first thing, so a call MONITOR lists with no command after it
ran nothing (an EVALSHA refused with NOSCRIPT, before the caller's SCRIPT LOAD or EVAL): it
writes nothing and records no event (``Decoded.not_run``), where decoding it would invent a
rejected extend or complete.

After a gap in the feed (the recorder lost its connection, e.g. to a store restart),
``gap_differences`` compares the shadow with the store as it was the instant MONITOR resumed:
any job hash (but its payload) or lease that differs is a write the recorder missed.

The by-effect reading (``_by_effect``: a stranger's scripts, EchoMQ's own) gathers what a call
did to each job (``echomq_effect.Effect``); its reading of EchoMQ's group lanes is
``echomq_lanes``, of its flows, a user's removals and reprocessing and EchoMQ.Locks' markers
``echomq_admin``.

A completed job's hash may expire (``completed_retention_ms``: complete.lua's PEXPIRE): the
shadow drops it at the same server time, so a late call decodes against what the store held
(no attempts) and the shadow stays as small as the store.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter, deque
from collections.abc import Sequence
from importlib import resources
from typing import Any

from chaos.history.dialects import Call, Decoded, jobs_named, script_sha1
from chaos.history.dialects.echomq_admin import (
    AWAITING,
    DEPENDENCIES_SUFFIX,
    LOCK_SUFFIX,
    LOGS_SUFFIX,
    admin_event,
    lock_marker,
    lock_mirror,
)
from chaos.history.dialects.echomq_effect import Effect
from chaos.history.dialects.echomq_lanes import Lanes
from chaos.history.schema import TRANSITIONS, Park, Sweep
from chaos.protocol.client import QueueKeys

# What the queue's own scripts record (read from their effects, never from their XADD): no
# runner event.
_TRANSITION_TYPES = frozenset((*(kind.TYPE for kind in TRANSITIONS), Sweep.TYPE))
# Commands that change a key; anything else (reads, TIME) changes nothing the shadow keeps.
_ZADD_OPTIONS = frozenset(("XX", "NX", "GT", "LT", "CH", "INCR"))
_WRITES = frozenset(("HSET", "HINCRBY", "HDEL", "ZADD", "ZREM", "ZPOPMIN", "DEL", "XADD",
                     "UNLINK", "HMSET", "ZINCRBY", "ZREMRANGEBYSCORE", "SET", "RENAME",
                     "PEXPIRE", "SADD", "SREM"))
# Reads the scripts run most, as they spell them: passed over without upper-casing (any other
# spelling is upper-cased and looked up, as every command name is).
_READS = frozenset(("HGET", "HMGET", "HGETALL", "EXISTS", "ZSCORE", "ZRANGE", "ZRANGEBYSCORE",
                    "ZCARD", "GET", "TYPE", "hget", "hmget", "hgetall", "exists", "zscore",
                    "zrange", "zrangebyscore", "zcard", "get", "type"))
# The reads that scan a sorted set by score: on the active set from -inf, a sweep (_scans_lapsed).
_SCANS = frozenset(("ZRANGEBYSCORE", "ZRANGE", "zrangebyscore", "zrange"))


def _scans_lapsed(args: list[str], active: str) -> bool:
    """Is this command (a ``_SCANS`` read) a scan of the active set for the leases lapsed by a
    time, ``ZRANGEBYSCORE active -inf <now> ...`` (or ``ZRANGE active -inf <now> BYSCORE``):
    what a reaper's sweep does first, whether it finds anything or not?"""
    if len(args) < 4 or args[1] != active or args[2].lower() != "-inf":
        return False
    return args[0].upper() == "ZRANGEBYSCORE" or "BYSCORE" in (arg.upper() for arg in args[4:])


def _script_shas() -> dict[str, str]:
    """SHA1 of every shipped script (what SCRIPT LOAD returns for it) -> its name."""
    folder = resources.files("chaos.protocol").joinpath("lua")
    return {hashlib.sha1(entry.read_text().encode()).hexdigest(): entry.name.removesuffix(".lua")
            for entry in folder.iterdir() if entry.name.endswith(".lua")}


SCRIPTS = _script_shas()


class EchoMQ:
    name = "echomq"

    def __init__(self, prefix: str, queue: str, lease_ms: int | None = None,
                 fast_path: bool = True) -> None:
        keys = QueueKeys(prefix, queue)
        # The scenario's lease: where a deadline minus it lies within TIME's bounds, that is the
        # script's exact clock (a call decoded by effect names no lease of its own).
        self.lease_ms = lease_ms
        # Our own scripts known by SHA1 (their arguments: the worker, the lease, the round
        # trip); False decodes every call by effect, as a stranger's (tests hold both equal).
        self.fast_path = fast_path
        self.holders: dict[str, str] = {}  # job -> the holder of its live claim
        self.pending, self.active, self.events = keys.pending, keys.active, keys.events
        self.dead, self.schedule = keys.dead, keys.schedule
        self.job_prefix = keys.job_prefix
        self.base = keys.base
        self.wake_key = f"{keys.base}wake"
        self.lanes = Lanes(keys.base)  # EchoMQ.Lanes' keys (``echomq_lanes``)
        self.completed_count = keys.base + "metrics:completed"  # EchoMQ's count of completes
        # The shadow: what replies would have told (attempt, holder, stalls, lease deadline).
        self.jobs: dict[str, dict[str, str]] = {}
        self.leases: dict[str, str] = {}  # id -> deadline, as the active ZSET scores it
        self.scheduled: dict[str, str] = {}  # id -> when due, as the schedule ZSET scores it
        self.buried: set[str] = set()  # the ids the dead set holds (a reprocess takes one out)
        # Job hashes set to expire (PEXPIRE): id -> the server ms it goes, and the same in time
        # order; ``now_ms`` is the server clock of the call being applied.
        self.expires_at: dict[str, int] = {}
        self.expiry_order: list[tuple[int, str]] = []
        self.now_ms = 0
        # the call being decoded: the earliest and latest its TIME can have read
        self.earliest_ms = self.latest_ms = 0
        # The runner events decoded last (their XADD fields): a gap's are told apart by them.
        self.runner_seen: deque[tuple[tuple[str, str], ...]] = deque(maxlen=1000)
        # The jobs the last gap's differences name (None: any job may be affected).
        self.gap_jobs: list[str] | None = None

    # --- the shadow ---------------------------------------------------------------------
    def _apply(self, args: list[str]) -> None:
        command = args[0].upper()
        if len(args) < 2:
            return
        self._write(args, command, self._row(args[1]))

    def _write(self, args: list[str], command: str, row: str | None) -> None:
        """``_apply`` of a write whose command name (upper case) and row (``_row`` of its key)
        the caller has read already."""
        if row is not None:
            job = self.jobs.setdefault(row, {})
            if command in ("HSET", "HMSET"):
                for index in range(2, len(args) - 1, 2):
                    job[args[index]] = args[index + 1]
            elif command == "HDEL":
                for name in args[2:]:
                    job.pop(name, None)
            elif command == "HINCRBY" and len(args) == 4:
                job[args[2]] = str(int(job.get(args[2]) or 0) + int(args[3]))
            elif command in ("DEL", "UNLINK"):
                job.clear()
            elif command == "PEXPIRE" and len(args) >= 3:
                at = self.now_ms + int(args[2])
                self.expires_at[row] = at
                heapq.heappush(self.expiry_order, (at, row))
        elif args[1] == self.active:
            if command == "ZADD":
                options = 2
                while options < len(args) and args[options].upper() in _ZADD_OPTIONS:
                    options += 1
                xx = options > 2 and "XX" in [arg.upper() for arg in args[2:options]]
                for index in range(options, len(args) - 1, 2):
                    member = args[index + 1]
                    if not xx or member in self.leases:
                        self.leases[member] = args[index]
            elif command == "ZREM":
                for member in args[2:]:
                    self.leases.pop(member, None)
        elif args[1] == self.schedule:
            if command == "ZADD":
                first = _members_start(args)
                for index in range(first, len(args) - 1, 2):
                    self.scheduled[args[index + 1]] = args[index]
            elif command == "ZREM":
                for member in args[2:]:
                    self.scheduled.pop(member, None)
        elif args[1] == self.dead:
            if command == "ZADD":
                self.buried.update(args[_members_start(args) + 1::2])
            elif command == "ZREM":
                self.buried.difference_update(args[2:])

    def _row(self, key: str) -> str | None:
        """The job whose row ``key`` is; None for another key (a job's own sub-keys, such as
        EchoMQ's ``job:<id>:lock``, are no row)."""
        if not key.startswith(self.job_prefix):
            return None
        job_id = key[len(self.job_prefix):]
        return None if ":" in job_id else job_id

    def _expire(self, now_ms: int) -> None:
        """Drop the hashes the store has expired by ``now_ms`` (gone once past their time)."""
        while self.expiry_order and self.expiry_order[0][0] < now_ms:
            at, job_id = heapq.heappop(self.expiry_order)
            if self.expires_at.get(job_id) == at:
                del self.expires_at[job_id]
                self.jobs.pop(job_id, None)

    def _attempts(self, job_id: str) -> str:
        return self.jobs.get(job_id, {}).get("attempts", "0")

    # --- decoding -----------------------------------------------------------------------
    def decode(self, call: Call) -> Decoded:
        self.now_ms = call.stamp_us // 1000
        if self.expiry_order and self.expiry_order[0][0] < self.now_ms:
            self._expire(self.now_ms)
        command = call.args[0].upper()
        if command not in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO"):
            if command == "BLPOP" and self._parks(call.args):
                return Decoded([_park(call, str(self.now_ms))])
            if len(call.args) > 1 and call.args[1].startswith(self.job_prefix):
                locks = self._locks(call)
                if locks is not None:
                    return locks
            if command in _WRITES and len(call.args) > 1 and call.args[1].startswith(self.base):
                self._apply(call.args)
                return Decoded([], unscripted_write=True)
            return Decoded([])
        if command.startswith("EVALSHA"):
            script = SCRIPTS.get(call.args[1].lower()) if self.fast_path and \
                len(call.args) > 1 else None
        else:
            script = SCRIPTS.get(script_sha1(call.args[1]))
        try:
            numkeys = int(call.args[2])
        except (IndexError, ValueError):
            return Decoded([], undecoded=self._touches_queue(call))
        if not call.commands:  # it ran nothing (NOSCRIPT ...): no write, no event
            return Decoded([], not_run=True)
        if script is None or not self.fast_path:
            # (a call that touches none of the queue's keys decodes to nothing by effect)
            return self._by_effect(call)
        try:
            return self._decode(script, call, call.args[3 + numkeys:])
        except (IndexError, ValueError, KeyError):
            return Decoded([], undecoded=True)

    def _locks(self, call: Call) -> Decoded | None:
        """EchoMQ.Locks' plain commands on a job's presence marker: a ``lock_marker`` when it is
        set or released, nothing for a refresh or the row's mirror of it (``echomq_admin``);
        None for any other command."""
        args = call.args
        if args[1].endswith(LOCK_SUFFIX):
            event = lock_marker(args, self.job_prefix, str(call.stamp_us // 1000))
            if event is not None:
                return Decoded([{**event, "worker": call.conn or ""}],
                               holder_from_connection=True)
        if lock_mirror(args, self.job_prefix):
            self._apply(args)  # (the row's lock field: kept in the shadow as the store has it)
            return Decoded([])
        return None

    def names_caller(self, args: list[str]) -> bool:
        """Does this plain command need its connection named before it is decoded (the
        recorder asks for every command outside a script): a lock marker's set or release,
        and a consumer loop's park."""
        if len(args) < 2:
            return False
        command = args[0].upper()
        return (args[1].endswith(LOCK_SUFFIX) and command in ("SET", "DEL", "UNLINK")) or (
            command == "BLPOP" and self._parks(args))

    def _parks(self, args: list[str]) -> bool:
        """``BLPOP <queue>wake <timeout>``: a consumer loop parks on the queue's wake list
        (EchoMQ.Consumer's park, EchoMQ.Metronome's block), one key and a timeout."""
        return len(args) == 3 and args[1] == self.wake_key

    def lease_holders_oldest_first(self, now_ms: int, limit: int = 100) -> list[str]:
        """The holders of the ``limit`` earliest-deadline leases still live at ``now_ms`` (server
        clock), oldest first, as the feed decoded so far shows them: who claimed each (by
        effect: its connection; our scripts: the row's worker). Called from another thread
        than the recorder's: it reads a copy."""
        leases = dict(self.leases)
        live = sorted((float(deadline), job_id) for job_id, deadline in leases.items()
                      if float(deadline) > now_ms)[:limit]
        holders = [self.holders.get(job_id, "") for _, job_id in live]
        return [holder for holder in holders if holder]

    def jobs_named(self, call: Call) -> list[str]:
        return jobs_named(self._call_commands(call), self._job_of,
                          frozenset((self.pending, self.active, self.dead, self.schedule)))

    def _job_of(self, key: str) -> str | None:
        """The job of a row or of one of its sub-keys (``job:<id>:lock``)."""
        if not key.startswith(self.job_prefix):
            return None
        return key[len(self.job_prefix):].partition(":")[0]

    @staticmethod
    def _call_commands(call: Call) -> list[list[str]]:
        """A script call's KEYS (as a pseudo-command ``KEYS k1 k2 ...``), then its commands."""
        try:
            numkeys = int(call.args[2])
            keys = call.args[3:3 + numkeys]
        except (IndexError, ValueError):
            keys = []
        return [["KEYS", *keys], *(args for _, args in call.commands)]

    def _touches_queue(self, call: Call, keys: list[str] | None = None) -> bool:
        return any(key.startswith(self.base) for key in keys or ()) or any(
            len(args) > 1 and args[1].startswith(self.base) for _, args in call.commands)

    def _decode(self, script: str, call: Call, argv: list[str]) -> Decoded:
        # Valkey answers TIME inside a script with the time the call started (one value for the
        # whole script), just before MONITOR stamps the call's own line: that stamp is the
        # script's clock, to the ms. A server whose TIME reads the clock as it runs answers
        # between the call's stamp and the TIME line's (every script but the claims runs TIME
        # first). A write's exact copy of the clock is taken anywhere in those bounds.
        ts = str(call.stamp_us // 1000)
        self.earliest_ms = call.stamp_us // 1000 - 1  # floored: a start in a ms's last µs
        self.latest_ms = call.stamp_us // 1000
        writes: list[list[str]] = []
        swept = False
        for stamp, args in call.commands:
            name = args[0].upper()
            if name == "TIME":
                self.latest_ms = stamp // 1000
            elif name in _WRITES:
                writes.append(args)
            elif name in _SCANS and not swept:
                swept = _scans_lapsed(args, self.active)
        kind = script.split("_")[0]
        if kind == "record":
            return Decoded(self._runner_events(writes, ts))
        decoder = getattr(self, f"_{kind}", None)
        if decoder is None:  # none of the shipped scripts: records nothing
            return Decoded([], undecoded=bool(writes))
        decoded: Decoded = decoder(script, argv, writes, ts)
        self._note_holders(decoded.events, call.conn)
        if swept:  # before the reaps it made, as the reap scripts record it
            decoded.events.insert(0, _sweep(call, ts))
        return decoded

    def _note_holders(self, events: list[dict[str, str]], conn: str | None) -> None:
        """Who holds each job: whoever made its claim (the connection, whatever the call
        named), until it is done (what ``lease_holders_oldest_first`` tells the nemesis)."""
        for event in events:
            kind = event["type"]
            if kind == "claim":
                self.holders[event["id"]] = conn or event["worker"]
            elif kind == "complete" or kind == "dead" or kind == "retry":
                self.holders.pop(event["id"], None)

    # --- decoding by effect ---------------------------------------------------------------
    def _by_effect(self, call: Call) -> Decoded:
        """A call of a script we do not know (another queue's, or ours changed by one byte),
        judged by what it did to the queue's keys, whatever its text or arguments. Per job, in
        the order first written:

            claim      attempts raised (HINCRBY) and a lease written (ZADD active)
            extend     a lease written (ZADD active), attempts untouched, the job not leaving
            complete   out of active (ZREM) with its row deleted or its state set completed
            reap       out of active and back into pending (ZADD pending)
            dead       out of active and into dead, a stall counted on its row (HINCRBY of
                       a field but attempts): the reaper's dead letter
            complete   into dead with no stall counted: its holder failed it for good (EchoMQ's
            (failed)   retry at its max attempts), ``target`` failed
            retry      a job's row kept, into schedule (ZADD schedule <due>): its holder handed
                       it back to run again when due (EchoMQ's retry, delay), ``to`` schedule
            promote    out of schedule and into pending: due again
            enqueue    a new row with a payload, into pending (or into schedule: a scheduled
                       admission, with its ``due``)

        The holder is the calling connection (``Call.conn``; the scripts need not name one).
        A call that writes nothing is no transition (a refused extend or complete cannot be
        told from a read by its effect). Any other write to pending, active, dead or a job's
        attempts or state is undecoded: its jobs' evidence is missing."""
        stamp_ms = call.stamp_us // 1000
        ts = str(stamp_ms)
        # The bounds TIME can have read: from a start in the stamp's ms (floored: a start in a
        # ms's last µs) to the stamp of the script's first TIME, read as the loop passes it.
        self.earliest_ms, self.latest_ms = stamp_ms - 1, stamp_ms
        timed = False
        effects: dict[str, Effect] = {}
        runner: list[dict[str, str]] = []
        popped = False  # a ZPOPMIN of pending: a claim, empty when nothing else follows
        # (the recorder's hot path: the keys and the row's prefix read once per call)
        events_key, active, pending, dead = self.events, self.active, self.pending, self.dead
        job_prefix, leases = self.job_prefix, self.leases
        cut = len(job_prefix)

        schedule, scheduled = self.schedule, self.scheduled
        sets = (active, pending, dead, schedule)

        swept = False  # a scan of the active set for lapsed leases: a sweep
        completion_counted = False  # EchoMQ's metrics:completed counted up: a complete
        for stamp, args in call.commands:
            name = args[0]
            if name in _READS:  # (as scripts spell them: no upper-casing to tell)
                if name in _SCANS and not swept:
                    swept = _scans_lapsed(args, active)
                continue
            if name not in _WRITES:
                name = name.upper()
                if name not in _WRITES:
                    if name == "TIME" and not timed:
                        self.latest_ms, timed = stamp // 1000, True
                    elif name in _SCANS and not swept:
                        swept = _scans_lapsed(args, active)
                    continue
            if len(args) < 2:
                continue
            key = args[1]
            if key == events_key:  # a runner event's XADD, or a transition's own (not read)
                if name == "XADD" and not (  # _transition_xadd, inline
                        len(args) > 4 and args[3] == "type" and args[4] in _TRANSITION_TYPES
                        and args.count("type") == 1):
                    event = self._runner_event(args, ts)
                    if event is not None:
                        runner.append(event)
                continue  # (the shadow keeps no stream)
            if key in sets:
                first = 2  # where a ZADD's scores and members begin, past its options
                if name == "ZADD":
                    while first < len(args) and len(args[first]) <= 4 \
                            and args[first].upper() in _ZADD_OPTIONS:  # (none is longer)
                        first += 1
                    scored = [(args[first + 1], args[first])] if len(args) == first + 2 \
                        else list(zip(args[first + 1::2], args[first::2]))  # noqa: B905
                    members: Sequence[tuple[str, str | None]] = scored
                elif name == "ZREM":
                    members = [(member, None) for member in args[2:]]
                else:
                    popped |= name == "ZPOPMIN" and key == pending
                    continue  # (nothing else moves a job in or out, or changes the shadow)
                for member, score in members:
                    if key == active and member not in leases and (score is None or (
                            name == "ZADD" and "XX" in map(str.upper, args[2:first]))):
                        continue  # a ZADD XX or ZREM of a lease that is not there: no write
                    if key == schedule and score is None and member not in scheduled:
                        continue  # a ZREM of a job not waiting there: no write
                    if key == dead and score is None and member not in self.buried:
                        continue  # a ZREM of a job not dead: no write
                    job = effects.get(member) or self._effect(effects, member)
                    if key == active:
                        if score is None:
                            job.left_active = True
                        else:
                            job.deadline = score
                    elif key == pending:
                        if score is not None:
                            job.pending, job.pending_score = True, score
                    elif key == schedule:
                        if score is None:
                            job.left_schedule, job.due_before = True, scheduled.pop(member)
                        else:
                            job.due = scheduled[member] = score
                    elif score is None:  # out of dead: a reprocess, or a removal
                        job.left_dead = True
                        self.buried.discard(member)
                    else:
                        job.dead = score
                        self.buried.add(member)
                if key != active:
                    continue  # (the shadow keeps the active and schedule sets, no other)
                if name == "ZREM":  # _write's, inline
                    for member, _ in members:
                        leases.pop(member, None)
                elif first == 2 or "XX" not in [arg.upper() for arg in args[2:first]]:
                    leases.update(scored)
                else:  # ZADD XX: only the leases that are there
                    for member, deadline in scored:
                        if member in leases:
                            leases[member] = deadline
                continue
            row = key[cut:] if key.startswith(job_prefix) else None  # _row, inline
            if row is None or ":" in row:
                if row is None:
                    if key == self.completed_count:
                        completion_counted = True
                    else:  # (past the hot keys: a flat queue pays nothing for lanes)
                        popped |= self.lanes.write(name, key, args, effects, self._effect,
                                                   runner, ts, call.conn)
                else:
                    self._subkey_write(name, row, args, effects, runner, ts, call.conn)
                continue  # none of the queue's (or a job's sub-key): no shadow
            job = effects.get(row) or self._effect(effects, row)
            if name in ("HSET", "HMSET"):
                shadow = self.jobs.setdefault(row, {})
                state = None
                for index in range(2, len(args) - 1, 2):  # field, value, ...: _write's, inline
                    value = shadow[args[index]] = args[index + 1]
                    if args[index] == "state":
                        state = value
                    elif args[index] == "payload":
                        job.payload = True
                if state == "completed":
                    job.completed = True
                elif state == AWAITING:  # a flow parent, held until its children complete
                    job.awaiting = True
                elif state is not None and state not in ("active", "pending", "dead",
                                                         "scheduled"):
                    job.other_state = True
                continue
            if name == "HINCRBY" and len(args) == 4:
                if args[2] == "attempts":
                    job.attempts_raised = True
                else:  # a count on the row: a reaper's stall count (ours: stalls; EchoMQ's
                    job.counted = args[2]  # sweep: stalled)
            elif name in ("DEL", "UNLINK"):
                job.deleted = True
                if len(args) > 2 and key + LOGS_SUFFIX in args[2:]:  # remove_job's, at once
                    job.logs_deleted = True
            self._write(args, name, row)
        events: list[dict[str, str]] = runner
        if swept:  # before the reaps it made, as the reap scripts record it
            events.append(_sweep(call, ts))
        undecoded = False
        holder = call.conn or ""
        for job_id, job in effects.items():
            if job.left_dead or job.logs_deleted or job.awaiting or job.left_lane or \
                    job.state_before == AWAITING:  # (rare: a flow's, or a user's own call)
                event = admin_event(job_id, job, ts, holder, completion_counted)
                if event is not None and event["type"] == "reassign":
                    event.update(self._group(job_id))
                if event is None and (job.awaiting or job.state_before == AWAITING
                                      or job.left_dead):
                    undecoded |= job.changed  # e.g. a held parent failed by its child: not read
                    continue
            else:
                event = None
            if event is None:
                event = self._effect_event(job_id, job, ts, holder)
            if event is None:
                undecoded |= job.changed
            elif event:
                events.append(event)
                # _note_holders, inline (the runner events before these are none of its)
                if event["type"] == "claim":
                    self.holders[job_id] = holder
                elif event["type"] in _SETTLING:
                    self.holders.pop(job_id, None)
        # events, undecoded, empty_claim, unscripted_write, not_run, holder_from_connection:
        # positional (keywords cost as much as the rest of the call's bookkeeping)
        return Decoded(events, undecoded, popped and not effects, False, False, True)

    def _effect(self, effects: dict[str, Effect], job_id: str) -> Effect:
        """A job's first effect in a call: where it starts from (its lease, its row's attempt
        and state: a row the call deletes keeps them here)."""
        row = self.jobs.get(job_id)
        found = effects[job_id] = Effect(bool(row), self.leases.get(job_id, ""),
                                         row.get("attempts", "0") if row else "0",
                                         row.get("state") if row else None)
        return found

    def _subkey_write(self, name: str, row: str, args: list[str], effects: dict[str, Effect],
                      events: list[dict[str, str]], ts: str, conn: str | None) -> None:
        """A write to one of a job's sub-keys: a flow parent's count of children set
        (``<id>:dependencies``), a row's logs deleted (``remove_job``), a lock marker set or
        released inside a script; anything else (a child's result in ``<id>:processed``, the
        count's DECR, a log line) moves no job."""
        job_id, _, sub = row.partition(":")
        suffix = ":" + sub
        if suffix == DEPENDENCIES_SUFFIX and name == "SET" and len(args) > 2:
            (effects.get(job_id) or self._effect(effects, job_id)).children = args[2]
        elif suffix == LOGS_SUFFIX and name in ("DEL", "UNLINK"):
            (effects.get(job_id) or self._effect(effects, job_id)).logs_deleted = True
        elif suffix == LOCK_SUFFIX:
            event = lock_marker(args, self.job_prefix, ts)
            if event is not None:
                events.append({**event, "worker": conn or ""})

    def _effect_event(self, job_id: str, job: Effect, ts: str,
                      holder: str) -> dict[str, str] | None:
        """The transition ``job``'s effects make; {} for none, None when they make no sense.
        The attempt a call acts on is the row's before it (a complete may delete the row); a
        claim's is the one it raised."""
        attempt = self._attempts(job_id) if job.attempts_raised else job.attempt_before
        if job.attempts_raised and job.deadline is not None and not job.left_active:
            lease_ms, ts = self._lease_ts(job.deadline, ts)
            return {"type": "claim", "id": job_id, "attempt": attempt, "worker": holder,
                    "lease_ms": lease_ms, "deadline": job.deadline, "ts": ts,
                    **self._group(job_id)}
        settled = job.deleted or job.completed  # EchoMQ deletes the row, ours marks it
        waits = job.due is not None  # into schedule
        if settled and not job.pending and job.dead is None and job.deadline is None \
                and not job.attempts_raised and not waits:  # out of active (or pending)
            return {"type": "complete", "id": job_id, "attempt": attempt, "worker": holder,
                    "ts": ts}
        if waits or job.left_schedule:
            return self._schedule_event(job_id, job, ts, holder, attempt, settled)
        if job.dead is not None and not job.counted and not job.pending \
                and job.deadline is None and not job.attempts_raised and not settled:
            # into dead with no stall counted: its holder failed it for good (EchoMQ's retry
            # at its max attempts), as BullMQ's last failed attempt: finished, not lost
            return {"type": "complete", "id": job_id, "attempt": attempt, "worker": holder,
                    "target": "failed", "ts": ts}
        if job.left_active and job.deadline is None and not job.attempts_raised \
                and not settled and job.pending != (job.dead is not None):
            row = self.jobs.get(job_id, {})
            taken = {"attempt": attempt, "worker": self.holders.get(job_id) or row.get(
                "worker", ""), "deadline": job.deadline_before,
                     "stalls": row.get(job.counted or "stalls", "")}
            if job.pending:
                return {"type": "reap", "id": job_id, **taken, "ts": ts, **self._group(job_id)}
            return {"type": "dead", "id": job_id, **taken, "ts": self._exact(ts, job.dead)}
        if job.deadline is not None and not job.attempts_raised and not job.left_active:
            lease_ms, ts = self._lease_ts(job.deadline, ts)
            return {"type": "extend", "id": job_id, "attempt": attempt, "worker": holder,
                    "lease_ms": lease_ms, "deadline": job.deadline, "ts": ts, "rtt_ms": ""}
        if job.pending and job.payload and not job.existed and not job.left_active \
                and job.deadline is None and job.dead is None:
            return {"type": "enqueue", "id": job_id,
                    "ts": self._exact(ts, job.pending_score), **self._group(job_id),
                    **self._parent(job_id)}
        return {} if not job.changed else None

    def _parent(self, job_id: str) -> dict[str, str]:
        """A flow child's ``parent`` (its row's, as EchoMQ.Flows writes it), else none."""
        parent = self.jobs.get(job_id, {}).get("parent")
        return {"parent": parent} if parent else {}

    def _group(self, job_id: str) -> dict[str, str]:
        """A grouped job's ``group`` (its row's, as the lanes' scripts write it), else none."""
        group = self.jobs.get(job_id, {}).get("group")
        return {"group": group} if group else {}

    def _schedule_event(self, job_id: str, job: Effect, ts: str, holder: str, attempt: str,
                        settled: bool) -> dict[str, str] | None:
        """The transition of a job the call put into the schedule or took out of it: a retry
        (its row kept, into schedule: handed back to run when due), a scheduled admission (a
        new row with a payload, into schedule) or a promote (out of schedule, into pending);
        None for anything else."""
        if settled or job.attempts_raised or job.deadline is not None or job.dead is not None:
            return None
        if job.due is not None and not job.left_schedule and not job.pending:
            due = _whole(job.due)
            if job.existed and not job.payload:
                return {"type": "retry", "id": job_id, "attempt": attempt, "worker": holder,
                        "to": "schedule", "due": due, "ts": ts}
            if job.payload and not job.existed and not job.left_active:
                return {"type": "enqueue", "id": job_id, "due": due, "ts": ts}
            return None
        if job.left_schedule and job.pending and job.due is None and not job.left_active:
            return {"type": "promote", "id": job_id, "worker": holder,
                    "due": _whole(job.due_before or ""), "ts": ts}
        return None

    def _lease_ts(self, deadline: str, ts: str) -> tuple[str, str]:
        """A granted lease's ``lease_ms`` and ``ts``: ``ts`` exact where deadline - the
        scenario's lease lies within TIME's bounds; the lease is what the deadline says,
        whatever was configured."""
        # (a ZADD's score as a float, as the store reads it; digits that a float holds
        # exactly, the usual, read as they are)
        whole = int(deadline) if len(deadline) <= 15 and deadline.isdigit() else int(
            float(deadline))
        if self.lease_ms is not None:
            ts = self._exact(ts, whole - self.lease_ms)
        return str(whole - int(ts)), ts

    def _exact(self, ts: str, value: str | int | None) -> str:
        """``value`` (a write's copy of the script's clock) when it lies within TIME's bounds."""
        try:
            exact = int(value) if value is not None else None
        except ValueError:
            return ts
        return (str(exact) if exact is not None and self.earliest_ms <= exact <= self.latest_ms
                else ts)

    def _runner_events(self, writes: list[list[str]], ts: str) -> list[dict[str, str]]:
        events = []
        for args in writes:
            event = self._runner_event(args, ts)
            if event is not None:
                events.append(event)
        return events

    def _runner_event(self, args: list[str], ts: str) -> dict[str, str] | None:
        """A runner event (record.lua's XADD, taken as written); None for another write, or a
        transition's own event (read from what its script wrote, never from its XADD)."""
        if args[0].upper() != "XADD" or args[1] != self.events:
            return None
        if _transition_xadd(args):
            return None
        fields = dict(zip(args[3::2], args[4::2], strict=False))
        if fields.get("type") in _TRANSITION_TYPES:
            return None
        self.runner_seen.append(tuple(sorted(fields.items())))
        return {**fields, "ts": fields.get("ts", ts)}

    def _enqueue(self, script: str, argv: list[str], writes: list[list[str]],
                 ts: str) -> Decoded:
        job_id = argv[1]
        event: dict[str, str] = {}
        for args in writes:
            self._apply(args)
            if args[0].upper() == "HSET" and args[1] == self.job_prefix + job_id:
                fields = dict(zip(args[2::2], args[3::2], strict=False))
                if "payload" in fields:
                    event = {"type": "enqueue", "id": job_id, "ts": ts}
                if fields.get("kind") and event:
                    event["kind"] = fields["kind"]
            elif args[0].upper() == "ZADD" and args[1] == self.pending and event:
                event["ts"] = self._exact(ts, args[-2])
        return Decoded([event] if event else [])

    def _claim(self, script: str, argv: list[str], writes: list[list[str]], ts: str) -> Decoded:
        # claim / claim_many / claim_client_clock: ARGV prefix, lease_ms, worker (claim_many:
        # then its count); claim_lease: prefix, id, lease_ms, worker. One event per job whose
        # attempts were raised, in the order claimed, once its lease is in active.
        lease_ms, worker = (argv[2], argv[3]) if script == "claim_lease" else (argv[1], argv[2])
        deadlines: dict[str, str | None] = {}  # claimed id -> its lease deadline
        for args in writes:
            self._apply(args)
            name = args[0].upper()
            if name == "HINCRBY" and args[2] == "attempts" and args[1].startswith(
                    self.job_prefix):
                deadlines[args[1][len(self.job_prefix):]] = None
            elif name == "ZADD" and args[1] == self.active and args[-1] in deadlines:
                deadlines[args[-1]] = args[-2]
        if not deadlines:
            return Decoded([], empty_claim=True)
        events = [{"type": "claim", "id": job_id, "attempt": self._attempts(job_id),
                   "worker": worker, "lease_ms": lease_ms, "deadline": deadline,
                   "ts": self._exact(ts, int(deadline) - int(lease_ms))}
                  for job_id, deadline in deadlines.items() if deadline is not None]
        return Decoded(events, undecoded=len(events) < len(deadlines))

    def _extend(self, script: str, argv: list[str], writes: list[list[str]],
                ts: str) -> Decoded:
        job_id, attempt, lease_ms, worker = argv[1], argv[2], argv[3], argv[4]
        rtt = argv[5] if len(argv) > 5 else ""
        deadline = None
        for args in writes:
            self._apply(args)
            if args[0].upper() == "ZADD" and args[1] == self.active and args[-1] == job_id:
                deadline = args[-2]
        if deadline is not None:
            return Decoded([{"type": "extend", "id": job_id, "attempt": attempt,
                             "worker": worker, "lease_ms": lease_ms, "deadline": deadline,
                             "ts": self._exact(ts, int(deadline) - int(lease_ms)),
                             "rtt_ms": rtt}])
        return Decoded([{"type": "extend_rejected", "id": job_id, "attempt": attempt,
                         "current_attempt": self._attempts(job_id), "worker": worker,
                         "ts": ts, "rtt_ms": rtt}])

    def _complete(self, script: str, argv: list[str], writes: list[list[str]],
                  ts: str) -> Decoded:
        job_id, attempt, worker = argv[1], argv[2], argv[3]
        accepted = False
        for args in writes:
            self._apply(args)
            if (args[0].upper() == "HSET" and args[1] == self.job_prefix + job_id
                    and dict(zip(args[2::2], args[3::2], strict=False)).get("state")
                    == "completed"):
                accepted = True
        if accepted:
            return Decoded([{"type": "complete", "id": job_id, "attempt": attempt,
                             "worker": worker, "ts": ts}])
        return Decoded([{"type": "complete_rejected", "id": job_id, "attempt": attempt,
                         "current_attempt": self._attempts(job_id), "worker": worker,
                         "ts": ts}])

    def _reap(self, script: str, argv: list[str], writes: list[list[str]], ts: str) -> Decoded:
        events: list[dict[str, str]] = []
        deadlines: dict[str, str] = {}  # id -> its lease deadline when the reap took it
        for args in writes:
            name, key = args[0].upper(), args[1]
            if name == "ZREM" and key == self.active:
                for member in args[2:]:
                    deadlines[member] = self.leases.get(member, "")
            elif name == "ZADD" and key in (self.pending, self.dead):
                job_id = args[-1]
                if script == "reap_move" and job_id not in deadlines:
                    deadlines[job_id] = self.leases.get(job_id, "")
                job = self.jobs.get(job_id, {})
                events.append({"type": "dead" if key == self.dead else "reap", "id": job_id,
                               "attempt": job.get("attempts", ""),
                               "worker": job.get("worker", ""),
                               "deadline": deadlines.get(job_id, ""),
                               "stalls": job.get("stalls", ""),
                               "ts": self._exact(ts, args[2]) if key == self.dead else ts})
            self._apply(args)
        return Decoded(events)

    # --- gaps in the feed -----------------------------------------------------------------
    def gap_snapshot(self, since_ms: int) -> tuple[str, list[str], list[str]]:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in self.job_prefix) + "*"
        return _GAP_SNAPSHOT, [self.active, self.events], [pattern, str(since_ms)]

    def gap_differences(self, reply: Any, since_ms: int) -> tuple[list[str],
                                                                  list[dict[str, str]]]:
        jobs_reply, active_reply, first, recent = reply
        stored = {entry[0][len(self.job_prefix):]: dict(zip(entry[1::2], entry[2::2],
                                                             strict=False))
                  for entry in jobs_reply}
        shadow = {job_id: {k: v for k, v in fields.items() if k != "payload"}
                  for job_id, fields in self.jobs.items() if fields}
        # A hash set to expire that the store no longer has expired during the gap.
        for job_id in [job_id for job_id in self.expires_at if job_id not in stored]:
            del self.expires_at[job_id]
            self.jobs.pop(job_id, None)
            shadow.pop(job_id, None)
        differing = [job_id for job_id in sorted(stored.keys() | shadow.keys())
                     if stored.get(job_id) != shadow.get(job_id)]
        found = [f"job {job_id}: the store has {stored.get(job_id)}, the history "
                 f"{shadow.get(job_id)}" for job_id in differing]
        active = dict(zip(active_reply[::2], active_reply[1::2], strict=False))
        moved = [job_id for job_id in sorted(active.keys() | self.leases.keys())
                 if job_id not in active or job_id not in self.leases
                 or float(active[job_id]) != float(self.leases[job_id])]
        found += [f"lease {job_id}: the store has {active.get(job_id)}, the history "
                  f"{self.leases.get(job_id)}" for job_id in moved]
        self.gap_jobs = list(dict.fromkeys(differing + moved))
        # From here on the shadow is the store's: what a later reply would carry (an attempt,
        # a lease) is right again, and a later gap reports only its own differences.
        for job_id in shadow.keys() | stored.keys():
            payload = self.jobs.get(job_id, {}).get("payload")
            self.jobs[job_id] = {**stored.get(job_id, {}),
                                 **({"payload": payload} if payload is not None else {})}
        self.leases = active
        if first and int(first[0][0].partition("-")[0]) > since_ms:
            found.append(f"the events stream starts at {first[0][0]}, after the gap began "
                         "(trimmed): runner events of the gap may be gone")
            self.gap_jobs = None  # a fault of the gap's may be gone: any job may be affected
        seen = Counter(self.runner_seen)
        missed = []
        for _, flat in recent:
            fields = dict(zip(flat[::2], flat[1::2], strict=False))
            if fields.get("type") in _TRANSITION_TYPES:
                continue
            key = tuple(sorted(fields.items()))
            if seen[key]:
                seen[key] -= 1
                continue
            self.runner_seen.append(key)
            missed.append(fields)
        return found, missed


_SETTLING = frozenset(("complete", "dead", "retry"))  # the events that end a job's holding


def _whole(score: str) -> str:
    """A ZADD score as whole ms (digits as they are; a float's integer part), "" if none."""
    if score.isdigit():
        return score
    try:
        return str(int(float(score)))
    except ValueError:
        return ""


def _members_start(args: list[str]) -> int:
    """Where a ZADD's scores and members begin, past its options."""
    first = 2
    while first < len(args) and len(args[first]) <= 4 and args[first].upper() in _ZADD_OPTIONS:
        first += 1
    return first


def _sweep(call: Call, ts: str) -> dict[str, str]:
    """A sweep by the calling connection (the reaper is whoever's connection made the call;
    its address tells one loop of the process from another)."""
    return {"type": Sweep.TYPE, "worker": call.conn or "", "client": call.client, "ts": ts}


def _park(call: Call, ts: str) -> dict[str, str]:
    """A consumer loop's park on the wake list, for at most its BLPOP timeout (seconds)."""
    try:
        timeout_ms = str(round(float(call.args[2]) * 1000))
    except ValueError:
        timeout_ms = ""
    return {"type": Park.TYPE, "worker": call.conn or "", "client": call.client,
            "timeout_ms": timeout_ms, "ts": ts}


def _transition_xadd(args: list[str]) -> bool:
    """An XADD whose one ``type`` field (the common case: right after the id) names a
    transition: no runner event, told without building its fields."""
    return len(args) > 4 and args[3] == "type" and args[4] in _TRANSITION_TYPES \
        and args.count("type") == 1


# The store as the recorder resumes (run just before MONITOR, on the same connection: nothing
# runs in between): every job hash but its payload, the leases, the events stream's first entry
# and its entries since the gap began.
_GAP_SNAPSHOT = """
local jobs, cursor = {}, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if redis.call('TYPE', key).ok == 'hash' then
      local fields, kept = redis.call('HGETALL', key), {key}
      for i = 1, #fields, 2 do
        if fields[i] ~= 'payload' then
          kept[#kept + 1] = fields[i]
          kept[#kept + 1] = fields[i + 1]
        end
      end
      jobs[#jobs + 1] = kept
    end
  end
until cursor == '0'
return {jobs, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'),
        redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1),
        redis.call('XRANGE', KEYS[2], ARGV[2], '+')}
"""
