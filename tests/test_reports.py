"""Reports people read and CI consumes: report.html, junit.xml, `check`/`report` offline, a suite
of scenarios in one `run` and live progress (the pytest plugin: test_pytest_plugin.py).

Rendering is tested on hand-written histories (pass, fail, aborted) and on real runs; the page is
opened in headless Chromium once and its screenshot must show the verdict."""

from __future__ import annotations

import html
import io
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from drawn import assert_draws_what_was_judged
from histories import History, to_events

from chaos.check.checker import CheckConfig, check
from chaos.cli import main
from chaos.history.schema import Run
from chaos.names import INVARIANTS
from chaos.report.html import external_urls, render_html
from chaos.report.html.analysis import build_timeline, rate_series
from chaos.report.html.figures import timeline_svg
from chaos.report.junit import NOT_JUDGED, junit_document
from chaos.report.summary import (
    build_report,
    read_report,
    summary_text,
    upgrade_report,
    write_rendered_reports,
)
from chaos.run.offline import VERDICT_KEYS
from chaos.run.progress import Progress, Status
from chaos.run.suite import suite_table
from chaos.scenario.loading import scenario_from_dict
from tests.ci_tools import require_tool

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("invariants", "timeline", "recovery", "leases", "load", "settings")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def cli_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The same command line, in this process (no interpreter start-up per call)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out, err)


# --- hand-written histories ------------------------------------------------------------------
def paused_worker_history(broken: bool = False) -> History:
    """w1 holds a and b when it is frozen; the reaper recovers both, w2 finishes them, and w1's
    late completes are rejected. ``broken``: b is never reaped (lost, recovery bound broken) and
    w1's late complete of a is accepted (completed twice)."""
    h = History(lease_ms=1000, reap_interval_ms=250, tolerance_ms=100)
    h.phase("warmup", ts=0)
    for index, job in enumerate("abcd"):
        h.enqueue(job, ts=10 + index)
    h.claim("a", 1, "w1", ts=20)
    h.claim("b", 1, "w1", ts=25)
    h.claim("c", 1, "w2", ts=30)
    h.complete("c", 1, "w2", ts=300)
    h.phase("chaos", ts=400)
    h.extend("a", 1, "w1", ts=450)
    h.extend("b", 1, "w1", ts=450)
    fault = h.fault("pause", "w1", ts=500, duration_ms=2500)
    h.claim("d", 1, "w2", ts=600)
    h.complete("d", 1, "w2", ts=900)
    h.reap("a", 1, ts=1500)
    if not broken:
        h.reap("b", 1, ts=1500)
    h.claim("a", 2, "w2", ts=1550)
    if not broken:
        h.claim("b", 2, "w2", ts=1560)
    h.complete("a", 2, "w2", ts=1800)
    if not broken:
        h.complete("b", 2, "w2", ts=1850)
    h.heal(fault, ts=3000)
    if broken:
        h.complete("a", 1, "w1", ts=3010)
    else:
        h.complete_rejected("a", 1, "w1", ts=3010, current_attempt=2)
    h.phase("heal", ts=3100)
    h.phase("drain", ts=3600)
    h.phase("end", ts=4000, drained=1, aborted=0)  # broken: b left the active set unseen
    return h


def rendered(h: History, word: str | None = None, **extra: object) -> tuple[dict, str]:
    events = h.events()
    verdict = check(events)
    report = build_report("hand-written", word or ("pass" if verdict.passed else "fail"),
                          verdict, **extra)
    return report, render_html(report, events, verdict)


@pytest.mark.parametrize("broken", [False, True], ids=["pass", "fail"])
def test_html_has_every_section_and_no_external_url(broken: bool):
    report, page = rendered(paused_worker_history(broken))
    assert report["verdict"] == ("fail" if broken else "pass")
    for section in SECTIONS:
        assert f"id='{section}'" in page
    assert f"<span class='badge'>{report['verdict'].upper()}</span>" in page
    for name in report["invariants"]:
        assert f"<b>{name}</b>" in page
    # timeline, recovery distribution and one lease chart, all inline
    assert page.count("<svg") == 3 and "<img" not in page and "<script" not in page
    assert external_urls(page) == []
    assert "No load figures" in page
    if broken:  # the offending jobs are named next to their invariant
        failed = {name for name, result in report["invariants"].items() if not result["ok"]}
        assert failed == {"no_loss", "no_double_completion", "recovery_bound",
                          "exclusive_lease"}
        assert "<code>b</code>" in page and "<code>a</code>" in page
        assert "stale complete ACCEPTED" in page  # the lease chart marks the unfenced complete
    else:
        assert "stale complete rejected" in page and "ACCEPTED" not in page


def test_external_url_detector_catches_what_it_must():
    page = ('<img src="https://cdn.example/x.png"><a href=\'//cdn.example/y\'>y</a>'
            '<link href="style.css"><svg xmlns="http://www.w3.org/2000/svg"></svg>')
    assert external_urls(page) == ["https://cdn.example/x.png", "//cdn.example/y"]


