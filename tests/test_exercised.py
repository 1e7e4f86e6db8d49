"""A run that exercised nothing says so (chaos/check/exercised.py; docs/reports-and-ci.md,
"Exercised"): hand-written histories (the checker is pure), the words in the summary and
report.json; the real runs are in tests/test_exercised_e2e.py."""

from __future__ import annotations

from histories import History, to_events

from chaos.check.checker import check
from chaos.history.schema import Fault, FaultSkipped
from chaos.report.summary import build_report, summary_text


def judged(history: History) -> dict:
    verdict = check(history.events())
    return build_report("hand-written", verdict.word, verdict)


def busy(history: History, worker: str = "w1", jobs: int = 2) -> None:
    """``jobs`` jobs enqueued and claimed by ``worker`` at 10 ms."""
    for number in range(jobs):
        history.enqueue(f"j{number}", ts=0)
        history.claim(f"j{number}", attempt=1, worker=worker, ts=10)


def test_a_kill_that_strands_leases_exercises_recovery():
    h = History()
    h.phase("chaos", ts=5)
    busy(h)
    h.fault("kill", "w1", ts=200)
    for number in range(2):
        h.reap(f"j{number}", attempt=1, ts=1100)
        h.claim(f"j{number}", attempt=2, worker="w2", ts=1110)
        h.complete(f"j{number}", attempt=2, worker="w2", ts=1200)
    report = judged(h)
    assert report["verdict"] == "pass"
    assert report["exercised"] is True
    assert report["exercise"]["reason"] == \
        "2 lease(s) stranded by 1 of the 1 fault(s) that can strand one"
    (fault,) = report["exercise"]["faults"]
    assert (fault["fault_id"], fault["held"], fault["stranded"], fault["exercised"],
            fault["at_ms"]) == ("f1", 2, 2, True, 195)
    assert "  exercised yes: 2 lease(s) stranded by 1 of the 1 fault(s)" in summary_text(report)


def test_a_kill_of_a_worker_holding_nothing_passes_unexercised_and_says_why():
    h = History()
    h.phase("chaos", ts=5)
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=172)  # 28 ms before the kill: nothing held
    h.fault("kill", "w1", ts=200)
    report = judged(h)
    assert report["verdict"] == "pass" and report["stranded_lease_count"] == 0
    assert report["exercised"] is False
    (fault,) = report["exercise"]["faults"]
    assert fault["exercised"] is False and fault["held"] == 0
    assert fault["reason"] == "stranded no lease (its target held none)"
    summary = summary_text(report)
    assert ("  exercised no: no fault stranded a lease: kill f1 w1 at chaos+195 ms stranded no "
            "lease (its target held none)") in summary
    assert "recovery was not put to the test" in summary
    assert summary.splitlines()[0] == \
        "scenario hand-written: PASS (not exercised: no fault stranded a lease)"


def test_a_pause_whose_holder_renewed_after_it_stranded_nothing():
    h = History()
    busy(h, jobs=1)
    fault = h.fault("pause", "w1", ts=100)
    h.heal(fault, ts=300)
    h.extend("j0", attempt=1, worker="w1", ts=310)  # back before its lease lapsed
    h.complete("j0", attempt=1, worker="w1", ts=400)
    report = judged(h)
    assert report["exercised"] is False
    (seen,) = report["exercise"]["faults"]
    assert (seen["held"], seen["stranded"], seen["at_ms"]) == (1, 0, None)
    assert seen["reason"] == ("stranded no lease (its target held 1, and renewed or finished "
                              "each after the fault)")


def test_the_oldest_holder_gone_when_the_fault_was_applied_is_named():
    h = History()
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=150)
    h.write(Fault("f1", "kill", "w1", target="holding_oldest_lease", holder_found=False), 200)
    report = judged(h)
    assert report["exercised"] is False
    assert report["exercise"]["faults"][0]["reason"] == (
        "stranded no lease (its target held none: no worker held a live lease when it was "
        "applied)")


