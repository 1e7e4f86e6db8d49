"""Reports: ``report.json`` (stable shape, schema 3: docs/reports-schema.md) and the terminal
summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.check.verdict import Verdict
from chaos.history.events import Event
from chaos.report.cut_short import cut_short_lines
from chaos.report.junit import NOT_JUDGED
from chaos.report.terms import BoundFormula

SCHEMA = 3


def read_report(path: Path) -> dict[str, Any]:
    """A saved ``report.json``, in this version's shape whatever schema wrote it (raises
    ValueError or OSError when it cannot be read)."""
    report = json.loads(path.read_text())
    if not isinstance(report, dict):
        raise ValueError("not a JSON object")
    return upgrade_report(report)


def upgrade_report(report: dict[str, Any]) -> dict[str, Any]:
    """An older report in this version's shape (its ``schema`` still says which version wrote
    it); a current one is returned as it is.

    Schema 1 wrote the number of stranded leases as ``stranded_leases``: schema 2 calls it
    ``stranded_lease_count`` and lists the leases under the old name. A schema-1 report never
    recorded the list, so it gets none (re-check the history to get it).

    Schemas 1 and 2 counted the jobs moved to the dead set as ``dead_letter.jobs`` and
    ``invariants.stall_limit.dead_lettered``, beside ``jobs.dead_lettered`` and
    ``outcomes.dead_lettered``, the outcome (fewer: only jobs enqueued, never completed, under
    a stall limit): schema 3 calls the former ``moved_to_dead`` in both places."""
    schema = report.get("schema", 1)
    if not isinstance(schema, int) or schema >= SCHEMA:
        return report
    upgraded = dict(report)
    if schema == 1 and isinstance(upgraded.get("stranded_leases"), int):
        upgraded = {("stranded_lease_count" if key == "stranded_leases" else key): value
                    for key, value in upgraded.items()}
    dead = upgraded.get("dead_letter")
    if isinstance(dead, dict) and "jobs" in dead:
        upgraded["dead_letter"] = _renamed(dead, "jobs", "moved_to_dead")
    invariants = upgraded.get("invariants")
    stall = invariants.get("stall_limit") if isinstance(invariants, dict) else None
    if isinstance(invariants, dict) and isinstance(stall, dict) and "dead_lettered" in stall:
        upgraded["invariants"] = {**invariants,
                                  "stall_limit": _renamed(stall, "dead_lettered",
                                                          "moved_to_dead")}
    return upgraded


def _renamed(table: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``table`` with the key ``old`` called ``new``, in the same place."""
    return {(new if key == old else key): value for key, value in table.items()}


def build_report(
    scenario: str,
    verdict_word: str,
    verdict: Verdict | None,
    **extra: Any,
) -> dict[str, Any]:
    report: dict[str, Any] = {"schema": SCHEMA, "scenario": scenario, "verdict": verdict_word}
    if verdict is not None:
        report.update(verdict.as_dict())
    report.update(extra)
    return report


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value}"


