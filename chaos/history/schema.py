"""Every event type of the history, typed: one definition each, with its encoder and decoder.

Two writers fill the events stream, both with flat string fields: the queue's Lua scripts write
the transitions (enqueue, claim, extend, complete, their rejections, reap, dead), and the runner,
the nemesis and the workers write their own events through ``record.lua`` (run, phase, fault,
heal, fault_skipped, handler_hog). ``history.jsonl`` keeps each entry as it was, one JSON object
per line, so the file format is the stream's own and every old run directory stays readable.

Reading goes in two steps, for speed: every line first becomes an ``events.Event``, the envelope
(stream id, type, server time and the lease fields the transitions share, already ints), which
is all the checker's hot path reads. A type's own fields stay strings in ``Event.extra`` until a
reader asks for the typed event: ``Fault.decode(event)``, or ``decode(event)`` for any type.
Only the decoders below read ``Event.extra``.

Writing: ``fields()`` is an event's stream fields, e.g. ``queue.record(**Heal(...).fields())``
(``None`` fields are left out); the server stamps ``ts`` and the stream assigns ``seq``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from chaos.history.events import Event


def _int(value: str | None) -> int | None:
    """A stored number: absent and "" read as None."""
    return int(value) if value else None


def _fields(type_: str, pairs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The stream fields of an event: ``None`` values left out, everything else as given."""
    return {"type": type_, **{name: value for name, value in pairs if value is not None}}


# --- queue transitions (written by the Lua scripts; the encoders serve tests and tools) -------


