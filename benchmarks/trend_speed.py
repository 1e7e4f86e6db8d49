"""How fast `echomq-chaos trend` answers over a large store (docs/store.md, issue 37's "trend over
10,000 stored runs answers in < 2 s").

A store of ``runs`` synthetic records (an SQLite file, bulk-inserted: 20 scenarios, each run
with report.json's figures (FIGURES), 4 recovery sample lists of 8 values and the pace's 3
(SAMPLE_SHAPES: 20 sweep gaps, 240 claim waits, 5 completes a second) and 2 labels, a few runs
unknown or failed) is built once, then timed in alternating rounds:

- ``trend`` in process (chaos.tools.trend.trend: every run's figures and labels read, the
  windows chosen, their samples read and judged) against the baseline of reading the runs alone
  (RunStore.runs), the part no trend can skip;
- the command, ``echomq-chaos trend --store FILE`` as a user runs it (start-up and imports
  included), against the same command over an empty store.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import Row, median
from chaos.store.database import open_store, run_figures, run_labels, run_samples, runs
from chaos.store.record import FIGURES, PACE_KINDS, SAMPLE_FIGURES
from chaos.store.trend import TrendSettings
from chaos.tools.trend import trend

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 2000  # the target for trend over 10,000 runs
SCENARIOS = 20


# per sample kind: (values a run, low, high), about a kill-worker run's: a value per stranded
# lease of the recovery kinds; the pace's sweep gaps, claim waits and completes a second
SAMPLE_SHAPES = {**{kind: (8, 900, 1300) for kind in SAMPLE_FIGURES},
                 **dict(zip(PACE_KINDS, ((20, 248, 253), (240, 0, 1700), (5, 25, 50)),
                            strict=True))}


def build(path: Path, count: int, seed: int = 1) -> None:
    """``count`` synthetic runs in one transaction per table."""
    rng = random.Random(seed)
    store = open_store(str(path))
    try:
        rows, figures, samples, labels = [], [], [], []
        for run_id in range(1, count + 1):
            verdict = rng.choices(["pass", "unknown", "fail"], [96, 3, 1])[0]
            rows.append({"id": run_id, "scenario": f"scenario-{run_id % SCENARIOS}",
                         "settings_hash": "0123456789ab", "family": "reference", "seed": 7,
                         "started_ms": 1_700_000_000_000 + run_id * 60_000, "verdict": verdict,
                         "exit_code": {"pass": 0, "fail": 1}.get(verdict, 4), "command": "run",
                         "run_dir": f"/runs/{run_id}",
                         "unknown_reasons": json.dumps(["undrained"] if verdict == "unknown"
                                                       else []),
                         "stored_ms": 1_700_000_000_000 + run_id * 60_000})
            figures += [{"run_id": run_id, "name": name, "value": rng.uniform(0, 2000)}
                        for name in FIGURES]
            samples += [{"run_id": run_id, "kind": kind,
                         "values_ms": json.dumps([rng.randint(low, high) for _ in range(n)])}
                        for kind, (n, low, high) in SAMPLE_SHAPES.items()]
            labels += [{"run_id": run_id, "key": "sut_version", "value": f"2.6.{run_id // 500}"},
                       {"run_id": run_id, "key": "git", "value": f"{rng.getrandbits(28):07x}"}]
        with store.engine.begin() as connection:
            for table, values in ((runs, rows), (run_figures, figures),
                                  (run_samples, samples), (run_labels, labels)):
                connection.execute(sa.insert(table), values)
    finally:
        store.close()


def _timed_ms(action: Any) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _command(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "chaos", "trend", "--store", str(path)], cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   timeout=120)


def measure(count: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-trend-") as scratch:
        full, empty = Path(scratch) / "full.sqlite", Path(scratch) / "empty.sqlite"
        built_ms = _timed_ms(lambda: build(full, count))
        open_store(str(empty)).close()
        store = open_store(str(full))
        in_process, reading, command, command_empty = [], [], [], []
        try:
            regressions = len(trend(store, TrendSettings()).regressions)  # warm the cache
            for _ in range(rounds):
                reading.append(_timed_ms(store.runs))
                in_process.append(_timed_ms(lambda: trend(store, TrendSettings())))
                command_empty.append(_timed_ms(lambda: _command(empty)))
                command.append(_timed_ms(lambda: _command(full)))
        finally:
            store.close()
    trend_ms, command_ms = median(in_process), median(command)
    met = "met" if command_ms < TARGET_MS else "MISSED"
    return {"rows": [
        Row("trend", f"trend over {count} stored runs, in process", trend_ms, "ms",
            median(reading), "reading the runs alone (RunStore.runs)",
            note=f"{SCENARIOS} scenarios; {regressions} regression(s) found"),
        Row("trend", f"echomq-chaos trend over {count} stored runs", command_ms, "ms",
            median(command_empty), "the same command over an empty store",
            note=f"issue target < {TARGET_MS} ms for 10,000 runs: {met}")],
        "raw": {"build_ms": built_ms, "trend_ms": in_process, "reading_ms": reading,
                "command_ms": command, "command_empty_ms": command_empty}}


if __name__ == "__main__":
    result = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000, 3)
    for row in result["rows"]:
        print(f"{row.figure}: {row.value:.0f} {row.unit} vs {row.baseline_name} "
              f"{row.baseline:.0f} ({row.ratio:.2f}x); {row.note}")
    print(f"store built in {result['raw']['build_ms']:.0f} ms")
