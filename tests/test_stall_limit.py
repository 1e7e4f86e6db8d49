"""Stall limit and dead letters, drain outcomes, needless redeliveries by fault and by handler
duration: the checker on hand-written histories, the reap scripts (sound and both reap
variants) on a real valkey-server."""

from __future__ import annotations

import json
import time

import pytest
from histories import History

from chaos.check.checker import Outcomes, check
from chaos.history.events import iter_stream
from chaos.protocol.client import QueueClient
from chaos.report.summary import build_report, summary_text

L, R, TOL = 1000, 250, 100


def stalled_to_death(h: History, job: str, max_stalls: int, start: int = 0) -> int:
    """Claim ``job`` and let every lease lapse: max_stalls reaps, then the dead-letter."""
    ts = start
    for attempt in range(1, max_stalls + 2):
        h.claim(job, attempt=attempt, worker=f"w{attempt}", ts=ts)
        h.fault("crash", f"w{attempt}", ts=ts + 5)
        ts += L + 100
        if attempt <= max_stalls:
            h.reap(job, attempt=attempt, ts=ts)
        else:
            h.dead(job, attempt=attempt, ts=ts, stalls=attempt)
    return ts


# --- checker: stall limit and no_loss ---------------------------------------------------------


def test_a_job_dead_lettered_after_exactly_max_stalls_recoveries_is_not_lost():
    h = History(L, R, TOL, max_stalls=3)
    h.enqueue("poison", ts=0, kind="poison")
    h.enqueue("ok", ts=0)
    h.claim("ok", attempt=1, worker="w9", ts=1)
    h.complete("ok", attempt=1, worker="w9", ts=50)
    end = stalled_to_death(h, "poison", max_stalls=3, start=2)
    h.phase("end", ts=end + 10, drained=1, aborted=0)
    verdict = check(h.events())
    assert verdict.passed, verdict.failed_invariants()
    assert verdict.jobs.lost == 0 and verdict.jobs.dead_lettered == 1
    assert verdict.outcomes == Outcomes(completed=1, dead_lettered=1, lost=0, duplicated=0,
                                        unexpected=0)
    assert verdict.dead_letter.moved_to_dead == 1 and verdict.dead_letter.poison == 1
    assert verdict.dead_letter.recoveries_before_dead == {"3": 1}
    # Every recovery was needed (each holder crashed) and each was a reap event.
    assert verdict.redeliveries.needed == 3 and verdict.redeliveries.needless == 0
    assert verdict.invariants["stall_limit"].figures == {"max_stalls": 3, "moved_to_dead": 1}


def test_a_recheck_without_a_run_event_takes_max_stalls_from_scenario_json(tmp_path):
    from chaos.run.offline import recheck

    h = History(L, R, TOL, run=False)
    h.enqueue("poison", ts=0, kind="poison")
    end = stalled_to_death(h, "poison", max_stalls=2)
    h.phase("end", ts=end + 10, drained=1, aborted=0)
    h.write_jsonl(tmp_path / "history.jsonl")
    (tmp_path / "scenario.json").write_text(json.dumps(
        {"topology": {"lease_ms": L, "reap_interval_ms": R, "max_stalls": 2},
         "check": {"tolerance_ms": TOL}}))
    saved = recheck(tmp_path)
    assert saved.verdict.config.max_stalls == 2
    assert saved.word == "pass", saved.verdict.failed_invariants()


def test_a_dead_letter_without_a_stall_limit_is_a_loss_and_breaks_the_limit():
    h = History(L, R, TOL)  # no max_stalls in the run event
    h.enqueue("a", ts=0)
    end = stalled_to_death(h, "a", max_stalls=2)
    verdict = check(h.events())
    assert sorted(verdict.failed_invariants()) == ["no_loss", "stall_limit"]
    assert verdict.invariants["no_loss"].examples == [
        {"job": "a", "state": "dead", "attempt": None}]
    assert verdict.outcomes.lost == 1 and verdict.outcomes.dead_lettered == 0
    assert verdict.invariants["stall_limit"].first_violation_ts == end


