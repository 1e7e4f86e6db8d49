"""group_limit (docs/design.md §4): a group's lane never has more leases live at once than the
group's limit, on hand-written histories (the checker is pure), and on the real thing: the
example SUT's group lanes, sound (many seeds) and with its grouped claim ignoring the limit
(``worker --break unlimited-lanes``, scenarios/echomq/broken/unlimited-lanes.toml), which only
this rule catches."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from histories import History
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.check.checker import check
from chaos.history.schema import Claim, GroupLimit, Run

L, R = 1000, 250
ROOT = Path(__file__).resolve().parent.parent


def lanes_run(limit: int | None, claims: list[tuple[str, str, int]],
              settles: list[tuple[str, str, int]], end: int = 5000) -> History:
    """One run: each job enqueued at 0, claimed (job, group, at) by w1, settled (job, how, at:
    ``complete`` or ``reap`` then re-claimed and completed later) as given; the groups' limit
    set at 1 when ``limit`` is given."""
    h = History(L, R, 100, run=False)
    h.write(Run(scenario="lanes", lease_ms=L, reap_interval_ms=R, tolerance_ms=100), 0)
    h.phase("warmup", ts=0)
    groups = sorted({group for _, group, _ in claims})
    if limit is not None:
        for group in groups:
            h.write(GroupLimit(group, limit), 1)
    timeline: list[tuple[int, int, object]] = []
    for job, group, at in claims:
        h.enqueue(job, ts=0)
        timeline.append((at, 1, lambda ts, job=job, group=group: h.write(
            Claim(job, 1, "w1", L, ts + L), ts, group=group)))
    for job, how, at in settles:
        if how == "complete":
            timeline.append((at, 0, lambda ts, job=job: h.complete(job, 1, "w1", ts=ts)))
    for ts, _, write in sorted(timeline, key=lambda entry: entry[:2]):
        write(ts)  # type: ignore[operator]
    h.phase("drain", ts=end - 400)
    h.phase("end", ts=end, drained=1, aborted=0)
    return h


def test_a_group_at_its_limit_passes_and_one_lease_more_fails():
    at_limit = lanes_run(2, [("a", "g1", 10), ("b", "g1", 20), ("c", "g2", 30)],
                         [("a", "complete", 100), ("b", "complete", 110), ("c", "complete", 120)])
    verdict = check(at_limit.events())
    result = verdict.invariants["group_limit"]
    assert result.ok and verdict.passed, verdict.failed_invariants()
    assert result.figures["most_live"] == {"g1": 2, "g2": 1}
    over = lanes_run(2, [("a", "g1", 10), ("b", "g1", 20), ("c", "g1", 30)],
                     [("a", "complete", 100), ("b", "complete", 110), ("c", "complete", 120)])
    verdict = check(over.events())
    assert verdict.failed_invariants() == ["group_limit"]
    (example,) = verdict.invariants["group_limit"].examples
    assert (example["job"], example["live"], example["limit"]) == ("c", 3, 2)


def test_a_lease_that_ended_frees_its_place_in_the_group():
    """Completed before the third claim: two live at most, never three."""
    h = lanes_run(2, [("a", "g1", 10), ("b", "g1", 20), ("c", "g1", 40)],
                  [("a", "complete", 30), ("b", "complete", 110), ("c", "complete", 120)])
    verdict = check(h.events())
    assert verdict.invariants["group_limit"].ok, verdict.invariants["group_limit"].examples
    assert verdict.invariants["group_limit"].figures["most_live"] == {"g1": 2}


def test_without_a_limit_or_without_groups_it_is_not_judged():
    unlimited = check(lanes_run(None, [("a", "g1", 10), ("b", "g1", 20)],
                                [("a", "complete", 100), ("b", "complete", 110)]).events())
    result = unlimited.invariants["group_limit"]
    assert result.ok and result.figures["judged"] is False
    assert "not judged" in result.figures["not_judged"]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_a_queue_that_keeps_every_group_at_its_limit_always_passes(limit: int,
                                                                   holds: list[int]):
    """A sound lanes queue, simulated: one group, each claim waits until fewer than ``limit``
    leases are live (the earliest settles first), held ``holds[i]`` ms. Never an offence."""
    live: list[int] = []  # settle times of the live leases
    claims, settles, now = [], [], 10
    for index, hold in enumerate(holds):
        live.sort()
        if len(live) >= limit:
            now = max(now, live.pop(0) + 1)  # a place frees: the earliest lease settles
        job = f"j{index}"
        claims.append((job, "g", now))
        settles.append((job, "complete", now + hold))
        live = [t for t in live if t > now] + [now + hold]
        now += 1
    verdict = check(lanes_run(limit, claims, settles, end=now + 1000).events())
    assert verdict.invariants["group_limit"].ok, verdict.invariants["group_limit"].examples


# --- the real thing: the example SUT's group lanes ------------------------------------------------


def run(name: str, tmp_path: Path, overrides: list[str] | None = None):  # type: ignore[no-untyped-def]
    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(ROOT / "scenarios" / "echomq" / f"{name}.toml", overrides)
    return run_scenario(scenario, tmp_path / "run", io.StringIO())


@pytest.mark.integration
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sound_group_lanes_never_pass_their_limit(tmp_path: Path, seed: int):
    result = run("groups-kill-worker", tmp_path, [f"seed={seed}"])
    assert result.verdict == "pass", result.report["verdict"]
    found = result.report["invariants"]["group_limit"]
    assert found["limits"] == {"g1": 3, "g2": 3, "g3": 3} and found["grouped_claims"] > 0
    assert max(found["most_live"].values()) <= 3


@pytest.mark.integration
def test_a_grouped_claim_that_ignores_the_limit_is_caught_by_group_limit_only(tmp_path: Path):
    result = run("broken/unlimited-lanes", tmp_path)
    assert result.checked is not None
    assert result.checked.failed_invariants() == ["group_limit"], result.report["verdict"]
    found = result.report["invariants"]["group_limit"]
    assert max(found["most_live"].values()) > 2 == max(found["limits"].values())
    assert result.report["history_recorder"]["health"]["undecoded_calls"] == 0


@pytest.mark.integration
@pytest.mark.parametrize("name", ["groups-weighted-kill-worker", "groups-batch-kill-worker"])
def test_claims_of_several_jobs_of_a_lane_at_once_are_decoded_and_judged(tmp_path: Path,
                                                                         name: str):
    """EchoMQ's weighted turn (gwclaim) and grouped batch claim (gbclaim): one call leases
    several heads of one lane on one deadline. Each is a claim of its own in the history (with
    its group), the run passes with every call decoded, no group past its limit, and each job
    completes once, as the workers' own logs say."""
    import json
    import re
    from collections import Counter

    result = run(name, tmp_path)
    assert result.verdict == "pass", result.report["verdict"]
    assert result.report["history_recorder"]["health"]["undecoded_calls"] == 0
    found = result.report["invariants"]["group_limit"]
    assert max(found["most_live"].values()) <= 3 == max(found["limits"].values())
    events = [json.loads(line) for line in
              (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]
    claims = [event for event in events if event["type"] == "claim"]
    assert all(event.get("group") for event in claims)
    one_call = Counter((event["worker"], event["deadline"]) for event in claims)
    assert max(one_call.values()) > 1, "no claim leased more than one job"
    logs = result.run_dir / "logs"
    completed_logged = set(re.findall(r" complete id=(\S+) token=\d+ result=ok", "".join(
        (logs / f"worker-{n}.log").read_text() for n in (1, 2, 3))))
    completes = [event["id"] for event in events if event["type"] == "complete"]
    # each once; every complete a worker logged is there (the killed worker's last may be cut)
    assert sorted(completes) == sorted(set(completes)) and completed_logged <= set(completes)
    assert len(completes) == result.report["jobs"]["enqueued"]
