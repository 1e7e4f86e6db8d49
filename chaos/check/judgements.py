"""The judgements: one function per invariant, each ruling on the facts of the lease replay.

``final``: the run reached its normal end, so the drain is over and what is still missing is
missing for good (loss, a stranded lease never recovered); an aborted run is judged without them.
A finished run whose drain timed out (the end event's ``drained`` is false) left jobs in the
queue: those still pending or leased in the history are ``undrained``, not lost (nothing shows
the queue lost them; the run could not wait to see them done).
"""

from __future__ import annotations

import bisect
import itertools
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.check.cadence import (
    SWEEP_LOCK_ROUNDING_MS,
    ConsumerLoops,
    SweepCadence,
    outages_until_seen,
)
from chaos.check.replay import LapsedLease, ReplayFacts
from chaos.check.taken_back import taken_back_late, taken_back_lines
from chaos.check.verdict import (
    EXAMPLES,
    UNDRAINED_LISTED,
    CheckConfig,
    InvariantResult,
    LatencySummary,
    Offences,
)
from chaos.registry import SCRIPTS_RECORDED


@dataclass
class Standing:
    """Every job's standing at the end of the history (computed once, in one pass over the
    completed jobs: a long run has millions)."""

    completed_enqueued: int  # of the enqueued jobs, how many have an accepted complete
    completed_once: int  # of the enqueued jobs, how many have exactly one accepted complete
    double: dict[str, int]  # job -> accepted completes, of the jobs with more than one
    unexpected: list[str]  # completed, never enqueued
    lost: list[str]  # enqueued, left the queue neither completed nor (with a stall limit on)
    # dead-lettered
    dead_lettered: list[str]  # enqueued, not completed, dead-lettered (stall limit on only)
    # (job, pending | active | scheduled: waiting in the schedule for its due time)
    undrained: list[tuple[str, str]] = field(default_factory=list)
    # enqueued, not completed, waiting in a paused group's lane at the end: the history says so
    # (its group paused, the job not leased) and the store listed it there (the end's ``held``)
    held: list[str] = field(default_factory=list)
    # enqueued, removed by a user (EchoMQ's remove_job) before it completed: not lost
    removed: list[str] = field(default_factory=list)


def standing(facts: ReplayFacts, max_stalls: int) -> Standing:
    enqueued, completes, dead = facts.enqueued, facts.completes, facts.dead
    completed_enqueued = completed_once = 0
    double: dict[str, int] = {}
    unexpected: list[str] = []
    for job_id, count in completes.items():
        if job_id in enqueued:
            completed_enqueued += 1
            if count == 1:
                completed_once += 1
        else:
            unexpected.append(job_id)
        if count > 1:
            double[job_id] = count
    # Dead-lettered jobs are accounted for only when a stall limit is on; otherwise lost.
    dead_lettered = sorted(job_id for job_id in dead
                           if job_id in enqueued and job_id not in completes) if max_stalls else []
    missing: list[str] = []
    # Every enqueued job completed or dead-lettered (the usual case): no pass over them all.
    if completed_enqueued + len(dead_lettered) < len(enqueued):
        settled = set(dead_lettered)
        missing = sorted(job_id for job_id in enqueued
                         if job_id not in completes and job_id not in settled)
    removed: list[str] = []
    if missing and facts.removed:  # a user's removal: the job left the queue by their choice
        removed = [job_id for job_id in missing if job_id in facts.removed]
        missing = [job_id for job_id in missing if job_id not in facts.removed]
    held: list[str] = []
    if missing and facts.held:  # a paused lane's jobs wait by the operator's choice
        paused, groups, leases = facts.paused_groups, facts.job_groups, facts.leases
        held = [job_id for job_id in missing if job_id in facts.held
                and groups.get(job_id) in paused and job_id not in leases]
        held_ids = set(held)
        missing = [job_id for job_id in missing if job_id not in held_ids]
    lost, undrained = missing, []
    if facts.drained is False:  # the queue still held jobs when the drain ended
        lost = []
        for job_id in missing:
            if job_id in facts.leases:
                undrained.append((job_id, "active"))
            elif job_id in dead:  # dead-lettered with no stall limit: it left the queue
                lost.append(job_id)
            else:
                undrained.append((job_id, "scheduled" if job_id in facts.scheduled
                                  else "pending"))
    return Standing(
        completed_enqueued=completed_enqueued,
        completed_once=completed_once,
        double=double,
        unexpected=sorted(unexpected),
        lost=lost,
        dead_lettered=dead_lettered,
        undrained=undrained,
        held=held,
        removed=removed,
    )


