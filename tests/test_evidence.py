"""No verdict on missing evidence (docs/design.md §4): a history that lacks a call cannot fail an
invariant on what that call may explain, nor pass it; an offence that stands on what was seen
still fails. And a checker that raises is an outcome of its own, never a failed invariant.

The checker's rules are tested on hand-written histories; the recorder's part on a real
valkey-server, with our own scripts changed by one byte (so no SHA1 matches) beside the sound
ones and a broken one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from histories import History
from test_monitor import live_recorder

from chaos import cli
from chaos.check import judgements
from chaos.check.checker import CheckConfig, check
from chaos.errors import EXIT_CHECKER, EXIT_FAIL, EXIT_UNKNOWN, EXIT_USAGE
from chaos.files import write_json_atomic
from chaos.history.events import read_history
from chaos.history.monitor import HEALTH_FILE, MONITOR_HISTORY
from chaos.history.schema import Phase, Run
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.run.evaluate import CHECKER_ERRORS, evaluate
from chaos.runtime.valkey import ValkeyServer

L, R = 1000, 250


def _finished(h: History, ts: int) -> None:
    h.phase("end", ts, drained="1", aborted="0")


def test_a_loss_explained_by_an_undecoded_call_is_unknown_not_fail():
    """Job b's complete was a call nobody decoded: b looks lost, but the evidence says it may
    not be. no_loss is blind (neither passed nor failed) and the verdict unknown."""
    h = History(L, R)
    for job, ts in (("a", 10), ("b", 20)):
        h.enqueue(job, ts)
    h.claim("a", 1, "w1", 30)
    h.complete("a", 1, "w1", 40)
    h.claim("b", 1, "w1", 50)
    h.blind("b", 60)  # the call that completed b, undecoded
    _finished(h, 100)
    verdict = check(h.events(), final=True)
    result = verdict.invariants["no_loss"]
    assert (result.ok, result.status, result.violations, result.blinded) == (True, "blind", 0, 1)
    assert verdict.word == "unknown" and verdict.unknown and not verdict.passed
    assert verdict.blind_invariants() and "no_loss" in verdict.blind_invariants()
    assert verdict.evidence_missing == [{"lacks": "transition", "why": "undecoded call",
                                         "blind_events": 1, "jobs": 1, "every_job": False}]


def test_the_same_loss_with_no_blind_spot_on_its_job_still_fails():
    """The broken variant of the rule above: b really is lost (nothing undecoded touched it);
    an undecoded call on another job blinds nothing of b's."""
    h = History(L, R)
    for job, ts in (("a", 10), ("b", 20), ("c", 25)):
        h.enqueue(job, ts)
    h.claim("a", 1, "w1", 30)
    h.complete("a", 1, "w1", 40)
    h.claim("b", 1, "w1", 50)
    h.blind("c", 60)  # c's calls undecoded: c is blinded, b is not
    _finished(h, 100)
    verdict = check(h.events(), final=True)
    result = verdict.invariants["no_loss"]
    assert (result.ok, result.violations, result.blinded) == (False, 1, 1)
    assert [example["job"] for example in result.examples] == ["b"]
    assert verdict.word == "fail" and not verdict.unknown


def test_an_offence_proven_before_the_blind_spot_stands():
    """A double completion seen whole before anything went unseen stays a failure, even on the
    job the later undecoded call touched; one proven after a blind spot for every job is blinded."""
    h = History(L, R)
    h.enqueue("a", 10)
    h.claim("a", 1, "w1", 20)
    h.complete("a", 1, "w1", 30)
    h.complete("a", 1, "w2", 40)  # second accepted complete: proven at 40
    h.blind("a", 50)
    _finished(h, 100)
    proven = check(h.events(), final=True).invariants["no_double_completion"]
    assert (proven.ok, proven.violations) == (False, 1)

    later = History(L, R)
    later.enqueue("a", 10)
    later.claim("a", 1, "w1", 20)
    later.blind(None, 25, why="the MONITOR connection broke")  # every job, from 25 on
    later.complete("a", 1, "w1", 30)
    later.complete("a", 1, "w2", 40)
    _finished(later, 100)
    verdict = check(later.events(), final=True)
    result = verdict.invariants["no_double_completion"]
    assert (result.ok, result.status, result.blinded) == (True, "blind", 1)
    assert verdict.word == "unknown"
    assert verdict.evidence_missing[0]["every_job"] is True


def test_a_stray_call_after_an_undecoded_claim_is_blinded():
    """BullMQ's retries, undecoded, then the retry's accepted complete: without the claim it
    reads as a call outside the live lease. The same complete with the claim decoded and no
    blind spot is a stray call (the mutant it catches: a reused token)."""
    def history(blinded: bool) -> History:
        h = History(L, R)
        h.enqueue("a", 10)
        h.claim("a", 1, "w1", 20)
        h.complete("a", 1, "w1", 30)  # BullMQ's retry: done, then back to wait
        if blinded:
            h.blind("a", 40)  # the retry's claim of attempt 2, undecoded
        h.complete("a", 2, "w2", 60)
        _finished(h, 100)
        return h

    blind = check(history(True).events(), final=True)
    assert blind.invariants["exclusive_lease"].status == "blind"
    assert blind.invariants["exclusive_lease"].blinded == 1
    seen = check(history(False).events(), final=True)
    assert seen.invariants["exclusive_lease"].violations == 1 and seen.word == "fail"


