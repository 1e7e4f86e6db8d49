"""The checker against hand-written histories and a model of the correct protocol (no server).

Every failing-history test names the exact set of invariants that must fail, and the number of
violations, so a checker that flags too much fails these tests as surely as one that flags
too little.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from histories import History, resequence, to_events
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chaos.check.checker import (
    WHAT_IT_CHECKS,
    CheckConfig,
    JobCounts,
    LatencySummary,
    Redeliveries,
    Verdict,
    check,
    percentile,
    run_completed,
    store_fault_recovery,
)
from chaos.history.events import read_history
from chaos.history.schema import Claim, Enqueue, Promote, Retry
from chaos.names import DEFAULT_ALLOWANCE_MS, DEFAULT_SWEEP_ALLOWANCE_MS, INVARIANTS

L, R, TOL = 1000, 250, 100
BOUND = L + R + TOL  # 1350


def assert_fails_only(verdict: Verdict, *expected: str) -> None:
    """Exactly ``expected`` fail; every other invariant holds with zero violations."""
    assert sorted(verdict.failed_invariants()) == sorted(expected), verdict.as_dict()
    assert verdict.passed is (not expected)
    for name in INVARIANTS:
        result = verdict.invariants[name]
        if name in expected:
            assert not result.ok and result.violations >= 1
        else:
            assert result.ok and result.violations == 0 and result.examples == [], name


def history() -> History:
    return History(lease_ms=L, reap_interval_ms=R, tolerance_ms=TOL)


def test_every_invariant_is_judged_and_described_in_one_order():
    """The verdict, junit.xml and report.html all walk INVARIANTS: none may be missing."""
    verdict = check(history().events())
    assert list(verdict.invariants) == list(INVARIANTS) == list(WHAT_IT_CHECKS)
    assert all(WHAT_IT_CHECKS.values())


# --- a clean run ------------------------------------------------------------------------------


def test_clean_history_passes_every_invariant():
    h = history()
    h.phase("warmup", ts=0)
    h.enqueue("a", ts=0)
    h.enqueue("b", ts=5)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.claim("b", attempt=1, worker="w2", ts=12)
    h.extend("a", attempt=1, worker="w1", ts=340)
    h.extend("b", attempt=1, worker="w2", ts=345)
    h.complete("a", attempt=1, worker="w1", ts=400)
    h.complete("b", attempt=1, worker="w2", ts=500)
    h.phase("end", ts=600, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.jobs == JobCounts(enqueued=2, completed=2, lost=0, double_completed=0)
    assert verdict.redeliveries == Redeliveries(needed=0, needless=0)
    assert verdict.stranded == 0
    assert verdict.faults == 0
    assert verdict.rejected == {}
    assert verdict.events == 11
    assert verdict.invariants["no_loss"].figures == {
        "enqueued": 2,
        "completed": 2,
        "lost": 0,
        "undrained": 0,
        "judged": True,
    }


# --- no_loss ---------------------------------------------------------------------------------


def lossy_history() -> History:
    """a completes; b is still leased at the end (its holder alive); c was never claimed."""
    h = history()
    h.enqueue("a", ts=0)
    h.enqueue("b", ts=1)
    h.enqueue("c", ts=2)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.claim("b", attempt=1, worker="w2", ts=11)
    h.complete("a", attempt=1, worker="w1", ts=100)
    h.extend("b", attempt=1, worker="w2", ts=340)
    return h


def test_no_loss_fails_for_every_job_never_completed():
    verdict = check(lossy_history().events())
    assert_fails_only(verdict, "no_loss")
    result = verdict.invariants["no_loss"]
    assert result.violations == 2
    assert result.examples == [
        {"job": "b", "state": "active", "attempt": 1},
        {"job": "c", "state": "pending", "attempt": None},
    ]
    assert result.figures == {"enqueued": 3, "completed": 1, "lost": 2, "undrained": 0,
                              "judged": True}
    assert result.first_violation_ts == 340  # loss is certain only at the end of the history
    assert verdict.jobs.lost == 2
    assert verdict.invariants["no_double_completion"].first_violation_ts is None


def test_no_loss_counts_a_reaped_job_never_reclaimed_as_pending():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.reap("a", attempt=1, ts=1010)  # w1 alive but too slow: the lease lapsed
    h.complete_rejected("a", attempt=1, worker="w1", ts=1100)
    verdict = check(h.events())
    assert_fails_only(verdict, "no_loss")
    assert verdict.invariants["no_loss"].examples == [
        {"job": "a", "state": "pending", "attempt": None}
    ]


def test_final_false_does_not_judge_no_loss():
    verdict = check(lossy_history().events(), final=False)
    assert_fails_only(verdict)
    assert verdict.invariants["no_loss"].figures == {
        "enqueued": 3,
        "completed": 1,
        "lost": 0,
        "undrained": 0,
        "judged": False,
    }
    assert verdict.jobs.lost == 0


# --- no_double_completion ----------------------------------------------------------------------


def test_a_redelivered_job_completed_once_is_not_a_double_completion():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.reap("a", attempt=1, ts=1000)
    h.claim("a", attempt=2, worker="w2", ts=1010)
    h.complete("a", attempt=2, worker="w2", ts=1100)
    h.complete_rejected("a", attempt=1, worker="w1", ts=1200, current_attempt=2)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.jobs.double_completed == 0
    assert verdict.rejected == {"complete_rejected": 1}
    assert verdict.redeliveries == Redeliveries(needed=0, needless=1)


def test_two_accepted_completes_of_one_job_fail_no_double_completion():
    """Each complete is fenced correctly, but the job was handed out again after completing."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.complete("a", attempt=1, worker="w1", ts=100)
    h.claim("a", attempt=2, worker="w2", ts=110)
    h.complete("a", attempt=2, worker="w2", ts=200)
    verdict = check(h.events())
    assert_fails_only(verdict, "no_double_completion")
    result = verdict.invariants["no_double_completion"]
    assert result.violations == 1
    assert result.examples == [{"job": "a", "accepted_completes": 2}]
    assert result.figures == {"double_completed": 1}
    assert result.first_violation_ts == 200  # caught at the second accepted complete
    assert verdict.jobs.double_completed == 1
    assert verdict.jobs.completed == 1


def test_a_repeated_complete_of_the_same_attempt_is_also_an_exclusive_lease_violation():
    """The second complete has no live lease behind it: both invariants catch it."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.complete("a", attempt=1, worker="w1", ts=100)
    h.complete("a", attempt=1, worker="w1", ts=101)
    verdict = check(h.events())
    assert_fails_only(verdict, "no_double_completion", "exclusive_lease")
    assert verdict.invariants["no_double_completion"].violations == 1
    assert verdict.invariants["exclusive_lease"].violations == 1


# --- recovery_bound --------------------------------------------------------------------------


def killed_holder(reap_ts: int) -> History:
    """w1 holds a (last renewal 200, deadline 1200) and is killed at 250; w2 picks a up."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.extend("a", attempt=1, worker="w1", ts=200)
    h.fault("kill", "w1", ts=250)
    h.reap("a", attempt=1, ts=reap_ts)
    h.claim("a", attempt=2, worker="w2", ts=reap_ts + 10)
    h.complete("a", attempt=2, worker="w2", ts=reap_ts + 150)
    return h


