"""The benchmark entry point end to end at its smallest size: every section runs and bench.json
is well formed (no figure is judged here: timings belong to the benchmark, not the tests)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROW_KEYS = {"section", "figure", "value", "unit", "baseline", "baseline_name", "target", "note",
            "ratio", "met"}


@pytest.mark.integration
def test_the_benchmark_runs_at_smoke_size_and_writes_bench_json(tmp_path: Path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a target missed, not a failure
    bench = json.loads(out.read_text())
    assert bench["schema"] == 1 and bench["mode"] == "smoke"
    assert set(bench["sections"]) == {"queue", "fields", "checker", "startup", "proxy", "recorder",
                                      "locust"}
    rows = [row for section in bench["sections"].values() for row in section.get("rows", [])]
    figures = {row["figure"] for row in rows}
    for expected in ("Python claims/s vs the server's ceiling",
                     "full jobs/s, events on + exporter vs events off",
                     "claims/s, claim event: as shipped",
                     "peak RSS vs 1 GiB",
                     "run -> first claim, 8 workers, local runtime",
                     "recorder ceiling: events/s decoded vs the scripts source's",
                     "recorder ceiling by effect: events/s vs the scripts'",
                     "offline decode events/s: by effect vs the SHA1 fast path"):
        assert expected in figures
    for row in rows:
        assert set(row) == ROW_KEYS, row
        if row["value"] is not None and row["baseline"]:
            assert math.isclose(row["ratio"], row["value"] / row["baseline"])
            assert row["value"] >= 0
    for section in bench["sections"].values():
        assert "error" not in section
    # the table names every figure written
    for figure in figures:
        assert figure[:60] in done.stdout


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
