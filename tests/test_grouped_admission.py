"""Built-in grouped admission (``load.groups``, docs/echomq.md): the built-in producer admits
each job into a group's lane by the groups' weights, the limited groups' limits set first,
through the echomq family's own scripts; a family without lanes, and bad group settings, are
refused at validation (exit 2) naming the file, the field and the value. On the real thing:
scenarios/echomq/groups-builtin-kill-worker.toml over the example SUT's ring-turning workers,
one SIGKILLed, passes with every call decoded, as the workers' own logs say it ran."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.errors import EXIT_USAGE
from chaos.queues.echomq.lanes import weighted_turns
from chaos.scenario.loading import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "echomq" / "groups-builtin-kill-worker.toml"


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e", "f"]),
                       st.floats(min_value=0.01, max_value=1000), min_size=1),
       st.integers(min_value=1, max_value=300))
def test_each_group_gets_close_to_its_weights_share_at_every_job(weights: dict[str, float],
                                                                 jobs: int):
    """Within one job of its share for up to four groups (below one for two: a half); with
    more, within the number of groups less one (measured: 1.04 at worst for five)."""
    counts = Counter(islice(weighted_turns(weights), jobs))
    total = sum(weights.values())
    slack = 1.0 if len(weights) <= 4 else len(weights) - 1.0
    for group, weight in weights.items():
        assert abs(counts[group] - jobs * weight / total) < slack + 1e-9, (group, counts)


@pytest.mark.parametrize(("override", "said"), [
    ("load.groups.g1.share=2", "load.groups.g1.share = 2: unknown key"),
    ("load.groups.g1.weight=0", "load.groups.g1.weight = 0: Input should be greater than 0"),
    ("load.groups.g3.weight=-1.5", "load.groups.g3.weight = -1.5: Input should be greater"),
    ("load.groups.g2.limit=0", "load.groups.g2.limit = 0: Input should be greater than or "
                               "equal to 1"),
    ('load.groups={"g 1"={weight=1}}', "groups.g 1: a group's name is 1 to 64 letters"),
    ('load.engine="locust"', "grouped admission is the built-in producer's"),
    ('sut.producer=["node", "sut.js", "producer"]', "[sut] producer enqueues every job"),
])
def test_bad_group_settings_are_refused_naming_file_field_and_value(override: str, said: str):
    with pytest.raises(ScenarioError) as refused:
        load_scenario(SCENARIO, [override])
    assert said in str(refused.value) and str(SCENARIO.name) in str(refused.value), \
        str(refused.value)


@pytest.mark.parametrize("scenario", ["pause-worker.toml", "bullmq/kill-worker.toml"])
def test_a_family_without_lanes_refuses_load_groups(scenario: str):
    with pytest.raises(ScenarioError, match=r"load.groups = \['g1'\]: the '(reference|bullmq)' "
                                            "queue family has no group lanes"):
        load_scenario(ROOT / "scenarios" / scenario, ["load.groups.g1.weight=1"])


def test_refused_group_settings_exit_2_before_anything_starts():
    for scenario, override in (("pause-worker.toml", "load.groups.g1.weight=1"),
                               ("echomq/groups-builtin-kill-worker.toml",
                                "load.groups.g2.limit=0")):
        done = subprocess.run([sys.executable, "-m", "chaos", "run",
                               str(ROOT / "scenarios" / scenario), "--set", override,
                               "--dry-run"], capture_output=True, text=True, timeout=60)
        assert done.returncode == EXIT_USAGE, done.stderr
        assert "load.groups" in done.stderr and scenario in done.stderr, done.stderr


def test_the_built_in_producer_loads_group_lanes_as_the_workers_logged(tmp_path: Path):
    """Every job the producer acknowledged goes into its lane by weight (g1 half, g2 and g3 a
    quarter each, within one job), the limits are set and judged (g1 and g2 never past 3 live),
    every claim a worker logged is in the history in the group its job was admitted into, each
    job completes once, nothing is undecoded, and a worker was really killed."""
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    from chaos.run.runner import run_scenario

    scenario = load_scenario(SCENARIO)
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.verdict == "pass", result.report["verdict"]
    health = result.report["history_recorder"]["health"]
    assert health["undecoded_calls"] == 0 and health["unattributed_calls"] == 0, health
    assert [fault["kind"] for fault in result.report["run"]["faults"]] == ["kill"]
    group_limit = result.report["invariants"]["group_limit"]
    assert group_limit["status"] == "ok" and group_limit["limits"] == {"g1": 3, "g2": 3}
    assert group_limit["most_live"]["g1"] <= 3 and group_limit["most_live"]["g2"] <= 3
    events = [json.loads(line) for line in
              (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]
    enqueued = {event["id"]: event["group"] for event in events if event["type"] == "enqueue"}
    ledger = [json.loads(line) for line in
              (result.run_dir / "acks" / "producer.jsonl").read_text().splitlines()]
    assert sorted(enqueued) == sorted(entry["id"] for entry in ledger)
    shares = Counter(enqueued.values())
    weights = {name: group.weight for name, group in scenario.load.groups.items()}
    for group, weight in weights.items():
        assert abs(shares[group] - len(enqueued) * weight / sum(weights.values())) < 1, shares
    logs = result.run_dir / "logs"
    claimed_logged = {found for name in scenario.worker_names
                      for found in re.findall(r" claim id=(\S+) token=\d+ .*group=(\S+)",
                                              (logs / f"{name}.log").read_text())}
    assert claimed_logged and all(enqueued[job_id] == group for job_id, group in claimed_logged)
    assert all(event.get("group") == enqueued[event["id"]] for event in events
               if event["type"] in ("claim", "reap"))
    completes = [event["id"] for event in events if event["type"] == "complete"]
    assert sorted(completes) == sorted(enqueued)  # each once
