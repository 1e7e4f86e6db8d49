"""The ``bullmq`` dialect: real BullMQ (npm ``bullmq`` 6.x) workers, decoded from MONITOR
(docs/bullmq.md). Keys are ``<prefix>:<queue>:<suffix>``; a job's lease is its lock key
``<prefix>:<queue>:<id>:lock``, set to the holder's token ``<worker uuid>:<n>`` with ``PX
lockDuration``.

BullMQ's scripts take no server TIME and hand a client's ``Date.now()`` as an argument, so every
``ts`` here is the MONITOR stamp of the write that made the transition (floored to ms), and a
lease's deadline is that stamp + the lock's PX: the server's own clock, which is what expires a
lock. What happened is read from the commands a script ran, never from its events-stream XADD:

    enqueue    HMSET <job> name .. data ..            (any add script)
    claim      SET <job>:lock <token> PX <L> + HINCRBY <job> ats 1   (moveToActive, and the
               next-job fetch inside moveToFinished and moveToDelayed); attempt = ats, holder =
               the job's ``pb`` (the worker's name; a worker started by ``sut/bullmq`` names its
               connection the same), ``token`` = the lock's value
    extend     extendLock / extendLocks: GET <lock> then SET <lock> <token> PX <L>; a GET with no
               SET after it: extend_rejected
    complete   moveToFinished: HINCRBY <job> atm 1 (written only once the lock matched and the
               job left the active list); target failed (the handler failed its last attempt):
               a complete with ``target = failed``; nothing written: complete_rejected (target)
    retry      moveToDelayed (a backoff) / retryJob (at once): HINCRBY <job> atm 1 (or, with
               skipAttempt, ZADD delayed <job>) once the lock matched; ``to`` = delayed | wait;
               nothing written: complete_rejected with target = delayed | wait
    sweep      every moveStalledJobsToWait: worker = the calling connection; ``ran`` = 0 when
               the stalled-check key turned it away (EXISTS stalled-check, nothing else), else
               at its SET stalled-check <ts> PX <S>
    reap       moveStalledJobsToWait: HINCRBY <job> stc 1 (the lock was gone), ``stalls`` = stc;
    dead       the same with HSET <job> defa (stc past maxStalledCount): BullMQ then fails the job
               through a claim and a moveToFinished target failed, which decode to nothing

A call's token (whose lease it speaks for) is read from its arguments: plain for extendLock,
moveToDelayed and retryJob, inside MessagePack for extendLocks and moveToFinished, where its text
survives MONITOR's escaping. A lease is known by its job and token together (BullMQ hands the
same token to the next job a finish fetches, and a broken worker may hand one out twice). A
write to a lock the dialect does not know (a SET without PX, a PEXPIRE, a DEL outside a finish)
or to a job's ``ats``/``atm``/``stc``/``defa`` that decodes to nothing makes the call undecoded.
Runner events (run, phase, fault, ...) are the echomq ``record`` script's calls, decoded by the
``echomq`` dialect.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from chaos.history.dialects import Call, Decoded, jobs_named
from chaos.history.dialects.echomq import SCRIPTS, EchoMQ

_TOKEN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:\d+")
_SCRIPT_CALLS = ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO")
# Writes that change a job's lease or fate: a call making one that decodes to nothing is undecoded.
_LEASE_FIELDS = frozenset(("ats", "atm", "stc", "defa"))
# The queue's own keys (``<base><suffix>``): never a job.
_QUEUE_KEYS = frozenset((
    "wait", "paused", "meta", "id", "completed", "failed", "delayed", "active", "events",
    "marker", "prioritized", "pc", "stalled", "stalled-check", "limiter", "repeat", "metrics",
    "waiting-children", "de", "qe"))
# Commands on a lock key that change nothing.
_LOCK_READS = frozenset(("GET", "EXISTS", "PTTL", "TTL", "TYPE", "STRLEN"))
# The queue's sets and lists whose members are job ids.
_JOB_LISTS = ("wait", "paused", "active", "delayed", "prioritized", "completed", "failed",
              "stalled", "waiting-children")


def bullmq_base(prefix: str, queue: str) -> str:
    """The keys' common start: BullMQ joins prefix and queue with ":" (the runner drops a
    trailing ":" from the scenario's prefix, as ``sut/bullmq`` does)."""
    return f"{prefix.rstrip(':') or 'bull'}:{queue}:"


