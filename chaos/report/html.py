"""report.html: the page a person reads after a run. Self-contained: inline SVG, inline CSS, no
script and no network, so it opens the same from a CI artifact, a mail attachment or a laptop.

Sections, top to bottom: the verdict and the invariant table; the timeline (faults as bands from
apply to heal, claim/complete/reap rates, the pending and active backlog); the recovery latency
distribution against the bound; a lease chart around each fault (the lease that lapsed, the reap,
the re-claim, a rejected stale complete); the load table (``report.json["load"]``).

Everything drawn comes from ``report.json`` (as a dict) and the history: the backlog and the rates
are replayed from the history's events, on the Valkey clock, so they line up with the faults.
"""

from __future__ import annotations

import html
import io
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from chaos.check.checker import WHAT_IT_CHECKS, StrandedLease, Verdict, lease_deadline
from chaos.history.events import Event, replay_history
from chaos.names import INVARIANTS
from chaos.report.junit import offending_jobs

T = TypeVar("T")
MAX_FAULT_CHARTS = 6  # a schedule that repeats every second would otherwise draw dozens
MAX_LEASE_ROWS = 12
MAX_FAULT_LABELS = 8  # fault names written on the timeline; beyond that only the bands
MAX_FAULT_ROWS = 12  # faults listed before the table folds away

FAULT_COLORS = {"kill": "#d62728", "crash": "#e377c2", "pause": "#9467bd",
                "partition": "#8c564b", "latency": "#ff7f0e", "clock_skew": "#17becf"}
HOLDER_COLOR, OTHER_COLOR = "#f28e2b", "#4e79a7"
STRAY_MARKERS = {  # (marker, face, edge) for calls made outside the live lease
    "complete_rejected": ("X", "black", "black"),
    "extend_rejected": ("o", "none", "black"),
    "complete": ("D", "#cf222e", "black"),  # accepted although stale: a fencing bug
    "extend": ("D", "#cf222e", "black"),
}
BACKLOG_POINTS = 400  # the backlog is drawn as a poll would see it, not every flicker
VERDICT_COLORS = {"pass": "#1a7f37", "fail": "#cf222e", "aborted": "#9a6700",
                  "error": "#6e7781"}


# --- what the history says over time --------------------------------------------------------
@dataclass
class FaultSpan:
    fault_id: str
    kind: str
    worker: str
    start_ts: int
    end_ts: int | None  # the heal; None for a kill (never healed)


RATE_BUCKET_MS = 50  # the history is counted in these; the plot re-bins them
BACKLOG_BUCKET_MS = 10  # at most one backlog state kept per bucket (memory: duration, not jobs)


@dataclass
class Timeline:
    """What one streamed pass over the history keeps for the page: small whatever the run's size
    (counts per 50 ms, one backlog state per 10 ms, the faults, phases, and a few reaps)."""

    t0: int = 0  # server ms of time zero: the start of the load (the warmup phase)
    end_ts: int = 0
    events: int = 0
    run: Event | None = None
    phases: list[tuple[str, int]] = field(default_factory=list)  # (name, start ts)
    faults: list[FaultSpan] = field(default_factory=list)
    backlog: list[tuple[int, int, int]] = field(default_factory=list)  # (ts, pending, active)
    counts: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    # fault id -> jobs of the faulted worker reaped during the fault or within the bound after
    reaped_during: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def s(self, ts: int) -> float:
        """Seconds since time zero."""
        return (ts - self.t0) / 1000