def undrained_listed(jobs: Standing, final: bool) -> list[dict[str, str]]:
    """The undrained jobs report.json lists (the first UNDRAINED_LISTED)."""
    if not final:
        return []
    return [{"job": job_id, "state": state} for job_id, state in jobs.undrained[:UNDRAINED_LISTED]]


def judge_no_loss(facts: ReplayFacts, jobs: Standing, final: bool) -> InvariantResult:
    offences = facts.offences("no_loss")
    if final:
        for job_id in jobs.lost:
            lease = facts.leases.get(job_id)
            # Loss is only certain once the run is over: caught at the end of the history, and
            # only the end proves it (a complete missing from the evidence may come any time).
            state = ("active" if lease else "dead" if job_id in facts.dead
                     else "scheduled" if job_id in facts.scheduled else "pending")
            offences.add({"job": job_id, "state": state,
                          "attempt": lease.attempt if lease else None}, facts.last_ts,
                         proven_ts=sys.maxsize)
    return InvariantResult.judged(
        offences, enqueued=len(facts.enqueued), completed=jobs.completed_enqueued,
        lost=len(jobs.lost) if final else 0,
        undrained=len(jobs.undrained) if final else 0, judged=final,
        **({"held": len(jobs.held)} if jobs.held else {}),
        # a user's removals (not lost), those of a job under a live lease listed; reprocessed
        # jobs (a finish undone, run again); EchoMQ.Locks' markers, counted
        **({"removed": len(facts.removed), "removed_leased": len(facts.removed_leased),
            "removed_leased_examples": facts.removed_leased[:EXAMPLES]}
           if facts.removed else {}),
        **({"reprocessed": sum(facts.reprocessed.values())} if facts.reprocessed else {}),
        **({"lock_markers": dict(facts.lock_markers)} if facts.lock_markers else {}),
        # handed back for another attempt (BullMQ, EchoMQ), given back by the schedule (EchoMQ)
        **({"retried": facts.retried} if facts.retried else {}),
        **({"promoted": facts.promoted} if facts.promoted else {}))


def judge_no_double_completion(facts: ReplayFacts, jobs: Standing) -> InvariantResult:
    offences = facts.offences("no_double_completion")
    for job_id, count in sorted(jobs.double.items()):
        offences.add({"job": job_id, "accepted_completes": count},
                     facts.second_complete_ts[job_id])
    return InvariantResult.judged(offences, double_completed=len(jobs.double))


def reap_latencies(facts: ReplayFacts) -> list[int]:
    """Fault to reap, ms, of every stranded lease that was reaped."""
    return [item.reap_ts - item.fault_ts for item in facts.stranded if item.reap_ts is not None]


def consumer_loops(facts: ReplayFacts, config: CheckConfig) -> ConsumerLoops:
    """The sweepers' loops, for a queue that reaps once a loop (``reap_rhythm = "loop"``)."""
    cadence = SweepCadence(facts.sweeps, facts.windows, config.sweep_limit_ms,
                           store_down(facts))
    return ConsumerLoops(facts.loop_events, cadence, config.sweep_limit_ms, config.lease_ms,
                         config.reap_interval_ms)


