"""The benchmark entry point end to end at its smallest size: every section runs and bench.json
is well formed (no figure is judged here: timings belong to the benchmark, not the tests)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci_tools import require_tool

ROOT = Path(__file__).resolve().parent.parent
ROW_KEYS = {"section", "figure", "value", "unit", "baseline", "baseline_name", "target", "note",
            "ratio", "met"}


# Sections whose figures need redis-benchmark (the server-side baseline), each with a figure
# whose baseline it measures; without it they say in "skipped" why (naming the tool) rather
# than fail, and write what they measured without it.
NEEDS_REDIS_BENCHMARK = {"queue": "Python claims/s vs the server's ceiling",
                         "fields": "claims/s, claim event: as shipped",
                         "recorder": "recorder ceiling: events/s decoded vs the scripts source's"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """One smoke-size benchmark run for the module: bench.json and the table printed."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a target missed, not a failure
    return json.loads(out.read_text()), done.stdout


@pytest.mark.integration
def test_the_benchmark_runs_at_smoke_size_and_writes_bench_json(smoke: tuple[dict, str]):
    bench, stdout = smoke
    assert bench["schema"] == 1 and bench["mode"] == "smoke"
    assert set(bench["sections"]) == {"queue", "fields", "checker", "startup", "proxy", "recorder",
                                      "locust", "store", "trend"}
    rows = [row for section in bench["sections"].values() for row in section.get("rows", [])]
    figures = {row["figure"] for row in rows}
    for expected in ("Python claims/s vs the server's ceiling",
                     "full jobs/s, events on + exporter vs events off",
                     "peak RSS vs 1 GiB",
                     "run -> first claim, 8 workers, local runtime",
                     "storing one run (new SQLite store: schema, record, samples)",
                     "echomq-chaos trend over 300 stored runs"):
        assert expected in figures
    for row in rows:
        assert set(row) == ROW_KEYS, row
        if row["value"] is not None and row["baseline"]:
            assert math.isclose(row["ratio"], row["value"] / row["baseline"])
            assert row["value"] >= 0
    for name, section in bench["sections"].items():
        assert "error" not in section
        if name in NEEDS_REDIS_BENCHMARK:
            if shutil.which("redis-benchmark") is None:
                assert "redis-benchmark not installed" in section["skipped"], name
            else:
                assert "skipped" not in section, name
    # the table names every figure written
    for figure in figures:
        assert figure[:60] in stdout


@pytest.mark.integration
def test_the_sections_measured_against_redis_benchmark_write_their_figures(
        smoke: tuple[dict, str]):
    require_tool("redis-benchmark", "redis-tools")
    bench, _ = smoke
    for name, figure in NEEDS_REDIS_BENCHMARK.items():
        rows = {row["figure"]: row for row in bench["sections"][name]["rows"]}
        assert figure in rows, name
        assert rows[figure]["baseline"] is not None, (name, rows[figure])


def test_a_row_is_a_ratio_judged_against_its_target():
    from benchmarks.common import Row

    faster = Row("s", "f", 30.0, "x/s", 40.0, "base", target=(">=", 0.7))
    assert faster.ratio == 0.75 and faster.met is True
    slower = Row("s", "f", 9.0, "s", 10.0, "budget", target=("<=", 0.8))
    assert slower.met is False
    assert Row("s", "f", 5.0, "x", None).ratio is None  # no baseline: no ratio, no verdict
    assert Row("s", "f", 5.0, "x", 0.0, target=(">=", 1.0)).met is None
    assert Row("s", "f", None, "x", 3.0).as_dict()["ratio"] is None


def test_a_scale_run_without_a_verdict_says_why():
    from benchmarks.scale import rows_of

    result = {"report": {"error": "not connected after 94s: worker-17"}, "exit_code": 3,
              "stderr_tail": ""}
    [row] = rows_of(result, "128x8", 246.0, 5000.0)
    assert row.value is None and "exit 3" in row.note and "worker-17" in row.note
