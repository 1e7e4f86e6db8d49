"""``selftest --repeat N``: the per-variant summary (caught k/N, sound passes k/N, time to catch,
load average), computed from hand-made run rows: pure logic, no run is started here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from chaos.errors import EXIT_FAIL, EXIT_INFRA, EXIT_PASS
from chaos.run.evaluate import CLOCK_STEP_ALLOWANCE_MS, clock_step_ms
from chaos.tools.selftest import (
    RunOutcome,
    SelftestResult,
    SelftestRow,
    Spread,
    _outcome,
    _times_to_catch,
    summarize,
    summary_table,
    table,
)


def outcome(protocol: str, verdict: str, failed: list[str], load: float | None) -> RunOutcome:
    return RunOutcome(protocol, verdict, failed, wall_ms=4000, run_dir="runs/x", load_avg=load)


def row(variant: str, seed: int, *, caught: bool, sound: str = "pass",
        to_catch: int | None = None, from_fault: int | None = None,
        load: float = 2.0) -> SelftestRow:
    expected = ["no_loss"]
    mutant = outcome(variant, "fail" if caught else "pass", expected if caught else [], load)
    sound_failed = ["no_loss"] if sound == "fail" else []
    made = SelftestRow(variant, variant, seed, expected, mutant,
                       outcome("sound", sound, sound_failed, load + 1))
    made.time_to_catch_ms, made.fault_to_catch_ms = to_catch, from_fault
    return made


def test_counts_catches_and_sound_passes_per_variant_over_its_seeds():
    rows = [row("nonatomic-claim", 25, caught=True, to_catch=900, from_fault=300, load=3.0),
            row("no-reaper", 26, caught=True, to_catch=2000, from_fault=1500),
            row("nonatomic-claim", 26, caught=False, sound="fail", load=9.0),
            row("nonatomic-claim", 27, caught=True, to_catch=700, from_fault=100, load=5.0),
            row("no-reaper", 27, caught=True, to_catch=2400, from_fault=1700)]
    claim, reaper = summarize(rows)
    assert (claim.variant, claim.runs, claim.caught, claim.sound_passed) == \
        ("nonatomic-claim", 3, 2, 2)
    assert not claim.every_time
    # Time to catch is over the caught runs only: the miss has none to give.
    assert claim.time_to_catch_ms == Spread(700, 800, 900)
    assert claim.fault_to_catch_ms == Spread(100, 200, 300)
    # Load over every run of the variant, mutant and sound alike.
    assert claim.load_avg == Spread(3.0, 5.5, 10.0)
    assert (reaper.runs, reaper.caught, reaper.sound_passed, reaper.every_time) == \
        (2, 2, 2, True)
    assert reaper.time_to_catch_ms == Spread(2000, 2200, 2400)


def test_a_variant_never_caught_has_no_time_to_catch():
    (summary,) = summarize([row("client-clock", 22, caught=False),
                            row("client-clock", 23, caught=False)])
    assert (summary.caught, summary.runs) == (0, 2)
    assert summary.time_to_catch_ms == Spread(None, None, None)
    assert summary.time_to_catch_ms.render(" ms") == "-"


def test_the_table_shows_k_of_n_and_the_spreads_and_the_json_carries_them():
    rows = [row("nonatomic-reap", 23, caught=True, to_catch=1600, from_fault=1100),
            row("nonatomic-reap", 24, caught=True, to_catch=1500, from_fault=1000),
            row("nonatomic-reap", 25, caught=False)]
    result = SelftestResult(rows=rows)
    text = table(result)
    (line,) = [line for line in summary_table(summarize(rows))[1:]]
    assert line.split()[:4] == ["nonatomic-reap", "no_loss", "2/3", "3/3"]
    assert "1500/1550/1600 ms" in line and "1000/1050/1100 ms" in line
    assert line in text.splitlines()
    assert result.exit_code == EXIT_FAIL and text.endswith("FAIL")
    (by_variant,) = result.as_dict()["by_variant"]
    assert (by_variant["caught"], by_variant["runs"], by_variant["sound_passed"]) == (2, 3, 3)
    assert by_variant["time_to_catch_ms"] == {"min": 1500, "median": 1550, "max": 1600}


def test_one_seed_per_variant_prints_no_summary_and_passes_when_all_caught():
    result = SelftestResult(rows=[row("no-reaper", 26, caught=True, to_catch=2000,
                                      from_fault=1500)])
    text = table(result)
    assert "sound passed" not in text  # the per-variant table is for N > 1 only
    assert result.exit_code == EXIT_PASS and text.endswith("PASS")


def write_history(path: Path, *, fault: bool) -> None:
    lines = [{"seq": "1000-0", "type": "run", "ts": "1000"},
             {"seq": "1200-0", "type": "phase", "phase": "warmup", "ts": "1200"},
             {"seq": "1700-0", "type": "phase", "phase": "chaos", "ts": "1700"}]
    if fault:
        lines.append({"seq": "1900-0", "type": "fault", "kind": "kill", "worker": "worker-1",
                      "fault_id": "f1", "ts": "1900"})
        lines.append({"seq": "2400-0", "type": "fault", "kind": "kill", "worker": "worker-2",
                      "fault_id": "f2", "ts": "2400"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def checked(**first_violation_ts: int | None) -> Any:
    """What ``_times_to_catch`` reads of a run: its invariants' first violation instants."""
    return SimpleNamespace(checked=SimpleNamespace(invariants={
        name: SimpleNamespace(first_violation_ts=ts) for name, ts in first_violation_ts.items()}))


