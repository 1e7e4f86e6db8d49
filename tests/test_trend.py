"""`echomq-chaos trend`: the pure statistics (chaos.store.trend) on synthetic samples, the
command on a store of synthetic records (exit codes, --json, --html, --junit), and the issue's
done-when on real runs of kill-worker (a slower reaper flagged, sound runs not)."""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.store.database import StoredRun, open_store
from chaos.store.record import RunRecord
from chaos.store.trend import (
    Group,
    Point,
    TrendSettings,
    choose_windows,
    compare_kind,
    group_runs,
    mann_whitney_greater,
    midranks,
)
from tests.postgres import (  # noqa: F401 (postgres_url: a fixture)
    fresh_database,
    postgres_installed,
    postgres_url,
)

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


# --- the test ---------------------------------------------------------------------------------


def brute_force_p(baseline: list[float], candidates: list[float]) -> float:
    """P(rank sum of the candidates >= observed) over every split of the pooled ranks."""
    ranks = midranks([*baseline, *candidates])
    observed = sum(ranks[len(baseline):])
    splits = list(itertools.combinations(range(len(ranks)), len(candidates)))
    return sum(sum(ranks[i] for i in split) >= observed - 1e-9 for split in splits) / len(splits)


def test_midranks_share_tied_ranks() -> None:
    assert midranks([30, 10, 20, 20, 40]) == [4.0, 1.0, 2.5, 2.5, 5.0]


def test_exact_p_values_are_the_count_of_splits() -> None:
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1 / 20)
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(1.0)
    assert mann_whitney_greater([5, 5, 5], [5, 5]) == pytest.approx(1.0)  # nothing moved
    rng = random.Random(3)
    for _ in range(20):  # ties included: values drawn from few levels
        base = [rng.choice([900, 950, 1000, 1200]) for _ in range(rng.randint(2, 9))]
        cand = [rng.choice([900, 950, 1000, 1200, 1400]) for _ in range(rng.randint(1, 6))]
        assert mann_whitney_greater(base, cand) == pytest.approx(brute_force_p(base, cand))


def test_normal_approximation_is_close_to_the_exact_count_past_its_size() -> None:
    from chaos.store import trend

    rng = random.Random(5)
    base = [rng.gauss(1000, 80) for _ in range(16)]
    cand = [rng.gauss(1060, 80) for _ in range(12)]
    exact = trend._exact_upper_tail(midranks([*base, *cand]), 12,
                                    sum(midranks([*base, *cand])[16:]))
    assert len(base) + len(cand) > trend.EXACT_MAX_SAMPLES  # so the approximation answers
    assert mann_whitney_greater(base, cand) == pytest.approx(exact, abs=0.01)


def run_samples(rng: random.Random, centre: float, spread: float = 60,
                n: int = 8) -> dict[str, list[int]]:
    """One run's samples: its leases reaped together (a shared offset per run) plus jitter."""
    offset = rng.uniform(-spread, spread)
    return {"reap": [int(centre + offset + rng.uniform(0, 10)) for _ in range(n)]}


def test_a_significant_shift_below_the_threshold_is_no_alarm() -> None:
    rng = random.Random(1)
    baseline = [run_samples(rng, 980, spread=2) for _ in range(5)]
    candidates = [run_samples(rng, 1000, spread=2) for _ in range(3)]
    comparison = compare_kind("reap", baseline, candidates, TrendSettings(), bound_ms=1500)
    assert comparison.p_value < 1e-4  # 20 ms later every time: significant ...
    assert comparison.threshold_ms == 75  # ... but 5% of the bound is the least that alarms
    assert comparison.status == "ok"


def test_a_shift_past_the_threshold_is_a_regression_named_with_its_figures() -> None:
    rng = random.Random(2)
    baseline = [run_samples(rng, 980) for _ in range(5)]
    candidates = [run_samples(rng, 1180) for _ in range(3)]
    comparison = compare_kind("reap", baseline, candidates, TrendSettings(), bound_ms=1500,
                              baseline_ids=[1, 2, 3, 4, 5], candidate_ids=[6, 7, 8])
    assert comparison.status == "regression"
    assert comparison.figure == "recovery"
    assert comparison.shift_ms > 150 and comparison.p_value < 0.01
    text = comparison.text()
    assert "recovery: p50" in text and "Mann-Whitney p =" in text and "5 vs 3 runs" in text