def judge_recovery_bound(facts: ReplayFacts, config: CheckConfig,
                         final: bool) -> InvariantResult:
    """Measured from the holder's last renewal (its lease's start), not from the fault: the time
    between that renewal and the fault is no slack for a late reaper. A family whose bound
    model judges per recovery (``BoundModel.per_recovery``: BullMQ's stalled checks) gets each
    recovery's own bound from what the history shows around it. The bound's words, in the
    family's terms, go into the result (``model``) for the reports to render."""
    offences = facts.offences("recovery_bound")
    model = config.model
    judge: Any = (consumer_loops(facts, config) if config.reap_rhythm == "loop"
                  else model.per_recovery(facts, config, store_down(facts))
                  if model.per_recovery is not None else None)
    per_recovery = judge is not None and bool(judge)
    for item in facts.stranded:
        bound_ts = item.renewed_ts + config.bound_ms
        if item.reap_ts is None:
            if final:
                offences.add({"job": item.job_id, "attempt": item.attempt,
                              "worker": item.worker, "renewed_ts": item.renewed_ts,
                              "fault_ts": item.fault_ts, "reason": "never recovered"}, bound_ts)
            continue
        example: dict[str, Any] = {
            "job": item.job_id, "attempt": item.attempt, "worker": item.worker,
            "renewed_ts": item.renewed_ts, "fault_ts": item.fault_ts, "reap_ts": item.reap_ts,
            "renewal_to_reap_ms": item.reap_ts - item.renewed_ts,
            "fault_to_reap_ms": item.reap_ts - item.fault_ts}
        if per_recovery:
            assert judge is not None
            judged = judge.recovery(item.renewed_ts, item.reap_ts)
            bound_ts = item.renewed_ts + judged.bound_ms + config.tolerance_ms
            example["bound_ms"] = judged.bound_ms + config.tolerance_ms
            if judged.late_checks:
                first = min(judged.late_checks, key=lambda late: late["check_ts"])
                offences.add({**example, "reason": judge.late_reason,
                              "late_checks": judged.late_checks[:3]},
                             first["check_ts"] + first["allowed_ms"])
                continue
        if item.reap_ts > bound_ts:
            offences.add(example, bound_ts)  # broken the moment the bound passed
    extra: dict[str, Any] = {}
    lines: list[str] = []
    if judge is not None:  # the family's own figures: the worst case against its formulas
        extra["family_figures"] = figures = judge.figures(
            item.reap_ts - item.renewed_ts for item in facts.stranded
            if item.reap_ts is not None)
        lines = judge.lines(figures)
    taken_back = taken_back_late(facts)  # lapsed under a fault, its holder back first
    lines += taken_back_lines(taken_back)
    if taken_back:
        extra["taken_back_examples"] = taken_back[:EXAMPLES]
    bound_ms = (judge.base_bound_ms + config.tolerance_ms if per_recovery and judge is not None
                else config.bound_ms)
    return InvariantResult.judged(
        offences, bound_ms=bound_ms, lease_ms=config.lease_ms,
        reap_interval_ms=config.reap_interval_ms, tolerance_ms=config.tolerance_ms,
        stranded=len(facts.stranded), slowed=facts.slowed, taken_back_late=len(taken_back),
        **asdict(LatencySummary.of(reap_latencies(facts))), **extra,
        model=bound_words(config, judge.words() if per_recovery and judge else {}, lines))


def bound_words(config: CheckConfig, judged: dict[str, str],
                lines: list[str]) -> dict[str, Any]:
    """report.json's ``recovery_bound.model``: the family's bound in its own words, with the
    run's figures, so every report renders it from data and none asks whose it is.
    ``judged``: the words of a bound judged per recovery, in place of the formula's."""
    model = config.model
    lease, interval = config.lease_ms, config.reap_interval_ms
    return {
        "family": config.dialect or SCRIPTS_RECORDED,
        "formula": judged.get("formula", model.formula),
        "terms": judged.get("terms", model.terms(lease, interval)),
        "beyond": judged.get("beyond", ""),
        "recovered_by": model.recovered_by,
        "reap_lag_terms": model.reap_lag_terms(lease, interval),
        "interval_name": model.interval_name,
        "sweep_slack": "tolerance" if model.sweep_slack == "tolerance" else "allowance",
        "setting_names": dict(model.setting_names),
        "checks": dict(model.checks),
        "lines": lines,
    }


def store_outages(facts: ReplayFacts, config: CheckConfig) -> list[tuple[int, int]]:
    """(down from, exempt until) per store fault: nothing could sweep the store from the kill
    until it served again (down_ms, or the promotion of a failover), and the reaper then has to
    find the store again (a failover: ask Sentinel, reconnect). The exemption lasts until its
    first reap after the store was back, and at least one interval + the allowance after that;
    a reaper that never came back leaves everything after the kill to recovery_bound and
    no_loss."""
    reaps = sorted(item.seen_ts for item in facts.lapsed if item.reaped)
    return outages_until_seen(store_down(facts), reaps,
                              config.reap_interval_ms + config.reap_allowance_ms)