def test_time_to_catch_runs_from_load_start_and_from_the_first_fault(tmp_path: Path):
    write_history(tmp_path / "history.jsonl", fault=True)
    caught = row("no-reaper", 26, caught=True)
    caught.expected = caught.mutant.failed = ["no_loss", "recovery_bound"]
    # The earliest of the expected invariants' first violations, on the history's clock.
    result = checked(no_loss=9000, recovery_bound=3500)
    assert _times_to_catch(caught, tmp_path, result) == (3500 - 1200, 3500 - 1900)
    assert _times_to_catch(row("no-reaper", 26, caught=False), tmp_path, result) == (None, None)


def test_a_run_without_faults_has_only_the_time_from_load_start(tmp_path: Path):
    write_history(tmp_path / "history.jsonl", fault=False)
    caught = row("extend-resurrects", 27, caught=True)
    assert _times_to_catch(caught, tmp_path, checked(no_loss=1630)) == (430, None)


def test_a_system_clock_step_makes_a_run_no_evidence_either_way(tmp_path: Path):
    """Seen here once in 140 runs: the Valkey clock ran 10.4 s ahead of the run's monotonic
    clock, every lease lapsed at once and a sound run broke the recovery bound. The run's
    evaluation calls it unknown (chaos.run.evaluate, for every run); selftest counts it as an
    infrastructure error, not a false positive (nor, for a mutant, a catch)."""
    assert clock_step_ms(1400, wall_ms=1600) is None
    assert clock_step_ms(1400, wall_ms=1400 - CLOCK_STEP_ALLOWANCE_MS) is None
    assert clock_step_ms(12000, wall_ms=1600) == 10400
    assert clock_step_ms(None, wall_ms=1600) is None

    def finished(verdict: str, clock_step: dict[str, Any] | None = None) -> Any:
        report: dict[str, Any] = {"run": {"wall_ms": 1600}}
        if clock_step:
            report["clock_step"] = clock_step
        return SimpleNamespace(checked=None, verdict=verdict, run_dir=tmp_path, report=report)

    assert _outcome("sound", finished("fail")).verdict == "fail"
    stepped = _outcome("sound", finished("unknown", {"stepped_ms": 10400, "reason":
                                                     "the system clock stepped ..."}))
    assert stepped.verdict == "error" and "clock stepped" in (stepped.error or "")
    mutant = outcome("unfenced-complete", "fail", ["no_loss"], 1.0)
    row = SelftestRow("unfenced-complete", "unfenced-complete", 29, ["no_loss"], mutant, stepped)
    result = SelftestResult(rows=[row])
    assert not row.false_positive and result.infra_errors == 1
    assert result.exit_code == EXIT_INFRA
