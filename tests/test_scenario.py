"""Scenario loading and validation: every error names file, field and value; exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.faults.nemesis import plan
from chaos.run.plan import describe_plan
from chaos.scenario.loading import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(ROOT.joinpath("scenarios").glob("*.toml"))
MINIMAL = 'name = "t"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_validate(path: Path):
    scenario = load_scenario(path)
    assert scenario.name == path.stem


def test_defaults_follow_the_seed(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, MINIMAL))
    assert scenario.topology.lease_ms == 30_000
    assert scenario.topology.reap_limit == 100
    assert scenario.topology.effective_heartbeat_ms == 10_000
    assert scenario.recovery_bound_ms == 31_000


def test_poison_jobs_are_spread_evenly_and_capped(tmp_path: Path):
    def poison_numbers(text: str) -> list[int]:
        load = load_scenario(write(tmp_path, MINIMAL + text)).load
        picked: list[int] = []
        for number in range(1, 101):
            if load.is_poison(number, len(picked)):  # as the producer counts them
                picked.append(number)
        return picked

    assert poison_numbers("[load]\npoison_fraction = 0.05\n") == [20, 40, 60, 80, 100]
    assert poison_numbers("[load]\npoison_fraction = 0.05\npoison_jobs = 2\n") == [20, 40]
    assert poison_numbers("") == []


def test_heartbeat_zero_turns_the_heartbeat_off(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, MINIMAL + "[topology]\nheartbeat_ms = 0\n"))
    assert scenario.topology.effective_heartbeat_ms == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (MINIMAL + "[topology]\nlease_ms = -5\n", ["topology.lease_ms", "-5", "greater than 0"]),
        (MINIMAL + "[topology]\nheartbeat_ms = -1\n", ["topology.heartbeat_ms", "-1"]),
        (MINIMAL + "[topology]\nlease_ms = 1000\nheartbeat_ms = 1000\n",
         ["topology", "heartbeat_ms (1000) must be < lease_ms (1000)"]),
        (MINIMAL + "[topology]\nworkers = \"four\"\n", ["topology.workers", "'four'"]),
        (MINIMAL + "[topology]\nlease_msec = 10\n", ["topology.lease_msec", "unknown key"]),
        (MINIMAL + "[[faults]]\nkind = \"explode\"\ntarget = \"worker-1\"\n",
         ["faults.0.kind", "'explode'"]),
        (MINIMAL + 'faults = [5]\n', ["faults.0 = 5: a fault is a table"]),
        (MINIMAL + '[[faults]]\ntarget = "worker-1"\n',
         ["faults.0.kind: a fault needs a kind: one of kill, pause, latency"]),
        (MINIMAL + '[[faults]]\nkind = "kill"\ntarget = "worker-1"\nduration_ms = 5\n',
         ["faults.0.duration_ms = 5: a kill has no duration_ms"]),
        (MINIMAL + '[[faults]]\nkind = "kill"\ntarget = "worker-1"\nlease_msec = 5\n',
         ["faults.0.lease_msec = 5: unknown key"]),
        (MINIMAL + '[[faults]]\nkind = "toxic"\ntarget = "worker-1"\ntoxic = "latency"\n'
         'attributes = { latency = "x" }\n', ["faults.0.attributes.latency"]),
        (MINIMAL + "[[faults]]\nkind = \"kill\"\ntarget = \"worker-9\"\n",
         ["faults.0.target = 'worker-9'", "no such target for a kill fault"]),
        (MINIMAL + "[[faults]]\nkind = \"kill\"\ntarget = { random = 99 }\n",
         ["faults.0.target.random = 99"]),
        (MINIMAL + "[[faults]]\nkind = \"pause\"\ntarget = \"worker-1\"\n",
         ["faults.0", "duration_ms"]),
        (MINIMAL + "[[faults]]\nkind = \"kill\"\ntarget = \"worker-1\"\nat_ms = 999999\n",
         ["faults.0.at_ms = 999999", "chaos phase"]),
        (MINIMAL + "[[faults]]\nkind = \"kill\"\ntarget = { randm = 1 }\n",
         ["faults.0.target"]),
        ("seed = 1\n", ["name", "Field required"]),
        (MINIMAL + "[topology.handler]\ndistribution = \"uniform\"\nmin_ms = 9\nmax_ms = 1\n",
         ["topology.handler", "min_ms (9) must be <= max_ms (1)"]),
        (MINIMAL + 'protocol = "sloppy"\n', ["protocol = 'sloppy'", "unknown protocol"]),
        (MINIMAL + 'expect_fail = ["no_lost"]\n', ["expect_fail", "'no_lost' is not an invariant"]),
        (MINIMAL + '[[faults]]\nkind = "latency"\ntarget = "worker-1"\n',
         ["faults.0", "a latency fault needs latency_ms"]),
        (MINIMAL + '[[faults]]\nkind = "latency"\ntarget = "worker-1"\nlatency_ms = 5\n'
         'rate_kb_s = 1\n', ["faults.0", "rate_kb_s = 1: not a parameter of a latency fault"]),
        (MINIMAL + '[[faults]]\nkind = "kill"\ntarget = "worker-1"\noffset_ms = 5\n',
         ["faults.0", "offset_ms = 5: not a parameter of a kill fault (it takes: none)"]),
        (MINIMAL + '[[faults]]\nkind = "toxic"\ntarget = "worker-1"\ntoxic = "lag"\n',
         ["faults.0", "toxic = 'lag': not a Toxiproxy toxic type"]),
        (MINIMAL + '[[faults]]\nkind = "latency"\ntarget = "worker-1"\nlatency_ms = 5\n'
         'stream = "sideways"\n', ["faults.0.stream = 'sideways'"]),
        (MINIMAL + '[[faults]]\nkind = "partition"\ntarget = "reaper"\n',
         ["faults.0.target = 'reaper'", "no such target for a partition fault"]),
        (MINIMAL + '[[faults]]\nkind = "clock_skew"\ntarget = "reaper-2"\noffset_ms = 5\n',
         ["faults.0.target = 'reaper-2'", "worker-1..worker-3, reaper"]),
        (MINIMAL + 'protocol = "no-reaper"\n[[faults]]\nkind = "clock_skew"\n'
         'target = "reaper"\noffset_ms = 5\n',
         ["faults.0.target = 'reaper'", "no such target for a clock_skew fault"]),
        (MINIMAL + '[toxiproxy]\nproxies = "never"\n[[faults]]\nkind = "partition"\n'
         'target = "worker-1"\n', ["proxies = 'never', but network faults are planned"]),
        (MINIMAL + '[toxiproxy]\nurl = "127.0.0.1:8474"\n',
         ["toxiproxy", "url = '127.0.0.1:8474': expected http://HOST:PORT"]),
        (MINIMAL + '[load]\nengine = "locust"\nmax_jobs = 10\n',
         ["load", "max_jobs is a builtin-engine setting"]),
        (MINIMAL + '[load]\nengine = "gatling"\n', ["load.engine = 'gatling'"]),
        (MINIMAL + '[load]\nmix = { producer = 0, consumer = 1 }\n',
         ["load", "mix.producer = 0.0: the load needs producers"]),
        (MINIMAL + '[load]\nprocesses = 0\n', ["load.processes = 0"]),
        # store faults
        (MINIMAL + '[[faults]]\nkind = "valkey_restart"\ntarget = "worker-1"\n',
         ["faults.0.target = 'worker-1'", "a valkey_restart fault targets 'valkey'"]),
        (MINIMAL + '[[faults]]\nkind = "failover"\ntarget = "primary"\n',
         ["faults.0", "a failover fault needs valkey.replication = 'sentinel' (it is 'none')"]),
        (MINIMAL + '[valkey]\nreplication = "sentinel"\n[[faults]]\nkind = "valkey_restart"\n'
         'target = "valkey"\n', ["a valkey_restart fault needs valkey.replication = 'none'"]),
        (MINIMAL + '[valkey]\nreplication = "sentinel"\n[[faults]]\nkind = "failover"\n'
         'target = "primary"\nmode = "disable"\n',
         ["faults.0", "mode = 'disable': a failover fault takes mode 'kill' or 'sentinel'"]),
        (MINIMAL + '[[faults]]\nkind = "partition"\ntarget = "worker-1"\nmode = "kill"\n',
         ["mode = 'kill': a partition fault takes mode 'timeout' or 'disable'"]),
        (MINIMAL + '[[faults]]\nkind = "valkey_restart"\ntarget = "valkey"\nmode = "kill"\n',
         ["mode = 'kill': not a parameter of a valkey_restart fault"]),
        (MINIMAL + 'wait_replicas = 1\n',
         ["wait_replicas = 1: this run's server has no replica"]),
        (MINIMAL + 'wait_replicas = 1\n[valkey]\nreplication = "sentinel"\n[load]\n'
         'engine = "locust"\n', ["wait_replicas = 1: the Locust users do not WAIT"]),
        (MINIMAL + 'wait_replicas = 2\n[valkey]\nreplication = "sentinel"\n',
         ["wait_replicas = 2: the sentinel topology has one replica"]),
        (MINIMAL + '[valkey]\nreplication = "sentinel"\n[toxiproxy]\nproxies = "always"\n',
         ["replication = 'sentinel' with Toxiproxy proxies"]),
        (MINIMAL + '[valkey]\nurl = "valkey://127.0.0.1:6379"\nappendonly = true\n',
         ["valkey", "appendonly = True: only for a server this run starts"]),
        (MINIMAL + '[valkey]\nappendfsync = "sometimes"\n',
         ["valkey.appendfsync = 'sometimes'"]),
        (MINIMAL + '[check]\nreport_only = ["no_lost"]\n',
         ["check.report_only", "'no_lost' is not an invariant"]),
        (MINIMAL + '[[faults]]\nkind = "cpu_hog"\ntarget = "worker-1"\n',
         ["faults.0", "a cpu_hog fault needs duration_ms"]),
        (MINIMAL + '[topology]\nheartbeat_ms = 0\n[[faults]]\nkind = "block_heartbeat"\n'
         'target = "worker-1"\nduration_ms = 500\n',
         ["faults.0.kind = 'block_heartbeat': topology.heartbeat_ms = 0"]),
        (MINIMAL + '[[faults]]\nkind = "cpu_hog"\ntarget = "worker-1"\nduration_ms = 5\n'
         'latency_ms = 3\n', ["latency_ms = 3: not a parameter of a cpu_hog fault"]),
        (MINIMAL + '[topology]\nmax_stalls = 0\n', ["topology.max_stalls", "0"]),
        (MINIMAL + '[topology]\nheartbeat = "fiber"\n', ["topology.heartbeat", "'fiber'"]),
        (MINIMAL + '[load]\npoison_fraction = 1.5\n', ["load.poison_fraction", "1.5"]),
        (MINIMAL + '[load]\nengine = "locust"\npoison_fraction = 0.1\n',
         ["poison_fraction is a builtin-engine setting"]),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, expected: list[str]):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(str(path))
    for fragment in expected:
        assert fragment in message, message


def test_network_faults_route_workers_through_proxies(tmp_path: Path):
    direct = load_scenario(write(tmp_path, MINIMAL))
    assert direct.proxied_names == []
    faulty = load_scenario(write(tmp_path, MINIMAL + '[toxiproxy]\nproxy_reaper = true\n'
                                 '[[faults]]\nkind = "partition"\ntarget = "reaper"\n'))
    assert faulty.proxied_names == ["worker-1", "worker-2", "worker-3", "reaper"]
    always = load_scenario(write(tmp_path, MINIMAL + '[toxiproxy]\nproxies = "always"\n'))
    assert always.proxied_names == ["worker-1", "worker-2", "worker-3"]
    racing = load_scenario(write(tmp_path, MINIMAL + "[topology]\nreapers = 2\n"
                                 '[[faults]]\nkind = "clock_skew"\ntarget = "reaper-2"\n'
                                 "offset_ms = -500\n"))
    assert racing.topology.reaper_names == ["reaper-1", "reaper-2"]
    assert racing.proxied_names == []  # a clock skew needs no proxy


def test_invalid_toml_and_missing_file(tmp_path: Path):
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(write(tmp_path, "name = \n"))
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "absent.toml")


def test_set_overrides_fields_and_list_items(tmp_path: Path):
    path = write(tmp_path, MINIMAL + "[[faults]]\nkind = \"kill\"\ntarget = \"worker-1\"\n")
    scenario = load_scenario(path, ["topology.lease_ms=2000", "faults.0.at_ms=250",
                                    "description=hello world"])
    assert scenario.topology.lease_ms == 2000
    assert scenario.faults[0].at_ms == 250
    assert scenario.description == "hello world"
    with pytest.raises(ScenarioError, match="not an index"):
        load_scenario(path, ["faults.3.at_ms=1"])
    with pytest.raises(ScenarioError, match="topology.lease_ms = 'soon'"):
        load_scenario(path, ["topology.lease_ms=soon"])


def test_plan_expands_repeating_faults_inside_the_chaos_phase(tmp_path: Path):
    path = write(tmp_path, MINIMAL + "[phases]\nchaos_ms = 1000\n"
                 "[[faults]]\nkind = \"pause\"\ntarget = { random = 1 }\nat_ms = 100\n"
                 "every_ms = 300\nduration_ms = 50\n")
    fired = plan(load_scenario(path))
    assert [f.at_ms for f in fired] == [100, 400, 700]
    assert {f.target for f in fired} == {"random 1"}


def test_a_spread_draws_each_occurrence_by_the_seed_within_its_window(tmp_path: Path):
    """at_spread_ms: each occurrence in [at, at + spread), the same for one seed, other times
    for others (together, over seeds, the whole window), none past the chaos phase, and no
    change to the fixed faults beside it; a spread wider than every_ms is refused."""
    text = (MINIMAL + "[phases]\nchaos_ms = 1000\n"
            "[[faults]]\nkind = \"pause\"\ntarget = \"worker-1\"\nat_ms = 100\n"
            "every_ms = 300\nat_spread_ms = 250\nduration_ms = 50\n"
            "[[faults]]\nkind = \"kill\"\ntarget = \"worker-2\"\nat_ms = 800\n")
    path = write(tmp_path, text)

    def times(seed: int) -> list[tuple[int, int]]:
        return [(f.index, f.at_ms) for f in plan(load_scenario(path, [f"seed={seed}"]))]

    assert times(3) == times(3)
    drawn = {seed: times(seed) for seed in range(40)}
    assert len({tuple(t) for t in drawn.values()}) > 30
    for fired in drawn.values():
        spread = [at for index, at in fired if index == 0]
        assert [index for index, at in fired if index == 1] == [1]
        assert (1, 800) in fired
        assert all(base <= at < base + 250
                   for base, at in zip((100, 400, 700), spread, strict=True))
        assert all(at < 1000 for at in spread)
    starts = {at - 100 for fired in drawn.values() for index, at in fired[:1] if index == 0}
    assert min(starts) < 25 and max(starts) > 225
    with pytest.raises(ScenarioError, match="at_spread_ms = 400: at most every_ms = 300"):
        load_scenario(write(tmp_path, text.replace("at_spread_ms = 250", "at_spread_ms = 400")))


def test_cli_validate_exit_codes(tmp_path: Path):
    good = cli("validate", str(SCENARIOS[0]))
    assert good.returncode == 0 and "valid" in good.stdout
    bad = cli("validate", str(write(tmp_path, MINIMAL + "[topology]\nreap_interval_ms = 0\n")))
    assert bad.returncode == 2
    assert "topology.reap_interval_ms = 0" in bad.stderr
    assert "Traceback" not in bad.stderr
    usage = cli("run")
    assert usage.returncode == 2


def test_cli_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path):
    result = cli("run", str(ROOT / "scenarios/kill-worker.toml"), "--dry-run", "--set", "seed=5",
                 "--out", str(tmp_path / "never"))
    assert result.returncode == 0, result.stderr
    assert "scenario kill-worker (seed 5)" in result.stdout
    assert "kill holding_oldest_lease" in result.stdout
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(("users", "producer", "consumer", "split"),
                         [(5, 3, 2, (3, 2)), (2, 1, 1, (1, 1)), (1, 1, 1, (1, 0)),
                          (4, 1, 0, (4, 0)), (10, 1, 100, (1, 9))])
def test_locust_users_split_by_the_mix_with_at_least_one_producer(
        tmp_path: Path, users: int, producer: int, consumer: int, split: tuple[int, int]):
    scenario = load_scenario(write(tmp_path, MINIMAL + f'[load]\nengine = "locust"\n'
                                   f"users = {users}\nmix = {{ producer = {producer}, "
                                   f"consumer = {consumer} }}\n"))
    assert (scenario.load.producers, scenario.load.consumers) == split


@pytest.mark.parametrize("path", [*SCENARIOS, ROOT / "scenarios/mutants/client-clock.toml"],
                         ids=lambda p: p.stem)
def test_the_plan_says_each_fault_as_its_kind_declares(path: Path):
    scenario = load_scenario(path)
    text = describe_plan(scenario)
    for planned in plan(scenario):
        fault = scenario.faults[planned.index]
        assert f"{planned.kind} {planned.target}{fault.describe_duration()}" in text


def test_the_plan_states_both_allowances_by_their_field_names(tmp_path: Path):
    """validate / run --dry-run show the checker's tolerance_ms and reap_allowance_ms, as set."""
    scenario = load_scenario(write(tmp_path, MINIMAL + "[check]\ntolerance_ms = 170\n"
                                   "reap_allowance_ms = 60\n"))
    text = describe_plan(scenario)
    assert "+ tolerance_ms 170 from the last renewal" in text
    assert f"every reap <= {scenario.topology.reap_interval_ms} ms + reap_allowance_ms 60" in text
