"""EchoMQ's flows, ``remove_job``, ``reprocess_job`` and ``EchoMQ.Locks`` markers decoded by
effect (docs/echomq.md, the mapping table): calls shaped as MONITOR shows EchoMQ's own scripts
and plain commands, each its own event, and the checker's reading of them."""

from __future__ import annotations

import io
import json

from test_effect_decoding import _monitor_lines

from chaos.history.dialects.echomq import EchoMQ
from chaos.history.events import Event
from chaos.history.monitor import HistoryWriter, RecorderHealth, decode_lines

Q = "emq:{jobs}:"
T0 = 1_796_319_520_000
SHA = ["EVALSHA", "f" * 40]


def row(job: str) -> str:
    return f"{Q}job:{job}"


def enqueue(ms: int, job: str) -> tuple[int, list[str], list[list[str]]]:
    return (ms, [*SHA, "2", row(job), Q + "pending", job, "x"],
            [["EXISTS", row(job)], ["HSET", row(job), "state", "pending", "attempts", "0",
                                    "payload", "x"], ["ZADD", Q + "pending", "0", job]])


def claim(ms: int, job: str) -> tuple[int, list[str], list[list[str]]]:
    return (ms, [*SHA, "2", Q + "pending", Q + "active", Q + "job:", "1000"],
            [["ZPOPMIN", Q + "pending"], ["HINCRBY", row(job), "attempts", "1"],
             ["HSET", row(job), "state", "active"], ["TIME"],
             ["ZADD", Q + "active", str(ms + 1000), job], ["HGET", row(job), "payload"]])


def complete(ms: int, job: str, parent: str | None = None,
             release: bool = False) -> tuple[int, list[str], list[list[str]]]:
    """EchoMQ's @complete of a flat job; of a flow child: the fan-in into its parent (and the
    parent released into pending when it was the last child)."""
    fan_in: list[list[str]] = []
    if parent:
        fan_in = [["DECR", row(parent) + ":dependencies"],
                  ["HSET", row(parent) + ":processed", job, job]]
        if release:
            fan_in += [["ZADD", Q + "pending", "0", parent],
                       ["HSET", row(parent), "state", "pending"]]
    return (ms, [*SHA, "2", Q + "active", row(job), job, "1", Q],
            [["HGET", row(job), "attempts"], ["HGET", row(job), "group"],
             ["ZREM", Q + "active", job], *fan_in, ["DEL", row(job)],
             ["HINCRBY", Q + "metrics:completed", "count", "1"]])


def remove(ms: int, job: str) -> tuple[int, list[str], list[list[str]]]:
    """EchoMQ's @remove_job: out of the four sets, the row and its logs deleted."""
    return (ms, [*SHA, "6", row(job), Q + "pending", Q + "active", Q + "schedule", Q + "dead",
                 Q + "de:", job, ""],
            [["EXISTS", row(job)], ["EXISTS", row(job) + ":lock"],
             ["ZREM", Q + "pending", job], ["ZREM", Q + "active", job],
             ["ZREM", Q + "schedule", job], ["ZREM", Q + "dead", job],
             ["DEL", row(job), row(job) + ":logs"]])