def test_a_holder_blind_spot_blinds_only_what_needs_the_holder():
    """A decoded complete whose connection is unknown: exclusive_lease cannot tell the holder,
    but a loss on that job stands (no_loss needs the transitions, not who made them)."""
    h = History(L, R)
    h.enqueue("a", 10)
    h.enqueue("b", 11)
    h.claim("a", 1, "w1", 20)
    h.blind("a", 29, lacks="holder", why="unattributed call")
    h.complete("a", 1, "w2", 30)  # a token reused by another worker, or just unattributed
    h.claim("b", 1, "w1", 40)
    h.blind("b", 41, lacks="holder", why="unattributed call")
    _finished(h, 100)
    verdict = check(h.events(), final=True)
    assert verdict.invariants["exclusive_lease"].status == "blind"
    assert verdict.invariants["no_loss"].violations == 1  # b: lost, whoever held it
    assert verdict.word == "fail"


def test_a_wrong_lease_length_is_its_own_evidence():
    """A decoded grant of the wrong length fails lease_length whatever else went unseen."""
    h = History(L, R)
    h.enqueue("a", 10)
    h.blind("a", 15)
    h.claim("a", 1, "w1", 20, lease_ms=2 * L)
    h.complete("a", 1, "w1", 30)
    _finished(h, 100)
    result = check(h.events(), final=True).invariants["lease_length"]
    assert (result.ok, result.violations, result.blinded) == (False, 1, 0)


def test_needless_redeliveries_of_blinded_jobs_do_not_count_towards_the_limit():
    def history(blind_first: bool) -> History:
        h = History(L, R)
        for job, ts in (("a", 10), ("b", 11)):
            h.enqueue(job, ts)
            h.claim(job, 1, "w1", ts + 10)
        if blind_first:
            h.blind("a", 30)
        h.reap("a", 1, 1030)  # no fault: needless
        h.reap("b", 1, 1031)
        for job, ts in (("a", 1100), ("b", 1101)):
            h.claim(job, 2, "w1", ts)
            h.complete(job, 2, "w1", ts + 5)
        _finished(h, 1200)
        return h

    config = CheckConfig(L, R, max_needless=1)
    blinded = check(history(True).events(), config, final=True).invariants["needless_limit"]
    assert (blinded.ok, blinded.status, blinded.blinded) == (True, "blind", 1)
    seen = check(history(False).events(), config, final=True).invariants["needless_limit"]
    assert (seen.ok, seen.violations) == (False, 1)


def test_a_sound_history_with_no_blind_spot_still_passes():
    h = History(L, R)
    for number in range(50):
        job = f"j{number}"
        h.enqueue(job, number * 10)
        h.claim(job, 1, "w1", number * 10 + 1)
        h.complete(job, 1, "w1", number * 10 + 5)
    _finished(h, 1000)
    verdict = check(h.events(), final=True)
    assert verdict.passed and verdict.word == "pass" and not verdict.evidence_missing


# --- a checker that raises ---------------------------------------------------------------


def _run_dir(tmp_path: Path, lost: bool = False) -> Path:
    h = History(L, R)
    h.enqueue("a", 10)
    h.claim("a", 1, "w1", 20)
    if not lost:
        h.complete("a", 1, "w1", 30)
    _finished(h, 100)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    h.write_jsonl(run_dir / "history.jsonl")
    return run_dir


@pytest.mark.parametrize("raised", [RuntimeError("a bug"), KeyError("job")])
def test_a_judge_that_raises_is_a_checker_error_and_the_others_are_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        raised: Exception):
    def broken(*_: object) -> None:
        raise raised

    monkeypatch.setattr(judgements, "judge_no_double_completion", broken)
    run_dir = _run_dir(tmp_path)
    evaluation = evaluate(run_dir)
    assert (evaluation.word, evaluation.exit_code) == ("checker_error", EXIT_CHECKER)
    assert evaluation.verdict is not None
    results = evaluation.verdict.invariants
    assert results["no_double_completion"].status == "error"
    assert all(result.status == "ok" for name, result in results.items()
               if name != "no_double_completion")
    saved = (run_dir / CHECKER_ERRORS).read_text()
    assert "== no_double_completion" in saved and type(raised).__name__ in saved
    assert "Traceback" in saved
    assert cli.main(["check", str(run_dir)]) == EXIT_CHECKER
    out = capsys.readouterr().out
    assert "CHECKER_ERROR" in out and "[ERR ] no_double_completion" in out