def test_load_table_renders_the_shared_contract():
    load = {"engine": "locust", "users": 12, "files": ["locust_stats.csv", "https://x/y"],
            "operations": {"enqueue": {"requests": 1234, "failures": 3, "rps": 61.7,
                                       "p50_ms": 1.5, "p95_ms": 4.25, "p99_ms": 9.75},
                           "claim": {"requests": 1200, "failures": 0, "rps": 60.0,
                                     "p50_ms": 2.0, "p95_ms": 5.0, "p99_ms": 11.0}}}
    _, page = rendered(paused_worker_history(), load=load)
    section = page[page.index("id='load'"):page.index("id='settings'")]
    for figure in ("locust", "12", "1234", "61.7", "4.25", "9.75", "claim", "1200"):
        assert figure in section
    assert "No load figures" not in section
    assert "href='locust_stats.csv'" in section and external_urls(page) == []


def test_aborted_run_renders_without_judging_loss():
    h = paused_worker_history()
    records = [r for r in h.records() if r.get("phase") not in ("drain", "end")]
    records.append({"seq": "3700-0", "type": "phase", "phase": "end", "drained": "0",
                    "aborted": "1", "cause": "interrupt", "ts": "3700"})
    events = to_events(records)
    verdict = check(events, final=False)
    report = build_report("hand-written", "aborted", verdict, error="interrupted")
    page = render_html(report, events, verdict)
    assert "ABORTED" in page and NOT_JUDGED in page and "interrupted" in page
    suite = ET.fromstring(junit_document([(report, None)])).find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["no_loss"].find("skipped") is not None
    assert cases["run"].find("error") is not None
    # (and reap_cadence: a hand-written history promises no reaper's cadence)
    skipped = cases["reap_cadence"].find("skipped")
    assert skipped is not None and "promises no sweep cadence" in skipped.get("message", "")
    # (and group_limit: no group lanes in it)
    skipped = cases["group_limit"].find("skipped")
    assert skipped is not None and "no claim in a group" in skipped.get("message", "")
    # (and paused_group: no group paused in it)
    skipped = cases["paused_group"].find("skipped")
    assert skipped is not None and "no group paused" in skipped.get("message", "")
    # (and flow_order: no flow in it)
    skipped = cases["flow_order"].find("skipped")
    assert skipped is not None and "no flow" in skipped.get("message", "")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == (str(len(INVARIANTS) + 1), "0", "1", "5")


def test_an_aborted_run_says_not_judged_in_the_summary_junit_and_page_alike():
    """The terminal summary must not print [ok] for what junit skips and the page leaves
    unjudged: the end-of-run invariants of a run stopped mid-way."""
    h = paused_worker_history()
    records = [r for r in h.records() if r.get("phase") not in ("drain", "end")]
    records.append({"seq": "3700-0", "type": "phase", "phase": "end", "drained": "0",
                    "aborted": "1", "cause": "interrupt", "ts": "3700"})
    events = to_events(records)
    verdict = check(events, final=False)
    report = build_report("hand-written", "aborted", verdict, error="interrupted")
    unjudged = [name for name, result in report["invariants"].items()
                if result.get("judged") is False]
    assert unjudged, report["invariants"]
    text = summary_text(report)
    suite = ET.fromstring(junit_document([(report, None)])).find("testsuite")
    assert suite is not None
    skipped = {case.get("name"): case.find("skipped") for case in suite.iter("testcase")}
    page = render_html(report, events, verdict)
    for name in unjudged:
        # why, in the invariant's own words when it has them (reap_cadence: no cadence
        # promised by a hand-written history), else the end of run's
        why = report["invariants"][name].get("not_judged", NOT_JUDGED)
        assert f"[ok  ] {name}" not in text
        assert f"[skip] {name}  {why}" in text
        assert skipped[name] is not None and skipped[name].get("message") == why
        assert html.escape(why) in page
    assert page.count(NOT_JUDGED) == sum("not_judged" not in report["invariants"][name]
                                         for name in unjudged)
    for name in set(report["invariants"]) - set(unjudged):
        assert f"[ok  ] {name}" in text


def test_a_job_dead_lettered_by_design_is_not_shown_as_missing():
    """A passing poison-pill run completes all but the dead-lettered job: no red card."""
    h = paused_worker_history()
    events = h.events()
    verdict = check(events)
    report = build_report("hand-written", "pass", verdict)
    jobs = report["jobs"]
    jobs["completed"], jobs["dead_lettered"] = jobs["enqueued"] - 1, 1
    page = render_html(report, events, verdict)
    figure = f"{jobs['completed']} / {jobs['enqueued']}</b>"
    assert f"<b>{figure}<span>jobs completed / enqueued (1 dead-lettered)</span>" in page
    jobs["dead_lettered"] = 0  # one job really missing: that is bad news
    assert f"<b class=bad>{figure}" in render_html(report, events, verdict)


def test_fault_labels_close_in_time_do_not_overlap_on_the_timeline():
    h = History(lease_ms=1000, reap_interval_ms=250, tolerance_ms=100)
    h.phase("warmup", ts=0)
    h.enqueue("a", ts=10)
    h.phase("chaos", ts=100)
    for index in range(3):
        h.fault("kill", f"worker-{index + 1}", ts=500 + 50 * index)
    h.claim("a", 1, "w9", ts=600)
    h.complete("a", 1, "w9", ts=700)
    h.phase("end", ts=10_000, drained=1, aborted=0)
    svg = timeline_svg(build_timeline(h.events()))
    labels = [(float(x), float(y), text) for x, y, text in re.findall(
        r'x="([0-9.]+)" y="([0-9.]+)"[^>]*>(f\d kill worker-\d)<', svg)]
    assert len(labels) == 3, labels
    for (x1, y1, text1), (x2, y2, _) in itertools.combinations(sorted(labels), 2):
        # 8 px text: same line if closer than that; DejaVu Sans is under 5 px a character
        assert abs(y1 - y2) >= 8 or x2 - x1 >= 4 * len(text1), labels