def flow_calls() -> list[tuple[int, list[str], list[list[str]]]]:
    """A flow (parent P, children C1, C2) run through; J failed for good, reprocessed and run
    again; K removed while waiting, L while its holder's lease is live; lock markers."""
    parent, c1, c2 = "JOBparent0001", "JOBchild00001", "JOBchild00002"
    enqueue_flow = (T0, [*SHA, "5", row(parent), row(parent) + ":dependencies", Q + "pending",
                         row(c1), row(c2), parent, "p", "2", c1, "a", c2, "b"],
                    [["HSET", row(c1), "state", "pending", "attempts", "0", "payload", "a",
                      "parent", parent], ["ZADD", Q + "pending", "0", c1],
                     ["HSET", row(c2), "state", "pending", "attempts", "0", "payload", "b",
                      "parent", parent], ["ZADD", Q + "pending", "0", c2],
                     ["HSET", row(parent), "state", "awaiting_children", "attempts", "0",
                      "payload", "p"], ["SET", row(parent) + ":dependencies", "2"]])
    job = "JOBfailed0001"
    retry_dead = (T0 + 130, [*SHA, "4", Q + "active", Q + "schedule", Q + "dead", row(job),
                             job, "1", "200", "1", "boom", Q],
                  [["HGET", row(job), "attempts"], ["HGET", row(job), "group"],
                   ["ZREM", Q + "active", job], ["HSET", row(job), "last_error", "boom"],
                   ["HSET", row(job), "state", "dead"], ["ZADD", Q + "dead", "0", job],
                   ["HINCRBY", Q + "metrics:failed", "count", "1"]])
    reprocess = (T0 + 140, [*SHA, "3", row(job), Q + "dead", Q + "pending", job],
                 [["EXISTS", row(job)], ["ZREM", Q + "dead", job],
                  ["HDEL", row(job), "last_error"], ["HSET", row(job), "state", "pending"],
                  ["ZADD", Q + "pending", "0", job]])
    lock_set = (T0 + 21, ["SET", row(c1) + ":lock", "1", "PX", "2000"], [])
    lock_row = (T0 + 22, ["HSET", row(c1), "lock", "1"], [])
    lock_ttl = (T0 + 23, ["HPEXPIRE", row(c1), "2000", "FIELDS", "1", "lock"], [])
    lock_refresh = (T0 + 24, ["PEXPIRE", row(c1) + ":lock", "2000"], [])
    lock_del = (T0 + 41, ["DEL", row(c1) + ":lock"], [])
    return [enqueue_flow, claim(T0 + 20, c1), lock_set, lock_row, lock_ttl, lock_refresh,
            complete(T0 + 40, c1, parent), lock_del, claim(T0 + 50, c2),
            complete(T0 + 60, c2, parent, release=True), claim(T0 + 70, parent),
            complete(T0 + 80, parent), enqueue(T0 + 100, job), claim(T0 + 110, job),
            retry_dead, reprocess, claim(T0 + 150, job), complete(T0 + 160, job),
            enqueue(T0 + 200, "JOBwaiting001"), remove(T0 + 210, "JOBwaiting001"),
            enqueue(T0 + 220, "JOBleased0001"), claim(T0 + 230, "JOBleased0001"),
            remove(T0 + 240, "JOBleased0001")]


def decoded(calls: list[tuple[int, list[str], list[list[str]]]]) -> tuple[list[Event],
                                                                         RecorderHealth]:
    handle = io.StringIO()
    health = RecorderHealth("echomq")
    decode_lines(_monitor_lines(calls), HistoryWriter(EchoMQ("emq:", "jobs", lease_ms=1000),
                                                      handle, health))
    return [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()], \
        health


def test_flows_removals_reprocessing_and_lock_markers_decode_each_as_its_own_event():
    events, health = decoded(flow_calls())
    assert health.undecoded_calls == 0 and health.unscripted_writes == 0
    seen = [(e.type, e.job_id, {k: v for k, v in e.extra.items()
                                if k in ("parent", "children", "held", "target")})
            for e in events]
    parent, c1, c2 = "JOBparent0001", "JOBchild00001", "JOBchild00002"
    assert seen == [
        ("enqueue", c1, {"parent": parent}), ("enqueue", c2, {"parent": parent}),
        ("enqueue", parent, {"children": "2"}),
        ("claim", c1, {}), ("lock_marker", c1, {"held": "1"}), ("complete", c1, {}),
        ("lock_marker", c1, {"held": "0"}),
        ("claim", c2, {}), ("complete", c2, {}), ("release", parent, {}),
        ("claim", parent, {}), ("complete", parent, {}),
        ("enqueue", "JOBfailed0001", {}), ("claim", "JOBfailed0001", {}),
        ("complete", "JOBfailed0001", {"target": "failed"}),
        ("reprocess", "JOBfailed0001", {}), ("claim", "JOBfailed0001", {}),
        ("complete", "JOBfailed0001", {}),
        ("enqueue", "JOBwaiting001", {}), ("remove", "JOBwaiting001", {}),
        ("enqueue", "JOBleased0001", {}), ("claim", "JOBleased0001", {}),
        ("remove", "JOBleased0001", {})]
    (removed_leased,) = [e for e in events if e.type == "remove" and e.attempt]
    assert removed_leased.job_id == "JOBleased0001" and removed_leased.attempt == 1


