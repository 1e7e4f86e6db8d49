"""Scale: ``scenarios/scale-64x8.toml`` (64 workers x 8 slots, 200k jobs, a quarter of the workers
SIGKILLed at once) run with ``echomq-chaos run``, at one or more worker counts (the kill stays a
quarter of them). Reported from each run's report.json: the verdict, wall time against the
planned phases, completes/s against the load's target rate, and recovery (reap - fault) against
the bound. The machine's load average is recorded before and after, since the run is the load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import Row
from chaos.scenario.loading import load_scenario

SCENARIO = Path(__file__).parent / "scenarios" / "scale-64x8.toml"


def overrides(workers: int, extra: list[str]) -> list[str]:
    """The worker count, a quarter of them killed, then the caller's own --set overrides."""
    return [f"topology.workers={workers}", f"faults.0.target.random={max(1, workers // 4)}",
            *extra]


def run_once(settings: list[str], out: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out", str(out)]
    for setting in settings:
        argv += ["--set", setting]
    load_before = os.getloadavg()
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    wall_s = time.monotonic() - started
    report_path = out / "report.json"
    report = orjson.loads(report_path.read_bytes()) if report_path.exists() else {}
    return {"settings": settings, "exit_code": done.returncode,
            "wall_s": wall_s, "load_before": load_before, "load_after": os.getloadavg(),
            "report": report, "stderr_tail": done.stderr[-1500:]}


def rows_of(result: dict[str, Any], label: str, planned_s: float, rate: float) -> list[Row]:
    report = result["report"]
    if "invariants" not in report:
        return [Row("scale", f"{label}: run", None, "", note=f"no verdict (exit "
                    f"{result['exit_code']}): {report.get('error') or result['stderr_tail']}")]
    bound = report["invariants"]["recovery_bound"]
    jobs = report["jobs"]
    redeliveries = report["redeliveries"]
    verdict = f"verdict {report['verdict']} (exit {result['exit_code']})"
    failed = [name for name, item in report["invariants"].items() if not item["ok"]]
    if failed:
        verdict += f", failed: {', '.join(failed)}"
    return [
        Row("scale", f"{label}: jobs completed vs enqueued", jobs["completed"], "jobs",
            jobs["enqueued"], "jobs enqueued", target=(">=", 1.0),
            note=f"{verdict}; lost {jobs['lost']}, double {jobs['double_completed']}"),
        Row("scale", f"{label}: wall time vs planned phases", result["wall_s"], "s", planned_s,
            "warmup + chaos + heal", note=f"drain {report['run']['drain_ms']} ms, load avg "
            f"{result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f}"),
        Row("scale", f"{label}: completes/s vs the target rate", report["throughput_per_s"],
            "jobs/s", rate, "load.rate"),
        Row("scale", f"{label}: recovery p99 (reap - kill) vs bound", bound["p99_ms"], "ms",
            bound["bound_ms"], "lease + reap interval + tolerance", target=("<=", 1.0),
            note=f"{bound['stranded']} stranded, max {bound['max_ms']} ms; reclaim p99 "
                 f"{report['recovery']['reclaim']['p99_ms']} ms; redeliveries needed "
                 f"{redeliveries['needed']}, needless {redeliveries['needless']}"),
    ]


def measure(worker_counts: list[int], extra: list[str]) -> dict[str, Any]:
    """One run per worker count; ``extra``: --set overrides for every run (e.g. fewer jobs)."""
    rows: list[Row] = []
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for workers in worker_counts:
            settings = overrides(workers, extra)
            scenario = load_scenario(SCENARIO, settings)  # bad input fails here, before a run
            phases, topology = scenario.phases, scenario.topology
            planned_s = (phases.warmup_ms + phases.chaos_ms + phases.heal_ms) / 1000
            result = run_once(settings, Path(tmp) / f"scale-{workers}")
            result["workers"] = workers
            results.append(result)
            rows += rows_of(result, f"{topology.workers}x{topology.concurrency}", planned_s,
                            scenario.load.rate)
    for result in results:  # the reports are big (backlog samples): keep the figures only
        report = result["report"]
        result["report"] = {key: report[key] for key in
                            ("verdict", "jobs", "redeliveries", "recovery", "faults",
                             "throughput_per_s", "rejected", "events", "error") if key in report}
        result["report"]["run"] = {key: value for key, value in report.get("run", {}).items()
                                   if key in ("wall_ms", "drained", "drain_ms", "load")}
    return {"rows": rows, "raw": {"runs": results}}