@dataclass(frozen=True, slots=True)
class Enqueue:
    """A job added. ``due``: a scheduled admission (EchoMQ's ``enqueue_in``/``enqueue_at``):
    it waits in the schedule until then (server ms) and is claimable only once promoted."""

    TYPE: ClassVar[str] = "enqueue"
    job_id: str
    kind: str = ""  # the job's kind, when it has one (``poison``: its handler never finishes)
    due: int | None = None
    # A flow (EchoMQ.Flows): ``parent``, a child's parent job; ``children``, a parent's count
    # of children, held out of pending until the last of them completes (a ``release``)
    parent: str = ""
    children: int | None = None
    ts: int = 0
    seq: str = ""

    @property
    def poison(self) -> bool:
        return self.kind == "poison"

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("kind", self.kind or None),
                                   ("due", self.due), ("parent", self.parent or None),
                                   ("children", self.children)))

    @classmethod
    def decode(cls, event: Event) -> Enqueue:
        get = event.extra.get
        return cls(event.job_id or "", get("kind", ""), _int(get("due")), get("parent", ""),
                   _int(get("children")), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Claim:
    """A lease handed out: ``attempt`` is its fencing token, it runs to ``deadline``.
    ``token``: the lock token the queue handed out with it, where the queue has one of its own
    (BullMQ: ``<worker uuid>:<n>``, what its lock check compares); "" where the attempt is the
    token (echomq)."""

    TYPE: ClassVar[str] = "claim"
    job_id: str
    attempt: int
    worker: str
    lease_ms: int | None = None
    deadline: int | None = None
    token: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("worker", self.worker), ("lease_ms", self.lease_ms),
                                   ("deadline", self.deadline), ("token", self.token or None)))

    @classmethod
    def decode(cls, event: Event) -> Claim:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "", event.lease_ms,
                   event.deadline, event.extra.get("token", ""), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Extend:
    """An accepted renewal; ``rtt_ms``: the client's previous extend round trip, if measured."""

    TYPE: ClassVar[str] = "extend"
    job_id: str
    attempt: int
    worker: str
    lease_ms: int | None = None
    deadline: int | None = None
    rtt_ms: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("worker", self.worker), ("lease_ms", self.lease_ms),
                                   ("deadline", self.deadline), ("rtt_ms", self.rtt_ms)))

    @classmethod
    def decode(cls, event: Event) -> Extend:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "", event.lease_ms,
                   event.deadline, rtt_ms(event), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class ExtendRejected:
    """A renewal of a lease that is no longer live (``current_attempt``: the live one's)."""

    TYPE: ClassVar[str] = "extend_rejected"
    job_id: str
    attempt: int
    worker: str
    current_attempt: int | None = None
    rtt_ms: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("current_attempt", self.current_attempt),
                                   ("worker", self.worker), ("rtt_ms", self.rtt_ms)))

    @classmethod
    def decode(cls, event: Event) -> ExtendRejected:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "",
                   event.current_attempt, rtt_ms(event), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Complete:
    """The holder's finish, accepted: the job is done. ``target``: "" (completed) or, where the
    queue lets a handler fail a job for good (BullMQ, its last attempt failed), ``failed``:
    finished all the same, neither lost nor to be run again."""

    TYPE: ClassVar[str] = "complete"
    job_id: str
    attempt: int
    worker: str
    target: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("worker", self.worker), ("target", self.target or None)))

    @classmethod
    def decode(cls, event: Event) -> Complete:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "",
                   event.extra.get("target", ""), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class CompleteRejected:
    """A finish refused. ``target`` (BullMQ): what the holder asked for: ``completed``,
    ``failed``, or a retry (``delayed``, ``wait``); "" for echomq's complete."""

    TYPE: ClassVar[str] = "complete_rejected"
    job_id: str
    attempt: int
    worker: str
    current_attempt: int | None = None
    target: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("current_attempt", self.current_attempt),
                                   ("worker", self.worker), ("target", self.target or None)))

    @classmethod
    def decode(cls, event: Event) -> CompleteRejected:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "",
                   event.current_attempt, event.extra.get("target", ""), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Retry:
    """The holder handed its job back for another attempt, accepted (BullMQ: its handler threw
    and the job's ``attempts`` allow another; EchoMQ: ``retry`` below its max attempts, or
    ``delay``, which runs the job again later without counting an attempt): the lease ends, the
    job waits again, ``to`` says where (BullMQ's ``delayed``: after a backoff; ``wait``: at
    once; EchoMQ's ``schedule``: until ``due``, server ms, then a promote puts it back in
    pending). It is not finished: it must still be completed (or dead-lettered) later, under a
    higher attempt."""

    TYPE: ClassVar[str] = "retry"
    job_id: str
    attempt: int
    worker: str
    to: str = ""
    due: int | None = None
    ts: int = 0
    seq: str = ""

    @property
    def waits_for_due(self) -> bool:
        """Does the job wait for a due time (a promote) before it can be claimed again?"""
        return self.to in ("schedule", "delayed")

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("worker", self.worker), ("to", self.to or None),
                                   ("due", self.due)))

    @classmethod
    def decode(cls, event: Event) -> Retry:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "",
                   event.extra.get("to", ""), _int(event.extra.get("due")), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Promote:
    """A job waiting in the schedule (a retry, a delay, a scheduled admission) moved back to
    pending, claimable again (EchoMQ's ``promote``), by ``worker``'s connection; ``due``: the
    score it had in the schedule (when it was due, server ms)."""

    TYPE: ClassVar[str] = "promote"
    job_id: str
    worker: str = ""
    due: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("worker", self.worker or None),
                                   ("due", self.due)))

    @classmethod
    def decode(cls, event: Event) -> Promote:
        return cls(event.job_id or "", event.worker or "", _int(event.extra.get("due")),
                   event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Reap:
    """The reaper took back a lapsed lease (the job is pending again); ``stalls``: how many
    times the job has now been recovered."""

    TYPE: ClassVar[str] = "reap"
    job_id: str
    attempt: int
    worker: str
    deadline: int | None = None
    stalls: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("worker", self.worker), ("deadline", self.deadline),
                                   ("stalls", self.stalls)))

    @classmethod
    def decode(cls, event: Event) -> Reap:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "", event.deadline,
                   _int(event.extra.get("stalls")), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Dead(Reap):
    """The reaper took back a lapsed lease past the stall limit: the job is dead-lettered."""

    TYPE: ClassVar[str] = "dead"