@pytest.mark.parametrize("recoveries", [1, 3])
def test_dead_letter_after_the_wrong_number_of_recoveries_breaks_stall_limit(recoveries: int):
    h = History(L, R, TOL, max_stalls=2)
    h.enqueue("a", ts=0)
    ts = 0
    for attempt in range(1, recoveries + 1):
        h.claim("a", attempt=attempt, worker="w1", ts=ts)
        ts += L + 50
        h.reap("a", attempt=attempt, ts=ts)
    h.claim("a", attempt=recoveries + 1, worker="w1", ts=ts + 1)
    h.dead("a", attempt=recoveries + 1, ts=ts + L + 60, stalls=recoveries + 1)
    verdict = check(h.events())
    assert verdict.failed_invariants() == ["stall_limit"]
    # Recovered 3 times with a limit of 2: the third reap is flagged too.
    assert verdict.invariants["stall_limit"].violations == (1 if recoveries == 1 else 2)
    assert verdict.outcomes.dead_lettered == 1


def test_a_dead_letter_before_the_lease_lapsed_is_premature():
    h = History(L, R, TOL, max_stalls=1)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.reap("a", attempt=1, ts=L + 10)
    h.claim("a", attempt=2, worker="w2", ts=L + 20)
    h.dead("a", attempt=2, ts=L + 500, stalls=2)  # its deadline is 2 L + 20
    verdict = check(h.events())
    assert verdict.failed_invariants() == ["no_premature_reap"]


# --- checker: outcomes ------------------------------------------------------------------------


def test_outcomes_partition_every_job_in_jepsen_vocabulary():
    h = History(L, R, TOL, max_stalls=1)
    for job in ("once", "twice", "lost", "dead"):
        h.enqueue(job, ts=0)
    h.claim("once", attempt=1, worker="w1", ts=1)
    h.complete("once", attempt=1, worker="w1", ts=2)
    h.claim("twice", attempt=1, worker="w1", ts=3)
    h.complete("twice", attempt=1, worker="w1", ts=4)
    h.complete("twice", attempt=1, worker="w1", ts=5)  # a broken protocol accepted it again
    h.complete("ghost", attempt=1, worker="w1", ts=6)  # never enqueued
    h.claim("dead", attempt=1, worker="w2", ts=10)
    h.reap("dead", attempt=1, ts=L + 20)
    h.claim("dead", attempt=2, worker="w2", ts=L + 30)
    h.dead("dead", attempt=2, ts=2 * L + 40, stalls=2)
    verdict = check(h.events())
    assert verdict.outcomes == Outcomes(completed=1, dead_lettered=1, lost=1, duplicated=1,
                                        unexpected=1)
    enqueued = verdict.jobs.enqueued
    outcomes = verdict.outcomes
    assert enqueued == (outcomes.completed + outcomes.dead_lettered + outcomes.lost
                        + outcomes.duplicated)
    assert verdict.as_dict()["outcomes"]["duplicated"] == 1


def test_outcomes_of_an_aborted_run_judge_no_loss():
    h = History(L, R, TOL)
    h.enqueue("a", ts=0)
    verdict = check(h.events(), final=False)
    assert verdict.outcomes == Outcomes(judged=False)


# --- checker: needless redeliveries by fault and by handler duration ----------------------


def test_needless_redeliveries_are_bucketed_by_handler_duration_and_fault():
    h = History(L, R, TOL)
    h.enqueue("short", ts=0)
    h.enqueue("long", ts=0)
    h.enqueue("blocked", ts=0)
    h.claim("short", attempt=1, worker="w1", ts=0)
    h.complete("short", attempt=1, worker="w1", ts=700)  # 0.7 L
    h.claim("long", attempt=1, worker="w1", ts=0)
    h.reap("long", attempt=1, ts=L + 50)  # no heartbeat: lapsed under a live holder
    h.claim("long", attempt=2, worker="w2", ts=L + 60)
    h.complete_rejected("long", attempt=1, worker="w1", ts=2500, current_attempt=2)  # 2.5 L
    h.complete("long", attempt=2, worker="w2", ts=L + 400)
    h.claim("blocked", attempt=1, worker="w3", ts=10)
    h.fault("block_heartbeat", "w3", ts=20, cuts_off=False)
    h.reap("blocked", attempt=1, ts=L + 100)
    h.claim("blocked", attempt=2, worker="w2", ts=L + 110)
    h.complete("blocked", attempt=2, worker="w2", ts=L + 300)
    h.complete_rejected("blocked", attempt=1, worker="w3", ts=L + 150, current_attempt=2)
    verdict = check(h.events())
    assert verdict.passed
    assert verdict.redeliveries.needless == 2 and verdict.redeliveries.needed == 0
    assert verdict.needless_by_fault == {"none": 1, "block_heartbeat": 1}
    by_bucket = {row["bucket"]: (row["attempts"], row["needless"])
                 for row in verdict.needless_by_duration}
    assert by_bucket == {"0-0.5x": (2, 0), "0.5-1x": (1, 0), "1-1.5x": (1, 1),
                         "1.5-2x": (0, 0), "2-3x": (1, 1), ">=3x": (0, 0)}


