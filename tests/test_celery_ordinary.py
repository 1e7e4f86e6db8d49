"""An ordinary Celery app (sut/celery/plain_worker.py: the prefork pool, late acks, Celery's
defaults otherwise: mingle on, no connection named), judged as its users run it. Each worker
spends a second in mingle, sweeping once, before its loop runs: the run starts once each is at
work (its first BRPOP on the queue: chaos.run.startup), so that second is not judged as the
restore cadence; a worker that stops sweeping once it is at work is still caught."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from test_celery import log_ids

from chaos.history.dialects import make_dialect
from chaos.history.events import read_history
from chaos.history.monitor import HistoryWriter, RecorderHealth, decode_lines
from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios" / "celery"
needs_celery = pytest.mark.usefixtures("celery_installed")  # decided at run time (conftest.py)


@needs_celery
def test_an_ordinary_prefork_app_passes_kill_worker_as_its_logs_say(tmp_path: Path):
    scenario = load_scenario(SCENARIOS / "plain-kill-worker.toml")
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    health = json.loads((result.run_dir / "monitor.json").read_text())
    assert health["undecoded_calls"] == 0 and health["trustworthy"], health
    startup = result.report["run"]["startup"]
    assert {entry["what"] for entry in startup.values()} == {"BRPOP cq:jobs"}
    logs = {path.stem: path.read_text() for path in (result.run_dir / "logs").glob("worker-*.log")}
    enqueued = set(log_ids((result.run_dir / "logs" / "producer.log").read_text(), "enqueue"))
    started = Counter(task for text in logs.values() for task in log_ids(text, "start"))
    finished = Counter(task for text in logs.values() for task in log_ids(text, "finish"))
    events = read_history(result.run_dir / "history-monitor.jsonl")
    completes = Counter(event.job_id for event in events if event.type == "complete")
    assert completes == finished and set(finished.values()) == {1}  # each once, as logged
    # mingle's sweep came before the run began (its start-up), and the run judged from then
    first_phase = min(event.ts for event in events if event.type == "phase")
    sweeps = [event for event in events if event.type == "sweep"]
    assert any(event.ts < first_phase for event in sweeps)
    assert all(entry["first_action_ms"] < first_phase for entry in startup.values())
    never_started = enqueued - set(started)  # kombu's BRPOP-then-reserve window (test_celery)
    assert result.checked is not None
    assert result.checked.failed_invariants() == (["no_loss"] if never_started else [])
    assert result.report["invariants"]["reap_cadence"]["status"] == "ok"


@needs_celery
def test_an_ordinary_worker_that_stops_sweeping_once_at_work_fails_reap_cadence(tmp_path: Path):
    scenario = load_scenario(SCENARIOS / "broken" / "plain-stops-sweeping.toml")
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.checked is not None
    assert "reap_cadence" in result.checked.failed_invariants()
    cadence = result.report["invariants"]["reap_cadence"]
    # silent from 2.5 s after it was ready (how many sweeps fell in the run before that
    # depends on how long the producer took to start: not asserted)
    assert {example["reason"] for example in cadence["examples"]} <= {
        "no sweep since, while the run went on", "no sweep at all while the run went on"}


# What MONITOR shows of a Celery worker starting with mingle on: a restore while mingle waits
# (its drain of the reply queue calls restore_visible first), a BRPOP on mingle's reply queue,
# then the loop's first BRPOP on the task queue: only the last is the worker at work.
START_UP = [
    '+1.000000 [0 127.0.0.1:7] "SET" "cq:unacked_mutex" "k1" "NX" "PX" "500"',
    '+1.000100 [0 127.0.0.1:7] "ZRANGE" "cq:unacked_index" "0" "0" "BYSCORE" "REV" '
    '"WITHSCORES"',
    '+1.000200 [0 127.0.0.1:7] "EVALSHA" "ab12" "1" "cq:unacked_mutex" "k1"',
    '+1.000201 [0 lua] "GET" "cq:unacked_mutex"',
    '+1.000202 [0 lua] "DEL" "cq:unacked_mutex"',
    '+1.000300 [0 127.0.0.1:7] "BRPOP" "cq:0f9e.reply.celery.pidbox" "1"',
    '+2.100000 [0 127.0.0.1:8] "BRPOP" "cq:jobs" "cq:jobs\\x06\\x163" "cq:jobs\\x06\\x166" '
    '"cq:jobs\\x06\\x169" "1"',
    '+2.100100 [0 127.0.0.1:9] "PING"',
]


def test_a_celery_worker_is_at_work_at_its_first_brpop_on_the_queue_not_in_mingle():
    dialect = make_dialect("celery", "cq:", "jobs", 1500)
    writer = HistoryWriter(dialect, io.StringIO(), RecorderHealth("celery"),
                           resolve=lambda address: "worker-1", members=frozenset({"worker-1"}))
    decode_lines(START_UP[:6], writer)
    assert writer.first_actions.of(["worker-1"]) == {}  # mingle's restore and reply BRPOP
    decode_lines(START_UP[6:], writer)
    (first,) = writer.first_actions.of(["worker-1"]).values()
    assert (first.stamp_ms, first.what) == (2100, "BRPOP cq:jobs")
    # the default reading (the other families'): any blocking pop is a worker waiting for work
    reference = HistoryWriter(make_dialect("echomq", "cq:", "jobs", 1500), io.StringIO(),
                              RecorderHealth("echomq"), resolve=lambda address: "worker-1",
                              members=frozenset({"worker-1"}))
    decode_lines([START_UP[5]], reference)
    assert reference.first_actions.of(["worker-1"])["worker-1"].what.startswith("BRPOP")
