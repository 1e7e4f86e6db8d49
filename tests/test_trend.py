"""`echomq-chaos trend`: the pure statistics (chaos.store.trend) on synthetic samples, the
command on a store of synthetic records (exit codes, --json, --html, --junit), and the issue's
done-when on real runs of kill-worker (a slower reaper flagged, sound runs not)."""

from __future__ import annotations

import itertools
import json
import os
import random
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.reference.variant import VARIANT_ENV
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


def test_the_pace_is_tested_towards_the_worse_in_its_own_unit() -> None:
    rng = random.Random(6)
    base = [{"completes_per_s": [rng.randint(34, 38) for _ in range(5)]} for _ in range(5)]
    fewer = [{"completes_per_s": [rng.randint(27, 31) for _ in range(5)]} for _ in range(3)]
    more = [{"completes_per_s": [rng.randint(41, 45) for _ in range(5)]} for _ in range(3)]
    slower = compare_kind("completes_per_s", base, fewer, TrendSettings())
    assert slower.status == "regression" and slower.figure == "throughput"
    assert slower.shift_ms < 0 and slower.unit == "/s"
    assert "alarm at <= -" in slower.text() and " /s" in slower.text()
    assert compare_kind("completes_per_s", base, more, TrendSettings()).status == "ok"
    gaps = [{"sweep_gap": [250] * 20} for _ in range(5)]
    longer = compare_kind("sweep_gap", gaps, [{"sweep_gap": [350] * 14}] * 3, TrendSettings())
    assert longer.status == "regression" and longer.shift_ms == 100
    assert longer.threshold_ms == 50  # --min-shift-ms: no recovery bound in its floor


def test_one_value_a_run_says_it_cannot_alarm_and_which_window_could() -> None:
    base = [{"drain": [900 + 10 * k]} for k in range(5)]
    cand = [{"drain": [2000 + k]} for k in range(3)]
    drain = compare_kind("drain", base, cand, TrendSettings())
    assert drain.p_value == pytest.approx(1 / 56)  # every candidate above every baseline run
    assert drain.status == "cannot alarm" and drain.smallest_p == pytest.approx(1 / 56)
    assert "--baseline 7 or --candidates 4 could alarm" in drain.text()
    more = [{"drain": [900 + 10 * k]} for k in range(7)]
    assert compare_kind("drain", more, cand, TrendSettings()).status == "regression"


def test_compare_is_key_and_two_values() -> None:
    from chaos.store.trend import TrendError, parse_compare

    assert parse_compare(None, "code=v1..v2") == ("code", ("v1", "v2"))
    assert parse_compare("git", None) == ("git", None)
    for bad in ("code=v1", "v1..v2", "code=..v2"):
        with pytest.raises(TrendError, match="KEY=A..B"):
            parse_compare(None, bad)
    with pytest.raises(TrendError, match="two labels"):
        parse_compare("git", "code=a..b")


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
    assert "Why recovery is flagged" in text and "against an alarm threshold of" in text
    assert "The runs compared" in text and text.count("<td>candidate</td>") == 3
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
    compare = cli("trend", "--store", str(tmp_path / "s.sqlite"), "--compare", "code=v1")
    assert compare.returncode == 2 and "KEY=A..B" in compare.stderr
    scheme = cli("trend", "--store", "mysql://x@127.0.0.1/db")
    assert scheme.returncode == 3 and "unsupported scheme" in scheme.stderr
    newer = tmp_path / "newer.sqlite"
    open_store(str(newer)).close()
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE schema_version SET version = version + 1")
    assert cli("trend", "--store", str(newer)).returncode == 3


# --- the done-when, on real runs --------------------------------------------------------------

# kill-worker as it is (Locust, kills at 500 and 2000 ms of chaos), one run at a time, and two
# changed builds of the same settings (code, not settings: ECHOMQ_CHAOS_BUILD_VARIANT,
# docs/store.md): a reaper sweeping every 350 ms (the scenario still says 250) and a claim
# path 25 ms slower. What is asserted is what a code change moves whatever the reaper's phase
# against the kills (the sweep period; the claim wait and the throughput): fault- and
# deadline-relative recovery carries that phase, and a 350 ms grid lands some reaps earlier
# than the 250 ms one (docs/store.md, "Calibration").
SLOW_REAPER = "reaper_period_ms=350"
SLOW_CLAIM = "claim_delay_ms=25"


def run_in_order(tmp_path: Path, planned: list[tuple[str, str]]) -> list[Path]:
    """Each planned run (its build variant, its ``code`` label), one after another, stored in
    nothing (stores are filled by importing the run directories)."""
    made = []
    for k, (variant, _code) in enumerate(planned):
        run_dir = tmp_path / f"run-{k}"
        env = {key: value for key, value in os.environ.items() if key != VARIANT_ENV}
        if variant:
            env[VARIANT_ENV] = variant
        done = subprocess.run(
            [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "kill-worker.toml"),
             "--out", str(run_dir)], capture_output=True, text=True, timeout=120, cwd=ROOT,
            env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        made.append(run_dir)
    return made


