"""The five protocol scripts against a real valkey-server."""

from __future__ import annotations

import time

import pytest
import redis
from redis.exceptions import ConnectionError as StoreConnectionError

from chaos.history.events import iter_stream
from chaos.protocol.client import NotReplicated, QueueClient, redis_client
from chaos.reference.reaper import sweep


def events_of(queue: QueueClient) -> list[tuple[str, str | None, int | None]]:
    return [(e.type, e.job_id, e.attempt) for e in iter_stream(queue.client, queue.keys.events)]


def test_every_transition_appends_its_event_stamped_by_the_server_clock(queue: QueueClient):
    before = queue.server_time_ms()
    assert queue.enqueue("a", "payload")
    job = queue.claim(5000, "w1")
    assert job is not None and (job.job_id, job.payload, job.attempt) == ("a", "payload", 1)
    assert queue.extend("a", 1, 5000, "w1") is not None
    assert queue.complete("a", 1, "w1")
    after = queue.server_time_ms()
    history = list(iter_stream(queue.client, queue.keys.events))
    assert [e.type for e in history] == ["enqueue", "claim", "extend", "complete"]
    assert all(before <= e.ts <= after for e in history)
    claim = history[1]
    assert claim.deadline == claim.ts + 5000 and claim.worker == "w1" and claim.lease_ms == 5000


def test_enqueue_of_an_existing_id_is_refused(queue: QueueClient):
    assert queue.enqueue("a")
    assert not queue.enqueue("a")
    assert queue.client.zcard(queue.keys.pending) == 1


def test_claim_on_empty_queue_returns_none_and_records_nothing(queue: QueueClient):
    assert queue.claim(1000, "w1") is None
    assert events_of(queue) == []


def test_claim_takes_oldest_first_and_leases_on_the_server_clock(queue: QueueClient):
    for job_id in ("first", "second"):
        queue.enqueue(job_id)
        time.sleep(0.002)  # distinct enqueue scores
    now = queue.server_time_ms()
    job = queue.claim(700, "w1")
    assert job is not None and job.job_id == "first"
    score = queue.client.zscore(queue.keys.active, "first")
    assert score == job.deadline_ms and now + 700 <= score <= queue.server_time_ms() + 700


def test_stale_attempt_cannot_extend_or_complete(queue: QueueClient):
    queue.enqueue("a")
    first = queue.claim(50, "w1")
    assert first is not None
    time.sleep(0.08)
    assert queue.reap(100) == 1  # the lease lapsed
    second = queue.claim(5000, "w2")
    assert second is not None and second.attempt == 2
    assert queue.extend("a", 1, 5000, "w1") is None
    assert not queue.complete("a", 1, "w1")
    assert queue.complete("a", 2, "w2")
    assert [t for t, _, _ in events_of(queue)] == [
        "enqueue", "claim", "sweep", "reap", "claim", "extend_rejected", "complete_rejected",
        "complete"]


def test_reaped_but_unclaimed_lease_cannot_be_extended_or_completed(queue: QueueClient):
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(0.06)
    assert queue.reap(100) == 1
    assert queue.extend("a", 1, 5000, "w1") is None  # same attempt, but no longer active
    assert not queue.complete("a", 1, "w1")
    assert queue.client.zscore(queue.keys.pending, "a") == 0  # recovered jobs go first


def test_complete_twice_is_rejected_the_second_time(queue: QueueClient):
    queue.enqueue("a")
    queue.claim(5000, "w1")
    assert queue.complete("a", 1, "w1")
    assert not queue.complete("a", 1, "w1")


def test_reap_moves_only_expired_leases(queue: QueueClient):
    queue.enqueue("short")
    time.sleep(0.002)
    queue.enqueue("long")
    assert queue.claim(30, "w1").job_id == "short"
    assert queue.claim(60_000, "w1").job_id == "long"
    time.sleep(0.06)
    assert queue.reap(100) == 1
    reap = [e for e in iter_stream(queue.client, queue.keys.events) if e.type == "reap"]
    assert [(e.job_id, e.attempt, e.worker) for e in reap] == [("short", 1, "w1")]
    assert reap[0].ts >= reap[0].deadline  # never before the deadline
    assert queue.client.zrange(queue.keys.active, 0, -1) == ["long"]


def test_reap_respects_its_batch_limit_and_sweep_loops_past_it(queue: QueueClient):
    for index in range(25):
        queue.enqueue(f"j{index}")
        queue.claim(20, "w1")
    time.sleep(0.05)
    assert queue.reap(10) == 10  # one call: one batch
    assert sweep(queue, 10) == 15  # a sweep keeps going while a batch comes back full
    assert queue.backlog() == (25, 0)


