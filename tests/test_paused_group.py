"""paused_group (docs/design.md §4): a paused group's jobs wait. No claim serves a paused lane,
and a job still in a paused lane when the drain ends is held (neither lost nor undrained) only
where the store listed it there (the end event's ``held``). On hand-written histories (the
checker is pure), and on the real thing: the example SUT's lanes with one group paused by its
producer (scenarios/echomq/groups-pause-group.toml), and two consumers broken on purpose, one
serving the paused lane (``worker --break paused-claims``: only paused_group catches it) and
one dropping its jobs (``worker --break drop-paused``: lost, which only the store's list
shows; the history alone says they still wait)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from histories import History

from chaos.check.checker import check
from chaos.history.schema import Claim, Enqueue, GroupPause, GroupResume, Run

L, R = 1000, 250
ROOT = Path(__file__).resolve().parent.parent


def paused_run(claims: list[tuple[str, int]], pause_at: int, resume_at: int | None = None,
               waiting: tuple[str, ...] = (), held: tuple[str, ...] = ()) -> History:
    """Group g's jobs, each enqueued at 0: ``claims`` (job, at) claimed by w1 and completed
    50 ms later; ``waiting`` never claimed; g paused at ``pause_at`` (resumed at ``resume_at``);
    the store's list of the paused lanes at the end is ``held``."""
    h = History(L, R, 100, run=False)
    h.write(Run(scenario="paused", lease_ms=L, reap_interval_ms=R, tolerance_ms=100), 0)
    h.phase("warmup", ts=0)
    for job in [job for job, _ in claims] + list(waiting):
        h.write(Enqueue(job), 0, group="g")
    timeline: list[tuple[int, object]] = [
        (pause_at, lambda ts: h.write(GroupPause("g", "admin"), ts))]
    if resume_at is not None:
        timeline.append((resume_at, lambda ts: h.write(GroupResume("g", "admin"), ts)))
    for job, at in claims:
        timeline.append((at, lambda ts, job=job: h.write(Claim(job, 1, "w1", L, ts + L), ts,
                                                          group="g")))
        timeline.append((at + 50, lambda ts, job=job: h.complete(job, 1, "w1", ts=ts)))
    for ts, write in sorted(timeline, key=lambda entry: entry[0]):
        write(ts)  # type: ignore[operator]
    h.phase("drain", ts=4600)
    h.phase("end", ts=5000, drained=1, aborted=0, **({"held": ",".join(held)} if held else {}))
    return h


def test_claims_before_the_pause_and_after_the_resume_pass():
    verdict = check(paused_run([("a", 10), ("b", 2000)], pause_at=100, resume_at=1500).events())
    result = verdict.invariants["paused_group"]
    assert verdict.passed and result.ok, verdict.failed_invariants()
    assert result.figures["pauses"] == 1 and result.figures["paused_at_end"] == []


def test_a_claim_while_the_group_is_paused_fails_paused_group_only():
    verdict = check(paused_run([("a", 10), ("b", 1000)], pause_at=100, resume_at=1500).events())
    assert verdict.failed_invariants() == ["paused_group"]
    (example,) = verdict.invariants["paused_group"].examples
    assert (example["job"], example["group"]) == ("b", "g")


def test_jobs_waiting_in_a_paused_lane_are_held_where_the_store_lists_them():
    h = paused_run([("a", 10)], pause_at=100, waiting=("b", "c"), held=("b", "c"))
    verdict = check(h.events())
    assert verdict.passed, verdict.failed_invariants()
    assert verdict.invariants["no_loss"].figures["held"] == 2
    assert verdict.outcomes.held == 2 and verdict.outcomes.lost == 0


def test_a_paused_lanes_job_the_store_does_not_list_is_lost():
    """The history alone says c still waits: the store's own list says it is gone."""
    verdict = check(paused_run([("a", 10)], pause_at=100, waiting=("b", "c"),
                               held=("b",)).events())
    assert verdict.failed_invariants() == ["no_loss"]
    assert [example["job"] for example in verdict.invariants["no_loss"].examples] == ["c"]


