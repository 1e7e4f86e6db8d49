"""The lease-queue protocol under test (docs/design.md §2): keys, scripts, and a thin client.

Every transition is one Lua script in ``lua/`` beside this module. Each script reads ``TIME``
itself and appends its event to the events stream in the same call, so the history holds an
event exactly when the transition happened, stamped by the clock that scores the leases.

Protocol variants (the mutant zoo)
----------------------------------
A checker is only worth something if it can fail, so besides the sound protocol the client speaks
deliberately broken variants, each one small, named deviation (``QueueClient(protocol=...)``).
The mutants break the queue, never the observer: in every variant each event is written by the
same script that performs the transition, ``ts`` is that script's server ``TIME``, and events carry
the same fields as the sound ones.

======================  ==================================================  =====================
protocol                deviates in                                         where
======================  ==================================================  =====================
sound                   nothing: the reference protocol                     the sound scripts
unfenced-complete       complete and extend ignore the attempt (fencing     complete_unfenced.lua
                        token): a stale holder's complete is accepted       extend_unfenced.lua
client-clock            claim/extend deadlines and the reaper's "now" come  claim_client_clock.lua
                        from the caller's clock (``protocol.clock``), not   extend_client_clock.lua
                        the server's; event ts stays server TIME            reap_client_clock.lua
nonatomic-reap          reap scans, waits ``race_window_ms``, then moves    reap_scan.lua
                        each id unconditionally in its own round trip       reap_move.lua
single-batch-reaper     the reaper sweeps one batch per tick, even a full   reference.reaper.sweep
                        one
nonatomic-claim         claim pops (ZPOPMIN), waits ``claim_gap_ms``, then  claim_lease.lua
                        leases in a second round trip: dying in the gap
                        loses the job
extend-resurrects       extend checks the attempt but not that the id is    extend_resurrects.lua
                        still active, and re-adds it (ZADD without XX)
no-reaper               nothing recovers lapsed leases (the runtime starts  reference.reaper refuses
                        no reaper)                                          to run
grace-reaper            the reaper takes a lease only once it lapsed a      reap_client_clock.lua
                        grace period ago (``reap_grace_ms``; the reaper     (server now - grace)
                        gives 1.5 intervals): every reap is late
idle-backoff-reaper     the reaper doubles its sleep after each sweep that  reference.reaper.run
                        found nothing (up to 8 intervals)
reused-token            a worker whose complete was rejected re-reads the   reference.worker
                        job's current attempt and completes with it: it
                        completes another holder's lease
short-lease             claims and extends grant half the asked lease_ms,   the sound scripts
                        and record the length granted honestly
complete-skips-active   complete checks the attempt but not that the lease  complete_skips_active
                        is still active: a reaped holder's late complete    .lua
                        is accepted while the job waits in pending
padded-lease            claims and extends write a deadline half a lease    claim_padded.lua
                        past the lease_ms they record (now + 1.5 lease_ms): claim_many_padded.lua
                        the event says lease_ms, the deadline says longer   extend_padded.lua
sparse-reaper           the reaper sweeps on every third tick of its grid   reference.reaper.run
                        only: every interval but one in three goes unswept
======================  ==================================================  =====================
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from chaos.names import PROTOCOLS
from chaos.protocol.clock import LocalClock
from chaos.protocol.wire import WAIT_TIMEOUT_MS, NotReplicated, call_script

# The worker's claim path, called packed on a pooled connection (chaos.protocol.wire); the rest
# keep redis-py's command path, whose behaviour through a Sentinel failover the store-fault tests
# pin (the packed path failed test_store_faults' sentinel failover: not yet understood).
PACKED_SCRIPTS = ("claim_many",)
# the sound scripts
SCRIPT_NAMES = ("enqueue", "claim", "claim_many", "extend", "complete", "reap", "record")

# A job kind: enqueued with this kind (and a payload starting with it), it crashes whichever
# reference worker claims it.
POISON = "poison"

# Defaults of the two widened windows, used when the caller gives none (sound: no window at all).
NONATOMIC_CLAIM_GAP_MS = 100  # nonatomic-claim: between the pop and the lease
NONATOMIC_REAP_WINDOW_MS = 100  # nonatomic-reap: between the scan and the moves
SENTINEL_SCHEME = "valkey+sentinel"  # valkey+sentinel://HOST:PORT/SERVICE: ask Sentinel


@dataclass(frozen=True)
class QueueKeys:
    """Key names of one queue. All share the ``{queue}`` hash tag (one cluster slot)."""

    prefix: str = "emq:"
    queue: str = "jobs"

    @property
    def base(self) -> str:
        return f"{self.prefix}{{{self.queue}}}:"

    @property
    def pending(self) -> str:
        return self.base + "pending"

    @property
    def active(self) -> str:
        return self.base + "active"

    @property
    def events(self) -> str:
        return self.base + "events"

    @property
    def dead(self) -> str:
        """ZSET of dead-lettered jobs (past the stall limit), scored by when they died."""
        return self.base + "dead"

    @property
    def schedule(self) -> str:
        """ZSET of jobs waiting for a due time (EchoMQ's retries, delays and scheduled
        admissions), scored by it; the reference protocol has none."""
        return self.base + "schedule"

    @property
    def job_prefix(self) -> str:
        return self.base + "job:"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id


@dataclass(frozen=True)
class Claimed:
    """A lease the caller now holds: ``attempt`` is its fencing token."""

    job_id: str
    payload: str
    attempt: int
    deadline_ms: int


def load_script_source(name: str) -> str:
    return resources.files("chaos.protocol").joinpath("lua", f"{name}.lua").read_text()


# The schemes the Valkey world uses, spelled the way redis-py's from_url expects them.
_SCHEMES = {"valkey": "redis", "valkeys": "rediss"}


def redis_url(url: str) -> str:
    """``url`` for redis-py: ``valkey://`` and ``valkeys://`` become ``redis://`` and
    ``rediss://``; ``redis://``, ``rediss://`` and ``unix://`` pass as they are."""
    scheme, sep, rest = url.partition("://")
    return f"{_SCHEMES.get(scheme.lower(), scheme)}{sep}{rest}" if sep else url