@pytest.mark.parametrize("spread", [20, 60, 120])
def test_null_windows_rarely_alarm(spread: float) -> None:
    """Runs drawn from one distribution, judged in every window of 5 + 3: the p-value alone
    alarms on the shared offset of each run's leases in more than a tenth of the windows; with
    the threshold, at most 1 in 100 do, even when that offset (up to +-spread ms) outgrows the
    fixed floors."""
    rng = random.Random(9)
    runs = [run_samples(rng, 1000, spread=spread) for _ in range(800)]
    judged = [compare_kind("reap", runs[s:s + 5], runs[s + 5:s + 8], TrendSettings(),
                           bound_ms=1500) for s in range(len(runs) - 8)]
    assert sum(c.p_value < 0.01 for c in judged) > 0.1 * len(judged)
    assert sum(c.regression for c in judged) <= 0.01 * len(judged)


def test_too_few_runs_and_no_samples_are_never_alarms() -> None:
    settings = TrendSettings()
    assert compare_kind("reap", [{"reap": [1]}], [{"reap": [900]}], settings).status == \
        "too few runs"
    assert compare_kind("reap", [{}, {}], [{}], settings).status == "no samples"


@pytest.mark.parametrize("settings, word", [
    (TrendSettings(baseline=1), "--baseline 1"), (TrendSettings(candidates=0), "--candidates 0"),
    (TrendSettings(alpha=1.5), "--alpha 1.5"), (TrendSettings(min_shift_ms=-1), "--min-shift")])
def test_bad_settings_are_named(settings: TrendSettings, word: str) -> None:
    from chaos.store.trend import TrendError

    with pytest.raises(TrendError, match=word):
        settings.validate()


# --- groups and windows -----------------------------------------------------------------------


def record(scenario: str = "kill-worker", verdict: str = "pass", started_ms: int = 0,
           settings_hash: str = "aaa", labels: dict[str, str] | None = None,
           samples: dict[str, list[int]] | None = None, bound_ms: float = 1500) -> RunRecord:
    return RunRecord(scenario=scenario, settings_hash=settings_hash, family="reference",
                     seed=7, started_ms=started_ms, verdict=verdict,
                     exit_code={"pass": 0, "fail": 1, "unknown": 4}.get(verdict, 3),
                     command="run", run_dir=f"/runs/{started_ms}",
                     figures={"recovery_p99_ms": float(max((samples or {}).get("reap", [0]))),
                              "bound_ms": bound_ms},
                     samples=samples or {}, labels=labels or {},
                     unknown_reasons=["undrained"] if verdict == "unknown" else [])


def test_windows_skip_unjudged_runs_and_baselines_skip_failures() -> None:
    verdicts = ["pass", "fail", "pass", "unknown", "pass", "pass", "error", "pass", "unknown"]
    group = Group("s", None, [Point(i, i, v, "h", {}, []) for i, v in enumerate(verdicts)])
    choose_windows(group, TrendSettings(baseline=2, candidates=2))
    assert group.candidate_ids == [5, 7]  # the latest judged runs: unknown and error are not
    assert group.baseline_ids == [2, 4]  # passing runs before them
    assert group.unknown_rate == pytest.approx(2 / 9)


def test_groups_by_scenario_whatever_the_settings_and_by_label() -> None:
    stored = [StoredRun(i, record(scenario=name, started_ms=100 - i, settings_hash=h,
                                  labels={"sut_version": v}))
              for i, (name, h, v) in enumerate([("a", "h1", "1"), ("a", "h2", "2"),
                                                ("b", "h1", "1"), ("a", "h2", "1")])]
    groups = group_runs(stored)
    assert [(g.scenario, [p.run_id for p in g.points]) for g in groups] == [
        ("a", [3, 1, 0]), ("b", [2])]  # oldest first
    assert groups[0].settings_changes == [(0, "h2", "h1")]
    by_version = group_runs(stored, by="sut_version")  # the latest value against the one before
    assert [g.name for g in by_version] == ["a [sut_version: 1 -> 2]", "b [1]"]
    assert [p.run_id for p in by_version[0].points] == [3, 1, 0]
    choose_windows(by_version[0], TrendSettings(baseline=2, candidates=1))
    assert by_version[0].candidate_ids == [1] and by_version[0].baseline_ids == [3, 0]
    reverse = group_runs(stored, by="sut_version", compare=("2", "1"))
    assert [g.name for g in reverse] == ["a [sut_version: 2 -> 1]"]  # b has no runs of 2