def import_runs(store: str | Path, runs: list[tuple[Path, str]]) -> None:
    """Import each run directory with its ``code`` label, in order."""
    for code in dict.fromkeys(code for _, code in runs):
        done = cli("store", "import", "--store", str(store), "--label", f"code={code}",
                   *[str(run_dir) for run_dir, label in runs if label == code])
        assert done.returncode == 0, done.stderr


def regressions_of(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The regression lines of trend's table (each names its group and figure)."""
    if "regression(s):" not in done.stdout:
        return []
    return [line.strip() for line in done.stdout.split("regression(s):", 1)[1].splitlines()
            if line.strip()]


@pytest.mark.integration
def test_code_regressions_are_flagged_and_sound_runs_are_not(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """6 sound runs then 3 of a reaper sweeping every 350 ms (code, not settings): exit 1
    naming the sweep period; the 6 then 3 of a claim path 25 ms slower: exit 1 naming the claim
    wait; the 6 and 3 more sound runs: exit 0. ``--by code`` names the regression between the
    two codes; ``--compare`` any two. The reaper's store imported into a real PostgreSQL store
    (where installed; required under CI=true): the same answers."""
    plan = [*[("", "v1")] * 6, *[(SLOW_REAPER, "v2-reaper")] * 3,
            *[(SLOW_CLAIM, "v2-claim")] * 3, *[("", "v1-again")] * 3]
    runs = list(zip(run_in_order(tmp_path, plan), [code for _, code in plan], strict=True))
    sound, reaper, claim, again = runs[:6], runs[6:9], runs[9:12], runs[12:]
    stores = {name: tmp_path / f"{name}.sqlite" for name in ("reaper", "claim", "sound")}
    import_runs(stores["reaper"], sound + reaper)
    import_runs(stores["claim"], sound + claim)
    import_runs(stores["sound"], sound + again)

    slower = cli("trend", "--store", str(stores["reaper"]))
    assert slower.returncode == 1, slower.stdout
    assert "settings changed" not in slower.stdout  # one settings hash: the code changed
    assert any(line.startswith("kill-worker: sweep_period:") for line in
               regressions_of(slower)), slower.stdout
    claims = cli("trend", "--store", str(stores["claim"]))
    assert claims.returncode == 1, claims.stdout
    assert any(line.startswith("kill-worker: claim_wait:") for line in
               regressions_of(claims)), claims.stdout
    steady = cli("trend", "--store", str(stores["sound"]))
    assert steady.returncode == 0, steady.stdout
    assert "9 pass" in steady.stdout

    by_code = cli("trend", "--store", str(stores["reaper"]), "--by", "code")
    assert by_code.returncode == 1, by_code.stdout
    assert any(line.startswith("kill-worker [code: v1 -> v2-reaper]: sweep_period:")
               for line in regressions_of(by_code)), by_code.stdout
    assert "code=v1 (baseline) against code=v2-reaper (candidates)" in by_code.stdout
    together = tmp_path / "all.sqlite"
    import_runs(together, runs)  # the latest code (v1 again) against v2-claim: no regression
    assert cli("trend", "--store", str(together), "--by", "code").returncode == 0
    picked = cli("trend", "--store", str(together), "--compare", "code=v1..v2-claim")
    assert picked.returncode == 1, picked.stdout
    assert all(line.startswith("kill-worker [code: v1 -> v2-claim]: ")
               for line in regressions_of(picked)), picked.stdout
    if not postgres_installed():
        return
    server = request.getfixturevalue("postgres_url")
    for chosen, code in ((sound + reaper, 1), (sound + again, 0)):
        with fresh_database(server) as url:
            import_runs(url, chosen)
            shared = cli("trend", "--store", url)
            assert shared.returncode == code, shared.stdout + shared.stderr
            if code == 1:
                assert any(line.startswith("kill-worker: sweep_period:")
                           for line in regressions_of(shared)), shared.stdout


def test_reclaim_and_recomplete_are_shown_never_tested() -> None:
    """Fault to re-claim and to re-complete are sums of figures tested on their own (recovery,
    claim wait, the handler's time): shown with their shift and p, never an alarm, where the
    same shift of recovery itself is one (their spreads added up to the only false alarms of
    re-sampled sound windows: docs/store.md)."""
    rng = random.Random(2)
    baseline = [run_samples(rng, 980) for _ in range(5)]
    candidates = [run_samples(rng, 1180) for _ in range(3)]
    recovery = compare_kind("reap", baseline, candidates, TrendSettings(), bound_ms=1500)
    assert recovery.status == "regression"
    for kind in ("reclaim", "recomplete"):
        moved = compare_kind(kind, [{kind: run["reap"]} for run in baseline],
                             [{kind: run["reap"]} for run in candidates], TrendSettings(),
                             bound_ms=1500)
        assert moved.p_value == recovery.p_value and moved.shift_ms == recovery.shift_ms
        assert moved.status == "shown" and not moved.regression
        assert "shown, not tested" in moved.text()
