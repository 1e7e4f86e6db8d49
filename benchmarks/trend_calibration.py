"""python -m benchmarks.trend_calibration --out DIR [--sound 24] [--changed 9] [--slow 0]: how
`trend`'s defaults behave on real runs of scenarios/kill-worker.toml (docs/store.md, "trend").

Runs, one after another (runs already in DIR are kept), the scenario as it is ``--sound`` times
(``DIR/sound-r<k>``), each changed build of VARIANTS ``--changed`` times (code, not settings:
ECHOMQ_CHAOS_BUILD_VARIANT; ``DIR/reaper350-r<k>``, ``claim25-r<k>``, ``handler110-r<k>``),
and with ``--set topology.reap_interval_ms=600`` ``--slow`` times (``DIR/slow-r<k>``),
interleaved, and stores them all into ``DIR/store.sqlite`` with `store import`. Then, with
trend's tests, ``--draws`` windows re-sampled at random (without replacement within a window):

- false alarms: ``--baseline`` sound runs and ``--candidates`` other sound runs (an alarm on
  any figure counts once);
- detection: ``--baseline`` sound runs and ``--candidates`` runs of one changed build.

Prints per set how many alarmed and, per figure, how often it was flagged, its shifts and how
near its threshold it came; writes DIR/calibration.json.

``--synthetic`` adds what the test sees on synthetic runs (each run's leases sharing an offset,
as one reaper pass reaps them together) for several NOISE_FACTORs.

    python -m benchmarks.trend_calibration --out /tmp/trend-calibration
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from chaos.files import write_json_atomic
from chaos.reference.variant import VARIANT_ENV
from chaos.store.database import StoredRun, open_store
from chaos.store.trend import (
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
# The changed builds (ECHOMQ_CHAOS_BUILD_VARIANT: code, not settings; docs/store.md), by the
# prefix of their run directories.
VARIANTS = {"reaper350": "reaper_period_ms=350", "claim25": "claim_delay_ms=25",
            "handler110": "handler_scale=1.1"}


def run_one(out: Path, extra: list[str], variant: str = "") -> None:
    """One run of the scenario into ``out`` unless it is already there (a report.json), under
    the build ``variant`` (ECHOMQ_CHAOS_BUILD_VARIANT; '' the sound build)."""
    if (out / "report.json").exists():
        return
    env = {key: value for key, value in os.environ.items() if key != VARIANT_ENV}
    if variant:
        env[VARIANT_ENV] = variant
    subprocess.run([sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out", str(out),
                    "--force", *extra], cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False, env=env)


def build_store(out: Path, sound: int, slow: int, changed: int = 0) -> Path:
    """The runs, one after another: ``sound`` of the scenario as it is, ``slow`` with the
    slower reap interval (a settings change), ``changed`` of each VARIANTS build, interleaved
    (a sound run, then one of each variant, ...) so the machine's load falls on all alike."""
    plan: list[tuple[Path, list[str], str]] = []
    for k in range(1, max(sound, slow, changed) + 1):
        if k <= sound:
            plan.append((out / f"sound-r{k}", [], ""))
        plan += [(out / f"{name}-r{k}", [], variant) for name, variant in VARIANTS.items()
                 if k <= changed]
        if k <= slow:
            plan.append((out / f"slow-r{k}", SLOW, ""))
    for k, (run_dir, extra, variant) in enumerate(plan):
        run_one(run_dir, extra, variant)
        print(f"run {k + 1}/{len(plan)}: {run_dir.name}", file=sys.stderr, flush=True)
    store = out / "store.sqlite"
    store.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "chaos", "store", "import", "--store", str(store),
                    *(str(run_dir) for run_dir, _, _ in plan)], cwd=ROOT,
                   stdout=subprocess.DEVNULL, check=True)
    return store


