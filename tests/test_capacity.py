"""`echomq-chaos capacity`: the step logic on hand-made data, and one real small search."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.tools.capacity import CapacitySearch, Step, backlog_slope, claim_waits, judge

ROOT = Path(__file__).resolve().parent.parent
KILL_WORKER = str(ROOT / "scenarios" / "kill-worker.toml")


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_backlog_slope_reads_the_second_half():
    flat_then_rising = [(t / 4, 0) for t in range(8)] + [(2 + t / 4, 5 * t) for t in range(8)]
    assert backlog_slope(flat_then_rising) == pytest.approx(20.0)  # 5 jobs per 0.25 s
    assert backlog_slope([(t / 4, 7) for t in range(10)]) == 0.0
    assert backlog_slope([(0.0, 3)]) == 0.0


def test_claim_waits_count_unclaimed_jobs_with_the_wait_so_far():
    entries = [
        ("1-0", {"type": "enqueue", "id": "a", "ts": "1000"}),
        ("2-0", {"type": "enqueue", "id": "b", "ts": "1100"}),
        ("3-0", {"type": "claim", "id": "a", "ts": "1030"}),
        ("4-0", {"type": "claim", "id": "a", "ts": "1900"}),  # a re-claim: the first one counts
        ("5-0", {"type": "claim", "id": "old", "ts": "1200"}),  # enqueued before the step
        ("6-0", {"type": "phase", "phase": "x", "ts": "1300"}),
    ]
    waits, unclaimed = claim_waits(entries, end_ts=1600)
    assert sorted(waits) == [30.0, 500.0] and unclaimed == 1


@pytest.mark.parametrize(("delivered", "growth", "p99", "within", "why"), [
    (40.0, 0.5, 100.0, True, ""),
    (30.0, 0.0, 100.0, False, "generator delivered 30.0 < 90% of target"),
    (40.0, 5.0, 100.0, False, "backlog grows 5.0/s"),
    (40.0, 0.0, 900.0, False, "claim wait p99 900.0 ms > 500"),
])
def test_a_step_is_judged_on_delivery_backlog_and_claim_wait(delivered: float, growth: float,
                                                             p99: float, within: bool, why: str):
    search = CapacitySearch(start_rate=40, step_rate=20, max_steps=3, step_ms=2000, p99_ms=500)
    step = Step(1, 40.0, delivered_rate=delivered, backlog_growth_per_s=growth,
                claim_wait_p99_ms=p99)
    judge(step, search)
    assert step.within is within and step.reason == why


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "0"], "--steps 0: must be 1..100"),
    (["--start-rate", "-5"], "--start-rate -5.0: must be > 0"),
    (["--p99-ms", "nan"], "--p99-ms nan: must be > 0"),
    (["--fault", "--step-ms", "1500"], "faults.1.at_ms = 2000 would never fire inside a step"),
    (["--step-rate", "abc"], "invalid float value: 'abc'"),
])
def test_bad_arguments_exit_2_naming_the_option(tmp_path: Path, args: list[str], message: str):
    result = run_cli("capacity", KILL_WORKER, "--out", str(tmp_path / "cap"), *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "cap").exists()  # nothing started, nothing written


def test_fault_needs_a_scenario_with_faults(tmp_path: Path):
    result = run_cli("capacity", str(ROOT / "scenarios" / "steady-state.toml"), "--fault")
    assert result.returncode == 2
    assert "scenario 'steady-state' has no [[faults]]" in result.stderr


@pytest.mark.integration
def test_capacity_finds_the_knee_of_a_small_pool(tmp_path: Path):
    """One worker with two slots of 100-400 ms work takes about 8 jobs/s: 4 jobs/s fits,
    12 jobs/s does not (the backlog grows and jobs wait)."""
    out = tmp_path / "cap"
    result = run_cli("capacity", KILL_WORKER, "--set", "topology.workers=1",
                     "--set", "topology.concurrency=2", "--set", "faults=[]",
                     "--start-rate", "4", "--step-rate", "8", "--steps", "3",
                     "--step-ms", "2500", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "knee: 4 jobs/s (over capacity)" in result.stdout
    report = json.loads((out / "capacity.json").read_text())
    assert report["knee_rate"] == 4 and report["stopped_by"] == "over capacity"
    first, second = report["steps"]
    assert first["within"] and first["enqueued"] > 0 and first["enqueue_failures"] == 0
    assert first["claim_wait_p99_ms"] <= 500
    assert not second["within"] and "backlog grows" in second["reason"]
    assert second["delivered_rate"] >= 0.9 * 12  # the pool, not the generator, was the limit
    assert (out / "step01_stats.csv").exists() and (out / "history.jsonl").stat().st_size
