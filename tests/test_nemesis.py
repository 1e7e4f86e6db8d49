"""The nemesis's scheduling logic: seeded, reproducible targets; heals; skips.

The runtime and history here are recorders (the nemesis only decides *what* to do and when);
the real SIGKILL/SIGSTOP path is covered end to end in test_scenarios_e2e.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.faults.kinds import KINDS, ON_STORE, ON_TARGETS
from chaos.faults.nemesis import LEASE_WAIT_MS, Nemesis
from chaos.network.client import ToxicSpec
from chaos.runtime.base import RuntimeBase, StoreFault
from chaos.scenario.faults import FAULT_COLORS, FAULT_KINDS, STORE_KINDS
from chaos.scenario.loading import load_scenario
from chaos.scenario.model import Scenario


class Recorder:
    def __init__(self, holders: list[str] | None = None, gap_after_polls: int | None = None,
                 ) -> None:
        self.actions: list[tuple[str, str]] = []
        self.events: list[dict[str, object]] = []
        self.holders = holders or []
        self.clock = 1000
        # A worker told to stay in its claim gap reports it from this poll on (None: never,
        # as a worker whose claim is one step).
        self.gap_after_polls = gap_after_polls
        self.gap_polls: list[tuple[str, str]] = []

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

    partition = RuntimeBase.partition  # the proxies' way: through the two methods above

    def set_clock_offset(self, name: str, offset_ms: int) -> None:
        self.actions.append((f"clock {offset_ms:+d}", name))

    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None:
        self.actions.append((f"control {kind} {duration_ms} {fault_id}", name))

    def in_claim_gap(self, name: str, fault_id: str) -> bool:
        self.gap_polls.append((name, fault_id))
        return self.gap_after_polls is not None and len(self.gap_polls) >= self.gap_after_polls

    def failover(self, mode: str, down_ms: int) -> StoreFault:
        self.actions.append((f"failover {mode} {down_ms}", "primary"))
        return StoreFault("valkey-1", killed_ts=5, down_ms=600, promoted_ms=400,
                          new_primary="valkey-2")

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
    # worker-4 first; once it is frozen the next oldest holder; then nobody is left to pick:
    # the third looks again for LEASE_WAIT_MS before it is skipped (the later ones likewise)
    assert recorder.actions == [("pause", "worker-4"), ("pause", "worker-2")]
    assert not nemesis.skipped
    run(nemesis, 200 + LEASE_WAIT_MS + 50)
    assert recorder.actions == [("pause", "worker-4"), ("pause", "worker-2")]
    assert nemesis.skipped[0] == "pause holding_oldest_lease at 200 ms: no live target"


def test_holding_oldest_lease_waits_for_a_live_lease_then_fires(tmp_path: Path):
    """Nobody holds a live lease at the planned instant (a quiet moment, or only lapsed leases
    waiting for their reap): the fault fires on the first holder seen within LEASE_WAIT_MS."""
    faults = '[[faults]]\nkind = "kill"\ntarget = "holding_oldest_lease"\nat_ms = 100\n'
    recorder = Recorder(holders=[])
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 400)
    assert recorder.actions == [] and not nemesis.skipped
    recorder.holders = ["worker-3"]
    nemesis.tick(450)
    assert recorder.actions == [("kill", "worker-3")] and not nemesis.skipped
    assert [e["type"] for e in recorder.events] == ["fault"]


class Answers(Recorder):
    """Holders that change from one question to the next (a holder acks its last job between
    the nemesis's pick and the instant it applies the fault)."""

    def __init__(self, answers: list[list[str]]) -> None:
        super().__init__()
        self.answers = answers
        self.asked = 0

    def lease_holders_oldest_first(self) -> list[str]:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_holding_oldest_lease_looks_again_when_applied_and_hits_whoever_still_holds(
        tmp_path: Path):
    faults = '[[faults]]\nkind = "kill"\ntarget = "holding_oldest_lease"\nat_ms = 100\n'
    recorder = Answers([["worker-2"], ["worker-3"]])  # worker-2 done by the time it is applied
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 100)
    assert recorder.actions == [("kill", "worker-3")] and recorder.asked == 2
    (event,) = recorder.events
    assert event["worker"] == "worker-3" and event["holder_found"] == 1