def windows(store_path: Path, baseline: int, candidates: int, settings: TrendSettings,
            draws: int = 300, seed: int = 45) -> dict[str, Any]:
    """Judge windows as `trend` judges a group's latest runs (judge_group: the same tests, the
    same bound), re-sampled: ``draws`` times, ``baseline`` sound runs drawn at random and
    ``candidates`` more sound runs (false alarms), or ``candidates`` runs of each changed build
    or of the slower settings (detection), each draw without replacement."""
    store = open_store(str(store_path))
    try:
        stored = store.runs()
        samples = store.samples([run.id for run in stored])
    finally:
        store.close()
    (group,) = group_runs(stored)
    prefixes = ["sound", *VARIANTS, "slow"]
    runs = {prefix: [p for p in group.points if p.run_id in _named(stored, prefix)]
            for prefix in prefixes}
    rng = random.Random(seed)

    def judged(base: list[Point], cand: list[Point]) -> dict[str, Any]:
        window = Group(group.scenario, None, [*base, *cand], [p.run_id for p in base],
                       [p.run_id for p in cand])
        judge_group(window, samples, settings)
        return {"baseline": window.baseline_ids, "candidates": window.candidate_ids,
                "alarm": bool(window.regressions),
                "figures": {c.figure: {"shift": c.shift_ms, "p_value": c.p_value,
                                       "threshold": c.threshold_ms, "worse": c.worse,
                                       "status": c.status} for c in window.comparisons}}

    result: dict[str, Any] = {"verdicts": group.verdicts, "baseline": baseline,
                              "candidates": candidates, "draws": draws,
                              "runs": {prefix: len(points) for prefix, points in runs.items()}}
    sound = runs["sound"]
    if len(sound) >= baseline + candidates:
        result["sound"] = [judged(*_split(rng.sample(sound, baseline + candidates), baseline))
                           for _ in range(draws)]
    for prefix in prefixes[1:]:
        if len(runs[prefix]) >= candidates and len(sound) >= baseline:
            result[prefix] = [judged(rng.sample(sound, baseline),
                                     rng.sample(runs[prefix], candidates))
                              for _ in range(draws)]
    return result


def _split(points: list[Point], at: int) -> tuple[list[Point], list[Point]]:
    return points[:at], points[at:]


def summary(result: dict[str, Any]) -> list[str]:
    """Per set of windows: how many alarmed, and per figure how many flagged it and how close
    it came (the largest shift towards the worse over its threshold)."""
    lines = [f"runs {result['runs']}; verdicts {result['verdicts']}; windows of "
             f"{result['baseline']} sound + {result['candidates']}, {result['draws']} draws each"]
    for prefix in ("sound", *VARIANTS, "slow"):
        drawn = result.get(prefix)
        if not drawn:
            continue
        what = "false alarms" if prefix == "sound" else "flagged"
        lines.append(f"{prefix}: {what} {sum(w['alarm'] for w in drawn)}/{len(drawn)}")
        for name in drawn[0]["figures"]:
            figures = [w["figures"][name] for w in drawn]
            flagged = sum(f["status"] == "regression" for f in figures)
            ratios = sorted(f["worse"] * f["shift"] / f["threshold"] for f in figures
                            if f["threshold"] > 0 and f["status"] in ("ok", "regression", "shown"))
            shifts = sorted(f["shift"] for f in figures)
            if not ratios:
                lines.append(f"  {name:<13} {figures[0]['status']}")
                continue
            lines.append(f"  {name:<13} flagged {flagged:>3}  shift {shifts[0]:+.1f} .. "
                         f"{shifts[-1]:+.1f}  shift/threshold max {ratios[-1]:.2f} median "
                         f"{ratios[len(ratios) // 2]:.2f}  p max "
                         f"{max(f['p_value'] for f in figures):.2g}")
    return lines


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
    parser.add_argument("--slow", type=int, default=0,
                        help="runs with the slower reap interval (a settings change)")
    parser.add_argument("--changed", type=int, default=9,
                        help="runs of each changed build (VARIANTS)")
    parser.add_argument("--baseline", type=int, default=6)
    parser.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--synthetic", action="store_true",
                        help="also print the synthetic table (offsets per run, NOISE_FACTORs)")
    args = parser.parse_args(argv)
    if args.synthetic:
        for row in synthetic(TrendSettings()):
            print(f"x{row['noise_factor']:<4} offsets {row['offsets']:<15} false alarms "
                  f"{row['false_alarms']}/{row['windows']}  +300 ms flagged "
                  f"{row['flagged_300ms']}/{row['shifted_windows']}")
    args.out.mkdir(parents=True, exist_ok=True)
    store = build_store(args.out, args.sound, args.slow, args.changed)
    result = windows(store, args.baseline, args.candidates,
                     TrendSettings(baseline=max(args.baseline, 2)), draws=args.draws)
    write_json_atomic(args.out / "calibration.json", result)
    print("\n".join(summary(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