def test_the_timeline_plots_every_transition_from_the_start_of_the_load():
    """Counts are kept per 50 ms bucket: the bucket time zero falls in (the warmup starts at
    1017, a claim at 1030) and an event at the very end are on the plot, and the totals the page
    states are what the rates add up to."""
    h = History(lease_ms=1000, reap_interval_ms=250, tolerance_ms=100, ts=900)
    h.phase("warmup", ts=1017)
    h.enqueue("a", ts=1020)
    h.claim("a", 1, "w1", ts=1030)
    h.enqueue("b", ts=1500)
    h.claim("b", 1, "w1", ts=1510)
    h.complete("a", 1, "w1", ts=1600)
    h.complete("b", 1, "w1", ts=3017)
    h.phase("end", ts=3017, drained=1, aborted=0)
    timeline = build_timeline(h.events())
    assert timeline.totals() == {"claim": 2, "complete": 2, "enqueue": 2, "phase": 2}
    assert timeline.undrawn() == {"run": 1}  # before the load started
    assert timeline.final_backlog == (0, 0)
    for bin_ms in (250, 500, 2000):
        for kind in ("claim", "complete"):
            _, rates = rate_series(timeline.counts[kind], timeline.t0, timeline.end_ts, bin_ms)
            assert round(sum(rate * bin_ms / 1000 for rate in rates)) == 2


def monitor_run(tmp_path: Path, h: History) -> Path:
    """A saved run recorded with ``history.source = "monitor"``: the transitions only in
    history-monitor.jsonl, history.jsonl holding what the runner's own scripts wrote."""
    run_dir = tmp_path / "monitor-run"
    run_dir.mkdir()
    (run_dir / "scenario.json").write_text(json.dumps({"history": {"source": "monitor"}}))
    h.write_jsonl(run_dir / "history-monitor.jsonl")
    runner_events = {"run", "phase", "fault", "heal"}
    with open(run_dir / "history.jsonl", "w") as handle:
        for record in h.records():
            if record["type"] in runner_events:
                handle.write(json.dumps(record) + "\n")
    return run_dir


def test_a_monitor_runs_report_draws_the_history_its_verdict_judged(tmp_path: Path, capsys):
    run_dir = monitor_run(tmp_path, paused_worker_history())
    result = cli_here(capsys, "report", str(run_dir))
    assert (run_dir / "report.html").exists(), result.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["jobs"]["enqueued"] == 4  # judged on the monitor history
    assert_draws_what_was_judged(run_dir, report, "history-monitor.jsonl")
    page = (run_dir / "report.html").read_text()
    assert "<th>history drawn</th><td>history-monitor.jsonl</td>" in page
    assert "It held no lease that lapsed" not in page  # the lease chart has w1's leases


def bullmq_history() -> History:
    """BullMQ (run event dialect bullmq), lockDuration 300 < stalledInterval 1000: w1 holds a
    when it is killed; BullMQ's stalled check returns it 2672 ms after its last renewal."""
    h = History(300, 1000, 100, run=False)
    h.write(Run(scenario="hand-written", lease_ms=300, reap_interval_ms=1000, tolerance_ms=100,
                heartbeat_ms=150, dialect="bullmq"), 0)
    h.phase("warmup", ts=0)
    h.enqueue("a", ts=0)
    h.claim("a", 1, "w1", ts=1)
    h.extend("a", 1, "w1", ts=100)
    h.fault("kill", "w1", ts=150)
    h.reap("a", 1, ts=2772)
    h.claim("a", 2, "w2", ts=2773)
    h.complete("a", 2, "w2", ts=2822)
    h.phase("end", ts=2832, drained=1)
    return h


FOREIGN = {"foreign": True, "dialect": "bullmq", "workers": ["node", "worker.js"],
           "reaper": "none"}
REFERENCE = {"foreign": False, "dialect": "echomq", "workers": None, "reaper": "builtin"}


def test_a_bullmq_report_states_bullmqs_bound_in_bullmqs_names():
    events = bullmq_history().events()
    verdict = check(events)
    assert verdict.passed
    report = build_report("hand-written", "pass", verdict,
                          run={"protocol": "sound", "sut": FOREIGN})
    page = render_html(report, events, verdict)
    bound = "3100 ms = BullMQ: 2 x stalledInterval 1000 + max(lockDuration 300, stalledInterval)"
    assert "2 x stalledInterval + max(lockDuration, stalledInterval) = 3000 ms" in page  # chart
    assert f"<th>recovery bound</th><td>{bound} + tolerance 100</td>" in page
    assert "<th>lockDuration (lease_ms)</th><td>300</td>" in page
    assert "<th>stalledInterval (reap_interval_ms)</th><td>1000</td>" in page
    assert ("returned by BullMQ&#x27;s stalled check within stalledInterval + "
            "max(lockDuration, stalledInterval)") in page
    assert "lease_ms + reap_interval_ms" not in page and "lease + reap" not in page
    # whose queue it was, and no protocol variant of the reference worker's
    assert ("<th>system under test</th><td>own workers node worker.js, no reaper (the workers "
            "recover stalled jobs)</td>") in page
    assert "<th>protocol</th>" not in page and "sound" not in page
    suite = ET.fromstring(junit_document([(report, None)])).find("testsuite")
    assert suite is not None
    props = {prop.get("name"): prop.get("value") for prop in suite.iter("property")}
    assert "protocol" not in props and props["dialect"].startswith("bullmq")
    assert props["bound"] == f"{bound} + tolerance 100"
    assert "recovered by BullMQ's stalled check" in summary_text(report)


