"""The Node.js example SUT (sut/node-echomq, docs/sut.md), judged on the MONITOR recorder's
history alone: sound under kill and pause, and its broken switch caught by the invariant it
breaks. Real node processes, really SIGKILLed and SIGSTOPped, against a real valkey-server."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from drawn import assert_draws_what_was_judged

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


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == directory:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run(name: str, tmp_path: Path, overrides: list[str] | None = None):
    scenario = load_scenario(SCENARIOS / f"{name}.toml", overrides)
    assert scenario.sut.foreign
    result = run_scenario(scenario, tmp_path / name, io.StringIO())
    assert processes_in(NODE_SUT.resolve()) == []  # nothing the run started outlives it
    return result


@pytest.mark.parametrize("name", ["kill-worker", "pause-worker"])
def test_the_node_sut_passes(name: str, tmp_path: Path):
    result = run(name, tmp_path)
    assert result.passed, result
    assert result.checked is not None
    figures = result.report["history_recorder"]
    assert figures["source"] == "monitor" and figures["problems"] == []
    assert result.report["run"]["faults"]  # the fault was applied
    # ... and the Node reaper brought its stranded leases back
    history = (result.run_dir / "history-monitor.jsonl").read_text()
    assert '"type":"reap"' in history.replace(" ", "")
    # Attributed by each process's own ACL user, not by a name it chose for itself.
    assert '"conn":"worker-1"' in history.replace(" ", "")


def test_the_report_draws_the_monitor_history_the_verdict_judged(tmp_path: Path):
    """A monitor-source run's events stream holds no claim or complete of the Node workers:
    report.html must draw history-monitor.jsonl, so its timeline adds up to the verdict's
    counts and its backlog ends empty; it names the SUT and calls no foreign queue "sound"."""
    result = run("kill-worker", tmp_path, ["phases.warmup_ms=400", "phases.chaos_ms=1000"])
    assert result.passed, result
    assert_draws_what_was_judged(result.run_dir, result.report, "history-monitor.jsonl")
    assert result.report["run"]["sut"] == {"foreign": True, "dialect": "echomq",
                                           "workers": ["node", "worker.js"],
                                           "reaper": ["node", "reaper.js"],
                                           "contract": "toolkit"}
    page = (result.run_dir / "report.html").read_text()
    assert "<th>system under test</th><td>own workers node worker.js, reaper node reaper.js" in page
    assert "<th>protocol</th>" not in page
    assert "lease_ms + reap_interval_ms = 1250 ms" in page  # the recovery chart: the reaper's bound


def test_the_broken_switch_is_caught(tmp_path: Path):
    result = run("unfenced-complete", tmp_path)
    assert result.verdict == "fail", result
    assert result.checked is not None
    assert "no_double_completion" in result.checked.failed_invariants()


def test_both_sources_judge_alike_when_the_node_worker_records(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    """With the recording flag on, the Node worker's scripts write the events stream too: the
    recorder's history and the scripts' must then agree, event by event."""
    monkeypatch.setenv("ECHOMQ_NODE_RECORD", "1")
    result = run("kill-worker", tmp_path, ["history.source=both"])
    agreement = result.report["history_recorder"]["agreement"]
    # Both sources judge every invariant alike, and sound.
    assert all(oks == [True, True] for oks in agreement["invariants"].values()), agreement
    events = agreement["events"]
    assert events["same_counts"] and events["mismatches"] == [], events
    assert events["counts"]["claim"][0] > 0  # the scripts did record
    # Timestamps: the dialect's own precision (its tests); a complete's ts is its TIME line's
    # stamp, which a stalled server can make late, so a loaded machine may show a few ms here.


def test_a_worker_that_names_another_worker_is_judged_by_its_connection(tmp_path: Path):
    """--break misnamed: every call names the worker "impostor". Trusting the argument, the
    killed worker held nothing (0 leases stranded, its jobs' reaps needless: it was PASS).
    The holder is the connection: the kill strands its leases, none is needless, and the
    disagreement keeps the run from passing."""
    result = run("kill-worker", tmp_path, ['sut.workers=["node", "worker.js", "--break", '
                                           '"misnamed"]'])
    assert result.verdict == "unknown", result
    assert result.checked is not None
    assert result.checked.stranded > 0 and result.checked.redeliveries.needless == 0
    health = result.report["history_recorder"]["health"]
    assert health["misnamed_calls"] > 0 and "impostor" in health["misnamed_examples"][0]
    assert any("named another worker" in p for p in result.report["history_recorder"]["problems"])