def test_scripts_reload_after_the_server_forgets_them(queue: QueueClient):
    queue.client.script_flush()
    assert queue.enqueue("a")  # NOSCRIPT -> load again -> retry
    assert queue.claim(1000, "w") is not None


def test_record_stamps_runner_events_with_server_time(queue: QueueClient):
    before = queue.server_time_ms()
    ts = queue.record(type="fault", kind="kill", worker="w1", fault_id="f1")
    assert before <= ts <= queue.server_time_ms()
    (event,) = list(iter_stream(queue.client, queue.keys.events))
    assert (event.type, event.worker, event.ts, event.extra["kind"]) == ("fault", "w1", ts, "kill")


def test_keys_share_one_hash_tag(queue: QueueClient):
    keys = queue.keys
    tag = f"{{{keys.queue}}}"
    assert all(tag in key for key in (keys.pending, keys.active, keys.events, keys.job("x")))


def test_server_refuses_a_client_without_the_password(valkey_server):
    client = redis_client(valkey_server.url)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            client.ping()
    finally:
        client.close()


def test_lease_holders_come_oldest_deadline_first(queue: QueueClient):
    for job_id in ("a", "b", "c"):
        queue.enqueue(job_id)
        time.sleep(0.002)
    queue.claim(5000, "w-late")
    queue.claim(1000, "w-early")
    queue.claim(3000, "w-mid")
    assert queue.lease_holders_oldest_first() == ["w-early", "w-mid", "w-late"]
    assert queue.lease_holders_oldest_first(limit=1) == ["w-early"]
    # A lapsed lease not yet reaped is no one's to strand any more: left out.
    queue.enqueue("d")
    queue.claim(1, "w-lapsed")
    time.sleep(0.005)
    assert queue.lease_holders_oldest_first() == ["w-early", "w-mid", "w-late"]


@pytest.mark.parametrize("protocol", ["sound", "unfenced-complete", "client-clock",
                                      "extend-resurrects"])
def test_extend_events_carry_the_previous_extend_round_trip(queue: QueueClient, protocol: str):
    variant = QueueClient(queue.client, queue.keys, protocol=protocol)
    assert variant.enqueue("a")
    job = variant.claim(5000, "w1")
    assert job is not None
    assert variant.extend("a", job.attempt, 5000, "w1") is not None
    first_rtt = variant.last_extend_rtt_ms
    assert first_rtt is not None and first_rtt >= 0
    assert variant.extend("never-enqueued", 1, 5000, "w1") is None  # rejected in every variant
    extends = [e for e in iter_stream(queue.client, queue.keys.events)
               if e.type.startswith("extend")]
    assert [e.type for e in extends] == ["extend", "extend_rejected"]
    # The first has no earlier round trip to report; the second reports the first's.
    assert extends[0].extra["rtt_ms"] == "" and extends[1].extra["rtt_ms"] == str(first_rtt)
    if protocol == "client-clock":  # its caller's clock still sets the deadline
        assert extends[0].deadline is not None and extends[0].deadline >= extends[0].ts + 4000


def test_without_events_the_transitions_hold_and_the_history_stays_empty(queue: QueueClient):
    """The benchmarks-only switch (the cost of the evidence): same state changes, no events."""
    quiet = QueueClient(queue.client, queue.keys, record_events=False)
    assert quiet.enqueue("a", "payload") and not quiet.enqueue("a")
    job = quiet.claim(50, "w1")
    assert job is not None and (job.job_id, job.payload, job.attempt) == ("a", "payload", 1)
    assert quiet.extend("a", 1, 50, "w1") is not None
    time.sleep(0.08)
    assert queue.client.zscore(queue.keys.active, "a") is not None
    assert sweep(quiet, 10) == 1  # the reap script always records (the flag is not on it)
    second = quiet.claim(5000, "w2")
    assert second is not None and second.attempt == 2
    assert quiet.extend("a", 1, 5000, "w1") is None  # still fenced
    assert not quiet.complete("a", 1, "w1")
    assert quiet.complete("a", 2, "w2")
    assert events_of(queue) == [("sweep", None, None), ("reap", "a", 1)]  # its sweep too
    assert queue.client.hget(queue.keys.job("a"), "state") == "completed"