def build_timeline(events: Iterable[Event], bound_ms: int = 0) -> Timeline:
    """Replay the history once: phases, fault spans, event counts by type over time, and the
    backlog (pending: enqueued or reaped, not yet claimed; active: claimed, not yet completed
    or reaped: sets as large as the backlog, not as the run)."""
    timeline = Timeline()
    first_ts: int | None = None
    warmup_ts: int | None = None
    pending: set[str] = set()
    active: set[str] = set()
    spans: dict[str, FaultSpan] = {}
    by_worker: dict[str, list[FaultSpan]] = defaultdict(list)
    for event in events:
        timeline.events += 1
        ts, kind, job = event.ts, event.type, event.job_id or ""
        if first_ts is None:
            first_ts = ts
        timeline.end_ts = max(timeline.end_ts, ts)
        timeline.counts[kind][ts // RATE_BUCKET_MS] += 1
        if kind == "run" and timeline.run is None:
            timeline.run = event
        elif kind == "phase":
            name = event.extra.get("phase", "?")
            timeline.phases.append((name, ts))
            if name == "warmup" and warmup_ts is None:
                warmup_ts = ts
        elif kind == "fault":
            span = FaultSpan(event.extra.get("fault_id", event.seq), event.extra.get("kind", "?"),
                             event.worker or "?", ts, None)
            spans[span.fault_id] = span
            by_worker[span.worker].append(span)
            timeline.faults.append(span)
        elif kind == "heal" and event.extra.get("fault_id") in spans:
            spans[event.extra["fault_id"]].end_ts = ts
        elif kind in ("enqueue", "claim", "complete", "reap", "dead"):
            if kind == "enqueue":
                pending.add(job)
            elif kind == "claim":
                pending.discard(job)
                active.add(job)
            elif kind in ("complete", "dead"):  # dead: past max_stalls, never pending again
                active.discard(job)
            else:
                active.discard(job)
                pending.add(job)
                for span in by_worker.get(event.worker or "", []):
                    until = (span.end_ts if span.end_ts is not None else ts) + bound_ms
                    jobs = timeline.reaped_during[span.fault_id]
                    if span.start_ts <= ts <= until and len(jobs) < MAX_LEASE_ROWS:
                        jobs.append(job)
            state = (ts, len(pending), len(active))
            backlog = timeline.backlog
            if backlog and backlog[-1][0] // BACKLOG_BUCKET_MS == ts // BACKLOG_BUCKET_MS:
                backlog[-1] = state
            else:
                backlog.append(state)
    timeline.t0 = warmup_ts if warmup_ts is not None else (first_ts or 0)
    return timeline


def rate_series(counts: Counter[int], t0: int, end_ts: int, bin_ms: int) -> tuple[list[float],
                                                                                  list[float]]:
    """Events per second in bins of ``bin_ms`` (x = bin start, seconds since t0)."""
    bins = max(1, -(-(end_ts - t0) // bin_ms))
    totals = [0] * bins
    for bucket, count in counts.items():
        index = (bucket * RATE_BUCKET_MS - t0) // bin_ms
        if 0 <= index < bins:
            totals[index] += count
    return ([i * bin_ms / 1000 for i in range(bins)], [c * 1000 / bin_ms for c in totals])


def sample_backlog(backlog: list[tuple[int, int, int]], t0: int, end_ts: int,
                   points: int = BACKLOG_POINTS) -> list[tuple[int, int, int]]:
    """The backlog as a poll every (duration / points) ms would see it: the state after the
    last event at or before each instant (a job enqueued and claimed in the same millisecond
    never shows as pending, as it never would to a poller)."""
    step = max(BACKLOG_BUCKET_MS, (end_ts - t0) // points)
    samples: list[tuple[int, int, int]] = []
    index, state = 0, (0, 0)
    for at in range(t0, end_ts + step, step):
        while index < len(backlog) and backlog[index][0] <= at:
            state = backlog[index][1:]
            index += 1
        samples.append((at, *state))
    return samples


def events_of_jobs(events: Iterable[Event], jobs: set[str]) -> dict[str, list[Event]]:
    """A second pass: every event of the few jobs the lease charts draw."""
    found: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.job_id in jobs:
            found[event.job_id].append(event)
    return found


# --- figures ------------------------------------------------------------------------------
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
        color = FAULT_COLORS.get(span.kind, "#7f7f7f")
        name = span.kind if label and span.kind not in seen else None
        seen.add(span.kind)
        if span.end_ts is None:  # a kill has no heal: a line where the worker died
            ax.axvline(timeline.s(span.start_ts), color=color, linewidth=1.6, label=name)
        else:
            ax.axvspan(timeline.s(span.start_ts), timeline.s(span.end_ts), color=color,
                       alpha=0.16, linewidth=0, label=name)


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
    for span in labelled:  # more would overlap into noise: the faults table names them all
        rates_ax.annotate(f"{span.fault_id} {span.kind} {span.worker}",
                          (timeline.s(span.start_ts), 0.97), xycoords=("data", "axes fraction"),
                          xytext=(3, -2), textcoords="offset points", fontsize=8,
                          color=FAULT_COLORS.get(span.kind, "#555555"), va="top")
    rates_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    backlog_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return figure_svg(figure, "timeline")


def recovery_svg(stranded: list[StrandedLease], bound: dict[str, Any]) -> str:
    """Empirical distribution (ECDF) of fault → reap / re-claim / re-complete, with the bound."""
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
    lease_reap = bound["lease_ms"] + bound["reap_interval_ms"]
    ax.axvline(lease_reap, color="#111827", linewidth=1.5,
               label=f"lease_ms + reap_interval_ms = {lease_reap} ms")
    ax.axvline(bound["bound_ms"], color="#111827", linewidth=1.2, linestyle="--",
               label=f"+ tolerance {bound['tolerance_ms']} ms = {bound['bound_ms']} ms")
    never = sum(1 for s in stranded if s.reap_ts is None)
    if never:
        ax.annotate(f"{never} stranded lease(s) never reaped", (0.99, 0.06),
                    xycoords="axes fraction", ha="right", color="#cf222e", fontsize=10)
    ax.set_xlim(0, max(longest, bound["bound_ms"]) * 1.08)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("ms after the fault", fontsize=9)
    ax.set_ylabel("fraction of stranded leases", fontsize=9)
    _style(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    return figure_svg(figure, "recovery")


@dataclass
class _LeaseBar:
    worker: str
    start: int
    deadline: int
    end: int | None = None
    outcome: str = ""  # complete | reap | "" (still open at the end of the history)
    extends: list[int] = field(default_factory=list)


def _job_leases(job_events: list[Event]) -> tuple[list[_LeaseBar], list[Event]]:
    """A job's leases (claim to complete or reap) and the calls outside a live lease."""
    bars: list[_LeaseBar] = []
    live: dict[int, _LeaseBar] = {}
    stray: list[Event] = []
    for event in job_events:
        attempt = event.attempt or 0
        if event.type == "claim":
            bar = _LeaseBar(event.worker or "?", event.ts, lease_deadline(event))
            bars.append(bar)
            live[attempt] = bar
        elif event.type == "extend" and attempt in live:
            live[attempt].deadline = lease_deadline(event)
            live[attempt].extends.append(event.ts)
        elif event.type in ("complete", "reap", "dead") and attempt in live:
            bar = live.pop(attempt)
            bar.end, bar.outcome = event.ts, event.type
        elif event.type.endswith("_rejected") or event.type in ("complete", "extend"):
            stray.append(event)  # rejected, or accepted although not the live lease (a bug)
    return bars, stray


def lease_chart_svg(span: FaultSpan, jobs: list[str], by_job: dict[str, list[Event]],
                    bound: dict[str, Any]) -> str:
    """One row per job the faulted worker held: its lease until the deadline, the lapse until
    the reap, the re-claim by another worker, and any rejected stale call; x = s from the fault."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    figure = _figure(11, 1.5 + 0.34 * len(jobs))
    ax = figure.subplots()

    def x(ts: int) -> float:
        return (ts - span.start_ts) / 1000

    lease_reap = (bound["lease_ms"] + bound["reap_interval_ms"]) / 1000
    color = FAULT_COLORS.get(span.kind, "#7f7f7f")
    right = (bound["bound_ms"] / 1000) + 0.5
    left = -0.5
    drawn: set[str] = set()  # event kinds drawn, for the legend
    for row, job in enumerate(jobs):
        bars, stray = _job_leases(by_job.get(job, []))
        for bar in bars:
            if bar.end is not None and x(bar.end) < -2 * lease_reap:
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
    ax.axvline(lease_reap, color="#111827", linewidth=1.2)
    ax.axvline(bound["bound_ms"] / 1000, color="#111827", linewidth=1.0, linestyle="--")
    ax.set_yticks(range(len(jobs)), jobs, fontsize=8)
    ax.set_ylim(len(jobs) - 0.5, -0.5)
    ax.set_xlim(max(left, -2 * lease_reap), right)
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
        Line2D([], [], color="#111827", label="lease + reap interval"),
        Line2D([], [], color="#111827", linestyle="--", label="+ tolerance (the bound)"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)
    return figure_svg(figure, f"lease-{span.fault_id}")


def fault_jobs(span: FaultSpan, stranded: list[StrandedLease],
               timeline: Timeline) -> tuple[list[str], int]:
    """The jobs drawn for one fault: the leases it stranded, then leases of that worker reaped
    while the fault lasted (needless redeliveries under a slowing fault); capped."""
    jobs: dict[str, None] = {}
    for item in stranded:
        if item.fault_id == span.fault_id:
            jobs.setdefault(item.job_id, None)
    for job in timeline.reaped_during.get(span.fault_id, []):
        jobs.setdefault(job, None)
    names = list(jobs)
    return names[:MAX_LEASE_ROWS], max(0, len(names) - MAX_LEASE_ROWS)


# --- the page -----------------------------------------------------------------------------
CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:#1f2328;background:#f6f8fa}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
header.verdict{display:flex;align-items:center;gap:18px;flex-wrap:wrap;background:#fff;
 border:1px solid #d0d7de;border-left:10px solid var(--verdict);border-radius:8px;
 padding:14px 18px}
.badge{font-size:26px;font-weight:700;color:#fff;background:var(--verdict);padding:4px 16px;
 border-radius:6px;letter-spacing:.04em}
header h1{font-size:22px;margin:0}
header .sub{color:#57606a;font-size:13px}
nav{margin:10px 0 4px;font-size:13px}
nav a{color:#0969da;margin-right:14px;text-decoration:none}
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:12px 18px;
 margin-top:14px}
h2{font-size:17px;margin:4px 0 10px}
h3{font-size:14px;margin:14px 0 4px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(140px,1fr));gap:10px;
 margin-top:12px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:8px 12px}
.card b{display:block;font-size:20px}
.card b.bad{color:#cf222e}
.card span{color:#57606a;font-size:12px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eaeef2;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:700}.bad{color:#cf222e;font-weight:700}
.warn{color:#9a6700;font-weight:700}
.muted{color:#57606a}
summary{cursor:pointer;color:#0969da;margin:4px 0}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:1px 4px;
 border-radius:4px;word-break:break-all}
.figure svg{width:100%;height:auto;display:block}
.error{background:#fff1f0;border:1px solid #ffcecb;padding:8px 12px;border-radius:6px;
 white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:12px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _ms(value: Any) -> str:
    return "–" if value is None else f"{value} ms"


def _rel_s(ts: int | None, t0: int) -> str:
    return "–" if ts is None else f"+{(ts - t0) / 1000:.2f} s"


def _invariant_table(report: dict[str, Any], t0: int) -> str:
    invariants = report.get("invariants") or {}
    report_only = set(report.get("report_only") or ())
    rows = []
    for name in [*INVARIANTS, *(n for n in invariants if n not in INVARIANTS)]:
        if name not in invariants:
            continue
        result = invariants[name]
        if result.get("judged") is False:
            status = '<span class="muted">not judged (run aborted)</span>'
        elif not result["ok"] and name in report_only:
            status = '<span class="warn">FAIL</span><br><span class="muted">report only</span>'
        else:
            status = ('<span class="ok">ok</span>' if result["ok"]
                      else '<span class="bad">FAIL</span>')
        figures = ""
        if name == "recovery_bound":
            figures = (f"{result.get('stranded', 0)} stranded, {result.get('count', 0)} reaped; "
                       f"max {_ms(result.get('max_ms'))} vs bound {_ms(result.get('bound_ms'))}")
        elif name == "no_loss":
            figures = (f"enqueued {result.get('enqueued')}, completed {result.get('completed')}, "
                       f"lost {result.get('lost')}")
        elif name == "no_double_completion":
            figures = f"double-completed {result.get('double_completed', 0)}"
        elif name == "exclusive_lease" and result.get("examples"):
            ops = Counter(str(example.get("op", "?")) for example in result["examples"])
            figures = "accepted outside the live lease: " + ", ".join(
                f"{op} ×{count}" for op, count in ops.most_common()) + (
                " (in the examples shown)" if result["violations"] > len(result["examples"])
                else "")
        elif name == "no_premature_reap" and result.get("examples"):
            early = [int(example["early_ms"]) for example in result["examples"]
                     if "early_ms" in example]
            figures = (f"up to {max(early)} ms before the deadline" if early
                       else "reaped a lease that was not live")
        jobs = offending_jobs(result)
        shown = ", ".join(f"<code>{_e(job)}</code>" for job in jobs[:6])
        if result.get("violations", 0) > len(jobs[:6]) and jobs:
            shown += f' <span class="muted">(+{result["violations"] - len(jobs[:6])} more)</span>'
        if not jobs and result.get("examples"):
            shown = f"<code>{_e(result['examples'][0])}</code>"
        rows.append(
            f"<tr><td><b>{_e(name)}</b><br><span class='muted'>{_e(WHAT_IT_CHECKS.get(name, ''))}"
            f"</span></td><td>{status}</td><td class='num'>{result.get('violations', 0)}</td>"
            f"<td class='num'>{_rel_s(result.get('first_violation_ts'), t0)}</td>"
            f"<td>{_e(figures)}</td><td>{shown or '–'}</td></tr>")
    if not rows:
        return "<p class='muted'>No verdict: the history could not be checked.</p>"
    return ("<table><tr><th>invariant</th><th>result</th><th class='num'>violations</th>"
            "<th class='num'>first seen</th><th>figures</th><th>offending jobs</th></tr>"
            + "".join(rows) + "</table>")


def _cards(report: dict[str, Any]) -> str:
    if "jobs" not in report:
        return ""
    jobs, bound = report["jobs"], report["invariants"]["recovery_bound"]
    redeliveries = report["redeliveries"]
    rejected = report.get("rejected") or {}
    slowest = bound.get("max_ms")
    cards = [  # (figure, what it is, is it bad news)
        (f"{jobs['completed']} / {jobs['enqueued']}", "jobs completed / enqueued",
         jobs["completed"] < jobs["enqueued"]),
        (f"{jobs['lost']} · {jobs['double_completed']}", "lost · double-completed",
         bool(jobs["lost"] or jobs["double_completed"])),
        (f"{report['faults']} · {bound['stranded']}", "faults · stranded leases", False),
        (_ms(slowest), f"slowest recovery (bound {bound['bound_ms']} ms)",
         slowest is not None and slowest > bound["bound_ms"]),
        (f"{redeliveries['needed']} · {redeliveries['needless']}",
         "redeliveries needed · needless", False),
        (f"{sum(rejected.values())}", "stale calls rejected (fencing)", False),
        (f"{report.get('throughput_per_s', 0)}", "completes / s", False),
    ]
    return "<div class='cards'>" + "".join(
        f"<div class='card'><b{' class=bad' if bad else ''}>{_e(value)}</b>"
        f"<span>{_e(label)}</span></div>" for value, label, bad in cards) + "</div>"


def _recovery_table(report: dict[str, Any]) -> str:
    recovery = report.get("recovery") or {}
    rows = "".join(
        f"<tr><td>fault → {name.replace('re', 're-', 1) if name != 'reap' else 'reap'}</td>"
        f"<td class='num'>{figures['count']}</td><td class='num'>{_ms(figures['min_ms'])}</td>"
        f"<td class='num'>{_ms(figures['p50_ms'])}</td><td class='num'>{_ms(figures['p99_ms'])}"
        f"</td><td class='num'>{_ms(figures['max_ms'])}</td></tr>"
        for name, figures in recovery.items())
    return ("<table><tr><th>latency</th><th class='num'>n</th><th class='num'>min</th>"
            "<th class='num'>p50</th><th class='num'>p99</th><th class='num'>max</th></tr>"
            + rows + "</table>")


def _faults_table(timeline: Timeline, stranded: list[StrandedLease],
                  skipped: list[Any]) -> str:
    if not timeline.faults:
        return "<p class='muted'>No fault was applied.</p>"
    rows = []
    for span in timeline.faults:
        mine = [s for s in stranded if s.fault_id == span.fault_id]
        reaped = [s.reap_ts - s.fault_ts for s in mine if s.reap_ts is not None]
        rows.append(
            f"<tr><td>{_e(span.fault_id)}</td><td>{_e(span.kind)}</td><td>{_e(span.worker)}</td>"
            f"<td class='num'>{_rel_s(span.start_ts, timeline.t0)}</td>"
            f"<td class='num'>{_rel_s(span.end_ts, timeline.t0) if span.end_ts else 'never'}"
            f"</td><td class='num'>{len(mine)}</td>"
            f"<td class='num'>{_ms(max(reaped) if reaped else None)}</td></tr>")
    text = ("<table><tr><th>fault</th><th>kind</th><th>target</th><th class='num'>applied</th>"
            "<th class='num'>healed</th><th class='num'>stranded leases</th>"
            "<th class='num'>slowest reap</th></tr>" + "".join(rows) + "</table>")
    if len(rows) > MAX_FAULT_ROWS:  # folded (no script: the browser's own <details>)
        text = f"<details><summary>all {len(rows)} faults</summary>{text}</details>"
    if skipped:
        text += f"<p class='muted'>Skipped: {_e(skipped)}</p>"
    return text


def load_table(load: dict[str, Any] | None) -> str:
    """``report.json["load"]`` (the shared contract) as a table, or a plain sentence."""
    if not load:
        return "<p class='muted'>No load figures: this run's report has no <code>load</code> " \
               "section (the built-in producer's rate is in the run settings).</p>"
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td class='num'>{_e(ops.get('requests'))}</td>"
        f"<td class='num'>{_e(ops.get('failures'))}</td><td class='num'>{_e(ops.get('rps'))}</td>"
        f"<td class='num'>{_e(ops.get('p50_ms'))}</td><td class='num'>{_e(ops.get('p95_ms'))}</td>"
        f"<td class='num'>{_e(ops.get('p99_ms'))}</td></tr>"
        for name, ops in (load.get("operations") or {}).items())
    files = "".join(f"<li><a href='{_e(name)}'>{_e(name)}</a></li>"
                    for name in load.get("files") or [] if "://" not in str(name))
    return (f"<p>engine <b>{_e(load.get('engine', '?'))}</b>, {_e(load.get('users', '?'))} "
            "users</p><table><tr><th>operation</th><th class='num'>requests</th>"
            "<th class='num'>failures</th><th class='num'>req/s</th><th class='num'>p50 ms</th>"
            "<th class='num'>p95 ms</th><th class='num'>p99 ms</th></tr>" + rows + "</table>"
            + (f"<h3>raw files</h3><ul>{files}</ul>" if files else ""))


def _settings(timeline: Timeline, report: dict[str, Any]) -> str:
    run_event = timeline.run
    items: list[tuple[str, Any]] = []
    if run_event is not None:
        extra = run_event.extra
        items += [("protocol", extra.get("protocol", "sound")), ("seed", extra.get("seed")),
                  ("workers", extra.get("workers")), ("concurrency", extra.get("concurrency")),
                  ("lease_ms", run_event.lease_ms),
                  ("reap_interval_ms", extra.get("reap_interval_ms")),
                  ("reap_limit", extra.get("reap_limit")),
                  ("heartbeat_ms", extra.get("heartbeat_ms")),
                  ("tolerance_ms", extra.get("tolerance_ms")), ("reapers", extra.get("reapers"))]
    run = report.get("run") or {}
    if run:
        items += [("wall time", f"{run.get('wall_ms', 0) / 1000:.1f} s"),
                  ("drained", run.get("drained")), ("drain", _ms(run.get("drain_ms"))),
                  ("target rate", f"{(run.get('load') or {}).get('target_rate')} jobs/s")]
    items.append(("events in history", timeline.events))
    return "<table>" + "".join(
        f"<tr><th>{_e(key)}</th><td>{_e(value)}</td></tr>" for key, value in items
        if value is not None) + "</table>"


def render_html(report: dict[str, Any], history: list[Event] | Path,
                verdict: Verdict | None) -> str:
    """The whole page. ``history``: the events, or the history file (read in two streamed
    passes); ``verdict`` (the checker's object) supplies each stranded lease."""
    def replay(consume: Callable[[Iterable[Event]], T]) -> T:
        if isinstance(history, Path):
            return replay_history(history, consume)
        return consume(history)

    word = str(report.get("verdict", "?"))
    color = VERDICT_COLORS.get(word, "#6e7781")
    stranded = verdict.stranded_leases if verdict is not None else []
    bound = (report.get("invariants") or {}).get("recovery_bound")
    bound_ms = int(bound["bound_ms"]) if bound else 0
    timeline = replay(lambda events: build_timeline(events, bound_ms))
    charted = {span.fault_id: fault_jobs(span, stranded, timeline)
               for span in timeline.faults[:MAX_FAULT_CHARTS]} if bound else {}
    wanted = {job for jobs, _ in charted.values() for job in jobs}
    by_job = replay(lambda events: events_of_jobs(events, wanted)) if wanted else {}
    started = timeline.run.ts if timeline.run is not None else timeline.t0
    when = datetime.fromtimestamp(started / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") \
        if started else "?"
    failed = [n for n, r in (report.get("invariants") or {}).items() if not r.get("ok", True)]
    summary = ("every invariant held" if word == "pass"
               else f"failed: {', '.join(failed)}" if failed else word)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>{_e(word.upper())} · {_e(report.get('scenario'))} · echomq-chaos</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<header class='verdict' style='--verdict:{color}'>"
        f"<span class='badge'>{_e(word.upper())}</span><div><h1>{_e(report.get('scenario'))}"
        f"</h1><div class='sub'>{_e(summary)} · run started {_e(when)}</div></div></header>",
        "<nav><a href='#invariants'>invariants</a><a href='#timeline'>timeline</a>"
        "<a href='#recovery'>recovery</a><a href='#leases'>leases around faults</a>"
        "<a href='#load'>load</a><a href='#settings'>settings</a></nav>",
        _cards(report),
    ]
    if report.get("error"):
        parts.append(f"<section><h2>Error</h2><div class='error'>{_e(report['error'])}</div>"
                     "</section>")
    parts.append(f"<section id='invariants'><h2>Invariants</h2>"
                 f"{_invariant_table(report, timeline.t0)}</section>")
    parts.append("<section id='timeline'><h2>Timeline</h2>")
    if timeline.events:
        parts.append(f"<div class='figure'>{timeline_svg(timeline)}</div>")
        parts.append("<h3>faults</h3>" + _faults_table(
            timeline, stranded, (report.get("run") or {}).get("faults_skipped") or []))
    else:
        parts.append("<p class='muted'>The history is empty.</p>")
    parts.append("</section><section id='recovery'><h2>Recovery latency</h2>")
    if bound and stranded:
        parts.append(f"<div class='figure'>{recovery_svg(stranded, bound)}</div>")
    else:
        parts.append("<p class='muted'>No lease was stranded by a fault, so there is no recovery "
                     "to measure.</p>")
    if report.get("recovery"):
        parts.append(_recovery_table(report))
    parts.append("</section><section id='leases'><h2>Leases around each fault</h2>")
    if bound and timeline.faults:
        for span in timeline.faults[:MAX_FAULT_CHARTS]:
            jobs, more = charted[span.fault_id]
            title = (f"{span.fault_id}: {span.kind} {span.worker} at "
                     f"{_rel_s(span.start_ts, timeline.t0)}"
                     + (f", healed {_rel_s(span.end_ts, timeline.t0)}" if span.end_ts else ""))
            parts.append(f"<h3>{_e(title)}</h3>")
            if not jobs:
                parts.append("<p class='muted'>It held no lease that lapsed.</p>")
                continue
            parts.append(f"<div class='figure'>{lease_chart_svg(span, jobs, by_job, bound)}"
                         "</div>")
            if more:
                parts.append(f"<p class='muted'>{more} more lease(s) not drawn.</p>")
        hidden = len(timeline.faults) - MAX_FAULT_CHARTS
        if hidden > 0:
            parts.append(f"<p class='muted'>{hidden} more fault(s) not drawn (the faults table "
                         "lists them all).</p>")
    else:
        parts.append("<p class='muted'>No fault was applied.</p>")
    parts.append("</section>")
    parts.append(f"<section id='load'><h2>Load</h2>{load_table(report.get('load'))}</section>")
    parts.append(f"<section id='settings'><h2>Settings</h2>{_settings(timeline, report)}"
                 "</section></main></body></html>")
    return "\n".join(parts)


def write_html(path: Path, report: dict[str, Any], history: list[Event] | Path,
               verdict: Verdict | None) -> Path:
    from chaos.files import write_text_atomic

    write_text_atomic(path, render_html(report, history, verdict))
    return path


def external_urls(page: str) -> list[str]:
    """Every src/href that would reach the network (tests hold this to [])."""
    return re.findall(r'(?:src|href)\s*=\s*["\']?\s*((?:https?:)?//[^"\'\s>]*)', page,
                      flags=re.IGNORECASE)


__all__ = ["render_html", "write_html", "build_timeline", "load_table", "external_urls"]
