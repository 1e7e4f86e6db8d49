"""``echomq-chaos sweep``: run one scenario over a grid of lease / reap interval / heartbeat
settings, one cell after another, and say which setting to use (chaos.check.tuning decides).

Outputs in the sweep directory: one run directory per cell and repetition (``cells/<cell>/run-N``,
each a full run directory with its own ``runner.log``), ``sweep.json``, ``sweep.html`` (the table,
heatmaps of recovery p99 and needless redeliveries, the recommendation) and a terminal table.
Every cell's scenario is built and validated before the first run starts, exactly as ``run --set``
would build it, so an impossible combination (heartbeat >= lease, ...) is exit 2, not a run.
"""

from __future__ import annotations

import html
import itertools
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from chaos.check.checker import LatencySummary
from chaos.check.tuning import (
    CellResult,
    Evidence,
    HistoryMeasurements,
    Recommendation,
    bound_formula,
    measure_history,
    predicted_recovery,
    recommend,
)
from chaos.errors import EXIT_ABORTED, EXIT_FAIL, EXIT_INFRA, EXIT_PASS
from chaos.family import family_of
from chaos.files import write_json_atomic, write_text_atomic
from chaos.history.events import read_history
from chaos.registry import bound_model
from chaos.report.html import figure_svg
from chaos.run.rundir import prepare_run_dir
from chaos.run.runner import RunResult, run_scenario
from chaos.run.sources import judged_history
from chaos.scenario.loading import ScenarioError, load_scenario
from chaos.scenario.model import Scenario

SCHEMA = 1
# a cell's verdict is its worst run's
VERDICT_ORDER = ("pass", "unknown", "fail", "checker_error", "aborted", "error")


@dataclass(frozen=True)
class CellPlan:
    lease_ms: int
    reap_interval_ms: int
    heartbeat_ms: int | None  # None: the scenario's own (default lease/3); 0: off
    scenario: Scenario

    @property
    def name(self) -> str:
        heartbeat = self.scenario.topology.effective_heartbeat_ms
        return f"lease{self.lease_ms}-reap{self.reap_interval_ms}-hb{heartbeat or 'off'}"


def parse_values(option: str, text: str, allow_off: bool = False) -> list[int | None]:
    """``500,1000,2000`` → [500, 1000, 2000]; with ``allow_off``, ``off`` → 0 and ``auto`` →
    None (the scenario's own heartbeat)."""
    values: list[int | None] = []
    for raw in text.split(","):
        word = raw.strip().lower()
        if allow_off and word in ("off", "0"):
            value: int | None = 0
        elif allow_off and word == "auto":
            value = None
        elif word.isdigit() and int(word) > 0:
            value = int(word)
        else:
            expected = "positive integers (ms)" + (", 'off' or 'auto'" if allow_off else "")
            raise ScenarioError(f"{option} {text!r}: {raw.strip()!r} is not valid; expected a "
                                f"comma-separated list of {expected}")
        if value in values:
            raise ScenarioError(f"{option} {text!r}: {raw.strip()!r} is given twice")
        values.append(value)
    return values


def cell_overrides(lease_ms: int, reap_interval_ms: int, heartbeat_ms: int | None) -> list[str]:
    """The ``--set`` assignments that make a cell (``run --set`` reproduces it)."""
    sets = [f"topology.lease_ms={lease_ms}", f"topology.reap_interval_ms={reap_interval_ms}"]
    if heartbeat_ms is not None:
        sets.append(f"topology.heartbeat_ms={heartbeat_ms}")
    return sets


def plan_cells(path: str | Path, leases: list[int], reaps: list[int],
               heartbeats: list[int | None], extra_sets: list[str] | None = None
               ) -> list[CellPlan]:
    """Every cell's validated scenario; all invalid cells are reported together (exit 2)."""
    plans, errors = [], []
    for lease, reap, heartbeat in itertools.product(leases, reaps, heartbeats):
        cell = f"lease_ms={lease} reap_interval_ms={reap}" + (
            "" if heartbeat is None else f" heartbeat_ms={heartbeat or 'off'}")
        sets = [*(extra_sets or []), *cell_overrides(lease, reap, heartbeat)]
        try:
            scenario = load_scenario(path, sets)
        except ScenarioError as error:
            errors.append(f"cell {cell}: {error}")
            continue
        refused = family_of(scenario).renewal_off_refused
        if heartbeat == 0 and refused:
            errors.append(f"cell {cell}: {refused}")
            continue
        plans.append(CellPlan(lease, reap, heartbeat, scenario))
    if errors:
        raise ScenarioError("invalid sweep cells (nothing was run):\n" + "\n".join(errors))
    return plans


