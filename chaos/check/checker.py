"""The checker: a pure function from a history to a verdict (docs/design.md §4).

It never talks to Valkey. ``replay.py`` replays the history in stream order, keeping for every
job its current lease (attempt, holder, deadline), and for every worker the intervals during
which a fault held it (``chaos.history.windows``: killed, from the kill on; paused or
partitioned, until healed). A reap counts as a needed redelivery when the holder was cut off
(the fault's ``cuts_off``) and as a needless one when it was alive and only slowed (latency,
bandwidth, clock skew). ``judgements.py`` then rules on each invariant, one function each:

  no_loss               every enqueued job has an accepted complete by the end of the drain
                        (or was dead-lettered, when a stall limit ``max_stalls`` is on); a job
                        still pending or leased when a drain timed out is ``undrained`` (the
                        verdict is then ``unknown`` unless something else broke), not lost
  no_double_completion  at most one accepted complete per job
  recovery_bound        a lease stranded by a cut-off fault (kill, pause, partition) is reaped
                        within lease_ms + reap_interval_ms + tolerance_ms of its holder's last
                        renewal (leases under a slowing fault are counted ``slowed``)
  reap_prompt           every lapsed lease, faulted or not, is reaped within reap_interval_ms +
                        reap_allowance_ms of its deadline (an accepted call of its holder's
                        later than that shows it unreaped too, and so does a lease never reaped
                        while the reaper ran that long past its deadline: the last phase start
                        or a later reap); store outages exempt the leases that lapsed in them
  no_premature_reap     no lease is reaped before its deadline (the one its last renewal wrote
                        to active), and no lease that is no longer live (already reaped or
                        completed) is reaped
  exclusive_lease       every accepted extend or complete comes from the live lease: its attempt
                        and its holder (a worker reusing another holder's token is caught)
  lease_length          every lease granted (claim, accepted extend) runs lease_ms ± 1 ms, by
                        the deadline it wrote to active (every deadline judged is the written
                        one); a recorded lease_ms disagreeing with it is an offence too
  attempts_monotonic    every claim of a job carries a higher attempt (fencing token) than any
                        earlier claim of it: a store that rolls the counter back (a crash
                        without fsync, a failover to a lagging replica) hands one lease out twice
  stall_limit           with ``max_stalls`` on: a job is recovered (reaped) at most max_stalls
                        times, and a dead-lettered job exactly max_stalls times before its
                        ``dead`` event; without it, nothing is ever dead-lettered
  needless_limit        with ``max_needless`` set: at most that many needless redeliveries
  live_lease_honoured   no call of the live lease's holder is refused before its deadline while
                        no fault touched the holder or the store
  reap_cadence          every reaper the queue promises a cadence (the run event's ``sweepers``)
                        sweeps at least every reap_interval_ms + sweep_allowance_ms, judged on
                        its ``sweep`` events (``cadence.py``), lapses or not; exempt while a
                        fault holds it or the store is down; and no sweep is turned away by a
                        shared sweep lock (BullMQ's stalled-check key) more than one interval
                        after the last sweep that ran
  group_limit           a group's lane never has more leases live at once than its limit
                        (``group_limit`` events), counted at every grouped claim
  paused_group          no claim serves a paused group's lane (``group_pause`` ..
                        ``group_resume``); its jobs still there at the end are ``held``, not
                        lost, only where the store listed them (the end event's ``held``)
  flow_order            a flow's parent is released (``release``) and claimed only once each of
                        its children (``enqueue`` with its ``parent``) has settled

Figures for store faults (``valkey_restart``, ``failover``: fault events carrying ``killed_ts``):
per fault, how long after the kill each worker's next transition (and the producer's next
enqueue) landed: the time clients took to recover.

More figures (``figures.py``): every job's outcome at the end of the drain in Jepsen's vocabulary
(``outcomes``: completed, dead_lettered, lost, duplicated, unexpected), the dead-letter figures
(``dead_letter``), needless redeliveries by the fault the holder was under
(``needless_by_fault``) and by how long the attempt ran from its claim (the delivery) to its
holder's own complete (the ack), as a multiple of the lease (``needless_by_duration``; no
history records a handler's own start, so it is delivery to ack, not the handler's span).

The verdict's types live in ``verdict.py``; the names other modules import from here are
re-exported below.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable

from chaos.check import figures
from chaos.check.exercised import exercise
from chaos.check.figures import store_fault_figure, store_fault_recovery
from chaos.check.judgements import (
    judge_all,
    reap_lags,
    reap_latencies,
    standing,
    store_down,
    store_outages,
    undrained_listed,
)
from chaos.check.pace import pace
from chaos.check.replay import ReplayFacts, lease_deadline, replay
from chaos.check.verdict import (
    DURATION_BUCKETS,
    EXAMPLES,
    WHAT_IT_CHECKS,
    CheckConfig,
    DeadLetter,
    InvariantResult,
    JobCounts,
    LatencySummary,
    Offences,
    Outcomes,
    Redeliveries,
    StrandedLease,
    Verdict,
    percentile,
    run_completed,
)
from chaos.history.events import Event

__all__ = [
    "DURATION_BUCKETS", "EXAMPLES", "WHAT_IT_CHECKS", "CheckConfig", "DeadLetter",
    "InvariantResult", "JobCounts", "LatencySummary", "Offences", "Outcomes", "Redeliveries",
    "StrandedLease", "Verdict", "check", "lease_deadline", "percentile", "run_completed",
    "store_fault_figure", "store_fault_recovery",
]


def check(events: Iterable[Event], config: CheckConfig | None = None,
          final: bool | None = True) -> Verdict:
    """Judge a history in one pass (a list, or a stream of events: ``history.replay_history``).

    ``config``: default from the history's ``run`` event. ``final=False`` (an aborted run) skips
    the end-of-run judgements; ``final=None`` decides from the history (``run_completed``)."""
    # The replay's tables (millions of ids and leases for a long run) hold no reference
    # cycles, yet the cyclic collector would rescan them again and again as they grow.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _judge(replay(events), config, final)
    finally:
        if collecting:
            gc.enable()


def _judge(facts: ReplayFacts, config: CheckConfig | None, final: bool | None) -> Verdict:
    if config is None:
        if facts.run is None:
            raise ValueError("history has no 'run' event: cannot tell lease_ms and "
                             "reap_interval_ms")
        config = CheckConfig.from_run(facts.run)
    if final is None:
        final = facts.ended_normally
    jobs = standing(facts, config.max_stalls)
    undrained = len(jobs.undrained) if final else 0  # judged only once the drain is over
    invariants = judge_all(facts, jobs, config, final)
    stranded = facts.stranded
    samples = {
        "reap": reap_latencies(facts),
        "deadline_to_reap": reap_lags(facts, store_outages(facts, config)),
        "reclaim": [i.reclaim_ts - i.fault_ts for i in stranded if i.reclaim_ts is not None],
        "recomplete": [i.recomplete_ts - i.fault_ts for i in stranded
                       if i.recomplete_ts is not None],
    }
    return Verdict(
        passed=not undrained and not facts.faults_skipped and all(
            result.status == "ok" for name, result in invariants.items()
            if name not in config.report_only),
        config=config,
        invariants=invariants,
        jobs=figures.job_counts(facts, jobs, final),
        redeliveries=facts.redeliveries,
        recovery={name: LatencySummary.of(values) for name, values in samples.items()},
        stranded=len(stranded),
        faults=facts.faults,
        rejected=dict(facts.rejected),
        events=facts.events,
        throughput_per_s=figures.rate(sum(facts.completes.values()), facts.first_enqueue_ts,
                                      facts.last_complete_ts),
        recovery_samples=samples,
        pace=pace(facts, config.sweep_limit_ms, store_down(facts)),
        final=final,
        store_faults=[store_fault_figure(fault) for fault in facts.store_faults],
        stranded_leases=stranded,
        outcomes=figures.outcomes(facts, jobs, final),
        dead_letter=figures.dead_letter(facts, config.max_stalls),
        needless_by_fault=dict(facts.needless_by_fault),
        needless_by_duration=figures.by_duration(facts.ran_ms, facts.ran_needless_ms,
                                                 config.lease_ms, facts.needless_unended),
        slowed=facts.slowed,
        undrained=undrained_listed(jobs, final),
        undrained_count=undrained,
        run_event=facts.run,
        end_event=facts.end,
        span_ms=None if facts.first_ts is None else facts.last_ts - facts.first_ts,
        evidence_missing=facts.blind.summary(),
        faults_skipped=[{"kind": skipped.kind, "target": skipped.target, "ts": skipped.ts}
                        for skipped in facts.faults_skipped],
        exercise=exercise(facts.faults_applied, stranded, facts.faults_skipped,
                          facts.run.workers if facts.run is not None else (), facts.chaos_ts),
    )
