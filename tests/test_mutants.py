"""The mutant zoo, end to end: every broken protocol variant is caught by the invariant its
scenario names, and the sound protocol passes the very same scenario (one seed here; many
under `selftest --repeat`).

A sound run that fails here is a false positive of the checker (or a bug in the toolkit), never
something to retry: the verdict is only worth having if both directions hold.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.history.events import read_history
from chaos.names import PROTOCOLS
from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario
from chaos.scenario.model import Scenario

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = sorted((ROOT / "scenarios" / "mutants").glob("*.toml"))
# Seeds of the sound protocol per mutant scenario in every suite run; the many-seed proof is
# `echomq-chaos selftest --repeat N` (and the tables in docs/protocol-and-mutants.md).
SOUND_SEEDS = 1
pytestmark = pytest.mark.integration


def run(scenario: Scenario, run_dir: Path) -> dict:
    console = io.StringIO()
    result = run_scenario(scenario, run_dir, stream=console)
    assert result.verdict in ("pass", "fail"), console.getvalue()[-3000:]
    return result.report


def failed(report: dict) -> set[str]:
    return {name for name, result in report["invariants"].items() if not result["ok"]}


def test_the_zoo_has_every_broken_variant_once():
    variants = [load_scenario(path).protocol for path in MUTANTS]
    assert sorted(variants) == sorted(p for p in PROTOCOLS if p != "sound")


@pytest.mark.parametrize("path", MUTANTS, ids=lambda p: p.stem)
def test_each_mutant_is_caught_by_its_expected_invariant(path: Path, tmp_path: Path):
    scenario = load_scenario(path)
    report = run(scenario, tmp_path / "run")
    assert report["verdict"] == "fail"
    assert set(scenario.expect_fail) <= failed(report), report["invariants"]
    for name in scenario.expect_fail:
        assert report["invariants"][name]["violations"] >= 1
        assert report["invariants"][name]["first_violation_ts"] is not None
    provoked = PROVOCATIONS.get(scenario.protocol)
    if provoked is not None:
        provoked(scenario, tmp_path / "run", report)


# How each variant whose window is narrow is provoked by construction (selftest is a gate: it
# must catch every time, on a busy machine too): the run shows the provocation happened.

def claim_gap_kill_lost_the_held_job(scenario: Scenario, run_dir: Path, report: dict) -> None:
    """The worker killed in its claim gap had said which job it held there; that job is lost."""
    held = [match for log in sorted((run_dir / "logs").glob("worker-*.log"))
            for match in re.findall(r"in the claim gap of (\S+) .*\(fault (f\d+)\)",
                                    log.read_text())]
    (job, fault_id), = held
    (fault,) = [e for e in read_history(run_dir / "history.jsonl") if e.type == "fault"]
    assert (fault.extra["kind"], fault.extra["fault_id"]) == ("kill_in_claim_gap", fault_id)
    lost = {example["job"] for example in report["invariants"]["no_loss"]["examples"]}
    assert job in lost, (job, lost)


def lagged_heartbeat_renewed_after_complete(scenario: Scenario, run_dir: Path,
                                            report: dict) -> None:
    """The lagged worker's heartbeat renewed at least one job after that worker completed it."""
    history = list(read_history(run_dir / "history.jsonl"))
    (fault,) = [e for e in history if e.type == "fault"]
    completed: set[tuple[str, str]] = set()
    renewed_after = 0
    for event in history:
        if event.worker != fault.worker:
            continue
        if event.type == "complete":
            completed.add((event.job_id, str(event.attempt)))
        elif event.type == "extend" and (event.job_id, str(event.attempt)) in completed:
            renewed_after += 1
    assert renewed_after >= 1


def both_reapers_moved(scenario: Scenario, run_dir: Path, report: dict) -> None:
    """The forced race: every reaper moved leases (some id twice: the violation)."""
    for name in scenario.topology.reaper_names:
        assert "reaped" in (run_dir / "logs" / f"{name}.log").read_text(), name


def enough_leases_stranded(scenario: Scenario, run_dir: Path, report: dict) -> None:
    """Saturated workers: the kill strands far more leases than one per tick recovers in time
    (four suffice: the fourth comes back 3 ticks after the first, past L + R + tolerance)."""
    assert report["invariants"]["recovery_bound"]["stranded"] >= 4