def store_down(facts: ReplayFacts) -> list[tuple[int, int]]:
    """(down from, back at) per store fault: from the kill until it served again (down_ms, or
    the promotion of a failover)."""
    down = []
    for fault in facts.store_faults:
        assert fault.killed_ts is not None  # is_store
        down.append((fault.killed_ts,
                     fault.killed_ts + max(fault.down_ms or 0, fault.promoted_ms or 0)))
    return down


def reap_lags(facts: ReplayFacts, outages: list[tuple[int, int]] | None = None) -> list[int]:
    """Deadline to reap, ms, of every lease reaped while live (outside store outages)."""
    return [item.seen_ts - item.deadline for item in facts.lapsed
            if item.reaped and not _in_outage(item, outages or [])]


def _in_outage(item: LapsedLease, outages: list[tuple[int, int]]) -> bool:
    return any(item.seen_ts >= down and item.deadline <= exempt_until
               for down, exempt_until in outages)


def watched_until(facts: ReplayFacts) -> int | None:
    """The latest server time at which the history shows the reapers still running: the last
    phase start before the end (the runner stops workers and reapers only after it) or the last
    reap, whichever is later. The end event itself comes after the stop, so it is no evidence."""
    reaps = [item.seen_ts for item in facts.lapsed if item.reaped]
    stamps = [ts for ts in (facts.last_phase_ts, max(reaps, default=None)) if ts is not None]
    return max(stamps, default=None)


def _reapers_cut_off(facts: ReplayFacts, start_ts: int, end_ts: int) -> bool:
    """Was every reaper killed, frozen or cut off at some point in [start_ts, end_ts] (a fault
    of the run's own on a process that is neither a worker nor a store node)? Then a lease left
    unreaped meanwhile is the fault's doing, not the reaper's."""
    workers = set(facts.run.workers) if facts.run is not None else set()
    reapers = facts.run.reapers if facts.run is not None and facts.run.reapers else 1
    cut = {window.worker for window in facts.windows.windows
           if window.cuts_off and not window.fault.is_store and window.worker not in workers
           and window.overlaps_ts(start_ts, end_ts)}
    return len(cut) >= reapers


def unreaped_lapsed(facts: ReplayFacts) -> list[LapsedLease]:
    """Leases still live at the end of the history whose deadline had passed by the time the
    reapers were last seen running (``watched_until``): lapsed, never reaped, never called on."""
    until = watched_until(facts)
    if until is None:
        return []
    return [LapsedLease(job_id, lease.attempt, lease.worker, lease.deadline, until, False)
            for job_id, lease in sorted(facts.leases.items()) if lease.deadline < until]


def judge_reap_prompt(facts: ReplayFacts, config: CheckConfig) -> InvariantResult:
    """Every lapsed lease, faulted or not: its reap (or, when its holder called on it first, that
    call) at most reap_interval_ms + reap_allowance_ms after its deadline, on the server clock.
    A lease never reaped at all is judged at the last moment the reapers were seen running
    (``watched_until``), unless a fault had cut every reaper off. A store outage exempts the
    leases that lapsed in it (nothing could sweep them)."""
    offences = facts.offences("reap_prompt")
    base_limit = limit = config.reap_limit_ms
    outages = store_outages(facts, config)
    exempt = 0
    # Loops that reap once a loop take a lapsed lease at their first sweep after its deadline,
    # whenever their drains let that come: that sweep, plus the allowance, is each one's limit.
    loops = consumer_loops(facts, config) if config.reap_rhythm == "loop" else None
    for never, items in ((False, facts.lapsed), (True, unreaped_lapsed(facts))):
        for item in items:
            if _in_outage(item, outages):
                exempt += 1
                continue
            lag = item.seen_ts - item.deadline
            if loops is not None:
                first = loops.first_sweep_after(item.deadline)
                limit = base_limit if first is None else max(
                    base_limit, first - item.deadline + config.reap_allowance_ms)
            if lag <= limit or never and _reapers_cut_off(facts, item.deadline, item.seen_ts):
                continue
            offences.add({"job": item.job_id, "attempt": item.attempt, "worker": item.worker,
                          "deadline": item.deadline,
                          ("reap_ts" if item.reaped else
                           "watched_until_ts" if never else "unreaped_at_ts"): item.seen_ts,
                          "lag_ms": lag,
                          "reason": "reaped late" if item.reaped else
                          "lapsed and never reaped while a reaper ran" if never else
                          "its holder still called on it, unreaped, past the bound"},
                         item.deadline + limit)
    return InvariantResult.judged(
        offences, limit_ms=base_limit, reap_interval_ms=config.reap_interval_ms,
        reap_allowance_ms=config.reap_allowance_ms, exempt_store_outage=exempt,
        **({"rhythm": "loop"} if loops is not None else {}),
        **asdict(LatencySummary.of(reap_lags(facts, outages))))