def default_target(scenario: Scenario) -> tuple[int, str]:
    """The recovery target without ``--target-recovery-ms``: the recovery the scenario's own
    settings promise, by its family's bound (and where that number comes from)."""
    return scenario.recovery_bound_ms, f"default: {family_of(scenario).bound_source()}"


@dataclass
class SweepResult:
    scenario: str
    target_ms: int
    target_source: str
    cells: list[CellResult] = field(default_factory=list)
    planned_cells: int = 0
    repeat: int = 1
    aborted: bool = False
    wall_ms: int = 0
    measured: HistoryMeasurements = field(default_factory=HistoryMeasurements)
    recommendation: Recommendation | None = None

    @property
    def evidence(self) -> Evidence:
        return Evidence.of(self.measured, self.cells)

    @property
    def dialect(self) -> str:
        """The family the cells' histories name ("" the reference)."""
        return next((cell.dialect for cell in self.cells if cell.dialect), "")

    @property
    def exit_code(self) -> int:
        if self.aborted:
            return EXIT_ABORTED
        if any(cell.verdict == "error" for cell in self.cells):
            return EXIT_INFRA
        if any(cell.verdict != "pass" for cell in self.cells):
            return EXIT_FAIL
        return EXIT_PASS

    def as_dict(self) -> dict[str, Any]:
        evidence = self.evidence
        handler_max = evidence.handler.max_ms
        return {
            "schema": SCHEMA,
            "scenario": self.scenario,
            "target_recovery_ms": self.target_ms,
            "target_source": self.target_source,
            "repeat": self.repeat,
            "planned_cells": self.planned_cells,
            "completed_cells": len(self.cells),
            "aborted": self.aborted,
            "wall_ms": self.wall_ms,
            "evidence": {
                "handler_ms": vars(evidence.handler),
                "extend_rtt_ms": vars(evidence.extend_rtt),
                "renewal_gap_ms": vars(evidence.renewal_gap),
                "extends": evidence.extends,
                "renewal_overhead_ms": evidence.renewal_overhead_ms,
            },
            "cells": [{**cell.as_dict(),
                       "model": vars(predicted_recovery(cell, handler_max))}
                      for cell in self.cells],
            "recommendation": self.recommendation.as_dict() if self.recommendation else None,
        }


def cell_result(plan: CellPlan, results: list[RunResult],
                measured: list[HistoryMeasurements]) -> CellResult:
    """Pool a cell's repetitions: recovery samples and renewal gaps are concatenated."""
    verdict = max((r.verdict for r in results), key=VERDICT_ORDER.index)
    failed = sorted({name for r in results if r.checked for name in r.checked.failed_invariants()})
    reap = [v for r in results if r.checked for v in r.checked.recovery_samples.get("reap", [])]
    recomplete = [v for r in results if r.checked
                  for v in r.checked.recovery_samples.get("recomplete", [])]
    load_rps: dict[str, float] = {}
    for result in results:
        for operation, figures in (result.report.get("load") or {}).get("operations", {}).items():
            load_rps[operation] = load_rps.get(operation, 0.0) + figures.get("rps", 0.0) / len(
                results)
    gaps = [gap for m in measured for gap in m.renewal_gap_ms]
    topology = plan.scenario.topology
    return CellResult(
        lease_ms=topology.lease_ms,
        reap_interval_ms=topology.reap_interval_ms,
        heartbeat_ms=topology.effective_heartbeat_ms,
        verdict=verdict,
        failed_invariants=failed,
        runs=len(results),
        recovery=LatencySummary.of(reap),
        recomplete=LatencySummary.of(recomplete),
        needless=sum(r.checked.redeliveries.needless for r in results if r.checked),
        needed=sum(r.checked.redeliveries.needed for r in results if r.checked),
        jobs=sum(r.checked.jobs.enqueued for r in results if r.checked),
        throughput_per_s=round(sum(r.report.get("throughput_per_s", 0.0) for r in results)
                               / len(results), 1),
        load_rps={name: round(rps, 1) for name, rps in load_rps.items()},
        renewal_gap=LatencySummary.of(gaps),
        tolerance_ms=plan.scenario.check.tolerance_ms,
        run_dirs=[str(r.run_dir) for r in results],
        wall_ms=sum(int(r.report.get("run", {}).get("wall_ms", 0)) for r in results),
        heartbeat_set=plan.heartbeat_ms,
        # the family its histories name (the run event's dialect), else the scenario's
        dialect=next((m.dialect for m in measured if m.dialect),
                     family_of(plan.scenario).dialect_name),
    )