def test_a_real_failure_beside_a_checker_error_is_a_fail(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(judgements, "judge_stall_limit", broken)
    evaluation = evaluate(_run_dir(tmp_path, lost=True))
    assert (evaluation.word, evaluation.exit_code) == ("fail", EXIT_FAIL)


def test_a_replay_that_raises_is_a_checker_error_and_a_bad_line_still_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from chaos.check import checker

    run_dir = _run_dir(tmp_path)
    with monkeypatch.context() as patched:
        def broken(*_: object) -> None:
            raise AttributeError("a bug in the replay")

        patched.setattr(checker, "replay", broken)
        assert cli.main(["check", str(run_dir)]) == EXIT_CHECKER
        assert "AttributeError" in (run_dir / CHECKER_ERRORS).read_text()
    assert cli.main(["check", str(run_dir)]) == 0  # mended: no stale traceback left
    assert not (run_dir / CHECKER_ERRORS).exists()
    with open(run_dir / "history.jsonl", "a") as handle:
        handle.write('{"seq": "200-0", "type": "claim", "attempt": "x"}\n')
    assert cli.main(["check", str(run_dir)]) == EXIT_USAGE


# --- the recorder: undecoded calls become blind spots of their jobs ------------------------


# A completion this toolkit cannot read: the job leaves active for a state no protocol it knows
# has ("done"), its row kept. Decoded by effect it is neither a complete nor anything else.
FINISH_UNREADABLY = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'state', 'done')
return 1
"""


class _OneByteOff(QueueClient):
    """Our own scripts minus their final newline: the same effects, SHA1s nobody knows."""

    def load_scripts(self) -> None:
        self._sources = {name: source.rstrip("\n") for name, source in self._sources.items()}
        super().load_scripts()


def test_a_queue_whose_calls_are_not_decoded_is_unknown_and_its_real_double_completion_fails(
        valkey_server: ValkeyServer, raw_client: redis.Redis, tmp_path: Path):
    """Jobs enqueued and claimed with our scripts, finished by a script whose effect no
    decoder reads: every finish is undecoded, so the jobs look lost, but their evidence is
    missing: unknown, not fail (it was FAIL "lost" before). Then the same run with one job
    completed twice by a decoded broken script: that offence stands on what was seen, and
    fails."""
    keys = QueueKeys("blind:", "q")
    sound = QueueClient(raw_client, keys)
    unfenced = QueueClient(raw_client, keys, protocol="unfenced-complete")

    def run(run_dir: Path, double_complete: bool) -> int:
        run_dir.mkdir()
        recorder = live_recorder(valkey_server, keys, run_dir)
        sound.record(**Run(scenario="blind", lease_ms=L, reap_interval_ms=R).fields())
        for number in range(5):
            sound.enqueue(f"{run_dir.name}-{number}", "x")
        for _ in range(5):
            claimed = sound.claim(L, "w1")
            assert claimed is not None
            raw_client.eval(FINISH_UNREADABLY, 2, keys.active, keys.job(claimed.job_id),
                            claimed.job_id)
        if double_complete:
            job = f"{run_dir.name}-twice"
            sound.enqueue(job, "x")
            claimed = sound.claim(L, "w2")
            assert claimed is not None and claimed.job_id == job
            assert unfenced.complete(job, claimed.attempt, "w2")
            assert unfenced.complete(job, claimed.attempt, "w3")
        sound.record(**Phase("end", drained=True).fields())
        health = recorder.stop()
        assert health.undecoded_calls == 5, health
        write_json_atomic(run_dir / HEALTH_FILE, health.as_dict())
        (run_dir / "scenario.json").write_text(json.dumps({"history": {"source": "monitor"}}))
        blind = [e for e in read_history(run_dir / MONITOR_HISTORY) if e.type == "blind"]
        assert {e.job_id for e in blind} == {f"{run_dir.name}-{n}" for n in range(5)}
        evaluation = evaluate(run_dir)
        assert evaluation.verdict is not None
        assert evaluation.verdict.invariants["no_loss"].blinded == 5
        return evaluation.exit_code

    assert run(tmp_path / "undecoded", double_complete=False) == EXIT_UNKNOWN
    assert run(tmp_path / "double", double_complete=True) == EXIT_FAIL


def test_a_planned_fault_that_never_found_its_target_makes_no_pass():
    """The run did not test what its scenario says (a holding_oldest_lease kill that found no
    holder): every invariant held, yet the verdict is unknown, and it says why."""
    from chaos.history.schema import FaultSkipped
    from chaos.report.summary import build_report, summary_text

    def history(skipped: bool) -> History:
        h = History(L, R)
        h.enqueue("a", 10)
        h.claim("a", 1, "w1", 20)
        if skipped:
            h.write(FaultSkipped("kill", "holding_oldest_lease"), 25)
        h.complete("a", 1, "w1", 30)
        _finished(h, 100)
        return h

    assert check(history(False).events(), final=True).word == "pass"
    verdict = check(history(True).events(), final=True)
    assert verdict.word == "unknown" and not verdict.passed
    assert verdict.faults_skipped == [{"kind": "kill", "target": "holding_oldest_lease",
                                       "ts": 25}]
    text = summary_text(build_report("s", verdict.word, verdict))
    assert "1 planned fault(s) found no target" in text
