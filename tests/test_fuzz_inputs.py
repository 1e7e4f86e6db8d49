"""Bad input never gives a traceback: hypothesis fuzzes the scenario loader and validator, the
`--set` overrides, the command line and `check`'s history files. Every failure must be a
ScenarioError (exit code 2) naming the file and the field; nothing else may escape.

Bounded and reproducible: fixed example counts, derandomized (the same examples every run)."""

from __future__ import annotations

import contextlib
import io
import json
import string
import tomllib
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.cli import main
from chaos.faults.nemesis import plan
from chaos.run.plan import describe_plan
from chaos.scenario.loading import ScenarioError, load_scenario, scenario_from_dict
from chaos.scenario.model import Scenario

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(ROOT.joinpath("scenarios").rglob("*.toml"))
BASES = [tomllib.loads(path.read_text()) for path in SHIPPED]


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])



def _all_keys(value: Any, into: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            into.add(key)
            _all_keys(item, into)
    elif isinstance(value, list):
        for item in value:
            _all_keys(item, into)
    return into


KNOWN_KEYS = sorted(_all_keys(BASES, set()) | {
    "kind", "target", "every_ms", "duration_ms", "random", "server", "url", "proxies",
    "drain_margin_ms", "tolerance_ms", "max_jobs", "payload_bytes", "sigma", "median_ms"})
HUGE = st.sampled_from([-(2**63), -1, 0, 1, 2**31, 2**63 - 1, 2**64, 10**30, -(10**30)])
SCALARS = st.one_of(
    st.integers(), HUGE, st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=30), st.sampled_from(["kill", "pause", "latency", "explode", "worker-1",
                                           "worker-99", "holding_oldest_lease", "sound", ""]),
    st.datetimes(), st.dates(), st.times(),
)
TOML_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=8),
                                            inner, max_size=4)),
    max_leaves=12,
)


def assert_clean_error(error: ScenarioError, source: str) -> None:
    message = str(error)
    assert message.startswith(source), message
    assert "Traceback" not in message


def validate_or_error(data: dict[str, Any], source: str) -> Scenario | None:
    try:
        scenario = scenario_from_dict(data, source)
    except ScenarioError as error:
        assert_clean_error(error, source)
        lines = str(error).splitlines()
        # Every problem on its own line, led by the field it is about.
        assert len(lines) >= 2 and all(line.startswith("  ") for line in lines[1:]), lines
        return None
    describe_plan(scenario)  # what `validate` and `run --dry-run` print must work too
    return scenario


@fuzz(100)
@given(st.text(max_size=400))
def test_random_text_is_a_scenario_or_a_scenario_error(tmp_path_factory, text: str):
    path = tmp_path_factory.mktemp("fuzz") / "s.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_scenario(path)
    except ScenarioError as error:
        assert_clean_error(error, str(path))


@fuzz(100)
@given(st.binary(max_size=200))
def test_random_bytes_are_a_scenario_error(tmp_path_factory, raw: bytes):
    path = tmp_path_factory.mktemp("fuzz") / "s.toml"
    path.write_bytes(raw)
    try:
        load_scenario(path)
    except ScenarioError as error:
        assert_clean_error(error, str(path))


def test_deeply_nested_toml_is_a_scenario_error(tmp_path: Path):
    path = tmp_path / "deep.toml"
    path.write_text('name = "x"\nfaults = ' + "[" * 5000 + "]" * 5000 + "\n")
    try:
        load_scenario(path)
    except ScenarioError as error:
        assert_clean_error(error, str(path))
        assert "nested" in str(error)
    else:
        raise AssertionError("accepted a 5000-deep array")


