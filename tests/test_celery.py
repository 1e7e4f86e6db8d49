"""Celery 5 on Valkey as a queue family (docs/celery.md): kombu's Redis transport decoded from
MONITOR by effect (chaos/queues/celery), real Celery worker processes (sut/celery) killed under
load by the runner, the verdict held to the workers' own logs; the contract's settings Celery
cannot honour refused."""

from __future__ import annotations

import io
import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from chaos.check.checker import check
from chaos.check.verdict import CheckConfig
from chaos.history.dialects import make_dialect
from chaos.history.events import read_history
from chaos.history.monitor import HistoryWriter, RecorderHealth, decode_lines
from chaos.run.runner import run_scenario
from chaos.scenario.loading import ScenarioError, load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios" / "celery"
needs_celery = pytest.mark.usefixtures("celery_installed")  # decided at run time (conftest.py)


def log_ids(text: str, word: str) -> list[str]:
    """The task ids of a Celery SUT log's ``<ms> <word> id=<id>`` lines, in order."""
    return [parts[2][3:] for parts in (line.split() for line in text.splitlines())
            if len(parts) >= 3 and parts[1] == word and parts[2].startswith("id=")]


@needs_celery
def test_celery_under_kill_worker_is_judged_as_its_workers_logs_say(tmp_path: Path):
    """Every task the producer sent and some worker started was finished, once, by id, and
    the history's completes are those finish lines; the killed worker's unfinished tasks were
    restored. A task no worker ever started is lost: kombu's BRPOP takes a message off the
    list before the worker reserves it (MULTI ZADD unacked_index, HSET unacked), and a worker
    killed in between loses it (seen here 1 run in 3): the verdict says so, as the logs do."""
    result = run_scenario(load_scenario(SCENARIOS / "kill-worker.toml"), tmp_path / "run",
                          io.StringIO())
    health = json.loads((result.run_dir / "monitor.json").read_text())
    assert health["undecoded_calls"] == 0 and health["trustworthy"], health
    logs = {path.stem: path.read_text() for path in (result.run_dir / "logs").glob("worker-*.log")}
    enqueued = log_ids((result.run_dir / "logs" / "producer.log").read_text(), "enqueue")
    started = Counter(task for text in logs.values() for task in log_ids(text, "start"))
    finished = Counter(task for text in logs.values() for task in log_ids(text, "finish"))
    never_started = set(enqueued) - set(started)
    assert enqueued and set(started) == set(finished) <= set(enqueued)
    assert set(finished.values()) == {1}  # each finished once
    events = read_history(result.run_dir / "history-monitor.jsonl")
    completes = Counter(event.job_id for event in events if event.type == "complete")
    assert completes == finished  # the history's completes are the workers' finish lines
    # the killed worker started tasks it never finished; each was restored and run elsewhere
    killed = result.report["run"]["faults"][0]["worker"]
    stranded = set(log_ids(logs[killed], "start")) - set(log_ids(logs[killed], "finish"))
    reaps = [event for event in events if event.type == "reap"]
    reaped = {event.job_id for event in reaps}
    # (a task it had reserved but not yet started is restored too: no start line of it)
    assert stranded and stranded <= reaped and {event.worker for event in reaps} == {killed}
    assert not reaped & set(log_ids(logs[killed], "finish"))
    no_loss = result.report["invariants"]["no_loss"]
    assert no_loss["lost"] == len(never_started)
    assert {example["job"] for example in no_loss.get("examples", [])} <= never_started
    assert result.checked is not None
    assert result.checked.failed_invariants() == (["no_loss"] if never_started else [])