def test_a_needless_redelivery_whose_holder_never_completes_is_in_a_row_of_its_own():
    """3,000 ms handlers against a 2,000 ms lease (no renewal, as Celery's): each attempt is
    reaped from under its live holder. One holder acks 3 s after its claim (1.5x); the other's
    ack is credited to another attempt (Celery credits an ack to the worker's latest claim),
    so its own attempt's end is never seen: it lands in no time bucket. The figure keeps it, in
    a row of its own, and every needless redelivery is in some row; the rows are the time from
    delivery (the claim) to the ack, and the summary names them so."""
    lease = 2 * L
    h = History(lease, R, TOL)
    for job in ("a", "b"):
        h.enqueue(job, ts=0)
        h.claim(job, attempt=1, worker="w1" if job == "a" else "w2", ts=0)
    h.reap("a", attempt=1, ts=lease + 100)
    h.reap("b", attempt=1, ts=lease + 100)
    h.claim("a", attempt=2, worker="w3", ts=lease + 150)
    h.claim("b", attempt=2, worker="w2", ts=lease + 150)  # w2 again: its ack credits this one
    h.complete_rejected("a", attempt=1, worker="w1", ts=3000, current_attempt=2)  # 1.5x
    h.complete("b", attempt=2, worker="w2", ts=3000)  # b's first handler ends: 0.4x of 2
    h.complete("a", attempt=2, worker="w3", ts=lease + 150 + 3000)
    verdict = check(h.events())
    assert verdict.redeliveries.needless == 2
    rows = {row["bucket"]: (row["attempts"], row["needless"])
            for row in verdict.needless_by_duration}
    assert rows["1.5-2x"] == (2, 1) and rows["0-0.5x"] == (1, 0)
    assert rows["no complete"] == (1, 1)
    assert sum(needless for _, needless in rows.values()) == verdict.redeliveries.needless
    text = summary_text(build_report("hand-written", "pass", verdict))
    assert "needless  by delivery-to-ack time (x lease): 0-0.5x 0/1  1.5-2x 1/2  " \
        "no complete 1/1" in text
    assert "handler duration" not in text


# --- the reap scripts: the stall limit on a real server -----------------------------------

LAPSE_S = 0.06


@pytest.mark.parametrize("protocol", ["sound", "client-clock", "nonatomic-reap"])
def test_reap_dead_letters_a_job_at_the_stall_past_the_limit(queue: QueueClient,
                                                             protocol: str):
    reaper = QueueClient(queue.client, queue.keys, protocol=protocol, race_window_ms=0)
    queue.enqueue("p", "poison", kind="poison")
    for attempt in (1, 2, 3):
        job = queue.claim(20, "w1")
        assert job is not None and job.attempt == attempt
        time.sleep(LAPSE_S)
        assert reaper.reap(100, max_stalls=2) == 1
    history = list(iter_stream(queue.client, queue.keys.events))
    assert history[0].extra["kind"] == "poison"
    moves = [(e.type, e.attempt, e.extra["stalls"]) for e in history
             if e.type in ("reap", "dead")]
    assert moves == [("reap", 1, "1"), ("reap", 2, "2"), ("dead", 3, "3")]
    assert queue.client.zrange(queue.keys.dead, 0, -1) == ["p"]
    assert queue.backlog() == (0, 0)  # neither pending nor active: the drain is over
    assert queue.client.hget(queue.keys.job("p"), "state") == "dead"
    assert queue.claim(20, "w1") is None


def test_reap_without_a_limit_never_dead_letters(queue: QueueClient):
    queue.enqueue("a")
    for _ in range(4):
        assert queue.claim(20, "w1") is not None
        time.sleep(LAPSE_S)
        assert queue.reap(100) == 1
    assert queue.client.zcard(queue.keys.dead) == 0
    assert queue.client.hget(queue.keys.job("a"), "stalls") == "4"
