"""One evaluation path: the four ways a run directory becomes a verdict agree on real runs.

Each run is a real `echomq-chaos run` (valkey-server, worker processes, SIGKILLed workers or a
SIGKILLed store), shortened to a few seconds of phases. Its directory is then judged by the
runner (its report.json), by `echomq-chaos check --json`, by `echomq-chaos clean` (report.json
deleted, a dead runner's pid record left, as after a SIGKILLed runner) and by the pytest plugin's
``chaos_cluster.check()``; every key the checker decides must be identical.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.errors import exit_code_for
from chaos.pytest_plugin import ChaosCluster
from chaos.run.offline import VERDICT_KEYS
from chaos.run.progress import Progress
from chaos.run.runner import Run
from chaos.runtime.pids import PID_DIR, RUNNER, record_process
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration
SHORT = ["phases.warmup_ms=500", "phases.heal_ms=300", "phases.drain_margin_ms=3000"]
RUNS = {
    # Two workers SIGKILLed (at 500 and 2000 ms); the built-in producer spares Locust's start-up.
    "kill": ("kill-worker", [*SHORT, "phases.chaos_ms=2500", 'load.engine="builtin"']),
    # valkey-server SIGKILLed twice with nothing on disk: the store comes back empty, so the
    # verdict rests on the surviving history and the ack ledger (what `clean` used to skip).
    "store": ("valkey-restart", [*SHORT, "phases.chaos_ms=2500", "valkey.appendonly=false"]),
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def judged(report: dict) -> dict:
    return {key: report.get(key) for key in VERDICT_KEYS}


def as_dead_runner_left_it(run_dir: Path, copy: Path) -> Path:
    """A copy of ``run_dir`` as a SIGKILLed runner leaves it: no report, its pid record."""
    shutil.copytree(run_dir, copy)
    for name in ("report.json", "report.html", "junit.xml"):
        (copy / name).unlink(missing_ok=True)
    stand_in = subprocess.Popen(["sleep", "60"])  # a pid record needs a live process once
    record_process(copy, RUNNER, stand_in.pid)
    stand_in.kill()
    stand_in.wait()
    assert (copy / PID_DIR / f"{RUNNER}.json").exists()
    return copy


def plugin_evaluation(scenario_path: Path, overrides: list[str], run_dir: Path) -> dict:
    """What ``chaos_cluster.check()`` computes for ``run_dir`` (its workers already gone)."""
    scenario = load_scenario(scenario_path, overrides)
    with open(run_dir / "plugin-console.log", "w", encoding="utf-8") as console:
        run = Run(scenario, run_dir, Progress(console, scenario))
        try:
            cluster = ChaosCluster(run)
            verdict = cluster.check()
        finally:
            run.close()
    assert cluster.evaluation is not None and cluster.evaluation.verdict is verdict
    return {"exit_code": cluster.evaluation.exit_code, **cluster.evaluation.report()}


@pytest.mark.parametrize("kind", list(RUNS))
def test_run_check_clean_and_the_plugin_judge_a_run_directory_alike(tmp_path: Path, kind: str):
    name, overrides = RUNS[kind]
    scenario_path = ROOT / "scenarios" / f"{name}.toml"
    run_dir = tmp_path / "run"
    sets = [arg for override in overrides for arg in ("--set", override)]
    ran = cli("run", str(scenario_path), "--out", str(run_dir), *sets)
    assert (run_dir / "report.json").exists(), ran.stderr[-3000:]
    saved = json.loads((run_dir / "report.json").read_text())
    assert ran.returncode == exit_code_for(saved["verdict"])

    checked = cli("check", str(run_dir), "--json")
    assert checked.returncode == ran.returncode, checked.stderr
    assert "same verdict as the saved report.json" in checked.stderr

    left = as_dead_runner_left_it(run_dir, tmp_path / "killed-runner")
    cleaned = cli("clean", "--runs", str(left), "--no-containers")
    assert cleaned.returncode == 0 and "wrote report.json" in cleaned.stdout, cleaned.stdout
    by_clean = json.loads((left / "report.json").read_text())
    assert "written by `echomq-chaos clean`" in by_clean["error"]

    by_plugin = plugin_evaluation(scenario_path, overrides, run_dir)
    assert by_plugin["exit_code"] == ran.returncode

    expected = judged(saved)
    assert judged(json.loads(checked.stdout)) == expected
    assert judged(by_clean) == expected
    assert judged(by_plugin) == expected

    # The runs did what they are here for.
    if kind == "kill":
        assert saved["verdict"] == "pass" and saved["faults"] == 2, saved.get("invariants")
        assert saved["ack_ledger"]["lost"] == 0
    else:
        assert [fault["kind"] for fault in saved["store_faults"]] == ["valkey_restart"] * 2
        assert saved["verdict"] == "fail"  # the store forgot acknowledged jobs
        assert saved["ack_ledger"]["compared_with"] == "history-surviving.jsonl"
        assert saved["ack_ledger"]["lost"] > 0
