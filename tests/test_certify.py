"""``echomq-chaos certify`` (docs/certify.md): the battery against one queue, read per bug class.

The static tables agree with the battery's files and cover the mutant zoo; the per-class reading
is checked on runs made up by hand; then, end to end (real valkey-server, real processes, really
frozen and killed), a short battery passes on the reference queue, a mutant fails with its class,
the Node example passes and its broken switch is caught, and bad input exits 2 naming the field.
The full battery over every variant is measured in docs/certify.md, not here (minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.names import INVARIANTS, PROTOCOLS
from chaos.scenario.loading import load_scenario
from chaos.scenario.sut import COOPERATIVE_FAULTS
from chaos.tools.certify import (
    BATTERY,
    BUG_CLASSES,
    CertifyResult,
    CertifyRun,
    Target,
    classify,
    plan_battery,
)
from chaos.tools.certify_table import table
from tests.test_sut_node import NODE_SUT, processes_in
from tests.test_sut_node import _missing as node_missing

ROOT = Path(__file__).resolve().parent.parent
BATTERY_DIR = ROOT / "scenarios" / "certify"
NODE_SCENARIO = ROOT / "scenarios" / "node" / "kill-worker.toml"
BULLMQ_SCENARIO = ROOT / "scenarios" / "bullmq" / "kill-worker.toml"
ECHOMQ_SCENARIO = ROOT / "scenarios" / "echomq" / "kill-worker.toml"
BY_KEY = {bug.key: bug for bug in BUG_CLASSES}


def certify(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", "certify", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def made_up(scenario: str, verdict: str = "pass", failed: tuple[str, ...] = (),
            undecided: tuple[str, ...] = ()) -> CertifyRun:
    return CertifyRun(scenario, 1, verdict, 0, list(failed), list(undecided), 1000, "-")


# --- the tables ----------------------------------------------------------------------------------

def test_the_battery_table_names_exactly_the_battery_files():
    assert sorted(path.stem for path in BATTERY_DIR.glob("*.toml")) == \
        sorted(entry.name for entry in BATTERY)
    for entry in BATTERY:
        scenario = load_scenario(BATTERY_DIR / f"{entry.name}.toml")
        assert scenario.name == entry.name and scenario.protocol == "sound"
        assert scenario.faults or scenario.check.max_needless == 0, entry.name  # it tests something


def test_every_class_is_seen_by_invariants_and_every_zoo_variant_has_a_class():
    for bug in BUG_CLASSES:
        assert bug.scenarios and bug.invariants and set(bug.invariants) <= set(INVARIANTS)
    zoo = {load_scenario(path).protocol for path in (ROOT / "scenarios" / "mutants").glob("*.toml")}
    assert zoo == set(PROTOCOLS) - {"sound"}
    assert {variant for bug in BUG_CLASSES for variant in bug.zoo} == zoo


def test_every_class_has_a_scenario_a_foreign_sut_can_run():
    """Reference-only scenarios (a fault the reference worker carries out on itself) may add
    certainty, but no class may depend on them alone."""
    reference_only = {entry.name for entry in BATTERY
                      if any(fault.kind in COOPERATIVE_FAULTS for fault in
                             load_scenario(BATTERY_DIR / f"{entry.name}.toml").faults)}
    assert reference_only  # the check below can fail
    for bug in BUG_CLASSES:
        assert set(bug.scenarios) - reference_only, bug.key


# --- reading runs per class ----------------------------------------------------------------------

def test_a_class_is_seen_only_by_its_invariants_in_its_own_scenarios():
    runs = [made_up("lone-worker-frozen", "fail", ("exclusive_lease",)),
            made_up("all-workers-frozen"),
            made_up("long-handlers", "fail", ("no_double_completion", "needless_limit"))]
    ran = {run.scenario for run in runs}
    skips_active = classify(BY_KEY["complete-skips-active"], runs, {}, ran)
    assert skips_active.status == "SEEN" and len(skips_active.runs) == 2
    assert [run.scenario for run in skips_active.elsewhere] == ["long-handlers"]
    # exclusive_lease is not the double completion's invariant; its other scenario never ran
    double = classify(BY_KEY["double-completion"], runs, {}, ran)
    assert double.status == "not seen (1 of its 3 scenarios not run)"
    assert double.not_run == ["stale-finish-during-rework"]
    assert classify(BY_KEY["non-renewing"], runs, {}, ran).status == "SEEN"
    assert classify(BY_KEY["single-batch-reaper"], runs, {}, ran).status == "not run"


def test_a_run_that_could_not_decide_leaves_its_classes_undecided():
    bug = BY_KEY["lost-job"]
    runs = [made_up("kill-busy-workers", "unknown")]
    skipped = {"kill-in-claim-gap": "its kill_in_claim_gap fault needs the claim-gap hook"}
    found = classify(bug, runs, skipped, {"kill-busy-workers"})
    assert found.status == "undecided" and found.not_applicable == skipped
    blind = [made_up("kill-busy-workers", "fail", ("recovery_bound",), ("no_loss",))]
    assert classify(bug, blind, skipped, {"kill-busy-workers"}).status == "undecided"
    assert classify(bug, [], skipped, set()).status == "not run"
    everything_skipped = {"kill-in-claim-gap": "-", "kill-busy-workers": "-"}
    assert classify(bug, [], everything_skipped, set()).status == "not applicable"


def test_the_table_says_per_class_what_each_scenario_found_and_the_exit_code_is_the_worst():
    runs = [made_up("lone-worker-frozen", "fail", ("exclusive_lease",)),
            *(made_up("staggered-lapses", "fail", ("exclusive_lease",)) for _ in range(2)),
            made_up("slow-link", "unknown")]
    runs[1].seed, runs[2].seed = 7, 8
    runs[0].exit_code = runs[1].exit_code = runs[2].exit_code = 1
    runs[3].exit_code = 4
    result = CertifyResult("a queue", "sound", 2, runs, {"kill-in-claim-gap": "why not"})
    assert result.exit_code == 1 and result.word == "FAIL"
    text = table(result)
    assert "  resurrected lease [exclusive_lease]: SEEN" in text
    assert "also failed elsewhere: staggered-lapses seeds 7, 8 (exclusive_lease)" in text
    assert "lapse judged by the client's clock [no_premature_reap, lease_length]: undecided" in text
    assert "kill-in-claim-gap           n/a: why not" in text
    assert text.endswith("certify: FAIL (4 runs, 3 failed)")


def test_a_run_that_exercised_nothing_is_no_evidence_and_its_retry_stands_in_for_it():
    bug = BY_KEY["resurrected-lease"]  # lone-worker-frozen alone is built to reach it
    unexercised = made_up("lone-worker-frozen")
    unexercised.exercised, unexercised.unexercised = False, "pause f1 worker-1 stranded no lease"
    assert not unexercised.evidence
    ran = {"lone-worker-frozen"}
    # its retries spent: the class is not "not seen", and a pass is unknown (exit 4) at best
    assert classify(bug, [unexercised], {}, ran).status == "not exercised"
    result = CertifyResult("a queue", "sound", 1, [unexercised], retries=2)
    assert result.exit_code == 4 and result.word == "UNKNOWN"
    text = table(result)
    assert "(a run whose faults strand no lease is no evidence: it is run again with another " \
           "seed, up to 2 times a run: --unexercised-retries)" in text
    assert "PASS (not exercised: pause f1 worker-1 stranded no lease; retries spent)" in text
    assert text.endswith("certify: UNKNOWN (1 runs, 0 failed, 1 not exercised (no evidence))")
    # retried with another seed, which stranded one: the retry is the evidence
    unexercised.retried_with = 30
    retry = made_up("lone-worker-frozen")
    retry.seed, retry.exercised = 30, True
    assert classify(bug, [unexercised, retry], {}, ran).status == "not seen"
    result = CertifyResult("a queue", "sound", 1, [unexercised, retry], retries=2)
    assert result.exit_code == 0
    assert "PASS (not exercised: pause f1 worker-1 stranded no lease; retried with seed 30)" \
        in table(result)
    # a run that failed stands on what it saw, exercised or not
    failed = made_up("lone-worker-frozen", "fail", ("exclusive_lease",))
    failed.exercised = False
    assert failed.evidence and classify(bug, [failed], {}, ran).status == "SEEN"


def test_a_scenario_the_queue_cannot_run_is_not_applicable_not_an_error():
    """The reference-only scenarios against a SUT of its own; a fault on the reaper of a queue
    that runs none."""
    node = {run.entry.name: run.skipped for run in
            plan_battery(Target.from_file(NODE_SCENARIO, None), seeds=1)}
    assert node["kill-in-claim-gap"] and "claim-gap hook" in node["kill-in-claim-gap"]
    assert node["skewed-reaper-clock"] and "clock offset file" in node["skewed-reaper-clock"]
    assert not node["lone-worker-frozen"]
    no_reaper = {run.entry.name: run.skipped for run in
                 plan_battery(Target.reference("no-reaper"), seeds=1)}
    assert [name for name, why in no_reaper.items() if why] == ["skewed-reaper-clock"]


# --- the battery fitted to the queue's family ----------------------------------------------------

def stops_every_worker() -> set[str]:
    return {entry.name for entry in BATTERY
            if load_scenario(BATTERY_DIR / f"{entry.name}.toml").may_cut_off_every_worker()}


def test_a_queue_whose_workers_reap_runs_its_standalone_reaper_where_every_worker_stops():
    """BullMQ's workers are its only stalled checkers: a scenario that freezes every worker at
    once gets the SUT's standalone reaper beside them (as many as the scenario's reapers), and
    says so; every other scenario runs as written, with no reaper process."""
    assert stops_every_worker() == {"lone-worker-frozen", "all-workers-frozen"}
    planned = {run.entry.name: run for run in
               plan_battery(Target.from_file(BULLMQ_SCENARIO, None), seeds=1)}
    standalone = ["node", "worker.js", "--stalled-checks-only"]
    for name, run in planned.items():
        if name in stops_every_worker():
            assert run.scenario is not None and run.scenario.sut.reaper == standalone
            assert run.adapted and "stop every worker at once" in run.adapted
            assert "BullMQ's workers are its only stalled checkers" in run.adapted
            assert len(run.scenario.reaper_names) == run.scenario.topology.reapers
        elif run.scenario is not None:
            assert run.scenario.sut.reaper == "none" and run.scenario.reaper_names == []
            assert run.adapted is None
    assert planned["all-workers-frozen"].scenario.reaper_names == ["reaper-1", "reaper-2"]


def test_without_a_standalone_reaper_such_a_scenario_is_not_applicable_with_its_reason(
        tmp_path: Path):
    text = BULLMQ_SCENARIO.read_text().replace(
        'cwd = "../../sut/bullmq"', f'cwd = "{ROOT / "sut" / "bullmq"}"')
    path = tmp_path / "bullmq.toml"
    path.write_text("\n".join(line for line in text.splitlines()
                              if not line.startswith("standalone_reaper")))
    planned = {run.entry.name: run for run in plan_battery(Target.from_file(path, None), 1)}
    for name in stops_every_worker():
        assert planned[name].scenario is None
        assert "stop every worker at once" in (planned[name].skipped or "")
        assert "standalone_reaper" in (planned[name].skipped or "")
    result = CertifyResult("bullmq", "sound", 1, [made_up("slow-link")],
                           {run.entry.name: run.skipped for run in planned.values()
                            if run.skipped})
    assert "lone-worker-frozen          n/a: its faults stop every worker at once" in table(result)
    assert BY_KEY["complete-skips-active"].scenarios == ("lone-worker-frozen",
                                                         "all-workers-frozen")
    found = {finding.bug.key: finding.status for finding in result.findings()}
    assert found["complete-skips-active"] == "not applicable"


def test_the_fit_is_the_familys_not_the_dialects():
    """Any SUT whose workers reap is fitted the same way (here the EchoMQ-contract example
    with its reaper turned off); a queue with a reaper process, and the reference queue's
    no-reaper variant (its missing reaper is the bug), run every scenario as written."""
    echomq_reaping = {run.entry.name: run for run in plan_battery(
        Target.from_file(ECHOMQ_SCENARIO, None), 1, overrides=['sut.reaper="none"'])}
    for name in stops_every_worker():
        assert "its workers reap (sut.reaper = 'none')" in (echomq_reaping[name].skipped or "")
    given = {run.entry.name: run for run in plan_battery(
        Target.from_file(ECHOMQ_SCENARIO, None), 1,
        overrides=['sut.reaper="none"', 'sut.standalone_reaper=["node", "sut.js", "reaper"]'])}
    assert given["lone-worker-frozen"].scenario.sut.reaper == ["node", "sut.js", "reaper"]
    for target in (Target.from_file(ECHOMQ_SCENARIO, None), Target.reference(None),
                   Target.reference("no-reaper")):
        assert not any(run.adapted for run in plan_battery(target, 1))
    # what was certified is named with the --set every scenario got
    assert Target.reference(None).with_overrides(["seed=5", "topology.heartbeat_ms=0"]).label \
        .endswith("every scenario with --set seed=5, --set topology.heartbeat_ms=0")


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "named"), [
    (["scenarios/kill-worker.toml"], "[sut]"),
    (["--protocol", "bogus"], "--protocol 'bogus': unknown protocol"),
    (["scenarios/no-such-file.toml"], "no such file"),
    (["scenarios/node/kill-worker.toml", "--protocol", "unfenced-complete"], "--protocol"),
    (["--only", "no-such-scenario"], "--only no-such-scenario"),
    (["--seeds", "0"], "--seeds 0"),
    (["--set", "topology.workers=0", "--only", "slow-link"], "topology.workers = 0"),
], ids=["no-sut", "unknown-protocol", "no-file", "protocol-with-sut", "only", "seeds", "set"])
def test_bad_input_exits_2_naming_the_field(args: list[str], named: str, tmp_path: Path):
    out = tmp_path / "out"
    result = certify(*args, "--out", str(out), timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert named in result.stderr
    assert not out.exists()  # refused before anything ran


# --- end to end ----------------------------------------------------------------------------------

def read_summary(out: Path) -> tuple[dict, dict[str, dict]]:
    summary = json.loads((out / "certify.json").read_text())
    return summary, {found["class"]: found for found in summary["classes"]}


@pytest.mark.integration
def test_a_short_battery_on_the_reference_queue_passes(tmp_path: Path):
    out = tmp_path / "certify"
    result = certify("--only", "stale-finish-during-rework", "--only", "lone-worker-frozen",
                     "--out", str(out), "--store", str(tmp_path / "runs.sqlite"))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary, classes = read_summary(out)
    assert summary["verdict"] == "PASS" and summary["protocol"] == "sound"
    assert [(run["scenario"], run["verdict"]) for run in summary["runs"]] == [
        ("stale-finish-during-rework", "pass"), ("lone-worker-frozen", "pass")]
    from chaos.store.database import open_store  # --store: each run of the battery recorded

    store = open_store(str(tmp_path / "runs.sqlite"))
    try:
        assert [(run.record.scenario, run.record.verdict, run.record.command)
                for run in store.runs()] == [("stale-finish-during-rework", "pass", "certify"),
                                             ("lone-worker-frozen", "pass", "certify")]
    finally:
        store.close()
    assert classes["stale-finish"]["status"].startswith("not seen")
    assert classes["resurrected-lease"]["status"] == "not seen"
    assert classes["lost-job"]["status"] == "not run"
    assert "certify: PASS (2 runs, 0 failed)" in result.stdout


@pytest.mark.integration
def test_a_battery_run_that_stranded_nothing_is_retried_and_never_counted(tmp_path: Path):
    """lone-worker-frozen with its one job done in the warmup (100 ms) and its pause aimed at
    the worker by name: the worker holds nothing when frozen, whatever the seed."""
    out = tmp_path / "certify"
    result = certify("--only", "lone-worker-frozen", "--unexercised-retries", "1",
                     "--set", "topology.handler.fixed_ms=100",
                     "--set", 'faults.0.target="worker-1"', "--set", "phases.chaos_ms=1500",
                     "--set", "faults.0.duration_ms=1000", "--out", str(out))
    assert result.returncode == 4, result.stdout + result.stderr[-3000:]
    assert "up to 1 time;" in result.stderr
    assert "NOT EXERCISED (no fault stranded a lease: pause f1 worker-1 at chaos+" \
           in result.stderr
    assert "no evidence, run again with seed 30" in result.stderr
    assert "no evidence, and its retries are spent (1)" in result.stderr
    assert "seed 30: PASS (not exercised: no fault stranded a lease: pause f1 worker-1 at " \
           "chaos+" in result.stdout
    summary, classes = read_summary(out)
    assert summary["unexercised_retries"] == 1 and summary["verdict"] == "UNKNOWN"
    assert [(run["seed"], run["verdict"], run["exercised"], run["retried_with"])
            for run in summary["runs"]] == [(29, "pass", False, 30), (30, "pass", False, None)]
    assert classes["resurrected-lease"]["status"] == "not exercised"
    assert "certify: UNKNOWN (2 runs, 0 failed, 2 not exercised (no evidence))" in result.stdout


@pytest.mark.integration
def test_a_mutant_fails_certify_with_its_class(tmp_path: Path):
    out = tmp_path / "certify"
    result = certify("--protocol", "complete-skips-active", "--only", "lone-worker-frozen",
                     "--out", str(out))
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    summary, classes = read_summary(out)
    assert summary["verdict"] == "FAIL"
    assert classes["complete-skips-active"]["status"] == "SEEN (1 of its 2 scenarios not run)"
    (run,) = classes["complete-skips-active"]["runs"]
    assert "exclusive_lease" in run["failed"]
    assert "complete that skips the active check [exclusive_lease, no_double_completion]: SEEN" \
        in result.stdout


@pytest.mark.integration
def test_the_node_example_passes_and_its_broken_switch_is_caught(tmp_path: Path):
    problem = node_missing()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    sound = certify(str(NODE_SCENARIO), "--only", "lone-worker-frozen",
                    "--out", str(tmp_path / "sound"))
    assert sound.returncode == 0, sound.stdout + sound.stderr[-3000:]
    summary, _ = read_summary(tmp_path / "sound")
    assert "scenarios/node/kill-worker.toml [sut]: node worker.js" in summary["target"]
    assert summary["not_applicable"] == {}  # lone-worker-frozen needs nothing of the reference
    broken = certify(str(NODE_SCENARIO), "--only", "lone-worker-frozen", "--set",
                     'sut.workers=["node", "worker.js", "--break", "unfenced-complete"]',
                     "--out", str(tmp_path / "broken"))
    assert broken.returncode == 1, broken.stdout + broken.stderr[-3000:]
    summary, classes = read_summary(tmp_path / "broken")
    assert classes["stale-finish"]["status"].startswith("SEEN")
    # The runs judged the Node processes, on the recorder's history, and left none behind.
    (run,) = summary["runs"]
    report = json.loads((Path(run["run_dir"]) / "report.json").read_text())
    assert report["history_recorder"]["source"] == "monitor"
    assert processes_in(NODE_SUT.resolve()) == []


@pytest.mark.integration
@pytest.mark.usefixtures("bullmq_installed")
def test_sound_bullmq_with_its_only_worker_frozen_passes_through_its_standalone_checker(
        tmp_path: Path):
    """Real BullMQ, its lone worker frozen past its lock: without a reaper beside it nothing
    returned the job and the sound queue failed reap_prompt; with the standalone stalled
    checker the job is returned while the worker is frozen, and the worker's stale renewals and
    finish land between that return and the re-claim, and are refused."""
    out = tmp_path / "certify"
    result = certify(str(BULLMQ_SCENARIO), "--only", "lone-worker-frozen", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary, _ = read_summary(out)
    assert "stop every worker at once" in summary["adapted"]["lone-worker-frozen"]
    assert "adapted to this queue:" in result.stdout
    (run,) = summary["runs"]
    events = [json.loads(line) for line in
              (Path(run["run_dir"]) / "history-monitor.jsonl").read_text().splitlines()]
    (reap,) = [index for index, event in enumerate(events) if event["type"] == "reap"]
    assert events[reap]["conn"] == "reaper" and events[reap]["worker"] == "worker-1"
    reclaim = next(index for index, event in enumerate(events)
                   if event["type"] == "claim" and event["attempt"] == "2")
    assert {event["type"] for event in events[reap + 1:reclaim]
            if event.get("worker") == "worker-1"} >= {"extend_rejected", "complete_rejected"}
    assert processes_in((ROOT / "sut" / "bullmq").resolve()) == []
