"""A deployment with no reaper (issue 36, point 4): EchoMQ.BatchConsumer alone claims a lane's
heads in batches and never reaps, so a killed consumer's leases never come back. Such a queue is
never passed: scenarios/echomq/groups-batch-no-reaper.toml (the example SUT's grouped batch
claim, `reaper = "none"`) fails the recovery and cadence rules, and the summary says "no
reaper", held to the workers' own logs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from chaos.report.summary import summary_text

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.integration
def test_consumers_that_never_reap_are_reported_as_no_reaper_not_passed(tmp_path: Path):
    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(ROOT / "scenarios" / "echomq" / "groups-batch-no-reaper.toml")
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    assert result.verdict == "fail", result.report["verdict"]
    assert result.checked is not None
    assert set(result.checked.failed_invariants()) == set(scenario.expect_fail)
    cadence = result.report["invariants"]["reap_cadence"]
    assert cadence["no_reaper"] is True and cadence["sweeps"] == 0
    assert "no reaper none of the 3 processes meant to reap" in summary_text(result.report)
    assert result.report["history_recorder"]["health"]["undecoded_calls"] == 0
    # The jobs never recovered are the killed worker's: claimed in its log, completed in none.
    logs = tmp_path / "run" / "logs"
    completed = set(re.findall(r" complete id=(\S+)", "".join(
        (logs / f"worker-{n}.log").read_text() for n in (1, 2, 3))))
    claimed_by: dict[str, set[str]] = {
        f"worker-{n}": set(re.findall(r" claim id=(\S+)", (logs / f"worker-{n}.log").read_text()))
        for n in (1, 2, 3)}
    never_recovered = {example["job"] for example in
                       result.report["invariants"]["recovery_bound"]["examples"]}
    stranded = {job for worker, jobs in claimed_by.items() for job in jobs - completed}
    assert never_recovered and never_recovered <= stranded
    assert len({worker for worker, jobs in claimed_by.items() if jobs - completed}) == 1
    assert result.report["jobs"]["lost"] == 0  # still in active: undrained, never called lost