def test_a_killed_holders_lease_reaped_in_time_passes_recovery_bound():
    verdict = check(killed_holder(reap_ts=1250).events())
    assert_fails_only(verdict)
    assert verdict.stranded == 1
    assert verdict.faults == 1
    assert verdict.redeliveries == Redeliveries(needed=1, needless=0)
    assert verdict.recovery["reap"] == LatencySummary(1, 1000, 1000, 1000, 1000)
    assert verdict.recovery["reclaim"] == LatencySummary(1, 1010, 1010, 1010, 1010)
    assert verdict.recovery["recomplete"] == LatencySummary(1, 1150, 1150, 1150, 1150)
    figures = verdict.invariants["recovery_bound"].figures
    assert figures["bound_ms"] == BOUND
    assert figures["stranded"] == 1
    assert figures["max_ms"] == 1000


@pytest.mark.parametrize(("latency", "ok"), [(BOUND - 1, True), (BOUND, True), (BOUND + 1, False)])
def test_recovery_bound_is_lease_plus_reap_interval_plus_tolerance(latency: int, ok: bool):
    """From the holder's last renewal (200), not from the fault (250): the renewal-to-fault
    time is no slack. (reap_prompt is given room here: this is recovery_bound's edge.)"""
    config = CheckConfig(L, R, TOL, reap_allowance_ms=1000)
    verdict = check(killed_holder(reap_ts=200 + latency).events(), config)
    assert verdict.invariants["recovery_bound"].ok is ok
    assert verdict.invariants["recovery_bound"].violations == (0 if ok else 1)
    assert_fails_only(verdict, *([] if ok else ["recovery_bound"]))


def test_a_killed_holders_lease_reaped_too_late_fails_recovery_bound():
    verdict = check(killed_holder(reap_ts=1700).events())
    # 500 ms after its deadline (1200): late for the promise and for the reaper's interval
    assert_fails_only(verdict, "recovery_bound", "reap_prompt")
    result = verdict.invariants["recovery_bound"]
    assert result.violations == 1
    assert result.first_violation_ts == 200 + BOUND  # the moment the bound ran out
    assert result.examples == [
        {
            "job": "a",
            "attempt": 1,
            "worker": "w1",
            "renewed_ts": 200,
            "fault_ts": 250,
            "reap_ts": 1700,
            "renewal_to_reap_ms": 1500,
            "fault_to_reap_ms": 1450,
        }
    ]
    assert result.figures["max_ms"] == 1450  # fault to reap, the figure beside it
    # the same history under looser allowances is fine: the bounds come from the config
    looser = check(killed_holder(reap_ts=1700).events(),
                   CheckConfig(L, R, tolerance_ms=250, reap_allowance_ms=250))
    assert_fails_only(looser)


def never_reaped() -> History:
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.fault("kill", "w1", ts=250)
    h.phase("end", ts=5000, drained=0, aborted=0)
    return h


def test_a_stranded_lease_never_reaped_fails_recovery_bound():
    verdict = check(never_reaped().events())
    # the drain timed out with a still leased: undrained, not lost; the late reap is the fault
    assert_fails_only(verdict, "recovery_bound")
    assert verdict.undrained == [{"job": "a", "state": "active"}]
    assert not verdict.unknown  # an invariant broke: the verdict is a plain fail
    result = verdict.invariants["recovery_bound"]
    assert result.violations == 1
    assert result.examples == [
        {"job": "a", "attempt": 1, "worker": "w1", "renewed_ts": 10, "fault_ts": 250,
         "reason": "never recovered"}
    ]
    assert verdict.stranded == 1
    assert verdict.recovery["reap"] == LatencySummary()


def test_final_false_does_not_judge_a_stranded_lease_not_yet_reaped():
    verdict = check(never_reaped().events(), final=False)
    assert_fails_only(verdict)
    assert verdict.stranded == 1


# --- no_premature_reap -----------------------------------------------------------------------


def extended_then_reaped(reap_ts: int) -> History:
    """Claim at 0 (deadline 1000), extend at 500 (deadline 1500); the holder then stalls."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.extend("a", attempt=1, worker="w1", ts=500)
    # a broken extend would leave the claim's deadline in the active set: the reap says 1000
    h.reap("a", attempt=1, ts=reap_ts, deadline=1000)
    h.claim("a", attempt=2, worker="w2", ts=reap_ts + 10)
    h.complete("a", attempt=2, worker="w2", ts=reap_ts + 100)
    h.extend_rejected("a", attempt=1, worker="w1", ts=reap_ts + 120, current_attempt=2)
    return h


def test_a_reap_at_the_extended_deadline_is_not_premature():
    verdict = check(extended_then_reaped(reap_ts=1500).events())
    assert_fails_only(verdict)
    assert verdict.redeliveries == Redeliveries(needed=0, needless=1)
    assert verdict.rejected == {"extend_rejected": 1}


def test_a_reap_before_the_deadline_an_extend_moved_is_premature():
    verdict = check(extended_then_reaped(reap_ts=1200).events())
    assert_fails_only(verdict, "no_premature_reap")
    result = verdict.invariants["no_premature_reap"]
    assert result.violations == 1
    assert result.examples == [
        {
            "job": "a",
            "attempt": 1,
            "seq": result.examples[0]["seq"],
            "reap_ts": 1200,
            "deadline": 1500,
            "early_ms": 300,
        }
    ]


def test_a_reap_of_a_completed_lease_is_premature():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.complete("a", attempt=1, worker="w1", ts=990)
    h.reap("a", attempt=1, ts=1000)  # a non-atomic reap moved a job that had just completed
    verdict = check(h.events())
    assert_fails_only(verdict, "no_premature_reap")
    result = verdict.invariants["no_premature_reap"]
    assert result.violations == 1
    assert result.examples[0]["reason"] == "reaped a lease that was not live"


# --- exclusive_lease -------------------------------------------------------------------------


def paused_holder_comes_back(stale_extend: str, stale_complete: str, new_complete: str) -> History:
    """w1 holds a, is paused at 100; a is reaped and re-claimed by w2; w1 wakes at 1500."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    f1 = h.fault("pause", "w1", ts=100, duration_ms=1400)
    h.reap("a", attempt=1, ts=1100)
    h.claim("a", attempt=2, worker="w2", ts=1110)
    h.heal(f1, ts=1500)
    getattr(h, stale_extend)("a", attempt=1, worker="w1", ts=1501)
    getattr(h, stale_complete)("a", attempt=1, worker="w1", ts=1502)
    getattr(h, new_complete)("a", attempt=2, worker="w2", ts=1600)
    return h


def test_stale_holders_rejected_operations_do_not_break_the_lease():
    h = paused_holder_comes_back("extend_rejected", "complete_rejected", "complete")
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.rejected == {"extend_rejected": 1, "complete_rejected": 1}
    assert verdict.stranded == 1
    assert verdict.redeliveries == Redeliveries(needed=1, needless=0)


def test_an_accepted_complete_from_an_old_attempt_after_a_reclaim_breaks_exclusive_lease():
    # unfenced complete: w1's stale complete is accepted and removes a from active, so the
    # live holder's own complete is then rejected
    h = paused_holder_comes_back("extend_rejected", "complete", "complete_rejected")
    verdict = check(h.events())
    assert_fails_only(verdict, "exclusive_lease")
    result = verdict.invariants["exclusive_lease"]
    assert result.violations == 1
    example = dict(result.examples[0])
    example.pop("seq")
    assert example == {
        "job": "a",
        "op": "complete",
        "attempt": 1,
        "worker": "w1",
        "live_attempt": 2,
        "live_worker": "w2",
        "reason": "not the live lease's attempt",
    }


