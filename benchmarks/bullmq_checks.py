"""python -m benchmarks.bullmq_checks --out DIR [--workers 1,2,3,4,6,8] [--runs 2]
[--phases natural,in,spread] [--break NAME] [--run]: the gaps between BullMQ's stalled checks
that really ran, queue-wide, measured on stock BullMQ (docs/bullmq.md).

BullMQ's workers each fire a stalled-check timer every ``stalledInterval`` S, and the shared
``stalled-check`` key lets one check through per S. What does that promise about the gap between
two checks that ran, whoever ran them? Each run is scenarios/bullmq/pause-worker.toml with
``--set topology.workers=N`` (a pause on one worker: a checker held, the others carry on; with
one worker, no fault) and the worker timers' phase set by CHAOS_BULLMQ_PHASE (``natural``: as
they come up; ``in``: all on one grid; ``spread``: out of phase), into ``DIR/<break or
stock>-w<N>-<phase>-r<k>``; runs already there are kept. Then, from every run's MONITOR history,
one row per configuration: the checks that ran, their gaps (median, p90, max) in units of S, how
many exceeded S + tolerance and 2S + tolerance, and the verdict of ``reap_cadence``.

    python -m benchmarks.bullmq_checks --out /tmp/checks --run
    python -m benchmarks.bullmq_checks --out /tmp/checks --break half-rate-checks --runs 1 --run
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "bullmq" / "pause-worker.toml"
PHASES = ("natural", "in", "spread")


def run_one(run_dir: Path, workers: int, phase: str, broken: str) -> None:
    argv = ["node", "worker.js", *(["--break", broken] if broken else [])]
    if phase != "natural":
        argv = ["env", f"CHAOS_BULLMQ_PHASE={phase}", *argv]
    command = [sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out", str(run_dir),
               "--set", f"topology.workers={workers}", "--set", f"sut.workers={json.dumps(argv)}"]
    if workers == 1:  # the pause would freeze the only checker: measured without a fault
        command += ["--set", "faults=[]"]
    subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)


def checks(run_dir: Path) -> list[tuple[int, bool]]:
    """(server ms, ran) of every stalled check in the feed's order (within a ms too): ran, or
    turned away by the key."""
    found = []
    with open(run_dir / "history-monitor.jsonl", encoding="utf-8") as handle:
        for line in handle:
            event = json.loads(line)
            if event["type"] == "sweep":
                found.append((int(event["ts"]), event.get("ran", "1") != "0"))
    return sorted(found, key=lambda check: check[0])


def turned_away_after_ran(found: list[tuple[int, bool]]) -> list[int]:
    """For each check turned away, how long after the last check that ran (ms)."""
    since, last_ran = [], None
    for ts, ran in found:
        if ran:
            last_ran = ts
        elif last_ran is not None:
            since.append(ts - last_ran)
    return since


def row(run_dirs: list[Path]) -> dict[str, Any]:
    gaps: list[int] = []
    away: list[int] = []  # turned-away checks: ms after the last check that ran
    verdicts: list[str] = []
    for run_dir in run_dirs:
        report = json.loads((run_dir / "report.json").read_text())
        verdicts.append(report["invariants"].get("reap_cadence", {}).get("status", "?"))
        found = checks(run_dir)
        times = [ts for ts, ran in found if ran]
        gaps += [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
        away += turned_away_after_ran(found)
    scenario = json.loads((run_dirs[0] / "scenario.json").read_text())
    interval = int(scenario["topology"]["reap_interval_ms"])
    tolerance = int(scenario["check"]["tolerance_ms"])
    gaps.sort()
    if not gaps:
        return {"runs": len(run_dirs), "gaps": 0, "reap_cadence": verdicts}
    return {
        "runs": len(run_dirs), "gaps": len(gaps), "interval_ms": interval,
        "median_s": round(statistics.median(gaps) / interval, 3),
        "p90_s": round(gaps[int(0.9 * (len(gaps) - 1))] / interval, 3),
        "max_s": round(gaps[-1] / interval, 3),
        "over_s_plus_tolerance": sum(gap > interval + tolerance for gap in gaps),
        "over_2s_plus_tolerance": sum(gap > 2 * interval + tolerance for gap in gaps),
        "turned_away": len(away),
        "turned_away_latest_after_ran_ms": max(away, default=None),
        "turned_away_past_s": sum(since > interval for since in away),
        "reap_cadence": verdicts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", default="1,2,3,4,6,8")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--break", dest="broken", default="")
    parser.add_argument("--run", action="store_true", help="make the runs not already there")
    args = parser.parse_args(argv)
    label = args.broken or "stock"
    table = {}
    for workers in (int(n) for n in args.workers.split(",")):
        for phase in args.phases.split(","):
            dirs = [args.out / f"{label}-w{workers}-{phase}-r{k}" for k in range(args.runs)]
            for run_dir in dirs:
                if args.run and not (run_dir / "report.json").exists():
                    run_one(run_dir, workers, phase, args.broken)
            done = [run_dir for run_dir in dirs if (run_dir / "report.json").exists()]
            if done:
                table[f"{label} w{workers} {phase}"] = row(done)
                print(f"{label} w{workers} {phase}: {table[f'{label} w{workers} {phase}']}",
                      flush=True)
    (args.out / f"{label}-table.json").write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