def test_one_fault_that_strands_makes_the_run_exercised_whatever_the_others_did():
    h = History()
    busy(h, jobs=1)
    h.fault("kill", "w2", ts=100)  # held nothing
    h.fault("kill", "w1", ts=200)
    h.reap("j0", attempt=1, ts=1100)
    h.claim("j0", attempt=2, worker="w3", ts=1110)
    h.complete("j0", attempt=2, worker="w3", ts=1200)
    report = judged(h)
    assert report["exercised"] is True
    assert [fault["exercised"] for fault in report["exercise"]["faults"]] == [False, True]
    assert report["exercise"]["reason"] == \
        "1 lease(s) stranded by 1 of the 2 fault(s) that can strand one"


def test_no_fault_at_all_is_not_called_unexercised():
    h = History()
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=150)
    report = judged(h)
    assert report["exercised"] is None and report["exercise"]["faults"] == []
    assert report["exercise"]["reason"].startswith("no fault in the run")
    assert "  exercised n/a: no fault in the run" in summary_text(report)


def test_faults_that_cannot_strand_a_lease_are_stated_not_counted():
    h = History()
    busy(h, jobs=1)
    h.fault("latency", "w1", ts=100, cuts_off=False)  # slows, cuts nobody off
    h.fault("pause", "reaper", ts=120)  # cuts off a process that holds no lease
    h.write(Fault("f3", "valkey_restart", "valkey-1", killed_ts=130, down_ms=50), 180)
    h.complete("j0", attempt=1, worker="w1", ts=250)
    records = h.records()
    records[0]["workers"] = "w1,w2"  # the run event names its workers
    verdict = check(to_events(records))
    report = build_report("hand-written", verdict.word, verdict)
    assert report["exercised"] is None
    assert report["exercise"]["reason"] == ("no fault of the run can strand a lease (latency 1, "
                                            "pause 1, valkey_restart 1): recovery was not what "
                                            "it tested")
    reasons = [fault["reason"] for fault in report["exercise"]["faults"]]
    assert reasons[0] == "only slows its target: it strands no lease by design (1 lease(s) " \
                         "held under it)"
    assert reasons[1] == "hits no worker: its target holds no lease"
    assert reasons[2].startswith("crashes the store")


def test_planned_faults_that_never_found_a_target_leave_the_run_unexercised():
    h = History()
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=150)
    h.write(FaultSkipped("kill", "holding_oldest_lease"), 2200)
    report = judged(h)
    assert report["verdict"] == "unknown"  # as before: the run did not test what it says
    assert report["exercised"] is False
    assert report["exercise"]["reason"] == (
        "no fault that can strand a lease was applied: 1 planned fault(s) found no target when "
        "due (kill holding_oldest_lease)")


def test_the_fault_event_keeps_what_the_nemesis_saw_and_older_histories_read_as_unknown():
    h = History()
    h.write(Fault("f1", "kill", "w1", target="holding_oldest_lease", holder_found=True), 10)
    h.write(Fault("f2", "kill", "w2", target="holding_oldest_lease", holder_found=False), 20)
    h.fault("kill", "w3", ts=30)
    decoded = [Fault.decode(event) for event in h.events() if event.type == "fault"]
    assert [fault.holder_found for fault in decoded] == [True, False, None]
    assert all("holder_found" not in fault.parameters for fault in decoded)


def test_junit_carries_the_exercise_as_a_property():
    from chaos.report.junit import testsuite

    h = History()
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=150)
    h.fault("pause", "w1", ts=200)
    suite = testsuite(judged(h))
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["exercised"] == ("no: no fault stranded a lease: pause f1 w1 stranded no "
                                       "lease (its target held none)")


def test_the_page_says_it_on_the_faults_card():
    from chaos.report.html.page import render_html

    h = History()
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=150)
    h.fault("pause", "w1", ts=200)
    page = render_html(judged(h), h.events(), check(h.events()))
    assert ("faults · stranded leases (not exercised: no fault stranded a lease: pause f1 w1 "
            "stranded no lease (its target held none))") in page


def test_a_suites_table_marks_a_run_that_exercised_nothing(tmp_path):
    from chaos.run.result import RunResult
    from chaos.run.suite import suite_table

    h = History()
    busy(h, jobs=1)
    h.complete("j0", attempt=1, worker="w1", ts=150)
    h.fault("kill", "w1", ts=200)
    report = judged(h)
    table = suite_table([RunResult("pass", 0, tmp_path, report, None)], ["hand-written"])
    assert "hand-written  PASS (not exercised)  -" in table
