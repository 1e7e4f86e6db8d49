"""report.html: the page a person reads after a run. Self-contained: inline SVG, inline CSS, no
script and no network, so it opens the same from a CI artifact, a mail attachment or a laptop.

Sections, top to bottom: the verdict and the invariant table; the timeline (faults as bands from
apply to heal, claim/complete/reap rates, the pending and active backlog); the recovery latency
distribution against the bound; a lease chart around each fault (the lease that lapsed, the reap,
the re-claim, a rejected stale complete); the load table (``report.json["load"]``).

Everything drawn comes from ``report.json`` (as a dict) and the history (``analysis.py`` replays
it, ``figures.py`` draws); this module assembles the page.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from chaos.check.verdict import StrandedLease, Verdict
from chaos.history.events import Event, replay_history
from chaos.history.schema import TRANSITIONS
from chaos.names import INVARIANTS
from chaos.registry import SCRIPTS_RECORDED
from chaos.report.html.analysis import Timeline, build_timeline, events_of_jobs, fault_jobs
from chaos.report.html.figures import lease_chart_svg, recovery_svg, timeline_svg
from chaos.report.junit import NOT_JUDGED, offending_jobs
from chaos.report.terms import (
    BoundFormula,
    bound_model_words,
    has_setting,
    setting_name,
    what_it_checks,
    what_ran,
)

T = TypeVar("T")
MAX_FAULT_CHARTS = 6  # a schedule that repeats every second would otherwise draw dozens
MAX_FAULT_ROWS = 12  # faults listed before the table folds away
VERDICT_COLORS = {"pass": "#1a7f37", "fail": "#cf222e", "unknown": "#8250df",
                  "aborted": "#9a6700", "error": "#6e7781", "checker_error": "#6e7781"}
# report.json's recovery figures: what each one measures, as the recovery table labels it.
RECOVERY_LABELS = {"reap": "fault → reap", "deadline_to_reap": "deadline → reap (every lease)",
                   "reclaim": "fault → re-claim", "recomplete": "fault → re-complete"}


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


def _bound_key(bound: BoundFormula) -> str:
    """The figure's bound lines spelled out below it: a queue's formula (BullMQ's) is too long
    for a legend beside the plot."""
    return ("<table class='key'><tr><th>line</th><th>what it is</th><th>ms</th></tr>"
            f"<tr><td>solid</td><td>the queue's bound: {_e(bound.name)} = {bound.base_ms} ms"
            f"</td><td>{bound.base_ms}</td></tr>"
            f"<tr><td>dashed</td><td>+ tolerance {bound.tolerance_ms} ms = {bound.bound_ms} ms:"
            f" the bound judged</td><td>{bound.bound_ms}</td></tr></table>")


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
        if result.get("status") == "error":
            status = ('<span class="bad">checker error</span><br><span class="muted">'
                      + _e("".join(str(result.get("error", "")).strip().splitlines()[-1:]))
                      + "</span>")
        elif result.get("status") == "blind":
            status = ('<span class="warn">not judged</span><br><span class="muted">evidence '
                      f'missing; {int(result.get("blinded", 0))} offence(s) on those jobs'
                      '</span>')
        elif result.get("judged") is False:
            status = f'<span class="muted">{_e(result.get("not_judged") or NOT_JUDGED)}</span>'
        elif not result["ok"] and name in report_only:
            status = '<span class="warn">FAIL</span><br><span class="muted">report only</span>'
        else:
            status = ('<span class="ok">ok</span>' if result["ok"]
                      else '<span class="bad">FAIL</span>')
        figures = ""
        if name == "recovery_bound":
            figures = (f"{result.get('stranded', 0)} stranded by a cut-off fault"
                       + (f", {result['slowed']} under a slowing fault (not stranded)"
                          if result.get("slowed") else "")
                       + f"; {result.get('count', 0)} reaped, fault → reap max "
                       f"{_ms(result.get('max_ms'))} (bound {_bound_text(result)} "
                       "from the last renewal)")
        elif name == "reap_prompt":
            figures = (f"{result.get('count', 0)} reaped, deadline → reap max "
                       f"{_ms(result.get('max_ms'))} vs limit {_ms(result.get('limit_ms'))}")
        elif name == "lease_length":
            figures = (f"{result.get('granted', 0)} leases granted, "
                       f"lease_ms {result.get('lease_ms')}"
                       + (f"; {result['misrecorded']} recorded another lease_ms than the "
                          "deadline written" if result.get("misrecorded") else ""))
        elif name == "reap_cadence" and result.get("sweeps"):
            worst = sorted(((figures["max_gap_ms"], sweeper) for sweeper, figures
                            in (result.get("per_sweeper") or {}).items()
                            if figures.get("max_gap_ms") is not None), reverse=True)
            figures = (f"{result['sweeps']} sweeps; longest gap between two of one reaper's "
                       f"{_ms(result.get('max_gap_ms'))}"
                       + (f" ({worst[0][1]})" if worst else "")
                       + (f" vs limit {_ms(result.get('limit_ms'))}"
                          if result.get("judged") is not False else " (not judged)"))
        elif name == "needless_limit":
            figures = (f"needless {result.get('needless', 0)}, max "
                       f"{_ms(result.get('max_needless'))}")
        elif name == "no_loss":
            figures = (f"enqueued {result.get('enqueued')}, completed {result.get('completed')}, "
                       f"lost {result.get('lost')}, undrained {result.get('undrained', 0)}")
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
            f"<tr><td><b>{_e(name)}</b><br><span class='muted'>{_e(what_it_checks(name, report))}"
            f"</span></td><td>{status}</td><td class='num'>{result.get('violations', 0)}</td>"
            f"<td class='num'>{_rel_s(result.get('first_violation_ts'), t0)}</td>"
            f"<td>{_e(figures)}</td><td>{shown or '–'}</td></tr>")
    if not rows:
        return "<p class='muted'>No verdict: the history could not be checked.</p>"
    return ("<table><tr><th>invariant</th><th>result</th><th class='num'>violations</th>"
            "<th class='num'>first seen</th><th>figures</th><th>offending jobs</th></tr>"
            + "".join(rows) + "</table>")


def _bound_text(result: dict[str, Any]) -> str:
    try:
        return BoundFormula.of(result).text
    except (KeyError, TypeError, ValueError):  # a report without the figures: as it says
        return _ms(result.get("bound_ms"))


def _cards(report: dict[str, Any]) -> str:
    if "jobs" not in report:
        return ""
    jobs, bound = report["jobs"], report["invariants"]["recovery_bound"]
    redeliveries = report["redeliveries"]
    rejected = report.get("rejected") or {}
    slowest = bound.get("max_ms")
    exercise = report.get("exercise") or {}  # a fault that can strand a lease stranded none
    unexercised = exercise.get("exercised") is False
    cards = [  # (figure, what it is, is it bad news)
        # A dead-lettered job (max_stalls) left the queue by design: not bad news here.
        (f"{jobs['completed']} / {jobs['enqueued']}", "jobs completed / enqueued"
         + (f" ({dead} dead-lettered)" if (dead := jobs.get("dead_lettered", 0)) else ""),
         jobs["completed"] + dead < jobs["enqueued"]),
        (f"{jobs['lost']} · {jobs['double_completed']}", "lost · double-completed",
         bool(jobs["lost"] or jobs["double_completed"])),
        *([(f"{jobs['undrained']}", "undrained (verdict unknown)", True)]
          if jobs.get("undrained") else []),
        (f"{report['faults']} · {bound['stranded']}", "faults · stranded leases"
         + (f" (not exercised: {exercise.get('reason', '')})" if unexercised else ""),
         unexercised),
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
        f"<tr><td>{_e(RECOVERY_LABELS.get(name, name))}</td>"
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


def _settings(timeline: Timeline, report: dict[str, Any], drawn_from: str) -> str:
    run_event = timeline.run
    bound = (report.get("invariants") or {}).get("recovery_bound") or {}
    # the settings go by the names of the family whose bound the checker judged
    words = bound_model_words(bound) if bound else {}
    names: dict[str, str] = dict(words.get("setting_names") or {})
    family = str(words.get("family") or SCRIPTS_RECORDED)
    dialect = (run_event.dialect if run_event is not None
               else "" if family == SCRIPTS_RECORDED else family)
    items: list[tuple[str, Any]] = list(what_ran(
        report, run_event.protocol if run_event is not None else None, dialect))
    if run_event is not None:
        items += [("seed", run_event.seed),
                  ("workers", ",".join(run_event.workers) or None),
                  ("concurrency", run_event.concurrency)]
        items += [(setting_name(name, names), value if has_setting(name, names) else None)
                  for name, value in (
            ("lease_ms", run_event.lease_ms), ("reap_interval_ms", run_event.reap_interval_ms),
            ("reap_limit", run_event.reap_limit), ("heartbeat_ms", run_event.heartbeat_ms),
            ("tolerance_ms", run_event.tolerance_ms), ("reapers", run_event.reapers))]
    if bound:
        items.append(("recovery bound", _bound_text(bound)))
    run = report.get("run") or {}
    if run:
        items += [("wall time", f"{run.get('wall_ms', 0) / 1000:.1f} s"),
                  ("drained", run.get("drained")), ("drain", _ms(run.get("drain_ms"))),
                  ("target rate", f"{(run.get('load') or {}).get('target_rate')} jobs/s")]
    items += [("history drawn", drawn_from), ("events in history", timeline.events)]
    return "<table>" + "".join(
        f"<tr><th>{_e(key)}</th><td>{_e(value)}</td></tr>" for key, value in items
        if value is not None) + "</table>"


def _drawn(timeline: Timeline, drawn_from: str, report: dict[str, Any]) -> str:
    """What the timeline plots, in figures: the history the verdict judged, counted."""
    rolled_back = (report.get("ack_ledger") or {}).get("history_events_lost") or 0
    totals = timeline.totals()
    kinds = [kind.TYPE for kind in TRANSITIONS if kind.TYPE in totals]
    undrawn = sum(timeline.undrawn().get(kind.TYPE, 0) for kind in TRANSITIONS)
    pending, active = timeline.final_backlog
    return (f"<p class='drawn'>Drawn from <code>{_e(drawn_from)}</code>, the history the verdict "
            f"judged: {timeline.events} events; "
            + (", ".join(f"{_e(kind)} {totals[kind]}" for kind in kinds) or "no transitions")
            + f"; at its end {pending} pending, {active} active."
            + (f" ({undrawn} transition(s) before the load started are not drawn.)"
               if undrawn else "")
            + (f" The store rolled back {rolled_back} exported event(s): of those the verdict "
               "judged only the ones a client was acknowledged for; this draws them all."
               if rolled_back else "") + "</p>")


def render_html(report: dict[str, Any], history: list[Event] | Path,
                verdict: Verdict | None) -> str:
    """The whole page. ``history``: the history the verdict judged, as events or as its file
    (read in two streamed passes; a file that does not exist draws nothing); ``verdict`` (the
    checker's object) supplies each stranded lease."""
    if isinstance(history, Path):
        drawn_from = history.name
        if not history.exists():
            history = []
    else:
        drawn_from = "the events given"

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
    undrained = (report.get("undrained") or {}).get("count") or 0
    blind = (report.get("evidence") or {}).get("blind_invariants") or []
    summary = ("every invariant held" if word == "pass"
               else f"failed: {', '.join(failed)}" if failed
               else f"evidence missing, not judged: {', '.join(blind)}" if blind
               else "a planned fault found no target: the run did not test what its "
                    "scenario says" if report.get("faults_skipped")
               else f"{undrained} job(s) undrained: cannot tell a pass from a loss"
               if word == "unknown" else "a judge of the checker raised (checker-errors.txt)"
               if word == "checker_error" else word)
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
        parts.append(_drawn(timeline, drawn_from, report))
        parts.append("<h3>faults</h3>" + _faults_table(
            timeline, stranded, (report.get("run") or {}).get("faults_skipped") or []))
    else:
        parts.append(f"<p class='muted'>The history is empty (<code>{_e(drawn_from)}</code>)."
                     "</p>")
    parts.append("</section><section id='recovery'><h2>Recovery latency</h2>")
    if bound and stranded:
        parts.append(f"<div class='figure'>{recovery_svg(stranded, BoundFormula.of(bound))}"
                     "</div>" + _bound_key(BoundFormula.of(bound)))
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
            chart = lease_chart_svg(span, jobs, by_job, BoundFormula.of(bound))
            parts.append(f"<div class='figure'>{chart}</div>"
                         + _bound_key(BoundFormula.of(bound)))
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
    parts.append("<section id='settings'><h2>Settings</h2>"
                 f"{_settings(timeline, report, drawn_from)}</section></main></body></html>")
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


