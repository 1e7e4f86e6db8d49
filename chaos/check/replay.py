"""The lease replay: one pass over a history, in stream order, that tracks every job's live lease
(attempt, holder, deadline) and every worker's fault windows, and collects the facts the
judgements (``judgements.py``) rule on.

Facts that are offences the moment they happen (a call outside the live lease, a claim that
reuses a fencing token, a reap before the deadline) are noted as they are met, with the server
time, so a report can say how soon the history showed the bug. Everything else (who was enqueued,
completed, dead-lettered; which leases a fault stranded and when they were recovered) is kept
for the end-of-run judgements.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from chaos.check.evidence import NEEDS, BlindSpots
from chaos.check.verdict import EXAMPLES, Offences, Redeliveries, StrandedLease
from chaos.history.events import Event
from chaos.history.schema import (
    Blind,
    Enqueue,
    Fault,
    FaultSkipped,
    GroupLimit,
    GroupPause,
    GroupResume,
    Heal,
    LockMarker,
    Park,
    Phase,
    Promote,
    Reassign,
    Release,
    Remove,
    Reprocess,
    Retry,
    Run,
    Sweep,
)
from chaos.history.windows import UNKNOWN_WORKER, FaultWindows


# A msgspec Struct: built in C (a claim builds one per event, millions in a long run), and
# gc=False: it holds only ints and strings.
class Lease(msgspec.Struct, gc=False):
    attempt: int
    worker: str
    deadline: int
    renewed: str  # history position (seq) of the claim or latest accepted extend
    claimed_ts: int  # when its handler started (for needless_by_duration)
    renewed_ts: int  # server time of the claim or latest accepted extend


def lease_deadline(event: Event) -> int:
    """The lease deadline on the server clock: the score the grant wrote to ``active`` (the
    event's ``deadline``: the script's own copy, or the ZADD's score the MONITOR dialect read),
    which is what the reaper goes by. Only a history without it (hand-written, or older) falls
    back to the renewal time + the recorded ``lease_ms``."""
    if event.deadline is not None:
        return event.deadline
    return event.ts + event.lease_ms if event.lease_ms is not None else event.ts


@dataclass(slots=True)
class LapsedLease:
    """A live lease's deadline and what the history showed next of it: its reap (or dead letter),
    or an accepted call of its holder's after the deadline with no reap before it (the reaper
    had not taken it yet). ``reap_prompt`` judges how late that was."""

    job_id: str
    attempt: int
    worker: str
    deadline: int
    seen_ts: int  # the reap, or the late call
    reaped: bool  # False: a late accepted extend/complete, the lease still unreaped


@dataclass
class ReplayFacts:
    """What one pass over the history established."""

    events: int = 0
    last_ts: int = 0
    first_ts: int | None = None  # the earliest server time: with last_ts, the span the history
    # covers (``evaluate`` tells from it whether the clock stepped)
    run: Run | None = None  # the first run event: the checker's default configuration
    end: Phase | None = None  # the last ``end`` phase event: how the run ended
    ended_normally: bool = False  # the history shows the run's normal end (``run_completed``)
    # Enqueued job -> the highest attempt (fencing token) any claim of it carried, None while
    # unclaimed: one table for both, since growing a table per job is the replay's main cost.
    enqueued: dict[str, int | None] = field(default_factory=dict)
    poison: set[str] = field(default_factory=set)  # enqueued as poison jobs
    first_enqueue_ts: int | None = None
    completes: Counter[str] = field(default_factory=Counter)  # accepted completes per job
    second_complete_ts: dict[str, int] = field(default_factory=dict)  # job -> its 2nd complete
    last_complete_ts: int | None = None
    leases: dict[str, Lease] = field(default_factory=dict)  # still live at the end
    reap_times: dict[str, list[int]] = field(default_factory=dict)  # job -> each recovery's ts
    dead: dict[str, tuple[int, int]] = field(default_factory=dict)  # job -> (recoveries, ts)
    stranded: list[StrandedLease] = field(default_factory=list)  # dismissed ones left out
    # Held when a fault struck, then its holder acted on it (or a finish ended it): not
    # stranded after all (``chaos.check.taken_back``: which of them lapsed first)
    dismissed: list[StrandedLease] = field(default_factory=list)
    slowed: int = 0  # leases held when a fault only slowed their holder (not stranded)
    lapsed: list[LapsedLease] = field(default_factory=list)  # every reap; late live calls
    # Lease length granted (the deadline written to active - ts of a claim or accepted extend)
    # -> how many, and the first EXAMPLES grants of each length (the judgement knows which
    # length is configured).
    granted: dict[int, int] = field(default_factory=dict)
    granted_examples: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    # Of those, the grants whose recorded lease_ms disagrees with the deadline written (by more
    # than 1 ms): length granted -> how many, and the first EXAMPLES of them.
    misrecorded: dict[int, int] = field(default_factory=dict)
    misrecorded_examples: list[dict[str, Any]] = field(default_factory=list)
    needless_examples: list[dict[str, Any]] = field(default_factory=list)
    needless: list[tuple[int, str]] = field(default_factory=list)  # each needless reap: ts, job
    drained: bool | None = None  # the end event's word: the queue emptied before the drain ended
    last_phase_ts: int | None = None  # the latest phase start (not the end): before any stop
    first_phase_ts: int | None = None  # the first phase start: the run under way, reapers up
    windows: FaultWindows = field(default_factory=FaultWindows)
    faults: int = 0
    # Every fault as applied, with how many live leases its target held at it (by the history):
    # what ``exercised.py`` reads, beside ``stranded``, to say whether recovery was exercised.
    faults_applied: list[tuple[Fault, int]] = field(default_factory=list)
    chaos_ts: int | None = None  # the chaos phase's start: where the plan's fault times count
    faults_skipped: list[FaultSkipped] = field(default_factory=list)  # planned, never applied
    store_faults: list[Fault] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    redeliveries: Redeliveries = field(default_factory=Redeliveries)
    needless_by_fault: Counter[str] = field(default_factory=Counter)
    # Handler durations (claim to the holder's own complete, accepted or rejected), in ms ->
    # attempts: of leases completed live, and of leases needlessly reaped first.
    ran_ms: dict[int, int] = field(default_factory=dict)
    ran_needless_ms: dict[int, int] = field(default_factory=dict)
    # Needless redeliveries whose holder's own complete of that attempt never came (in no
    # bucket of the above: the holder died later, or its queue credits the call to another
    # attempt, as Celery's ack is to the worker's latest claim)
    needless_unended: int = 0
    retried: int = 0  # accepted retries: a holder handed its job back for another attempt
    promoted: int = 0  # jobs the schedule gave back to pending (promote events)
    # Jobs waiting for a due time (a retry into the schedule or BullMQ's delayed set, a
    # scheduled admission) and not claimed, promoted or settled since: job -> when due (None:
    # not recorded). Still there at the end: waiting in the schedule, neither pending nor lost.
    scheduled: dict[str, int | None] = field(default_factory=dict)
    # The reapers' sweeps the history shows (``sweep`` events: the reference reap scripts', the
    # echomq dialect's scans of the active set, BullMQ's stalled checks), as (server time, the
    # reaper or worker that swept, whether it ran), in history order.
    sweeps: list[tuple[int, str, bool]] = field(default_factory=list)
    # The pace of the run (``chaos.check.pace``): each job's enqueue to its first claim, ms;
    # jobs enqueued and not claimed yet -> their enqueue's server ms (claimed: dropped);
    # accepted completes per server second; the drain phase's start.
    claim_waits: list[int] = field(default_factory=list)
    awaiting_claim: dict[str, int] = field(default_factory=dict)
    completes_by_second: Counter[int] = field(default_factory=Counter)
    drain_ts: int | None = None
    # Each sweep that ran and each park, in history order (a park and the sweep after it are
    # often in one ms): (server ms, process, connection, True for a sweep), the loops' own
    # timelines under ``[sut] reap_rhythm = "loop"`` (``chaos.check.cadence``)
    loop_events: list[tuple[int, str, str, bool]] = field(default_factory=list)
    refused_under_fault: int = 0  # live holders' calls refused while a fault touched them
    # What the history lacks (its blind events): offences that may be its doing are blinded.
    blind: BlindSpots = field(default_factory=BlindSpots)
    # Offences met on the way (``__post_init__``: each sees the blind spots):
    stray_calls: Offences = field(init=False)  # claim/extend/complete/retry vs the live lease
    stale_claims: Offences = field(init=False)  # fencing token not above an earlier one, or a
    # lock token handed out again while it may still be presented
    early_reaps: Offences = field(init=False)  # reap/dead of a non-live lease, or early
    refused_live: Offences = field(init=False)  # the live holder's call refused, no fault
    # Group lanes (EchoMQ.Lanes): each group's limit of live leases as last set (``group_limit``
    # events), how many grouped claims there were, the most live at once per group, and the
    # claims that went past a limit.
    group_limits: dict[str, int] = field(default_factory=dict)
    grouped_claims: int = 0
    most_live: dict[str, int] = field(default_factory=dict)
    over_limit: Offences = field(init=False)
    # Paused groups (``group_pause`` / ``group_resume``): the groups paused at the end, how many
    # pauses the history shows, each grouped job's group (its enqueue's), the claims of a job
    # while its group was paused, and the jobs the store held back when the drain ended (the end
    # event's ``held``: waiting in a paused lane, as the store listed them).
    paused_groups: set[str] = field(default_factory=set)
    pauses: int = 0
    job_groups: dict[str, str] = field(default_factory=dict)
    paused_claims: Offences = field(init=False)
    held: frozenset[str] = frozenset()
    # Flows (EchoMQ.Flows): each parent's count of children (its enqueue's), each child's
    # parent, how many of a parent's children have completed, the parents released, and the
    # claims or releases of a parent before its children all completed.
    flow_children: dict[str, int] = field(default_factory=dict)
    child_parent: dict[str, str] = field(default_factory=dict)
    children_done: Counter[str] = field(default_factory=Counter)
    children_seen: Counter[str] = field(default_factory=Counter)  # parent -> children enqueued
    released: int = 0
    parents_failed: int = 0  # held parents failed for good with a dead child (release to dead)
    early_parents: Offences = field(init=False)
    # A user's removals (EchoMQ's remove_job): job -> when; the removals of a job under a live
    # lease (its holder, attempt, the remover); reprocessed jobs (a finish undone) and how often;
    # EchoMQ.Locks' markers set and released.
    removed: dict[str, int] = field(default_factory=dict)
    removed_leased: list[dict[str, Any]] = field(default_factory=list)
    reprocessed: Counter[str] = field(default_factory=Counter)
    lock_markers: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.stray_calls = self.offences("exclusive_lease")
        self.stale_claims = self.offences("attempts_monotonic")
        self.early_reaps = self.offences("no_premature_reap")
        self.refused_live = self.offences("live_lease_honoured")
        self.over_limit = self.offences("group_limit")
        self.paused_claims = self.offences("paused_group")
        self.early_parents = self.offences("flow_order")

    def offences(self, invariant: str) -> Offences:
        """An empty tally of ``invariant``'s offences that knows what evidence it needs."""
        return Offences(blind=self.blind, needs=NEEDS[invariant])