@dataclass(frozen=True, slots=True)
class Release:
    """A flow parent, held since its enqueue, let go by ``worker``'s connection: made claimable
    (``to`` pending: EchoMQ's fan-in in ``@complete``, the last child's complete, or
    ``@retry``'s for a dead child whose parent ignores its failure), or failed for good with it
    (``to`` dead: ``@retry``'s fail-parent arm, a child dead at its max attempts), finished,
    neither lost nor to run. ``flow_order`` holds a release to pending, and every claim of the
    parent, to its children all settled."""

    TYPE: ClassVar[str] = "release"
    job_id: str
    worker: str = ""
    to: str = "pending"
    ts: int = 0
    seq: str = ""

    @property
    def failed(self) -> bool:
        return self.to == "dead"

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("worker", self.worker or None),
                                   ("to", None if self.to == "pending" else self.to)))

    @classmethod
    def decode(cls, event: Event) -> Release:
        return cls(event.job_id or "", event.worker or "", event.extra.get("to", "pending"),
                   event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Remove:
    """A job removed by a user (EchoMQ's ``remove_job``): out of every set, its row deleted,
    neither completed nor lost. ``attempt``: its row's when removed; ``worker``: the remover's
    connection. A removal of a job under a live lease ends that lease (the holder's later calls
    find no row): the report lists it (``no_loss``'s ``removed_leased``)."""

    TYPE: ClassVar[str] = "remove"
    job_id: str
    worker: str = ""
    attempt: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("worker", self.worker or None),
                                   ("attempt", self.attempt)))

    @classmethod
    def decode(cls, event: Event) -> Remove:
        return cls(event.job_id or "", event.worker or "", event.attempt, event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Reprocess:
    """A finished job put back to wait (EchoMQ's ``reprocess_job``: out of ``dead``, into
    pending): its finish (failed for good, or dead-lettered) is undone, and it must be
    completed again; ``worker``: the connection that did it."""

    TYPE: ClassVar[str] = "reprocess"
    job_id: str
    worker: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("worker", self.worker or None)))

    @classmethod
    def decode(cls, event: Event) -> Reprocess:
        return cls(event.job_id or "", event.worker or "", event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Reassign:
    """A waiting job moved from one group's lane to another's (EchoMQ's ``Lanes.reassign``):
    ``group``, the lane it waits in now; ``worker``, the connection that moved it."""

    TYPE: ClassVar[str] = "reassign"
    job_id: str
    group: str
    worker: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("group", self.group),
                                   ("worker", self.worker or None)))

    @classmethod
    def decode(cls, event: Event) -> Reassign:
        return cls(event.job_id or "", event.extra.get("group", ""), event.worker or "",
                   event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class LockMarker:
    """An ``EchoMQ.Locks`` presence marker set (``held``: ``SET <row>:lock <token> PX ...``, at
    ``track_job``) or released (``DEL <row>:lock``, at ``untrack_job``) by ``worker``'s
    connection. Not part of the job's lifecycle (the lease is the active set's score): it only
    makes ``remove_job`` refuse the job (``EMQLOCK``). Counted in the report, judged by no
    invariant; its refreshes (``PEXPIRE``) and its mirror in the row (``HSET <row> lock``,
    ``HPEXPIRE``, ``HDEL <row> lock``) make no event."""

    TYPE: ClassVar[str] = "lock_marker"
    job_id: str
    worker: str = ""
    held: bool = True
    token: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("worker", self.worker or None),
                                   ("held", int(self.held)), ("token", self.token or None)))

    @classmethod
    def decode(cls, event: Event) -> LockMarker:
        get = event.extra.get
        return cls(event.job_id or "", event.worker or "", get("held", "1") != "0",
                   get("token", ""), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class HandlerHog:
    """A worker's handler held a lease for ``duration_ms`` on purpose (a ``cpu_hog`` fault)."""

    TYPE: ClassVar[str] = "handler_hog"
    job_id: str
    attempt: int
    worker: str
    duration_ms: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("attempt", self.attempt),
                                   ("worker", self.worker), ("duration_ms", self.duration_ms)))

    @classmethod
    def decode(cls, event: Event) -> HandlerHog:
        return cls(event.job_id or "", event.attempt or 0, event.worker or "",
                   _int(event.extra.get("duration_ms")), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Sweep:
    """A reaper's sweep: ``worker`` is the reaper (the recorder's view of whose connection made
    the call; the reference reap scripts write the name their caller passes). Written where the
    history source sees every sweep, those that recover nothing too: the reference reap scripts
    (one per call, before its reaps), the echomq dialect (every call that scans the active set
    for lapsed leases, ``ZRANGEBYSCORE active -inf ...``), and the bullmq dialect, for every
    ``moveStalledJobsToWait`` call, with ``ran`` false for one BullMQ's ``stalled-check`` key
    turned away (another worker's check ran less than stalledInterval before). The checker
    judges each reaper's cadence on them (``reap_cadence``, ``chaos.check.cadence``), and each
    BullMQ recovery on the sweeps that really ran (``chaos.queues.bullmq.bound``)."""

    TYPE: ClassVar[str] = "sweep"
    worker: str
    ran: bool = True
    # The calling connection's address (MONITOR's), where a process sweeps from several
    # connections of its own, each a loop of its own (EchoMQ.Consumer's: a ``park`` each)
    client: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("worker", self.worker), ("ran", None if self.ran else 0),
                                   ("client", self.client or None)))

    @classmethod
    def decode(cls, event: Event) -> Sweep:
        get = event.extra.get
        return cls(event.worker or "", get("ran", "1") != "0", get("client", ""), event.ts,
                   event.seq)