def redis_client(url: str, password: str | None = None, **kwargs: Any) -> redis.Redis:
    """A redis-py client for ``url`` that behaves the same on every redis-py version: RESP2
    replies, and no silent reconnect-and-retry (a failed call is the caller's to count or
    retry; redis-py 6+ would otherwise retry 3 times with up to 10 s of back-off)."""
    kwargs.setdefault("protocol", 2)
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    client: redis.Redis = redis.Redis.from_url(redis_url(url), password=password, **kwargs)
    return client


class _PrimaryConnection(SentinelManagedConnection):
    """A connection to whichever node Sentinel names primary *now*. redis-py 6+ reconnects a
    dropped connection through ``connect_check_health`` to the address it had before, so after
    a failover it keeps reaching the demoted node (redis-py issue #3874): ask Sentinel first."""

    def connect_check_health(self, check_health: bool = True,
                             retry_socket_connect: bool = True) -> None:
        if not self._sock and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health,
                                     retry_socket_connect=retry_socket_connect)


def connect(url: str, password: str | None = None, **kwargs: Any) -> redis.Redis:
    """A client for ``url``; the password is given, in the URL, or in ``ECHOMQ_VALKEY_PASSWORD``
    (how a run hands it to its children: the environment, never a command line)."""
    password = password or os.environ.get("ECHOMQ_VALKEY_PASSWORD") or None
    kwargs.setdefault("socket_timeout", 10)
    kwargs.setdefault("socket_connect_timeout", 5)
    if url.startswith(SENTINEL_SCHEME + "://"):
        # The current primary, as Sentinel names it; after a failover the pool asks again.
        parts = urlsplit(url)
        service = parts.path.strip("/") or "echomq"
        sentinel = Sentinel(
            [(parts.hostname or "127.0.0.1", parts.port or 26379)],
            sentinel_kwargs={"password": password, "socket_timeout": 2,
                             "socket_connect_timeout": 2},
        )
        primary: redis.Redis = sentinel.master_for(
            service, decode_responses=True, password=password, protocol=2,
            connection_class=_PrimaryConnection, **{"retry": Retry(NoBackoff(), 0), **kwargs})
        return primary
    return redis_client(url, password, decode_responses=True, **kwargs)