def test_a_complete_still_reads_as_one_and_a_dead_child_lets_its_parent_go():
    """The stale complete (its lease reaped, no one re-claimed it: ``ZREM pending``, ``DEL``)
    counts a completion: a complete, never a removal. A child dead at its max attempts lets
    its held parent go by the child's policy (EchoMQ's ``@retry`` arms): ``sq:fp`` fails the
    parent with it (a ``release`` to dead: finished, not lost), ``sq:id`` counts the child as
    settled and releases the parent to pending at the last; each run passes."""
    from chaos.check.checker import CheckConfig, check

    flat = "JOBflat000001"
    stale = (T0 + 40, [*SHA, "2", Q + "active", row(flat), flat, "1", Q],
             [["HGET", row(flat), "attempts"], ["ZREM", Q + "active", flat],
              ["ZREM", Q + "pending", flat], ["DEL", row(flat)],
              ["HINCRBY", Q + "metrics:completed", "count", "1"]])
    events, health = decoded([enqueue(T0, flat), stale])
    assert [e.type for e in events] == ["enqueue", "complete"] and not health.undecoded_calls
    parent, child = "JOBparent0001", "JOBchild00001"
    enqueue_flow = (T0, [*SHA, "4", row(parent), row(parent) + ":dependencies", Q + "pending",
                         row(child), parent, "p", "1", child, "a"],
                    [["HSET", row(child), "state", "pending", "attempts", "0", "payload", "a",
                      "parent", parent], ["ZADD", Q + "pending", "0", child],
                     ["HSET", row(parent), "state", "awaiting_children", "attempts", "0",
                      "payload", "p"], ["SET", row(parent) + ":dependencies", "1"]])

    def child_dies(arm: list[list[str]]) -> tuple[int, list[str], list[list[str]]]:
        return (T0 + 30, [*SHA, "8", Q + "active", Q + "schedule", Q + "dead", row(child),
                          child, "1", "0", "1", "boom", Q, "sq", parent],
                [["HGET", row(child), "attempts"], ["ZREM", Q + "active", child],
                 ["HSET", row(child), "last_error", "boom"], ["HSET", row(child), "state", "dead"],
                 ["ZADD", Q + "dead", "0", child],
                 ["HINCRBY", Q + "metrics:failed", "count", "1"], *arm])

    fail_parent = child_dies([["HSET", row(parent) + ":failed", child, "boom"],
                              ["HSET", row(parent), "state", "dead"],
                              ["ZADD", Q + "dead", "0", parent], ["ZREM", Q + "pending", parent]])
    events, health = decoded([enqueue_flow, claim(T0 + 10, child), fail_parent])
    assert not health.undecoded_calls
    assert [(e.type, e.job_id, e.extra.get("target") or e.extra.get("to")) for e in events][-2:] \
        == [("complete", child, "failed"), ("release", parent, "dead")]
    verdict = check(events, CheckConfig(1000, 250), final=True)
    assert not verdict.failed_invariants() and verdict.outcomes.completed == 2
    assert verdict.invariants["flow_order"].figures["parents_failed"] == 1
    ignore_failure = child_dies([["HSET", row(parent) + ":unsuccessful", child, "boom"],
                                 ["DECR", row(parent) + ":dependencies"],
                                 ["ZADD", Q + "pending", "0", parent],
                                 ["HSET", row(parent), "state", "pending"]])
    events, health = decoded([enqueue_flow, claim(T0 + 10, child), ignore_failure,
                              claim(T0 + 40, parent), complete(T0 + 50, parent)])
    assert not health.undecoded_calls
    assert [e.type for e in events][-4:] == ["complete", "release", "claim", "complete"]
    verdict = check(events, CheckConfig(1000, 250), final=True)
    assert not verdict.failed_invariants(), verdict.failed_invariants()


def test_the_checker_reads_a_removal_as_no_loss_and_a_reprocess_as_a_finish_undone():
    """The history above, judged: every job accounted for (the removed ones removed, not lost;
    the reprocessed one completed once, its failed finish undone), the flow's parent served
    after both children, the removal under a live lease listed with its holder."""
    from chaos.check.checker import CheckConfig, check

    events, _ = decoded(flow_calls())
    verdict = check(events, CheckConfig(1000, 250), final=True)
    assert not verdict.failed_invariants(), verdict.failed_invariants()
    no_loss = verdict.invariants["no_loss"]
    assert (no_loss.figures["lost"], no_loss.figures["removed"],
            no_loss.figures["removed_leased"], no_loss.figures["reprocessed"]) == (0, 2, 1, 1)
    (example,) = no_loss.figures["removed_leased_examples"]
    assert (example["job"], example["attempt"]) == ("JOBleased0001", 1)
    assert no_loss.figures["lock_markers"] == {"set": 1, "released": 1}
    assert verdict.invariants["no_double_completion"].ok
    flow = verdict.invariants["flow_order"]
    assert flow.ok and flow.figures["flows"] == 1 and flow.figures["released"] == 1
    assert verdict.outcomes.removed == 2 and verdict.outcomes.completed == 4