def test_a_job_kind_is_stored_and_named_in_its_event_even_without_events(queue: QueueClient):
    assert queue.enqueue("p", "poison", kind="poison") and queue.enqueue("a", "payload")
    quiet = QueueClient(queue.client, queue.keys, record_events=False)
    assert quiet.enqueue("q", "poison", kind="poison")
    history = list(iter_stream(queue.client, queue.keys.events))
    assert [(e.job_id, e.extra.get("kind")) for e in history] == [("p", "poison"), ("a", None)]
    assert [queue.client.hget(queue.keys.job(i), "kind") for i in "paq"] == [
        "poison", None, "poison"]


def test_only_the_sound_protocol_can_skip_events(queue: QueueClient):
    with pytest.raises(ValueError, match="sound protocol only"):
        QueueClient(queue.client, queue.keys, protocol="unfenced-complete", record_events=False)


def test_wait_replicas_without_a_replica_fails_the_call_but_not_the_write(queue: QueueClient):
    """WAIT 1 on a server with no replica: the script ran (the job exists) but the call is not
    acknowledged; NotReplicated is transient (a ConnectionError) so callers retry."""
    waiting = QueueClient(queue.client, queue.keys, wait_replicas=1)
    with pytest.raises(NotReplicated, match="enqueue: WAIT saw 0 of 1 replica"):
        waiting.enqueue("j1", "p")
    assert isinstance(NotReplicated("x"), StoreConnectionError)
    assert queue.client.exists(queue.keys.job("j1")) == 1
    assert queue.backlog() == (1, 0)


def test_enqueue_batch_is_one_script_call_per_job_and_survives_a_script_flush(
        queue: QueueClient):
    """The load generator's pipelined path: same script, same events, repeats refused; after
    SCRIPT FLUSH the jobs that found no script are sent again, none twice."""
    assert queue.enqueue_batch([("a", "1"), ("b", "2"), ("a", "3")]) == ["a", "b"]
    queue.client.script_flush()
    assert queue.enqueue_batch([("c", ""), ("b", "")]) == ["c"]
    events = [fields for _, fields in queue.client.xrange(queue.keys.events)]
    assert [(e["type"], e["id"]) for e in events] == [("enqueue", "a"), ("enqueue", "b"),
                                                      ("enqueue", "c")]
    assert queue.backlog() == (3, 0)


def test_claim_many_claims_each_job_as_one_claim_would(queue: QueueClient):
    """One call, several jobs: each its own fencing token, its own lease on the server clock
    and its own claim event with claim's fields; at most ``count``, oldest first."""
    for job_id in ("a", "b", "c"):
        queue.enqueue(job_id, f"payload-{job_id}")
        time.sleep(0.002)  # distinct enqueue scores
    first = queue.claim(20, "w0")  # "a" gets a second attempt below
    assert first is not None and first.job_id == "a"
    time.sleep(0.05)
    assert sweep(queue, 100) == 1  # "a" back to pending, first in line (score 0)
    before = queue.server_time_ms()
    claimed = queue.claim_many(2, 700, "w1")
    after = queue.server_time_ms()
    assert [(j.job_id, j.payload, j.attempt) for j in claimed] == [
        ("a", "payload-a", 2), ("b", "payload-b", 1)]
    for job in claimed:
        assert queue.client.zscore(queue.keys.active, job.job_id) == job.deadline_ms
        assert before + 700 <= job.deadline_ms <= after + 700
        assert queue.client.hget(queue.keys.job(job.job_id), "worker") == "w1"
    claims = [e for e in iter_stream(queue.client, queue.keys.events) if e.type == "claim"][1:]
    assert [(e.job_id, e.attempt, e.worker, e.lease_ms, e.deadline) for e in claims] == [
        (j.job_id, j.attempt, "w1", 700, j.deadline_ms) for j in claimed]
    assert all(e.deadline == e.ts + 700 for e in claims)
    assert [j.job_id for j in queue.claim_many(5, 700, "w1")] == ["c"]
    events = len(events_of(queue))
    assert queue.claim_many(5, 700, "w1") == []  # empty: nothing claimed, nothing recorded
    assert len(events_of(queue)) == events


def test_claim_many_is_fenced_like_claim(queue: QueueClient):
    """A job claimed in a batch is extended and completed with its own token only."""
    for job_id in ("a", "b"):
        queue.enqueue(job_id)
    a, b = queue.claim_many(2, 5000, "w1")
    assert not queue.complete(a.job_id, b.attempt + 1, "w1")
    assert queue.extend(b.job_id, b.attempt, 5000, "w1") is not None
    assert queue.complete(a.job_id, a.attempt, "w1") and queue.complete(b.job_id, b.attempt, "w1")
    assert queue.backlog() == (0, 0)