def test_an_accepted_extend_after_the_lease_was_reaped_breaks_exclusive_lease():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    f1 = h.fault("pause", "w1", ts=100)
    h.reap("a", attempt=1, ts=1100)
    h.heal(f1, ts=1150)
    h.extend("a", attempt=1, worker="w1", ts=1160)  # extend without the "still active" check
    h.claim("a", attempt=2, worker="w2", ts=1170)
    h.complete("a", attempt=2, worker="w2", ts=1300)
    h.complete_rejected("a", attempt=1, worker="w1", ts=1310, current_attempt=2)
    verdict = check(h.events())
    assert_fails_only(verdict, "exclusive_lease")
    result = verdict.invariants["exclusive_lease"]
    assert result.violations == 1
    assert result.examples[0]["op"] == "extend"
    assert result.examples[0]["live_attempt"] is None


def test_a_claim_while_the_lease_is_live_breaks_exclusive_lease():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.claim("a", attempt=2, worker="w2", ts=20)  # non-atomic claim: two holders at once
    h.complete("a", attempt=2, worker="w2", ts=100)
    h.complete_rejected("a", attempt=1, worker="w1", ts=110, current_attempt=2)
    verdict = check(h.events())
    assert_fails_only(verdict, "exclusive_lease")
    result = verdict.invariants["exclusive_lease"]
    assert result.violations == 1
    assert result.examples[0]["op"] == "claim"
    assert result.examples[0]["live_worker"] == "w1"


def test_an_accepted_stray_complete_ends_the_job_and_closes_the_live_lease_with_it():
    """An unfenced complete: w1's stale complete is accepted while w2 holds a. The job is done,
    so w2's lease ends with it, whoever's call it was: its refused renewal and finish are no
    refusals of a live lease, and it is not left lapsed and unreaped while the run goes on.
    Only exclusive_lease fails; a reap of the closed lease would be premature."""
    h = paused_holder_comes_back("extend_rejected", "complete", "complete_rejected")
    h.extend_rejected("a", attempt=2, worker="w2", ts=1650, current_attempt=2)
    h.phase("drain", ts=3000)  # the reaper ran long past w2's deadline (2110)
    h.phase("end", ts=3100, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict, "exclusive_lease")
    assert verdict.stranded == 1  # w1's, reaped: w2's lease never was
    reaped = paused_holder_comes_back("extend_rejected", "complete", "complete_rejected")
    reaped.reap("a", attempt=2, ts=2200)
    assert_fails_only(check(reaped.events()), "exclusive_lease", "no_premature_reap")


def test_a_retry_ends_the_lease_and_the_job_waits_for_its_next_attempt():
    """BullMQ's retry (the handler threw, its attempts allow another): the holder hands the job
    back, the lease ends, the next claim carries a higher attempt; the job must still complete."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.write(Retry("a", 1, "w1", to="delayed"), ts=100)
    h.claim("a", attempt=2, worker="w2", ts=200)
    h.complete("a", attempt=2, worker="w2", ts=300)
    h.phase("end", ts=400, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.invariants["no_loss"].figures["retried"] == 1
    never = history()
    never.enqueue("a", ts=0)
    never.claim("a", attempt=1, worker="w1", ts=10)
    never.write(Retry("a", 1, "w1", to="wait"), ts=100)
    never.phase("end", ts=400, drained=1, aborted=0)
    assert_fails_only(check(never.events()), "no_loss")  # handed back, never done


def test_a_job_waiting_in_the_schedule_is_neither_pending_nor_lost_until_the_drain_is_over():
    """EchoMQ's retry into the schedule (due later) and its scheduled admission: the job waits
    for a promote. Promoted, claimed and completed: a pass, one retried and two promoted. Still
    waiting when the drain timed out: undrained in state ``scheduled`` (unknown, not pending,
    not lost); still waiting after a full drain: lost, in state ``scheduled``."""
    def waiting(promoted: bool, drained: int) -> History:
        h = history()
        h.enqueue("a", ts=0)
        h.write(Enqueue("b", due=300), ts=5)
        h.claim("a", attempt=1, worker="w1", ts=10)
        h.write(Retry("a", 1, "w1", to="schedule", due=300), ts=100)
        if promoted:
            h.write(Promote("a", "w2", due=300), ts=310)
            h.write(Promote("b", "w2", due=300), ts=310)
            h.claim("a", attempt=2, worker="w2", ts=320)
            h.claim("b", attempt=1, worker="w2", ts=320)
            h.complete("a", attempt=2, worker="w2", ts=400)
            h.complete("b", attempt=1, worker="w2", ts=400)
        h.phase("end", ts=500, drained=drained, aborted=0)
        return h

    verdict = check(waiting(promoted=True, drained=1).events())
    assert_fails_only(verdict)
    figures = verdict.invariants["no_loss"].figures
    assert (figures["retried"], figures["promoted"], figures["completed"]) == (1, 2, 2)
    undrained = check(waiting(promoted=False, drained=0).events())
    assert undrained.word == "unknown" and undrained.invariants["no_loss"].ok
    assert sorted((job["job"], job["state"]) for job in undrained.undrained) == [
        ("a", "scheduled"), ("b", "scheduled")]
    lost = check(waiting(promoted=False, drained=1).events())
    assert_fails_only(lost, "no_loss")
    assert {(e["job"], e["state"]) for e in lost.invariants["no_loss"].examples} == {
        ("a", "scheduled"), ("b", "scheduled")}


def test_a_retry_from_a_lease_no_longer_live_breaks_exclusive_lease():
    h = paused_holder_comes_back("extend_rejected", "complete_rejected", "complete")
    h.write(Retry("a", 1, "w1", to="delayed"), ts=1550)  # accepted from the reaped lease
    assert_fails_only(check(h.events()), "exclusive_lease")


# --- live_lease_honoured ---------------------------------------------------------------------


def refused_while_live(refusal: str, at_ts: int, attempt: int = 1) -> History:
    """w1 holds a from 10 (deadline 1010); its ``refusal`` at ``at_ts``; then it completes."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    getattr(h, refusal)("a", attempt=attempt, worker="w1", ts=at_ts)
    h.complete("a", attempt=1, worker="w1", ts=at_ts + 1)
    h.phase("end", ts=2000, drained=1, aborted=0)
    return h


@pytest.mark.parametrize("refusal", ["extend_rejected", "complete_rejected"])
def test_the_live_holders_call_refused_with_no_fault_fails_live_lease_honoured(refusal: str):
    verdict = check(refused_while_live(refusal, 500).events())
    assert_fails_only(verdict, "live_lease_honoured")
    (example,) = verdict.invariants["live_lease_honoured"].examples
    assert (example["op"], example["before_deadline_ms"]) == (refusal, 510)
    assert verdict.invariants["live_lease_honoured"].first_violation_ts == 500