def summary_text(report: dict[str, Any]) -> str:
    """The human summary printed at the end of a run (and by ``check``)."""
    unexercised = (report.get("exercise") or {}).get("exercised") is False
    lines = [f"scenario {report['scenario']}: {report['verdict'].upper()}"
             + (" (not exercised: no fault stranded a lease)" if unexercised else "")]
    if report.get("clock_step"):
        lines.append(f"  clock     {report['clock_step']['reason']}")
    if "invariants" not in report:
        if report.get("error"):
            lines.append(f"  error: {report['error']}")
        return "\n".join(lines)
    invariants = report["invariants"]
    bound = invariants["recovery_bound"]
    jobs = report["jobs"]
    redeliveries = report["redeliveries"]
    undrained, held = jobs.get("undrained", 0), jobs.get("held", 0)
    lines.append(
        f"  jobs      enqueued {jobs['enqueued']}  completed {jobs['completed']}  "
        f"lost {jobs['lost']}  " + (f"undrained {undrained}  " if undrained else "") +
        (f"held {held} (in paused lanes)  " if held else "") +
        (f"removed {jobs['removed']} (by a user)  " if jobs.get("removed") else "") +
        f"double-completed {jobs['double_completed']}  "
        f"({report['throughput_per_s']} completes/s)"
    )
    if undrained:
        listed = report.get("undrained", {}).get("jobs", [])
        lines.append(
            f"  undrained {undrained} job(s) still pending or leased when the drain ended "
            "(neither done nor lost: the verdict cannot decide), e.g. " +
            ", ".join(f"{item['job']} ({item['state']})" for item in listed[:5]))
    slowed = bound.get("slowed")
    formula = BoundFormula.of(bound)
    lines.append(
        f"  faults    {report['faults']} applied, {bound['stranded']} leases stranded by a "
        "cut-off fault" + (f", {slowed} under a slowing fault" if slowed else "") +
        f", {bound['count']} recovered by "
        + formula.recovered_by
    )
    lines += cut_short_lines(report)
    lines += exercised_lines(report)
    lines.append(
        f"  recovery  reap-fault ms min {_ms(bound['min_ms'])} p50 {_ms(bound['p50_ms'])} "
        f"p99 {_ms(bound['p99_ms'])} max {_ms(bound['max_ms'])}  bound {formula.bound_ms} "
        f"({formula.terms} + tolerance {formula.tolerance_ms}{formula.beyond})"
    )
    lines += formula.lines  # the family's own figures (the worst case against its formulas)
    prompt = invariants.get("reap_prompt")
    if prompt is not None:  # every lease, faulted or not
        lines.append(
            f"  prompt    reap-deadline ms min {_ms(prompt['min_ms'])} p50 {_ms(prompt['p50_ms'])} "
            f"p99 {_ms(prompt['p99_ms'])} max {_ms(prompt['max_ms'])} (n={prompt['count']})  "
            + (f"limit the first sweep after each deadline + allowance "
               f"{prompt['reap_allowance_ms']} (loops reap once a loop)"
               if prompt.get("rhythm") == "loop" else
               f"limit {prompt['limit_ms']} ("
               + (formula.reap_lag_terms or f"reap {prompt['reap_interval_ms']}")
               + f" + allowance {prompt['reap_allowance_ms']})")
        )
    lines += cadence_lines(invariants.get("reap_cadence"), formula)
    for name in ("reclaim", "recomplete"):
        figures = report["recovery"][name]
        lines.append(
            f"  {name:<9} {name}-fault ms min {_ms(figures['min_ms'])} "
            f"p50 {_ms(figures['p50_ms'])} p99 {_ms(figures['p99_ms'])} "
            f"max {_ms(figures['max_ms'])} (n={figures['count']})"
        )
    lines.append(
        f"  redeliveries needed {redeliveries['needed']}  needless {redeliveries['needless']}"
        f"  rejected {report['rejected'] or {}}"
    )
    report_only = set(report.get("report_only", []))
    if report.get("needless_by_fault"):
        lines.append("  needless  by the fault the holder was under: " + "  ".join(
            f"{kind} {count}" for kind, count in report["needless_by_fault"].items()))
    buckets = report.get("needless_by_duration", [])
    rows = [row for row in buckets if row["attempts"]]
    # Worth a line once a lease was redelivered needlessly or an attempt ran past the first
    # bucket. Claim to the holder's complete: no history records a handler's own start.
    if any(row["needless"] for row in rows) or any(row["attempts"] for row in buckets[1:]):
        lines.append("  needless  by delivery-to-ack time (x lease): " + "  ".join(
            f"{row['bucket']} {row['needless']}/{row['attempts']}" for row in rows))
    outcomes = report.get("outcomes")
    if outcomes is not None and outcomes.get("judged"):
        lines.append(
            f"  outcomes  completed {outcomes['completed']}  dead-lettered "
            f"{outcomes['dead_lettered']}  lost {outcomes['lost']}  undrained "
            f"{outcomes.get('undrained', 0)}  "
            + (f"held {outcomes['held']}  " if outcomes.get("held") else "")
            + (f"removed {outcomes['removed']}  " if outcomes.get("removed") else "")
            + "duplicated "
            f"{outcomes['duplicated']}  unexpected {outcomes['unexpected']}")
    dead = report.get("dead_letter")
    if dead and (dead["max_stalls"] or dead["moved_to_dead"]):
        before = "  ".join(f"{n} recoveries: {jobs} job(s)"
                           for n, jobs in dead["recoveries_before_dead"].items()) or "-"
        lines.append(
            f"  dead      max_stalls {dead['max_stalls']}: {dead['moved_to_dead']} moved to "
            f"dead ({dead['poison']} of {dead['poison_enqueued']} poison); {before}")
    lines += evidence_lines(report)
    for name, result in invariants.items():
        mark = "ok  " if result["ok"] else ("WARN" if name in report_only else "FAIL")
        detail = "" if result["ok"] else f"  {result['violations']} violation(s), e.g. " + \
            json.dumps(result["examples"][:2])
        if result.get("status") == "error":
            mark, detail = "ERR ", "  the checker raised: " + _last_line(result["error"])
        elif result.get("status") == "blind":
            mark, detail = "blind", "  evidence it needs is missing" + (
                f"; {result['blinded']} offence(s) on those jobs not counted, e.g. "
                + json.dumps(result["blinded_examples"][:1]) if result.get("blinded") else "")
        elif result["ok"] and result.get("judged") is False:
            mark, detail = "skip", f"  {result.get('not_judged') or NOT_JUDGED}"
        elif result.get("blinded"):
            detail += f" ({result['blinded']} more on jobs whose evidence is missing)"
        lines.append(f"  [{mark}] {name}{detail}")
    if report_only:
        lines.append(f"  (report only, not in the verdict: {', '.join(sorted(report_only))})")
    for store in report.get("store_faults", []):
        promoted = (f", new primary {store['new_primary']} after {store['promoted_ms']} ms"
                    if "promoted_ms" in store else "")
        lines.append(
            f"  store     {store['fault_id']} {store['kind']} {store['node']}: down "
            f"{store['down_ms']} ms{promoted}; {store['clients_recovered']} workers back "
            f"after max {_ms(store['max_client_ms'])} ms, producer after "
            f"{_ms(store['producer_ms'])} ms")
    acks = report.get("ack_ledger")
    if acks:
        acked = sum(acks["acknowledged"].values())
        lines.append(
            f"  acks      {acked} acknowledged transitions, {acks['lost']} lost "
            f"{acks['lost_by_op']} ({acks['jobs_affected']} jobs); "
            f"{acks['history_events_lost']} exported events rolled back by the store")
        if acks.get("unexported"):
            lines.append(
                f"            {acks['unexported']} not in the history (the runner stopped "
                "before exporting them; not counted as store losses)")
    remote = (report.get("load") or {}).get("remote_workers")
    if remote and "workers" in remote:
        lines.append(
            f"  load      {remote['connected']} of {remote['expected']} remote Locust worker(s): "
            + ", ".join(f"{w['id'][:12]} {w['users']} users {w['requests']} requests"
                        for w in remote["workers"])
            + (f"; lost: {', '.join(remote['lost'])}" if remote["lost"] else ""))
    preflight = report.get("preflight")
    if preflight:
        settings = preflight["settings"]
        lines.append(
            f"  preflight maxmemory-policy {settings.get('maxmemory-policy', '?')}  save "
            f"{settings.get('save', '?')!r}  appendonly {settings.get('appendonly', '?')}"
            + "".join(f"\n  [warn] {warning}" for warning in preflight["warnings"]))
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    return "\n".join(lines)