CADENCE_NOT_JUDGED = ("not judged: the queue promises no sweep cadence (a reaper of the user's "
                      "own, or a history older than its sweep events); its gaps are reported")


LOOPS_NOT_JUDGED = ("not judged: the loops reap once a loop, and the history shows none of their "
                    "parks (its dialect reads none); their sweep gaps are reported")


def judge_reap_cadence(facts: ReplayFacts, config: CheckConfig) -> InvariantResult:
    """Every reaper the queue promises a cadence (``config.sweepers``) sweeps at least every
    ``sweep_limit_ms``, judged on its sweeps directly (``chaos.check.cadence``), whether or
    not anything lapsed, from the run's first phase on (the run begins once every process is
    at work: what a sweeper did in its own start-up before it is no promise broken): between
    two of its sweeps, from the run's first phase to its first
    sweep, and from its last sweep to the last moment the reapers were seen running
    (``watched_until``: a reaper gone quiet before the run was done with it). A gap is exempt
    while a fault held that reaper or the store was down; one holding a sweep whose sweeper
    the history does not name is blinded (that sweep may have been the reaper's). A reaper
    with no sweep at all in a run that needed it is an offence: the sources that promise
    sweeps record each one with the call that made it (the reap script's own XADD, the call's
    own MONITOR line), so none recorded is none made, unless the feed lost lines (a ``blind``
    spot on every job, which blinds it). Without sweepers (a queue of the user's, whose reaper
    promises no grid; a history older than its sweeps) the gaps are reported, not judged."""
    offences = facts.offences("reap_cadence")
    limit = config.sweep_limit_ms
    cadence = SweepCadence(facts.sweeps, facts.windows, limit, store_down(facts),
                           since_ts=facts.first_phase_ts)
    unattributed = cadence.unattributed
    start, end = facts.first_phase_ts, watched_until(facts)
    exempt = 0
    # Jobs went in and no worker was ever seen to claim one: the history may not see the
    # workers at all (another key layout, another dialect), so a sweeper it never saw sweep is
    # no evidence that none swept.
    unseen = bool(facts.enqueued) and all(attempt is None for attempt in facts.enqueued.values())
    # Sweepers that reap once a loop are held to their parks (each park to the loop's next
    # sweep), not to the gaps between sweeps, which their drains lengthen (ConsumerLoops).
    loops = consumer_loops(facts, config) if config.reap_rhythm == "loop" else None
    for sweeper in config.sweepers:
        times = cadence.times.get(sweeper, [])
        spans: list[tuple[int, int, str]] = []
        if not times:
            if start is not None and end is not None:
                spans.append((start, end, "no sweep at all while the run went on"))
        else:
            if start is not None and times[0] > start:
                spans.append((start, times[0], "no sweep yet when the run began"))
            if loops is not None:
                spans += list(loops.late_parks(sweeper, end))
            else:
                spans += [(earlier, later, "swept late")
                          for earlier, later in itertools.pairwise(times)]
                if end is not None and times[-1] < end:
                    spans.append((times[-1], end, "no sweep since, while the run went on"))
        for earlier, later, reason in spans:
            if later - earlier <= limit:
                continue
            if cadence.held(sweeper, earlier, later):
                exempt += 1
                continue
            opened = "park_ts" if reason.startswith("parked") else "sweep_ts"
            example = {"reaper": sweeper, opened: earlier, "next_sweep_ts": later,
                       "gap_ms": later - earlier, "allowed_ms": limit, "reason": reason}
            index = bisect.bisect_right(unattributed, earlier)
            if (index < len(unattributed) and unattributed[index] < later) or (
                    unseen and not times):
                offences.blinded += 1  # an unnamed sweep in the gap may have been its
                if len(offences.blinded_examples) < EXAMPLES:
                    offences.blinded_examples.append(example)
                continue
            offences.add(example, earlier + limit)  # late the moment the limit passed
    if config.sweepers:
        exempt += _lock_outlived_interval(
            facts, config.reap_interval_ms + SWEEP_LOCK_ROUNDING_MS, offences)
    per_sweeper: dict[str, dict[str, Any]] = {
        sweeper: {"sweeps": len(cadence.times.get(sweeper, [])),
                  "max_gap_ms": max(cadence.gaps(sweeper), default=None)}
        for sweeper in sorted({*config.sweepers, *cadence.named()})}
    judged = bool(config.sweepers)
    loop_figures: dict[str, Any] = {}
    unparked = False
    if loops is not None:
        for sweeper, figures in per_sweeper.items():
            figures["longest_drain_ms"] = max(loops.drains_ms(sweeper), default=None)
            figures["max_park_ms"] = max(loops.parks_ms(sweeper), default=None)
        loop_figures = {"rhythm": "loop",
                        "longest_drain_ms": max(loops.drains_ms(), default=None),
                        "max_park_ms": max(loops.parks_ms(), default=None)}
        unparked = judged and bool(facts.sweeps) and not loops.parked
        judged = judged and not unparked  # what it promises is not in the history: reported
    # Not one sweep by any reaper the queue promises, and none the history cannot attribute:
    # the deployment has no reaper at all (e.g. only consumers that never reap), said as such.
    no_reaper = (judged and not facts.sweeps and offences.count > 0
                 and not offences.blinded)
    gaps = [figures["max_gap_ms"] for sweeper, figures in per_sweeper.items()
            if figures["max_gap_ms"] is not None and (not judged or sweeper in config.sweepers)]
    result = InvariantResult.judged(
        offences, limit_ms=limit, reap_interval_ms=config.reap_interval_ms,
        allowance_ms=limit - config.reap_interval_ms, sweepers=list(config.sweepers),
        sweeps=len(facts.sweeps), max_gap_ms=max(gaps, default=None), exempt_gaps=exempt,
        unattributed_sweeps=len(unattributed), per_sweeper=per_sweeper,
        **({"no_reaper": True} if no_reaper else {}), **loop_figures,
        **({} if judged else {"judged": False, "not_judged": (
            LOOPS_NOT_JUDGED if unparked else CADENCE_NOT_JUDGED)}))
    result.blind = result.blind or (result.ok and offences.blinded > 0)
    return result


