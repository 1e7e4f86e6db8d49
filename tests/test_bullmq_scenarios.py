"""The BullMQ scenarios (scenarios/bullmq, docs/bullmq.md) through the runner: real BullMQ worker
processes started from the `[sut]` section, jobs added by BullMQ's own Queue.add (the scenario's
`[sut] cwd` holds the producer too), the history decoded from MONITOR by the bullmq dialect. A
sound BullMQ passes under kill and pause; the patched one (scenarios/bullmq/broken: no lock
check on finish) is caught by exclusive_lease alone."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario
from tests.test_bullmq import MISSING

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios" / "bullmq"
BROKEN = SCENARIOS / "broken"
needs_bullmq = pytest.mark.skipif(bool(MISSING), reason=MISSING)


def run(name: str, tmp_path: Path):
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    assert scenario.sut.dialect == "bullmq"
    return run_scenario(scenario, tmp_path / name, io.StringIO())


def test_the_stock_scenarios_expect_to_pass_and_the_broken_ones_live_apart():
    """`echomq-chaos run scenarios/bullmq/*.toml` is a suite of sound runs (exit 0 when BullMQ
    holds); every broken-on-purpose one sits in broken/, names its break and what it breaks."""
    stock, broken = sorted(SCENARIOS.glob("*.toml")), sorted(BROKEN.glob("*.toml"))
    assert stock and broken
    for path in stock:
        scenario = load_scenario(path)
        assert scenario.sut.workers is not None and "--break" not in scenario.sut.workers, path
        assert not scenario.expect_fail, path
    for path in broken:
        scenario = load_scenario(path)
        assert scenario.sut.workers is not None and "--break" in scenario.sut.workers, path
        assert scenario.expect_fail, path
        assert Path(scenario.sut.cwd) == ROOT / "sut" / "bullmq", path


@needs_bullmq
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


@needs_bullmq
def test_bullmq_without_the_lock_check_on_finish_is_caught_by_exclusive_lease_only(
        tmp_path: Path):
    """The woken holder's stale finish is accepted while the re-run holds the job: only
    exclusive_lease fails (the finish closes the re-run's lease too, so nothing is left open
    for reap_prompt to find unreaped)."""
    result = run("broken/unfenced-finish", tmp_path)
    assert result.verdict == "fail", result.report["verdict"]
    assert result.checked is not None
    assert result.checked.failed_invariants() == ["exclusive_lease"]
    assert os.path.exists(result.run_dir / "report.json")