LINES = [  # the same tag delivered to two workers (a restore between), then both ack it
    '+1.000000 [0 127.0.0.1:1] "LPUSH" "cq:jobs" "{\\"body\\": \\"\\", \\"headers\\": '
    '{\\"id\\": \\"t1\\"}, \\"properties\\": {\\"delivery_tag\\": \\"g1\\"}}"',
    '+1.001000 [0 127.0.0.1:2] "MULTI"',
    '+1.001001 [0 127.0.0.1:2] "ZADD" "cq:unacked_index" "1.001" "g1"',
    '+1.001002 [0 127.0.0.1:2] "HSET" "cq:unacked" "g1" "[{\\"body\\": \\"\\", \\"headers\\": '
    '{\\"id\\": \\"t1\\"}}, \\"jobs\\", \\"jobs\\"]"',
    '+1.001003 [0 127.0.0.1:2] "EXEC"',
    '+2.600000 [0 127.0.0.1:3] "SET" "cq:unacked_mutex" "k1" "NX" "PX" "500"',
    '+2.600100 [0 127.0.0.1:3] "ZRANGE" "cq:unacked_index" "1.1" "0" "BYSCORE" "REV" '
    '"WITHSCORES"',
    '+2.600200 [0 127.0.0.1:3] "WATCH" "cq:unacked"',
    '+2.600300 [0 127.0.0.1:3] "HGET" "cq:unacked" "g1"',
    '+2.600400 [0 127.0.0.1:3] "MULTI"',
    '+2.600401 [0 127.0.0.1:3] "ZREM" "cq:unacked_index" "g1"',
    '+2.600402 [0 127.0.0.1:3] "HDEL" "cq:unacked" "g1"',
    '+2.600403 [0 127.0.0.1:3] "RPUSH" "cq:jobs" "{\\"body\\": \\"\\", \\"headers\\": '
    '{\\"id\\": \\"t1\\"}}"',
    '+2.600404 [0 127.0.0.1:3] "EXEC"',
    '+2.600500 [0 127.0.0.1:3] "SET" "cq:unacked_mutex" "k2" "NX" "PX" "500"',  # turned away
    '+2.601000 [0 127.0.0.1:3] "MULTI"',
    '+2.601001 [0 127.0.0.1:3] "ZADD" "cq:unacked_index" "2.601" "g1"',
    '+2.601002 [0 127.0.0.1:3] "HSET" "cq:unacked" "g1" "[{\\"body\\": \\"\\", \\"headers\\": '
    '{\\"id\\": \\"t1\\"}}, \\"jobs\\", \\"jobs\\"]"',
    '+2.601003 [0 127.0.0.1:3] "EXEC"',
    '+2.900000 [0 127.0.0.1:2] "MULTI"',  # the first worker wakes and acks: no fencing token
    '+2.900001 [0 127.0.0.1:2] "ZREM" "cq:unacked_index" "g1"',
    '+2.900002 [0 127.0.0.1:2] "HDEL" "cq:unacked" "g1"',
    '+2.900003 [0 127.0.0.1:2] "EXEC"',
]


def test_a_late_ack_is_accepted_for_its_own_attempt_and_removes_the_other_reservation():
    """kombu acks by delivery tag, the same for every delivery of a message: a worker that
    wakes after its reservation was restored and reserved by another removes that other's
    reservation with its ack. The dialect says so: a complete of the first attempt while the
    second is live, and the second's reservation gone from the shadow (a kill of its holder
    would now lose the task)."""
    names = {"127.0.0.1:1": "producer", "127.0.0.1:2": "worker-1", "127.0.0.1:3": "worker-2"}
    dialect = make_dialect("celery", "cq:", "jobs", 1500)
    handle, health = io.StringIO(), RecorderHealth("celery")
    decode_lines(LINES, HistoryWriter(dialect, handle, health, resolve=names.get))
    events = [json.loads(line) for line in handle.getvalue().splitlines()]
    assert [(e["type"], e.get("id", ""), e.get("attempt", e.get("ran", "")), e["worker"])
            for e in events if e["type"] != "enqueue"] == [
        ("claim", "t1", "1", "worker-1"), ("sweep", "", "", "worker-2"),
        ("reap", "t1", "1", "worker-1"), ("sweep", "", "0", "worker-2"),
        ("claim", "t1", "2", "worker-2"), ("complete", "t1", "1", "worker-1")]
    assert events[0]["type"] == "enqueue" and events[1]["deadline"] == str(1001 + 1500)
    assert health.undecoded_calls == 0
    assert dialect.lease_holders_oldest_first(0) == []  # worker-2's reservation is gone