def run_sweep(plans: list[CellPlan], out: Path, repeat: int, target_ms: int,
              target_source: str, stream: TextIO = sys.stderr) -> SweepResult:
    """Run the cells one after another (the machine's cores are the workers'). Ctrl-C stops
    after tearing the current run down; the cells done so far are kept and reported."""
    result = SweepResult(plans[0].scenario.name, target_ms, target_source,
                         planned_cells=len(plans), repeat=repeat)
    started = time.monotonic()
    total = len(plans) * repeat
    done = 0
    try:
        for index, plan in enumerate(plans, start=1):
            runs: list[RunResult] = []
            measured: list[HistoryMeasurements] = []
            for repetition in range(1, repeat + 1):
                run_dir = out / "cells" / plan.name / f"run-{repetition}"
                scenario = plan.scenario
                if repetition > 1:  # another seed per repetition, same cell
                    scenario = scenario.model_copy(update={"seed": scenario.seed + repetition - 1})
                prepare_run_dir(run_dir, force=True)  # --force: never append to an old history
                with open(run_dir / "runner.log", "w", encoding="utf-8") as log:
                    run = run_scenario(scenario, run_dir, stream=log)
                if run.verdict == "aborted":
                    raise KeyboardInterrupt
                runs.append(run)
                # the history the verdict was judged on: the MONITOR recorder's for a queue
                # whose own scripts record no claims (a foreign SUT, BullMQ)
                history = judged_history(run_dir)
                measured.append(measure_history(read_history(history)) if history.exists()
                                and history.stat().st_size else HistoryMeasurements())
                done += 1
            cell = cell_result(plan, runs, measured)
            result.cells.append(cell)
            for item in measured:
                result.measured.extend(item)
            elapsed = time.monotonic() - started
            eta = elapsed / done * (total - done)
            print(f"[cell {index}/{len(plans)}] {cell.key}: {cell.verdict.upper()}  recovery "
                  f"p99 {_ms(cell.recovery.p99_ms)} / {cell.bound_formula} {cell.bound_ms} ms  "
                  f"needless "
                  f"{cell.needless}/{cell.jobs}  {cell.throughput_per_s} completes/s  "
                  f"(elapsed {elapsed:.0f}s, ETA {eta:.0f}s)", file=stream, flush=True)
    except KeyboardInterrupt:
        result.aborted = True
        print(f"!! sweep interrupted after {len(result.cells)} of {len(plans)} cells; "
              "reporting those", file=stream, flush=True)
    result.wall_ms = int((time.monotonic() - started) * 1000)
    if result.cells and not result.aborted:  # the best of part of a grid is no answer
        result.recommendation = recommend(result.cells, target_ms, result.evidence)
    return result


def no_recommendation(result: SweepResult) -> str:
    """Why a sweep recommends nothing (it always recommends once its grid is complete)."""
    if result.aborted:
        return (f"no recommendation: the sweep was interrupted after {len(result.cells)} of "
                f"{result.planned_cells} cells, and the best of part of a grid says nothing "
                "about the cells not run (run the whole sweep)")
    return "no recommendation: no cell completed"


def write_outputs(result: SweepResult, out: Path) -> None:
    write_json_atomic(out / "sweep.json", result.as_dict())
    write_text_atomic(out / "sweep.html", render_html(result))


# --- the terminal table -------------------------------------------------------------------

COLUMNS = ("lease", "reap", "hb", "verdict", "recovery p50/p99/max", "bound", "model range",
           "model", "needless", "renew gap max", "completes/s", "load rps")


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)


