"""The client-side acknowledgement ledger and its comparison with the surviving history (pure,
hand-written histories; the end-to-end proof is tests/test_store_faults.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from histories import History, to_events

from chaos.check import ledger
from chaos.check.checker import check
from chaos.check.ledger import (
    Ack,
    check_with_ledger,
    compare_ack_files,
    compare_acks,
    events_not_surviving,
    judged_history,
    read_acks,
)
from chaos.protocol.acks import AckLedger


def acked_run() -> tuple[History, list[Ack]]:
    """Two jobs, each enqueued, claimed and completed, with the acks the clients saw."""
    h = History()
    acks = []
    for index, job in enumerate(("a", "b")):
        ts = 10 + index * 100
        h.enqueue(job, ts=ts)
        acks.append(Ack("enqueue", job, source="producer"))
        claim = h.claim(job, attempt=1, worker="w1", ts=ts + 10)
        acks.append(Ack("claim", job, 1, "w1", int(claim["deadline"]), source="w1"))
        h.complete(job, attempt=1, worker="w1", ts=ts + 50)
        acks.append(Ack("complete", job, 1, "w1", source="w1"))
    return h, acks


def test_every_acknowledged_transition_surviving_counts_zero_lost():
    h, acks = acked_run()
    result = compare_acks(acks, h.events())
    assert result.acknowledged == {"enqueue": 2, "claim": 2, "complete": 2}
    assert result.lost_total == 0 and result.jobs_affected == 0 and result.examples == []


def test_transitions_missing_from_the_surviving_history_are_lost():
    h, acks = acked_run()
    records = h.records()
    # The store rolled back b's claim and complete (the last two transitions written).
    surviving = [r for r in records if not (r.get("id") == "b" and r["type"] != "enqueue")]
    result = compare_acks(acks, to_events(surviving))
    assert result.lost == {"enqueue": 0, "claim": 1, "complete": 1}
    assert result.lost_total == 2 and result.jobs_affected == 1
    assert [example["op"] for example in result.examples] == ["claim", "complete"]
    assert result.examples[1] == {"op": "complete", "job": "b", "client": "w1", "attempt": 1,
                                  "worker": "w1"}
    assert result.as_dict()["lost"] == 2


def test_a_claim_reissued_with_the_same_attempt_after_a_rollback_is_still_a_loss():
    """The store lost the first claim of attempt 1 and handed attempt 1 out again: two acked
    claims, one surviving event. Same id and attempt, so only the deadline tells them apart."""
    h = History()
    h.enqueue("a", ts=0)
    first = h.claim("a", attempt=1, worker="w1", ts=10)
    surviving = History()
    surviving.enqueue("a", ts=0)
    second = surviving.claim("a", attempt=1, worker="w1", ts=900)
    acks = [Ack("enqueue", "a"), Ack("claim", "a", 1, "w1", int(first["deadline"])),
            Ack("claim", "a", 1, "w1", int(second["deadline"]))]
    result = compare_acks(acks, surviving.events())
    assert result.lost == {"enqueue": 0, "claim": 1, "complete": 0}
    assert result.examples[0]["deadline"] == int(first["deadline"])


def test_a_duplicate_ack_matches_only_one_event():
    h, acks = acked_run()
    result = compare_acks([*acks, Ack("complete", "a", 1, "w1")], h.events())
    assert result.lost == {"enqueue": 0, "claim": 0, "complete": 1}


@pytest.mark.parametrize("clock", ["in_step", "client_behind", "client_ahead", "no_t"])
def test_the_streamed_ledger_comparison_equals_the_whole_ledger_count(
        tmp_path: Path, clock: str, monkeypatch: pytest.MonkeyPatch):
    """Files read in step with the history's server time (memory for what is in flight) find
    exactly what counting the whole ledger at once finds: the same lost acks, the same
    examples, whatever the clients' clocks say (``t``) and with acks alike in two files."""
    h = History()
    acks: list[tuple[int, Ack]] = []
    for index in range(30):
        job, ts = f"job-{index:02d}", 1000 + index * 7
        h.enqueue(job, ts=ts)
        acks.append((ts, Ack("enqueue", job, source="producer")))
        worker = f"w{index % 3}"
        claim = h.claim(job, attempt=1, worker=worker, ts=ts + 2)
        acks.append((ts + 2, Ack("claim", job, 1, worker, int(claim["deadline"]), source=worker)))
        h.complete(job, attempt=1, worker=worker, ts=ts + 5)
        acks.append((ts + 5, Ack("complete", job, 1, worker, source=worker)))
    # Acknowledged, never in the history: a rolled-back claim, and a complete acked twice more.
    acks.append((1100, Ack("claim", "job-03", 1, "w0", 1, source="w0")))
    acks.append((1500, Ack("complete", "job-09", 1, "w0", source="w0")))
    acks.append((1501, Ack("complete", "job-09", 1, "w0", source="w2")))
    shift = {"in_step": 0, "client_behind": -5000, "client_ahead": 5000, "no_t": 0}[clock]
    directory = tmp_path / "acks"
    directory.mkdir()
    for t, ack in acks:
        line = {"op": ack.op, "id": ack.job_id, "attempt": ack.attempt, "worker": ack.worker,
                "deadline": ack.deadline, **({} if clock == "no_t" else {"t": t + shift})}
        with open(directory / f"{ack.source}.jsonl", "a") as handle:
            handle.write(json.dumps({k: v for k, v in line.items() if v is not None}) + "\n")
    whole = compare_acks(read_acks(directory), h.events())
    assert compare_ack_files(directory, h.events()) == whole  # the files read at the end
    monkeypatch.setattr(ledger, "_STEP", 1)  # read after every event: acks in flight meet
    assert compare_ack_files(directory, h.events()) == whole
    assert whole.lost == {"enqueue": 0, "claim": 1, "complete": 2} and whole.jobs_affected == 2
    # of acks alike, the last ones in ledger order (files by name, lines in order) are lost
    assert [(e["op"], e["job"], e["client"]) for e in whole.examples] == [
        ("claim", "job-03", "w0"), ("complete", "job-09", "w0"), ("complete", "job-09", "w2")]