def test_a_fault_repeated_millions_of_times_is_refused_not_planned(tmp_path: Path):
    path = tmp_path / "s.toml"
    path.write_text('name = "x"\n[phases]\nchaos_ms = 86400000\n'
                    '[[faults]]\nkind = "kill"\ntarget = "worker-1"\nevery_ms = 1\n')
    try:
        load_scenario(path)
    except ScenarioError as error:
        assert "every_ms repeats 86400000 faults" in str(error)
    else:
        raise AssertionError("accepted 86.4 million planned faults")
    path.write_text(path.read_text().replace("every_ms = 1", "every_ms = 8640"))
    assert len(plan(load_scenario(path))) == 10_000  # the limit itself is allowed


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A shipped scenario with 1-3 fields replaced, removed or added (random types, huge or
    negative numbers, unknown fault kinds and targets)."""
    data = json.loads(json.dumps(draw(st.sampled_from(BASES)), default=str))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths)) if paths else ()
        parent: Any = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if not path or action == "add":
            target = parent if isinstance(parent, dict) else data
            target[draw(st.sampled_from(KNOWN_KEYS))] = draw(TOML_VALUES)
        elif action == "remove":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(TOML_VALUES)
    return data


@fuzz(400)
@given(mutated_scenarios())
def test_mutated_scenarios_validate_or_name_the_field(data: dict[str, Any]):
    validate_or_error(data, "fuzz.toml")


@fuzz(150)
@given(st.lists(st.builds(
    lambda key, value: f"{key}={value}",
    st.lists(st.sampled_from(KNOWN_KEYS) | st.sampled_from(["0", "1", "99", "²", "-1", "faults"])
             | st.text(string.printable, max_size=6), min_size=0, max_size=4).map(".".join),
    st.text(max_size=20) | st.sampled_from(["[[[[", "{a=1}", "1e999", "nan", '"x"', "[1,2]"]),
), max_size=3) | st.lists(st.text(max_size=15), max_size=2))
def test_set_overrides_are_applied_or_rejected_cleanly(overrides: list[str]):
    for base in SHIPPED[:2]:
        try:
            load_scenario(base, overrides)
        except ScenarioError as error:
            assert_clean_error(error, str(base))


CLI_WORDS = ["run", "validate", "check", "clean", "selftest", "toxiproxy", "--set", "--out",
             "--force", "--json", "--runs", "--repeat", "--only", "--help", "--version", "-x",
             "topology.lease_ms=-1", "faults.0.kind=\"explode\"", "a=b=c", "=", "", "0", "-1",
             "99999999999999999999", "/nonexistent", "/dev/null", "/", str(SHIPPED[0])]


@fuzz(150)
@given(st.lists(st.sampled_from(CLI_WORDS) | st.text(max_size=10), max_size=6))
def test_command_lines_exit_with_a_code_never_a_traceback(argv: list[str]):
    # Nothing here may start a run: `run` only with --dry-run, no selftest, no server.
    if "run" in argv:
        argv = [*argv, "--dry-run"]
    if "selftest" in argv:
        argv = [word for word in argv if word != "selftest"]
    if "toxiproxy" in argv:
        argv = [word for word in argv if word != "toxiproxy"]
    if "clean" in argv or "--force" in argv:
        argv = [word for word in argv if word not in ("clean", "--force")]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 1, 2, 3, 130), (argv, code)
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert err.getvalue().strip(), argv  # a usage error always says what was wrong


def test_out_of_range_ports_are_usage_errors_not_tracebacks():
    from chaos.network.server import main as toxiproxy_main

    for port in ("99999", "-1", "http", "1e3"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["toxiproxy", "serve", "--port", port]) == 2
        assert "port" in err.getvalue() and "Traceback" not in err.getvalue()
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                toxiproxy_main(["--port", port])
            except SystemExit as exit_:
                assert exit_.code == 2
            else:
                raise AssertionError("python -m chaos.network.server accepted port " + port)


HISTORY_RECORDS = st.one_of(
    st.dictionaries(st.sampled_from(["seq", "type", "ts", "id", "attempt", "worker", "deadline",
                                     "lease_ms", "current_attempt", "kind", "phase", "fault_id"]),
                    st.one_of(st.integers(-5, 10**6), st.text(max_size=6),
                              st.sampled_from(["1-0", "2-1", "enqueue", "claim", "complete",
                                               "reap", "extend", "fault", "heal", "phase", "run",
                                               "end", "j1", "worker-1"]),
                              st.none(), st.lists(st.integers(), max_size=2)),
                    max_size=9),
    st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=5), st.none(),
)


EVENT_TYPES = ["run", "phase", "enqueue", "claim", "extend", "extend_rejected", "complete",
               "complete_rejected", "reap", "fault", "heal", "end"]
# Well-formed lines with nonsense in them (jobs completed twice, reaped before claimed, faults
# on nobody, phases out of order): these reach the checker itself.
RUN_EVENT = json.dumps({"seq": "0-1", "type": "run", "ts": 0, "lease_ms": 1000,
                        "reap_interval_ms": 250, "tolerance_ms": 250})
INT_FIELDS = ["ts", "attempt", "deadline", "lease_ms", "current_attempt"]
TEXT_FIELDS = ["id", "worker", "kind", "phase", "fault_id", "drained", "aborted", "cuts_off"]
WELL_FORMED = st.builds(
    lambda seq, kind, numbers, texts: {"seq": f"{seq}-0", "type": kind, **numbers, **texts},
    st.integers(1, 40), st.sampled_from(EVENT_TYPES),
    st.dictionaries(st.sampled_from(INT_FIELDS), st.integers(-3, 5000), max_size=5),
    st.dictionaries(st.sampled_from(TEXT_FIELDS),
                    st.sampled_from(["j1", "j2", "worker-1", "worker-2", "end", "chaos", "kill",
                                     "pause", "f1", "1", "0", ""]), max_size=4))


@fuzz(200)
@given(st.lists(HISTORY_RECORDS.map(lambda r: json.dumps(r)) | st.text(max_size=20),
                max_size=12)
       | st.lists(WELL_FORMED.map(json.dumps), min_size=1, max_size=25).map(
           lambda lines: [RUN_EVENT, *lines]))
def test_check_of_a_malformed_history_exits_2_never_a_traceback(tmp_path_factory,
                                                                lines: list[str]):
    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "history.jsonl").write_text("\n".join(lines) + "\n")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", str(run_dir)])
    assert code in (0, 1, 2, 130), (lines, code, err.getvalue())
    if code == 2:
        assert str(run_dir / "history.jsonl") in err.getvalue()


def test_types_tomllib_produces_are_covered():
    assert {type(v) for v in (datetime.now(), date.today(), time())} == {datetime, date, time}
