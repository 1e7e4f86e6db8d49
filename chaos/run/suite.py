"""A suite of runs (`run` with several scenarios): its summary table and its exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.errors import (
    EXIT_ABORTED,
    EXIT_CHECKER,
    EXIT_FAIL,
    EXIT_INFRA,
    EXIT_PASS,
    EXIT_UNKNOWN,
    EXIT_USAGE,
)
from chaos.report.summary import build_report
from chaos.run.runner import RunResult

NOT_RUN = "not run"  # a scenario after the one a Ctrl-C stopped


def worst_exit_code(codes: list[int]) -> int:
    """aborted (130) > infrastructure (3) > usage (2) > checker error (5) > fail (1) > unknown
    (4) > pass (0)."""
    order = [EXIT_PASS, EXIT_UNKNOWN, EXIT_FAIL, EXIT_CHECKER, EXIT_USAGE, EXIT_INFRA,
             EXIT_ABORTED]
    return max(codes, key=order.index, default=EXIT_PASS)


def suite_table(results: list[RunResult], names: list[str]) -> str:
    """One row per scenario, in order; ``not run`` for those after a Ctrl-C stopped the suite."""
    header = ("scenario", "verdict", "failed invariants", "jobs done/enqueued", "faults",
              "max recovery", "bound", "wall")
    rows = []
    for index, name in enumerate(names):
        if index >= len(results):
            rows.append((name, NOT_RUN, "", "", "", "", "", ""))
            continue
        report = results[index].report
        failed = [n for n, r in (report.get("invariants") or {}).items() if not r["ok"]]
        bound = (report.get("invariants") or {}).get("recovery_bound") or {}
        jobs = report.get("jobs") or {}
        wall = (report.get("run") or {}).get("wall_ms")
        unexercised = (report.get("exercise") or {}).get("exercised") is False
        rows.append((
            name, str(report["verdict"]).upper() + (" (not exercised)" if unexercised else ""),
            ",".join(failed) or "-",
            f"{jobs.get('completed', '-')}/{jobs.get('enqueued', '-')}",
            str(report.get("faults", "-")),
            "-" if bound.get("max_ms") is None else f"{bound['max_ms']} ms",
            "-" if bound.get("bound_ms") is None else f"{bound['bound_ms']} ms",
            "-" if wall is None else f"{wall / 1000:.1f} s"))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     .rstrip() for row in [header, *rows])


def suite_junit_runs(results: list[RunResult], names: list[str],
                     run_dirs: list[Path]) -> list[tuple[dict[str, Any], Path | None]]:
    """junit.xml's runs, in order, as the table lists them: a scenario a Ctrl-C kept from
    running is there too, as a skipped ``run`` testcase."""
    runs: list[tuple[dict[str, Any], Path | None]] = [
        (result.report, result.run_dir) for result in results]
    for name in names[len(results):]:
        runs.append((build_report(name, NOT_RUN, None,
                                  error="not run: the suite was interrupted before it"), None))
    return runs