def test_capacity_searches_are_a_group_of_their_own() -> None:
    runs = [StoredRun(i, record(started_ms=i, samples={"reap": [1000]})) for i in range(6)]
    search = record(started_ms=9)
    search.command = "capacity"
    groups = group_runs([*runs, StoredRun(9, search)])
    assert [(g.scenario, len(g.points)) for g in groups] == [
        ("kill-worker", 6), ("kill-worker (capacity)", 1)]
    choose_windows(groups[0], TrendSettings())
    assert groups[0].candidate_ids == [3, 4, 5]  # the search took no place of a run


# --- the command on a store of synthetic records ----------------------------------------------


def synthetic_store(url: str | Path, slow_candidates: bool, runs: range = range(8)) -> None:
    """kill-worker runs ``runs`` (5 of settings a, then settings b: 200 ms slower with
    ``slow_candidates``), and one unknown run of another scenario."""
    rng = random.Random(4 + runs.start)
    store = open_store(str(url))
    try:
        for k in runs:
            centre = 1180 if slow_candidates and k >= 5 else 980
            store.add(record(started_ms=1_000_000 + k * 1000, settings_hash="a" if k < 5 else "b",
                             samples=run_samples(rng, centre)))
        if runs.start == 0:
            store.add(record(scenario="other", started_ms=2_000_000, verdict="unknown"))
    finally:
        store.close()