def test_a_parent_served_before_its_children_fails_flow_order_alone():
    """The parent released at its first child's complete and claimed while the second child
    still waits: flow_order fails (the release and the claim), nothing else does."""
    from chaos.check.checker import CheckConfig, check

    calls = flow_calls()[:12]
    parent, c1, c2 = "JOBparent0001", "JOBchild00001", "JOBchild00002"
    early = [calls[0], claim(T0 + 20, c1), complete(T0 + 40, c1, parent, release=True),
             claim(T0 + 45, parent), complete(T0 + 48, parent), claim(T0 + 50, c2),
             complete(T0 + 60, c2, parent)]
    events, health = decoded(early)
    assert not health.undecoded_calls
    verdict = check(events, CheckConfig(1000, 250), final=True)
    assert verdict.failed_invariants() == ["flow_order"]
    assert [(o["op"], o["children_completed"]) for o in verdict.invariants[
        "flow_order"].examples] == [("release", 1), ("claim", 1)]


def test_a_lane_reassignment_decodes_as_its_own_event_and_moves_the_jobs_group():
    """EchoMQ.Lanes.reassign (@greassign): a waiting job out of g1's lane into g2's, its row's
    group rewritten: ``reassign`` with the group it waits in now; its later claim is g2's."""
    from chaos.check.replay import replay

    job = "JOBgrouped001"
    genqueue = (T0, [*SHA, "7", row(job), Q + "g:g1:pending", Q + "ring", Q + "paused",
                     Q + "glimit", Q + "gactive", Q + "wake", job, "x", "g1"],
                [["EXISTS", row(job)], ["HSET", row(job), "state", "pending", "attempts", "0",
                                        "payload", "x", "group", "g1"],
                 ["ZADD", Q + "g:g1:pending", "0", job], ["RPUSH", Q + "ring", "g1"]])
    reassign = (T0 + 10, [*SHA, "2", Q, row(job), job, "g2"],
                [["HGET", row(job), "group"], ["ZSCORE", Q + "g:g1:pending", job],
                 ["ZREM", Q + "g:g1:pending", job], ["ZADD", Q + "g:g2:pending", "0", job],
                 ["HSET", row(job), "group", "g2"], ["ZCARD", Q + "g:g1:pending"],
                 ["LREM", Q + "ring", "0", "g1"], ["RPUSH", Q + "ring", "g2"],
                 ["LPUSH", Q + "wake", "1"]])
    gclaim = (T0 + 20, [*SHA, "2", Q + "ring", Q + "active", Q, "1000"],
              [["LMOVE", Q + "ring", Q + "ring", "LEFT", "RIGHT"],
               ["ZPOPMIN", Q + "g:g2:pending"], ["HINCRBY", row(job), "attempts", "1"],
               ["HSET", row(job), "state", "active"], ["TIME"],
               ["ZADD", Q + "active", str(T0 + 1020), job],
               ["HINCRBY", Q + "gactive", "g2", "1"]])
    events, health = decoded([genqueue, reassign, gclaim])
    assert not health.undecoded_calls
    assert [(e.type, e.extra.get("group")) for e in events] == [
        ("enqueue", "g1"), ("reassign", "g2"), ("claim", "g2")]
    assert replay(events).job_groups == {job: "g2"}


