"""python -m benchmarks.celery_restore --out DIR [--runs 3] [--defaults]: Celery's real recovery
bound on Valkey, measured (docs/celery.md).

Each run is scenarios/celery/kill-worker.toml (three real Celery workers, a SIGKILL of the one
holding the oldest task) with the visibility timeout L, the restore interval R and kombu's
restore throttle T of a configuration (T by CELERY_SUT_RESTORE_THROTTLE, sut/celery), into
``DIR/L<L>-R<R>-T<T>-r<k>``; runs already there are kept. From each run's report.json: the
stranded reservations, delivery to restore at worst (ms), and whether it held against
L + R (the bound the family judges, which assumes T = 1) and L + R x T (kombu's own period).
``--defaults`` adds kombu's own defaults bar the visibility timeout (L 3 s, R 10 s, T 10:
minutes a run).

    python -m benchmarks.celery_restore --out /tmp/celery-restore
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "celery" / "kill-worker.toml"
# (visibility_timeout ms, unacked_restore_interval ms, unacked_restore_throttle)
CONFIGS = [(1500, 500, 1), (1000, 250, 1), (1500, 500, 4)]
DEFAULTS = (3000, 10000, 10)


def run_one(out: Path, lease: int, interval: int, throttle: int) -> dict[str, Any]:
    report = out / "report.json"
    if not report.exists():
        # the chaos phase outlasts the slowest restore: L + R x T after the kill, and a margin
        chaos_ms = 300 + lease + interval * throttle + 1000
        subprocess.run(
            [sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out", str(out),
             "--set", f"topology.lease_ms={lease}",
             "--set", f"topology.reap_interval_ms={interval}",
             "--set", f"phases.chaos_ms={chaos_ms}",
             "--set", f"phases.drain_margin_ms={lease + interval * throttle + 2000}"],
            env={**os.environ, "CELERY_SUT_RESTORE_THROTTLE": str(throttle)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    data = json.loads(report.read_text())
    bound = data["invariants"]["recovery_bound"]
    worst = bound.get("max_ms")
    verdict = data.get("verdict")
    return {"verdict": verdict.get("word") if isinstance(verdict, dict) else verdict,
            "stranded": bound.get("stranded"), "worst_ms": worst,
            "within_L_plus_R": None if worst is None else worst <= lease + interval,
            "within_L_plus_RT": None if worst is None else worst <= lease + interval * throttle}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--defaults", action="store_true")
    options = parser.parse_args()
    configs = CONFIGS + ([DEFAULTS] if options.defaults else [])
    print("L ms   R ms   T   run  stranded  worst delivery->restore ms  L+R   L+RxT  verdict")
    for lease, interval, throttle in configs:
        for index in range(1, options.runs + 1):
            row = run_one(options.out / f"L{lease}-R{interval}-T{throttle}-r{index}",
                          lease, interval, throttle)
            print(f"{lease:<6} {interval:<6} {throttle:<3} {index:<4} {row['stranded']!s:<9} "
                  f"{row['worst_ms']!s:<27} {_held(row['within_L_plus_R']):<5} "
                  f"{_held(row['within_L_plus_RT']):<6} {row['verdict']}")
    return 0


def _held(value: bool | None) -> str:
    return "-" if value is None else "held" if value else "over"


if __name__ == "__main__":
    sys.exit(main())
