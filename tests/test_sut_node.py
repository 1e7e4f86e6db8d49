"""The Node.js example SUT (sut/node-echomq, docs/sut.md), judged on the MONITOR recorder's
history alone: sound under kill and pause, and its broken switch caught by the invariant it
breaks. Real node processes, really SIGKILLed and SIGSTOPped, against a real valkey-server."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent
NODE_SUT = ROOT / "sut" / "node-echomq"
SCENARIOS = ROOT / "scenarios" / "node"


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not on PATH"
    if not (NODE_SUT / "node_modules").is_dir():
        return f"{NODE_SUT}/node_modules is absent: run `npm ci` in sut/node-echomq"
    return None


@pytest.fixture(scope="module", autouse=True)
def node_sut() -> None:
    """Skip without Node or its modules, except under CI, where that is a failure."""
    problem = _missing()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {problem}")
    pytest.skip(problem)


def run(name: str, tmp_path: Path):
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    assert scenario.sut.foreign and scenario.history.source == "monitor"
    return run_scenario(scenario, tmp_path / name, io.StringIO())


@pytest.mark.parametrize("name", ["kill-worker", "pause-worker"])
def test_the_node_sut_passes(name: str, tmp_path: Path):
    result = run(name, tmp_path)
    assert result.passed, result
    assert result.checked is not None
    figures = result.report["history_recorder"]
    assert figures["source"] == "monitor" and figures["problems"] == []
    # The faults did strand leases, and the Node reaper brought them back.
    recovered = result.checked.invariants["recovery_bound"]
    assert recovered.ok and result.report["run"]["faults"]
    history = (result.run_dir / "history-monitor.jsonl").read_text()
    assert '"type":"reap"' in history.replace(" ", "")
    # Attributed by each process's own ACL user, not by a name it chose for itself.
    assert '"conn":"worker-1"' in history.replace(" ", "")


def test_the_broken_switch_is_caught(tmp_path: Path):
    result = run("unfenced-complete", tmp_path)
    assert result.verdict == "fail", result
    assert result.checked is not None
    assert "no_double_completion" in result.checked.failed_invariants()