def _lock_outlived_interval(facts: ReplayFacts, limit: int, offences: Offences) -> int:
    """A queue whose sweepers share a lock that lets one sweep through per interval (BullMQ's
    ``stalled-check`` key, ``PX stalledInterval``) turns a sweep away only within one interval
    of the last sweep that ran, whoever ran it: that sweep set the lock, and the server expires
    it on the clock that stamps both. A sweep turned away later than ``limit`` (the interval +
    the stamps' rounding) after it shows the lock outliving the interval, so the sweeps that
    run come slower than the sweepers' timers fire, which their own cadence cannot show
    (measured: docs/bullmq.md). Exempt (counted, returned) across a store outage: a restarted
    or promoted store keeps or expires keys on its own clock. Recorder gaps blind it as any
    offence. A queue whose sweeps all run (the reference reapers') never meets it."""
    down = store_down(facts)
    exempt = 0
    last_ran: int | None = None
    # in history order (the feed's): a check turned away in the same ms as the one that ran
    # just before it must meet that one as the last that ran
    for ts, sweeper, ran in sorted(facts.sweeps, key=lambda sweep: sweep[0]):
        if ran:
            last_ran = ts
            continue
        if last_ran is None or ts - last_ran <= limit:
            continue
        if any(start <= ts and last_ran <= back for start, back in down):
            exempt += 1
            continue
        offences.add({"reaper": sweeper, "sweep_ts": ts, "last_ran_ts": last_ran,
                      "gap_ms": ts - last_ran, "allowed_ms": limit,
                      "reason": "turned away by the sweep lock longer after the last sweep "
                                "that ran than the lock's interval"}, last_ran + limit)
    return exempt


