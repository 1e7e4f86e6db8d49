"""``echomq-chaos selftest``: evidence that the checker can fail, and does not fail wrongly.

For every mutant scenario (``scenarios/mutants/*.toml``: a broken protocol variant, the faults
that expose it, and ``expect_fail``, the invariants it must break) it runs the scenario twice
with the same seed: once with the broken variant, which must fail with every expected invariant
("caught"), and once with the sound protocol, which must pass (else a false positive). Exit 0
only if every mutant is caught and every sound run passes.

``--repeat N`` runs every pair with N seeds; the summary then says, per variant, in how many of
the N runs it was caught and the sound protocol passed, how long each catch took (Valkey clock:
from the start of load, and from the first fault, to the first violation of an expected
invariant) and the machine's load average while it ran: a gate is only a gate if it is green
and red every time, on a busy machine too.

``--history monitor`` judges every run on the MONITOR recorder's history alone; ``--history
both`` records both sources in each run and also requires them to agree
(``chaos.tools.selftest_sources``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from chaos.errors import EXIT_ABORTED, EXIT_FAIL, EXIT_INFRA, EXIT_PASS
from chaos.history.events import read_history
from chaos.history.schema import Fault, Phase
from chaos.run.runner import RunResult, run_scenario
from chaos.scenario.loading import ScenarioError, load_scenario
from chaos.scenario.model import Scenario
from chaos.tools.selftest_sources import (
    SourceAgreement,
    agreement_rows,
    judge_sources,
    with_history,
)

DEFAULT_MUTANTS = Path("scenarios/mutants")


@dataclass
class RunOutcome:
    protocol: str
    verdict: str  # pass | fail | aborted | error
    failed: list[str]  # invariants that failed
    wall_ms: int
    run_dir: str
    error: str | None = None
    load_avg: float | None = None  # the machine's 1-minute load average when the run ended
    sources: SourceAgreement | None = None  # --history both: the two histories compared


@dataclass
class SelftestRow:
    variant: str  # the mutant's protocol
    scenario: str
    seed: int
    expected: list[str]
    mutant: RunOutcome
    sound: RunOutcome
    time_to_catch_ms: int | None = None  # start of load -> first expected violation
    fault_to_catch_ms: int | None = None  # first fault -> first expected violation

    @property
    def caught(self) -> bool:
        # With both sources, the monitor history must catch it too.
        on_monitor = self.mutant.sources is None or \
            set(self.expected) <= set(self.mutant.sources.monitor_failed)
        return self.mutant.verdict == "fail" and set(self.expected) <= set(self.mutant.failed) \
            and on_monitor

    @property
    def sources_agree(self) -> bool:
        """True unless both sources were recorded and disagree in a run of the pair."""
        return all(outcome.sources is None or outcome.sources.agree
                   for outcome in (self.mutant, self.sound))

    @property
    def false_positive(self) -> bool:
        return self.sound.verdict == "fail"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "caught": self.caught, "false_positive": self.false_positive,
                "sources_agree": self.sources_agree}


@dataclass
class SelftestResult:
    rows: list[SelftestRow] = field(default_factory=list)
    aborted: bool = False
    history: str | None = None  # --history: the source every run was recorded from

    @property
    def infra_errors(self) -> int:
        return sum(outcome.verdict == "error" for row in self.rows
                   for outcome in (row.mutant, row.sound))

    @property
    def passed(self) -> bool:
        return bool(self.rows) and not self.aborted and all(
            row.caught and row.sound.verdict == "pass" and row.sources_agree
            for row in self.rows)

    @property
    def exit_code(self) -> int:
        if self.aborted:
            return EXIT_ABORTED
        if self.passed:
            return EXIT_PASS
        return EXIT_INFRA if self.infra_errors else EXIT_FAIL

    def as_dict(self) -> dict[str, Any]:
        variants = sorted({row.variant for row in self.rows})
        caught = sorted({row.variant for row in self.rows}
                        - {row.variant for row in self.rows if not row.caught})
        return {
            "schema": 1,
            "history": self.history,
            "passed": self.passed,
            "variants": len(variants),
            "variants_caught": len(caught),
            "runs": 2 * len(self.rows),
            "false_positives": sum(row.false_positive for row in self.rows),
            "infra_errors": self.infra_errors,
            "aborted": self.aborted,
            "sources_disagree": sum(not row.sources_agree for row in self.rows),
            "by_variant": [asdict(summary) for summary in summarize(self.rows)],
            "rows": [row.as_dict() for row in self.rows],
        }


@dataclass(frozen=True)
class Spread:
    """min / median / max of a figure over the runs that have it (None: no run has it)."""

    min: float | None
    median: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        present = [value for value in values if value is not None]
        if not present:
            return cls(None, None, None)
        return cls(min(present), statistics.median(present), max(present))

    def render(self, unit: str = "", digits: int = 0) -> str:
        if self.min is None or self.median is None or self.max is None:
            return "-"
        if self.min == self.max:
            return f"{self.min:.{digits}f}{unit}"
        return (f"{self.min:.{digits}f}/{self.median:.{digits}f}/{self.max:.{digits}f}{unit}")


@dataclass(frozen=True)
class VariantSummary:
    """One variant over every seed it ran with: how often it was caught, and how fast."""

    variant: str
    expected: list[str]
    runs: int
    caught: int  # mutant runs that failed with every expected invariant
    sound_passed: int  # sound runs (same scenario, same seed) that passed
    time_to_catch_ms: Spread  # from the start of load, over the caught runs
    fault_to_catch_ms: Spread  # from the first fault, over the caught runs that had one
    load_avg: Spread  # 1-minute load average at the end of each run (mutant and sound)

    @property
    def every_time(self) -> bool:
        return self.caught == self.runs and self.sound_passed == self.runs


def summarize(rows: Sequence[SelftestRow]) -> list[VariantSummary]:
    """Per variant, in the order the variants first ran."""
    by_variant: dict[str, list[SelftestRow]] = {}
    for row in rows:
        by_variant.setdefault(row.variant, []).append(row)
    summaries = []
    for variant, runs in by_variant.items():
        caught = [row for row in runs if row.caught]
        summaries.append(VariantSummary(
            variant=variant,
            expected=list(runs[0].expected),
            runs=len(runs),
            caught=len(caught),
            sound_passed=sum(row.sound.verdict == "pass" for row in runs),
            time_to_catch_ms=Spread.of([row.time_to_catch_ms for row in caught]),
            fault_to_catch_ms=Spread.of([row.fault_to_catch_ms for row in caught]),
            load_avg=Spread.of([outcome.load_avg for row in runs
                                for outcome in (row.mutant, row.sound)]),
        ))
    return summaries


def find_mutants(directory: Path) -> list[Path]:
    if not directory.is_dir():
        # Installed elsewhere (editable install, run from another directory): the repo's copy.
        fallback = Path(__file__).resolve().parents[2] / directory
        if directory == DEFAULT_MUTANTS and fallback.is_dir():
            directory = fallback
        else:
            raise ScenarioError(f"{directory}: no such directory of mutant scenarios")
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        raise ScenarioError(f"{directory}: no mutant scenarios (*.toml) in it")
    return paths


def load_mutants(paths: list[Path], only: list[str] | None = None) -> list[Scenario]:
    mutants = []
    for path in paths:
        scenario = load_scenario(path)
        if scenario.protocol == "sound" or not scenario.expect_fail:
            raise ScenarioError(f"{path}: a mutant scenario needs a broken protocol and "
                                f"expect_fail (protocol = {scenario.protocol!r}, expect_fail = "
                                f"{scenario.expect_fail!r})")
        mutants.append(scenario)
    if only:
        unknown = sorted(set(only) - {m.protocol for m in mutants} - {m.name for m in mutants})
        if unknown:
            raise ScenarioError(f"--only {', '.join(unknown)}: no such mutant; have "
                                f"{', '.join(m.protocol for m in mutants)}")
        mutants = [m for m in mutants if m.protocol in only or m.name in only]
    return mutants


def _outcome(protocol: str, result: RunResult) -> RunOutcome:
    failed = result.checked.failed_invariants() if result.checked else []
    wall_ms = int(result.report["run"]["wall_ms"])
    outcome = RunOutcome(protocol, result.verdict, failed, wall_ms, str(result.run_dir),
                         result.report.get("error"), _load_average())
    clock_step = result.report.get("clock_step")
    if clock_step:
        # The run's verdict is unknown (chaos.run.evaluate): every lease deadline moved with
        # the clock. Neither a catch nor a false positive: an infrastructure error here.
        outcome.error = clock_step["reason"]
        outcome.verdict = "error"
    return outcome


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not every platform has one
        return None


def _times_to_catch(row: SelftestRow, run_dir: Path,
                    result: RunResult) -> tuple[int | None, int | None]:
    """From the start of load (the warmup phase), and from the first fault, to the first
    violation of an expected invariant, on the Valkey clock: how long the tool had to run to
    catch the bug (some need no fault at all)."""
    if result.checked is None or not row.caught:
        return None, None
    firsts = [result.checked.invariants[name].first_violation_ts for name in row.expected]
    caught_ts = min(ts for ts in firsts if ts is not None)
    load_start_ts = first_fault_ts = None
    for event in read_history(run_dir / "history.jsonl"):
        if load_start_ts is None and event.type == Phase.TYPE and \
                Phase.decode(event).name == "warmup":
            load_start_ts = event.ts
        elif first_fault_ts is None and event.type == Fault.TYPE:
            first_fault_ts = event.ts
    return (None if load_start_ts is None else caught_ts - load_start_ts,
            None if first_fault_ts is None else caught_ts - first_fault_ts)


def _run_one(scenario: Scenario, run_dir: Path) -> RunResult:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "console.log", "w") as console:
        return run_scenario(scenario, run_dir, stream=console)


def selftest(mutants: list[Scenario], out: Path, repeat: int = 1,
             progress: TextIO = sys.stderr, history: str | None = None) -> SelftestResult:
    """``history``: record every run from that source (None: each scenario's own)."""
    result = SelftestResult(history=history)
    total = len(mutants) * repeat * 2
    done = 0
    for round_index in range(repeat):
        for mutant in mutants:
            seed = mutant.seed + round_index
            mutant_run = with_history(mutant.model_copy(update={"seed": seed}), history)
            sound_run = with_history(mutant.model_copy(update={
                "seed": seed, "protocol": "sound", "expect_fail": []}), history)
            outcomes: dict[str, tuple[RunResult, Path]] = {}
            for label, scenario in (("mutant", mutant_run), ("sound", sound_run)):
                done += 1
                run_dir = out / f"{mutant.name}-seed{seed}-{scenario.protocol}"
                started = time.monotonic()
                print(f"[{done}/{total}] {mutant.name} seed {seed} {scenario.protocol} ...",
                      end="", file=progress, flush=True)
                run = _run_one(scenario, run_dir)
                outcomes[label] = (run, run_dir)
                failed = run.checked.failed_invariants() if run.checked else []
                print(f" {run.verdict.upper()}{' ' + ','.join(failed) if failed else ''} "
                      f"({time.monotonic() - started:.1f}s)", file=progress, flush=True)
                if run.verdict == "aborted":
                    result.aborted = True
                    return result
            (mutant_result, mutant_dir), (sound_result, _) = outcomes["mutant"], outcomes["sound"]
            row = SelftestRow(mutant.protocol, mutant.name, seed, list(mutant.expect_fail),
                              _outcome(mutant.protocol, mutant_result),
                              _outcome("sound", sound_result))
            if history == "both":
                row.mutant.sources = judge_sources(mutant_dir)
                row.sound.sources = judge_sources(outcomes["sound"][1])
            row.time_to_catch_ms, row.fault_to_catch_ms = _times_to_catch(
                row, mutant_dir, mutant_result)
            result.rows.append(row)
    return result


def _columns(header: tuple[str, ...], lines: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
            .rstrip() for cells in [header, *lines]]


def table(result: SelftestResult) -> str:
    """Every run pair, then (with more than one seed per variant) the per-variant summary."""
    header = ("variant", "seed", "expected invariant", "caught?", "time to catch",
              "sound protocol")
    lines = []
    for row in result.rows:
        if row.caught:
            caught = "yes"
        elif row.mutant.verdict == "fail":
            caught = f"NO (failed {','.join(row.mutant.failed)})"
        else:
            caught = f"NO ({row.mutant.verdict})"
        sound = row.sound.verdict if not row.sound.failed else \
            f"{row.sound.verdict} ({','.join(row.sound.failed)})"
        to_catch = "-" if row.time_to_catch_ms is None else f"{row.time_to_catch_ms} ms"
        lines.append((row.variant, str(row.seed), ",".join(row.expected), caught, to_catch,
                      sound))
    rendered = _columns(header, lines)
    compared = [(row.variant, row.seed, label, outcome.sources) for row in result.rows
                for label, outcome in (("mutant", row.mutant), ("sound", row.sound))
                if outcome.sources is not None]
    if compared:
        rendered += ["", "Both sources (scripts and monitor) of each run:",
                     *_columns(*agreement_rows(compared))]
    summaries = summarize(result.rows)
    if any(summary.runs > 1 for summary in summaries):
        rendered += ["", *summary_table(summaries)]
    summary = result.as_dict()
    disagree = (f", {summary['sources_disagree']} pairs whose sources disagree"
                if compared else "")
    rendered.append("")
    rendered.append(
        f"{summary['variants_caught']}/{summary['variants']} variants caught, "
        f"{summary['false_positives']} false positives, {summary['infra_errors']} infra errors "
        f"in {summary['runs']} runs"
        f"{', history ' + result.history if result.history else ''}"
        f"{disagree}"
        f": {'PASS' if result.passed else 'FAIL'}")
    return "\n".join(rendered)


def summary_table(summaries: Sequence[VariantSummary]) -> list[str]:
    """Per variant: caught in how many of its N runs, the sound protocol's passes, time to
    catch from the start of load and from the first fault (min/median/max over the caught
    runs, Valkey clock) and the 1-minute load average at the end of its runs (min/median/max)."""
    header = ("variant", "expected invariant", "caught", "sound passed",
              "time to catch (load)", "time to catch (fault)", "load average")
    lines = [(s.variant, ",".join(s.expected), f"{s.caught}/{s.runs}",
              f"{s.sound_passed}/{s.runs}", s.time_to_catch_ms.render(" ms"),
              s.fault_to_catch_ms.render(" ms"), s.load_avg.render(digits=2))
             for s in summaries]
    return _columns(header, lines)
