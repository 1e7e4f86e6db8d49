"""python -m benchmarks: how fast, how big, and what it costs; every figure a ratio against a
baseline measured in the same run (medians of several rounds), printed as a table and written to
bench.json.

Sections (docs/benchmarks.md says what each row means):
  queue    claim path vs redis-benchmark, cost of the events stream, history export
  fields   what each part of the claim event costs the server (benchmarks/event_fields.py)
  checker  a synthetic history (1M jobs in the full run): events/s checked, peak RSS
  startup  `echomq-chaos run` -> first claim with 8 workers vs a bare valkey-server start
  proxy    the built-in Toxiproxy server's overhead (benchmarks/proxy_overhead.py)
  recorder the MONITOR recorder: its decoders' speed offline (by effect vs the SHA1 fast path),
           its live ceiling and what it costs the server (benchmarks/recorder.py)
  locust   Locust's ceiling (benchmarks/locust_ceiling.py)
  store    what storing a run costs (--store) against judging it (benchmarks/store_cost.py)
  trend    `trend` over 10,000 stored runs vs reading them alone (benchmarks/trend_speed.py)
  scale    64 workers x 8 slots, 200k jobs, a quarter killed (only with --scale or
           --only scale: minutes)

Exit codes: 0 every target met, 1 a target missed, 2 bad usage, 3 a section could not run,
130 interrupted (bench.json is still written with what was measured).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import (
    checker_speed,
    event_fields,
    locust_ceiling,
    proxy_overhead,
    queue_path,
    recorder,
    scale,
    startup,
    store_cost,
    trend_speed,
)
from benchmarks.common import Row, redis_benchmark_path
from chaos.files import write_json_atomic
from chaos.scenario.loading import ScenarioError, load_scenario

SCHEMA = 1
SECTIONS = ("queue", "fields", "checker", "startup", "proxy", "recorder", "locust", "store",
            "trend", "scale")
EXIT_MET, EXIT_MISSED, EXIT_USAGE, EXIT_INFRA, EXIT_ABORTED = 0, 1, 2, 3, 130


@dataclass(frozen=True)
class Preset:
    queue: queue_path.Sizes
    checker_jobs: int
    checker_rounds: int
    startup_runs: int
    proxy: tuple[int, int, int]  # jobs, rounds, threads
    recorder: tuple[int, int, int, int]  # live: claims, rounds; offline decode: jobs, rounds
    fields: tuple[int, int]  # claims per run, rounds
    store_rounds: int = 5
    trend: tuple[int, int] = (10_000, 3)  # stored runs, rounds


PRESETS = {
    "full": Preset(queue_path.Sizes(claims=20_000, jobs=5_000, rounds=5, ceiling_claims=40_000),
                   1_000_000, 3, 5, (1000, 5, 4), (20_000, 3, 10_000, 9),
                   (30_000, 9)),
    "quick": Preset(queue_path.Sizes(claims=3_000, jobs=1_500, rounds=3, ceiling_claims=20_000),
                    50_000, 3, 3, (300, 3, 4), (5_000, 2, 3_000, 7),
                    (10_000, 3)),
    # the test suite's size: proves the harness end to end; its figures mean nothing
    "smoke": Preset(queue_path.Sizes(claims=200, jobs=100, rounds=1), 2_000, 1, 1, (50, 1, 2),
                    (200, 1, 50, 1), (200, 1), 1, (300, 1)),
}


def proxy_section(preset: Preset) -> dict[str, Any]:
    jobs, rounds, threads = preset.proxy
    summary = proxy_overhead.run(jobs, rounds, threads)
    direct, proxy = summary["modes"]["direct"], summary["modes"]["proxy"]
    rows = [
        Row("proxy", "claim+complete p50 via the built-in Toxiproxy (no toxic)",
            proxy["p50_ms"], "ms", direct["p50_ms"], "direct to Valkey",
            target=("<=", proxy_overhead.P50_TARGET)),
        Row("proxy", f"jobs/s via the proxy, {threads} threads", proxy["throughput_jobs_per_s"],
            "jobs/s", direct["throughput_jobs_per_s"], "direct to Valkey",
            target=(">=", proxy_overhead.THROUGHPUT_TARGET)),
    ]
    return {"rows": rows, "raw": summary}


def locust_section(mode: str) -> dict[str, Any]:
    """``benchmarks/locust_ceiling.py``; its ``rows`` are dicts with Row's fields."""
    if mode == "smoke":  # Locust's own tests cover it; its runs would outlast a smoke test
        return {"skipped": "not at smoke size"}
    result: dict[str, Any] = locust_ceiling.run(quick=mode != "full")
    if "skipped" in result:
        return {"skipped": str(result["skipped"])}
    rows = [Row(**{"section": "locust", **row}) for row in result["rows"]]
    return {"rows": rows, "raw": result}