def judge_no_premature_reap(facts: ReplayFacts) -> InvariantResult:
    return InvariantResult.judged(facts.early_reaps)


def judge_exclusive_lease(facts: ReplayFacts) -> InvariantResult:
    return InvariantResult.judged(facts.stray_calls)


def judge_lease_length(facts: ReplayFacts, config: CheckConfig) -> InvariantResult:
    """Every lease granted (claim or accepted extend) runs the configured lease_ms (± 1 ms),
    judged by what the grant did: the deadline it wrote to active (the score the reaper goes
    by), never only by the lease_ms it recorded. The recorded lease_ms is a cross-check: a
    grant whose record disagrees with its deadline (by more than 1 ms) is an offence too, even
    of the right length (a queue whose evidence misstates its leases). Each grant counts once.
    An offence is its own evidence (the grant's deadline and record): counted, never blinded."""
    offences = facts.offences("lease_length")

    def note(count: int, examples: list[dict[str, Any]]) -> None:
        offences.count += count
        if not examples:
            return
        first_ts = min(int(example["ts"]) for example in examples)
        if offences.first_ts is None or first_ts < offences.first_ts:
            offences.first_ts = first_ts
        offences.examples += examples[:EXAMPLES - len(offences.examples)]

    for length, count in sorted(facts.granted.items()):
        if abs(length - config.lease_ms) > 1:  # the wrong length, whatever it recorded
            note(count, facts.granted_examples.get(length, []))
    for length, count in sorted(facts.misrecorded.items()):
        if abs(length - config.lease_ms) <= 1:  # the right length, misrecorded
            note(count, [example for example in facts.misrecorded_examples
                         if example["lease_ms"] == length])
    granted = sum(facts.granted.values())
    return InvariantResult.judged(offences, lease_ms=config.lease_ms, granted=granted,
                                  misrecorded=sum(facts.misrecorded.values()))


def judge_needless_limit(facts: ReplayFacts, config: CheckConfig) -> InvariantResult:
    """With max_needless set: at most that many needless redeliveries. Those of jobs whose
    evidence is missing do not count towards the limit (they may be needed ones, or none)."""
    offences = facts.offences("needless_limit")
    limit = config.max_needless
    needless = facts.redeliveries.needless
    if limit is not None and needless > limit:
        blind = offences.blind
        standing = [ts for ts, job_id in facts.needless if not (
            blind and blind.covers(job_id, ts, offences.needs))]
        if len(standing) > limit:
            offences.count = len(standing) - limit
            offences.first_ts = standing[limit]  # the first one past the limit
            offences.examples = list(facts.needless_examples)
        offences.blinded = needless - limit - offences.count
    return InvariantResult.judged(offences, max_needless=limit, needless=needless)


def judge_live_lease_honoured(facts: ReplayFacts) -> InvariantResult:
    """A call of the live lease's holder (its attempt, before its deadline) that the store
    refused while no fault touched the holder or the store: the queue took a lease away from a
    holder that still held it (its handler runs on; another may be handed the job). Refusals
    under a fault are counted apart: the call may have come from the other side of it."""
    return InvariantResult.judged(facts.refused_live, refused_under_fault=facts.refused_under_fault)


def judge_attempts_monotonic(facts: ReplayFacts) -> InvariantResult:
    return InvariantResult.judged(facts.stale_claims)


def judge_stall_limit(facts: ReplayFacts, max_stalls: int) -> InvariantResult:
    offences = facts.offences("stall_limit")
    for job_id, (recoveries, dead_ts) in sorted(facts.dead.items()):
        if not max_stalls:
            offences.add({"job": job_id, "recoveries": recoveries,
                          "reason": "dead-lettered, but no stall limit is on"}, dead_ts)
        elif recoveries != max_stalls:
            offences.add({"job": job_id, "recoveries": recoveries, "max_stalls": max_stalls,
                          "reason": "dead-lettered after a number of recoveries other than "
                                    "max_stalls"}, dead_ts)
    if max_stalls:
        for job_id, times in sorted(facts.reap_times.items()):
            if len(times) > max_stalls:
                offences.add({"job": job_id, "recoveries": len(times), "max_stalls": max_stalls,
                              "reason": "recovered past the stall limit"}, times[max_stalls])
    return InvariantResult.judged(offences, max_stalls=max_stalls,
                                  moved_to_dead=len(facts.dead))