def cadence_lines(cadence: dict[str, Any] | None, formula: BoundFormula) -> list[str]:
    """The reapers' cadence (reap_cadence): the worst gap between two sweeps of one reaper,
    per reaper, against the limit; nothing for a history without sweeps."""
    if not cadence or not (cadence.get("sweeps") or cadence.get("sweepers")):
        return []
    per = cadence.get("per_sweeper") or {}
    shown = [f"{name} {_ms(figures['max_gap_ms'])}" for name, figures in list(per.items())[:4]]
    if len(per) > 4:
        shown.append(f"+{len(per) - 4} more")
    judged = cadence.get("judged") is not False
    sweepers = cadence.get("sweepers") or []
    no_reaper = ([f"  no reaper none of the {len(sweepers)} processes meant to reap "
                  f"({', '.join(sweepers[:4])}{', ...' if len(sweepers) > 4 else ''}) swept "
                  "once in the whole run: nothing brings a stranded lease back"]
                 if cadence.get("no_reaper") else [])
    if cadence.get("rhythm") == "loop":  # judged by each park to its loop's next sweep
        parks = [f"{name} {_ms(figures.get('max_park_ms'))}"
                 for name, figures in list(per.items())[:4]]
        return no_reaper + [
            f"  cadence   park-to-sweep ms max {_ms(cadence.get('max_park_ms'))} "
            f"({', '.join(parks)}; {cadence['sweeps']} sweeps, once a loop)  "
            + (f"limit {cadence['limit_ms']} ({formula.interval_name} "
               f"{cadence['reap_interval_ms']} + {formula.sweep_slack} "
               f"{cadence['allowance_ms']})" if judged else "not judged (no park seen)"),
            f"  drains    sweep-to-park ms max {_ms(cadence.get('longest_drain_ms'))}, measured "
            f"(sweep gaps up to {_ms(cadence['max_gap_ms'])}): what a loop handles before it "
            "parks again"]
    return no_reaper + [
        f"  cadence   sweep gap ms max {_ms(cadence['max_gap_ms'])} ({', '.join(shown)}; "
        f"{cadence['sweeps']} sweeps)  "
        + (f"limit {cadence['limit_ms']} ("
           + f"{formula.interval_name} {cadence['reap_interval_ms']} + "
           + f"{formula.sweep_slack} {cadence['allowance_ms']})"
           if judged else "not judged (the queue promises no sweep cadence)")]


