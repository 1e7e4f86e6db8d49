"""The judgements: one function per invariant, each ruling on the facts of the lease replay.

``final``: the run reached its normal end, so the drain is over and what is still missing is
missing for good (loss, a stranded lease never recovered); an aborted run is judged without them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chaos.check.replay import ReplayFacts
from chaos.check.verdict import CheckConfig, InvariantResult, LatencySummary, Offences


@dataclass
class Standing:
    """Every job's standing at the end of the history (computed once: sets of every job)."""

    completed: set[str]  # at least one accepted complete
    completed_enqueued: int  # of the enqueued jobs, how many have an accepted complete
    double: dict[str, int]  # job -> accepted completes, of the jobs with more than one
    unexpected: list[str]  # completed, never enqueued
    lost: list[str]  # enqueued, neither completed nor (with a stall limit on) dead-lettered
    dead_lettered: list[str]  # enqueued, not completed, dead-lettered (stall limit on only)


def standing(facts: ReplayFacts, max_stalls: int) -> Standing:
    completed = set(facts.completes)
    # Dead-lettered jobs are accounted for only when a stall limit is on; otherwise lost.
    dead_lettered = sorted((set(facts.dead) & facts.enqueued) - completed) if max_stalls else []
    return Standing(
        completed=completed,
        completed_enqueued=len(completed & facts.enqueued),
        double={job_id: count for job_id, count in facts.completes.items() if count > 1},
        unexpected=sorted(completed - facts.enqueued),
        lost=sorted(facts.enqueued - completed - set(dead_lettered)),
        dead_lettered=dead_lettered,
    )


def judge_no_loss(facts: ReplayFacts, jobs: Standing, final: bool) -> InvariantResult:
    offences = Offences()
    if final:
        for job_id in jobs.lost:
            lease = facts.leases.get(job_id)
            # Loss is only certain once the run is over: caught at the end of the history.
            state = "active" if lease else "dead" if job_id in facts.dead else "pending"
            offences.add({"job": job_id, "state": state,
                          "attempt": lease.attempt if lease else None}, facts.last_ts)
    return InvariantResult.judged(
        offences, enqueued=len(facts.enqueued), completed=jobs.completed_enqueued,
        lost=len(jobs.lost) if final else 0, judged=final)


def judge_no_double_completion(facts: ReplayFacts, jobs: Standing) -> InvariantResult:
    offences = Offences()
    for job_id, count in sorted(jobs.double.items()):
        offences.add({"job": job_id, "accepted_completes": count},
                     facts.second_complete_ts[job_id])
    return InvariantResult.judged(offences, double_completed=len(jobs.double))


def reap_latencies(facts: ReplayFacts) -> list[int]:
    """Fault to reap, ms, of every stranded lease that was reaped."""
    return [item.reap_ts - item.fault_ts for item in facts.stranded if item.reap_ts is not None]


def judge_recovery_bound(facts: ReplayFacts, config: CheckConfig,
                         final: bool) -> InvariantResult:
    offences = Offences()
    for item in facts.stranded:
        if item.reap_ts is None:
            if final:
                offences.add({"job": item.job_id, "attempt": item.attempt,
                              "worker": item.worker, "fault_ts": item.fault_ts,
                              "reason": "never recovered"}, item.fault_ts + config.bound_ms)
            continue
        latency = item.reap_ts - item.fault_ts
        if latency > config.bound_ms:
            offences.add({"job": item.job_id, "attempt": item.attempt, "worker": item.worker,
                          "fault_ts": item.fault_ts, "reap_ts": item.reap_ts,
                          "recovery_latency_ms": latency},
                         item.fault_ts + config.bound_ms)  # broken the moment the bound passed
    return InvariantResult.judged(
        offences, bound_ms=config.bound_ms, lease_ms=config.lease_ms,
        reap_interval_ms=config.reap_interval_ms, tolerance_ms=config.tolerance_ms,
        stranded=len(facts.stranded), **asdict(LatencySummary.of(reap_latencies(facts))))


def judge_no_premature_reap(facts: ReplayFacts) -> InvariantResult:
    return InvariantResult.judged(facts.early_reaps)


def judge_exclusive_lease(facts: ReplayFacts) -> InvariantResult:
    return InvariantResult.judged(facts.stray_calls)


def judge_attempts_monotonic(facts: ReplayFacts) -> InvariantResult:
    return InvariantResult.judged(facts.stale_claims)


def judge_stall_limit(facts: ReplayFacts, max_stalls: int) -> InvariantResult:
    offences = Offences()
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
                                  dead_lettered=len(facts.dead))


def judge_all(facts: ReplayFacts, jobs: Standing, config: CheckConfig,
              final: bool) -> dict[str, InvariantResult]:
    """Every invariant, in ``chaos.names.INVARIANTS`` order."""
    return {
        "no_loss": judge_no_loss(facts, jobs, final),
        "no_double_completion": judge_no_double_completion(facts, jobs),
        "recovery_bound": judge_recovery_bound(facts, config, final),
        "no_premature_reap": judge_no_premature_reap(facts),
        "exclusive_lease": judge_exclusive_lease(facts),
        "attempts_monotonic": judge_attempts_monotonic(facts),
        "stall_limit": judge_stall_limit(facts, config.max_stalls),
    }