def table_rows(result: SweepResult) -> list[list[str]]:
    handler_max = result.evidence.handler.max_ms
    rows = []
    for cell in result.cells:
        model = predicted_recovery(cell, handler_max)
        recovery = cell.recovery
        agree = {None: "n/a", True: "agrees", False: "DISAGREES"}[model.agrees]
        verdict = cell.verdict + (f" ({','.join(cell.failed_invariants)})"
                                  if cell.failed_invariants else "")
        rows.append([
            str(cell.lease_ms), str(cell.reap_interval_ms), str(cell.heartbeat_ms or "off"),
            verdict,
            f"{_ms(recovery.p50_ms)}/{_ms(recovery.p99_ms)}/{_ms(recovery.max_ms)}",
            str(cell.bound_ms), f"{model.low_ms}-{model.high_ms}", agree,
            f"{cell.needless} ({cell.needless_rate:.1%})", _ms(cell.renewal_gap.max_ms),
            f"{cell.throughput_per_s:g}",
            " ".join(f"{op}:{rps:g}" for op, rps in sorted(cell.load_rps.items())) or "-",
        ])
    return rows


def table(result: SweepResult) -> str:
    rows = [list(COLUMNS), *table_rows(result)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
             .rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    evidence = result.evidence
    lines.append("")
    lines.append(f"sweep {result.scenario}: {len(result.cells)}/{result.planned_cells} cells x "
                 f"{result.repeat} run(s) in {result.wall_ms / 1000:.0f} s"
                 + ("  (INTERRUPTED)" if result.aborted else ""))
    lines.append(f"handler claim->complete ms {_summary(evidence.handler)}; "
                 f"{_renewal_evidence(evidence)}")
    lines.append(f"bound: {_bound_text(result.dialect)}")
    lines.append(f"model range: recovery the analytic model allows, [max(0, L - heartbeat), "
                 f"{bound_formula(result.dialect)}] (no heartbeat: L - longest handler)")
    if result.recommendation:
        lines.append(f"recommendation (target {result.target_ms} ms, {result.target_source}):")
        lines.append(_wrap(result.recommendation.text, 100, "  "))
        if result.recommendation.warning:
            lines.append(_wrap(f"!! warning: {result.recommendation.warning}", 100, ""))
    else:
        lines.append(f"!! {no_recommendation(result)}")
    return "\n".join(lines)


def _summary(summary: LatencySummary) -> str:
    return f"p50 {_ms(summary.p50_ms)} p99 {_ms(summary.p99_ms)} max {_ms(summary.max_ms)}"


def _renewal_evidence(evidence: Evidence) -> str:
    """The renewal figures measured: the extend round trips, or where the family's history
    carries none (read from MONITOR), the renewal gaps the lease headroom is judged from."""
    gaps = f"renewal gap ms {_summary(evidence.renewal_gap)} (n={evidence.renewal_gap.count})"
    if evidence.extend_rtt.count:
        return (f"extend round trip ms {_summary(evidence.extend_rtt)}; {gaps}")
    if evidence.extends:
        return (f"extend round trips: none recorded (the {evidence.extends} extends carry no "
                f"rtt_ms: read from MONITOR); renewal evidence: {gaps}")
    return f"extend round trips: no extend recorded; renewal evidence: {gaps}"


def _bound_text(dialect: str) -> str:
    return bound_model(dialect).explained


def _wrap(text: str, width: int, indent: str) -> str:
    import textwrap

    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent)


# --- sweep.html -----------------------------------------------------------------------------