@dataclass(frozen=True, slots=True)
class Park:
    """A consumer loop parks: after draining what it could claim it blocks on the queue's wake
    list for at most ``timeout_ms`` (EchoMQ.Consumer's ``BLPOP wake beat``), then loops to its
    next sweep. ``worker`` is the process, ``client`` the connection (one loop each). Read by
    ``reap_cadence`` under ``[sut] reap_rhythm = "loop"`` (``chaos.check.cadence``): a loop's
    park to its next sweep is what it promises to keep within the reap interval; its sweep to
    its park is its drain, measured."""

    TYPE: ClassVar[str] = "park"
    worker: str
    client: str = ""
    timeout_ms: int | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("worker", self.worker), ("client", self.client or None),
                                   ("timeout_ms", self.timeout_ms)))

    @classmethod
    def decode(cls, event: Event) -> Park:
        get = event.extra.get
        return cls(event.worker or "", get("client", ""), _int(get("timeout_ms")), event.ts,
                   event.seq)


@dataclass(frozen=True, slots=True)
class GroupLimit:
    """A group's limit of live leases set (EchoMQ's ``glimit``, ``EchoMQ.Lanes.limit``):
    the echomq dialect writes one for each ``HSET glimit <group> <n>`` a call makes. The checker
    holds every later claim in that group to it (``group_limit``)."""

    TYPE: ClassVar[str] = "group_limit"
    group: str
    limit: int
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("group", self.group), ("limit", self.limit)))

    @classmethod
    def decode(cls, event: Event) -> GroupLimit:
        return cls(event.extra.get("group", ""), _int(event.extra.get("limit")) or 0,
                   event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class GroupPause:
    """A group's lane paused (EchoMQ's ``SADD paused <group>``, ``EchoMQ.Lanes.pause``): its
    jobs wait in the lane, served by no claim until it is resumed (``paused_group``)."""

    TYPE: ClassVar[str] = "group_pause"
    group: str
    worker: str = ""  # the connection that paused it
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("group", self.group), ("worker", self.worker or None)))

    @classmethod
    def decode(cls, event: Event) -> GroupPause:
        return cls(event.extra.get("group", ""), event.worker or "", event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class GroupResume:
    """A paused group's lane resumed (EchoMQ's ``SREM paused <group>``): claims may serve it."""

    TYPE: ClassVar[str] = "group_resume"
    group: str
    worker: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("group", self.group), ("worker", self.worker or None)))

    @classmethod
    def decode(cls, event: Event) -> GroupResume:
        return cls(event.extra.get("group", ""), event.worker or "", event.ts, event.seq)


