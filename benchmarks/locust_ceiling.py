"""Is the load generator ever the bottleneck? Locust's jobs/s against the scripts' own ceiling.

In one run, against one valkey-server (its own, listening on a 0700 unix socket only, so
redis-benchmark needs no password on its command line):

1. ceiling: ``redis-benchmark`` calling ``EVALSHA <enqueue sha>`` (random job ids) and
   ``EVALSHA <claim sha>`` (on a queue filled with exactly as many jobs as calls), 50 clients,
   at its default (one request at a time per client) and with 16 pipelined per client: what
   the server does with the scripts alone;
2. the Locust path (``loadtests/queue.py``, its own CLI, headless): producers unpaced
   (``--producer-rate 0``) for enqueue jobs/s, and consumers with no simulated work on a full
   queue for claim + complete jobs/s, each at a few settings (batch, processes); the best counts.

Reported: the ceilings, each Locust figure, and the ratios Locust/ceiling for enqueue and for
claim + complete (against the default ceiling, and against the pipelined one). Target (issue 4):
enqueue ratio >= 0.5, so the tool is not the bottleneck it claims to measure. Debian's
``redis-tools`` has redis-benchmark (``apt-get install -y redis-tools``); without it the
benchmark says so and measures nothing.

    .venv/bin/python -m benchmarks.locust_ceiling [--quick] [--json out.json]
    .venv/bin/python -m benchmarks --only locust       # the same, in the shared table
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Row,
    fill,
    redis_benchmark,
    redis_benchmark_missing,
    valkey_server,
)
from chaos.load.sources import locustfile
from chaos.protocol.client import QueueKeys, connect, load_script_source
from chaos.runtime.valkey import ValkeyServer

TARGET_ENQUEUE_RATIO = 0.5
BENCH_CLIENTS = 50
BENCH_PIPELINES = (1, 16)  # redis-benchmark's default, and pipelined
LEASE_MS = 600_000
CONSUMERS_PER_PRODUCER = 4


def locust_rate(server: ValkeyServer, out: Path, name: str, seconds: int, users: int,
                processes: int, operation: str, *queue_args: str) -> float:
    """Jobs/s of ``operation`` in one headless Locust run (Locust's final JSON statistics)."""
    argv = [sys.executable, "-m", "locust", "-f", str(locustfile()), "--headless",
            "--host", server.url, "-u", str(users), "-r", str(users), "-t", f"{seconds}s",
            "--stop-timeout", "2", "--only-summary", "--json-file", str(out / name),
            *queue_args]
    if processes > 1:
        argv += ["--processes", str(processes)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120,
                            check=False)
    stats = out / f"{name}.json"
    if not stats.exists():
        raise SystemExit(f"locust ({name}) wrote no statistics; it said:\n{result.stderr[-3000:]}")
    entries = json.loads(stats.read_text())
    entry = next(e for e in entries if e["name"] == operation)
    span = entry["last_request_timestamp"] - entry["start_time"]
    done = entry["num_requests"] - entry["num_failures"]
    return round(done / span, 1) if span > 0 else 0.0


def run(quick: bool) -> dict[str, Any]:
    """Measure; the figures, with ``rows`` for ``python -m benchmarks`` (``{"skipped": reason}``
    without redis-benchmark)."""
    if reason := redis_benchmark_missing():
        print(f"locust_ceiling: skipped, {reason}", file=sys.stderr)
        return {"skipped": reason}
    seconds = 2 if quick else 8
    bench_requests = 10_000 if quick else 100_000
    settings = ([(8, 100, 2)] if quick else
                [(4, 1, 1), (4, 50, 1), (4, 1, 2), (8, 100, 2)])  # users, batch, processes
    with valkey_server("locust", socket_only=True) as server:
        root = server.data_dir.parent
        client = connect(server.url)
        enqueue_sha = client.script_load(load_script_source("enqueue"))
        claim_sha = client.script_load(load_script_source("claim"))
        ceilings: dict[int, dict[str, float]] = {}
        claimed: dict[int, int] = {}
        for pipeline in BENCH_PIPELINES:
            rb = QueueKeys("rb:", f"enqueue{pipeline}")
            enqueue_ceiling = redis_benchmark(server, [
                "EVALSHA", enqueue_sha, "2", rb.pending, rb.events, rb.job_prefix,
                "j__rand_int__", "x"], bench_requests, BENCH_CLIENTS, pipeline, 1_000_000_000)
            rc = QueueKeys("rb:", f"claim{pipeline}")
            fill(server.url, server.password, rc, bench_requests)
            claim_ceiling = redis_benchmark(server, [
                "EVALSHA", claim_sha, "3", rc.pending, rc.active, rc.events, rc.job_prefix,
                str(LEASE_MS), "bench"], bench_requests, BENCH_CLIENTS, pipeline)
            claimed[pipeline] = int(client.zcard(rc.active))
            ceilings[pipeline] = {"enqueue": enqueue_ceiling, "claim": claim_ceiling}
            client.flushall()
        ceiling_claim = max(c["claim"] for c in ceilings.values())
        runs: list[dict[str, Any]] = []
        for index, (users, batch, processes) in enumerate(settings):
            enqueue = locust_rate(
                server, root, f"enqueue{index}", seconds, users, processes, "enqueue",
                "--queue-name", f"le{index}", "--producers", str(users),
                "--producer-rate", "0", "--batch", str(batch), "ProducerUser")
            # Enough jobs that the consumers never find the queue empty.
            keys = QueueKeys("emq:", f"lc{index}")
            fill(server.url, server.password, keys, int(max(2_000, ceiling_claim * seconds)))
            # A consumer has one call in flight at a time: more of them, to fill the pipe.
            consumers = users * CONSUMERS_PER_PRODUCER
            complete = locust_rate(
                server, root, f"consume{index}", seconds, consumers, processes, "complete",
                "--queue-name", f"lc{index}", "--consumers", str(consumers),
                "--lease-ms", str(LEASE_MS), "--work-min-ms", "0", "--work-max-ms", "0",
                "ConsumerUser")
            client.flushall()
            runs.append({"producers": users, "consumers": consumers, "batch": batch,
                         "processes": processes,
                         "enqueue_jobs_s": enqueue, "claim_complete_jobs_s": complete})
        client.close()
    best_enqueue = max(runs, key=lambda r: r["enqueue_jobs_s"])
    best_complete = max(runs, key=lambda r: r["claim_complete_jobs_s"])
    default, piped = (ceilings[p] for p in BENCH_PIPELINES)
    enqueue_ratio = round(best_enqueue["enqueue_jobs_s"] / default["enqueue"], 3)

    def setting(run: dict[str, Any], users: str) -> str:
        return (f"{run[users]} {users}, batch {run['batch']}, {run['processes']} process(es)"
                if users == "producers" else
                f"{run[users]} {users}, {run['processes']} process(es)")

    rows = [
        Row("locust", "Locust enqueue jobs/s (best setting)", best_enqueue["enqueue_jobs_s"],
            "jobs/s", default["enqueue"], f"redis-benchmark EVALSHA enqueue, {BENCH_CLIENTS} "
            "clients", target=(">=", TARGET_ENQUEUE_RATIO),
            note=setting(best_enqueue, "producers")),
        Row("locust", "Locust enqueue jobs/s vs pipelined ceiling",
            best_enqueue["enqueue_jobs_s"], "jobs/s", piped["enqueue"],
            f"redis-benchmark EVALSHA enqueue, -P {BENCH_PIPELINES[-1]}"),
        Row("locust", "Locust claim+complete jobs/s (best setting)",
            best_complete["claim_complete_jobs_s"], "jobs/s", default["claim"],
            f"redis-benchmark EVALSHA claim, {BENCH_CLIENTS} clients",
            note=setting(best_complete, "consumers")),
        Row("locust", "Locust claim+complete jobs/s vs pipelined ceiling",
            best_complete["claim_complete_jobs_s"], "jobs/s", piped["claim"],
            f"redis-benchmark EVALSHA claim, -P {BENCH_PIPELINES[-1]}"),
    ]
    return {
        "rows": [{k: v for k, v in vars(row).items() if k != "section"} for row in rows],
        "redis_benchmark": {
            "clients": BENCH_CLIENTS, "requests": bench_requests,
            **{f"pipeline_{p}": {"enqueue_calls_s": ceilings[p]["enqueue"],
                                 "claim_calls_s": ceilings[p]["claim"],
                                 "claims_that_got_a_job": claimed[p]}
               for p in BENCH_PIPELINES}},
        "locust": {"seconds": seconds, "runs": runs},
        "ratios": {"enqueue": enqueue_ratio,
                   "claim_complete": round(best_complete["claim_complete_jobs_s"]
                                           / default["claim"], 3),
                   "enqueue_vs_pipelined": round(best_enqueue["enqueue_jobs_s"]
                                                 / piped["enqueue"], 3),
                   "claim_complete_vs_pipelined": round(best_complete["claim_complete_jobs_s"]
                                                        / piped["claim"], 3)},
        "target": {"enqueue_ratio_at_least": TARGET_ENQUEUE_RATIO,
                   "met": enqueue_ratio >= TARGET_ENQUEUE_RATIO},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, one Locust setting")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures = run(args.quick)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
