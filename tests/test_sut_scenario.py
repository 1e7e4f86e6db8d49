"""The ``[sut]`` section: its default is the reference implementation, a foreign SUT implies the
monitor history, and what a foreign process cannot honour is refused by name (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.scenario.loading import ScenarioError, load_scenario
from chaos.scenario.sut import COOPERATIVE_FAULTS, fill

FOREIGN = 'name = "t"\n[sut]\nworkers = ["node", "worker.js", "{name}"]\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def test_default_is_the_reference_implementation(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, 'name = "t"\n'))
    assert not scenario.sut.foreign
    assert scenario.history.source == "scripts"
    assert scenario.reaper_names == ["reaper"]


def test_foreign_sut_implies_monitor_history_and_resolves_cwd(tmp_path: Path):
    (tmp_path / "app").mkdir()
    scenario = load_scenario(write(tmp_path, FOREIGN + 'cwd = "app"\n'))
    assert scenario.sut.foreign
    assert scenario.history.source == "monitor"
    assert scenario.sut.cwd == str((tmp_path / "app").resolve())
    assert fill(scenario.sut.workers or [], "worker-2", 2) == ["node", "worker.js", "worker-2"]


def test_explicit_scripts_source_is_kept_for_a_foreign_sut(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, FOREIGN + '[history]\nsource = "scripts"\n'))
    assert scenario.history.source == "scripts"


def test_reaper_none_and_own_reaper(tmp_path: Path):
    none = load_scenario(write(tmp_path, FOREIGN + 'reaper = "none"\n'))
    assert none.reaper_names == []
    own = load_scenario(write(tmp_path, FOREIGN + 'reaper = ["node", "reaper.js"]\n'))
    assert own.sut.own_reaper == ["node", "reaper.js"] and own.reaper_names == ["reaper"]


@pytest.mark.parametrize("kind", sorted(COOPERATIVE_FAULTS))
def test_cooperative_faults_are_refused_for_a_foreign_sut(tmp_path: Path, kind: str):
    params = {"clock_skew": "offset_ms = 100", "kill_in_claim_gap": ""}.get(
        kind, "duration_ms = 500")
    text = FOREIGN + f'[[faults]]\nkind = "{kind}"\ntarget = "worker-1"\n{params}\n'
    with pytest.raises(ScenarioError) as caught:
        load_scenario(write(tmp_path, text))
    assert f"faults.0.kind = {kind!r}" in str(caught.value)
    assert "sut.workers" in str(caught.value)
    # The same fault on the reference worker is fine.
    load_scenario(write(tmp_path, text.replace(FOREIGN, 'name = "t"\n')))


@pytest.mark.parametrize(("extra", "expected"), [
    ('protocol = "unfenced-complete"\n', "protocol = 'unfenced-complete'"),
    ('runtime = "docker"\n', "sut.image"),
    ('[valkey]\nreplication = "sentinel"\n', "valkey.replication = 'sentinel'"),
    ('[history]\nsource = "monitor"\ndialect = "nope"\n', "history.dialect"),
])
def test_what_a_foreign_sut_cannot_honour_is_named(tmp_path: Path, extra: str, expected: str):
    head, sut = 'name = "t"\n', FOREIGN.removeprefix('name = "t"\n')
    with pytest.raises(ScenarioError, match=expected.replace("(", r"\(")):
        load_scenario(write(tmp_path, head + extra + sut))


@pytest.mark.parametrize(("sut", "expected"), [
    ('reaper = "none"\n', "reaper = 'none'"),
    ('workers = []\n', "sut.workers"),
    ('workers = ["w", "{id}"]\n', "placeholders"),
    ('image = "me/w:1"\n', "image = 'me/w:1'"),
    ('workers = ["w"]\nstart_timeout_s = 0\n', "sut.start_timeout_s = 0"),
    ('workers = ["w"]\nreaper = "sometimes"\n', "sut.reaper"),
    ('workers = ["w"]\nstandalone_reaper = ["w", "--reap"]\n',
     r"standalone_reaper = \['w', '--reap'\]: for a queue whose workers reap"),
    ('workers = ["w"]\nreaper = "none"\nstandalone_reaper = ["w", "{id}"]\n', "placeholders"),
    ('reap_rhythm = "loop"\n', "reap_rhythm = 'loop': consumers of your own"),
    ('workers = ["w"]\nreap_rhythm = "sometimes"\n', "sut.reap_rhythm"),
    ('workers = ["w"]\nreaper = "none"\ndialect = "bullmq"\nreap_rhythm = "loop"\n',
     "the 'bullmq' queue family's dialect reads no consumer loop's parks"),
])
def test_bad_sut_sections_are_named(tmp_path: Path, sut: str, expected: str):
    with pytest.raises(ScenarioError, match=expected):
        load_scenario(write(tmp_path, 'name = "t"\n[sut]\n' + sut))


def test_cli_validate_exits_2_on_a_refused_fault(tmp_path: Path):
    path = write(tmp_path, FOREIGN + '[[faults]]\nkind = "cpu_hog"\ntarget = "worker-1"\n'
                                     'duration_ms = 500\n')
    done = subprocess.run([sys.executable, "-m", "chaos", "validate", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "cpu_hog" in done.stderr and "Traceback" not in done.stderr


def test_a_standalone_reaper_is_kept_for_certify_and_started_by_no_run(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, FOREIGN + 'reaper = "none"\n'
                                   'standalone_reaper = ["node", "worker.js", "--reap-only"]\n'))
    assert scenario.sut.standalone_reaper == ["node", "worker.js", "--reap-only"]
    assert scenario.reaper_names == []  # a run of the scenario itself starts no reaper


PAUSE = '[[faults]]\nkind = "pause"\ntarget = {target}\nat_ms = {at}\nduration_ms = {ms}\n'
KILL = '[[faults]]\nkind = "kill"\ntarget = {target}\nat_ms = {at}\n'
LATENCY = ('[[faults]]\nkind = "latency"\ntarget = {target}\nat_ms = {at}\nduration_ms = {ms}\n'
           'latency_ms = 500\n')


@pytest.mark.parametrize(("workers", "faults", "every_worker"), [
    (1, [PAUSE.format(target='"holding_oldest_lease"', at=0, ms=2000)], True),
    (2, [PAUSE.format(target='"worker-1"', at=0, ms=2000),
         PAUSE.format(target='"worker-2"', at=500, ms=2000)], True),
    (2, [PAUSE.format(target='"worker-1"', at=0, ms=400),  # one after the other
         PAUSE.format(target='"worker-2"', at=500, ms=2000)], False),
    (2, [PAUSE.format(target='"worker-1"', at=0, ms=2000),  # the same worker twice
         PAUSE.format(target='"worker-1"', at=500, ms=1000)], False),
    (3, [KILL.format(target="{ random = 2 }", at=0),  # a kill lasts to the end
         PAUSE.format(target='"holding_oldest_lease"', at=2500, ms=100)], True),
    (6, [KILL.format(target="{ random = 3 }", at=200),
         KILL.format(target="{ random = 1 }", at=1700)], False),
    (1, [LATENCY.format(target='"worker-1"', at=0, ms=2000)], False),  # slowed, not cut off
])
def test_whether_the_faults_may_stop_every_worker_at_once(tmp_path: Path, workers: int,
                                                          faults: list[str], every_worker: bool):
    text = (f'name = "t"\n[topology]\nworkers = {workers}\n[phases]\nchaos_ms = 3000\n'
            + "".join(faults))
    assert load_scenario(write(tmp_path, text)).may_cut_off_every_worker() is every_worker


# The real EchoMQ's contract, as a scenario gives it (docs/echomq.md): the default user, emq: keys.
ECHOMQ = ('name = "t"\n[sut]\nworkers = ["elixir", "sut.exs"]\nreaper = "none"\n'
          'login = "default"\ncontract = "echomq"\n[valkey]\nprefix = "emq:"\n')


@pytest.mark.parametrize(("change", "expected"), [
    ('topology.completed_retention_ms=60000', "topology.completed_retention_ms = 60000: EchoMQ "
                                              "deletes a completed job's row"),
    ("valkey.prefix='jobs:'", "valkey.prefix = 'jobs:': EchoMQ's keys are emq:"),
    ("sut.login='own-user'", "sut.login = 'own-user': EchoMQ's connector logs in only as the "
                             "default user"),
    ("history.source='scripts'", "history.source = 'scripts': EchoMQ's scripts write no events"),
    ("sut.dialect='bullmq'", "contract = 'echomq'"),
])
def test_what_the_real_echomq_has_no_equivalent_for_is_refused(tmp_path: Path, change: str,
                                                                expected: str):
    """sut.contract = "echomq": a setting the real EchoMQ has no equivalent for is refused by
    file, field and value, exit 2; the same setting under the toolkit's own contract (the
    exported scripts honour it) is fine."""
    path = write(tmp_path, ECHOMQ)
    done = subprocess.run([sys.executable, "-m", "chaos", "validate", str(path), "--set",
                           change], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{path}: invalid scenario" in done.stderr and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    if not change.startswith(("sut.", "history.")):
        load_scenario(path, [change, "sut.contract='toolkit'"])


def test_the_stall_limit_and_reap_batch_map_to_echomq_stalled(tmp_path: Path):
    """max_stalls and reap_limit map exactly (EchoMQ.Stalled max_stalled = max_stalls + 1, its
    limit = reap_limit): accepted, and the plan says how EchoMQ recovers under them."""
    from chaos.run.plan import describe_plan as plan_text

    plain = load_scenario(write(tmp_path, ECHOMQ))
    assert "recovery by Jobs.reap: no stall count, 100 a sweep" in plan_text(plain)
    mapped = load_scenario(write(tmp_path, ECHOMQ), ["topology.max_stalls=2",
                                                     "topology.reap_limit=5"])
    assert "recovery by EchoMQ.Stalled: max_stalled 3, limit 5" in plan_text(mapped)
    batch = load_scenario(write(tmp_path, ECHOMQ), ["topology.reap_limit=5"])
    assert "max_stalled one no job reaches, limit 5" in plan_text(batch)