def caught_only_by_the_deadline_written(scenario: Scenario, run_dir: Path,
                                        report: dict) -> None:
    """Every grant recorded the configured lease_ms and wrote a deadline 1.5 leases ahead: a
    judge of the recorded field alone would pass the run, and nothing else breaks (no lease
    lapses), so lease_length, reading the deadline, is what catches it, on every grant."""
    assert failed(report) == {"lease_length"}, report["invariants"]
    result = report["invariants"]["lease_length"]
    lease_ms = scenario.topology.lease_ms
    assert result["violations"] == result["granted"] == result["misrecorded"] >= 1
    assert {(example["recorded_lease_ms"], example["lease_ms"])
            for example in result["examples"]} == {(lease_ms, lease_ms * 3 // 2)}


def caught_only_by_its_sweeps(scenario: Scenario, run_dir: Path, report: dict) -> None:
    """Nothing lapsed, so no lease shows how seldom the reaper sweeps; its sweeps do: every
    gap between two of them is past one interval + the allowance, and reap_cadence alone
    fails."""
    assert failed(report) == {"reap_cadence"}, report["invariants"]
    assert report["invariants"]["reap_prompt"]["count"] == 0  # nothing lapsed
    cadence = report["invariants"]["reap_cadence"]
    sweeps = [event.ts for event in read_history(run_dir / "history.jsonl")
              if event.type == "sweep" and event.worker == "reaper"]
    assert len(sweeps) == cadence["sweeps"] >= 3
    assert all(later - earlier > cadence["limit_ms"]
               for earlier, later in zip(sweeps, sweeps[1:], strict=False))
    assert cadence["violations"] >= len(sweeps) - 1


PROVOCATIONS = {
    "padded-lease": caught_only_by_the_deadline_written,
    "sparse-reaper": caught_only_by_its_sweeps,
    "nonatomic-claim": claim_gap_kill_lost_the_held_job,
    "extend-resurrects": lagged_heartbeat_renewed_after_complete,
    "nonatomic-reap": both_reapers_moved,
    "single-batch-reaper": enough_leases_stranded,
}


@pytest.mark.parametrize("seed_offset", range(SOUND_SEEDS))
@pytest.mark.parametrize("path", MUTANTS, ids=lambda p: p.stem)
def test_the_sound_protocol_passes_every_mutant_scenario(path: Path, seed_offset: int,
                                                         tmp_path: Path):
    mutant = load_scenario(path)
    scenario = mutant.model_copy(update={"protocol": "sound", "expect_fail": [],
                                         "seed": mutant.seed + seed_offset})
    report = run(scenario, tmp_path / "run")
    assert report["verdict"] == "pass", {name: report["invariants"][name]["examples"][:3]
                                         for name in failed(report)}
    assert report["jobs"]["lost"] == 0 and report["jobs"]["double_completed"] == 0
    # The faults really happened: a pass with nothing applied would prove nothing.
    assert report["faults"] == len(report["run"]["faults"]) and (
        report["faults"] >= 1 or not mutant.faults)


def test_the_sound_protocol_ignores_a_skewed_clock(tmp_path: Path):
    """The client-clock scenario skews the reaper's clock by 3 s: the sound reaper reads only
    the server's TIME, so nothing is reaped early; the skew demonstrably reached the reaper."""
    mutant = load_scenario(ROOT / "scenarios" / "mutants" / "client-clock.toml")
    scenario = mutant.model_copy(update={"protocol": "sound", "expect_fail": []})
    run_dir = tmp_path / "run"
    report = run(scenario, run_dir)
    assert report["verdict"] == "pass"
    assert report["invariants"]["no_premature_reap"]["violations"] == 0
    skews = [e for e in read_history(run_dir / "history.jsonl")
             if e.type == "fault" and e.extra.get("kind") == "clock_skew"]
    assert [(e.worker, e.extra["offset_ms"]) for e in skews] == [("reaper", "3000")]
    assert (run_dir / "clocks" / "reaper.offset_ms").read_text().strip() == "0"  # healed


def test_selftest_cli_reports_a_caught_variant_as_json(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "chaos", "selftest", "--only", "no-reaper", "--json",
         "--out", str(tmp_path / "selftest")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["passed"] is True
    assert (summary["variants"], summary["variants_caught"], summary["false_positives"]) == \
        (1, 1, 0)
    (row,) = summary["rows"]
    assert row["variant"] == "no-reaper" and row["caught"] is True
    assert row["mutant"]["verdict"] == "fail" and row["sound"]["verdict"] == "pass"
    assert row["time_to_catch_ms"] > 0
    assert json.loads((tmp_path / "selftest" / "selftest.json").read_text()) == summary


def test_selftest_rejects_an_unknown_variant(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "chaos", "selftest", "--only", "sloppy", "--out",
         str(tmp_path / "x")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2
    assert "--only sloppy: no such mutant" in result.stderr