def test_a_reference_report_names_its_protocol_and_lease_plus_reap():
    events = paused_worker_history().events()
    verdict = check(events)
    report = build_report("hand-written", "pass", verdict,
                          run={"protocol": "sound", "sut": REFERENCE})
    page = render_html(report, events, verdict)
    assert "lease_ms + reap_interval_ms = 1250 ms" in page  # the recovery chart's line
    assert "<th>recovery bound</th><td>1350 ms = lease 1000 + reap 250 + tolerance 100" in page
    assert "<th>protocol</th><td>sound</td>" in page
    assert "the reference worker and reaper" in page and "stalledInterval" not in page
    suite = ET.fromstring(junit_document([(report, None)])).find("testsuite")
    assert suite is not None
    props = {prop.get("name"): prop.get("value") for prop in suite.iter("property")}
    assert props["protocol"] == "sound" and "dialect" not in props
    # A foreign queue speaking the echomq dialect is not called "sound" either.
    foreign = {**FOREIGN, "dialect": "echomq", "reaper": ["node", "reaper.js"]}
    page = render_html({**report, "run": {"protocol": "sound", "sut": foreign}}, events, verdict)
    assert "<th>protocol</th>" not in page
    assert "<th>dialect</th><td>echomq (the reference protocol" in page


def judged(h: History) -> dict:
    verdict = check(h.events())
    return build_report("hand-written", "pass" if verdict.passed else "fail", verdict)


def test_junit_counts_testcases_and_failures_with_job_ids():
    passing, failing = judged(paused_worker_history()), judged(paused_worker_history(True))
    root = ET.fromstring(junit_document([(passing, "runs/a"), (failing, "runs/b")]))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 2
    assert [len(suite.findall("testcase")) for suite in suites] == [len(INVARIANTS)] * 2
    assert [suite.get("failures") for suite in suites] == ["0", "4"]
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == (
        str(2 * len(INVARIANTS)), "4", "0")
    failures = {case.get("name"): case.find("failure") for case in suites[1].iter("testcase")}
    assert failures["no_premature_reap"] is None
    lost = failures["no_loss"]
    assert lost is not None and "jobs b" in lost.get("message", "")
    assert '"lost": 1' in (lost.text or "")
    double = failures["no_double_completion"]
    assert double is not None and "jobs a" in double.get("message", "")
    properties = {p.get("name"): p.get("value") for p in suites[1].iter("property")}
    assert properties["bound_ms"] == "1350" and properties["run_dir"] == "runs/b"