MESSAGE = '"[{\\"body\\": \\"\\", \\"headers\\": {\\"id\\": \\"t1\\"}}, \\"jobs\\", \\"jobs\\"]"'
GONE = [  # kombu 5.7 as MONITOR showed it (kombu's QoS driven by hand, then A's channel closed)
    *LINES[:18],  # enqueue; worker-1 reserves; worker-2's sweep restores it; turned away
    '+2.601000 [0 127.0.0.1:3] "MULTI"',  # worker-2 reserves it again ...
    '+2.601001 [0 127.0.0.1:3] "ZADD" "cq:unacked_index" "2.601" "g1"',
    f'+2.601002 [0 127.0.0.1:3] "HSET" "cq:unacked" "g1" {MESSAGE}',
    '+2.601003 [0 127.0.0.1:3] "EXEC"',
    '+2.700000 [0 127.0.0.1:3] "MULTI"',  # ... runs it and acks it
    '+2.700001 [0 127.0.0.1:3] "ZREM" "cq:unacked_index" "g1"',
    '+2.700002 [0 127.0.0.1:3] "HDEL" "cq:unacked" "g1"',
    '+2.700003 [0 127.0.0.1:3] "EXEC"',
    # worker-1's warm shutdown: restore_unacked -> restore_by_tag of the tag it still lists,
    # on another connection of its pool; the HGET finds the message gone, so nothing is pushed
    '+2.800000 [0 127.0.0.1:4] "WATCH" "cq:unacked"',
    '+2.800100 [0 127.0.0.1:4] "HGET" "cq:unacked" "g1"',
    '+2.800200 [0 127.0.0.1:4] "MULTI"',
    '+2.800201 [0 127.0.0.1:4] "ZREM" "cq:unacked_index" "g1"',
    '+2.800202 [0 127.0.0.1:4] "HDEL" "cq:unacked" "g1"',
    '+2.800203 [0 127.0.0.1:4] "EXEC"',
]


def test_a_restore_that_finds_the_message_gone_is_no_ack(tmp_path: Path):
    """A warm shutdown restores every tag the worker still lists (kombu's restore_unacked),
    one another worker ran and acked among them: its HGET finds nothing, so the transaction
    is the ack's ZREM and HDEL alone. The WATCH its connection sent first says it is a
    restore: no event, and the task ran once is completed once (it used to read as worker-1's
    ack of its restored attempt: completed twice). The same ZREM and HDEL with no WATCH before
    are still an ack (the test above)."""
    names = {"127.0.0.1:1": "producer", "127.0.0.1:2": "worker-1", "127.0.0.1:3": "worker-2",
             "127.0.0.1:4": "worker-1"}
    dialect = make_dialect("celery", "cq:", "jobs", 1500)
    path = tmp_path / "history.jsonl"
    health = RecorderHealth("celery")
    with path.open("w") as handle:
        decode_lines(GONE, HistoryWriter(dialect, handle, health, resolve=names.get))
    events = read_history(path)
    assert [(e.type, e.attempt, e.worker) for e in events if e.type != "enqueue"] == [
        ("claim", 1, "worker-1"), ("sweep", None, "worker-2"), ("reap", 1, "worker-1"),
        ("sweep", None, "worker-2"), ("claim", 2, "worker-2"), ("complete", 2, "worker-2")]
    assert health.undecoded_calls == 0
    verdict = check(events, CheckConfig(lease_ms=1500, reap_interval_ms=500,
                                        dialect="celery"), final=False)
    assert verdict.invariants["no_double_completion"].ok
    assert verdict.invariants["exclusive_lease"].ok
    # a restore that finds nothing while the shadow holds the reservation: not a no-op
    held = make_dialect("celery", "cq:", "jobs", 1500)
    health = RecorderHealth("celery")
    decode_lines([*LINES[:5], *(line.replace(":4]", ":2]") for line in GONE[-6:])],
                 HistoryWriter(held, io.StringIO(), health, resolve=names.get))
    assert health.undecoded_calls == 1


KOMBU_RESTORE_GONE = """
import sys, time
from kombu import Connection, Exchange, Queue
url, queue = sys.argv[1], Queue("jobs", Exchange("jobs"), "jobs")
def connect(name):
    return Connection(url, transport_options={"global_keyprefix": "cq:", "client_name": name,
                                              "visibility_timeout": 1})
def take(connection, ack):  # a delivery as a worker's loop takes it: BRPOP, then reserved
    got = []
    with connection.Consumer(queue, callbacks=[lambda body, message: got.append(message)],
                             accept=["json"]) as consumer:
        consumer.qos(prefetch_count=1)
        while not got:
            connection.drain_events(timeout=5)
    if ack:
        got[0].ack()
with connect("producer") as producer:
    producer.SimpleQueue(queue).put({"x": 1}, headers={"id": "t1"})
one, two = connect("worker-1"), connect("worker-2")
take(one, ack=False)  # worker-1 reserves it and never runs it
time.sleep(1.2)
two.default_channel.qos.restore_visible(num=10, interval=1)  # worker-2's sweep puts it back
take(two, ack=True)  # worker-2 runs it and acks
one.release()  # worker-1's warm shutdown: restore_unacked of the tag it still lists
"""