def test_holding_oldest_lease_whose_holder_is_gone_when_applied_waits_then_says_so(
        tmp_path: Path):
    faults = '[[faults]]\nkind = "kill"\ntarget = "holding_oldest_lease"\nat_ms = 100\n'
    # Each pick has finished its last job by the time the fault is applied: it waits (no kill),
    recorder = Answers([["worker-2"], []] * 3 + [[]])
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 300)
    assert recorder.actions == [] and not recorder.events and not nemesis.skipped
    # ... and once the wait is over, hits its pick, the event saying no worker held a lease.
    recorder.answers = [["worker-2"], []]
    nemesis.tick(100 + LEASE_WAIT_MS)
    assert recorder.actions == [("kill", "worker-2")]
    (event,) = recorder.events
    assert event["holder_found"] == 0 and event["target"] == "holding_oldest_lease"


def test_only_a_holder_target_says_whether_it_found_a_holder(tmp_path: Path):
    faults = ('[[faults]]\nkind = "kill"\ntarget = "holding_oldest_lease"\nat_ms = 0\n'
              '[[faults]]\nkind = "kill"\ntarget = "worker-1"\nat_ms = 50\n')
    recorder = Recorder(holders=["worker-4"])
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 100)
    assert [(e["worker"], e.get("holder_found")) for e in recorder.events] == [
        ("worker-4", 1), ("worker-1", None)]


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


def test_worker_orders_are_sent_and_their_heal_only_recorded(tmp_path: Path):
    faults = ('[[faults]]\nkind = "cpu_hog"\ntarget = "worker-1"\nat_ms = 0\nduration_ms = 300\n'
              '[[faults]]\nkind = "block_heartbeat"\ntarget = "worker-1"\nat_ms = 100\n'
              "duration_ms = 300\n"
              '[[faults]]\nkind = "pause"\ntarget = "worker-1"\nat_ms = 150\nduration_ms = 50\n')
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 1000)
    # The block is skipped (worker-1 is still under the hog: one group); the pause is another
    # group's and lands; the hog's heal undoes nothing (the worker ends it itself).
    assert recorder.actions == [("control cpu_hog 300 f1", "worker-1"), ("pause", "worker-1"),
                                ("resume", "worker-1")]
    assert nemesis.skipped == ["block_heartbeat worker-1 at 100 ms: no live target"]
    assert [e["type"] for e in recorder.events] == ["fault", "fault_skipped", "fault", "heal",
                                                    "heal"]
    assert recorder.events[0]["cuts_off"] == 0


def test_a_kill_in_the_claim_gap_waits_for_the_worker_to_be_there(tmp_path: Path):
    faults = ('[[faults]]\nkind = "kill_in_claim_gap"\ntarget = "worker-2"\nat_ms = 100\n'
              "wait_ms = 60000\n")
    recorder = Recorder(gap_after_polls=3)
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 200)
    # The order first (stay in the gap as long as we may wait), the kill only once the worker
    # said it is in the gap of that very order; then nothing heals it.
    assert recorder.actions == [("control claim_gap_hold 60000 f1", "worker-2"),
                                ("kill", "worker-2")]
    assert recorder.gap_polls == [("worker-2", "f1")] * 3
    (fault,) = recorder.events
    assert (fault["kind"], fault["cuts_off"], fault["wait_ms"]) == ("kill_in_claim_gap", 1, 60000)
    assert nemesis.dead == {"worker-2"}
    nemesis.heal_all()
    assert len(recorder.actions) == 2


