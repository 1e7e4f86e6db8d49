"""python -m benchmarks.seed_table --out DIR [--seeds 1-20] [--run] [--until HH:MM]
[--only NAME,...]: the sound protocol on every stock scenario (or those named) over many seeds,
as one table.

The proof that the checker's rules raise no false positives: each stock scenario
(``scenarios/*.toml``, not the mutants nor the hour-long soak) is run with the sound protocol
once per seed (``--set seed=N``) into ``DIR/<scenario>-s<N>``; runs already there are kept.
Then, from every run directory's report.json, one row per scenario: the seeds run, their
verdicts, and the largest deadline → reap lag seen (reap_prompt) against its limit, the
largest fault → reap (recovery_bound) against its bound, and the longest gap between two sweeps
of one reaper (reap_cadence) against its limit. With ``--recheck`` each run is judged
again by this checker (``echomq-chaos check --json``) instead of read from report.json, so runs
made by an older version count under today's rules.

    python -m benchmarks.seed_table --out /tmp/seeds --seeds 9-20 --run --until 09:20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The soak is not repeated per seed: an hour a run, it is its own evidence (docs/benchmarks.md).
SCENARIOS = sorted(path for path in (ROOT / "scenarios").glob("*.toml") if path.stem != "soak")


def seed_range(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def past(until: str | None) -> bool:
    """Is it later than ``until`` (HH:MM, UTC, today)?"""
    if until is None:
        return False
    now = datetime.now(UTC)
    hour, minute = (int(part) for part in until.split(":"))
    return (now.hour, now.minute) >= (hour, minute)


def run_seeds(out: Path, seeds: list[int], until: str | None,
              scenarios: list[Path] = SCENARIOS) -> None:
    """Seed by seed, every scenario, so a stopped run still leaves whole seeds."""
    for seed in seeds:
        for path in scenarios:
            run_dir = out / f"{path.stem}-s{seed}"
            if (run_dir / "report.json").exists():
                continue
            if past(until):
                print(f"stopped at {until} UTC before {run_dir.name}", file=sys.stderr)
                return
            started = time.monotonic()
            with open(out / f"{path.stem}-s{seed}.log", "w") as log:
                code = subprocess.call(
                    [sys.executable, "-m", "chaos", "run", str(path), "--set", f"seed={seed}",
                     "--out", str(run_dir), "--force"], cwd=ROOT, stdout=log, stderr=log)
            print(f"{path.stem} seed {seed}: exit {code} ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr, flush=True)


def judged(run_dir: Path, recheck: bool) -> dict[str, Any] | None:
    if recheck:
        done = subprocess.run([sys.executable, "-m", "chaos", "check", str(run_dir), "--json"],
                              cwd=ROOT, capture_output=True, text=True)
        try:
            return dict(json.loads(done.stdout))
        except ValueError:
            return None
    path = run_dir / "report.json"
    return dict(json.loads(path.read_text())) if path.exists() else None


def table(out: Path, recheck: bool) -> str:
    rows: dict[str, list[tuple[int, dict[str, Any] | None]]] = defaultdict(list)
    for run_dir in sorted(p for p in out.iterdir() if p.is_dir() and "-s" in p.name):
        name, _, number = run_dir.name.rpartition("-s")
        if number.isdigit():
            rows[name].append((int(number), judged(run_dir, recheck)))
    lines = ["| scenario | seeds | verdicts | largest deadline → reap lag / limit (ms) | "
             "largest fault → reap / bound (ms) | longest sweep gap / limit (ms) | not pass |",
             "|---|---|---|---|---|---|---|"]
    for name, runs in sorted(rows.items()):
        verdicts: dict[str, int] = defaultdict(int)
        lags: list[int] = []
        recoveries: list[int] = []
        gaps: list[int] = []
        limits: set[int] = set()
        bounds: set[int] = set()
        gap_limits: set[int] = set()
        odd: list[str] = []
        for seed, report in sorted(runs, key=lambda item: item[0]):
            word = report["verdict"] if report else "unreadable"
            verdicts[word] += 1
            if word != "pass":
                failed = [key for key, value in (report or {}).get("invariants", {}).items()
                          if not value["ok"]]
                odd.append(f"s{seed} {word}" + (f" ({','.join(failed)})" if failed else ""))
            if not report or "invariants" not in report:
                continue
            prompt, bound = report["invariants"]["reap_prompt"], \
                report["invariants"]["recovery_bound"]
            limits.add(prompt["limit_ms"])
            bounds.add(bound["bound_ms"])
            if prompt.get("max_ms") is not None:
                lags.append(prompt["max_ms"])
            if bound.get("max_ms") is not None:
                recoveries.append(bound["max_ms"])
            cadence = report["invariants"].get("reap_cadence")  # older runs: none
            if cadence is not None:
                gap_limits.add(cadence["limit_ms"])
                if cadence.get("max_gap_ms") is not None:
                    gaps.append(cadence["max_gap_ms"])
        seeds = sorted(seed for seed, _ in runs)
        lines.append(
            f"| {name} | {len(seeds)} ({seeds[0]}-{seeds[-1]}) | "
            + ", ".join(f"{word} {count}" for word, count in sorted(verdicts.items()))
            + f" | {max(lags) if lags else '-'} / {'/'.join(map(str, sorted(limits)))} | "
            f"{max(recoveries) if recoveries else '-'} / {'/'.join(map(str, sorted(bounds)))} | "
            f"{max(gaps) if gaps else '-'} / {'/'.join(map(str, sorted(gap_limits))) or '-'} | "
            f"{'; '.join(odd) or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seed_table",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory of the runs")
    parser.add_argument("--seeds", default="1-20", help="seeds to run, e.g. 9-20 (default 1-20)")
    parser.add_argument("--run", action="store_true", help="run the missing seeds first")
    parser.add_argument("--until", default=None,
                        help="HH:MM UTC: start no run after this time (with --run)")
    parser.add_argument("--recheck", action="store_true",
                        help="judge each run again with this checker, not its report.json")
    parser.add_argument("--only", default=None, metavar="NAME,...",
                        help="run only these stock scenarios (with --run)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = SCENARIOS
    if args.only:
        names = args.only.split(",")
        scenarios = [path for path in SCENARIOS if path.stem in names]
        unknown = sorted(set(names) - {path.stem for path in scenarios})
        if unknown:
            parser.error(f"--only: no stock scenario {', '.join(unknown)}")
    if args.run:
        run_seeds(args.out, seed_range(args.seeds), args.until, scenarios)
    print(table(args.out, args.recheck))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