# A refusal this long before the live lease's deadline proves it was refused while live: MONITOR
# stamps are floored to ms, and a script reads the clock once, at its start.
CLOCK_SLACK_MS = 2


class LockTokens:
    """The lock tokens claims handed out, where the queue has tokens of its own (BullMQ): a
    token is handed out again only once the lease that held it ended by its holder's own call
    (BullMQ's finish hands its token to the next job it fetches). Handed out while another live
    lease holds it, or for a job whose lease with it was reaped (its holder may still present
    it), one lock check lets two holders through."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[str, int]] = {}  # token -> (job, attempt) of its last claim
        self.live: dict[str, str] = {}  # job -> the token its live lease holds
        self.reaped: set[tuple[str, str]] = set()  # (job, token) of leases reaped

    def claimed(self, job_id: str, attempt: int, token: str,
                leases: dict[str, Lease]) -> dict[str, Any] | None:
        """A claim handing ``token`` out; what it reuses, if anything (before the claim's own
        lease is recorded)."""
        reuse: dict[str, Any] | None = None
        held = self.last.get(token)
        if held is not None:
            lease = leases.get(held[0])
            if lease is not None and lease.attempt == held[1] \
                    and self.live.get(held[0]) == token:
                reuse = {"token": token, "held_by_job": held[0], "held_by_attempt": held[1],
                         "reason": "a lock token handed out while a live lease holds it"}
        if reuse is None and (job_id, token) in self.reaped:
            reuse = {"token": token, "reason": "a lock token handed out again for a job whose "
                     "lease with it was reaped"}
        self.last[token] = (job_id, attempt)
        self.live[job_id] = token
        return reuse

    def ended(self, job_id: str, reaped: bool) -> None:
        token = self.live.pop(job_id, None)
        if reaped and token is not None:
            self.reaped.add((job_id, token))


class _Replay:
    """The replay's state as it walks the history, and one small handler per event type
    (``handlers``). The hot path is enqueue, claim, extend, complete (millions in a long run):
    their handlers take the tables they touch as attributes bound once, and the recovery
    bookkeeping is only touched for a job it holds."""

    def __init__(self) -> None:
        facts = self.facts = ReplayFacts()
        self.enqueued, self.poison, self.completes = facts.enqueued, facts.poison, facts.completes
        self.scheduled = facts.scheduled
        self.leases, self.windows = facts.leases, facts.windows
        self.lapsed_leases, self.granted = facts.lapsed, facts.granted
        self.claimed_unenqueued: dict[str, int] = {}  # the same as enqueued's attempts, for
        # jobs claimed before (or without) their enqueue: a broken queue's, rare
        self.lapsed: dict[tuple[str, int], tuple[str, int, bool]] = {}  # (job, attempt) ->
        # (worker, claimed_ts, needless): leases reaped from under a holder that may still
        # complete late
        self.stranded: list[StrandedLease] = []
        self.open_stranded: dict[str, list[StrandedLease]] = {}  # job -> stranded leases not
        # yet resolved
        self.awaiting_reclaim: dict[str, list[StrandedLease]] = {}
        self.awaiting_recomplete: dict[str, list[StrandedLease]] = {}
        # Leases granted for the run's own lease_ms, with the recorded lease_ms agreeing, are
        # only counted (the hot path); any other length or a disagreeing record goes through
        # odd_grant.
        self.run_lease_ms = -1  # no length is -1 (nor None) until the run event says
        self.run_length_grants = 0
        self.tokens = LockTokens()
        self.handlers: dict[str, Callable[[Event], None]] = {
            "enqueue": self.enqueue, "claim": self.claim, "extend": self.extend,
            "complete": self.complete, "retry": self.retry, Promote.TYPE: self.promote,
            "reap": self.recovered, "dead": self.recovered, Fault.TYPE: self.fault,
            Heal.TYPE: self.heal,
            Blind.TYPE: self.blind, Sweep.TYPE: self.sweep, Park.TYPE: self.park,
            FaultSkipped.TYPE: self.fault_skipped, Run.TYPE: self.run, Phase.TYPE: self.phase,
            GroupLimit.TYPE: self.group_limit, GroupPause.TYPE: self.group_pause,
            GroupResume.TYPE: self.group_resume, Release.TYPE: self.release,
            Remove.TYPE: self.remove, Reprocess.TYPE: self.reprocess,
            LockMarker.TYPE: self.lock_marker, Reassign.TYPE: self.reassign,
        }
        self.group_leases: dict[str, set[str]] = {}  # group -> jobs claimed in it, maybe live

    # --- the queue's transitions ----------------------------------------------------------
    def enqueue(self, event: Event) -> None:
        job_id = event.job_id or ""
        if job_id not in self.enqueued:
            self.facts.awaiting_claim[job_id] = event.ts
        self.enqueued.setdefault(job_id, None)  # enqueued again: it keeps its highest attempt
        claimed_unenqueued = self.claimed_unenqueued
        if claimed_unenqueued and job_id in claimed_unenqueued:  # claimed before it
            self.enqueued[job_id] = claimed_unenqueued.pop(job_id)
        if event.extra:  # only a kind or a due time makes extra fields
            enqueue = Enqueue.decode(event)
            if enqueue.poison:
                self.poison.add(job_id)
            if enqueue.due is not None:  # a scheduled admission: waits to be promoted
                self.scheduled[job_id] = enqueue.due
            if group := event.extra.get("group"):
                self.facts.job_groups[job_id] = group
            if enqueue.parent:
                self.facts.child_parent[job_id] = enqueue.parent
                self.facts.children_seen[enqueue.parent] += 1
            if enqueue.children is not None:
                self.facts.flow_children[job_id] = enqueue.children
        facts = self.facts
        if facts.first_enqueue_ts is None:
            facts.first_enqueue_ts = event.ts

    def claim(self, event: Event) -> None:
        job_id, ts, leases = event.job_id or "", event.ts, self.leases
        scheduled = self.scheduled
        if scheduled and job_id in scheduled:
            del scheduled[job_id]
        previous = leases.get(job_id)
        if previous is not None:  # two holders of one job at once
            self.facts.stray_calls.add({"job": job_id, "op": "claim", "attempt": event.attempt,
                                        "worker": event.worker, "seq": event.seq,
                                        "live_attempt": previous.attempt,
                                        "live_worker": previous.worker}, ts)
            del leases[job_id]
        attempt = event.attempt or 0
        worker = event.worker or UNKNOWN_WORKER
        enqueued = self.enqueued
        highest = enqueued.get(job_id)
        if highest is None:
            if job_id in enqueued:  # its first claim: the usual case
                enqueued[job_id] = attempt
                enqueued_ts = self.facts.awaiting_claim.pop(job_id, None)
                if enqueued_ts is not None:
                    self.facts.claim_waits.append(ts - enqueued_ts)
            else:
                self.unenqueued_claim(event, attempt, worker)
        elif attempt > highest:
            enqueued[job_id] = attempt
        else:
            self.stale_claim(event, attempt, worker, highest)
        if event.extra and (token := event.extra.get("token")):
            reuse = self.tokens.claimed(job_id, attempt, token, leases)
            if reuse is not None:
                self.facts.stale_claims.add({"job": job_id, "attempt": attempt,
                                             "worker": worker, "seq": event.seq, **reuse}, ts)
        deadline = event.deadline  # lease_deadline(event), inlined: the hot path
        if deadline is None:
            deadline = lease_deadline(event)
        leases[job_id] = Lease(attempt, worker, deadline, event.seq, ts, ts)
        self.granted_for(event, deadline)
        awaiting_reclaim = self.awaiting_reclaim
        if awaiting_reclaim and job_id in awaiting_reclaim:
            for item in awaiting_reclaim.pop(job_id):
                item.reclaim_ts = ts
                self.awaiting_recomplete.setdefault(job_id, []).append(item)
        if event.extra and (group := event.extra.get("group")):
            self.grouped_claim(event, job_id, group, worker)
        if self.facts.flow_children and job_id in self.facts.flow_children:
            self.parent_served(event, job_id)

    def parent_served(self, event: Event, job_id: str) -> None:
        """A flow parent claimed or released: an offence unless each of its children has
        settled (``flow_order``); judged only where the history shows each of its children
        enqueued (a cross-queue flow's are in another queue's)."""
        facts = self.facts
        done, children = facts.children_done.get(job_id, 0), facts.flow_children[job_id]
        if done < children and facts.children_seen.get(job_id, 0) >= children:
            facts.early_parents.add({"job": job_id, "op": event.type, "seq": event.seq,
                                     "worker": event.worker, "children": children,
                                     "children_completed": done}, event.ts)

    def release(self, event: Event) -> None:
        """A held parent let go: claimable, or failed for good with a dead child (a finish,
        as a holder's complete with ``target`` failed, but no holder's)."""
        job_id, facts = event.job_id or "", self.facts
        if Release.decode(event).failed:
            facts.parents_failed += 1
            count = self.completes.get(job_id, 0) + 1
            self.completes[job_id] = count
            facts.last_complete_ts = event.ts
            if count == 2:
                facts.second_complete_ts[job_id] = event.ts
            return
        facts.released += 1
        if job_id in facts.flow_children:
            self.parent_served(event, job_id)

    def remove(self, event: Event) -> None:
        """A user removed the job: it leaves the queue, neither completed nor lost; a live
        lease on it ends with it (its holder's later calls find no row), and is reported."""
        job_id, facts = event.job_id or "", self.facts
        facts.removed[job_id] = event.ts
        lease = self.leases.pop(job_id, None)
        if lease is not None:
            facts.removed_leased.append({"job": job_id, "attempt": lease.attempt,
                                         "holder": lease.worker, "remover": event.worker,
                                         "seq": event.seq, "ts": event.ts,
                                         "deadline": lease.deadline})
            self.lease_ended(job_id)
        self.scheduled.pop(job_id, None)

    def reprocess(self, event: Event) -> None:
        """A finished job (failed for good, or dead-lettered) put back to wait: its finish is
        undone, it is to be completed again."""
        job_id, facts = event.job_id or "", self.facts
        facts.reprocessed[job_id] += 1
        if self.completes.get(job_id):
            self.completes[job_id] -= 1
            if not self.completes[job_id]:
                del self.completes[job_id]
        facts.dead.pop(job_id, None)

    def reassign(self, event: Event) -> None:
        """A waiting job into another group's lane: its group is that one now."""
        reassign = Reassign.decode(event)
        self.facts.job_groups[reassign.job_id] = reassign.group

    def lock_marker(self, event: Event) -> None:
        self.facts.lock_markers["set" if LockMarker.decode(event).held else "released"] += 1

    def grouped_claim(self, event: Event, job_id: str, group: str, worker: str) -> None:
        """A claim in a group's lane: with the job, how many of the group's leases are live
        (held until completed, reaped, retried or dead-lettered: the queue's own count), and
        whether that passes the group's limit."""
        facts, leases = self.facts, self.leases
        facts.grouped_claims += 1
        if group in facts.paused_groups:  # served while its lane was to wait
            facts.paused_claims.add({"job": job_id, "group": group, "attempt": event.attempt,
                                     "worker": worker, "seq": event.seq}, event.ts)
        members = self.group_leases.setdefault(group, set())
        members.add(job_id)
        members.intersection_update(leases)  # the ones whose lease ended are gone
        live = len(members)
        if live > facts.most_live.get(group, 0):
            facts.most_live[group] = live
        limit = facts.group_limits.get(group)
        if limit is not None and live > limit:
            facts.over_limit.add({"job": job_id, "group": group, "attempt": event.attempt,
                                  "worker": worker, "seq": event.seq, "live": live,
                                  "limit": limit, "live_jobs": sorted(members)[:10]}, event.ts)

    def group_limit(self, event: Event) -> None:
        limit = GroupLimit.decode(event)
        self.facts.group_limits[limit.group] = limit.limit

    def group_pause(self, event: Event) -> None:
        self.facts.paused_groups.add(GroupPause.decode(event).group)
        self.facts.pauses += 1

    def group_resume(self, event: Event) -> None:
        self.facts.paused_groups.discard(GroupResume.decode(event).group)

    def granted_for(self, event: Event, deadline: int) -> None:
        """A lease granted by a claim or an accepted extend: counted when it is the run's own
        length, recorded as such; anything else through ``odd_grant``."""
        length = event.lease_ms
        run_lease_ms = self.run_lease_ms
        if deadline - event.ts == run_lease_ms and (length is None or length == run_lease_ms):
            self.run_length_grants += 1
        else:
            self.odd_grant(event, deadline)

    def live_call(self, event: Event) -> tuple[Lease | None, bool]:
        """An extend, complete or retry met against the job's live lease: (the live lease,
        whether the call carries its attempt, so the store acted on it). A call that is not
        the live lease holder's is a stray call; one after the deadline, the reaper not having
        taken the lease yet, a lapsed lease (``reap_prompt``)."""
        job_id, ts = event.job_id or "", event.ts
        lease = self.leases.get(job_id)
        # live: the call carries the live lease's attempt, so the store acted on it; it is the
        # holder's only if the worker matches too (a token reused by another worker).
        if lease is not None and lease.attempt == event.attempt:
            live = True
            holder = lease.worker == (event.worker or UNKNOWN_WORKER)
            if ts > lease.deadline:  # lapsed, yet the reaper had not taken it
                self.lapsed_leases.append(LapsedLease(job_id, lease.attempt, lease.worker,
                                                      lease.deadline, ts, False))
        else:
            live = holder = False
        if not holder:
            self.facts.stray_calls.add({
                "job": job_id, "op": event.type, "attempt": event.attempt,
                "worker": event.worker, "seq": event.seq,
                "live_attempt": lease.attempt if lease else None,
                "live_worker": lease.worker if lease else None,
                "reason": "not the holder of the live lease" if live
                else "not the live lease's attempt",
            }, ts)
        return lease, live

    def extend(self, event: Event) -> None:
        lease, live = self.live_call(event)
        if live:
            assert lease is not None
            deadline = event.deadline
            if deadline is None:
                deadline = lease_deadline(event)
            lease.deadline = deadline
            lease.renewed = event.seq
            lease.renewed_ts = event.ts
            self.granted_for(event, deadline)
        open_stranded = self.open_stranded
        if open_stranded and (job_id := event.job_id or "") in open_stranded:
            self.holder_acted(job_id, event.attempt, event.worker)

    def retry(self, event: Event) -> None:
        """Handed back: the job waits for another attempt (in the schedule, until promoted,
        when it waits for a due time)."""
        lease, _ = self.live_call(event)
        self.facts.retried += 1
        job_id = event.job_id or ""
        retry = Retry.decode(event)
        if retry.waits_for_due:
            self.scheduled[job_id] = retry.due
        if lease is not None:
            del self.leases[job_id]
        self.lease_ended(job_id)

    def promote(self, event: Event) -> None:
        """Due again: pending, for a claim to take."""
        self.facts.promoted += 1
        self.scheduled.pop(event.job_id or "", None)

    def complete(self, event: Event) -> None:
        lease, live = self.live_call(event)
        job_id, ts, facts = event.job_id or "", event.ts, self.facts
        completes = self.completes
        count = completes.get(job_id, 0) + 1
        completes[job_id] = count
        child_parent = facts.child_parent
        if child_parent and count == 1 and job_id in child_parent:  # (failed for good too:
            facts.children_done[child_parent[job_id]] += 1  # a parent may ignore it)
        facts.last_complete_ts = ts
        if count == 2:
            facts.second_complete_ts[job_id] = ts
        facts.completes_by_second[ts // 1000] += 1
        scheduled = self.scheduled
        if scheduled and job_id in scheduled:
            del scheduled[job_id]
        if live:
            assert lease is not None
            if lease.worker == event.worker:
                ran_ms = facts.ran_ms
                ran = ts - lease.claimed_ts
                ran_ms[ran] = ran_ms.get(ran, 0) + 1
        elif self.lapsed:
            self.ended_late(event)
        awaiting_recomplete = self.awaiting_recomplete
        if awaiting_recomplete and job_id in awaiting_recomplete:
            for item in awaiting_recomplete.pop(job_id):
                item.recomplete_ts = ts
        if lease is not None:  # a completed job closes every lease on it
            del self.leases[job_id]
            if self.tokens.live or self.open_stranded and job_id in self.open_stranded:
                self.lease_ended(job_id)

    def recovered(self, event: Event) -> None:
        """A reap, or a dead letter: the reaper's recovery of a lapsed lease (the same checks
        on the lease), but a dead-lettered job leaves the queue instead of going back to
        pending."""
        job_id, ts, facts = event.job_id or "", event.ts, self.facts
        lease = self.leases.get(job_id)
        if lease is None or lease.attempt != event.attempt:
            facts.early_reaps.add({"job": job_id, "attempt": event.attempt, "seq": event.seq,
                                   "reason": "reaped a lease that was not live"}, ts)
        else:
            if ts < lease.deadline:
                facts.early_reaps.add({"job": job_id, "attempt": event.attempt,
                                       "seq": event.seq, "reap_ts": ts,
                                       "deadline": lease.deadline,
                                       "early_ms": lease.deadline - ts}, ts)
            self.lapsed_leases.append(LapsedLease(job_id, lease.attempt, lease.worker,
                                                  lease.deadline, ts, True))
            needless = False
            if event.type == "dead":
                pass  # not redelivered: the job left the queue
            elif self.windows.cut_off_between(lease.worker, lease.renewed, event.seq):
                facts.redeliveries.needed += 1
            else:
                facts.redeliveries.needless += 1
                needless = True
                slowed_by = self.windows.slowed_by(lease.worker, lease.renewed, event.seq)
                facts.needless_by_fault[slowed_by] += 1
                facts.needless.append((ts, job_id))
                if len(facts.needless_examples) < EXAMPLES:
                    facts.needless_examples.append({
                        "job": job_id, "attempt": lease.attempt, "worker": lease.worker,
                        "seq": event.seq, "renewed_ts": lease.renewed_ts,
                        "deadline": lease.deadline, "reap_ts": ts,
                        "holder_under": slowed_by})
            self.lapsed[(job_id, lease.attempt)] = (lease.worker, lease.claimed_ts, needless)
        reap_times = facts.reap_times
        if event.type == "reap":
            reap_times.setdefault(job_id, []).append(ts)
        else:
            facts.dead[job_id] = (len(reap_times.get(job_id, [])), ts)
            self.scheduled.pop(job_id, None)
        self.leases.pop(job_id, None)
        if self.tokens.live:
            self.tokens.ended(job_id, True)
        for item in self.open_stranded.pop(job_id, []):
            if item.attempt == event.attempt:
                item.reap_ts = ts
                self.awaiting_reclaim.setdefault(job_id, []).append(item)

    def rejected_call(self, event: Event) -> None:
        """A call the store refused (``<op>_rejected``): counted; the live holder's refused
        before its deadline is judged (``refused``)."""
        kind = event.type
        self.facts.rejected[kind] += 1
        if kind == "complete_rejected" and self.lapsed:
            self.ended_late(event)
        lease = self.leases.get(event.job_id or "")
        if (lease is not None and lease.attempt == event.attempt
                and lease.worker == (event.worker or UNKNOWN_WORKER)
                and event.ts + CLOCK_SLACK_MS < lease.deadline):
            self.refused(event, lease)

    # --- the run's own events -------------------------------------------------------------
    def fault(self, event: Event) -> None:
        fault = Fault.decode(event)
        facts = self.facts
        facts.faults += 1
        if fault.is_store:  # figures only, it strands no lease
            facts.store_faults.append(fault)
        window = self.windows.opened(fault)
        # the jobs its worker holds: live leases are few (those in flight), so a scan at each
        # fault is cheaper than keeping an index up to date at every claim
        struck = window.worker
        held_now = [held for held, lease in self.leases.items() if lease.worker == struck]
        facts.faults_applied.append((fault, len(held_now)))
        if not fault.cuts_off:  # its holder can still renew: slowed, not stranded
            facts.slowed += len(held_now)
            return
        for held in sorted(held_now):
            lease = self.leases[held]
            item = StrandedLease(held, lease.attempt, window.worker, event.ts, fault.fault_id,
                                 lease.renewed_ts)
            self.stranded.append(item)
            self.open_stranded.setdefault(held, []).append(item)

    def heal(self, event: Event) -> None:
        self.windows.healed(Heal.decode(event))

    def blind(self, event: Event) -> None:
        self.facts.blind.note(Blind.decode(event))

    def sweep(self, event: Event) -> None:
        ran = not event.extra or event.extra.get("ran") != "0"
        worker = event.worker or UNKNOWN_WORKER
        self.facts.sweeps.append((event.ts, worker, ran))
        if ran:
            self.facts.loop_events.append((event.ts, worker, event.extra.get("client", ""),
                                           True))

    def park(self, event: Event) -> None:
        self.facts.loop_events.append((event.ts, event.worker or UNKNOWN_WORKER,
                                       event.extra.get("client", ""), False))

    def fault_skipped(self, event: Event) -> None:
        self.facts.faults_skipped.append(FaultSkipped.decode(event))

    def run(self, event: Event) -> None:
        facts = self.facts
        if facts.run is None:  # the first run event: the checker's default configuration
            facts.run = Run.decode(event)
            self.run_lease_ms = -1 if facts.run.lease_ms is None else facts.run.lease_ms

    def phase(self, event: Event) -> None:
        phase, facts = Phase.decode(event), self.facts
        if phase.name != "end":
            facts.last_phase_ts = event.ts
            if phase.name == "chaos" and facts.chaos_ts is None:
                facts.chaos_ts = event.ts
            if phase.name == "drain" and facts.drain_ts is None:
                facts.drain_ts = event.ts
            if facts.first_phase_ts is None:
                facts.first_phase_ts = event.ts
        else:
            facts.end = phase
            facts.held = frozenset(phase.held)
        if phase.ended_normally:
            facts.ended_normally = True
            facts.drained = phase.drained

    # --- bookkeeping shared by the handlers -----------------------------------------------
    def stale_claim(self, event: Event, attempt: int, worker: str, earlier: int) -> None:
        self.facts.stale_claims.add({"job": event.job_id or "", "attempt": attempt,
                                     "worker": worker, "seq": event.seq,
                                     "earlier_attempt": earlier}, event.ts)

    def unenqueued_claim(self, event: Event, attempt: int, worker: str) -> None:
        """A claim of a job not enqueued (yet): its fencing tokens are vetted all the same."""
        job_id = event.job_id or ""
        highest = self.claimed_unenqueued.get(job_id)
        if highest is None or attempt > highest:
            self.claimed_unenqueued[job_id] = attempt
        else:
            self.stale_claim(event, attempt, worker, highest)

    def ended_late(self, event: Event) -> None:
        """The complete (rejected, or accepted by a broken protocol) of a lease reaped earlier:
        how long that handler ran."""
        late = self.lapsed.pop((event.job_id or "", event.attempt or 0), None)
        if late is not None and late[0] == event.worker:
            counts = self.facts.ran_needless_ms if late[2] else self.facts.ran_ms
            ran = event.ts - late[1]
            counts[ran] = counts.get(ran, 0) + 1

    def odd_grant(self, event: Event, deadline: int) -> None:
        """A lease granted for other than the run's lease_ms (judged by the deadline written to
        active), or one whose recorded lease_ms says otherwise: counted, the first few kept."""
        facts, granted = self.facts, self.granted
        length = deadline - event.ts
        recorded = event.lease_ms
        example = {"job": event.job_id, "op": event.type, "attempt": event.attempt,
                   "worker": event.worker, "seq": event.seq, "ts": event.ts, "lease_ms": length,
                   "deadline": deadline, "recorded_lease_ms": recorded}
        grants = granted.get(length, 0)
        granted[length] = grants + 1
        if grants < EXAMPLES:
            facts.granted_examples.setdefault(length, []).append(example)
        if recorded is not None and abs(recorded - length) > 1:
            misrecorded = facts.misrecorded
            misrecorded[length] = misrecorded.get(length, 0) + 1
            if len(facts.misrecorded_examples) < EXAMPLES:
                facts.misrecorded_examples.append(
                    {**example, "reason": "the recorded lease_ms disagrees with the deadline "
                                          "written to active"})

    def refused(self, event: Event, lease: Lease) -> None:
        """A call of the live lease's holder, refused before its deadline: an offence unless a
        fault touched the holder (or the store) since the lease's last renewal."""
        start, end, windows = lease.renewed_ts, event.ts, self.windows
        if any(window.overlaps_ts(start, end) for window in windows.of(lease.worker)) or any(
                window.fault.is_store and window.overlaps_ts(start, end)
                for window in windows.windows):
            self.facts.refused_under_fault += 1
            return
        self.facts.refused_live.add({
            "job": event.job_id, "op": event.type, "attempt": event.attempt,
            "worker": event.worker, "seq": event.seq, "deadline": lease.deadline,
            "before_deadline_ms": lease.deadline - event.ts,
            "target": event.extra.get("target") or None}, event.ts)

    def lease_ended(self, job_id: str) -> None:
        """An accepted finish (or retry) ends every lease on the job, whoever's call it was:
        the store took it out of the active set (the caller drops the live lease itself), so
        its token is free again and no lease of it is left to recover."""
        if self.tokens.live:
            self.tokens.ended(job_id, False)
        for item in self.open_stranded.pop(job_id, []):
            item.dismissed = True

    def holder_acted(self, job_id: str, attempt: int | None, worker: str | None) -> None:
        """The holder acted after its fault: it was back, the lease was not stranded."""
        kept = []
        for item in self.open_stranded.get(job_id, []):
            if item.attempt == attempt and item.worker == worker:
                item.dismissed = True
            else:
                kept.append(item)
        if kept:
            self.open_stranded[job_id] = kept
        else:
            self.open_stranded.pop(job_id, None)

    def finish(self, event_count: int, first_ts: int, last_ts: int) -> ReplayFacts:
        facts = self.facts
        facts.events, facts.last_ts = event_count, last_ts
        facts.first_ts = first_ts if event_count else None
        if self.run_length_grants:
            run_lease_ms = self.run_lease_ms
            self.granted[run_lease_ms] = self.granted.get(run_lease_ms, 0) \
                + self.run_length_grants
        facts.stranded = [item for item in self.stranded if not item.dismissed]
        facts.dismissed = [item for item in self.stranded if item.dismissed]
        facts.needless_unended = sum(1 for _, _, needless in self.lapsed.values() if needless)
        return facts


def replay(events: Iterable[Event]) -> ReplayFacts:
    """One pass over the history (a list or a stream) in stream order: each event to its
    type's handler (``_Replay.handlers``; a refused call, ``<op>_rejected``, to one for all)."""
    state = _Replay()
    handler_of, rejected_call = state.handlers.get, state.rejected_call
    event_count, first_ts, last_ts = 0, sys.maxsize, 0  # sys.maxsize: no event yet
    for event_count, event in enumerate(events, 1):  # noqa: B007 - the count is kept
        ts = event.ts
        if ts > last_ts:
            last_ts = ts
        if ts < first_ts:
            first_ts = ts
        handler = handler_of(event.type)
        if handler is not None:
            handler(event)
        elif event.type.endswith("_rejected"):
            rejected_call(event)
    return state.finish(event_count, first_ts, last_ts)
