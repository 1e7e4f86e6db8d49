"""The nemesis's scheduling logic: seeded, reproducible targets; heals; skips.

The runtime and history here are recorders (the nemesis only decides *what* to do and when);
the real SIGKILL/SIGSTOP path is covered end to end in test_scenarios_e2e.py.
"""

from __future__ import annotations

from pathlib import Path

from chaos.faults.nemesis import Nemesis
from chaos.network.client import ToxicSpec
from chaos.scenario.model import Scenario, load_scenario


class Recorder:
    def __init__(self, holders: list[str] | None = None) -> None:
        self.actions: list[tuple[str, str]] = []
        self.events: list[dict[str, object]] = []
        self.holders = holders or []
        self.clock = 1000

    def kill(self, name: str) -> None:
        self.actions.append(("kill", name))

    def pause(self, name: str) -> None:
        self.actions.append(("pause", name))

    def resume(self, name: str) -> None:
        self.actions.append(("resume", name))

    def add_toxics(self, link: str, toxics: list[ToxicSpec]) -> None:
        self.actions += [("add " + toxic.name, link) for toxic in toxics]
        self.toxics = toxics

    def remove_toxics(self, link: str, toxics: list[ToxicSpec]) -> None:
        self.actions += [("remove " + toxic.name, link) for toxic in toxics]

    def set_link_enabled(self, link: str, enabled: bool) -> None:
        self.actions.append(("enable" if enabled else "disable", link))

    def set_clock_offset(self, name: str, offset_ms: int) -> None:
        self.actions.append((f"clock {offset_ms:+d}", name))

    def record(self, **fields: object) -> int:
        self.clock += 1
        self.events.append(fields)
        return self.clock

    def lease_holders_oldest_first(self) -> list[str]:
        return self.holders


def scenario(tmp_path: Path, faults: str, seed: int = 1, workers: int = 5) -> Scenario:
    path = tmp_path / "s.toml"
    path.write_text(f'name = "n"\nseed = {seed}\n[topology]\nworkers = {workers}\n'
                    f"[phases]\nchaos_ms = 10000\n{faults}")
    return load_scenario(path)


def run(nemesis: Nemesis, until_ms: int) -> None:
    for elapsed in range(0, until_ms + 1, 50):
        nemesis.tick(elapsed)


def test_random_targets_are_reproducible_from_the_seed(tmp_path: Path):
    faults = '[[faults]]\nkind = "kill"\ntarget = { random = 1 }\nat_ms = 0\nevery_ms = 1000\n'
    picks = []
    for _ in range(2):
        recorder = Recorder()
        run(Nemesis(scenario(tmp_path, faults, seed=42), recorder, recorder), 3000)
        picks.append(recorder.actions)
    assert picks[0] == picks[1]
    assert len(picks[0]) == 4 and len({name for _, name in picks[0]}) == 4  # never a dead one
    other = Recorder()
    run(Nemesis(scenario(tmp_path, faults, seed=43), other, other), 3000)
    assert other.actions != picks[0]


def test_a_kill_with_no_live_target_left_is_skipped_and_recorded(tmp_path: Path):
    faults = '[[faults]]\nkind = "kill"\ntarget = { random = 1 }\nat_ms = 0\nevery_ms = 100\n'
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path, faults, workers=2), recorder, recorder)
    run(nemesis, 300)
    assert [kind for kind, _ in recorder.actions] == ["kill", "kill"]
    assert len(nemesis.skipped) == 2
    assert [e["type"] for e in recorder.events].count("fault_skipped") == 2


def test_pause_heals_after_its_duration_and_heal_is_recorded_before_resume(tmp_path: Path):
    faults = ('[[faults]]\nkind = "pause"\ntarget = "worker-3"\nat_ms = 200\n'
              "duration_ms = 500\n")
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 650)
    assert recorder.actions == [("pause", "worker-3")]
    run(nemesis, 700)
    assert recorder.actions == [("pause", "worker-3"), ("resume", "worker-3")]
    fault, heal = recorder.events
    assert (fault["type"], heal["type"], heal["fault_id"]) == ("fault", "heal", fault["fault_id"])
    applied = nemesis.applied[0]
    assert applied.healed_ts is not None and applied.healed_ts > applied.applied_ts


