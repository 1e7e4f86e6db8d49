"""The mutant zoo at the protocol level: each variant deviates from the sound protocol exactly where
its name says, the same steps on the sound protocol do not, and every variant's history stays
truthful (events written by the transition's own script, ts = server TIME, the sound fields).

Real valkey-server throughout (conftest). Leases that must lapse are 20-40 ms and the test sleeps
past them; nothing here asserts an upper bound on elapsed time.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import chaos.protocol.clock
from chaos.history.events import Event, iter_stream
from chaos.names import PROTOCOLS
from chaos.protocol.client import SCRIPT_NAMES, QueueClient, QueueKeys
from chaos.protocol.clock import LocalClock, read_offset, write_offset
from chaos.reference.reaper import sweep
from chaos.reference.worker import parse_args
from chaos.runtime.valkey import ValkeyServer
from tests.procs import wait_until

_names = itertools.count(1)
LAPSE_S = 0.07  # sleep past a 20-40 ms lease

Factory = Callable[..., QueueClient]


def fresh_keys() -> QueueKeys:
    return QueueKeys("variant:", f"v{next(_names)}")


@pytest.fixture
def keys() -> QueueKeys:
    return fresh_keys()


@pytest.fixture
def on(raw_client: redis.Redis, keys: QueueKeys) -> Factory:
    """``on(protocol, **kwargs)``: a client of that protocol on this test's queue (one queue, so
    a test can mix protocols, e.g. a sound worker and a mutant reaper)."""

    def build(protocol: str = "sound", **kwargs: Any) -> QueueClient:
        return QueueClient(raw_client, kwargs.pop("keys", keys), protocol, **kwargs)

    return build


def history(queue: QueueClient) -> list[Event]:
    return list(iter_stream(queue.client, queue.keys.events))


def of_type(queue: QueueClient, kind: str) -> list[Event]:
    return [e for e in history(queue) if e.type == kind]


def skew_file(tmp_path: Path, offset_ms: int, name: str = "clock.offset") -> Path:
    path = tmp_path / name
    write_offset(path, offset_ms)
    return path


def child_env(server: ValkeyServer) -> dict[str, str]:
    return {**os.environ, "ECHOMQ_VALKEY_PASSWORD": server.password}


# --- the variant mechanics ------------------------------------------------------------------


def test_an_unknown_protocol_is_refused_naming_the_valid_ones(raw_client, keys):
    with pytest.raises(ValueError, match="'fenced-ish'") as raised:
        QueueClient(raw_client, keys, "fenced-ish")
    assert all(name in str(raised.value) for name in PROTOCOLS)


VARIANT_SCRIPTS = {
    "sound": set(),
    "unfenced-complete": {"complete_unfenced", "extend_unfenced"},
    "client-clock": {"claim_client_clock", "extend_client_clock", "reap_client_clock"},
    "nonatomic-reap": {"reap_scan", "reap_move"},
    "single-batch-reaper": set(),
    "nonatomic-claim": {"claim_lease"},
    "extend-resurrects": {"extend_resurrects"},
    "no-reaper": set(),
    "grace-reaper": {"reap_client_clock"},
    "idle-backoff-reaper": set(),
    "reused-token": set(),
    "short-lease": set(),
    "complete-skips-active": {"complete_skips_active"},
    "padded-lease": {"claim_padded", "claim_many_padded", "extend_padded"},
    "sparse-reaper": set(),
}


def test_protocols_are_exactly_the_named_variants():
    assert tuple(VARIANT_SCRIPTS) == PROTOCOLS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_protocol_loads_the_sound_scripts_plus_only_its_own(on: Factory, protocol):
    queue = on(protocol)
    assert queue.script_names[: len(SCRIPT_NAMES)] == SCRIPT_NAMES
    assert set(queue.script_names[len(SCRIPT_NAMES):]) == VARIANT_SCRIPTS[protocol]
    assert queue.enqueue("a") and queue.claim(5000, "w") is not None  # it works end to end


def test_a_variant_step_is_refused_on_a_protocol_that_lacks_it(on: Factory):
    with pytest.raises(ValueError, match="'reap_scan' is not part of protocol 'sound'"):
        on("sound").reap_scan(10)


def test_windows_default_to_the_variant_and_are_zero_elsewhere(on: Factory):
    assert on("nonatomic-claim").claim_gap_ms == 100
    assert on("nonatomic-reap").race_window_ms == 100
    assert on("nonatomic-claim", claim_gap_ms=7).claim_gap_ms == 7
    assert (on("sound").claim_gap_ms, on("sound").race_window_ms) == (0, 0)


# --- unfenced-complete ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["sound", "unfenced-complete"])
def test_unfenced_complete_accepts_the_stale_holder_a_second_time(on: Factory, protocol):
    queue = on(protocol)
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    assert queue.reap(100) == 1
    second = queue.claim(60_000, "w2")
    assert second is not None and second.attempt == 2
    assert queue.complete("a", 2, "w2")
    stale = queue.complete("a", 1, "w1")  # w1 wakes up from a pause, long after the reap
    completes = [(e.attempt, e.worker) for e in of_type(queue, "complete")]
    if protocol == "sound":
        assert not stale and completes == [(2, "w2")]
        assert [e.current_attempt for e in of_type(queue, "complete_rejected")] == [2]
    else:
        assert stale and completes == [(2, "w2"), (1, "w1")]  # completed twice


@pytest.mark.parametrize("protocol", ["sound", "unfenced-complete"])
def test_unfenced_extend_lets_a_stale_holder_renew_the_new_lease(on: Factory, protocol):
    queue = on(protocol)
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    queue.reap(100)
    second = queue.claim(60_000, "w2")
    assert second is not None
    renewed = queue.extend("a", 1, 600_000, "w1")
    if protocol == "sound":
        assert renewed is None
        assert queue.client.zscore(queue.keys.active, "a") == second.deadline_ms
    else:
        assert renewed is not None and renewed > second.deadline_ms
        assert queue.client.zscore(queue.keys.active, "a") == renewed
        (extend,) = of_type(queue, "extend")
        assert (extend.attempt, extend.worker, extend.deadline) == (1, "w1", renewed)
    # Still not a resurrection: once the id left active, even the unfenced extend refuses.
    assert queue.complete("a", 2, "w2")
    assert queue.extend("a", 2, 600_000, "w2") is None
    assert queue.client.zscore(queue.keys.active, "a") is None


# --- client-clock ---------------------------------------------------------------------------


def test_client_clock_reaper_running_ahead_reaps_a_live_lease(on: Factory, tmp_path):
    reaper_clock = LocalClock(tmp_path / "reaper.offset")  # no file yet: offset 0
    worker = on("client-clock")
    sound_reaper, skewed_reaper = on("sound", clock=reaper_clock), on("client-clock",
                                                                      clock=reaper_clock)
    worker.enqueue("a")
    job = worker.claim(5000, "w1")
    assert job is not None
    assert skewed_reaper.reap(100) == 0  # its clock agrees with the server: nothing lapsed
    write_offset(tmp_path / "reaper.offset", 10_000)  # a clock_skew fault, applied at runtime
    assert sound_reaper.reap(100) == 0  # immune: the sound reaper never reads its own clock
    assert skewed_reaper.reap(100) == 1
    (claim,) = of_type(worker, "claim")
    (reap,) = of_type(worker, "reap")
    assert claim.lease_ms == 5000 and claim.ts + claim.lease_ms > reap.ts  # reaped before its
    assert reap.deadline == job.deadline_ms  # deadline, on the server clock the history uses
    assert reap.ts <= worker.server_time_ms()  # ts is server time, not the skewed reaper's


def test_client_clock_worker_running_behind_gets_a_lease_already_lapsed(on: Factory, tmp_path):
    behind = LocalClock(skew_file(tmp_path, -10_000))
    for protocol, expect_reaped in (("sound", 0), ("client-clock", 1)):
        queue = on(protocol, keys=fresh_keys(), clock=behind)
        queue.enqueue("a")
        before = queue.server_time_ms()
        job = queue.claim(5000, "w1")
        assert job is not None
        (claim,) = of_type(queue, "claim")
        assert before <= claim.ts <= queue.server_time_ms()  # server time either way
        assert claim.deadline == job.deadline_ms
        if protocol == "sound":
            assert job.deadline_ms == claim.ts + 5000
        else:
            assert job.deadline_ms < before  # lapsed on the server before it was handed out
            renewed = queue.extend("a", 1, 5000, "w1")
            assert renewed is not None and renewed < queue.server_time_ms()
        assert on("sound", keys=queue.keys).reap(100) == expect_reaped  # a sound reaper


# --- nonatomic-reap -------------------------------------------------------------------------


def test_nonatomic_reap_interleaved_pushes_a_reclaimed_job_back_twice(on: Factory):
    queue = on("sound")
    reaper_1 = on("nonatomic-reap", race_window_ms=0)
    reaper_2 = on("nonatomic-reap", race_window_ms=0)
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    assert reaper_1.reap_scan(100) == ["a"]
    assert reaper_2.reap_scan(100) == ["a"]  # both saw the same lapsed lease
    assert reaper_1.reap_move("a") is True
    second = queue.claim(60_000, "w2")
    assert second is not None and second.attempt == 2
    assert reaper_2.reap_move("a") is True  # stale scan: w2's live lease is pushed back
    third = queue.claim(60_000, "w3")
    assert third is not None and third.attempt == 3  # w2 and w3 now both run the job
    reaps = of_type(queue, "reap")
    assert [(e.attempt, e.worker) for e in reaps] == [(1, "w1"), (2, "w2")]
    assert reaps[1].deadline == second.deadline_ms and reaps[1].ts < second.deadline_ms


def test_nonatomic_reap_pushes_a_completed_job_back_so_it_runs_twice(on: Factory):
    queue = on("sound")
    reaper_1 = on("nonatomic-reap", race_window_ms=0)
    reaper_2 = on("nonatomic-reap", race_window_ms=0)
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    reaper_1.reap_scan(100), reaper_2.reap_scan(100)
    reaper_1.reap_move("a")
    assert queue.claim(60_000, "w2") is not None
    assert queue.complete("a", 2, "w2")
    assert reaper_2.reap_move("a") is False  # no longer active, pushed back all the same
    assert queue.client.hget(queue.keys.job("a"), "state") == "pending"
    again = queue.claim(60_000, "w3")
    assert again is not None and again.attempt == 3
    assert queue.complete("a", 3, "w3")
    assert [e.attempt for e in of_type(queue, "complete")] == [2, 3]
    late = of_type(queue, "reap")[-1]
    assert (late.attempt, late.deadline) == (2, None)  # recorded truthfully: nothing was active


def test_nonatomic_reapers_racing_through_the_window_both_move_one_job(on: Factory):
    def race(protocol: str) -> tuple[list[int], QueueClient]:
        queue = on("sound", keys=fresh_keys())
        reapers = [on(protocol, keys=queue.keys, race_window_ms=300) for _ in range(2)]
        queue.enqueue("a")
        queue.claim(20, "w1")
        time.sleep(LAPSE_S)
        barrier = threading.Barrier(2)
        moved = [0, 0]

        def run(index: int) -> None:
            barrier.wait()
            moved[index] = reapers[index].reap(100)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return moved, queue

    moved, queue = race("sound")
    assert sorted(moved) == [0, 1] and len(of_type(queue, "reap")) == 1
    moved, queue = race("nonatomic-reap")
    assert moved == [1, 1]
    assert [e.attempt for e in of_type(queue, "reap")] == [1, 1]  # one lease, reaped twice


# --- single-batch-reaper --------------------------------------------------------------------


@pytest.mark.parametrize(("protocol", "ticks"), [("sound", [5]), ("single-batch-reaper",
                                                                    [2, 2, 1])])
def test_single_batch_reaper_needs_a_tick_per_batch(on: Factory, protocol, ticks):
    queue = on(protocol)
    for index in range(5):
        queue.enqueue(f"j{index}")
        queue.claim(20, "w1")
    time.sleep(LAPSE_S)
    assert [sweep(queue, 2) for _ in ticks] == ticks
    assert queue.backlog() == (5, 0)


def test_single_batch_reaper_leaves_the_rest_of_a_full_batch_for_later(on: Factory):
    queue = on("single-batch-reaper")
    for index in range(5):
        queue.enqueue(f"j{index}")
        queue.claim(20, "w1")
    time.sleep(LAPSE_S)
    assert sweep(queue, 2) == 2
    assert queue.backlog() == (2, 3)  # three lapsed leases stranded until the next ticks


# --- nonatomic-claim ------------------------------------------------------------------------


def test_nonatomic_claim_pop_leaves_the_job_in_neither_set_until_leased(on: Factory):
    sound = on("sound", keys=fresh_keys())
    sound.enqueue("a")
    assert sound.claim(5000, "w1") is not None and sound.backlog() == (0, 1)  # atomic
    queue = on("nonatomic-claim")
    queue.enqueue("a")
    assert queue.claim_pop() == "a"
    assert queue.backlog() == (0, 0)  # a worker dying now loses the job
    assert [e.type for e in history(queue)] == ["enqueue"]  # the pop leaves no trace
    job = queue.claim_lease("a", 5000, "w1")
    assert (job.job_id, job.attempt) == ("a", 1) and queue.backlog() == (0, 1)
    (claim,) = of_type(queue, "claim")
    assert (claim.attempt, claim.worker, claim.deadline) == (1, "w1", job.deadline_ms)
    assert claim.deadline == claim.ts + 5000
    assert queue.claim_pop() is None


def test_nonatomic_claim_holds_the_job_in_neither_set_through_its_gap(on: Factory):
    queue = on("nonatomic-claim", claim_gap_ms=1000)
    queue.enqueue("a")
    claimed: list[Any] = []
    claiming = threading.Thread(target=lambda: claimed.append(queue.claim(5000, "w1")))
    claiming.start()
    try:
        wait_until(lambda: queue.client.zcard(queue.keys.pending) == 0, "the pop")
        in_gap = queue.backlog(), [e.type for e in history(queue)], claiming.is_alive()
    finally:
        claiming.join()
    assert in_gap == ((0, 0), ["enqueue"], True)
    (job,) = claimed
    assert job is not None and (job.job_id, job.attempt) == ("a", 1)
    assert queue.backlog() == (0, 1) and len(of_type(queue, "claim")) == 1


def test_nonatomic_claim_worker_killed_in_the_gap_loses_the_job(
        on: Factory, valkey_server: ValkeyServer):
    queue = on("sound")
    queue.enqueue("a")
    worker = subprocess.Popen(
        [sys.executable, "-m", "chaos.reference.worker", "--url", valkey_server.url, "--name", "wk",
         "--prefix", queue.keys.prefix, "--queue", queue.keys.queue, "--lease-ms", "5000",
         "--concurrency", "1", "--poll-ms", "10",
         "--protocol", "nonatomic-claim", "--claim-gap-ms", "60000"],
        env=child_env(valkey_server), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: queue.backlog()[0] == 0 or worker.poll() is not None,
                   "the worker to pop the job")
        assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stderr:
            worker.stderr.close()
    assert queue.backlog() == (0, 0)  # in neither pending nor active: nothing will recover it
    assert [e.type for e in history(queue)] == ["enqueue"]
    assert queue.client.hgetall(queue.keys.job("a"))["attempts"] == "0"
    assert on("sound").reap(100) == 0


# --- extend-resurrects ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["sound", "extend-resurrects"])
def test_extend_after_complete_resurrects_the_job(on: Factory, protocol):
    queue = on(protocol)
    queue.enqueue("a")
    queue.claim(5000, "w1")
    assert queue.complete("a", 1, "w1")
    renewed = queue.extend("a", 1, 30, "w1")  # the heartbeat that raced the complete
    if protocol == "sound":
        assert renewed is None and queue.backlog() == (0, 0)
        assert [e.type for e in history(queue)][-1] == "extend_rejected"
        return
    assert renewed is not None and queue.client.zscore(queue.keys.active, "a") == renewed
    time.sleep(LAPSE_S)
    assert queue.reap(100) == 1  # the reaper recovers the finished job ...
    again = queue.claim(5000, "w2")
    assert again is not None and again.attempt == 2  # ... and it runs again
    assert queue.complete("a", 2, "w2")
    assert [e.attempt for e in of_type(queue, "complete")] == [1, 2]


@pytest.mark.parametrize("protocol", ["sound", "extend-resurrects"])
def test_extend_after_reap_puts_the_job_in_pending_and_active_at_once(on: Factory, protocol):
    queue = on(protocol)
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    assert queue.reap(100) == 1
    renewed = queue.extend("a", 1, 60_000, "w1")  # a late heartbeat, before any re-claim
    if protocol == "sound":
        assert renewed is None and queue.backlog() == (1, 0)
    else:
        assert renewed is not None and queue.backlog() == (1, 1)  # w1 holds it, and it waits
        (extend,) = of_type(queue, "extend")
        assert (extend.attempt, extend.deadline, extend.lease_ms) == (1, renewed, 60_000)


# --- every variant keeps the observer truthful ---------------------------------------------


def run_every_transition(queue: QueueClient) -> tuple[int, int]:
    """enqueue, claim, extend, complete, claim, lapse, reap; returns the server time around it."""
    before = queue.server_time_ms()
    queue.enqueue("a")
    queue.enqueue("b")
    first = queue.claim(40, "w1")
    assert first is not None
    assert queue.extend(first.job_id, first.attempt, 40, "w1") is not None
    assert queue.complete(first.job_id, first.attempt, "w1")
    assert queue.claim(40, "w1") is not None
    time.sleep(LAPSE_S)
    assert queue.reap(100, sweeper="reaper-1") == 1
    return before, queue.server_time_ms()


def field_names(queue: QueueClient) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for _, fields in queue.client.xrange(queue.keys.events):
        names.setdefault(fields["type"], set()).update(fields)
    return names


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_variant_stamps_events_with_server_time_and_the_sound_fields(
        on: Factory, tmp_path, protocol):
    sound = on("sound", keys=fresh_keys())
    run_every_transition(sound)
    # Every client's clock is an hour ahead: no event may carry it (client-clock leases by it).
    ahead = LocalClock(skew_file(tmp_path, 3_600_000))
    queue = on(protocol, clock=ahead, claim_gap_ms=0, race_window_ms=0)
    before, after = run_every_transition(queue)
    events = history(queue)
    assert [e.type for e in events] == [
        "enqueue", "enqueue", "claim", "extend", "complete", "claim", "sweep", "reap"]
    assert all(before <= e.ts <= after for e in events)
    # the sweep (every reap call records one, before its reaps) names the reaper
    assert [e.worker for e in events if e.type == "sweep"] == ["reaper-1"]
    assert field_names(queue) == field_names(sound)
    for event in (e for e in events if e.type in ("claim", "extend")):
        granted = 20 if protocol == "short-lease" else 40  # half, and recorded as granted
        assert event.lease_ms == granted and event.deadline is not None
        if protocol == "client-clock":  # scored by the caller's clock, an hour ahead
            assert abs(event.deadline - (event.ts + 40 + 3_600_000)) < 1000
        elif protocol == "padded-lease":  # half a lease past what it records, on server TIME
            assert event.deadline == event.ts + 40 + 20
        else:  # scored by the same server TIME as the stamp
            assert event.deadline == event.ts + granted


# --- the tight verdict's variants -------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["sound", "short-lease"])
def test_short_lease_grants_half_the_asked_lease_and_records_it(on: Factory, protocol):
    queue = on(protocol)
    queue.enqueue("a")
    claimed = queue.claim(10_000, "w1")
    assert claimed is not None
    extended = queue.extend("a", claimed.attempt, 10_000, "w1")
    granted = 5_000 if protocol == "short-lease" else 10_000
    for event in (*of_type(queue, "claim"), *of_type(queue, "extend")):
        assert event.lease_ms == granted and event.deadline == event.ts + granted
    assert extended == of_type(queue, "extend")[0].deadline


@pytest.mark.parametrize("protocol", ["sound", "padded-lease"])
def test_padded_lease_writes_a_deadline_half_a_lease_past_the_lease_it_records(on: Factory,
                                                                               protocol):
    """The event records the lease_ms asked for; the deadline written to active (and recorded
    beside it, and returned) runs half a lease longer: the reaper goes by that one."""
    queue = on(protocol)
    queue.enqueue("a")
    queue.enqueue("b")
    claimed = queue.claim(10_000, "w1")
    (batched,) = queue.claim_many(4, 10_000, "w1")
    assert claimed is not None
    extended = queue.extend("a", claimed.attempt, 10_000, "w1")
    written = 15_000 if protocol == "padded-lease" else 10_000
    leases = [*of_type(queue, "claim"), *of_type(queue, "extend")]
    assert len(leases) == 3
    for event in leases:
        assert event.lease_ms == 10_000 and event.deadline == event.ts + written
    active = dict(queue.client.zrange(queue.keys.active, 0, -1, withscores=True))
    assert int(active["a"]) == extended == of_type(queue, "extend")[0].deadline
    assert int(active["b"]) == batched.deadline_ms == of_type(queue, "claim")[1].deadline


@pytest.mark.parametrize("protocol", ["sound", "complete-skips-active"])
def test_complete_skips_active_accepts_a_reaped_holder_while_the_job_waits(on: Factory, protocol):
    queue = on(protocol)
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    assert queue.reap(100) == 1  # back in pending, its attempt still 1: nobody re-claimed it
    late = queue.complete("a", 1, "w1")
    pending = queue.client.zscore(queue.keys.pending, "a")
    if protocol == "sound":
        assert not late and of_type(queue, "complete") == []
    else:  # accepted, yet the job still waits in pending: it will run and complete again
        assert late and pending is not None
        again = queue.claim(60_000, "w2")
        assert again is not None and queue.complete("a", again.attempt, "w2")
        assert [e.attempt for e in of_type(queue, "complete")] == [1, 2]


def test_grace_reaper_takes_a_lease_only_a_grace_period_after_its_deadline(on: Factory):
    sound, graced = on("sound"), on("grace-reaper", reap_grace_ms=400)
    sound.enqueue("a")
    sound.claim(20, "w1")
    time.sleep(LAPSE_S)
    assert graced.reap(100) == 0  # lapsed, but not yet by the grace period
    wait_until(lambda: graced.reap(100) == 1, "the grace period to pass")
    reap = of_type(sound, "reap")[0]
    assert reap.deadline is not None and reap.ts - reap.deadline >= 400


def test_reused_token_reads_the_current_holders_attempt_and_the_store_takes_it(on: Factory):
    """The store fences by attempt only: another worker showing the live attempt is accepted.
    The checker, not the store, has to see that w1 is not the holder."""
    queue = on("reused-token")
    queue.enqueue("a")
    queue.claim(30, "w1")
    time.sleep(LAPSE_S)
    queue.reap(100)
    second = queue.claim(60_000, "w2")
    assert second is not None
    assert not queue.complete("a", 1, "w1")
    assert queue.current_attempt("a") == 2
    assert queue.complete("a", queue.current_attempt("a"), "w1")
    assert [(e.attempt, e.worker) for e in of_type(queue, "complete")] == [(2, "w1")]


# --- LocalClock and its offset file ---------------------------------------------------------


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_local_clock_without_a_file_is_the_wall_clock():
    clock = LocalClock()
    before = wall_ms()
    now = clock.now_ms()
    assert before <= now <= wall_ms() and clock.offset_ms() == 0


def test_local_clock_missing_or_empty_file_is_offset_zero(tmp_path):
    path = tmp_path / "offset"
    clock = LocalClock(path)
    assert clock.offset_ms() == 0
    path.write_text("")
    assert clock.offset_ms() == 0
    path.write_text("  \n")
    assert clock.offset_ms() == 0 and read_offset(path) == 0


def test_local_clock_follows_rewrites_of_its_offset_file(tmp_path):
    path = tmp_path / "offset"
    clock = LocalClock(path)
    for offset in (1000, 2000, -750, 123_456_789, 0, -5):  # same and different lengths
        write_offset(path, offset)
        before = wall_ms()
        now = clock.now_ms()
        assert before + offset <= now <= wall_ms() + offset
        assert clock.offset_ms() == offset
    path.unlink()
    assert clock.offset_ms() == 0  # removing the file heals the skew


def test_local_clock_rereads_only_when_the_file_changes(tmp_path, monkeypatch):
    path = skew_file(tmp_path, 250)
    reads = []
    real_read = chaos.protocol.clock.read_offset
    monkeypatch.setattr(chaos.protocol.clock, "read_offset",
                        lambda p: reads.append(p) or real_read(p))
    clock = LocalClock(path)
    assert [clock.offset_ms() for _ in range(5)] == [250] * 5
    assert len(reads) == 1
    write_offset(path, 260)
    assert [clock.offset_ms() for _ in range(5)] == [260] * 5
    assert len(reads) == 2


def test_write_offset_replaces_the_file_atomically(tmp_path):
    path = skew_file(tmp_path, 10)
    inode = path.stat().st_ino
    write_offset(path, -20)
    assert path.read_text() == "-20\n"
    assert path.stat().st_ino != inode  # a rename over the old file, not an in-place rewrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clock.offset"]  # no temp left


def test_a_garbled_offset_file_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "offset"
    path.write_text("ten seconds")
    with pytest.raises(ValueError, match="offset.*'ten seconds'"):
        LocalClock(path).now_ms()


# --- the processes --------------------------------------------------------------------------


def test_reaper_refuses_to_run_under_no_reaper():
    result = subprocess.run(
        [sys.executable, "-m", "chaos.reference.reaper", "--url", "valkey://127.0.0.1:1",
         "--protocol", "no-reaper"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "no-reaper" in result.stderr and "must not start a reaper" in result.stderr


def test_worker_flags_are_optional_and_default_to_sound():
    base = ["--url", "valkey://127.0.0.1:1", "--name", "w1"]
    config = parse_args(base)
    assert (config.protocol, config.clock_file, config.claim_gap_ms) == ("sound", None, None)
    config = parse_args([*base, "--protocol", "nonatomic-claim", "--clock-file", "/x/off",
                         "--claim-gap-ms", "250"])
    assert (config.protocol, config.clock_file, config.claim_gap_ms) == (
        "nonatomic-claim", "/x/off", 250)


@pytest.fixture
def reaper_process(valkey_server: ValkeyServer) -> Iterator[Callable[..., subprocess.Popen]]:
    started: list[subprocess.Popen] = []

    def start(keys: QueueKeys, *flags: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", "chaos.reference.reaper", "--url", valkey_server.url,
             "--prefix", keys.prefix, "--queue", keys.queue, "--interval-ms", "50", *flags],
            env=child_env(valkey_server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_reaper_process_takes_name_protocol_and_clock_file(on: Factory, keys, tmp_path,
                                                            reaper_process):
    queue = on("sound")
    queue.enqueue("a")
    job = queue.claim(60_000, "w1")
    assert job is not None
    reaper = reaper_process(keys, "--name", "reaper-7", "--protocol", "client-clock",
                            "--clock-file", str(skew_file(tmp_path, 120_000)))
    wait_until(lambda: bool(of_type(queue, "reap")) or reaper.poll() is not None,
               "the skewed reaper to reap")
    (reap,) = of_type(queue, "reap")
    assert reap.ts < job.deadline_ms  # a 60 s lease reaped at once: the reaper's clock ruled
    names = [c.get("name") for c in queue.client.client_list()]
    assert "reaper-7" in names
    reaper.send_signal(signal.SIGTERM)
    assert reaper.wait(timeout=30) == 0


# --- claim_many -----------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_claim_many_batches_only_where_the_claim_is_the_sound_script(on: Factory, protocol):
    """A variant whose claim deviates (two steps, the caller's clock) claims one job per call,
    its own way; short-lease batches with half the lease, recorded as granted."""
    queue = on(protocol, claim_gap_ms=0)
    for number in range(3):
        queue.enqueue(f"j{number}")
    claimed = queue.claim_many(3, 1000, "w1")
    batches = protocol not in ("client-clock", "nonatomic-claim")
    assert queue.claims_in_batches == batches
    assert [job.job_id for job in claimed] == (["j0", "j1", "j2"] if batches else ["j0"])
    claims = of_type(queue, "claim")
    assert [(e.job_id, e.attempt, e.deadline) for e in claims] == [
        (j.job_id, j.attempt, j.deadline_ms) for j in claimed]
    granted = 500 if protocol == "short-lease" else 1000
    assert all(e.lease_ms == granted for e in claims)