# --- check / report on saved histories ---------------------------------------------------------
def saved_run(tmp_path: Path, h: History, name: str = "saved") -> Path:
    """A run directory as the runner leaves it: history.jsonl and report.json."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    h.write_jsonl(run_dir / "history.jsonl")
    (run_dir / "report.json").write_text(json.dumps(judged(h)))
    return run_dir


def test_the_summary_names_handler_durations_only_when_they_say_something():
    report = judged(paused_worker_history())
    rows = report["needless_by_duration"]
    for row in rows:
        row.update(attempts=0, needless=0)
    rows[0].update(attempts=5)  # every handler well inside its lease, none redelivered
    assert "by delivery-to-ack time" not in summary_text(report)
    rows[2].update(attempts=1)  # a handler that ran past the lease, redelivered or not
    assert "by delivery-to-ack time (x lease): 0-0.5x 0/" in summary_text(report)
    rows[2].update(attempts=0)
    rows[0].update(needless=1)
    assert "by delivery-to-ack time" in summary_text(report)


def test_a_recheck_compares_every_key_the_checker_decides():
    assert set(check(paused_worker_history().events()).as_dict()) <= set(VERDICT_KEYS)


@pytest.mark.parametrize(("broken", "code"), [(False, 0), (True, 1)], ids=["pass", "fail"])
def test_check_and_report_reproduce_a_saved_verdict(tmp_path: Path, broken: bool, code: int,
                                                    capsys):
    run_dir = saved_run(tmp_path, paused_worker_history(broken))
    saved = json.loads((run_dir / "report.json").read_text())
    again = cli_here(capsys, "check", str(run_dir), "--json")
    assert again.returncode == code, again.stderr
    rechecked = json.loads(again.stdout)
    assert {k: rechecked.get(k) for k in VERDICT_KEYS} == {k: saved.get(k) for k in VERDICT_KEYS}
    assert "same verdict as the saved report.json" in again.stderr
    rendered_again = cli_here(capsys, "report", str(run_dir))
    assert rendered_again.returncode == code, rendered_again.stderr
    page = (run_dir / "report.html").read_text()
    assert all(f"id='{section}'" in page for section in SECTIONS)
    suite = ET.parse(run_dir / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == ("4" if broken else "0")


def test_check_takes_the_bound_from_the_history_else_scenario_json(tmp_path: Path, capsys):
    # Recovery 1340 ms after the last renewal: within 1000 + 250 + 100, not 1000 + 250 + 0.
    def history(run: bool) -> History:
        h = History(lease_ms=1000, reap_interval_ms=250, tolerance_ms=100, run=run)
        h.enqueue("a", ts=0)
        h.claim("a", 1, "w1", ts=60)
        h.fault("kill", "w1", ts=100)
        h.reap("a", 1, ts=1400)
        h.claim("a", 2, "w2", ts=1410)
        h.complete("a", 2, "w2", ts=1500)
        h.phase("end", ts=1600, drained=1, aborted=0)
        return h

    in_history = tmp_path / "in-history"
    in_history.mkdir()
    history(run=True).write_jsonl(in_history / "history.jsonl")
    assert cli_here(capsys, "check", str(in_history)).returncode == 0
    from_scenario = tmp_path / "from-scenario"
    from_scenario.mkdir()
    history(run=False).write_jsonl(from_scenario / "history.jsonl")
    # nothing says what the bound is
    assert cli_here(capsys, "check", str(from_scenario)).returncode == 2
    (from_scenario / "scenario.json").write_text(json.dumps(
        {"topology": {"lease_ms": 1000, "reap_interval_ms": 250}, "check": {"tolerance_ms": 0}}))
    strict = cli_here(capsys, "check", str(from_scenario), "--json")
    assert strict.returncode == 1
    bound = json.loads(strict.stdout)["invariants"]["recovery_bound"]
    assert (bound["bound_ms"], bound["max_ms"], bound["ok"]) == (1250, 1300, False)


@pytest.mark.parametrize(("cause", "word", "code"),
                         [("interrupt", "aborted", 130), ("infra", "error", 3),
                          ("internal", "error", 3)])
def test_check_tells_an_aborted_run_from_a_broken_one(tmp_path: Path, cause: str, word: str,
                                                      code: int, capsys):
    h = History()
    h.enqueue("a", ts=0)
    h.phase("end", ts=100, drained=0, aborted=1, cause=cause)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    h.write_jsonl(run_dir / "history.jsonl")
    result = cli_here(capsys, "check", str(run_dir), "--json")
    assert result.returncode == code
    assert json.loads(result.stdout)["verdict"] == word


def test_report_without_a_saved_report_writes_one(tmp_path: Path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    paused_worker_history().write_jsonl(run_dir / "history.jsonl")
    result = cli_here(capsys, "report", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert json.loads((run_dir / "report.json").read_text())["verdict"] == "pass"
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert cli_here(capsys, "report", str(tmp_path / "nowhere")).returncode == 2


def test_report_json_lists_the_stranded_leases_and_counts_them():
    report = judged(paused_worker_history())
    assert report["schema"] == 3
    assert report["stranded_lease_count"] == 2
    assert report["stranded_leases"] == [
        {"job": "a", "attempt": 1, "worker": "w1", "fault_id": "f1", "fault_ts": 500,
         "renewed_ts": 450, "reap_ts": 1500, "reclaim_ts": 1550, "recomplete_ts": 1800},
        {"job": "b", "attempt": 1, "worker": "w1", "fault_id": "f1", "fault_ts": 500,
         "renewed_ts": 450, "reap_ts": 1500, "reclaim_ts": 1560, "recomplete_ts": 1850},
    ]


# A run directory as schema 1 left it, written by hand: the history as the runner and the Lua
# scripts wrote it then (faults without ``cuts_off``, a ``duration_ms`` of ""), and report.json
# with the stranded-lease count under ``stranded_leases``.
SCHEMA_1_HISTORY = """\
{"seq":"0-0","type":"run","scenario":"old-run","seed":"7","lease_ms":"1000","reap_interval_ms":"250","tolerance_ms":"100","workers":"w1,w2","report_only":"","max_stalls":"0","ts":"0"}
{"seq":"0-1","type":"phase","phase":"warmup","ts":"0"}
{"seq":"10-0","type":"enqueue","id":"a","ts":"10"}
{"seq":"11-0","type":"enqueue","id":"b","ts":"11"}
{"seq":"20-0","type":"claim","id":"a","attempt":"1","worker":"w1","lease_ms":"1000","deadline":"1020","ts":"20"}
{"seq":"30-0","type":"claim","id":"b","attempt":"1","worker":"w2","lease_ms":"1000","deadline":"1030","ts":"30"}
{"seq":"200-0","type":"fault","kind":"kill","worker":"w1","fault_id":"f1","target":"w1","duration_ms":"","ts":"200"}
{"seq":"300-0","type":"complete","id":"b","attempt":"1","worker":"w2","ts":"300"}
{"seq":"1100-0","type":"reap","id":"a","attempt":"1","worker":"w1","deadline":"1020","stalls":"1","ts":"1100"}
{"seq":"1150-0","type":"claim","id":"a","attempt":"2","worker":"w2","lease_ms":"1000","deadline":"2150","ts":"1150"}
{"seq":"1400-0","type":"complete","id":"a","attempt":"2","worker":"w2","ts":"1400"}
{"seq":"1500-0","type":"phase","phase":"end","drained":"1","aborted":"0","ts":"1500"}
"""


def as_schema_2(report: dict) -> dict:
    """``report`` as schema 2 wrote it: the jobs moved to the dead set under their old names."""
    dead = {("jobs" if key == "moved_to_dead" else key): value
            for key, value in report["dead_letter"].items()}
    stall = {("dead_lettered" if key == "moved_to_dead" else key): value
             for key, value in report["invariants"]["stall_limit"].items()}
    return {**report, "schema": 2, "dead_letter": dead,
            "invariants": {**report["invariants"], "stall_limit": stall}}


def schema_1_run(tmp_path: Path) -> tuple[Path, dict]:
    run_dir = tmp_path / "schema-1"
    run_dir.mkdir()
    (run_dir / "history.jsonl").write_text(SCHEMA_1_HISTORY)
    # The verdict as schema 1 wrote it: this version's keys, with the count under the old name
    # and the jobs moved to the dead set under theirs.
    report = as_schema_2(build_report("old-run", "pass", check(to_events([
        json.loads(line) for line in SCHEMA_1_HISTORY.splitlines()]))))
    del report["stranded_leases"]
    report = {**report, "schema": 1, "stranded_leases": report.pop("stranded_lease_count"),
              "run": {"wall_ms": 1500, "drained": True}}
    (run_dir / "report.json").write_text(json.dumps(report))
    return run_dir, report


def test_check_and_report_read_a_schema_1_run_directory(tmp_path: Path, capsys):
    run_dir, saved = schema_1_run(tmp_path)
    assert saved["stranded_leases"] == 1
    again = cli_here(capsys, "check", str(run_dir), "--json")
    assert again.returncode == 0, again.stderr
    rechecked = json.loads(again.stdout)
    assert rechecked["schema"] == 3 and rechecked["verdict"] == "pass"
    assert rechecked["stranded_lease_count"] == saved["stranded_leases"]
    assert [item["job"] for item in rechecked["stranded_leases"]] == ["a"]
    assert rechecked["run"] == saved["run"]  # what the run saw is carried over
    unchanged = [key for key in VERDICT_KEYS if key not in ("stranded_leases",
                                                            "stranded_lease_count")]
    renamed = upgrade_report(saved)  # the keys schema 3 renamed, under their new names
    assert {k: rechecked.get(k) for k in unchanged} == {k: renamed.get(k) for k in unchanged}
    # Schema 1 never wrote the list: that is the one difference the re-check notes.
    assert "differs from the saved report.json in stranded_leases " in again.stderr
    rendered_again = cli_here(capsys, "report", str(run_dir))
    assert rendered_again.returncode == 0, rendered_again.stderr
    assert "PASS" in (run_dir / "report.html").read_text()
    assert ET.parse(run_dir / "junit.xml").getroot().get("failures") == "0"
    assert json.loads((run_dir / "report.json").read_text()) == saved  # left as it was


def test_a_schema_1_report_reads_in_the_current_shape(tmp_path: Path):
    run_dir, saved = schema_1_run(tmp_path)
    upgraded = read_report(run_dir / "report.json")
    assert upgraded["stranded_lease_count"] == 1 and "stranded_leases" not in upgraded
    assert "moved_to_dead" in upgraded["dead_letter"] and "jobs" not in upgraded["dead_letter"]
    assert upgraded["schema"] == 1  # still says which version wrote it
    assert read_report(run_dir / "report.json") == upgrade_report(upgraded)  # idempotent
    current = judged(paused_worker_history())
    assert upgrade_report(current) is current


def dead_lettered_twice() -> History:
    """With max_stalls = 1: a dies at its second stall (an outcome: dead-lettered); b too, but
    its stale holder's complete is then accepted (a broken queue): moved to the dead set, yet
    completed, so not dead-lettered as an outcome."""
    h = History(lease_ms=1000, reap_interval_ms=250, tolerance_ms=100, max_stalls=1)
    for job in ("a", "b"):
        h.enqueue(job, ts=0)
        h.claim(job, attempt=1, worker="w1", ts=10)
        h.reap(job, attempt=1, ts=1100)
        h.claim(job, attempt=2, worker="w2", ts=1200)
        h.dead(job, attempt=2, ts=2300, stalls=2)
    h.complete("b", attempt=2, worker="w2", ts=2400)
    h.phase("end", ts=2500, drained=1, aborted=0)
    return h


def test_dead_lettered_is_an_outcome_and_moved_to_dead_what_the_reaper_did():
    """One name, one meaning: jobs.dead_lettered and outcomes.dead_lettered count the jobs whose
    outcome is the dead letter; dead_letter.moved_to_dead and stall_limit's figure count every
    job the reaper moved to the dead set, whatever came of it."""
    report = judged(dead_lettered_twice())
    assert report["jobs"]["dead_lettered"] == report["outcomes"]["dead_lettered"] == 1
    assert report["dead_letter"]["moved_to_dead"] == 2
    assert report["invariants"]["stall_limit"]["moved_to_dead"] == 2
    assert "2 moved to dead" in summary_text(report)


def test_a_schema_2_report_reads_with_moved_to_dead(tmp_path: Path, capsys):
    """Schema 2 called moved_to_dead "jobs" (dead_letter) and "dead_lettered" (stall_limit):
    read in the current shape, and `check` finds no difference from a re-check."""
    run_dir = tmp_path / "schema-2"
    run_dir.mkdir()
    h = dead_lettered_twice()
    h.write_jsonl(run_dir / "history.jsonl")
    saved = {**as_schema_2(judged(h)), "run": {"wall_ms": 2500, "drained": True}}
    (run_dir / "report.json").write_text(json.dumps(saved))
    upgraded = read_report(run_dir / "report.json")
    assert upgraded["dead_letter"]["moved_to_dead"] == 2 and "jobs" not in upgraded["dead_letter"]
    assert upgraded["invariants"]["stall_limit"]["moved_to_dead"] == 2
    assert "dead_lettered" not in upgraded["invariants"]["stall_limit"]
    assert upgraded["jobs"]["dead_lettered"] == 1  # the outcome keeps its name
    assert list(upgraded["dead_letter"]) == list(judged(h)["dead_letter"])  # same place
    again = cli_here(capsys, "check", str(run_dir), "--json")
    assert "differs from the saved report.json" not in again.stderr, again.stderr


def test_a_drawing_that_fails_costs_no_verdict(tmp_path: Path):
    h = paused_worker_history()
    events = h.events()
    verdict = check(events, CheckConfig(1000, 250, 100))
    report = build_report("hand-written", "pass", verdict)
    del report["invariants"]["recovery_bound"]["bound_ms"]  # a report the page cannot draw
    problems = write_rendered_reports(tmp_path, report, verdict, events)
    assert len(problems) == 1 and problems[0].startswith("report.html: KeyError")
    assert ET.parse(tmp_path / "junit.xml").getroot().get("tests") == str(len(INVARIANTS))


def test_suite_helpers_name_run_dirs_and_pick_the_worst_exit_code(tmp_path: Path, capsys):
    from chaos.cli import _suite_run_dirs
    from chaos.run.suite import worst_exit_code

    assert _suite_run_dirs(tmp_path, ["a", "b", "a", "a"]) == [
        tmp_path / "a", tmp_path / "b", tmp_path / "a-2", tmp_path / "a-3"]
    assert worst_exit_code([0, 1, 0]) == 1
    assert worst_exit_code([1, 3, 0]) == 3
    assert worst_exit_code([3, 130, 1]) == 130
    assert worst_exit_code([]) == 0
    plans = cli_here(capsys, "run", str(ROOT / "scenarios" / "kill-worker.toml"),
                     str(ROOT / "scenarios" / "pause-worker.toml"), "--dry-run")
    assert plans.returncode == 0
    assert "scenario kill-worker" in plans.stdout and "scenario pause-worker" in plans.stdout


def test_a_suite_stopped_by_ctrl_c_lists_the_scenarios_not_run_in_junit(tmp_path: Path):
    """As its table does: a scenario after the interrupted one is a skipped testcase."""
    from chaos.run.runner import RunResult
    from chaos.run.suite import suite_junit_runs

    aborted = RunResult("aborted", 130, tmp_path / "a",
                        build_report("a", "aborted", None, error="interrupted"), None)
    runs = suite_junit_runs([aborted], ["a", "b"], [tmp_path / "a", tmp_path / "b"])
    assert "not run" in suite_table([aborted], ["a", "b"])
    root = ET.fromstring(junit_document(runs))
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert list(suites) == ["echomq-chaos.a", "echomq-chaos.b"]
    (case,) = suites["echomq-chaos.b"].iter("testcase")
    skipped = case.find("skipped")
    assert skipped is not None and "not run" in str(skipped.get("message"))
    assert (suites["echomq-chaos.b"].get("skipped"), suites["echomq-chaos.b"].get("errors")) \
        == ("1", "0")


# --- live progress ------------------------------------------------------------------------------
def _scenario():
    return scenario_from_dict({"name": "progress", "phases": {"warmup_ms": 1000,
                                                              "chaos_ms": 2000,
                                                              "heal_ms": 500}}, "test")


def test_progress_off_a_terminal_is_one_line_per_phase():
    stream = io.StringIO()
    progress = Progress(stream, _scenario(), planned_faults=2)
    progress.enter("setup", "valkey + workers")
    for count in range(50):
        progress.update(Status(enqueued=count, claimed=count, pending=1, faults=count // 25))
    progress.enter("chaos")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("phase setup valkey + workers")
    assert "phase chaos" in lines[1] and "enqueued 49" in lines[1] and "faults 1/2" in lines[1]


def test_progress_off_a_terminal_says_the_figures_while_a_long_phase_lasts():
    stream = io.StringIO()
    # every update is "long enough" here; the default is one line a minute
    progress = Progress(stream, _scenario(), planned_faults=2, quiet_line_every_s=0)
    progress.enter("chaos")
    progress.update(Status(enqueued=7, claimed=6, completed=5, faults=1))
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert "chaos for" in lines[1] and "s planned" in lines[1]
    assert "enqueued 7" in lines[1] and "faults 1/2" in lines[1]


def test_progress_on_a_terminal_draws_a_live_panel():
    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            progress = Progress(terminal, _scenario(), planned_faults=3)
            progress.enter("chaos")
            progress.update(Status(enqueued=42, claimed=40, completed=37, pending=2, active=3,
                                   faults=1))
            time.sleep(0.3)
            progress.update(Status(enqueued=43, claimed=41, completed=38, pending=2, active=3,
                                   faults=1))
            progress.close()
        os.set_blocking(leader, False)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(leader)
        os.close(follower)
    text = output.decode(errors="replace")
    assert "echomq-chaos · progress" in text and "planned" in text
    assert "enqueued 43" in text and "1 of 3 applied" in text


# --- real runs ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """kill-worker (passes) and unfenced-complete (fails) in one `run`."""
    out = tmp_path_factory.mktemp("suite") / "suite"
    result = cli("run", str(ROOT / "scenarios" / "kill-worker.toml"),
                 str(ROOT / "scenarios" / "mutants" / "unfenced-complete.toml"),
                 "--out", str(out), "--junit", str(out.parent / "ci" / "junit.xml"))
    return out, result


@pytest.mark.integration
def test_a_suite_run_has_one_table_one_junit_and_the_worst_exit_code(suite):
    out, result = suite
    assert result.returncode == 1, result.stderr[-3000:]
    table = result.stdout.splitlines()
    assert table[0].split()[:2] == ["scenario", "verdict"]
    assert table[1].split()[:2] == ["kill-worker", "PASS"]
    assert table[2].split()[:3] == ["unfenced-complete", "FAIL",
                                    "no_double_completion,exclusive_lease"]
    for name in ("kill-worker", "unfenced-complete"):
        for artefact in ("history.jsonl", "report.json", "report.html", "junit.xml"):
            assert (out / name / artefact).stat().st_size > 0
    combined = (out / "junit.xml").read_text()
    assert (out.parent / "ci" / "junit.xml").read_text() == combined
    root = ET.fromstring(combined)
    assert [s.get("name") for s in root.findall("testsuite")] == [
        "echomq-chaos.kill-worker", "echomq-chaos.unfenced-complete"]
    failed = json.loads((out / "unfenced-complete" / "report.json").read_text())["invariants"]
    expected_failures = sum(1 for result in failed.values() if not result["ok"])
    assert (root.get("tests"), root.get("failures")) == (str(2 * len(INVARIANTS)),
                                                         str(expected_failures))


@pytest.mark.integration
@pytest.mark.parametrize(("name", "code"), [("kill-worker", 0), ("unfenced-complete", 1)])
def test_check_reproduces_a_real_runs_verdict_exactly(suite, name: str, code: int, capsys):
    run_dir = suite[0] / name
    saved = json.loads((run_dir / "report.json").read_text())
    again = cli_here(capsys, "check", str(run_dir), "--json")
    assert again.returncode == code
    rechecked = json.loads(again.stdout)
    assert {k: rechecked.get(k) for k in VERDICT_KEYS} == {k: saved.get(k) for k in VERDICT_KEYS}
    assert saved["invariants"] and saved["jobs"]["enqueued"] > 0
    assert rechecked["run"] == saved["run"]
    junit_before = (run_dir / "junit.xml").read_text()
    (run_dir / "junit.xml").unlink()
    (run_dir / "report.html").unlink()
    assert cli_here(capsys, "report", str(run_dir)).returncode == code
    assert (run_dir / "junit.xml").read_text() == junit_before
    page = (run_dir / "report.html").read_text()
    assert all(f"id='{section}'" in page for section in SECTIONS)
    assert external_urls(page) == []
    assert page.count("<svg") >= 3  # a fault in each scenario: its lease chart is drawn


@pytest.mark.integration
def test_report_html_in_headless_chromium_is_not_blank(suite, tmp_path: Path):
    from matplotlib.image import imread

    chromium = require_tool("chromium", "chromium")

    page = suite[0] / "unfenced-complete" / "report.html"
    screenshot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
             "--window-size=1366,1600", f"--screenshot={screenshot}", page.as_uri()],
            capture_output=True, timeout=90, check=True)
    pixels = imread(screenshot)[:, :, :3]
    assert pixels.shape[:2] == (1600, 1366)
    import numpy

    flat = (pixels * 255).astype(int).reshape(-1, 3)
    colours, counts = numpy.unique(flat, axis=0, return_counts=True)
    drawn = 1 - counts.max() / len(flat)  # everything that is not the background colour
    assert len(colours) > 100 and drawn > 0.2, (len(colours), drawn)
    # The FAIL badge (#cf222e) is drawn near the top, where a reader looks first.
    top = (pixels[:120] * 255).astype(int)
    red = ((abs(top[:, :, 0] - 0xCF) < 12) & (abs(top[:, :, 1] - 0x22) < 12)
           & (abs(top[:, :, 2] - 0x2E) < 12)).sum()
    assert red > 1500, red


@pytest.mark.parametrize("contract, expected", [
    ("toolkit", "echomq (the reference protocol's scripts and keys)"),
    ("echomq", "echomq (EchoMQ's own scripts, decoded by what they do to its keys)")])
def test_the_settings_row_names_whose_scripts_an_echomq_run_ran(contract: str, expected: str):
    """A run of the real EchoMQ's scripts (contract = "echomq") is not said to have run the
    reference protocol's; one of the exported scripts (the toolkit's contract) is."""
    from chaos.report.terms import what_ran

    report = {"run": {"sut": {"foreign": True, "dialect": "echomq", "contract": contract,
                              "workers": ["node", "sut.js", "worker"], "reaper": "none"}}}
    assert dict(what_ran(report))["dialect"] == expected