def test_a_refusal_at_the_deadline_or_of_another_attempt_or_under_a_fault_is_no_offence():
    assert_fails_only(check(refused_while_live("extend_rejected", 1008).events()))  # < 2 ms
    assert_fails_only(check(refused_while_live("extend_rejected", 500, attempt=7).events()))
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    f1 = h.fault("latency", "w1", ts=100, cuts_off=False)  # the call came through a fault
    h.extend_rejected("a", attempt=1, worker="w1", ts=500)
    h.heal(f1, ts=600)
    h.complete("a", attempt=1, worker="w1", ts=700)
    h.phase("end", ts=2000, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.invariants["live_lease_honoured"].figures == {"refused_under_fault": 1}


# --- figures ---------------------------------------------------------------------------------


def test_recovery_latency_figures_from_known_numbers():
    """Four stranded leases; every latency below is reap/claim/complete ts minus fault ts."""
    h = history()
    for index, job in enumerate("abcd"):
        h.enqueue(job, ts=index)
    h.claim("a", attempt=1, worker="w1", ts=100)
    h.claim("b", attempt=1, worker="w1", ts=150)
    h.claim("c", attempt=1, worker="w2", ts=200)
    h.claim("d", attempt=1, worker="w2", ts=250)
    h.extend("a", attempt=1, worker="w1", ts=900)  # deadline 1900
    h.extend("b", attempt=1, worker="w1", ts=901)  # deadline 1901
    h.extend("c", attempt=1, worker="w2", ts=1000)  # deadline 2000
    h.extend("d", attempt=1, worker="w2", ts=1060)  # deadline 2060
    h.fault("kill", "w1", ts=1000)
    h.fault("kill", "w2", ts=1100)
    h.reap("a", attempt=1, ts=1900)  # 900 after w1's kill
    h.claim("a", attempt=2, worker="w3", ts=1950)  # 950
    h.reap("c", attempt=1, ts=2100)  # 1000 after w2's kill
    h.reap("b", attempt=1, ts=2150)  # 1150
    h.claim("c", attempt=2, worker="w3", ts=2150)  # 1050
    h.claim("b", attempt=2, worker="w3", ts=2200)  # 1200
    h.complete("a", attempt=2, worker="w3", ts=2300)  # 1300
    h.complete("c", attempt=2, worker="w3", ts=2350)  # 1250
    h.reap("d", attempt=1, ts=2400)  # 1300
    h.claim("d", attempt=2, worker="w3", ts=2450)  # 1350
    h.complete("b", attempt=2, worker="w3", ts=2500)  # 1500
    h.complete("d", attempt=2, worker="w3", ts=2700)  # 1600
    verdict = check(h.events())
    assert_fails_only(verdict)
    # nearest rank: p50 of four values is the 2nd, p99 the 4th
    assert verdict.recovery["reap"] == LatencySummary(4, 900, 1000, 1300, 1300)
    assert verdict.recovery["reclaim"] == LatencySummary(4, 950, 1050, 1350, 1350)
    assert verdict.recovery["recomplete"] == LatencySummary(4, 1250, 1300, 1600, 1600)
    assert verdict.stranded == 4
    assert verdict.faults == 2
    assert verdict.redeliveries == Redeliveries(needed=4, needless=0)
    figures = dict(verdict.invariants["recovery_bound"].figures)
    words = figures.pop("model")  # the bound in the reference protocol's words
    assert (words["family"], words["formula"]) == ("reference", "lease_ms + reap_interval_ms")
    assert words["terms"] == f"lease {L} + reap {R}" and words["lines"] == []
    assert figures == {
        "bound_ms": BOUND,
        "lease_ms": L,
        "reap_interval_ms": R,
        "tolerance_ms": TOL,
        "stranded": 4,
        "slowed": 0,
        "taken_back_late": 0,
        "count": 4,
        "min_ms": 900,
        "p50_ms": 1000,
        "p99_ms": 1300,
        "max_ms": 1300,
    }


def test_recovery_p99_is_not_the_max_once_there_are_over_a_hundred_leases():
    h = history()
    jobs = [f"j{index:03d}" for index in range(101)]
    for job in jobs:
        h.enqueue(job, ts=0)
        h.claim(job, attempt=1, worker="w1", ts=0)  # deadline 1000
    h.fault("kill", "w1", ts=100)
    for index, job in enumerate(jobs):
        h.reap(job, attempt=1, ts=1100 + index)  # latencies 1000 .. 1100
    verdict = check(h.events(), final=False)
    assert_fails_only(verdict)
    assert verdict.recovery["reap"] == LatencySummary(101, 1000, 1050, 1099, 1100)


def test_percentile_is_nearest_rank():
    assert percentile([7], 50) == 7
    assert percentile([7], 99) == 7
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile(list(range(1, 101)), 100) == 100
    assert percentile(list(range(1, 201)), 99) == 198
    assert LatencySummary.of([]) == LatencySummary(0, None, None, None, None)


def test_reaps_of_paused_or_killed_holders_are_needed_redeliveries():
    h = history()
    for job in "ab":
        h.enqueue(job, ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.claim("b", attempt=1, worker="w2", ts=0)
    f1 = h.fault("pause", "w1", ts=300, duration_ms=1400)
    h.fault("kill", "w2", ts=300)
    h.reap("a", attempt=1, ts=1250)
    h.reap("b", attempt=1, ts=1250)
    h.claim("a", attempt=2, worker="w3", ts=1260)
    h.claim("b", attempt=2, worker="w3", ts=1261)
    h.complete("a", attempt=2, worker="w3", ts=1300)
    h.complete("b", attempt=2, worker="w3", ts=1301)
    h.heal(f1, ts=1700)
    h.complete_rejected("a", attempt=1, worker="w1", ts=1701, current_attempt=2)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.redeliveries == Redeliveries(needed=2, needless=0)
    assert verdict.stranded == 2


def test_a_reap_of_an_unfaulted_holder_is_needless_even_if_another_worker_was_faulted():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.fault("kill", "w2", ts=300)  # w2 holds nothing; w1 is merely slow
    h.reap("a", attempt=1, ts=1000)
    h.claim("a", attempt=2, worker="w3", ts=1010)
    h.complete("a", attempt=2, worker="w3", ts=1100)
    h.complete_rejected("a", attempt=1, worker="w1", ts=1200, current_attempt=2)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.redeliveries == Redeliveries(needed=0, needless=1)
    assert verdict.stranded == 0


@pytest.mark.parametrize(("kind", "cuts_off", "needed"),
                         [("latency", False, 0), ("partition", True, 1), ("pause", None, 1)])
def test_a_lease_lost_under_a_slowing_fault_is_a_needless_redelivery(kind, cuts_off, needed):
    """Latency leaves the holder working (the lease was too short for the link); a partition
    or a pause does not (recovery was needed). Old histories without cuts_off: cut off."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    f1 = h.fault(kind, "w1", ts=100, duration_ms=2000, cuts_off=cuts_off)
    h.reap("a", attempt=1, ts=1100)
    h.claim("a", attempt=2, worker="w2", ts=1110)
    h.complete("a", attempt=2, worker="w2", ts=1200)
    h.heal(f1, ts=2100)
    h.complete_rejected("a", attempt=1, worker="w1", ts=2200, current_attempt=2)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.redeliveries == Redeliveries(needed=needed, needless=1 - needed)
    if needed:
        assert verdict.stranded == 1 and verdict.recovery["reap"].max_ms == 1000
    else:  # slowed, not stranded: the report must not say "stranded 1, needed 0"
        assert verdict.stranded == 0 and verdict.slowed == 1


def healed_then_renewed(heal_ts: int, renew_ts: int) -> History:
    """w1 is paused at 100 and healed; it renews once, then stalls (no fault) until reaped."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    f1 = h.fault("pause", "w1", ts=100, duration_ms=heal_ts - 100)
    h.heal(f1, ts=heal_ts)
    h.extend("a", attempt=1, worker="w1", ts=renew_ts)
    h.reap("a", attempt=1, ts=renew_ts + L)
    h.claim("a", attempt=2, worker="w2", ts=renew_ts + L + 10)
    h.complete("a", attempt=2, worker="w2", ts=renew_ts + L + 100)
    return h


def test_a_pause_healed_before_the_last_renewal_does_not_make_a_later_reap_needed():
    verdict = check(healed_then_renewed(heal_ts=200, renew_ts=300).events())
    assert_fails_only(verdict)
    assert verdict.redeliveries == Redeliveries(needed=0, needless=1)
    assert verdict.stranded == 0  # the renewal after the pause un-strands the lease


def test_a_renewal_in_the_same_millisecond_after_the_heal_is_after_the_pause():
    verdict = check(healed_then_renewed(heal_ts=300, renew_ts=300).events())
    assert_fails_only(verdict)
    assert verdict.redeliveries == Redeliveries(needed=0, needless=1)


def test_a_briefly_paused_worker_that_renews_after_resuming_holds_no_stranded_lease():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.extend("a", attempt=1, worker="w1", ts=80)
    f1 = h.fault("pause", "w1", ts=100, duration_ms=300)
    h.heal(f1, ts=400)
    h.extend("a", attempt=1, worker="w1", ts=410)
    h.complete("a", attempt=1, worker="w1", ts=600)
    verdict = check(h.events())  # final: a stranded lease would be judged "never recovered"
    assert_fails_only(verdict)
    assert verdict.stranded == 0
    assert verdict.recovery["reap"] == LatencySummary()
    assert verdict.invariants["recovery_bound"].figures["stranded"] == 0
    assert verdict.faults == 1


def test_a_briefly_paused_worker_that_completes_after_resuming_holds_no_stranded_lease():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    f1 = h.fault("pause", "w1", ts=100, duration_ms=300)
    h.heal(f1, ts=400)
    h.complete("a", attempt=1, worker="w1", ts=401)
    verdict = check(h.events())
    assert_fails_only(verdict)
    assert verdict.stranded == 0


# --- config from the history -------------------------------------------------------------------


def test_config_comes_from_the_run_event():
    h = History(lease_ms=2000, reap_interval_ms=500, tolerance_ms=50)
    h.enqueue("a", ts=0)
    events = h.events()
    config = CheckConfig.from_history(events)
    assert config == CheckConfig(lease_ms=2000, reap_interval_ms=500, tolerance_ms=50)
    assert config.bound_ms == 2550
    verdict = check(events, final=False)
    assert verdict.config == config
    assert verdict.invariants["recovery_bound"].figures["bound_ms"] == 2550


def test_config_tolerance_defaults_when_the_run_event_has_none():
    h = History(lease_ms=1500, reap_interval_ms=100, tolerance_ms=None)
    assert CheckConfig.from_history(h.events()) == CheckConfig(1500, 100, DEFAULT_ALLOWANCE_MS)


def test_a_history_without_a_run_event_raises_value_error():
    h = History(run=False)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.complete("a", attempt=1, worker="w1", ts=10)
    with pytest.raises(ValueError, match="no 'run' event"):
        CheckConfig.from_history(h.events())
    with pytest.raises(ValueError, match="no 'run' event"):
        check(h.events())
    assert check(h.events(), CheckConfig(L, R)).passed  # an explicit config needs no run event


def test_a_run_event_without_the_reap_interval_raises_value_error():
    h = History(run=False)
    h.add("run", ts=0, scenario="x", lease_ms=1000)
    with pytest.raises(ValueError, match="lacks"):
        CheckConfig.from_history(h.events())


@pytest.mark.parametrize(
    ("end", "completed"),
    [({"drained": 1, "aborted": 0}, True), ({"drained": 0}, True), ({"aborted": 1}, False)],
)
def test_run_completed_reads_the_end_phase(end: dict[str, int], completed: bool):
    h = history()
    h.phase("drain", ts=10)
    assert run_completed(h.events()) is False
    h.phase("end", ts=20, **end)
    assert run_completed(h.events()) is completed


def test_a_hand_written_history_survives_the_jsonl_round_trip(tmp_path: Path):
    h = killed_holder(reap_ts=1250)
    path = h.write_jsonl(tmp_path / "history.jsonl")
    assert read_history(path) == h.events()
    assert check(read_history(path)).as_dict() == check(h.events()).as_dict()


# --- a model of the correct protocol ---------------------------------------------------------


@dataclass
class SimWorker:
    name: str
    state: str = "alive"  # alive | paused | killed
    slow: bool = False  # alive and unfaulted, but its heartbeat does not run
    held: dict[str, int] = field(default_factory=dict)  # job id -> attempt it believes it holds
    next_beat: int = 0
    pause_id: str | None = None


class ProtocolModel:
    """The correct protocol of docs/design.md §2 on a simulated server clock, emitting its history.

    The server side (pending, active, attempts) follows the Lua scripts; workers heartbeat every
    lease_ms // 3 while alive and not slow; a reaper sweeps at fixed multiples of the interval,
    recording each sweep as reap.lua does (its ``sweep`` event first, then its reaps).
    Alongside, it keeps the numbers the checker should derive (stranded leases and their reap
    latencies, reaps, rejections) as an independent oracle.
    """

    def __init__(self, lease_ms: int, reap_interval_ms: int, workers: int) -> None:
        self.lease_ms = lease_ms
        self.reap_interval_ms = reap_interval_ms
        self.heartbeat_ms = lease_ms // 3
        self.h = History(lease_ms, reap_interval_ms, tolerance_ms=0, sweepers=("reaper",))
        self.now = 0
        self.pending: dict[str, int] = {}  # id -> score (enqueue time, 0 once recovered)
        self.active: dict[str, int] = {}  # id -> deadline
        self.attempts: dict[str, int] = {}
        self.holder: dict[str, str] = {}
        self.jobs: list[str] = []
        self.workers = [SimWorker(f"w{index + 1}") for index in range(workers)]
        self.next_sweep = reap_interval_ms
        # oracle
        self.open_stranded: dict[str, list[tuple[int, str, int]]] = {}  # (attempt, worker, ts)
        self.reap_latencies: list[int] = []
        self.faulted_since_renewal: set[str] = set()
        self.reaps = 0
        self.needed = 0
        self.needless = 0
        self.faults = 0
        self.slow_used = False
        self.rejected: Counter[str] = Counter()

    # --- server scripts ---------------------------------------------------------------------
    def enqueue(self) -> None:
        job = f"job-{len(self.jobs) + 1:03d}"
        self.jobs.append(job)
        self.attempts[job] = 0
        self.pending[job] = self.now
        self.h.enqueue(job, ts=self.now)

    def claim(self, worker: SimWorker) -> None:
        if not self.pending:
            return
        job = min(self.pending, key=lambda j: (self.pending[j], j))
        del self.pending[job]
        self.attempts[job] += 1
        self.active[job] = self.now + self.lease_ms
        self.holder[job] = worker.name
        self.faulted_since_renewal.discard(job)
        if not worker.held:
            worker.next_beat = self.now + self.heartbeat_ms
        worker.held[job] = self.attempts[job]
        self.h.claim(job, self.attempts[job], worker.name, ts=self.now)

    def _live(self, job: str, attempt: int) -> bool:
        return self.attempts[job] == attempt and job in self.active

    def _holder_acted(self, job: str, attempt: int, worker: str) -> None:
        self.open_stranded[job] = [
            item
            for item in self.open_stranded.get(job, [])
            if not (item[0] == attempt and item[1] == worker)
        ]

    def extend(self, worker: SimWorker, job: str) -> None:
        attempt = worker.held[job]
        if self._live(job, attempt):
            self.active[job] = self.now + self.lease_ms
            self.faulted_since_renewal.discard(job)
            self.h.extend(job, attempt, worker.name, ts=self.now)
            self._holder_acted(job, attempt, worker.name)
        else:
            del worker.held[job]  # the lease is gone: stop renewing it
            self.rejected["extend_rejected"] += 1
            self.h.extend_rejected(
                job, attempt, worker.name, ts=self.now, current_attempt=self.attempts[job]
            )

    def complete(self, worker: SimWorker, job: str) -> None:
        attempt = worker.held.pop(job)
        if self._live(job, attempt):
            del self.active[job]
            self.h.complete(job, attempt, worker.name, ts=self.now)
            self._holder_acted(job, attempt, worker.name)
        else:
            self.rejected["complete_rejected"] += 1
            self.h.complete_rejected(
                job, attempt, worker.name, ts=self.now, current_attempt=self.attempts[job]
            )

    def sweep(self) -> None:
        self.h.sweep("reaper", ts=self.now)
        for job in sorted(self.active, key=lambda j: (self.active[j], j)):
            deadline = self.active[job]
            if deadline > self.now:
                break
            del self.active[job]
            self.pending[job] = 0
            self.h.reap(job, self.attempts[job], ts=self.now, worker=self.holder[job])
            self.reaps += 1
            if job in self.faulted_since_renewal:
                self.needed += 1
            else:
                self.needless += 1
            self.faulted_since_renewal.discard(job)
            for attempt, _, fault_ts in self.open_stranded.pop(job, []):
                assert attempt == self.attempts[job]
                self.reap_latencies.append(self.now - fault_ts)

    # --- faults -------------------------------------------------------------------------------
    def fault(self, worker: SimWorker, kind: str) -> None:
        self.faults += 1
        fault_id = self.h.fault(kind, worker.name, ts=self.now)
        for job in sorted(self.active):
            if self.holder[job] == worker.name:
                self.open_stranded.setdefault(job, []).append(
                    (self.attempts[job], worker.name, self.now)
                )
                self.faulted_since_renewal.add(job)
        if kind == "kill":
            worker.state = "killed"
        else:
            worker.state = "paused"
            worker.pause_id = fault_id

    def heal(self, worker: SimWorker) -> None:
        assert worker.pause_id is not None
        self.h.heal(worker.pause_id, ts=self.now)
        worker.state = "alive"
        worker.pause_id = None

    # --- the clock ------------------------------------------------------------------------------
    def beat(self, worker: SimWorker) -> None:
        for job in sorted(worker.held):
            self.extend(worker, job)
        worker.next_beat = self.now + self.heartbeat_ms

    def advance(self, to: int) -> None:
        """Run every reaper tick and heartbeat due up to ``to``, in time order."""
        while True:
            timers = [(self.next_sweep, 0, -1)]
            timers += [
                (worker.next_beat, 1, index)
                for index, worker in enumerate(self.workers)
                if worker.state == "alive" and not worker.slow and worker.held
            ]
            when, _, index = min(timers)
            if when > to:
                break
            self.now = max(self.now, when)
            if index < 0:
                self.sweep()
                self.next_sweep += self.reap_interval_ms
            else:
                self.beat(self.workers[index])
        self.now = max(self.now, to)

    # --- driving it ------------------------------------------------------------------------------
    def step(self, gap: int, action: str, index: int, choice: int) -> None:
        self.advance(self.now + gap)
        worker = self.workers[index % len(self.workers)]
        if action in ("pause", "kill") and choice % 2 == 0:
            worker = self.oldest_lease_holder() or worker  # the nemesis's favourite target
        if action == "enqueue":
            self.enqueue()
        elif worker.state == "alive" and action == "claim":
            self.claim(worker)
        elif worker.state == "alive" and action == "complete" and worker.held:
            held = sorted(worker.held)
            self.complete(worker, held[choice % len(held)])
        elif worker.state == "alive" and action == "slow":
            worker.slow = not worker.slow
            self.slow_used = True
        elif worker.state == "alive" and action == "pause":
            self.fault(worker, "pause")
        elif worker.state == "paused" and action == "heal":
            self.heal(worker)
        elif (
            action == "kill"
            and worker.state != "killed"
            and sum(other.state != "killed" for other in self.workers) > 1  # keep one to drain
        ):
            self.fault(worker, "kill")

    def oldest_lease_holder(self) -> SimWorker | None:
        live = sorted((deadline, job) for job, deadline in self.active.items())
        by_name = {worker.name: worker for worker in self.workers}
        return by_name[self.holder[live[0][1]]] if live else None

    def drain(self) -> None:
        """Heal, then every alive worker finishes what it holds and what is left."""
        self.h.phase("heal", ts=self.now)
        for worker in self.workers:
            if worker.state == "paused":
                self.heal(worker)
            worker.slow = False
        self.h.phase("drain", ts=self.now)
        alive = [worker for worker in self.workers if worker.state == "alive"]
        assert alive
        for _ in range(100_000):
            if not self.pending and not self.active:
                break
            for worker in alive:
                for job in sorted(worker.held):
                    self.advance(self.now + 1)
                    if job in worker.held:
                        self.complete(worker, job)
                if self.pending:
                    self.advance(self.now + 1)
                    self.claim(worker)
            self.advance(self.now + 10)
        else:
            raise AssertionError("the model did not drain")
        for worker in alive:  # stale beliefs: these completes are rejected
            for job in sorted(worker.held):
                self.complete(worker, job)
        self.h.phase("end", ts=self.now, drained=1, aborted=0)

    @property
    def stranded(self) -> int:
        return len(self.reap_latencies) + sum(len(items) for items in self.open_stranded.values())


ACTIONS = ["enqueue"] * 3 + ["claim"] * 3 + ["complete"] * 2 + ["pause", "heal", "kill", "slow"]


@st.composite
def protocol_runs(draw: st.DrawFn) -> ProtocolModel:
    model = ProtocolModel(
        lease_ms=draw(st.sampled_from([300, 600, 1000])),
        reap_interval_ms=draw(st.sampled_from([50, 100, 250])),
        workers=draw(st.integers(1, 4)),
    )
    model.h.phase("chaos", ts=0)
    model.enqueue()
    steps = st.tuples(
        st.integers(0, 700), st.sampled_from(ACTIONS), st.integers(0, 3), st.integers(0, 7)
    )
    for step in draw(st.lists(steps, min_size=5, max_size=60)):
        model.step(*step)
    model.drain()
    return model


PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(protocol_runs())
def test_every_history_of_the_correct_protocol_passes(model: ProtocolModel):
    verdict = check(model.h.events())
    assert verdict.failed_invariants() == [], verdict.as_dict()
    assert verdict.passed
    assert verdict.jobs.enqueued == verdict.jobs.completed == len(model.jobs)
    assert verdict.faults == model.faults
    assert verdict.rejected == {kind: n for kind, n in model.rejected.items() if n}
    # stranded leases and their recovery, against the model's own bookkeeping
    assert not any(model.open_stranded.values())
    assert verdict.stranded == model.stranded
    assert verdict.recovery["reap"] == LatencySummary.of(model.reap_latencies)
    if model.reap_latencies:
        assert max(model.reap_latencies) <= model.lease_ms + model.reap_interval_ms
    # every reap is a redelivery of one kind or the other, split exactly as the model saw it
    redeliveries = verdict.redeliveries
    assert redeliveries.needed + redeliveries.needless == model.reaps
    assert redeliveries.needed == model.needed
    assert redeliveries.needless == model.needless
    if not model.slow_used:
        assert redeliveries.needless == 0
    # the reaper swept on its grid, every sweep recorded: its cadence judged, and held
    cadence = verdict.invariants["reap_cadence"]
    sweeps = [record["ts"] for record in model.h.records() if record["type"] == "sweep"]
    assert cadence.status == "ok" and cadence.figures["sweepers"] == ["reaper"]
    assert cadence.figures["sweeps"] == len(sweeps)
    if len(sweeps) > 1:
        assert cadence.figures["max_gap_ms"] == model.reap_interval_ms


@PROPERTY
@given(protocol_runs(), st.data())
def test_sweeps_missing_from_a_stretch_fail_reap_cadence_only(
    model: ProtocolModel, data: st.DataObject
):
    """The same histories with a run of consecutive sweeps taken out (a reaper that skipped
    those ticks; its reaps, if any, left as they were): one gap between two of its sweeps
    longer than reap_interval_ms + the allowance, and no other invariant sees anything."""
    records = model.h.records()
    sweeps = [index for index, record in enumerate(records) if record["type"] == "sweep"]
    interval, limit = model.reap_interval_ms, model.reap_interval_ms + DEFAULT_SWEEP_ALLOWANCE_MS
    skipped = limit // interval  # that many ticks skipped in a row leave a gap past the limit
    assume(len(sweeps) >= skipped + 2)
    first = data.draw(st.integers(1, len(sweeps) - 1 - skipped), label="first skipped")
    dropped = set(sweeps[first:first + skipped])
    kept = [record for index, record in enumerate(records) if index not in dropped]
    verdict = check(to_events(resequence(kept)))
    assert verdict.failed_invariants() == ["reap_cadence"], verdict.as_dict()
    result = verdict.invariants["reap_cadence"]
    (example,) = result.examples
    earlier, later = (int(records[sweeps[first - 1]]["ts"]),
                      int(records[sweeps[first + skipped]]["ts"]))
    assert (example["sweep_ts"], example["next_sweep_ts"]) == (earlier, later)
    assert example["gap_ms"] == (skipped + 1) * interval > limit
    assert result.first_violation_ts == earlier + limit


@PROPERTY
@given(protocol_runs(), st.data())
def test_a_duplicated_accepted_complete_fails_no_double_completion(
    model: ProtocolModel, data: st.DataObject
):
    records = model.h.records()
    completes = [index for index, record in enumerate(records) if record["type"] == "complete"]
    assert completes  # the model always enqueues a job and drains it
    original = data.draw(st.sampled_from(completes), label="complete")
    at = data.draw(st.integers(original + 1, len(records)), label="insert at")
    duplicate = dict(records[original], ts=records[at - 1]["ts"])
    mutated = resequence(records[:at] + [duplicate] + records[at:])
    verdict = check(to_events(mutated))
    result = verdict.invariants["no_double_completion"]
    assert not result.ok
    assert result.violations == 1
    assert result.examples == [{"job": records[original]["id"], "accepted_completes": 2}]
    # the duplicate has no live lease behind it either
    assert verdict.invariants["exclusive_lease"].violations == 1
    for name in ("no_loss", "recovery_bound", "no_premature_reap"):
        assert verdict.invariants[name].ok, name


@PROPERTY
@given(protocol_runs(), st.data())
def test_dropping_the_completes_of_a_job_fails_no_loss(model: ProtocolModel, data: st.DataObject):
    records = model.h.records()
    done = sorted({record["id"] for record in records if record["type"] == "complete"})
    job = data.draw(st.sampled_from(done), label="job")
    kept = [r for r in records if not (r["type"] == "complete" and r["id"] == job)]
    verdict = check(to_events(resequence(kept)))
    result = verdict.invariants["no_loss"]
    assert not result.ok
    assert result.violations == 1
    assert [example["job"] for example in result.examples] == [job]
    assert verdict.jobs.lost == 1
    for name in ("no_double_completion", "no_premature_reap", "exclusive_lease"):
        assert verdict.invariants[name].ok, name


def grants_ended_by_their_holder(records: list[dict]) -> list[int]:
    """Indices of the claims and accepted extends whose lease its holder renewed again or
    completed by the deadline written: a longer deadline there changes nothing else the history
    shows (no reap, no late call of that lease follows)."""
    eligible = []
    for index, record in enumerate(records):
        if record["type"] not in ("claim", "extend"):
            continue
        following = next((later for later in records[index + 1:] if later.get("id") ==
                          record["id"] and later["type"] in ("extend", "complete", "reap",
                                                             "dead", "claim")), None)
        if (following is not None and following["type"] in ("extend", "complete")
                and following["attempt"] == record["attempt"]
                and int(following["ts"]) <= int(record["deadline"])):
            eligible.append(index)
    return eligible


@PROPERTY
@given(protocol_runs(), st.data())
def test_a_deadline_written_past_the_recorded_lease_fails_lease_length_only(
    model: ProtocolModel, data: st.DataObject
):
    """A grant that records lease_ms as configured but writes a longer deadline to active: the
    checker judges the deadline written (and the record's disagreement with it), nothing else
    changes, so lease_length alone fails, once."""
    records = model.h.records()
    eligible = grants_ended_by_their_holder(records)
    assume(eligible)
    index = data.draw(st.sampled_from(eligible), label="grant")
    stretch = data.draw(st.integers(2, 3 * model.lease_ms), label="stretch ms")
    grant = records[index]
    assert int(grant["deadline"]) - int(grant["ts"]) == int(grant["lease_ms"]) == model.lease_ms
    records[index] = dict(grant, deadline=str(int(grant["deadline"]) + stretch))
    verdict = check(to_events(records))
    assert verdict.failed_invariants() == ["lease_length"], verdict.as_dict()
    result = verdict.invariants["lease_length"]
    assert result.violations == 1 and result.figures["misrecorded"] == 1
    (example,) = result.examples
    assert (example["job"], example["op"], example["seq"]) == (grant["id"], grant["type"],
                                                               grant["seq"])
    assert (example["lease_ms"], example["recorded_lease_ms"]) == (model.lease_ms + stretch,
                                                                   model.lease_ms)


@PROPERTY
@given(protocol_runs(), st.data())
def test_a_grant_recording_another_lease_ms_than_it_wrote_fails_lease_length_only(
    model: ProtocolModel, data: st.DataObject
):
    """The deadline written is right, the lease_ms recorded beside it is not: the cross-check
    alone catches it."""
    records = model.h.records()
    grants = [i for i, record in enumerate(records) if record["type"] in ("claim", "extend")]
    index = data.draw(st.sampled_from(grants), label="grant")
    recorded = data.draw(st.integers(0, 3 * model.lease_ms).filter(
        lambda ms: abs(ms - model.lease_ms) > 1), label="recorded lease_ms")
    records[index] = dict(records[index], lease_ms=str(recorded))
    verdict = check(to_events(records))
    assert verdict.failed_invariants() == ["lease_length"], verdict.as_dict()
    result = verdict.invariants["lease_length"]
    assert result.violations == 1 and result.figures["misrecorded"] == 1
    assert result.examples[0]["recorded_lease_ms"] == recorded


# --- attempts_monotonic ------------------------------------------------------------------------


def test_rising_attempts_across_redeliveries_pass():
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.fault("kill", "w1", ts=100)
    h.reap("a", attempt=1, ts=1100)
    h.claim("a", attempt=2, worker="w2", ts=1120)
    h.complete("a", attempt=2, worker="w2", ts=1200)
    h.phase("end", ts=1300, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict)


def test_a_claim_reusing_an_earlier_attempt_fails_attempts_monotonic():
    """A store rolled back after the claim of attempt 2 (the ledger saw it; the store lost the
    HINCRBY) gives the same job out again as attempt 2: two holders of one fencing token."""
    h = history()
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.reap("a", attempt=1, ts=1100)
    h.claim("a", attempt=2, worker="w2", ts=1120)
    h.complete("a", attempt=2, worker="w2", ts=1200)
    h.claim("a", attempt=2, worker="w3", ts=1500)  # after the rollback
    h.complete("a", attempt=2, worker="w3", ts=1600)
    h.phase("end", ts=1700, drained=1, aborted=0)
    verdict = check(h.events())
    result = verdict.invariants["attempts_monotonic"]
    assert not result.ok and result.violations == 1
    assert result.examples == [{"job": "a", "attempt": 2, "worker": "w3",
                                "seq": result.examples[0]["seq"], "earlier_attempt": 2}]
    assert result.first_violation_ts == 1500
    assert "attempts_monotonic" in verdict.failed_invariants()


def test_a_claim_with_a_lower_attempt_fails_attempts_monotonic_once_per_claim():
    h = history()
    h.enqueue("a", ts=0)
    h.enqueue("b", ts=0)
    h.claim("a", attempt=3, worker="w1", ts=10)
    h.claim("b", attempt=1, worker="w1", ts=10)
    h.complete("a", attempt=3, worker="w1", ts=50)
    h.claim("a", attempt=1, worker="w2", ts=100)  # the counter went back to 0
    h.complete("a", attempt=1, worker="w2", ts=150)
    h.complete("b", attempt=1, worker="w1", ts=150)
    h.phase("end", ts=200, drained=1, aborted=0)
    result = check(h.events()).invariants["attempts_monotonic"]
    assert (result.ok, result.violations) == (False, 1)
    assert result.examples[0]["earlier_attempt"] == 3 and result.examples[0]["attempt"] == 1


TOKEN = "9b2f0c1e-6d1c-4a7e-9d0e-3f1a2b3c4d5e:"


def claim_with(h: History, job_id: str, attempt: int, worker: str, ts: int, token: str) -> None:
    """A claim handing out a lock token of the queue's own (BullMQ)."""
    h.write(Claim(job_id, attempt, worker, L, ts + L, token=TOKEN + token), ts)


def test_a_token_handed_on_to_the_next_job_once_its_lock_is_gone_passes():
    """BullMQ's finish fetches the next job with the finished one's token: no reuse."""
    h = history()
    for job_id in "abc":
        h.enqueue(job_id, ts=0)
    claim_with(h, "a", 1, "w1", 10, "0")
    h.complete("a", 1, "w1", ts=100)
    claim_with(h, "b", 1, "w1", 100, "0")  # the same call: the token handed on
    h.complete("b", 1, "w1", ts=200)
    claim_with(h, "c", 1, "w2", 200, "0")  # another worker's, once nothing holds it
    h.complete("c", 1, "w2", ts=300)
    h.phase("end", ts=400, drained=1, aborted=0)
    assert_fails_only(check(h.events()))


def test_a_token_a_live_lease_holds_handed_out_again_fails_attempts_monotonic():
    h = history()
    h.enqueue("a", ts=0)
    h.enqueue("b", ts=0)
    claim_with(h, "a", 1, "w1", 10, "0")
    claim_with(h, "b", 1, "w2", 20, "0")  # while a's lock holds it
    h.complete("a", 1, "w1", ts=100)
    h.complete("b", 1, "w2", ts=110)
    h.phase("end", ts=400, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict, "attempts_monotonic")
    (example,) = verdict.invariants["attempts_monotonic"].examples
    assert example["reason"] == "a lock token handed out while a live lease holds it"
    assert (example["job"], example["held_by_job"], example["held_by_attempt"]) == ("b", "a", 1)


def test_a_token_of_a_reaped_lease_handed_out_again_for_its_job_fails_attempts_monotonic():
    """Its holder may still present it, and one lock check would let both through."""
    h = history()
    h.enqueue("a", ts=0)
    claim_with(h, "a", 1, "w1", 10, "0")
    h.fault("pause", "w1", ts=100)
    h.reap("a", attempt=1, ts=1100)
    claim_with(h, "a", 2, "w2", 1110, "0")
    h.complete("a", 2, "w2", ts=1200)
    h.phase("end", ts=1300, drained=1, aborted=0)
    verdict = check(h.events())
    assert_fails_only(verdict, "attempts_monotonic")
    assert verdict.invariants["attempts_monotonic"].examples[0]["reason"] == (
        "a lock token handed out again for a job whose lease with it was reaped")


# --- store fault figures -------------------------------------------------------------------------


def test_store_fault_recovery_measures_each_client_from_the_kill():
    h = history()
    h.enqueue("a", ts=0)
    h.enqueue("b", ts=5)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.claim("b", attempt=1, worker="w2", ts=300)  # back before the runner wrote the fault
    h.add("fault", ts=400, kind="valkey_restart", worker="valkey", fault_id="f1",
          target="valkey", cuts_off=1, killed_ts=100, down_ms=250)
    h.extend("a", attempt=1, worker="w1", ts=390)
    h.enqueue("c", ts=500)
    h.complete("a", attempt=1, worker="w1", ts=600)
    h.complete("b", attempt=1, worker="w2", ts=600)
    events = h.events()
    verdict = check(events)
    assert verdict.store_faults == [{
        "fault_id": "f1", "kind": "valkey_restart", "node": "valkey", "killed_ts": 100,
        "down_ms": 250, "clients_recovered": 0, "max_client_ms": None, "clients_ms": {},
        "producer_ms": None}]
    assert verdict.stranded == 0 and verdict.faults == 1
    # The second pass (runs with store faults only) measures the clients from the kill, also
    # those whose transitions precede the fault event, written once the store served again.
    [figure] = store_fault_recovery(iter(events), verdict.store_faults)
    assert figure == {"fault_id": "f1", "kind": "valkey_restart", "node": "valkey",
                      "killed_ts": 100, "down_ms": 250, "clients_recovered": 2,
                      "max_client_ms": 290, "clients_ms": {"w1": 290, "w2": 200},
                      "producer_ms": 400}
    assert check(history().events()).store_faults == []
