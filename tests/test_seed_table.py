"""benchmarks/seed_table.py: the many-seed table, from hand-made report.json files (pure logic:
no run is started here)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.seed_table import seed_range, table


def report(tmp_path: Path, name: str, verdict: str, lag: int | None, recovery: int | None,
           failed: tuple[str, ...] = (), gap: int | None = None) -> None:
    run_dir = tmp_path / name
    run_dir.mkdir()
    invariants = {
        "reap_prompt": {"ok": "reap_prompt" not in failed, "limit_ms": 350, "max_ms": lag},
        "recovery_bound": {"ok": "recovery_bound" not in failed, "bound_ms": 1350,
                           "max_ms": recovery},
    }
    if gap is not None:  # (a run judged before reap_cadence has none)
        invariants["reap_cadence"] = {"ok": True, "limit_ms": 350, "max_gap_ms": gap}
    (run_dir / "report.json").write_text(json.dumps({"verdict": verdict,
                                                     "invariants": invariants}))


def test_one_row_per_scenario_with_its_seeds_verdicts_and_largest_lags(tmp_path: Path):
    report(tmp_path, "kill-worker-s9", "pass", 180, 1121, gap=262)
    report(tmp_path, "kill-worker-s10", "pass", 245, 1300, gap=251)
    report(tmp_path, "kill-worker-s11", "fail", 400, 1200, failed=("reap_prompt",))
    report(tmp_path, "steady-state-s9", "unknown", None, None)
    rows = table(tmp_path, recheck=False).splitlines()[2:]
    assert rows == [
        "| kill-worker | 3 (9-11) | fail 1, pass 2 | 400 / 350 | 1300 / 1350 | 262 / 350 | "
        "s11 fail (reap_prompt) |",
        "| steady-state | 1 (9-9) | unknown 1 | - / 350 | - / 1350 | - / - | s9 unknown |",
    ]


def test_seed_ranges():
    assert seed_range("9-12") == [9, 10, 11, 12]
    assert seed_range("3") == [3]