def run_section(name: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        result = measure()
    except Exception as error:  # one broken section must not lose the others' figures
        traceback.print_exc()
        return {"error": f"{type(error).__name__}: {error}",
                "seconds": time.monotonic() - started}
    result["seconds"] = time.monotonic() - started
    return result


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def table(sections: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'figure':<60} {'value':>14} {'baseline':>10} {'ratio':>7} {'target':>7}  ok"]
    for name, section in sections.items():
        lines.append(f"== {name} ({section.get('seconds', 0):.0f} s)")
        if "skipped" in section or "error" in section:
            lines.append(f"   {'skipped' if 'skipped' in section else 'ERROR'}: "
                         f"{section.get('skipped') or section.get('error')}")
        for row in section.get("rows", []):
            target = f"{row.target[0]}{row.target[1]:g}" if row.target else ""
            met = {True: "yes", False: "NO", None: ""}[row.met]
            ratio = "-" if row.ratio is None else f"{row.ratio:.3g}"
            lines.append(f"{row.figure[:60]:<60} {fmt(row.value) + ' ' + row.unit:>14} "
                         f"{fmt(row.baseline):>10} {ratio:>7} {target:>7}  {met}")
            detail = "; ".join(part for part in (
                f"baseline: {row.baseline_name}" if row.baseline_name else "", row.note) if part)
            if detail:
                lines.append(f"     {detail}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true",
                       help="small sizes, about a minute (default: the full sizes)")
    sizes.add_argument("--smoke", action="store_true",
                       help="tiny sizes for the test suite: proves the harness, figures mean "
                            "nothing")
    parser.add_argument("--only", action="append", choices=SECTIONS, metavar="SECTION",
                        help=f"run only this section (repeatable): {', '.join(SECTIONS)}")
    parser.add_argument("--scale", action="store_true",
                        help="also run the scale scenario (minutes; not part of the default "
                             "or --quick runs)")
    parser.add_argument("--scale-workers", default="64", metavar="N[,N...]",
                        help="worker counts for the scale runs, e.g. 64,128 (default 64)")
    parser.add_argument("--scale-set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of benchmarks/scenarios/scale-64x8.toml for the "
                             "scale runs, e.g. load.max_jobs=20000 (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("bench.json"),
                        help="where to write the figures (default ./bench.json)")
    args = parser.parse_args(argv)
    try:
        args.scale_counts = [int(part) for part in args.scale_workers.split(",")]
        if not args.scale_counts or min(args.scale_counts) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--scale-workers {args.scale_workers!r}: expected positive integers "
                     "separated by commas, e.g. 64,128")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    if args.scale or (args.only and "scale" in args.only):
        try:  # bad overrides are bad usage, found before minutes of other sections
            for workers in args.scale_counts:
                load_scenario(scale.SCENARIO, scale.overrides(workers, args.scale_set))
        except ScenarioError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE
    preset = PRESETS[mode]
    chosen = args.only or [name for name in SECTIONS if name != "scale" or args.scale]
    measures: dict[str, Callable[[], dict[str, Any]]] = {
        "queue": lambda: queue_path.measure(preset.queue),
        "fields": lambda: event_fields.measure(*preset.fields),
        "checker": lambda: checker_speed.measure(preset.checker_jobs, preset.checker_rounds),
        "startup": lambda: startup.measure(preset.startup_runs),
        "proxy": lambda: proxy_section(preset),
        "recorder": lambda: recorder.measure(*preset.recorder),
        "locust": lambda: locust_section(mode),
        "store": lambda: store_cost.measure(preset.store_rounds),
        "trend": lambda: trend_speed.measure(*preset.trend),
        "scale": lambda: scale.measure(args.scale_counts, args.scale_set),
    }
    started = time.monotonic()
    bench: dict[str, Any] = {
        "schema": SCHEMA,
        "mode": mode,
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_average_start": list(os.getloadavg())},
        "redis_benchmark": redis_benchmark_path(),
        "sections": {},
    }
    sections: dict[str, dict[str, Any]] = {}
    aborted = False
    try:
        for name in SECTIONS:
            if name in chosen:
                sections[name] = run_section(name, measures[name])
    except KeyboardInterrupt:
        aborted = True
        print("interrupted: writing what was measured", file=sys.stderr)
    bench["machine"]["load_average_end"] = list(os.getloadavg())
    bench["duration_s"] = round(time.monotonic() - started, 1)
    bench["sections"] = {
        name: {**{k: v for k, v in section.items() if k != "rows"},
               **({"rows": [row.as_dict() for row in section["rows"]]}
                  if "rows" in section else {})}
        for name, section in sections.items()}
    write_json_atomic(args.out, bench)
    print(table(sections))
    load = bench["machine"]
    print(f"{mode} run, {bench['duration_s']} s on {load['cpus']} cpus, load average "
          f"{load['load_average_start'][0]:.2f} -> {load['load_average_end'][0]:.2f}; "
          f"figures in {args.out}")
    if aborted:
        return EXIT_ABORTED
    if any("error" in section for section in sections.values()):
        return EXIT_INFRA
    missed = [row for section in sections.values() for row in section.get("rows", [])
              if row.met is False]
    return EXIT_MISSED if missed else EXIT_MET


if __name__ == "__main__":
    raise SystemExit(main())