def rtt_ms(event: Event) -> int | None:
    """An extend's (or rejected extend's) client-measured round trip, if it carries one."""
    value = event.extra.get("rtt_ms", "")
    return int(value) if value.isdigit() else None


# --- the runner's own events (written through record.lua) -------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """The run's settings, written first: the checker's configuration comes from here."""

    TYPE: ClassVar[str] = "run"
    scenario: str = ""
    seed: int | None = None
    lease_ms: int | None = None
    reap_interval_ms: int | None = None
    reap_limit: int | None = None
    heartbeat_ms: int | None = None
    tolerance_ms: int | None = None
    workers: tuple[str, ...] = ()
    concurrency: int | None = None
    protocol: str = ""
    reapers: int | None = None
    report_only: tuple[str, ...] = ()  # invariants judged but left out of the verdict
    wait_replicas: int | None = None
    max_stalls: int | None = None
    heartbeat: str = ""  # process | thread
    reap_allowance_ms: int | None = None  # the checker's reap_prompt allowance
    max_needless: int | None = None  # needless redeliveries the scenario tolerates (None: any)
    dialect: str = ""  # whose queue made the history (``bullmq``: its own recovery bound)
    # The processes the queue family promises sweep at least every reap interval, whose sweep
    # events the history source records (the reference reapers; BullMQ's workers). Empty: the
    # cadence is not judged (a queue of the user's, an older history).
    sweepers: tuple[str, ...] = ()
    sweep_allowance_ms: int | None = None  # the checker's reap_cadence allowance
    # How the sweepers keep their promise: "" on a grid (a sweep at least every reap interval),
    # "loop" once a loop (sweep, drain, park at most the interval: ``[sut] reap_rhythm``)
    reap_rhythm: str = ""
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (
            ("scenario", self.scenario), ("seed", self.seed), ("lease_ms", self.lease_ms),
            ("reap_interval_ms", self.reap_interval_ms), ("reap_limit", self.reap_limit),
            ("heartbeat_ms", self.heartbeat_ms), ("tolerance_ms", self.tolerance_ms),
            ("workers", ",".join(self.workers)), ("concurrency", self.concurrency),
            ("protocol", self.protocol), ("reapers", self.reapers),
            ("report_only", ",".join(self.report_only)), ("wait_replicas", self.wait_replicas),
            ("max_stalls", self.max_stalls), ("heartbeat", self.heartbeat),
            ("reap_allowance_ms", self.reap_allowance_ms), ("max_needless", self.max_needless),
            ("dialect", self.dialect or None), ("sweepers", ",".join(self.sweepers) or None),
            ("sweep_allowance_ms", self.sweep_allowance_ms),
            ("reap_rhythm", self.reap_rhythm or None)))

    @classmethod
    def decode(cls, event: Event) -> Run:
        get = event.extra.get
        return cls(
            get("scenario", ""), _int(get("seed")), event.lease_ms,
            _int(get("reap_interval_ms")), _int(get("reap_limit")), _int(get("heartbeat_ms")),
            _int(get("tolerance_ms")), _names(get("workers")), _int(get("concurrency")),
            get("protocol", ""), _int(get("reapers")), _names(get("report_only")),
            _int(get("wait_replicas")), _int(get("max_stalls")), get("heartbeat", ""),
            _int(get("reap_allowance_ms")), _int(get("max_needless")), get("dialect", ""),
            _names(get("sweepers")), _int(get("sweep_allowance_ms")), get("reap_rhythm", ""),
            event.ts, event.seq)


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(name for name in (value or "").split(",") if name)