class QueueClient:
    """Calls the protocol scripts by SHA; loads each once and reloads after a server restart.

    ``protocol`` picks the sound protocol or one of the mutant variants (``PROTOCOLS``, table in
    the module docstring). The public methods keep their meaning for every variant; the variant
    changes how they do it (see ``_VARIANTS`` at the end of this module). ``clock`` is the
    caller's clock: only ``client-clock`` reads it. ``claim_gap_ms`` (nonatomic-claim) and
    ``race_window_ms`` (nonatomic-reap) widen that variant's window; other protocols ignore them.
    ``wait_replicas`` > 0 sends ``WAIT n`` after every script call on the same connection and
    raises ``NotReplicated`` when fewer replicas confirm it in time.
    ``completed_retention_ms`` > 0: a completed job's hash expires that long after its accepted
    complete (sound protocol; 0 keeps it for good), so a long run's memory stays flat.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: QueueKeys,
        protocol: str = "sound",
        clock: LocalClock | None = None,
        *,
        claim_gap_ms: int | None = None,
        race_window_ms: int | None = None,
        record_events: bool = True,
        wait_replicas: int = 0,
        reap_grace_ms: int = 0,
        completed_retention_ms: int = 0,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}: expected one of "
                             f"{', '.join(PROTOCOLS)}")
        if not record_events and protocol != "sound":
            raise ValueError("record_events=False is for benchmarking the sound protocol only")
        self.client = client
        self.keys = keys
        self.protocol = protocol
        self.clock = clock if clock is not None else LocalClock()
        self.claim_gap_ms = claim_gap_ms if claim_gap_ms is not None else (
            NONATOMIC_CLAIM_GAP_MS if protocol == "nonatomic-claim" else 0)
        self.race_window_ms = race_window_ms if race_window_ms is not None else (
            NONATOMIC_REAP_WINDOW_MS if protocol == "nonatomic-reap" else 0)
        self.wait_replicas = wait_replicas
        self.reap_grace_ms = reap_grace_ms  # grace-reaper only
        self._variant = _VARIANTS[protocol]
        # Benchmarks only (what the history costs): enqueue, claim, extend and complete write no
        # event. Such a run leaves nothing to check, so no scenario can ask for it.
        self._no_event: tuple[str, ...] = () if record_events else ("0",)
        # complete.lua's ARGV[6] follows its optional ARGV[5] ('1' = record, as when absent)
        self._complete_extra: tuple[Any, ...] = (
            (*(self._no_event or ("1",)), completed_retention_ms) if completed_retention_ms > 0
            else self._no_event)
        self._sources = {name: load_script_source(name)
                         for name in (*SCRIPT_NAMES, *self._variant.scripts)}
        self._shas: dict[str, str] = {}
        self.last_extend_rtt_ms: int | None = None  # client-measured, see _extend_with
        # nonatomic-claim: called with the popped id inside the gap (the kill_in_claim_gap
        # fault's hook: the reference worker holds there and says so)
        self.in_claim_gap: Callable[[str], None] | None = None
        self.load_scripts()

    @property
    def script_names(self) -> tuple[str, ...]:
        """The scripts this client loaded: the sound ones plus its variant's."""
        return tuple(self._sources)

    def load_scripts(self) -> None:
        for name, source in self._sources.items():
            self._shas[name] = self.client.script_load(source)

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if name not in self._shas:
            raise ValueError(f"script {name!r} is not part of protocol {self.protocol!r}")
        try:
            return self._evalsha(name, keys, args)
        except NoScriptError:
            # The server lost its script cache (restart, SCRIPT FLUSH): load again, retry once.
            self.load_scripts()
            return self._evalsha(name, keys, args)

    def _evalsha(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if name in PACKED_SCRIPTS:
            return call_script(self.client, name, ("EVALSHA", self._shas[name], len(keys),
                                                    *keys, *args), self.wait_replicas)
        if not self.wait_replicas:
            return self.client.evalsha(self._shas[name], len(keys), *keys, *args)
        # WAIT counts the writes of its own connection: one pipeline keeps both on one.
        pipe = self.client.pipeline(transaction=False)
        pipe.evalsha(self._shas[name], len(keys), *keys, *args)
        pipe.wait(self.wait_replicas, WAIT_TIMEOUT_MS)
        reply, replicas = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply  # e.g. NoScriptError: handled by the caller like a plain EVALSHA's
        if isinstance(replicas, Exception):  # e.g. "UNBLOCKED": this primary was just demoted
            raise NotReplicated(f"{name}: WAIT failed: {replicas}")
        if int(replicas) < self.wait_replicas:
            raise NotReplicated(f"{name}: WAIT saw {replicas} of {self.wait_replicas} "
                                f"replica(s) within {WAIT_TIMEOUT_MS} ms")
        return reply

    # --- the transitions (dispatched to the protocol's implementation) --------------------
    def enqueue(self, job_id: str, payload: str = "", kind: str = "") -> bool:
        """``kind`` (e.g. ``poison``) is stored on the job and named in its enqueue event."""
        k = self.keys
        record = "0" if self._no_event else "1"  # ARGV[4], the record flag; ARGV[5] the kind
        return bool(self._call("enqueue", [k.pending, k.events],
                               [k.job_prefix, job_id, payload, record, kind]))

    def enqueue_batch(self, jobs: Sequence[tuple[str, str]]) -> list[str]:
        """Enqueue (id, payload) pairs in one pipelined round trip (one script call each); the
        ids the server accepted (a repeated id is refused). The load generator's fast path: same
        script, same events. With ``wait_replicas`` one WAIT closes the batch (it counts every
        earlier write of the connection) and ``NotReplicated`` means none is acknowledged."""
        k = self.keys
        pending = list(jobs)
        accepted: list[str] = []
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for job_id, payload in pending:
                pipe.evalsha(self._shas["enqueue"], 2, k.pending, k.events, k.job_prefix,
                             job_id, payload, *self._no_event)
            if self.wait_replicas:
                pipe.wait(self.wait_replicas, WAIT_TIMEOUT_MS)
            replies = pipe.execute(raise_on_error=False)
            if self.wait_replicas:
                replicas = replies.pop()
                if isinstance(replicas, Exception) or int(replicas) < self.wait_replicas:
                    raise NotReplicated(f"enqueue batch: WAIT saw {replicas} of "
                                        f"{self.wait_replicas} replica(s)")
            errors = [reply for reply in replies
                      if isinstance(reply, Exception) and not isinstance(reply, NoScriptError)]
            if errors:
                raise errors[0]
            accepted += [job_id for (job_id, _), reply in zip(pending, replies, strict=True)
                         if reply and not isinstance(reply, Exception)]
            # The server lost its script cache (restart, SCRIPT FLUSH): load, resend the rest.
            pending = [job for job, reply in zip(pending, replies, strict=True)
                       if isinstance(reply, NoScriptError)]
            if not pending or attempt:
                break
            self.load_scripts()
        if pending:
            raise NoScriptError(f"enqueue script missing after a reload ({len(pending)} jobs)")
        return accepted

    def claim(self, lease_ms: int, worker: str) -> Claimed | None:
        return self._variant.claim(self, lease_ms, worker)

    @property
    def claims_in_batches(self) -> bool:
        """Whether ``claim_many`` claims several jobs in one call (else one per call: the
        variants whose claim is not the sound script, e.g. nonatomic-claim's two steps)."""
        return self._variant.claim_many is not None

    def claim_many(self, count: int, lease_ms: int, worker: str) -> list[Claimed]:
        """Up to ``count`` jobs, oldest first, in one call (claim_many.lua): each leased and
        recorded exactly as ``claim`` would. A variant that cannot batch claims just one."""
        if self._variant.claim_many is None:
            claimed = self.claim(lease_ms, worker)
            return [] if claimed is None else [claimed]
        return self._variant.claim_many(self, count, lease_ms, worker)

    def extend(self, job_id: str, attempt: int, lease_ms: int, worker: str) -> int | None:
        """The new deadline, or None when the lease is no longer ours."""
        return self._variant.extend(self, job_id, attempt, lease_ms, worker)

    def complete(self, job_id: str, attempt: int, worker: str) -> bool:
        return self._variant.complete(self, job_id, attempt, worker)

    def reap(self, limit: int, max_stalls: int = 0, sweeper: str = "") -> int:
        """Return lapsed leases to pending; how many reap (or dead) events were written.
        ``max_stalls`` > 0: a job's stall past it is dead-lettered instead (reap.lua). Every
        call records a ``sweep`` event with ``sweeper``, the reaper's name, moving anything or
        not: the reaper's cadence as evidence (docs/design.md §4, reap_cadence)."""
        return self._variant.reap(self, limit, max_stalls, sweeper)

    # --- sound ------------------------------------------------------------------------------
    def _claim_sound(self, lease_ms: int, worker: str) -> Claimed | None:
        k = self.keys
        reply = self._call(
            "claim", [k.pending, k.active, k.events],
            [k.job_prefix, lease_ms, worker, *self._no_event]
        )
        return _claimed(reply)

    def _claim_many_sound(self, count: int, lease_ms: int, worker: str) -> list[Claimed]:
        k = self.keys
        reply = self._call("claim_many", [k.pending, k.active, k.events],
                           [k.job_prefix, lease_ms, worker, count, *self._no_event])
        return [Claimed(str(reply[i]), reply[i + 1] or "", int(reply[i + 2]), int(reply[i + 3]))
                for i in range(0, len(reply), 4)]

    def _extend_sound(self, job_id: str, attempt: int, lease_ms: int, worker: str) -> int | None:
        return self._extend_with("extend", job_id, attempt, lease_ms, worker, *self._no_event)

    def _complete_sound(self, job_id: str, attempt: int, worker: str) -> bool:
        return self._complete_with("complete", job_id, attempt, worker, *self._complete_extra)

    def _reap_sound(self, limit: int, max_stalls: int = 0, sweeper: str = "") -> int:
        k = self.keys
        return int(self._call("reap", [k.active, k.pending, k.events, k.dead],
                              [k.job_prefix, limit, max_stalls, sweeper]))

    def _extend_with(self, script: str, job_id: str, attempt: int, lease_ms: int, worker: str,
                     *extra: Any) -> int | None:
        k = self.keys
        previous_rtt = "" if self.last_extend_rtt_ms is None else self.last_extend_rtt_ms
        started = time.monotonic()
        reply = self._call(script, [k.active, k.events],
                           [k.job_prefix, job_id, attempt, lease_ms, worker, previous_rtt, *extra])
        # Carried by the NEXT extend event (this one is written before its reply travels back):
        # the history then holds the extend round trips a lease has to absorb (``sweep``).
        self.last_extend_rtt_ms = round((time.monotonic() - started) * 1000)
        return int(reply) if reply else None

    def _complete_with(self, script: str, job_id: str, attempt: int, worker: str,
                       *extra: Any) -> bool:
        k = self.keys
        reply = self._call(
            script, [k.active, k.events], [k.job_prefix, job_id, attempt, worker, *extra]
        )
        return bool(reply)

    # --- MUTANT unfenced-complete: complete and extend ignore the attempt -------------------
    def _complete_unfenced(self, job_id: str, attempt: int, worker: str) -> bool:
        return self._complete_with("complete_unfenced", job_id, attempt, worker)

    def _extend_unfenced(self, job_id: str, attempt: int, lease_ms: int,
                         worker: str) -> int | None:
        return self._extend_with("extend_unfenced", job_id, attempt, lease_ms, worker)

    # --- MUTANT client-clock: deadlines and the reaper's "now" from the caller's clock ------
    def _claim_client_clock(self, lease_ms: int, worker: str) -> Claimed | None:
        k = self.keys
        reply = self._call("claim_client_clock", [k.pending, k.active, k.events],
                           [k.job_prefix, lease_ms, worker, self.clock.now_ms()])
        return _claimed(reply)

    def _extend_client_clock(self, job_id: str, attempt: int, lease_ms: int,
                             worker: str) -> int | None:
        return self._extend_with("extend_client_clock", job_id, attempt, lease_ms, worker,
                                 self.clock.now_ms())

    def _reap_client_clock(self, limit: int, max_stalls: int = 0, sweeper: str = "") -> int:
        k = self.keys
        return int(self._call("reap_client_clock", [k.active, k.pending, k.events, k.dead],
                              [k.job_prefix, limit, self.clock.now_ms(), max_stalls, sweeper]))

    # --- MUTANT nonatomic-reap: scan, wait, then move each id in its own round trip ---------
    def _reap_nonatomic(self, limit: int, max_stalls: int = 0, sweeper: str = "") -> int:
        scanned = self.reap_scan(limit, sweeper)
        if scanned and self.race_window_ms:
            time.sleep(self.race_window_ms / 1000)  # widen the window another reaper races in
        for job_id in scanned:
            self.reap_move(job_id, max_stalls)
        return len(scanned)

    def reap_scan(self, limit: int, sweeper: str = "") -> list[str]:
        """nonatomic-reap step 1: ids whose lease lapsed on the server clock (moves nothing;
        records the ``sweep``)."""
        k = self.keys
        return [str(job_id) for job_id in self._call("reap_scan", [k.active, k.events],
                                                     [limit, sweeper])]

    def reap_move(self, job_id: str, max_stalls: int = 0) -> bool:
        """nonatomic-reap step 2: push ``job_id`` back to pending unconditionally (or dead-letter
        it past ``max_stalls``), record a ``reap`` (or ``dead``). True when it was still in
        active (False: it was moved anyway)."""
        k = self.keys
        return bool(self._call("reap_move", [k.active, k.pending, k.events, k.dead],
                               [k.job_prefix, job_id, max_stalls]))

    # --- MUTANT nonatomic-claim: pop, wait, then lease in a second round trip ---------------
    def _claim_nonatomic(self, lease_ms: int, worker: str) -> Claimed | None:
        job_id = self.claim_pop()
        if job_id is None:
            return None
        if self.claim_gap_ms:
            # The job is now in neither pending nor active: dying here loses it.
            time.sleep(self.claim_gap_ms / 1000)
        if self.in_claim_gap is not None:
            self.in_claim_gap(job_id)
        return self.claim_lease(job_id, lease_ms, worker)

    def claim_pop(self) -> str | None:
        """nonatomic-claim step 1: take the oldest pending id (plain ZPOPMIN, no event)."""
        popped = self.client.zpopmin(self.keys.pending)
        return str(popped[0][0]) if popped else None

    def claim_lease(self, job_id: str, lease_ms: int, worker: str) -> Claimed:
        """nonatomic-claim step 2: lease an id popped by ``claim_pop``; records the ``claim``."""
        k = self.keys
        claimed = _claimed(self._call("claim_lease", [k.active, k.events],
                                      [k.job_prefix, job_id, lease_ms, worker]))
        assert claimed is not None  # claim_lease.lua always leases
        return claimed

    # --- MUTANT extend-resurrects: extend re-adds an id that is no longer active ------------
    def _extend_resurrects(self, job_id: str, attempt: int, lease_ms: int,
                           worker: str) -> int | None:
        return self._extend_with("extend_resurrects", job_id, attempt, lease_ms, worker)

    # --- MUTANT grace-reaper: a lease is reaped only a grace period after its deadline -------
    def _reap_grace(self, limit: int, max_stalls: int = 0, sweeper: str = "") -> int:
        k = self.keys
        cutoff = self.server_time_ms() - self.reap_grace_ms
        return int(self._call("reap_client_clock", [k.active, k.pending, k.events, k.dead],
                              [k.job_prefix, limit, cutoff, max_stalls, sweeper]))

    # --- MUTANT short-lease: half the asked lease, recorded as granted ---------------------
    def _claim_short(self, lease_ms: int, worker: str) -> Claimed | None:
        return self._claim_sound(lease_ms // 2, worker)

    def _claim_many_short(self, count: int, lease_ms: int, worker: str) -> list[Claimed]:
        return self._claim_many_sound(count, lease_ms // 2, worker)

    def _extend_short(self, job_id: str, attempt: int, lease_ms: int, worker: str) -> int | None:
        return self._extend_sound(job_id, attempt, lease_ms // 2, worker)

    # --- MUTANT padded-lease: the deadline written is half a lease past the one recorded ---
    def _claim_padded(self, lease_ms: int, worker: str) -> Claimed | None:
        k = self.keys
        return _claimed(self._call("claim_padded", [k.pending, k.active, k.events],
                                   [k.job_prefix, lease_ms, worker]))

    def _claim_many_padded(self, count: int, lease_ms: int, worker: str) -> list[Claimed]:
        k = self.keys
        reply = self._call("claim_many_padded", [k.pending, k.active, k.events],
                           [k.job_prefix, lease_ms, worker, count])
        return [Claimed(str(reply[i]), reply[i + 1] or "", int(reply[i + 2]), int(reply[i + 3]))
                for i in range(0, len(reply), 4)]

    def _extend_padded(self, job_id: str, attempt: int, lease_ms: int,
                       worker: str) -> int | None:
        return self._extend_with("extend_padded", job_id, attempt, lease_ms, worker)

    # --- MUTANT complete-skips-active: the attempt checked, the active set not ------------
    def _complete_skips_active(self, job_id: str, attempt: int, worker: str) -> bool:
        return self._complete_with("complete_skips_active", job_id, attempt, worker)

    def current_attempt(self, job_id: str) -> int:
        """The job's current fencing token as the store holds it (reused-token reads it)."""
        return int(self.client.hget(self.keys.job(job_id), "attempts") or 0)

    # --- runner helpers (the same for every protocol) -------------------------------------
    def record(self, **fields: Any) -> int:
        """Append a runner event (fault, heal, phase …) to the history; returns its server time."""
        return self.record_entry(**fields)[0]

    def record_entry(self, **fields: Any) -> tuple[int, str]:
        """``record``, returning the server time and the event's stream entry id."""
        args: list[Any] = []
        for field, value in fields.items():
            args += [field, "" if value is None else value]
        stamp, entry_id = self._call("record", [self.keys.events], args)
        return int(stamp), entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def backlog(self) -> tuple[int, int]:
        """(pending, active) sizes."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys.pending)
        pipe.zcard(self.keys.active)
        pending, active = pipe.execute()
        return int(pending), int(active)

    def lease_holders_oldest_first(self, limit: int = 100) -> list[str]:
        """Workers holding the ``limit`` earliest-deadline leases still live by the server's
        clock, oldest first (repeats kept). A lapsed lease waiting for its reap is left out:
        faulting its holder would strand nothing."""
        now_ms = self.server_time_ms()
        oldest = self.client.zrangebyscore(self.keys.active, f"({now_ms}", "+inf", 0, limit)
        if not oldest:
            return []
        pipe = self.client.pipeline(transaction=False)
        for job_id in oldest:
            pipe.hget(self.keys.job(job_id), "worker")
        return [str(holder) for holder in pipe.execute() if holder]

    def queue_exists(self) -> bool:
        k = self.keys
        return bool(self.client.exists(k.pending, k.active, k.events, k.dead))


def _claimed(reply: Any) -> Claimed | None:
    if not reply:
        return None
    job_id, payload, attempt, deadline = reply
    return Claimed(str(job_id), payload or "", int(attempt), int(deadline))


@dataclass(frozen=True)
class _Variant:
    """How one protocol performs each client transition: the sound way unless named here.
    (single-batch-reaper, idle-backoff-reaper, sparse-reaper and no-reaper deviate in the
    reaper process, reused-token in the worker, not in the client.)"""

    scripts: tuple[str, ...] = ()  # loaded besides the sound SCRIPT_NAMES
    claim: Callable[[QueueClient, int, str], Claimed | None] = QueueClient._claim_sound
    # None: claim_many claims one job per call with ``claim``
    claim_many: Callable[[QueueClient, int, int, str], list[Claimed]] | None = (
        QueueClient._claim_many_sound)
    extend: Callable[[QueueClient, str, int, int, str], int | None] = QueueClient._extend_sound
    complete: Callable[[QueueClient, str, int, str], bool] = QueueClient._complete_sound
    reap: Callable[[QueueClient, int, int, str], int] = QueueClient._reap_sound


_VARIANTS: dict[str, _Variant] = {
    "sound": _Variant(),
    "unfenced-complete": _Variant(
        scripts=("complete_unfenced", "extend_unfenced"),
        complete=QueueClient._complete_unfenced,
        extend=QueueClient._extend_unfenced,
    ),
    "client-clock": _Variant(
        scripts=("claim_client_clock", "extend_client_clock", "reap_client_clock"),
        claim=QueueClient._claim_client_clock,
        claim_many=None,
        extend=QueueClient._extend_client_clock,
        reap=QueueClient._reap_client_clock,
    ),
    "nonatomic-reap": _Variant(
        scripts=("reap_scan", "reap_move"),
        reap=QueueClient._reap_nonatomic,
    ),
    "single-batch-reaper": _Variant(),  # chaos.reference.reaper.sweep: one batch per tick
    "nonatomic-claim": _Variant(
        scripts=("claim_lease",),
        claim=QueueClient._claim_nonatomic,
        claim_many=None,
    ),
    "extend-resurrects": _Variant(
        scripts=("extend_resurrects",),
        extend=QueueClient._extend_resurrects,
    ),
    "no-reaper": _Variant(),  # the runtime starts no reaper; chaos.reference.reaper refuses to run
    "grace-reaper": _Variant(scripts=("reap_client_clock",), reap=QueueClient._reap_grace),
    "idle-backoff-reaper": _Variant(),  # chaos.reference.reaper.run: backs off when idle
    "reused-token": _Variant(),  # chaos.reference.worker: retries a rejected complete
    "short-lease": _Variant(claim=QueueClient._claim_short, extend=QueueClient._extend_short,
                            claim_many=QueueClient._claim_many_short),
    "complete-skips-active": _Variant(scripts=("complete_skips_active",),
                                      complete=QueueClient._complete_skips_active),
    "padded-lease": _Variant(scripts=("claim_padded", "claim_many_padded", "extend_padded"),
                             claim=QueueClient._claim_padded,
                             claim_many=QueueClient._claim_many_padded,
                             extend=QueueClient._extend_padded),
    "sparse-reaper": _Variant(),  # chaos.reference.reaper.run: sweeps every third tick only
}
assert tuple(_VARIANTS) == PROTOCOLS
