"""The BullMQ scenarios (scenarios/bullmq, docs/bullmq.md) through the runner: real BullMQ worker
processes started from the `[sut]` section, jobs added by BullMQ's own Queue.add, the history
decoded from MONITOR by the bullmq dialect. A sound BullMQ passes under kill and pause; the
patched one (no lock check on finish) is caught by exclusive_lease."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from drawn import assert_draws_what_was_judged

from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario
from tests.test_bullmq import MISSING

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios" / "bullmq"

pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)


def run(name: str, tmp_path: Path):
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    assert scenario.sut.dialect == "bullmq"
    return run_scenario(scenario, tmp_path / name, io.StringIO())


@pytest.mark.parametrize("name", ["kill-worker", "pause-worker"])
def test_real_bullmq_passes_under_worker_faults(name: str, tmp_path: Path):
    result = run(name, tmp_path)
    assert result.passed, result.report["verdict"]
    assert result.report["run"]["faults"]  # the fault was applied
    history = (result.run_dir / "history-monitor.jsonl").read_text().replace(" ", "")
    assert '"type":"reap"' in history  # BullMQ's stalled check brought the stranded jobs back
    if name == "pause-worker":
        # the woken holder's finish was refused by BullMQ and recorded as such
        assert '"type":"complete_rejected"' in history
    # report.html draws the history judged, with BullMQ's bound, and names whose queue it was
    assert_draws_what_was_judged(result.run_dir, result.report, "history-monitor.jsonl")
    page = (result.run_dir / "report.html").read_text()
    assert "2 x stalledInterval + max(lockDuration, stalledInterval) = " in page
    assert "lease_ms + reap_interval_ms" not in page and "<th>protocol</th>" not in page
    assert "<th>dialect</th><td>bullmq" in page


def test_bullmq_without_the_lock_check_on_finish_is_caught(tmp_path: Path):
    result = run("unfenced-finish", tmp_path)
    assert result.verdict == "fail", result.report["verdict"]
    assert result.checked is not None
    assert not result.checked.invariants["exclusive_lease"].ok
    assert os.path.exists(result.run_dir / "report.json")