def test_removal_reprocessing_and_lock_markers_on_a_real_server(valkey_server, tmp_path):
    """The example SUT's scripts (remove_job, reprocess) and EchoMQ.Locks' plain commands run on
    a real valkey-server, recorded live: a removal of a job its holder's lease is live on (no
    marker) goes through and is listed with that holder, the holder's complete then finds no
    row and writes nothing; a removal of a marked job is refused (EMQLOCK) and shows nothing; a
    job failed for good is reprocessed (a second reprocess refused, EMQSTATE) and completed."""
    import pytest
    import redis
    from test_schedule_decoding import Capture, Contract

    from chaos.check.checker import CheckConfig, check
    from chaos.history.schema import Phase, Run
    from chaos.protocol.client import QueueClient

    worker, admin = Contract(valkey_server, "ops", "worker-1"), Contract(valkey_server, "ops",
                                                                          "admin")
    keys = worker.keys
    capture = Capture(valkey_server, keys, tmp_path)
    runner = QueueClient(worker.client, keys)
    runner.record(**Run(scenario="ops", lease_ms=1000, reap_interval_ms=100,
                        workers=("worker-1",), dialect="echomq").fields())

    def remove(job_id: str) -> int:
        return int(admin.run("remove_job", [keys.job(job_id), keys.pending, keys.active,
                                            keys.schedule, keys.dead], [job_id]))

    def reprocess(job_id: str) -> int:
        return int(admin.run("reprocess", [keys.job(job_id), keys.dead, keys.pending], [job_id]))

    yanked, marked, failed = "JOB00000000A1", "JOB00000000B2", "JOB00000000C3"
    for job_id in (yanked, marked, failed):
        assert worker.enqueue(job_id) == 1
    assert worker.claim() == (yanked, 1)
    assert remove(yanked) == 1  # its lease live, no marker on it: removed from under its holder
    assert worker.complete(yanked, 1) == 0  # the row is gone: nothing written
    assert worker.claim() == (marked, 1)
    worker.client.set(keys.job(marked) + ":lock", "1", px=2000)  # EchoMQ.Locks' track_job
    worker.client.hset(keys.job(marked), "lock", "1")
    with pytest.raises(redis.ResponseError, match="EMQLOCK"):
        remove(marked)
    assert worker.complete(marked, 1) == 1
    worker.client.delete(keys.job(marked) + ":lock")  # untrack_job
    assert worker.claim() == (failed, 1)
    assert worker.retry(failed, 1, 100, max_attempts=1) == "dead"
    assert reprocess(failed) == 1
    with pytest.raises(redis.ResponseError, match="EMQSTATE"):
        reprocess(failed)
    assert worker.claim() == (failed, 2) and worker.complete(failed, 2) == 1
    runner.record(**Phase("end", drained=True).fields())
    history, health, _ = capture.stop()
    for client in (worker.client, admin.client):
        client.close()

    assert (health.undecoded_calls, health.unscripted_writes) == (0, 0)
    assert [(e.type, e.job_id, e.worker) for e in history if e.type in (
        "remove", "reprocess", "lock_marker", "complete")] == [
        ("remove", yanked, "admin"), ("lock_marker", marked, "worker-1"),
        ("complete", marked, "worker-1"), ("lock_marker", marked, "worker-1"),
        ("complete", failed, "worker-1"), ("reprocess", failed, "admin"),
        ("complete", failed, "worker-1")]
    verdict = check(history, CheckConfig(1000, 100), final=True)
    assert not verdict.failed_invariants(), verdict.failed_invariants()
    no_loss = verdict.invariants["no_loss"].figures
    (leased,) = no_loss["removed_leased_examples"]
    assert (leased["job"], leased["holder"], leased["remover"]) == (yanked, "worker-1", "admin")
    assert no_loss["reprocessed"] == 1 and no_loss["lock_markers"] == {"set": 1, "released": 1}
    assert (verdict.outcomes.removed, verdict.outcomes.completed) == (1, 2)


def test_a_job_taken_out_of_its_lane_and_put_nowhere_is_not_read():
    """A waiting job ZREMed from its group's lane with nothing else (no claim, no other lane,
    its row kept): it left the only place it waited, so the call is undecoded, never quietly
    passed over."""
    job = "JOBgrouped001"
    genqueue = (T0, [*SHA, "2", row(job), Q + "g:g1:pending", job, "x", "g1"],
                [["HSET", row(job), "state", "pending", "attempts", "0", "payload", "x",
                  "group", "g1"], ["ZADD", Q + "g:g1:pending", "0", job]])
    dropped = (T0 + 10, [*SHA, "1", Q + "g:g1:pending", job],
               [["ZREM", Q + "g:g1:pending", job]])
    events, health = decoded([genqueue, dropped])
    assert health.undecoded_calls == 1 and [e.type for e in events] == ["enqueue", "blind"]
