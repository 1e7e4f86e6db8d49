"""``echomq-chaos certify``'s table: each run, then per bug class what the scenarios built
for it found (``chaos.tools.certify`` runs the battery and reads it)."""

from __future__ import annotations

from collections.abc import Sequence

from chaos.tools.certify import BATTERY, BUG_CLASSES, CertifyResult, CertifyRun, ClassFinding


def _columns(header: tuple[str, ...], lines: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
            .rstrip() for cells in [header, *lines]]


def _found(run: CertifyRun) -> str:
    word = run.verdict.upper()
    if run.failed:
        return f"{word} {', '.join(run.failed)}"
    if not run.evidence:
        return f"{word} (not exercised: {run.unexercised}; " + (
            f"retried with seed {run.retried_with})" if run.retried_with is not None
            else "retries spent)")
    if run.undecided:
        return f"{word} (undecided: {', '.join(run.undecided)})"
    return f"{word}{f' ({run.error})' if run.error and not run.decided else ''}"


def _elsewhere(finding: ClassFinding) -> str:
    """Other scenarios' runs that failed one of the class's invariants, a scenario's seeds
    together: ``staggered-lapses seeds 37, 38 (exclusive_lease)``."""
    seeds: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for run in finding.elsewhere:
        failed = tuple(sorted(set(run.failed) & set(finding.bug.invariants)))
        seeds.setdefault((run.scenario, failed), []).append(run.seed)
    return "; ".join(
        f"{scenario} seed{'s' if len(found) > 1 else ''} {', '.join(map(str, found))} "
        f"({', '.join(failed)})" for (scenario, failed), found in seeds.items())


def table(result: CertifyResult) -> str:
    """The runs, then per bug class what the scenarios built for it found."""
    lines = [f"certify {result.target}",
             f"(a run whose faults strand no lease is no evidence: it is run again with another "
             f"seed, up to {result.retries} time{'s' if result.retries != 1 else ''} a run: "
             "--unexercised-retries)", ""]
    rows = [(run.scenario, str(run.seed), _found(run),
             "-" if run.wall_ms is None else f"{run.wall_ms / 1000:.1f} s", run.run_dir)
            for run in result.runs]
    rows += [(name, "-", f"n/a: {why}", "-", "-") for name, why in result.skipped.items()]
    lines += _columns(("scenario", "seed", "verdict", "wall", "run directory"), rows)
    if result.adapted:
        lines += ["", "adapted to this queue:"]
        lines += [f"  {name}: {how}" for name, how in result.adapted.items()]
    lines += ["", "bug classes (what the scenarios built for each found):"]
    width = max(len(entry.name) for entry in BATTERY)
    for finding in result.findings():
        bug = finding.bug
        lines.append(f"  {bug.title} [{', '.join(bug.invariants)}]: {finding.status}")
        for run in finding.runs:
            lines.append(f"      {run.scenario.ljust(width)}  seed {run.seed}: {_found(run)}")
        for name in finding.not_run:
            lines.append(f"      {name.ljust(width)}  not run (--only)")
        for name, why in finding.not_applicable.items():
            lines.append(f"      {name.ljust(width)}  n/a: {why}")
        if finding.elsewhere:
            lines.append(f"      also failed elsewhere: {_elsewhere(finding)}")
    other = sorted({name for run in result.runs for name in run.failed}
                   - {name for bug in BUG_CLASSES for name in bug.invariants})
    if other:
        lines.append(f"  failed outside these classes: {', '.join(other)}")
    failed = sum(run.verdict == "fail" for run in result.runs)
    unexercised = sum(not run.evidence for run in result.runs)
    lines += ["", f"certify: {result.word} ({len(result.runs)} runs, {failed} failed"
                  + (f", {unexercised} not exercised (no evidence)" if unexercised else "")
                  + f"{', interrupted' if result.aborted else ''})"]
    return "\n".join(lines)
