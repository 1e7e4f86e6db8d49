"""What the run store costs a run (docs/store.md, issue 37's "storing adds < 100 ms"): one short
kill-worker run is made, then, for the same run directory, in alternating rounds:

- storing it: what a command does after each run given ``--store``: open the store (an SQLite
  file; a new one each round, so the schema is built too), turn the run into a record
  (report.json, the checker's verdict and samples) and add it in one transaction;
- the baseline: judging the same run directory again (``echomq-chaos check``'s path), the work
  every run already does once at its end.

The figure is storing's median; its ratio to judging says what share of a run's own end it adds.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Row, median
from chaos.run.offline import recheck
from chaos.run.storing import RunRecorder
from chaos.store.record import run_samples

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "kill-worker.toml"
SHORT = ["--set", "phases.warmup_ms=500", "--set", "phases.heal_ms=300",
         "--set", "phases.chaos_ms=2500", "--set", 'load.engine="builtin"']
TARGET_MS = 100  # the target for storing one run


def measure(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-store-") as scratch:
        run_dir = Path(scratch) / "run"
        subprocess.run([sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out",
                        str(run_dir), *SHORT], cwd=ROOT, capture_output=True, timeout=180,
                       check=False)
        if not (run_dir / "report.json").exists():
            raise RuntimeError(f"the kill-worker run left no report.json in {run_dir}")
        saved = recheck(run_dir)
        storing, judging = [], []
        for index in range(rounds):
            started = time.perf_counter()
            saved = recheck(run_dir)
            judging.append((time.perf_counter() - started) * 1000)
            recorder = RunRecorder(str(Path(scratch) / f"store-{index}.sqlite"), {}, "run")
            started = time.perf_counter()
            recorder.record(run_dir, saved.report, saved.verdict, saved.exit_code)
            recorder.close()
            storing.append((time.perf_counter() - started) * 1000)
            if recorder.failures:
                raise RuntimeError(recorder.failures[0])
    store_ms, judge_ms = median(storing), median(judging)
    samples = sum(len(values) for values in run_samples(saved.verdict).values())
    met = "met" if store_ms < TARGET_MS else "MISSED"
    return {"rows": [Row(
        "store", "storing one run (new SQLite store: schema, record, samples)", store_ms, "ms",
        judge_ms, "judging the same run directory again",
        note=f"{samples} samples stored; issue target < {TARGET_MS} ms: {met}")],
        "raw": {"storing_ms": storing, "judging_ms": judging}}