def test_heal_all_resumes_frozen_workers_and_drops_unfired_faults(tmp_path: Path):
    faults = ('[[faults]]\nkind = "pause"\ntarget = "worker-1"\nat_ms = 0\nduration_ms = 9000\n'
              '[[faults]]\nkind = "kill"\ntarget = "worker-2"\nat_ms = 5000\n')
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 100)
    nemesis.heal_all()
    run(nemesis, 9999)
    assert recorder.actions == [("pause", "worker-1"), ("resume", "worker-1")]


def test_holding_oldest_lease_targets_the_oldest_holder_that_can_still_be_faulted(
    tmp_path: Path,
):
    faults = ('[[faults]]\nkind = "pause"\ntarget = "holding_oldest_lease"\nat_ms = 0\n'
              "every_ms = 100\nduration_ms = 5000\n")
    recorder = Recorder(holders=["worker-4", "worker-4", "worker-2"])
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 250)
    # worker-4 first; once it is frozen the next oldest holder; then nobody is left to pick
    assert recorder.actions == [("pause", "worker-4"), ("pause", "worker-2")]
    assert len(nemesis.skipped) == 1


def test_network_faults_add_toxics_and_heal_by_removing_them(tmp_path: Path):
    faults = ('[[faults]]\nkind = "latency"\ntarget = "worker-2"\nat_ms = 100\n'
              "duration_ms = 500\nlatency_ms = 300\njitter_ms = 20\n"
              '[[faults]]\nkind = "partition"\ntarget = "worker-3"\nat_ms = 200\n'
              '[[faults]]\nkind = "partition"\ntarget = "worker-4"\nat_ms = 300\n'
              'mode = "disable"\nduration_ms = 100\n')
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 1000)
    assert recorder.actions == [
        ("add f1_latency_upstream", "worker-2"), ("add f1_latency_downstream", "worker-2"),
        ("add f2_timeout_upstream", "worker-3"), ("add f2_timeout_downstream", "worker-3"),
        ("disable", "worker-4"), ("enable", "worker-4"),
        ("remove f1_latency_upstream", "worker-2"), ("remove f1_latency_downstream", "worker-2"),
    ]
    assert recorder.toxics[0].attributes == {"timeout": 0}  # a partition holds data, never closes
    faults_recorded = [e for e in recorder.events if e["type"] == "fault"]
    assert faults_recorded[0]["latency_ms"] == 300 and faults_recorded[0]["cuts_off"] == 0
    assert faults_recorded[1]["cuts_off"] == 1
    # The partition without a duration holds until the chaos phase ends.
    nemesis.heal_all()
    assert recorder.actions[-2:] == [("remove f2_timeout_upstream", "worker-3"),
                                     ("remove f2_timeout_downstream", "worker-3")]
    heals = [e for e in recorder.events if e["type"] == "heal"]
    assert [h["fault_id"] for h in heals] == ["f3", "f1", "f2"]


def test_clock_skew_targets_a_reaper_and_is_undone(tmp_path: Path):
    faults = ('[[faults]]\nkind = "clock_skew"\ntarget = "reaper"\nat_ms = 0\n'
              "duration_ms = 400\noffset_ms = 2500\n")
    recorder = Recorder()
    run(Nemesis(scenario(tmp_path, faults), recorder, recorder), 1000)
    assert recorder.actions == [("clock +2500", "reaper"), ("clock +0", "reaper")]
    fault = next(e for e in recorder.events if e["type"] == "fault")
    assert fault["worker"] == "reaper" and fault["offset_ms"] == 2500 and fault["cuts_off"] == 0