def test_events_not_surviving_are_those_the_store_no_longer_holds():
    h, _ = acked_run()
    events = h.events()
    assert events_not_surviving(events, events) == []
    assert events_not_surviving(events, events[:-2]) == events[-2:]


def test_the_ledger_file_round_trips_and_a_torn_tail_is_skipped(tmp_path: Path):
    ledger = AckLedger(tmp_path / "acks" / "worker-1.jsonl")
    ledger.record("claim", "a", attempt=1, worker="worker-1", deadline=1234)
    ledger.record("complete", "a", attempt=1, worker="worker-1")
    ledger.close()
    ledger.close()  # idempotent
    with open(tmp_path / "acks" / "worker-1.jsonl", "a") as handle:
        handle.write('{"op":"enqueue","id":"to')  # an OS crash mid-write
    acks = read_acks(tmp_path / "acks")
    assert acks == [Ack("claim", "a", 1, "worker-1", 1234, source="worker-1"),
                    Ack("complete", "a", 1, "worker-1", source="worker-1")]
    AckLedger(None).record("claim", "x")  # no path: records nothing, fails nothing


@pytest.mark.parametrize("line", ['{"op":"extend","id":"a"}\n', "garbage\n{}\n",
                                  '{"op":"claim"}\n'])
def test_a_bad_ledger_line_is_an_error_naming_the_file(tmp_path: Path, line: str):
    (tmp_path / "producer.jsonl").write_text(line)
    with pytest.raises(ValueError, match="producer.jsonl:1"):
        read_acks(tmp_path)


def test_a_sigkilled_writer_loses_nothing_it_recorded(tmp_path: Path):
    """Each ack is one write(2): once record() returned, SIGKILL cannot take it back."""
    path = tmp_path / "w.jsonl"
    code = ("import os,sys; from chaos.protocol.acks import AckLedger; l=AckLedger(sys.argv[1]); "
            "[l.record('enqueue', f'job-{i}') for i in range(500)]; "
            "print('done', flush=True); os.kill(os.getpid(), 9)")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == -signal.SIGKILL and result.stdout == "done\n"
    assert [ack.job_id for ack in read_acks(tmp_path)] == [f"job-{i}" for i in range(500)]