@dataclass(frozen=True, slots=True)
class Phase:
    """A phase begins (warmup, chaos, drain, ``capacity-step-N``, ``capacity-settle-N``) or the
    run ends (``end``)."""

    TYPE: ClassVar[str] = "phase"
    name: str
    drained: bool | None = None  # end only: the queue emptied before the drain timed out
    aborted: bool = False  # end only: the run was cut short
    cause: str = ""  # end of an aborted run: interrupt | infra | internal
    rate: float | None = None  # capacity steps: the offered rate
    # end only: the jobs the queue held back by its operator's choice when the drain ended
    # (EchoMQ: waiting in a paused group's lane), as the store listed them
    held: tuple[str, ...] = ()
    ts: int = 0
    seq: str = ""

    @property
    def ended_normally(self) -> bool:
        """The run's normal end: only then is the drain judged."""
        return self.name == "end" and not self.aborted

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (
            ("phase", self.name), ("drained", None if self.drained is None else int(self.drained)),
            ("aborted", int(self.aborted) if self.name == "end" else None),
            ("cause", self.cause or None), ("rate", self.rate),
            ("held", ",".join(self.held) or None)))

    @classmethod
    def decode(cls, event: Event) -> Phase:
        get = event.extra.get
        drained = get("drained")
        rate = get("rate")
        held = get("held")
        return cls(get("phase", ""), None if not drained else drained != "0",
                   get("aborted", "0") != "0", get("cause", ""), float(rate) if rate else None,
                   tuple(held.split(",")) if held else (), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault took effect on ``worker`` (a worker, or a store node for a store fault)."""

    TYPE: ClassVar[str] = "fault"
    fault_id: str
    kind: str
    worker: str
    target: str = ""  # as the scenario named it (``random 1``, ``holding_oldest_lease``, ...)
    duration_ms: int | None = None
    # The holder could not act (kill, pause, partition), not just slowed (latency, clock skew):
    # a lease lost under it is a needed redelivery, not a needless one. Absent reads as cut off.
    cuts_off: bool = True
    killed_ts: int | None = None  # store faults: when the node went down
    down_ms: int | None = None
    promoted_ms: int | None = None  # failovers: when a replica took over
    new_primary: str | None = None
    # The kind's own settings (latency_ms, toxic, ...): as given when written, strings when read.
    parameters: dict[str, Any] = field(default_factory=dict)
    ts: int = 0
    seq: str = ""
    # False: no one planned it, the store did it on its own (Sentinel failed over unasked, seen
    # by the runtime's watch). Absent reads as planned: every older history's faults were.
    planned: bool = True
    # A ``holding_oldest_lease`` fault only: did a worker still hold a live lease when the
    # nemesis looked again at the instant it applied it (False: nobody did, it hit its earlier
    # pick, holding nothing). None: not such a fault, or an older history.
    holder_found: bool | None = None

    @property
    def is_store(self) -> bool:
        """A store fault (``valkey_restart``, ``failover``): figures only, it strands no lease."""
        return self.killed_ts is not None

    def fields(self) -> dict[str, Any]:
        return {**_fields(self.TYPE, (
            ("kind", self.kind), ("worker", self.worker), ("fault_id", self.fault_id),
            ("target", self.target or None), ("duration_ms", self.duration_ms),
            ("cuts_off", int(self.cuts_off)), ("killed_ts", self.killed_ts),
            ("down_ms", self.down_ms))), **self.parameters, **_fields(self.TYPE, (
                ("promoted_ms", self.promoted_ms), ("new_primary", self.new_primary),
                ("planned", None if self.planned else 0),
                ("holder_found", None if self.holder_found is None else int(self.holder_found))
            ))}

    @classmethod
    def decode(cls, event: Event) -> Fault:
        extra = event.extra
        get = extra.get
        return cls(
            get("fault_id") or event.seq, get("kind", ""), event.worker or "", get("target", ""),
            _int(get("duration_ms")), get("cuts_off", "1") != "0", _int(get("killed_ts")),
            _int(get("down_ms")), _int(get("promoted_ms")), get("new_primary"),
            {name: value for name, value in extra.items() if name not in _FAULT_FIELDS},
            event.ts, event.seq, get("planned", "1") != "0",
            None if not get("holder_found") else get("holder_found") != "0")


_FAULT_FIELDS = frozenset(("fault_id", "kind", "target", "duration_ms", "cuts_off", "killed_ts",
                           "down_ms", "promoted_ms", "new_primary", "planned", "holder_found"))


@dataclass(frozen=True, slots=True)
class Heal:
    """The fault ``fault_id`` ends (recorded while it still holds, so the window in the history
    lies inside the real one). A kill is never healed; a crashed worker's restart is."""

    TYPE: ClassVar[str] = "heal"
    fault_id: str
    kind: str
    worker: str
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("kind", self.kind), ("worker", self.worker),
                                   ("fault_id", self.fault_id)))

    @classmethod
    def decode(cls, event: Event) -> Heal:
        get = event.extra.get
        return cls(get("fault_id", ""), get("kind", ""), event.worker or "", event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class FaultSkipped:
    """A planned fault found no live target when it was due."""

    TYPE: ClassVar[str] = "fault_skipped"
    kind: str
    target: str
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("kind", self.kind), ("target", self.target)))

    @classmethod
    def decode(cls, event: Event) -> FaultSkipped:
        get = event.extra.get
        return cls(get("kind", ""), get("target", ""), event.ts, event.seq)