def _heatmap_svg(result: SweepResult, metric: str, title: str,
                 heartbeat_set: int | None) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display, no window: render to a string
    import matplotlib.pyplot as plt

    cells = [c for c in result.cells if c.heartbeat_set == heartbeat_set]
    leases = sorted({c.lease_ms for c in cells})
    reaps = sorted({c.reap_interval_ms for c in cells})
    grid: list[list[float]] = [[float("nan")] * len(leases) for _ in reaps]
    labels: list[list[str]] = [[""] * len(leases) for _ in reaps]
    for cell in cells:
        row, col = reaps.index(cell.reap_interval_ms), leases.index(cell.lease_ms)
        if metric == "recovery":
            value = cell.recovery.p99_ms
            text = "-" if value is None else f"{value}\n/{cell.bound_ms}"
        else:
            value = cell.needless
            text = f"{value}\n{cell.needless_rate:.1%}"
        grid[row][col] = float("nan") if value is None else float(value)
        labels[row][col] = text + ("\nFAIL" if cell.verdict != "pass" else "")
    figure, axes = plt.subplots(figsize=(1.6 + 1.3 * len(leases), 1.2 + 0.9 * len(reaps)))
    image = axes.imshow(grid, cmap="viridis" if metric == "recovery" else "magma_r",
                        aspect="auto", origin="lower")
    axes.set_xticks(range(len(leases)), [str(v) for v in leases])
    axes.set_yticks(range(len(reaps)), [str(v) for v in reaps])
    axes.set_xlabel("lease_ms")
    axes.set_ylabel("reap_interval_ms")
    axes.set_title(title, fontsize=10)
    for row, col in itertools.product(range(len(reaps)), range(len(leases))):
        axes.text(col, row, labels[row][col], ha="center", va="center", fontsize=8,
                  color="white", bbox={"facecolor": "black", "alpha": 0.35, "pad": 1,
                                       "linewidth": 0})
    figure.colorbar(image, ax=axes, fraction=0.05)
    figure.tight_layout()
    svg = figure_svg(figure, f"sweep-{metric}-{heartbeat_set}", responsive=False)
    plt.close(figure)
    return svg


def render_html(result: SweepResult) -> str:
    """A self-contained page: inline SVG, no scripts, no external resources."""
    escape = html.escape
    maps = []
    for heartbeat in dict.fromkeys(cell.heartbeat_set for cell in result.cells):
        label = ("the scenario's heartbeat (default lease/3)" if heartbeat is None
                 else f"heartbeat {heartbeat} ms" if heartbeat else "no heartbeat")
        maps.append(f"<h3>{escape(label)}</h3><div class='maps'>"
                    + _heatmap_svg(result, "recovery",
                                   f"recovery p99 ms / {bound_formula(result.dialect)}, "
                                   f"{label}", heartbeat)
                    + _heatmap_svg(result, "needless", f"needless redeliveries, {label}",
                                   heartbeat)
                    + "</div>")
    header = "".join(f"<th>{escape(name)}</th>" for name in COLUMNS)
    body = "".join(
        "<tr" + (" class='bad'" if not row[3].startswith("pass") else "") + ">"
        + "".join(f"<td>{escape(value)}</td>" for value in row) + "</tr>"
        for row in table_rows(result))
    recommendation = result.recommendation
    evidence = result.evidence
    status = (f"{len(result.cells)} of {result.planned_cells} cells, {result.repeat} run(s) each, "
              f"{result.wall_ms / 1000:.0f} s" + (" — interrupted" if result.aborted else ""))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>sweep {escape(result.scenario)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 1200px; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }}
tr.bad td {{ background: #fdd; }}
.maps {{ display: flex; flex-wrap: wrap; gap: 1em; }}
.maps svg {{ max-width: 48%; height: auto; }}
.rec {{ background: #eef6ee; border-left: 4px solid #4a4; padding: 0.6em 1em; }}
.none {{ background: #fbeeee; border-left: 4px solid #a44; }}
</style></head><body>
<h1>Sweep of {escape(result.scenario)}</h1>
<p>{escape(status)}. Recovery target {result.target_ms} ms ({escape(result.target_source)}).</p>
<h2>Recommendation</h2>
<div class="rec{'' if recommendation and recommendation.cell else ' none'}">
<p>{escape(recommendation.text if recommendation else no_recommendation(result))}</p>
{f"<p><strong>Warning: {escape(recommendation.warning)}</strong></p>"
 if recommendation and recommendation.warning else ""}</div>
<h2>Cells</h2>
<table><tr>{header}</tr>{body}</table>
<p>Recovery is reap − fault on the Valkey clock (ms). The model range is what the analytic model
allows: a stranded lease was renewed at most one heartbeat before the fault and comes back within
the bound of that renewal, so recovery ∈ [max(0, L − heartbeat), bound] (without a heartbeat,
L − the longest handler). The bound: {escape(_bound_text(result.dialect))}.
"renew gap max" is the longest a live, unfaulted worker went without reaching the server on a
lease it held; a lease shorter than that lapses under it (a needless redelivery).</p>
<p>Handler claim→complete ms: {_summary(evidence.handler)}.
{escape(_renewal_evidence(evidence))}.</p>
<h2>Heatmaps</h2>
{''.join(maps)}
</body></html>
"""
