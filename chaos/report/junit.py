"""junit.xml: one testsuite per scenario run, one testcase per invariant (any CI shows it natively).

Built from ``report.json``'s shape only, so a saved run can be re-rendered offline. A failed
invariant's ``<failure>`` names the offending job ids in its message and carries the figures and
the examples in its body. ``<skipped>``: loss in an aborted run (not judged), and a failed
invariant the scenario made report-only. A run that ended in an error (or was aborted) gets one
more testcase, ``run``, with an ``<error>``; a suite's scenario a Ctrl-C kept from running gets
that ``run`` testcase ``<skipped>``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.names import INVARIANTS
from chaos.registry import SCRIPTS_RECORDED
from chaos.report.terms import BoundFormula, bound_model_words, what_it_checks, what_ran

# An end-of-run invariant of a run that did not finish; the summary and the page say the same.
NOT_JUDGED = "not judged: the run did not finish (judged only once it drained)"
SUITE_PREFIX = "echomq-chaos"


def offending_jobs(result: dict[str, Any]) -> list[str]:
    """Job ids named by an invariant's examples, in order, without repeats."""
    seen: dict[str, None] = {}
    for example in result.get("examples", []):
        job = example.get("job")
        if job:
            seen.setdefault(str(job), None)
    return list(seen)


def failure_message(name: str, result: dict[str, Any]) -> str:
    count = result.get("violations", 0)
    message = f"{name}: {count} violation(s)"
    if name == "recovery_bound" and result.get("max_ms") is not None:
        message += f", recovery max {result['max_ms']} ms vs bound {result['bound_ms']} ms"
    jobs = offending_jobs(result)
    if jobs:
        more = count - len(jobs)
        message += f"; jobs {', '.join(jobs)}" + (f" (+{more} more)" if more > 0 else "")
    return message


def failure_body(result: dict[str, Any]) -> str:
    figures = {key: value for key, value in result.items() if key not in ("ok", "examples")}
    lines = ["figures: " + json.dumps(figures, sort_keys=True), "examples:"]
    lines += ["  " + json.dumps(example, sort_keys=True) for example in result.get("examples", [])]
    return "\n".join(lines)