def test_trend_exits_1_naming_the_regression_with_json_html_and_junit(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    synthetic_store(store, slow_candidates=True)
    page, junit = tmp_path / "trend.html", tmp_path / "trend.xml"
    done = cli("trend", "--store", str(store), "--html", str(page), "--junit", str(junit))
    assert done.returncode == 1, done.stderr
    assert "1 regression(s):" in done.stdout
    assert "kill-worker: recovery: p50" in done.stdout
    assert "settings changed at run 6: a -> b" in done.stdout
    assert "other: 1 run(s)" in done.stdout and "unknown 100%" in done.stdout
    text = page.read_text()
    assert text.count("<svg") >= 2 and "regression: shift" in text and "recovery bound" in text
    suites = ET.fromstring(junit.read_text())
    failed = [case.get("name") for case in suites.iter("testcase")
              if case.find("failure") is not None]
    assert failed == ["recovery"] and suites.get("failures") == "1"
    as_json = json.loads(cli("trend", "--store", str(store), "--json").stdout)
    assert [(r["scenario"], r["figure"]) for r in as_json["regressions"]] == [
        ("kill-worker", "recovery")]
    assert as_json["groups"][0]["candidate_runs"] == [6, 7, 8]


def test_trend_exits_0_without_a_regression(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    synthetic_store(store, slow_candidates=False)
    done = cli("trend", "--store", str(store))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("no regression")


def test_trend_over_a_real_postgresql_store(request: pytest.FixtureRequest) -> None:
    """The nightly flow on a shared store: sound nights exit 0; three slower ones exit 1."""
    url = request.getfixturevalue("postgres_url")  # a real server (tests/postgres.py)
    synthetic_store(url, slow_candidates=True, runs=range(5))
    steady = cli("trend", "--store", url, "--candidates", "2")
    assert steady.returncode == 0, steady.stdout + steady.stderr
    synthetic_store(url, slow_candidates=True, runs=range(5, 8))
    slower = cli("trend", "--store", url, "--json")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert [(r["scenario"], r["figure"]) for r in json.loads(slower.stdout)["regressions"]] == [
        ("kill-worker", "recovery")]


def test_trend_bad_arguments_exit_2_and_an_unreachable_store_3(tmp_path: Path) -> None:
    bad = cli("trend", "--store", str(tmp_path / "s.sqlite"), "--baseline", "1")
    assert bad.returncode == 2 and "--baseline 1" in bad.stderr
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store was opened
    assert cli("trend", "--store", str(tmp_path / "s.sqlite"), "--alpha", "x").returncode == 2
    missing = cli("trend", "--store", str(tmp_path / "typo.sqlite"))
    assert missing.returncode == 3 and "no such SQLite file" in missing.stderr
    assert not (tmp_path / "typo.sqlite").exists()
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"not a database" * 100)
    broken = cli("trend", "--store", str(corrupt))
    assert broken.returncode == 3 and str(corrupt) in broken.stderr
    scheme = cli("trend", "--store", "mysql://x@127.0.0.1/db")
    assert scheme.returncode == 3 and "unsupported scheme" in scheme.stderr
    newer = tmp_path / "newer.sqlite"
    open_store(str(newer)).close()
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE schema_version SET version = version + 1")
    assert cli("trend", "--store", str(newer)).returncode == 3


# --- the done-when, on real runs --------------------------------------------------------------

# kill-worker as it is (Locust, kills at 500 and 2000 ms of chaos), as the calibration runs it
# (docs/store.md), one run at a time. What is asserted is the regression of `prompt` (each lapsed
# lease's deadline to reap), the figure the reap interval sets directly: the two kills fall
# 1,500 ms apart, half a 600 ms tick, so between them their leases' deadlines meet every phase of
# the slower grid. Fault-to-reap `recovery` is not asserted: it carries the reaper's phase against
# each kill, which the schedule fixes and the machine's load moves. In a CI run under load one
# kill's leases were reaped 976 ms after it by both reapers and the other's 1,275 vs 963 ms, so
# recovery's shift (the median of every difference) fell between the two clusters at +67 ms,
# under its 75 ms alarm, while prompt moved +191 ms. The shortened phases of
# tests/test_evaluation.py hide even more (docs/store.md, "Calibration").
SLOW_REAPER = ["--set", "topology.reap_interval_ms=600"]


def run_in_order(tmp_path: Path, planned: list[tuple[list[str], tuple[Path, ...]]]) -> None:
    """Each planned run (its extra arguments, the stores it goes to), one after another; a run
    for more than one store is stored in the first and imported into the others."""
    for k, (extra, stores) in enumerate(planned):
        run_dir = tmp_path / f"run-{k}"
        done = cli("run", str(ROOT / "scenarios" / "kill-worker.toml"), "--out", str(run_dir),
                   "--store", str(stores[0]), *extra)
        assert done.returncode == 0, done.stderr[-2000:]
        for also in stores[1:]:
            imported = cli("store", "import", "--store", str(also), str(run_dir))
            assert imported.returncode == 0, imported.stderr


@pytest.mark.integration
def test_a_slower_reaper_is_flagged_and_sound_runs_are_not(tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    """4 sound runs then 3 with reap_interval_ms 600 (still passing): exit 1 naming
    kill-worker's deadline-to-reap (`prompt`); the 4 and 3 more sound runs: exit 0. The same
    runs imported into a real PostgreSQL store (where installed; required under CI=true): the
    same answers."""
    flagged, sound = tmp_path / "flagged.sqlite", tmp_path / "sound.sqlite"
    run_in_order(tmp_path, [*[([], (flagged, sound))] * 4, *[([], (sound,))] * 3,
                            *[(SLOW_REAPER, (flagged,))] * 3])
    slower = cli("trend", "--store", str(flagged))
    assert slower.returncode == 1, slower.stdout
    regressions = slower.stdout.split("regression(s):", 1)[1]
    assert "kill-worker: prompt: p50" in regressions, slower.stdout
    assert all(line.strip().startswith("kill-worker: ") for line in regressions.splitlines()
               if line.strip()), slower.stdout
    assert "settings changed at run 5" in slower.stdout
    steady = cli("trend", "--store", str(sound))
    assert steady.returncode == 0, steady.stdout
    assert "7 pass" in steady.stdout
    if not postgres_installed():
        return
    server = request.getfixturevalue("postgres_url")
    for runs, code in (([0, 1, 2, 3, 7, 8, 9], 1), (range(7), 0)):
        with fresh_database(server) as url:
            done = cli("store", "import", "--store", url,
                       *[str(tmp_path / f"run-{k}") for k in runs])
            assert done.returncode == 0, done.stderr
            shared = cli("trend", "--store", url)
            assert shared.returncode == code, shared.stdout + shared.stderr
            if code == 1:
                assert "kill-worker: prompt: p50" in shared.stdout.split("regression(s):")[1]