def test_a_listed_job_of_a_group_resumed_before_the_end_is_not_held():
    """Resumed: the drain waits for its lane as for any other, so a job left in it is lost."""
    verdict = check(paused_run([("a", 10)], pause_at=100, resume_at=200, waiting=("b",),
                               held=("b",)).events())
    assert verdict.failed_invariants() == ["no_loss"]


def test_without_a_pause_it_is_not_judged():
    h = paused_run([("a", 10)], pause_at=100)
    events = [event for event in h.events() if event.type != "group_pause"]
    result = check(events).invariants["paused_group"]
    assert result.ok and result.figures["judged"] is False


# --- the real thing: the example SUT's lanes, one group paused ------------------------------------


def run(name: str, tmp_path: Path, overrides: list[str] | None = None):  # type: ignore[no-untyped-def]
    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(ROOT / "scenarios" / "echomq" / f"{name}.toml", overrides)
    return run_scenario(scenario, tmp_path / "run", io.StringIO())


def history_of(result) -> list[dict]:  # type: ignore[no-untyped-def]
    return [json.loads(line) for line in
            (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]


@pytest.mark.integration
def test_a_paused_group_waits_and_its_jobs_are_held_as_the_store_has_them(tmp_path: Path):
    """groups-pause-group: the producer pauses g2 and never resumes it. The run passes with
    every call decoded; no claim of g2 after its pause (by the workers' own logs too); the
    jobs held are the g2 jobs the producer printed and no worker claimed, and everything else
    completed once."""
    result = run("groups-pause-group", tmp_path)
    assert result.verdict == "pass", result.report["verdict"]
    health = result.report["history_recorder"]["health"]
    assert health["undecoded_calls"] == 0, health
    logs = result.run_dir / "logs"
    producer_log = (logs / "producer.log").read_text()
    (paused_ms,) = [int(ms) for ms in re.findall(r"^(\d+) paused group=g2$", producer_log, re.M)]
    printed = dict(re.findall(r" enqueue id=(\S+) group=(\S+)", producer_log))
    claimed: dict[str, int] = {}
    for name in ("worker-1", "worker-2", "worker-3"):
        for ms, job in re.findall(r"^(\d+) claim id=(\S+) ", (logs / f"{name}.log").read_text(),
                                  re.M):
            claimed.setdefault(job, int(ms))
    # a claim the worker logged after the pause's own line (the pause's script ran before it
    # printed): never a g2 job
    assert not [job for job, ms in claimed.items() if printed[job] == "g2" and ms > paused_ms]
    events = history_of(result)
    (held_end,) = [event for event in events if event.get("phase") == "end"]
    held = set(held_end["held"].split(","))
    completes = sorted(event["id"] for event in events if event["type"] == "complete")
    # held: the g2 jobs not done (never claimed, or claimed by the killed worker and reaped back
    # into the paused lane); every other job completed once
    assert held == {job for job, group in printed.items() if group == "g2"} - set(completes)
    assert held and completes == sorted(set(printed) - held)
    found = result.report["invariants"]["paused_group"]
    assert found["held"] == len(held) and found["paused_at_end"] == ["g2"]


@pytest.mark.integration
@pytest.mark.parametrize(("name", "caught_by"), [("broken/paused-claims", ["paused_group"]),
                                                ("broken/drop-paused", ["no_loss"])])
def test_a_consumer_that_breaks_the_pause_is_caught_by_its_rule_only(tmp_path: Path, name: str,
                                                                     caught_by: list[str]):
    result = run(name, tmp_path)
    assert result.checked is not None
    assert result.checked.failed_invariants() == caught_by, result.report["verdict"]
    assert result.report["history_recorder"]["health"]["undecoded_calls"] == 0
    if name == "broken/drop-paused":  # the jobs lost are the ones the worker logged it shed
        shed = set(re.findall(r" shed id=(\S+)", "".join(
            (result.run_dir / "logs" / f"worker-{n}.log").read_text() for n in (1, 2, 3))))
        lost = {example["job"] for example in result.report["invariants"]["no_loss"]["examples"]}
        assert shed and lost <= shed
        assert result.report["outcomes"]["lost"] == len(shed)