def test_check_with_ledger_compares_with_the_surviving_history_when_there_is_one(
        tmp_path: Path):
    h, acks = acked_run()
    history = h.write_jsonl(tmp_path / "history.jsonl")
    verdict, report = check_with_ledger(tmp_path, history, check)
    assert verdict.passed and report is None  # no acks/ directory: no ledger figure
    ledger = AckLedger(tmp_path / "acks" / "w1.jsonl")
    for ack in acks:
        ledger.record(ack.op, ack.job_id, attempt=ack.attempt, worker=ack.worker,
                      deadline=ack.deadline)
    ledger.close()
    verdict, report = check_with_ledger(tmp_path, history, check)
    assert report is not None and report["lost"] == 0
    assert report["compared_with"] == "history.jsonl" and report["history_events_lost"] == 0
    surviving = tmp_path / "history-surviving.jsonl"
    surviving.write_text("".join(json.dumps(r) + "\n" for r in h.records()[:-1]))
    verdict, report = check_with_ledger(tmp_path, history, check)  # b's complete rolled back
    assert report is not None
    assert report["lost"] == 1 and report["lost_by_op"]["complete"] == 1
    assert report["history_events_lost"] == 1
    assert report["history_events_lost_by_type"] == {"complete": 1}
    assert report["compared_with"] == "history-surviving.jsonl"
    assert verdict.jobs.completed == 2  # it was acknowledged: still judged
    (tmp_path / "acks" / "w1.jsonl").write_text(
        "".join(json.dumps({"op": a.op, "id": a.job_id, "attempt": a.attempt,
                            "worker": a.worker, "deadline": a.deadline}) + "\n"
                for a in acks if not (a.op == "complete" and a.job_id == "b")))
    verdict, report = check_with_ledger(tmp_path, history, check)
    assert report is not None and report["lost"] == 0  # never acknowledged: nothing lost ...
    assert verdict.jobs.completed == 1 and verdict.jobs.lost == 1  # ... and b is not done


def test_the_judged_history_drops_rolled_back_transitions_nobody_was_acknowledged_for():
    """A stale primary accepted b's complete, but its WAIT failed: no client was told, the
    promoted replica never had it. The runner's fault note survives either way."""
    h, acks = acked_run()
    h.add("fault", ts=300, kind="failover", worker="valkey-1", fault_id="f1", killed_ts=290)
    events = h.events()
    b_complete, fault = events[-2], events[-1]
    assert (b_complete.type, b_complete.job_id, fault.type) == ("complete", "b", "fault")
    surviving = events[:-2]
    unacknowledged = [a for a in acks if not (a.op == "complete" and a.job_id == "b")]
    assert judged_history(events, surviving, unacknowledged) == [*surviving, fault]
    assert judged_history(events, surviving, acks) == events
    # An acknowledgement is spent on the surviving event it matches first: b's complete rolled
    # back, then re-done identically and acknowledged once; the rolled-back copy is not judged.
    redone = h.complete("b", attempt=1, worker="w1", ts=400)
    events = h.events()
    surviving = [e for e in events if e.seq != b_complete.seq]
    assert redone["seq"] == surviving[-1].seq
    assert judged_history(events, surviving, acks) == surviving


def test_the_streamed_ledger_comparison_holds_only_what_is_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """2,000 jobs, each acknowledged 1 ms after its event: however long the run, the matcher
    never holds more than the events of one read step and their acks (not the run's)."""
    h = History()
    directory = tmp_path / "acks"
    directory.mkdir()
    with open(directory / "producer.jsonl", "w") as producer, \
            open(directory / "w1.jsonl", "w") as worker:
        for index in range(2000):
            job, ts = f"job-{index}", 1000 + index * 3
            h.enqueue(job, ts=ts)
            producer.write(json.dumps({"op": "enqueue", "id": job, "t": ts + 1}) + "\n")
            claim = h.claim(job, attempt=1, worker="w1", ts=ts + 1)
            worker.write(json.dumps({"op": "claim", "id": job, "attempt": 1, "worker": "w1",
                                     "deadline": int(claim["deadline"]), "t": ts + 2}) + "\n")
            h.complete(job, attempt=1, worker="w1", ts=ts + 2)
            worker.write(json.dumps({"op": "complete", "id": job, "attempt": 1,
                                     "worker": "w1", "t": ts + 3}) + "\n")
    held: list[int] = []

    class Watched(ledger._Matcher):
        def event(self, key: tuple[object, ...]) -> None:
            super().event(key)
            held.append(len(self.events) + len(self.acks))

    monkeypatch.setattr(ledger, "_Matcher", Watched)
    monkeypatch.setattr(ledger, "_STEP", 16)
    result = compare_ack_files(directory, h.events())
    assert result.lost_total == 0 and sum(result.acknowledged.values()) == 6000
    assert len(held) == 6000 and max(held) <= 16 + 3  # a step, and what was acked meanwhile
