"""The trend page's "why" for a flagged figure (``echomq-chaos trend --html``): the baseline's
and the candidates' samples side by side, the shift against the alarm threshold (and the noise
it was raised to), and each run of the two windows with its labels."""

from __future__ import annotations

import html
import random
from datetime import UTC, datetime

from chaos.report.html import figure_svg
from chaos.store.trend import NOISE_FACTOR, Comparison, Group


def samples_svg(comparison: Comparison, salt: str) -> str:
    """The two windows' pooled samples as strips (a dot a sample, jittered), each with its
    median; the baseline's median moved by the alarm threshold, dashed: where the candidates'
    shift had to reach."""
    from matplotlib.figure import Figure

    base, cand = comparison.baseline_values, comparison.candidate_values
    figure = Figure(figsize=(7.5, 1.9), dpi=100)
    axes = figure.add_subplot()
    rng = random.Random(0)  # the same jitter each time: the page is reproducible
    windows = ((base, comparison.baseline_p50_ms, "#1f77b4"),
               (cand, comparison.candidate_p50_ms, "#d62728"))
    for row, (values, middle, colour) in enumerate(windows):
        axes.scatter(values, [row + rng.uniform(-0.18, 0.18) for _ in values], s=6,
                     color=colour, alpha=0.5, linewidths=0)
        if middle is not None:
            axes.plot([middle, middle], [row - 0.3, row + 0.3], color=colour, linewidth=2)
    if comparison.baseline_p50_ms is not None:
        alarm = comparison.baseline_p50_ms + comparison.worse * comparison.threshold_ms
        axes.axvline(alarm, color="#6b7280", linestyle="--", linewidth=1)
        axes.text(alarm, 1.45, " baseline median + alarm threshold" if comparison.worse > 0
                  else " baseline median - alarm threshold", fontsize=7, color="#374151",
                  va="top")
    axes.set_yticks([0, 1], [f"baseline ({len(comparison.baseline_runs)} runs)",
                             f"candidates ({len(comparison.candidate_runs)} runs)"], fontsize=8)
    axes.set_ylim(-0.5, 1.5)
    unit = f" ({comparison.unit})" if comparison.unit else ""
    axes.set_xlabel(f"{comparison.figure}{unit}: every sample tested", fontsize=8)
    axes.tick_params(labelsize=8)
    axes.spines["top"].set_visible(False)
    axes.spines["right"].set_visible(False)
    figure.tight_layout()
    return figure_svg(figure, salt)


def shift_words(comparison: Comparison) -> str:
    """The shift against its threshold, and what the threshold is made of."""
    unit = f" {comparison.unit}" if comparison.unit else ""
    noise = NOISE_FACTOR * comparison.noise_ms
    made = ("twice the run-to-run noise" if noise >= comparison.threshold_ms
            else "the figure's floor")
    return (f"shift {comparison.shift_ms:+.1f}{unit} (the median of every candidate - baseline "
            f"difference) against an alarm threshold of {comparison.threshold_ms:.1f}{unit} "
            f"({made}; one baseline run alone sits up to {comparison.noise_ms:.1f}{unit} from "
            f"the others); Mann-Whitney p = {comparison.p_value:.2g}, alarm below the "
            f"significance level")


def runs_table(group: Group) -> str:
    """Each run of the two windows: its part, verdict, start, settings hash and labels."""
    escape = html.escape
    by_id = {point.run_id: point for point in group.points}
    rows = []
    for part, ids in (("baseline", group.baseline_ids), ("candidate", group.candidate_ids)):
        for run_id in ids:
            point = by_id[run_id]
            when = datetime.fromtimestamp(point.started_ms / 1000, UTC).strftime(
                "%Y-%m-%d %H:%M:%S")
            labels = ", ".join(f"{key}={value}" for key, value in sorted(point.labels.items()))
            rows.append(f"<tr><td>{run_id}</td><td>{part}</td><td>{escape(point.verdict)}</td>"
                        f"<td>{when}</td><td>{escape(point.settings_hash or '-')}</td>"
                        f"<td>{escape(labels or '-')}</td></tr>")
    return ("<table><tr><th>run</th><th>window</th><th>verdict</th><th>started (UTC)</th>"
            "<th>settings</th><th>labels</th></tr>" + "".join(rows) + "</table>")


def why_section(group: Group, number: int) -> str:
    """For each flagged figure of the group: its samples, its shift and threshold; then the
    windows' runs with their labels. Empty when nothing was flagged."""
    flagged = group.regressions
    if not flagged:
        return ""
    parts = []
    for comparison in flagged:
        parts.append(f"<h3>Why {html.escape(comparison.figure)} is flagged</h3>"
                     f"<p>{html.escape(shift_words(comparison))}.</p>"
                     + samples_svg(comparison, f"trend-why-{number}-{comparison.kind}"))
    return "".join(parts) + "<h3>The runs compared</h3>" + runs_table(group)
