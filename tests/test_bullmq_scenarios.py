"""The BullMQ scenarios (scenarios/bullmq, docs/bullmq.md) through the runner: real BullMQ worker
processes started from the `[sut]` section, jobs added by BullMQ's own Queue.add (the scenario's
`[sut] cwd` holds the producer too), the history decoded from MONITOR by the bullmq dialect. A
sound BullMQ passes under kill and pause; the broken ones (scenarios/bullmq/broken, each patched
in memory by sut/bullmq/worker.js --break) fail exactly the invariants they expect to."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from drawn import assert_draws_what_was_judged

from chaos.check.checker import check
from chaos.history.events import read_history
from chaos.run.runner import run_scenario
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios" / "bullmq"
BROKEN = SCENARIOS / "broken"
needs_bullmq = pytest.mark.usefixtures("bullmq_installed")  # decided at run time (conftest.py)


def run(path: Path, tmp_path: Path, seed: int | None = None):
    scenario = load_scenario(path)
    assert scenario.sut.dialect == "bullmq"
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    return run_scenario(scenario, tmp_path / path.stem, io.StringIO())


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
@pytest.mark.parametrize(("name", "seed"), [("kill-worker", None), ("kill-worker", 8),
                                            ("pause-worker", None)])
def test_real_bullmq_passes_under_worker_faults(name: str, seed: int | None, tmp_path: Path):
    result = run(SCENARIOS / f"{name}.toml", tmp_path, seed)
    assert result.passed, result.report["verdict"]
    assert result.report["run"]["faults"]  # the fault was applied
    history = (result.run_dir / "history-monitor.jsonl").read_text().replace(" ", "")
    assert '"type":"reap"' in history  # BullMQ's stalled check brought the stranded jobs back
    figures = result.report["invariants"]["recovery_bound"]["family_figures"]
    assert figures["judged_per_recovery"] and not figures["recoveries_with_late_checks"]
    if name == "pause-worker":
        # the woken holder's finish was refused by BullMQ and recorded as such
        assert '"type":"complete_rejected"' in history
    # report.html draws the history judged, with BullMQ's bound, and names whose queue it was
    assert_draws_what_was_judged(result.run_dir, result.report, "history-monitor.jsonl")
    page = (result.run_dir / "report.html").read_text()
    assert ("stalledInterval + max(lockDuration, stalledInterval) + each gap between the "
            "stalled checks that ran beyond stalledInterval = ") in page  # judged per recovery
    assert "lease_ms + reap_interval_ms" not in page and "<th>protocol</th>" not in page
    assert "<th>dialect</th><td>bullmq" in page


@needs_bullmq
def test_bullmq_without_the_lock_check_on_finish_is_caught_by_exclusive_lease_only(
        tmp_path: Path):
    """The woken holder's stale finish is accepted while the re-run holds the job: only
    exclusive_lease fails (the finish closes the re-run's lease too, so nothing is left open
    for reap_prompt to find unreaped)."""
    result = run(BROKEN / "unfenced-finish.toml", tmp_path)
    assert result.verdict == "fail", result.report["verdict"]
    assert result.checked is not None
    assert result.checked.failed_invariants() == ["exclusive_lease"]


@needs_bullmq
def test_bullmq_checking_for_stalled_jobs_at_half_rate_fails_kill_worker(tmp_path: Path):
    """kill-worker with every worker's stalled check at 2S while the run says S: the killed
    worker's jobs come back within the worst case 2S + max(L, S) every recovery was once judged
    on, but each waited on checks 2S apart: recovery_bound, judged on the checks that really
    ran, fails; so does reap_cadence, the same gaps judged over the whole run (one piece of
    code: every worker is a sweeper of the bullmq family). Judged without them (the sweep
    events), the same history gets only the worst case 2S + max(L, S), which may hold or not
    (by which worker's check ran before the kill: seen both ways); the checks are what decide."""
    result = run(BROKEN / "slow-stalled-check.toml", tmp_path)
    assert result.verdict == "fail", result.report["verdict"]
    assert result.checked is not None
    failed = result.checked.failed_invariants()
    # reap_prompt keeps the worst case; a lapse behind the killed checker may exceed it too
    assert {"recovery_bound", "reap_cadence"} <= set(failed) <= {
        "recovery_bound", "reap_cadence", "reap_prompt"}
    bound = result.checked.invariants["recovery_bound"]
    late = bound.examples[0]["late_checks"][0]
    assert late["gap_ms"] > late["allowed_ms"] == 500 + 250
    cadence = result.checked.invariants["reap_cadence"]
    late_sweeps = [example for example in cadence.examples if example["reason"] == "swept late"]
    assert late_sweeps and {example["allowed_ms"] for example in late_sweeps} == {500 + 250}
    assert all(example["gap_ms"] > 750 for example in late_sweeps)
    events = read_history(result.run_dir / "history-monitor.jsonl")
    unaware = check([event for event in events if event.type != "sweep"]).invariants[
        "recovery_bound"].figures
    assert not unaware["family_figures"]["judged_per_recovery"]
    assert unaware["bound_ms"] == 2 * 500 + max(1000, 500) + 250


@needs_bullmq
def test_bullmq_whose_checks_run_at_half_rate_with_timers_on_time_fails_reap_cadence(
        tmp_path: Path):
    """Every worker's stalled-check timer fires each S, on time, but the key is set for 2S: the
    checks that run come 2S apart. No worker's own cadence shows it; the lock's rule does, on
    the checks the key turned away more than S after the last one that ran."""
    result = run(BROKEN / "half-rate-checks.toml", tmp_path)
    assert result.verdict == "fail", result.report["verdict"]
    assert result.checked is not None
    assert "reap_cadence" in result.checked.failed_invariants()
    cadence = result.checked.invariants["reap_cadence"]
    reasons = {example["reason"] for example in cadence.examples}
    assert all(reason.startswith("turned away by the sweep lock") for reason in reasons)
    assert all(example["gap_ms"] > 502 for example in cadence.examples)
