"""A fault the chaos phase's end cuts short (it heals every fault still held): the plan warns,
naming the fault and the length it gets at most, and report.json's ``run.faults`` says what was
asked and what was applied (docs/faults.md)."""

from __future__ import annotations

from pathlib import Path

from histories import History

from chaos.check.checker import check
from chaos.faults.nemesis import Nemesis
from chaos.report.summary import build_report, summary_text
from chaos.run.plan import describe_plan
from chaos.scenario.loading import load_scenario
from tests.test_nemesis import Recorder

FAULTS = """
[phases]
chaos_ms = 2500
[[faults]]
kind = "pause"
target = "worker-2"
at_ms = 300
duration_ms = 2500
[[faults]]
kind = "pause"
target = "worker-3"
at_ms = 300
duration_ms = 1000
[[faults]]
kind = "cpu_hog"
target = "worker-1"
at_ms = 1000
duration_ms = 5000
"""


def scenario(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.toml"
    path.write_text(f'name = "cut"\nseed = 1\n[topology]\nworkers = 3\n{FAULTS}')
    return load_scenario(path)


def test_the_plan_warns_of_a_pause_the_chaos_phase_cuts_short(tmp_path: Path):
    lines = describe_plan(scenario(tmp_path)).splitlines()
    assert "        300  pause worker-2 for 2500 ms, cut to 2200 ms by the chaos phase's end" \
        in lines
    warnings = [line for line in lines if line.startswith("  warning ")]
    # one warning: the whole pause of worker-3 fits, and a worker's own order is never cut
    assert warnings == [
        "  warning   pause worker-2 at 300 ms asks duration_ms 2500, but the chaos phase ends "
        "(and heals it) at 2500 ms: 2200 ms applied at most; phases.chaos_ms >= 2800 holds it "
        "whole"]
    assert "        300  pause worker-3 for 1000 ms" in lines
    assert "       1000  cpu_hog worker-1 for 5000 ms" in lines


def test_the_applied_length_of_a_cut_pause_is_reported_beside_the_asked_one(tmp_path: Path):
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path), recorder, recorder)
    recorder.clock = 10_299  # the server clock: record() answers the next ms
    nemesis.tick(300)  # both pauses
    recorder.clock = 11_299
    nemesis.tick(1000)  # the cpu hog (worker-1's own order)
    recorder.clock = 11_300  # (worker-3 was paused at 10_301)
    nemesis.tick(1300)  # worker-3's pause is over: healed at its time
    recorder.clock = 12_499
    nemesis.heal_all()  # the chaos phase's end: worker-2 resumed 2200 ms in
    applied = {fault.worker: vars(fault) for fault in nemesis.applied}  # report.json's run.faults
    assert {name: (fault["duration_ms"], fault["applied_ms"], fault["cut_short"])
            for name, fault in applied.items()} == {
        "worker-2": (2500, 2200, True), "worker-3": (1000, 1000, False),
        "worker-1": (5000, 1201, False)}  # its order holds its 5 s whatever the heal


def test_the_summary_names_a_fault_cut_short_with_its_applied_and_asked_lengths(tmp_path: Path):
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path), recorder, recorder)
    recorder.clock = 10_299
    nemesis.tick(300)
    recorder.clock = 11_300
    nemesis.tick(1300)  # worker-3's pause over; worker-1's cpu hog from now on
    recorder.clock = 12_494  # the heal 2195 ms after the pause (as the run had it)
    nemesis.heal_all()
    h = History()
    h.enqueue("a", ts=0)
    h.claim("a", 1, "w1", ts=1)
    h.complete("a", 1, "w1", ts=2)
    run = {"faults": [vars(fault) for fault in nemesis.applied]}
    text = summary_text(build_report("hand-written", "pass", check(h.events()), run=run))
    assert ("  cut short pause worker-2 held 2195 of the 2500 ms asked (the chaos phase's end "
            "healed it first)") in text.splitlines()
    run["faults"][0]["cut_short"] = False
    assert "cut short" not in summary_text(build_report("x", "pass", check(h.events()), run=run))