def exercised_lines(report: dict[str, Any]) -> list[str]:
    """Whether a fault stranded a lease (``chaos.check.exercised``): a pass whose faults
    stranded nothing proved nothing of recovery, and says so."""
    exercise = report.get("exercise")
    if not isinstance(exercise, dict):  # a report written before it was judged
        return []
    word = {True: "yes", False: "no", None: "n/a"}[exercise.get("exercised")]
    lines = [f"  exercised {word}: {exercise.get('reason', '')}"]
    if exercise.get("exercised") is False:
        lines.append("            recovery was not put to the test: this run is no evidence "
                     "that it works (another seed may strand a lease)")
    return lines


def evidence_lines(report: dict[str, Any]) -> list[str]:
    """What the history lacked and what it blinded; planned faults never applied; the
    checker's own errors."""
    lines = []
    skipped = report.get("faults_skipped") or []
    if skipped:
        lines.append(f"  skipped   {len(skipped)} planned fault(s) found no target when due ("
                     + ", ".join(f"{item['kind']} {item['target']}" for item in skipped[:3])
                     + "): the run did not test what its scenario says")
    evidence = report.get("evidence") or {}
    missing = evidence.get("missing") or []
    if missing:
        lines.append("  evidence  missing: " + "; ".join(
            f"{row['blind_events']} x {row['why']} ("
            + ("any job" if row["every_job"] else f"{row['jobs']} job(s)")
            + f", {row['lacks']} unknown)" for row in missing))
        blind = evidence.get("blind_invariants") or []
        blinded = evidence.get("blinded_offences") or {}
        lines.append(
            "            not judged for want of it: " + (", ".join(blind) or "none")
            + ("; offences not counted: " + ", ".join(f"{name} {count}" for name, count
                                                      in blinded.items()) if blinded else ""))
    errors = report.get("checker_errors") or {}
    if errors:
        lines.append(f"  checker   {len(errors)} judge(s) raised ({', '.join(errors)}): a bug of "
                     "the toolkit's, not the queue's; tracebacks in checker-errors.txt")
    return lines


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


def write_rendered_reports(run_dir: Path, report: dict[str, Any], verdict: Verdict | None,
                           history: list[Event] | Path) -> list[str]:
    """``junit.xml`` and ``report.html`` beside ``report.json``, the page drawn from ``history``:
    the history the verdict judged, handed down by the caller (a file is streamed; one that does
    not exist draws an empty page). Which file that is, ``chaos.run.sources.judged_history``
    decides, and only it: the reports import nothing of the runner's. Returns the problems met:
    a drawing that fails must not cost the verdict, which report.json already holds."""
    # Imported here, not at the top: the page's modules (and matplotlib behind them) load only
    # when a page is drawn, so the CLI's summary and ``check`` stay light. No cycle either way:
    # the html package never imports this module.
    from chaos.report.html import write_html
    from chaos.report.junit import write_junit

    problems = []
    try:
        write_junit(run_dir / "junit.xml", [(report, run_dir)])
    except Exception as error:  # noqa: BLE001 - reported, and the run's verdict stands
        problems.append(f"junit.xml: {type(error).__name__}: {error}")
    try:
        write_html(run_dir / "report.html", report, history, verdict)
    except Exception as error:  # noqa: BLE001
        problems.append(f"report.html: {type(error).__name__}: {error}")
    return problems