def testsuite(report: dict[str, Any], run_dir: Path | str | None = None) -> ET.Element:
    """The ``<testsuite>`` of one run (its report.json as a dict)."""
    scenario = str(report.get("scenario", "?"))
    run = report.get("run") or {}
    wall_s = (run.get("wall_ms") or 0) / 1000
    suite = ET.Element("testsuite", name=f"{SUITE_PREFIX}.{scenario}")
    properties = ET.SubElement(suite, "properties")
    bound = (report.get("invariants") or {}).get("recovery_bound") or {}
    # What ran, as the page names it: the protocol variant only of the reference worker.
    props: dict[str, Any] = {"verdict": report.get("verdict")}
    family = str(bound_model_words(bound).get("family") or "") if bound else ""
    for label, value in what_ran(report, dialect="" if family == SCRIPTS_RECORDED else family):
        props[label.replace("system under test", "sut")] = value
    for key in ("lease_ms", "reap_interval_ms", "tolerance_ms", "bound_ms"):
        props[key] = bound.get(key)
    if "bound_ms" in bound:
        props["bound"] = BoundFormula.of(bound).text
    exercise = report.get("exercise")
    if isinstance(exercise, dict):  # did a fault strand a lease (chaos.check.exercised)
        props["exercised"] = {True: "yes", False: "no", None: "n/a"}[exercise.get("exercised")] \
            + f": {exercise.get('reason', '')}"
    if run_dir is not None:
        props["run_dir"] = str(run_dir)
    for key, value in props.items():
        if value is not None:
            ET.SubElement(properties, "property", name=key, value=str(value))

    classname = f"{SUITE_PREFIX}.{scenario}"
    failures = errors = skipped = tests = 0
    invariants = report.get("invariants") or {}
    report_only = set(report.get("report_only") or ())
    for name in [*INVARIANTS, *(n for n in invariants if n not in INVARIANTS)]:
        if name not in invariants:
            continue
        result = invariants[name]
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
        if result.get("status") == "error":
            errors += 1
            error = ET.SubElement(case, "error", type="CheckerError",
                                  message=f"{name}: the checker raised (a bug of the toolkit's)")
            error.text = str(result.get("error"))
        elif result.get("status") == "blind":
            skipped += 1
            ET.SubElement(case, "skipped", message=f"{name}: not judged, evidence it needs is "
                          f"missing ({result.get('blinded', 0)} offence(s) on those jobs)")
        elif not result.get("ok", False) and name in report_only:
            skipped += 1  # judged and shown, but left out of the verdict by the scenario
            ET.SubElement(case, "skipped", message="report-only: "
                          + failure_message(name, result))
        elif not result.get("ok", False):
            failures += 1
            failure = ET.SubElement(case, "failure", type="InvariantViolated",
                                    message=failure_message(name, result))
            failure.text = f"{what_it_checks(name, report) or name}\n{failure_body(result)}"
        elif result.get("judged") is False:
            skipped += 1
            ET.SubElement(case, "skipped", message=result.get("not_judged") or NOT_JUDGED)
    undrained = (report.get("undrained") or {}).get("count") or 0
    if undrained:  # verdict unknown: no invariant broke, yet it is no pass
        tests += 1
        failures += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name="drain", time="0")
        listed = (report.get("undrained") or {}).get("jobs") or []
        failure = ET.SubElement(
            case, "failure", type="Undrained",
            message=f"{undrained} job(s) still pending or leased when the drain ended: "
                    "the verdict is unknown (not a pass, not a loss)")
        failure.text = "\n".join(f"{item['job']} ({item['state']})" for item in listed[:50])
    skipped_faults = report.get("faults_skipped") or []
    if skipped_faults:  # verdict unknown: the planned faults did not all happen
        tests += 1
        failures += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name="faults", time="0")
        ET.SubElement(case, "failure", type="FaultSkipped",
                      message=f"{len(skipped_faults)} planned fault(s) found no target: "
                      + ", ".join(f"{item['kind']} {item['target']}"
                                  for item in skipped_faults[:5]))
    missing = (report.get("evidence") or {}).get("missing") or []
    if missing:  # verdict unknown (or a fail that stands on what was seen): say what was missing
        tests += 1
        failures += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name="evidence", time="0")
        failure = ET.SubElement(
            case, "failure", type="EvidenceMissing",
            message="the history lacks evidence: " + "; ".join(
                f"{row['blind_events']} x {row['why']}" for row in missing))
        failure.text = json.dumps(report.get("evidence"), sort_keys=True)
    verdict = report.get("verdict")
    if verdict == "not run":  # a suite stopped before this scenario: listed, not an error
        tests += 1
        skipped += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name="run", time="0")
        ET.SubElement(case, "skipped", message=str(report.get("error") or verdict))
    elif verdict in ("aborted", "error") or not invariants:
        tests += 1
        errors += 1
        case = ET.SubElement(suite, "testcase", classname=classname, name="run",
                             time=f"{wall_s:.3f}")
        error = ET.SubElement(case, "error", type=str(verdict),
                              message=str(report.get("error") or verdict))
        error.text = str(report.get("error") or f"the run ended: {verdict}")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{wall_s:.3f}")
    return suite


def junit_document(runs: Sequence[tuple[dict[str, Any], Path | str | None]]) -> str:
    """``<testsuites>`` over several runs (report dict, run directory)."""
    root = ET.Element("testsuites", name=SUITE_PREFIX)
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    wall = 0.0
    for report, run_dir in runs:
        suite = testsuite(report, run_dir)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        wall += float(suite.get("time", "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{wall:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: Path, runs: Sequence[tuple[dict[str, Any], Path | str | None]]) -> Path:
    from chaos.files import write_text_atomic

    write_text_atomic(path, junit_document(runs))
    return path