def test_a_worker_without_a_claim_gap_is_killed_when_the_wait_is_over(tmp_path: Path):
    faults = ('[[faults]]\nkind = "kill_in_claim_gap"\ntarget = "worker-1"\nat_ms = 0\n'
              "wait_ms = 30\n")
    recorder = Recorder(gap_after_polls=None)  # a one-step claim: never in a gap
    nemesis = Nemesis(scenario(tmp_path, faults), recorder, recorder)
    run(nemesis, 0)
    assert recorder.actions == [("control claim_gap_hold 30 f1", "worker-1"),
                                ("kill", "worker-1")]
    assert len(recorder.gap_polls) >= 1


def test_a_heartbeat_lag_is_an_order_whose_heal_is_only_recorded(tmp_path: Path):
    faults = ('[[faults]]\nkind = "heartbeat_lag"\ntarget = { random = 1 }\nat_ms = 100\n'
              "duration_ms = 500\n")
    recorder = Recorder()
    nemesis = Nemesis(scenario(tmp_path, faults, seed=3), recorder, recorder)
    run(nemesis, 1000)
    ((order, target),) = recorder.actions
    assert order == "control heartbeat_lag 500 f1" and target.startswith("worker-")
    assert [e["type"] for e in recorder.events] == ["fault", "heal"]
    assert recorder.events[0]["cuts_off"] == 0


def test_a_store_fault_is_struck_once_and_recorded_as_cutting_everyone_off(tmp_path: Path):
    path = tmp_path / "s.toml"
    path.write_text('name = "n"\n[valkey]\nreplication = "sentinel"\n[[faults]]\n'
                    'kind = "failover"\ntarget = "primary"\nat_ms = 100\nduration_ms = 500\n')
    recorder = Recorder()
    run(Nemesis(load_scenario(path), recorder, recorder), 1000)
    assert recorder.actions == [("failover kill 500", "primary")]
    fault = recorder.events[0]
    assert (fault["worker"], fault["cuts_off"], fault["new_primary"]) == \
        ("valkey-1", 1, "valkey-2")


def test_the_declarations_and_the_behaviours_name_the_same_kinds():
    assert sorted(FAULT_KINDS) == KINDS
    assert set(ON_STORE) == set(STORE_KINDS)
    for kind, declaration in FAULT_KINDS.items():
        behaviour = ON_STORE.get(kind) or ON_TARGETS[kind]
        assert behaviour.__name__ == f"chaos.faults.kinds.{kind}"
        assert declaration.summary() and "\n" not in declaration.summary()
        assert FAULT_COLORS[kind].startswith("#")


@pytest.mark.parametrize(("table", "cuts_off"), [
    ('kind = "kill"', True), ('kind = "pause"\nduration_ms = 1', True),
    ('kind = "partition"', True), ('kind = "reset_peer"', True),
    ('kind = "latency"\nlatency_ms = 1', False), ('kind = "bandwidth"\nrate_kb_s = 1', False),
    ('kind = "slow_close"\ndelay_ms = 1', False), ('kind = "toxic"\ntoxic = "timeout"', True),
    ('kind = "toxic"\ntoxic = "limit_data"', True), ('kind = "toxic"\ntoxic = "slicer"', False),
    ('kind = "clock_skew"\noffset_ms = 1', False), ('kind = "cpu_hog"\nduration_ms = 1', False),
    ('kind = "block_heartbeat"\nduration_ms = 1', False),
    ('kind = "heartbeat_lag"\nduration_ms = 1', False), ('kind = "kill_in_claim_gap"', True),
])
def test_each_kind_says_whether_it_cuts_the_holder_off(tmp_path: Path, table: str,
                                                       cuts_off: bool):
    fault = scenario(tmp_path, f'[[faults]]\ntarget = "worker-1"\n{table}\n').faults[0]
    assert fault.cuts_off() is cuts_off
