"""``echomq-chaos trend``: the run store's scenarios over time, their latest runs judged against
a baseline window (chaos.store.trend), as a table, JSON, an HTML page of plots and JUnit cases.

Reads every run's figures and labels, and the samples of only the runs in some window: a store
of many thousands of runs answers in about the time reading them takes.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chaos.errors import EXIT_FAIL, EXIT_PASS
from chaos.report.html import figure_svg
from chaos.report.junit import SUITE_PREFIX
from chaos.store.database import RunStore, redacted
from chaos.store.trend import (
    BOUND_FIGURE,
    SAMPLE_PLOTS,
    Group,
    TrendSettings,
    choose_windows,
    figure_names,
    group_runs,
    judge_group,
)
from chaos.tools.trend_why import why_section


@dataclass
class TrendResult:
    store: str  # its URL without a password
    settings: TrendSettings
    by: str | None
    groups: list[Group]

    @property
    def regressions(self) -> list[tuple[Group, Any]]:
        return [(group, c) for group in self.groups for c in group.regressions]

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if self.regressions else EXIT_PASS

    def as_dict(self) -> dict[str, Any]:
        return {"store": self.store, "by": self.by,
                "settings": {"baseline": self.settings.baseline,
                             "candidates": self.settings.candidates,
                             "alpha": self.settings.alpha,
                             "min_shift_ms": self.settings.min_shift_ms,
                             "min_shift_of_bound": self.settings.min_shift_of_bound},
                "regressions": [{"scenario": g.scenario, "label": g.label, **c.as_dict()}
                                for g, c in self.regressions],
                "groups": [group.as_dict() for group in self.groups]}


def trend(store: RunStore, settings: TrendSettings, by: str | None = None,
          scenario: str | None = None, compare: tuple[str, str] | None = None) -> TrendResult:
    """Group the store's runs (by a label: its latest value against the one before, or
    ``compare``'s two), choose each group's windows, read only their samples, judge."""
    settings.validate()
    groups = group_runs(store.runs(), by=by, scenario=scenario, compare=compare)
    for group in groups:
        choose_windows(group, settings)
    wanted = [i for group in groups for i in (*group.baseline_ids, *group.candidate_ids)]
    samples = store.samples(dict.fromkeys(wanted))
    for group in groups:
        judge_group(group, samples, settings)
    return TrendResult(redacted(store.url), settings, by, groups)


# --- the table --------------------------------------------------------------------------------


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def table(result: TrendResult) -> str:
    """Per group: its runs and verdicts, flakiness, settings changes, each sampled figure's
    comparison; then every regression by name."""
    if not result.groups:
        return f"store {result.store}: no runs"
    lines = []
    for group in result.groups:
        verdicts = ", ".join(f"{count} {verdict}" for verdict, count in
                             sorted(group.verdicts.items()))
        first, last = group.points[0], group.points[-1]
        lines.append(f"{group.name}: {len(group.points)} run(s) {_when(first.started_ms)} .. "
                     f"{_when(last.started_ms)}; {verdicts}; unknown {group.unknown_rate:.0%}")
        history = "".join(_verdict_mark(p.verdict) for p in group.points[-40:])
        lines.append(f"  verdicts (oldest first{', last 40' if len(group.points) > 40 else ''})"
                     f": {history}")
        for run_id, old, new in group.settings_changes[-5:]:
            lines.append(f"  settings changed at run {run_id}: {old or '-'} -> {new or '-'}")
        if group.compared is not None:
            key, before = group.compared
            lines.append(f"  compared by label: {key}={before} (baseline) against "
                         f"{key}={group.label} (candidates)")
        lines.append(f"  baseline runs {_ids(group.baseline_ids)}; candidates "
                     f"{_ids(group.candidate_ids)}")
        for comparison in group.comparisons:
            mark = "REGRESSION" if comparison.regression else comparison.status
            lines.append(f"  [{mark}] {comparison.text()}")
    regressions = result.regressions
    lines.append("")
    if regressions:
        lines.append(f"{len(regressions)} regression(s):")
        lines += [f"  {group.name}: {comparison.text()}" for group, comparison in regressions]
    else:
        lines.append("no regression")
    return "\n".join(lines)


def _verdict_mark(verdict: str) -> str:
    return {"pass": ".", "fail": "F", "unknown": "?", "aborted": "a", "error": "E"}.get(
        verdict, "x")


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids)) if ids else "none"


# --- JUnit ------------------------------------------------------------------------------------


def junit_document(result: TrendResult) -> str:
    """One testsuite per group, one testcase per figure compared: a ``<failure>`` for a
    regression, ``<skipped>`` for too few runs or no samples."""
    root = ET.Element("testsuites", name=f"{SUITE_PREFIX}.trend")
    totals = dict.fromkeys(("tests", "failures", "skipped"), 0)
    for group in result.groups:
        suite = ET.SubElement(root, "testsuite", name=f"{SUITE_PREFIX}.trend.{group.name}")
        counts = dict.fromkeys(totals, 0)
        for comparison in group.comparisons:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=f"{SUITE_PREFIX}.trend."
                                 f"{group.name}", name=comparison.figure, time="0")
            if comparison.regression:
                counts["failures"] += 1
                failure = ET.SubElement(case, "failure", type="Regression",
                                        message=f"{group.name} {comparison.text()}")
                failure.text = (f"baseline runs {_ids(comparison.baseline_runs)}; candidate "
                                f"runs {_ids(comparison.candidate_runs)}")
            elif comparison.status != "ok":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=comparison.text())
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("errors", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --- the page ---------------------------------------------------------------------------------


def _figure_svg(group: Group, name: str, salt: str) -> str:
    from matplotlib.figure import Figure

    points = [p for p in group.points if name in p.figures]
    figure = Figure(figsize=(7.5, 2.4), dpi=100)
    axes = figure.add_subplot()
    xs = list(range(len(points)))
    colours = ["#1f77b4" if p.verdict == "pass" else "#d62728" if p.verdict == "fail"
               else "#ff7f0e" for p in points]
    axes.plot(xs, [p.figures[name] for p in points], color="#9ca3af", linewidth=0.8)
    axes.scatter(xs, [p.figures[name] for p in points], c=colours, s=14, zorder=3)
    if name.startswith("recovery"):  # the bound is on fault to reap
        bounds = [p.figures.get(BOUND_FIGURE) for p in points]
        if any(b is not None for b in bounds):
            axes.step(xs, [float("nan") if b is None else b for b in bounds], where="mid",
                      color="#6b7280", linestyle="--", linewidth=1, label="recovery bound")
            axes.legend(fontsize=8, loc="upper left", frameon=False)
    for comparison in group.comparisons:  # recovery_p50_ms, _p99_ms, _max_ms: recovery's
        if not comparison.candidate_runs or not (
                name.startswith(f"{comparison.figure}_")
                or name == SAMPLE_PLOTS.get(comparison.kind)):
            continue
        index = {p.run_id: i for i, p in enumerate(points)}
        marked = [index[i] for i in comparison.candidate_runs if i in index]
        if marked:
            axes.axvspan(min(marked) - 0.5, max(marked) + 0.5,
                         color="#fca5a5" if comparison.regression else "#e5e7eb", alpha=0.6,
                         zorder=0)
            if comparison.regression:
                axes.text(0.99, 0.03, f"regression: shift {comparison.shift_ms:+.0f} ms, "
                          f"p={comparison.p_value:.2g}", transform=axes.transAxes, fontsize=8,
                          color="#b91c1c", ha="right", va="bottom")
    for run_id, _old, _new in group.settings_changes:
        at = next((i for i, p in enumerate(points) if p.run_id == run_id), None)
        if at is not None:
            axes.axvline(at - 0.5, color="#7c3aed", linewidth=0.8, linestyle=":")
    axes.set_title(f"{name} ({len(points)} runs, oldest first; dotted: settings changed)",
                   fontsize=9)
    axes.set_xticks(xs[::max(1, len(xs) // 12)],
                    [str(points[i].run_id) for i in xs[::max(1, len(xs) // 12)]], fontsize=7)
    axes.set_xlabel("run id", fontsize=8)
    axes.tick_params(labelsize=8)
    axes.spines["top"].set_visible(False)
    axes.spines["right"].set_visible(False)
    return figure_svg(figure, salt)


def render_html(result: TrendResult) -> str:
    """A self-contained page: per group its comparisons and one plot per figure over time."""
    escape = html.escape
    sections = []
    for number, group in enumerate(result.groups):
        rows = "".join(
            f"<tr class='{'bad' if c.regression else ''}'><td>{escape(c.figure)}</td>"
            f"<td>{escape(c.status)}</td><td>{escape(c.text())}</td></tr>"
            for c in group.comparisons)
        plots = "".join(_figure_svg(group, name, f"trend-{number}-{name}")
                        for name in figure_names([group]))
        changes = "; ".join(f"run {run_id}: {old or '-'} → {new or '-'}"
                            for run_id, old, new in group.settings_changes) or "none"
        sections.append(
            f"<h2>{escape(group.name)}</h2><p>{len(group.points)} runs: "
            f"{escape(', '.join(f'{n} {v}' for v, n in sorted(group.verdicts.items())))}; "
            f"unknown {group.unknown_rate:.0%}. Settings changes: {escape(changes)}.</p>"
            f"<table><tr><th>figure</th><th>status</th><th>baseline vs candidates</th></tr>"
            f"{rows}</table>{why_section(group, number)}<div class='plots'>{plots}</div>")
    regressions = result.regressions
    summary = (f"{len(regressions)} regression(s): " + "; ".join(
        f"{g.name} {c.figure}" for g, c in regressions) if regressions else "no regression")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>trend {escape(result.store)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 1100px; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; }}
tr.bad td {{ background: #fdd; }}
.plots svg {{ width: 100%; height: auto; }}
</style></head><body>
<h1>Trend of {escape(result.store)}</h1>
<p><strong>{escape(summary)}</strong>. The latest {result.settings.candidates} judged run(s) of
each scenario against the {result.settings.baseline} passing run(s) before them: a one-sided
Mann-Whitney U test on the pooled samples, towards the worse (alarm at p &lt;
{result.settings.alpha:g}), and a median shift of at least each figure's threshold (recovery
figures: max({result.settings.min_shift_ms:g} ms, {result.settings.min_shift_of_bound:.0%} of
the recovery bound, twice the run-to-run noise); the pace's: its own floor and twice the
noise; docs/store.md). Points: blue pass, red fail,
orange otherwise; the shaded span is the candidates (red: a regression).</p>
{''.join(sections)}
</body></html>
"""