@dataclass(frozen=True, slots=True)
class Blind:
    """Evidence the history lacks, from ``ts`` on (written by a history source that could not
    see everything: the MONITOR recorder). ``lacks``: ``transition`` (a call on the queue's keys
    was not decoded, a gap hid writes, the feed broke: what it did is unknown) or ``holder`` (a
    transition was decoded but whose connection made it is unknown). ``job_id``: the job it
    concerns; None: it may concern any job. The checker blinds, not fails, an invariant whose
    offences stand on it (docs/design.md §4)."""

    TYPE: ClassVar[str] = "blind"
    lacks: str
    why: str
    job_id: str | None = None
    ts: int = 0
    seq: str = ""

    def fields(self) -> dict[str, Any]:
        return _fields(self.TYPE, (("id", self.job_id), ("lacks", self.lacks),
                                   ("why", self.why)))

    @classmethod
    def decode(cls, event: Event) -> Blind:
        get = event.extra.get
        return cls(get("lacks", TRANSITION_EVIDENCE), get("why", ""), event.job_id or None,
                   event.ts, event.seq)


TRANSITION_EVIDENCE, HOLDER_EVIDENCE = "transition", "holder"  # what a Blind event lacks


TypedEvent = (Enqueue | Claim | Extend | ExtendRejected | Complete | CompleteRejected | Retry
              | Promote | Reap | Dead | Release | Remove | Reprocess | Reassign | Sweep | Park
              | GroupLimit | GroupPause | GroupResume | LockMarker | HandlerHog | Run | Phase
              | Fault | Heal | FaultSkipped | Blind)
TRANSITIONS: tuple[type[TypedEvent], ...] = (
    Enqueue, Claim, Extend, ExtendRejected, Complete, CompleteRejected, Retry, Promote, Reap,
    Dead, Release, Remove, Reprocess, Reassign)
RUNNER_EVENTS: tuple[type[TypedEvent], ...] = (Run, Phase, Fault, Heal, FaultSkipped)
EVENT_TYPES: dict[str, type[TypedEvent]] = {
    kind.TYPE: kind for kind in (*TRANSITIONS, Sweep, Park, GroupLimit, GroupPause, GroupResume,
                                 LockMarker, HandlerHog, *RUNNER_EVENTS, Blind)}
# A worker's own calls on a lease it was handed (accepted or rejected): each one reached the store.
CLIENT_CALLS = (Claim.TYPE, Extend.TYPE, Complete.TYPE, ExtendRejected.TYPE,
                CompleteRejected.TYPE, Retry.TYPE)


def decode(event: Event) -> TypedEvent | None:
    """The typed event of a history line; None for a type this version does not know."""
    kind = EVENT_TYPES.get(event.type)
    return kind.decode(event) if kind is not None else None
