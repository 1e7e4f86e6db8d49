"""python -m benchmarks.trend_calibration --out DIR [--sound 24] [--slow 9]: how `trend`'s
defaults behave on real runs of scenarios/kill-worker.toml (docs/store.md, "trend").

Runs the scenario as it is (reap_interval_ms 250) ``--sound`` times into ``DIR/sound-r<k>`` and
with ``--set topology.reap_interval_ms=600`` (still passing, recovering slower) ``--slow``
times into ``DIR/slow-r<k>``, one after another (runs already there are kept), and stores them
all into ``DIR/store.sqlite`` with `store import`. Then, with trend's default test:

- false alarms: every window of the sound runs in order, ``--baseline`` runs then the next
  ``--candidates`` runs, judged as `trend` judges the latest ones (an alarm on any figure of
  a window counts once);
- detection: each group of ``--candidates`` slow runs after the last ``--baseline`` sound runs
  (the nightly case: a change lands, its runs follow the old ones).

Prints both, with each window's per-figure median shift / the shift an alarm needs, and its
p-value, and writes DIR/calibration.json.

``--synthetic`` adds what the test sees on synthetic runs (each run's leases sharing an offset,
as one reaper pass reaps them together) for several NOISE_FACTORs.

    python -m benchmarks.trend_calibration --out /tmp/trend-calibration --synthetic
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from chaos.files import write_json_atomic
from chaos.store.database import StoredRun, open_store
from chaos.store.trend import (
    DEFAULT_BASELINE,
    DEFAULT_CANDIDATES,
    Group,
    Point,
    TrendSettings,
    compare_kind,
    group_runs,
    judge_group,
)

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "kill-worker.toml"
SLOW = ["--set", "topology.reap_interval_ms=600"]


def run_one(out: Path, extra: list[str]) -> None:
    """One run of the scenario into ``out`` unless it is already there (a report.json)."""
    if (out / "report.json").exists():
        return
    subprocess.run([sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out", str(out),
                    "--force", *extra], cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def build_store(out: Path, sound: int, slow: int) -> Path:
    dirs = [out / f"sound-r{k}" for k in range(1, sound + 1)]
    slow_dirs = [out / f"slow-r{k}" for k in range(1, slow + 1)]
    for k, run_dir in enumerate(dirs + slow_dirs):
        run_one(run_dir, SLOW if run_dir in slow_dirs else [])
        print(f"run {k + 1}/{len(dirs) + len(slow_dirs)}: {run_dir.name}", file=sys.stderr,
              flush=True)
    store = out / "store.sqlite"
    store.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "chaos", "store", "import", "--store", str(store),
                    *map(str, dirs + slow_dirs)], cwd=ROOT, stdout=subprocess.DEVNULL,
                   check=True)
    return store


def windows(store_path: Path, baseline: int, candidates: int,
            settings: TrendSettings) -> dict[str, Any]:
    """Judge every window as `trend` judges a group's latest runs (judge_group: the same test,
    the same bound)."""
    store = open_store(str(store_path))
    try:
        stored = store.runs()
        samples = store.samples([run.id for run in stored])
    finally:
        store.close()
    (group,) = group_runs(stored)
    sound = [p for p in group.points if p.run_id in _named(stored, "sound")]
    slow = [p for p in group.points if p.run_id in _named(stored, "slow")]

    def judged(base: list[Point], cand: list[Point]) -> dict[str, Any]:
        window = Group(group.scenario, None, [*base, *cand], [p.run_id for p in base],
                       [p.run_id for p in cand])
        judge_group(window, samples, settings)
        return {"baseline": window.baseline_ids, "candidates": window.candidate_ids,
                "alarm": bool(window.regressions),
                "figures": {c.figure: {"shift_ms": c.shift_ms, "p_value": c.p_value,
                                       "threshold_ms": c.threshold_ms,
                                       "regression": c.regression}
                            for c in window.comparisons}}

    null = [judged(sound[start:start + baseline],
                   sound[start + baseline:start + baseline + candidates])
            for start in range(0, len(sound) - baseline - candidates + 1)]
    detect = [judged(sound[-baseline:], slow[start:start + candidates])
              for start in range(0, len(slow) - candidates + 1, candidates)]
    return {"sound_runs": len(sound), "slow_runs": len(slow),
            "verdicts": sorted(group.verdicts), "baseline": baseline, "candidates": candidates,
            "false_alarms": sum(w["alarm"] for w in null), "null_windows": null,
            "detected": sum(w["alarm"] for w in detect), "slow_windows": detect}


def _named(stored: list[StoredRun], prefix: str) -> set[int]:
    return {run.id for run in stored if Path(run.record.run_dir).name.startswith(prefix)}


def synthetic(settings: TrendSettings, windows_per_case: int = 792) -> list[dict[str, Any]]:
    """What the test sees at 5 + 3 runs when each run's leases share an offset (one reaper pass
    reaps them together) drawn uniform or normal: false alarms over windows of unchanged runs,
    and how many windows a +300 ms shift of the candidates is flagged in, for several
    NOISE_FACTORs."""
    from chaos.store import trend

    rows = []
    kept = trend.NOISE_FACTOR
    try:
        for factor in (1.5, 2.0, 2.5, 3.0):
            trend.NOISE_FACTOR = factor
            for dist, spread in (("uniform", 60), ("uniform", 120), ("normal", 35),
                                 ("normal", 70)):
                rng = random.Random(9)
                runs = []
                for _ in range(windows_per_case + 8):
                    offset = (rng.uniform(-spread, spread) if dist == "uniform"
                              else rng.gauss(0, spread))
                    runs.append({"reap": [int(1000 + offset + rng.uniform(0, 10))
                                          for _ in range(8)]})
                starts = range(windows_per_case)
                null = sum(compare_kind("reap", runs[s:s + 5], runs[s + 5:s + 8], settings,
                                        bound_ms=1500).regression for s in starts)
                shifted = [s for s in starts if s % 4 == 0]
                seen = sum(compare_kind(
                    "reap", runs[s:s + 5],
                    [{"reap": [v + 300 for v in run["reap"]]} for run in runs[s + 5:s + 8]],
                    settings, bound_ms=1500).regression for s in shifted)
                rows.append({"noise_factor": factor, "offsets": f"{dist} {spread} ms",
                             "false_alarms": null, "windows": len(starts),
                             "flagged_300ms": seen, "shifted_windows": len(shifted)})
    finally:
        trend.NOISE_FACTOR = kept
    return rows


def _span(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}" if ids else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sound", type=int, default=24)
    parser.add_argument("--slow", type=int, default=9)
    parser.add_argument("--baseline", type=int, default=DEFAULT_BASELINE)
    parser.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES)
    parser.add_argument("--synthetic", action="store_true",
                        help="also print the synthetic table (offsets per run, NOISE_FACTORs)")
    args = parser.parse_args(argv)
    if args.synthetic:
        for row in synthetic(TrendSettings()):
            print(f"x{row['noise_factor']:<4} offsets {row['offsets']:<15} false alarms "
                  f"{row['false_alarms']}/{row['windows']}  +300 ms flagged "
                  f"{row['flagged_300ms']}/{row['shifted_windows']}")
    args.out.mkdir(parents=True, exist_ok=True)
    store = build_store(args.out, args.sound, args.slow)
    result = windows(store, args.baseline, args.candidates, TrendSettings())
    write_json_atomic(args.out / "calibration.json", result)
    for title, key in (("sound windows", "null_windows"), ("slow windows", "slow_windows")):
        print(title)
        for window in result[key]:
            cells = "  ".join(f"{name} {fig['shift_ms']:+.0f}/{fig['threshold_ms']:.0f} ms "
                              f"p={fig['p_value']:.2g}{' ALARM' if fig['regression'] else ''}"
                              for name, fig in window["figures"].items())
            print(f"  {_span(window['baseline'])} vs {_span(window['candidates'])}: {cells}")
    print(f"verdicts {result['verdicts']}; {result['sound_runs']} sound runs, "
          f"{len(result['null_windows'])} windows of {args.baseline}+{args.candidates}: "
          f"{result['false_alarms']} false alarm(s); {len(result['slow_windows'])} windows of "
          f"{args.baseline} sound + {args.candidates} slow: {result['detected']} flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