@needs_celery
def test_real_kombu_restoring_an_acked_task_at_shutdown_is_no_completion(
        celery_installed: Path, valkey_server, tmp_path: Path):
    """The same, with kombu 5.7 itself against a real server, recorded from MONITOR: one
    complete, worker-2's."""
    from chaos.history.monitor import MonitorRecorder

    url = f"redis://:{valkey_server.password}@127.0.0.1:{valkey_server.port}/0" \
        if valkey_server.password else f"redis://127.0.0.1:{valkey_server.port}/0"
    path = tmp_path / "history.jsonl"
    recorder = MonitorRecorder(make_dialect("celery", "cq:", "jobs", 1000), path,
                               "127.0.0.1", valkey_server.port, valkey_server.password,
                               members=["producer", "worker-1", "worker-2"])
    recorder.start()
    done = subprocess.run([".venv/bin/python", "-c", KOMBU_RESTORE_GONE, url],
                          cwd=celery_installed, capture_output=True, text=True, timeout=60)
    health = recorder.stop()
    assert done.returncode == 0, done.stderr
    events = read_history(path)
    assert [(e.type, e.attempt, e.worker) for e in events if e.type in ("claim", "complete",
                                                                         "reap", "retry")] == [
        ("claim", 1, "worker-1"), ("reap", 1, "worker-1"), ("claim", 2, "worker-2"),
        ("complete", 2, "worker-2")]
    assert health.undecoded_calls == 0, health.undecoded_examples


def test_settings_celery_cannot_honour_are_refused_at_validation():
    base = {"name": "c", "sut": {"workers": ["true"], "dialect": "celery", "producer": ["true"]},
            "topology": {"heartbeat_ms": 0}}
    scenario_from_dict(base, "test")  # valid as it is
    refusals = [({"topology": {}}, "heartbeat_ms = 10000 (the default, lease / 3): Celery never "
                                   "renews a reservation"),
                ({"topology": {"heartbeat_ms": 0, "max_stalls": 2}}, "max_stalls = 2"),
                ({"sut": {"workers": ["true"], "dialect": "celery"}}, "[sut] producer")]
    for change, words in refusals:
        with pytest.raises(ScenarioError) as refused:
            scenario_from_dict({**base, **change}, "test")
        assert words in str(refused.value)


@needs_celery
def test_the_celery_sut_refuses_a_renewal_it_cannot_do(celery_installed: Path):
    done = subprocess.run([".venv/bin/python", "worker.py"], cwd=celery_installed,
                          env={"CHAOS_VALKEY_URL": "redis://127.0.0.1:1", "CHAOS_NAME": "w",
                               "CHAOS_QUEUE": "jobs", "CHAOS_LEASE_MS": "1000",
                               "CHAOS_REAP_INTERVAL_MS": "200", "CHAOS_HEARTBEAT_MS": "300"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "CHAOS_HEARTBEAT_MS=300" in done.stderr


@needs_celery
def test_a_paused_celery_worker_acks_late_and_its_tasks_run_twice_as_its_log_says(
        tmp_path: Path):
    """SIGSTOP past the visibility timeout: the other workers restore and run its tasks; on
    waking it finishes them and acks, accepted (no fencing token). The verdict fails exactly
    no_double_completion and exclusive_lease (the scenario expects it), and the tasks it counts
    completed twice are those two workers' logs finish twice."""
    scenario = load_scenario(SCENARIOS / "pause-worker.toml")
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    health = json.loads((result.run_dir / "monitor.json").read_text())
    assert health["undecoded_calls"] == 0 and health["trustworthy"], health
    assert result.checked is not None
    assert result.verdict == "fail"
    assert result.checked.failed_invariants() == scenario.expect_fail == [
        "no_double_completion", "exclusive_lease"]
    logs = [path.read_text() for path in (result.run_dir / "logs").glob("worker-*.log")]
    finished = Counter(task for text in logs for task in log_ids(text, "finish"))
    twice = {task for task, count in finished.items() if count == 2}
    assert twice and max(finished.values()) == 2
    double = result.report["invariants"]["no_double_completion"]
    assert double["violations"] == len(twice)
    assert {example["job"] for example in double["examples"]} <= twice
