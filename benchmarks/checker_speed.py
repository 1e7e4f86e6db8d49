"""Checker speed: ``echomq-chaos check``'s path (stream history.jsonl, check) on a synthetic
history of N jobs with faults and redeliveries, timed in a fresh subprocess that also reports its
peak RSS. Baselines from the same run: the same subprocess only parsing the file's JSON lines
(the floor any reader pays), and the issue's budget (1M jobs in 10 s, under 1 GiB) scaled to N.
And the memory of evaluating a whole run directory of that size (``chaos.run.evaluate``: the
check, the acknowledgement ledger compared with the history, report.json's contents), what the
runner and ``echomq-chaos check RUN_DIR`` do, against a fixed budget: it must not grow with
the run's length the way a ledger held whole did.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import Row, median
from benchmarks.synthetic_history import write_synthetic_history

BUDGET_S_PER_MILLION_JOBS = 10.0
BUDGET_RSS_MB = 1024.0
EVALUATE_BUDGET_RSS_MB = 400.0  # a run directory of 1M jobs (the soak's: 721k) evaluated

# Run in a fresh interpreter: peak RSS is then the check's alone.
_CHECK = """
import json, resource, sys, time
import orjson
from chaos.check.checker import check
from chaos.history.events import replay_history
started = time.perf_counter()  # the imports are the interpreter's start, not the check
cpu_started = resource.getrusage(resource.RUSAGE_SELF)
if sys.argv[2] == "check":
    verdict = replay_history(sys.argv[1], lambda events: check(events, final=None))
    result = {"events": verdict.events, "passed": verdict.passed, "final": verdict.final,
              "jobs": verdict.jobs.completed, "stranded": verdict.stranded,
              "needed": verdict.redeliveries.needed, "rejected": verdict.rejected}
elif sys.argv[2] == "evaluate":
    from pathlib import Path
    from chaos.run.evaluate import evaluate
    evaluation = evaluate(Path(sys.argv[1]).parent)
    report = orjson.dumps(evaluation.report())
    verdict = evaluation.verdict
    result = {"events": verdict.events, "word": evaluation.word, "jobs": verdict.jobs.completed,
              "acknowledged": sum(evaluation.ack_ledger["acknowledged"].values()),
              "acks_lost": evaluation.ack_ledger["lost"], "report_bytes": len(report)}
elif sys.argv[2] == "read":
    from chaos.history.events import iter_history
    result = {"events": sum(1 for event in iter_history(sys.argv[1]))}
else:
    with open(sys.argv[1], "rb") as handle:
        result = {"events": sum(1 for line in handle if orjson.loads(line))}
result["seconds"] = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
result["cpu_seconds"] = (usage.ru_utime + usage.ru_stime
                         - cpu_started.ru_utime - cpu_started.ru_stime)
result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def timed(path: Path, mode: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHECK, str(path), mode], capture_output=True,
                          text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"checker subprocess failed: {done.stderr[-800:]}")
    return dict(json.loads(done.stdout))


def measure(jobs: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-checker-") as tmp:
        path = Path(tmp) / "history.jsonl"
        # a fault every 5,000 jobs, alternately a kill and a pause longer than the lease
        history = write_synthetic_history(path, jobs, fault_every=max(500, jobs // 200),
                                          acks=Path(tmp) / "acks")
        checks, reads, parses = [], [], []
        for _ in range(rounds):
            parses.append(timed(path, "parse"))
            reads.append(timed(path, "read"))
            checks.append(timed(path, "check"))
        evaluated = timed(path, "evaluate")  # once: it is the check plus the ledger's pass
        size_mb = path.stat().st_size / 2**20
        acks_mb = sum(f.stat().st_size for f in (Path(tmp) / "acks").iterdir()) / 2**20
    last = checks[-1]
    if not (last["passed"] and last["final"] and last["jobs"] == jobs
            and last["stranded"] == history.stranded):
        raise RuntimeError(f"the checker's verdict on the synthetic history is wrong: {last}")
    if not (evaluated["word"] == "pass" and evaluated["jobs"] == jobs
            and evaluated["acks_lost"] == 0 and evaluated["acknowledged"] > 2 * jobs):
        raise RuntimeError(f"the run directory's evaluation is wrong: {evaluated}")
    seconds = median([c["seconds"] for c in checks])
    cpu = {name: median([r["cpu_seconds"] for r in runs]) for name, runs in
           (("parse", parses), ("read", reads), ("check", checks))}
    split = (f"CPU {cpu['check']:.1f} s of {seconds:.1f} s wall: JSON {cpu['parse']:.1f} s, "
             f"validating + building events {cpu['read'] - cpu['parse']:.1f} s, rules "
             f"{cpu['check'] - cpu['read']:.1f} s")
    events_per_s = history.events / seconds
    parse_rate = history.events / median([p["seconds"] for p in parses])
    budget_s = BUDGET_S_PER_MILLION_JOBS * jobs / 1_000_000
    rss = max(c["max_rss_mb"] for c in checks)
    scale = f"{jobs:,} jobs, {history.events:,} events, {history.faults} faults, " \
            f"{history.stranded} redeliveries"
    rows = [
        Row("checker", "events/s checked vs events/s only JSON-parsed", events_per_s,
            "events/s", parse_rate, "the same file, orjson.loads per line only",
            target=(">=", 0.5), note=scale),
        Row("checker", f"seconds to check {jobs:,} jobs vs the budget", seconds, "s", budget_s,
            f"budget: {BUDGET_S_PER_MILLION_JOBS:g} s per 1M jobs", target=("<=", 1.0),
            note=split),
        Row("checker", f"CPU seconds to check {jobs:,} jobs vs the budget", cpu["check"], "s",
            budget_s, f"budget: {BUDGET_S_PER_MILLION_JOBS:g} s per 1M jobs",
            target=("<=", 1.0),
            note="what the wall time would be with a core to itself (a shared machine's load "
                 "stretches the wall time, not this)"),
        Row("checker", "peak RSS vs 1 GiB", rss, "MB", BUDGET_RSS_MB, "1 GiB",
            target=("<=", 1.0), note=f"history file {size_mb:.0f} MB"),
        Row("checker", f"peak RSS evaluating a run directory of {jobs:,} jobs",
            evaluated["max_rss_mb"], "MB", EVALUATE_BUDGET_RSS_MB,
            f"{EVALUATE_BUDGET_RSS_MB:g} MB", target=("<=", 1.0),
            note=f"history {size_mb:.0f} MB + ack ledger {acks_mb:.0f} MB "
                 f"({evaluated['acknowledged']:,} acks), verdict + ledger + report.json, "
                 f"{evaluated['seconds']:.1f} s"),
    ]
    return {"rows": rows, "raw": {"jobs": jobs, "history": vars(history), "checks": checks,
                                  "reads": reads, "parses": parses, "evaluated": evaluated}}