GROUP_LIMIT_NOT_JUDGED = ("not judged: the history shows no claim in a group with a limit "
                          "set (no group lanes, or none limited)")


def judge_group_limit(facts: ReplayFacts) -> InvariantResult:
    """A group's lane never has more leases live at once than its limit: offences met by the
    replay at each grouped claim (``Replayer.grouped_claim``). Judged only where the history
    shows a limit set and a claim in a group; the most live at once per group is reported."""
    judged = bool(facts.group_limits) and facts.grouped_claims > 0
    result = InvariantResult.judged(
        facts.over_limit, limits=dict(facts.group_limits), grouped_claims=facts.grouped_claims,
        most_live=dict(facts.most_live),
        **({} if judged else {"judged": False, "not_judged": GROUP_LIMIT_NOT_JUDGED}))
    return result


PAUSED_GROUP_NOT_JUDGED = "not judged: the history shows no group paused"


def judge_paused_group(facts: ReplayFacts, jobs: Standing, final: bool) -> InvariantResult:
    """A paused group's jobs wait: the claims of a job while its group was paused, met by the
    replay (``Replayer.grouped_claim``). The jobs held in paused lanes at the end are counted
    here and left out of the loss (``standing``); a paused lane's job the store did not list
    is lost (``no_loss``). Judged only where the history shows a pause."""
    judged = facts.pauses > 0
    return InvariantResult.judged(
        facts.paused_claims, pauses=facts.pauses, paused_at_end=sorted(facts.paused_groups),
        held=len(jobs.held) if final else 0,
        **({} if judged else {"judged": False, "not_judged": PAUSED_GROUP_NOT_JUDGED}))


FLOW_ORDER_NOT_JUDGED = "not judged: the history shows no flow (no parent enqueued with children)"


def judge_flow_order(facts: ReplayFacts) -> InvariantResult:
    """A flow's parent waits for its children: its release and each claim of it come only once
    each of its children has completed, offences met by the replay (``parent_served``).
    Judged only where the history shows a flow."""
    judged = bool(facts.flow_children)
    return InvariantResult.judged(
        facts.early_parents, flows=len(facts.flow_children), released=facts.released,
        children=len(facts.child_parent),
        **({"parents_failed": facts.parents_failed} if facts.parents_failed else {}),
        **({} if judged else {"judged": False, "not_judged": FLOW_ORDER_NOT_JUDGED}))


def judge_all(facts: ReplayFacts, jobs: Standing, config: CheckConfig,
              final: bool) -> dict[str, InvariantResult]:
    """Every invariant, in ``chaos.names.INVARIANTS`` order. A judge that raises (a bug of the
    checker's, never the queue's) gives that invariant an ``error`` result, neither passed nor
    failed, with the traceback; the others are still judged (as Jepsen's check-safe)."""
    judges: dict[str, Callable[[], InvariantResult]] = {
        "no_loss": lambda: judge_no_loss(facts, jobs, final),
        "no_double_completion": lambda: judge_no_double_completion(facts, jobs),
        "recovery_bound": lambda: judge_recovery_bound(facts, config, final),
        "reap_prompt": lambda: judge_reap_prompt(facts, config),
        "no_premature_reap": lambda: judge_no_premature_reap(facts),
        "exclusive_lease": lambda: judge_exclusive_lease(facts),
        "lease_length": lambda: judge_lease_length(facts, config),
        "attempts_monotonic": lambda: judge_attempts_monotonic(facts),
        "stall_limit": lambda: judge_stall_limit(facts, config.max_stalls),
        "needless_limit": lambda: judge_needless_limit(facts, config),
        "live_lease_honoured": lambda: judge_live_lease_honoured(facts),
        "reap_cadence": lambda: judge_reap_cadence(facts, config),
        "group_limit": lambda: judge_group_limit(facts),
        "paused_group": lambda: judge_paused_group(facts, jobs, final),
        "flow_order": lambda: judge_flow_order(facts),
    }
    results = {}
    for name, judge in judges.items():
        try:
            results[name] = judge()
        except Exception:  # noqa: BLE001 - the checker's own bug: an outcome of its own
            results[name] = InvariantResult(True, error=traceback.format_exc())
    return results