@dataclass(slots=True)
class _Lease:
    attempt: str
    worker: str
    deadline: str = ""


class BullMQ:
    name = "bullmq"

    def __init__(self, prefix: str, queue: str) -> None:
        self.base = bullmq_base(prefix, queue)
        self.active = self.base + "active"
        self.stalled = self.base + "stalled"
        self.stalled_check = self.base + "stalled-check"
        self.wait = self.base + "wait"
        self.delayed = self.base + "delayed"
        self.marker = self.base + "marker"
        self.runner = EchoMQ(prefix, queue)  # the runner's own events (record.lua)
        # The shadow: what replies would have told.
        self.attempts: dict[str, int] = {}  # job id -> ats
        self.stalls: dict[str, int] = {}  # job id -> stc
        # (job id, token) -> (attempt, holder): the lease a token stands for on a job
        self.tokens: dict[tuple[str, str], tuple[str, str]] = {}
        self.owners: dict[str, str] = {}  # worker uuid -> worker name (from claims): a fallback
        self.leases: dict[str, _Lease] = {}  # job id -> the lease its lock key holds
        self.dead: set[str] = set()  # failed by the stalled check (defa)

    # --- helpers ------------------------------------------------------------------------
    def _job(self, key: str, suffix: str = "") -> str | None:
        """The job id of ``<base><id><suffix>``, or None for another key."""
        if not key.startswith(self.base) or not key.endswith(suffix):
            return None
        job_id = key[len(self.base):len(key) - len(suffix)]
        return job_id if job_id and ":" not in job_id and job_id not in _QUEUE_KEYS else None

    def jobs_named(self, call: Call) -> list[str]:
        return jobs_named(EchoMQ._call_commands(call), self._job_of_any,
                          frozenset(self.base + suffix for suffix in _JOB_LISTS))

    def _job_of_any(self, key: str) -> str | None:
        """The job of ``<base><id>`` or of one of its own keys (``<base><id>:lock`` ...)."""
        if not key.startswith(self.base):
            return None
        return self._job(self.base + key[len(self.base):].partition(":")[0])

    def _holder(self, job_id: str, token: str) -> tuple[str, str]:
        """(attempt, holder) of the lease ``token`` stands for on ``job_id``: the claim that
        handed it out; else no attempt, and the worker whose uuid the token carries."""
        known = self.tokens.get((job_id, token))
        if known is not None:
            return known
        return "", self.owners.get(token.rpartition(":")[0], "")

    # --- decoding -----------------------------------------------------------------------
    def decode(self, call: Call) -> Decoded:
        command = call.args[0].upper()
        if command not in _SCRIPT_CALLS:
            if (len(call.args) > 1 and call.args[1].startswith(self.base)
                    and self._job(call.args[1]) is not None and command not in ("GET", "HGET",
                                                                                "HGETALL")):
                return Decoded([], unscripted_write=True)
            return Decoded([])
        if command.startswith("EVALSHA") and len(call.args) > 1 and call.args[1].lower() in SCRIPTS:
            return self.runner.decode(call)
        try:
            numkeys = int(call.args[2])
        except (IndexError, ValueError):
            return Decoded([])
        keys, argv = call.args[3:3 + numkeys], call.args[3 + numkeys:]
        if not any(key.startswith(self.base) for key in keys):
            return self.runner.decode(call) if command.startswith("EVAL") else Decoded([])
        if not call.commands:  # it ran nothing (NOSCRIPT ...): every BullMQ script we decode
            return Decoded([], not_run=True)  # runs a command first; no refusal to invent
        try:
            return self._decode(call, keys, argv)
        except (IndexError, ValueError, KeyError):
            return Decoded([], undecoded=True)

    def _ending(self, keys: list[str], argv: list[str]) -> tuple[str, str, str] | None:
        """(job id, token, target) of a call that ends its lease (moveToFinished: completed or
        failed; moveToDelayed: delayed; retryJob: wait), else None."""
        if len(keys) == 14 and keys[1] == self.active:  # moveToFinished
            return (self._job(keys[11]) or "", next(iter(_TOKEN.findall(argv[7])), ""),
                    argv[4])
        if len(keys) == 11 and keys[0] == self.marker and keys[1] == self.active \
                and keys[3] == self.delayed:  # moveToDelayed
            return self._job(keys[4]) or "", argv[3], "delayed"
        if len(keys) == 11 and keys[0] == self.active and keys[1] == self.wait:  # retryJob
            return self._job(keys[3]) or "", argv[4], "wait"
        return None

    def _decode(self, call: Call, keys: list[str], argv: list[str]) -> Decoded:
        ending = self._ending(keys, argv)
        end_job, end_token, target = ending or ("", "", "")
        extending = len(keys) <= 2 and keys[-1] == self.stalled  # extendLock(s)
        checking = len(keys) == 9 and keys[0] == self.stalled and keys[3] == self.stalled_check
        attempted = ""  # the stamp of a stalled check's look at its key (ms)
        swept = False
        events: list[dict[str, str]] = []
        leftover = False  # a lease-changing write nothing below accounted for
        tokens = iter(_TOKEN.findall(argv[1] if extending and len(keys) == 1 else ""))
        checked: tuple[str, str] | None = None  # (job id, ms): an extend's GET awaiting its SET
        pending_claim: dict[str, str] | None = None
        finished = False
        for stamp, args in call.commands:
            name, key = args[0].upper(), args[1] if len(args) > 1 else ""
            ms = str(stamp // 1000)
            lock_of = self._job(key, ":lock")
            if lock_of is not None:
                if name == "GET" and extending:
                    if checked is not None:
                        events.append(self._extend_rejected(*checked, argv, tokens, len(keys)))
                    checked = (lock_of, ms)
                elif name == "SET":
                    renewing = extending and checked is not None and checked[0] == lock_of
                    if renewing:  # the GET's answer: a SET follows, so not a refusal
                        checked = None
                        next(tokens, None)
                    if len(args) != 5 or args[3].upper() != "PX" or not args[4].isdigit():
                        leftover = True  # a lock written some other way: no lease we know
                        continue
                    token, px = args[2], args[4]
                    deadline = str(int(ms) + int(px))
                    if renewing:
                        attempt, worker = self._holder(lock_of, token)
                        lease = self.leases.get(lock_of)
                        if lease is not None:
                            lease.deadline = deadline
                        events.append({"type": "extend", "id": lock_of, "attempt": attempt,
                                       "worker": worker, "lease_ms": px,
                                       "deadline": deadline, "ts": ms})
                    else:  # a claim: its attempt comes with the HINCRBY ats that follows
                        pending_claim = {"type": "claim", "id": lock_of, "token": token,
                                         "lease_ms": px, "deadline": deadline, "ts": ms}
                elif name == "DEL":
                    leftover = leftover or ending is None  # a lock dropped outside a finish
                elif name not in _LOCK_READS:
                    leftover = True
            elif key == self.stalled_check and checking:
                if name == "EXISTS":
                    attempted = attempted or ms
                elif name == "SET":
                    swept = True
                    events.append({"type": "sweep", "worker": call.conn or "", "ts": ms})
            elif name in ("HMSET", "HSET") and (job_id := self._job(key)) is not None:
                fields = dict(zip(args[2::2], args[3::2], strict=False))
                if "data" in fields and "name" in fields and "opts" in fields:
                    event = {"type": "enqueue", "id": job_id, "ts": ms}
                    if '"crash":true' in fields["data"].replace(" ", ""):
                        event["kind"] = "poison"
                    events.append(event)
                if pending_claim is not None and "pb" in fields and pending_claim["id"] == job_id:
                    pending_claim["worker"] = fields["pb"]
                if "defa" in fields:
                    self.dead.add(job_id)
                    for event in reversed(events):  # the reap this stall check just made
                        if event.get("id") == job_id and event["type"] == "reap":
                            event["type"] = "dead"
                            break
            elif name == "HINCRBY" and len(args) == 4 and (job_id := self._job(key)):
                field, by = args[2], int(args[3])
                if field == "ats":
                    self.attempts[job_id] = self.attempts.get(job_id, 0) + by
                    if pending_claim is None or pending_claim["id"] != job_id:
                        leftover = True
                        continue
                    events.extend(self._claim(pending_claim, job_id))
                    pending_claim = None
                elif field == "stc":
                    self.stalls[job_id] = self.stalls.get(job_id, 0) + by
                    lease = self.leases.pop(job_id, None)
                    events.append({"type": "reap", "id": job_id,
                                   "attempt": lease.attempt if lease else "",
                                   "worker": lease.worker if lease else "",
                                   "deadline": lease.deadline if lease else "",
                                   "stalls": str(self.stalls[job_id]), "ts": ms})
                elif field == "atm" and job_id == end_job and not finished:
                    finished = True
                    events.extend(self._finish(job_id, end_token, target, ms, True))
                elif field in _LEASE_FIELDS:
                    leftover = True
            elif (name == "ZADD" and key == self.delayed and target == "delayed"
                  and not finished and end_job in args[3::2]):
                finished = True  # moveToDelayed with skipAttempt: no atm, the ZADD says it
                events.extend(self._finish(end_job, end_token, target, ms, True))
        if extending and checked is not None:
            events.append(self._extend_rejected(*checked, argv, tokens, len(keys)))
        if attempted and not swept:  # turned away: another check ran less than S before
            events.append({"type": "sweep", "worker": call.conn or "", "ran": "0",
                           "ts": attempted})
        if ending is not None and not finished:
            events.extend(self._finish(end_job, end_token, target,
                                       str(call.commands[-1][0] // 1000 if call.commands
                                           else call.stamp_us // 1000), False))
        empty = (len(keys) == 11 and keys[0] == self.wait and keys[1] == self.active
                 and not events and not leftover
                 and pending_claim is None)  # moveToActive found nothing to hand out
        return Decoded(events, undecoded=leftover or pending_claim is not None,
                       empty_claim=empty)

    def _claim(self, claim: dict[str, str], job_id: str) -> list[dict[str, str]]:
        token = claim["token"]
        attempt = str(self.attempts[job_id])
        worker = claim.get("worker") or self._holder(job_id, token)[1]
        self.tokens[(job_id, token)] = (attempt, worker)
        self.owners.setdefault(token.rpartition(":")[0], worker)
        self.leases[job_id] = _Lease(attempt, worker, claim["deadline"])
        if job_id in self.dead:  # BullMQ fetches a deferred failure only to fail it
            return []
        return [{**claim, "attempt": attempt, "worker": worker}]

    def _extend_rejected(self, job_id: str, ts: str, argv: list[str], tokens: Iterator[str],
                         numkeys: int) -> dict[str, str]:
        token = argv[0] if numkeys == 2 else next(tokens, "")
        attempt, worker = self._holder(job_id, token)
        return {"type": "extend_rejected", "id": job_id, "attempt": attempt,
                "current_attempt": str(self.attempts.get(job_id, "")), "worker": worker,
                "ts": ts}

    def _finish(self, job_id: str, token: str, target: str, ts: str,
                accepted: bool) -> list[dict[str, str]]:
        """The end of a lease by its holder's call: ``target`` completed or failed
        (moveToFinished), delayed or wait (a retry)."""
        attempt, worker = self._holder(job_id, token)
        if job_id in self.dead:
            return []  # the deferred failure of a job already recorded dead
        if not accepted:
            # ``target``: BullMQ answers a refused completion by trying to fail the job (or to
            # retry it), which is refused the same way: two rejections.
            return [{"type": "complete_rejected", "id": job_id, "attempt": attempt,
                     "current_attempt": str(self.attempts.get(job_id, "")), "worker": worker,
                     "target": target, "ts": ts}]
        self.leases.pop(job_id, None)
        if target in ("delayed", "wait"):  # handed back for another attempt
            return [{"type": "retry", "id": job_id, "attempt": attempt, "worker": worker,
                     "to": target, "ts": ts}]
        event = {"type": "complete", "id": job_id, "attempt": attempt, "worker": worker,
                 "ts": ts}
        if target == "failed":  # its last attempt failed: finished, not lost, not run again
            event["target"] = target
        return [event]
