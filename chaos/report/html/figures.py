"""The report's figures: matplotlib drawings as inline SVG (text stays text, no external reference).

matplotlib is imported inside the functions: only drawing a page pays for it.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from typing import Any

from chaos.check.verdict import StrandedLease
from chaos.history.events import Event
from chaos.history.windows import FaultWindow
from chaos.report.html.analysis import Timeline, job_leases, rate_series, sample_backlog
from chaos.report.terms import BoundFormula
from chaos.scenario.faults import FAULT_COLORS as KIND_COLORS
from chaos.scenario.faults import GREY

MAX_FAULT_LABELS = 8  # fault names written on the timeline; beyond that only the bands
MAX_LABEL_ROWS = 4  # fault names close in time stack in rows, at most this many
LABEL_CHAR_PT = 5.0  # a generous width of one 8 pt character
LABEL_ROW_PT = 10.0

# Each fault kind's colour is declared with the kind; "crash" is the runner's own fault event
# (a worker killed by a poison job), not a kind a scenario plans.
FAULT_COLORS = {**KIND_COLORS, "crash": "#e377c2"}
HOLDER_COLOR, OTHER_COLOR = "#f28e2b", "#4e79a7"
STRAY_MARKERS = {  # (marker, face, edge) for calls made outside the live lease
    "complete_rejected": ("X", "black", "black"),
    "extend_rejected": ("o", "none", "black"),
    "complete": ("D", "#cf222e", "black"),  # accepted although stale: a fencing bug
    "extend": ("D", "#cf222e", "black"),
}


def figure_svg(figure: Any, salt: str, responsive: bool = True) -> str:
    """A matplotlib figure as an inline ``<svg>`` element: text stays text, no metadata and no
    external reference, ids salted per figure (several SVGs share one page's id space).
    ``responsive``: drop the fixed size so the page scales the drawing to its column."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        figure.savefig(buffer, format="svg", bbox_inches="tight",
                       metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    if responsive:
        text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1', text, count=1)
    return text


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    return figure


def _style(ax: Any) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.grid(True, axis="y", color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=9)


def _shade_faults(ax: Any, timeline: Timeline, label: bool) -> None:
    seen: set[str] = set()
    for span in timeline.faults:
        color = FAULT_COLORS.get(span.kind, GREY)
        name = span.kind if label and span.kind not in seen else None
        seen.add(span.kind)
        if span.end_ts is None:  # a kill has no heal: a line where the worker died
            ax.axvline(timeline.s(span.start_ts), color=color, linewidth=1.6, label=name)
        else:
            ax.axvspan(timeline.s(span.start_ts), timeline.s(span.end_ts), color=color,
                       alpha=0.16, linewidth=0, label=name)


def label_rows(starts: list[float], widths: list[float],
               rows: int = MAX_LABEL_ROWS) -> list[int | None]:
    """A row for each label (start and width in the same units), so that no two on a row
    overlap: the lowest free row, in start order; None when every row is taken there."""
    ends: list[float] = []  # per row: where its last label ends
    placed: list[int | None] = [None] * len(starts)
    for index in sorted(range(len(starts)), key=lambda i: starts[i]):
        row = next((r for r, end in enumerate(ends) if end <= starts[index]), None)
        if row is None and len(ends) < rows:
            row = len(ends)
            ends.append(0.0)
        if row is not None:
            ends[row] = starts[index] + widths[index]
            placed[index] = row
    return placed


def timeline_svg(timeline: Timeline) -> str:
    figure = _figure(11, 5.2)
    rates_ax, backlog_ax = figure.subplots(2, 1, sharex=True, gridspec_kw={"hspace": 0.12})
    duration_ms = max(1, timeline.end_ts - timeline.t0)
    bin_ms = max(250, round(duration_ms / 80 / 250) * 250)
    for kind, color, label in (("claim", "#4e79a7", "claims/s"),
                               ("complete", "#59a14f", "completes/s"),
                               ("reap", "#e15759", "reaps/s")):
        xs, ys = rate_series(timeline.counts.get(kind, Counter()), timeline.t0,
                             timeline.end_ts, bin_ms)
        rates_ax.step(xs, ys, where="post", color=color, linewidth=1.5, label=label)
    rejected = (timeline.counts.get("complete_rejected", Counter())
                + timeline.counts.get("extend_rejected", Counter()))
    if rejected:
        xs, ys = rate_series(rejected, timeline.t0, timeline.end_ts, bin_ms)
        rates_ax.step(xs, ys, where="post", color="#222222", linewidth=1, linestyle=":",
                      label="rejected stale calls/s")
    rates_ax.set_ylabel(f"per second\n({bin_ms} ms bins)", fontsize=9)
    if timeline.backlog:
        samples = sample_backlog(timeline.backlog, timeline.t0, timeline.end_ts)
        xs = [timeline.s(ts) for ts, _, _ in samples]
        backlog_ax.step(xs, [p for _, p, _ in samples], where="post",
                        color="#b07aa1", linewidth=1.5, label="pending")
        backlog_ax.step(xs, [a for _, _, a in samples], where="post",
                        color="#76b7b2", linewidth=1.5, label="active (leased)")
    backlog_ax.set_ylabel("jobs", fontsize=9)
    backlog_ax.set_xlabel("seconds since the load started (Valkey clock)", fontsize=9)
    for ax in (rates_ax, backlog_ax):
        _style(ax)
        _shade_faults(ax, timeline, label=ax is backlog_ax)
        for name, ts in timeline.phases:
            if name in ("warmup", "end"):
                continue
            ax.axvline(timeline.s(ts), color="#6b7280", linestyle=":", linewidth=1)
        ax.set_xlim(min(0.0, timeline.s(timeline.phases[0][1]) if timeline.phases else 0.0),
                    timeline.s(timeline.end_ts))
        ax.set_ylim(bottom=0)
    for name, ts in timeline.phases:
        if name in ("end",):
            continue
        rates_ax.annotate(name, (timeline.s(ts), 1.0), xycoords=("data", "axes fraction"),
                          xytext=(3, 2), textcoords="offset points", fontsize=9,
                          color="#374151", va="bottom")
    labelled = timeline.faults if len(timeline.faults) <= MAX_FAULT_LABELS else []
    # more would overlap into noise: the faults table names them all
    left, right = rates_ax.get_xlim()
    axes_pt = rates_ax.get_position().width * figure.get_figwidth() * 72
    seconds_per_pt = (right - left) / axes_pt if axes_pt else 0.0
    texts = [f"{span.fault_id} {span.kind} {span.worker}" for span in labelled]
    rows = label_rows([timeline.s(span.start_ts) for span in labelled],
                      [(3 + len(text) * LABEL_CHAR_PT) * seconds_per_pt for text in texts])
    for span, text, row in zip(labelled, texts, rows, strict=True):
        if row is None:
            continue
        rates_ax.annotate(text, (timeline.s(span.start_ts), 0.97),
                          xycoords=("data", "axes fraction"),
                          xytext=(3, -2 - row * LABEL_ROW_PT), textcoords="offset points",
                          fontsize=8, color=FAULT_COLORS.get(span.kind, "#555555"), va="top")
    rates_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    backlog_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return figure_svg(figure, "timeline")


def recovery_svg(stranded: list[StrandedLease], bound: BoundFormula) -> str:
    """Empirical distribution (ECDF) of fault → reap / re-claim / re-complete, with the bound
    the verdict judged: the queue's own formula, then its tolerance."""
    figure = _figure(11, 3.4)
    ax = figure.subplots()
    series = (("fault → reap", [s.reap_ts - s.fault_ts for s in stranded if s.reap_ts], "#e15759"),
              ("fault → re-claim", [s.reclaim_ts - s.fault_ts for s in stranded if s.reclaim_ts],
               "#4e79a7"),
              ("fault → re-complete",
               [s.recomplete_ts - s.fault_ts for s in stranded if s.recomplete_ts], "#59a14f"))
    longest = 0
    for label, values, color in series:
        if not values:
            continue
        ordered = sorted(values)
        longest = max(longest, ordered[-1])
        ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step([0, *ordered], [0, *ys], where="post", color=color, linewidth=1.8,
                label=f"{label} (n={len(ordered)})")
    # the formula itself is in the table below the figure (a queue's own can be long)
    ax.axvline(bound.base_ms, color="#111827", linewidth=1.5,
               label=f"the queue's bound = {bound.base_ms} ms")
    ax.axvline(bound.bound_ms, color="#111827", linewidth=1.2, linestyle="--",
               label=f"+ tolerance = {bound.bound_ms} ms")
    never = sum(1 for s in stranded if s.reap_ts is None)
    if never:
        ax.annotate(f"{never} stranded lease(s) never reaped", (0.99, 0.06),
                    xycoords="axes fraction", ha="right", color="#cf222e", fontsize=10)
    ax.set_xlim(0, max(longest, bound.bound_ms) * 1.08)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("ms after the fault", fontsize=9)
    ax.set_ylabel("fraction of stranded leases", fontsize=9)
    _style(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return figure_svg(figure, "recovery")


def lease_chart_svg(span: FaultWindow, jobs: list[str], by_job: dict[str, list[Event]],
                    bound: BoundFormula) -> str:
    """One row per job the faulted worker held: its lease until the deadline, the lapse until
    the reap, the re-claim by another worker, and any rejected stale call; x = s from the fault."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    figure = _figure(11, 1.5 + 0.34 * len(jobs))
    ax = figure.subplots()

    def x(ts: int) -> float:
        return (ts - span.start_ts) / 1000

    base = bound.base_ms / 1000  # the queue's own bound (lease + reap, or BullMQ's)
    color = FAULT_COLORS.get(span.kind, GREY)
    right = (bound.bound_ms / 1000) + 0.5
    left = -0.5
    drawn: set[str] = set()  # event kinds drawn, for the legend
    for row, job in enumerate(jobs):
        bars, stray = job_leases(by_job.get(job, []))
        for bar in bars:
            if bar.end is not None and x(bar.end) < -2 * base:
                continue  # an older lease long before the fault: not part of this story
            holder = bar.worker == span.worker
            valid_until = min(bar.deadline, bar.end) if bar.end is not None else bar.deadline
            left = min(left, x(bar.start) - 0.1)
            ax.barh(row, x(valid_until) - x(bar.start), left=x(bar.start), height=0.5,
                    color=HOLDER_COLOR if holder else OTHER_COLOR, alpha=0.9)
            drawn.add("holder" if holder else "other")
            if not holder:
                ax.annotate(bar.worker, (x(bar.start), row), xytext=(2, 0),
                            textcoords="offset points", fontsize=7, color="white",
                            va="center")
            for extend in bar.extends:
                ax.plot([x(extend)] * 2, [row - 0.25, row + 0.25], color="white", linewidth=1)
            if bar.end is not None and bar.end > bar.deadline:  # lapsed: waiting for the reap
                drawn.add("lapsed")
                ax.plot([x(bar.deadline), x(bar.end)], [row, row], color=HOLDER_COLOR,
                        linestyle=":", linewidth=1.5)
            if bar.outcome:
                drawn.add(f"{bar.outcome}_ok")
            if bar.outcome == "reap":
                ax.plot(x(bar.end or 0), row, marker="x", color="#cf222e", markersize=9,
                        markeredgewidth=2)
            elif bar.outcome == "complete":
                ax.plot(x(bar.end or 0), row, marker="D", color="#1a7f37", markersize=5)
            elif bar.outcome == "dead":
                ax.plot(x(bar.end or 0), row, marker="s", color="#6e2b2b", markersize=7)
            right = max(right, x(bar.end if bar.end is not None else bar.deadline) + 0.2)
        for event in stray:
            drawn.add(event.type)
            marker, face, edge = STRAY_MARKERS[event.type]
            ax.plot(x(event.ts), row, marker=marker, markerfacecolor=face, markeredgecolor=edge,
                    markersize=9 if event.type in ("complete", "extend") else 8,
                    markeredgewidth=1.5)
            right = max(right, x(event.ts) + 0.3)
    healed = x(span.end_ts) if span.end_ts is not None else None
    if healed is not None:
        ax.axvspan(0, healed, color=color, alpha=0.14, linewidth=0)
    ax.axvline(0, color=color, linewidth=1.6)
    ax.axvline(base, color="#111827", linewidth=1.2)
    ax.axvline(bound.bound_ms / 1000, color="#111827", linewidth=1.0, linestyle="--")
    ax.set_yticks(range(len(jobs)), jobs, fontsize=8)
    ax.set_ylim(len(jobs) - 0.5, -0.5)
    ax.set_xlim(max(left, -2 * base), right)
    ax.set_xlabel(f"seconds from the fault ({span.fault_id}: {span.kind} {span.worker})",
                  fontsize=9)
    _style(ax)
    ax.grid(True, axis="x", color="#e5e7eb", linewidth=0.8)
    legend = (  # the legend names only what this chart draws
        ("holder", Patch(color=HOLDER_COLOR,
                         label=f"lease held by {span.worker} (until its deadline)")),
        ("lapsed", Line2D([], [], color=HOLDER_COLOR, linestyle=":",
                          label="lapsed, awaiting the reap")),
        ("reap_ok", Line2D([], [], marker="x", color="#cf222e", linestyle="",
                           markeredgewidth=2, label="reaped")),
        ("other", Patch(color=OTHER_COLOR, label="re-claimed by another worker")),
        ("complete_ok", Line2D([], [], marker="D", color="#1a7f37", linestyle="",
                               label="accepted complete")),
        ("dead_ok", Line2D([], [], marker="s", color="#6e2b2b", linestyle="",
                           label="dead-lettered (max_stalls)")),
    )
    handles = [handle for kind, handle in legend if kind in drawn]
    for kind, label in (("complete_rejected", "stale complete rejected"),
                        ("extend_rejected", "stale extend rejected"),
                        ("complete", "stale complete ACCEPTED (violation)"),
                        ("extend", "stale extend ACCEPTED (violation)")):
        if kind in drawn:
            marker, face, edge = STRAY_MARKERS[kind]
            handles.append(Line2D([], [], marker=marker, markerfacecolor=face,
                                  markeredgecolor=edge, linestyle="", label=label))
    handles += [
        Patch(color=color, alpha=0.3, label=f"{span.kind} (fault → heal)") if healed is not None
        else Line2D([], [], color=color, label=f"{span.kind} (never healed)"),
        Line2D([], [], color="#111827", label="the queue's bound (table below)"),
        Line2D([], [], color="#111827", linestyle="--", label="+ tolerance (the bound)"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)
    return figure_svg(figure, f"lease-{span.fault_id}")


