"""What the built-in Toxiproxy-compatible server costs a queue client when no toxic is on.

Starts a valkey-server and ``python -m chaos.network.server`` (its own process, as a run starts it),
makes one proxy to Valkey, and measures the queue protocol
(``chaos.protocol.client.QueueClient``) two
ways, direct to Valkey and through the proxy, in alternating rounds so machine noise hits both:

* latency: ``--jobs`` jobs enqueued for each mode, then claim + complete timed one job at a
  time, alternating direct and proxy job by job (p50, p99 over all rounds);
* throughput: ``--jobs`` jobs enqueued, then ``--threads`` threads claim + complete until the
  queue is empty (jobs per second; the median over rounds, modes alternating which goes first).

Targets (issue 20; a proxy must not be what a chaos run measures): proxy p50 at most
P50_TARGET x direct, proxy throughput at least THROUGHPUT_TARGET of direct.

    .venv/bin/python -m benchmarks.proxy_overhead [--jobs 1000] [--rounds 5] [--threads 4]
                                                  [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import address, fill, median, valkey_server
from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.tools.capacity import percentile

LEASE_MS = 60_000
MODES = ("direct", "proxy")
P50_TARGET, THROUGHPUT_TARGET = 1.5, 0.9  # proxy vs direct (benchmarks/__main__.py uses them)


@dataclass
class ModeResults:
    samples_s: list[float] = field(default_factory=list)  # claim + complete round trips
    throughputs: list[float] = field(default_factory=list)  # jobs/s, one per round


def start_proxy_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "chaos.network.server", "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline().strip()
    prefix = "toxiproxy-compatible server listening on "
    if not line.startswith(prefix):
        process.kill()
        raise SystemExit(f"the proxy server did not start: {line!r}")
    return process, "http://" + line[len(prefix):]


def create_proxy(api_url: str, upstream: str) -> str:
    body = json.dumps({"name": "valkey", "listen": "127.0.0.1:0", "upstream": upstream}).encode()
    request = urllib.request.Request(f"{api_url}/proxies", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(json.loads(response.read())["listen"])


def measure_latency(urls: dict[str, str], password: str, keys: dict[str, QueueKeys],
                    jobs: int) -> dict[str, list[float]]:
    """Claim + complete, one job at a time, alternating direct and proxy job by job so that any
    noise on the machine lands on both modes alike."""
    queues = {mode: QueueClient(connect(urls[mode], password), keys[mode]) for mode in MODES}
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    clock = time.perf_counter
    for number in range(jobs):
        for mode in (MODES if number % 2 == 0 else MODES[::-1]):
            queue = queues[mode]
            started = clock()
            job = queue.claim(LEASE_MS, "bench")
            assert job is not None
            assert queue.complete(job.job_id, job.attempt, "bench")
            samples[mode].append(clock() - started)
    for queue in queues.values():
        queue.client.close()
    return samples


def measure_throughput(url: str, password: str, keys: QueueKeys, jobs: int,
                       threads: int) -> float:
    queues = [QueueClient(connect(url, password), keys) for _ in range(threads)]
    done = [0] * threads
    start = threading.Barrier(threads + 1)

    def work(index: int) -> None:
        queue = queues[index]
        start.wait()
        while (job := queue.claim(LEASE_MS, f"bench{index}")) is not None:
            queue.complete(job.job_id, job.attempt, f"bench{index}")
            done[index] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    for queue in queues:
        queue.client.close()
    assert sum(done) == jobs, (sum(done), jobs)
    return jobs / elapsed


def run(jobs: int, rounds: int, threads: int) -> dict[str, Any]:
    with valkey_server("proxy") as valkey:
        proxy_process, api_url = start_proxy_server()
        try:
            host, port = address(valkey)
            listen = create_proxy(api_url, f"{host}:{port}")
            urls = {"direct": valkey.url, "proxy": f"valkey://{listen}/0"}
            results = {mode: ModeResults() for mode in MODES}
            for round_number in range(rounds):
                keys = {mode: QueueKeys("bench:", f"{mode}-{round_number}-latency")
                        for mode in MODES}
                for mode in MODES:
                    fill(urls[mode], valkey.password, keys[mode], jobs)
                for mode, samples in measure_latency(urls, valkey.password, keys,
                                                     jobs).items():
                    results[mode].samples_s += samples
                # Alternate which mode goes first, so drift in the machine favours neither.
                for mode in (MODES if round_number % 2 == 0 else MODES[::-1]):
                    url = urls[mode]
                    throughput_keys = QueueKeys("bench:", f"{mode}-{round_number}-throughput")
                    fill(url, valkey.password, throughput_keys, jobs)
                    results[mode].throughputs.append(
                        measure_throughput(url, valkey.password, throughput_keys, jobs, threads))
        finally:
            proxy_process.terminate()
            proxy_process.wait(timeout=10)
    summary: dict[str, Any] = {"jobs": jobs, "rounds": rounds, "threads": threads, "modes": {}}
    for mode, result in results.items():
        summary["modes"][mode] = {
            "p50_ms": percentile(result.samples_s, 0.50) * 1000,
            "p99_ms": percentile(result.samples_s, 0.99) * 1000,
            "throughput_jobs_per_s": median(result.throughputs),
            "throughput_per_round": result.throughputs,
        }
    direct, proxy = summary["modes"]["direct"], summary["modes"]["proxy"]
    summary["ratios"] = {
        "p50": proxy["p50_ms"] / direct["p50_ms"],
        "p99": proxy["p99_ms"] / direct["p99_ms"],
        "throughput": proxy["throughput_jobs_per_s"] / direct["throughput_jobs_per_s"],
    }
    summary["targets_met"] = (summary["ratios"]["p50"] <= P50_TARGET
                              and summary["ratios"]["throughput"] >= THROUGHPUT_TARGET)
    return summary


def print_table(summary: dict[str, Any]) -> None:
    print(f"claim+complete, {summary['jobs']} jobs x {summary['rounds']} rounds, "
          f"throughput with {summary['threads']} threads")
    print(f"{'mode':<8} {'p50 ms':>8} {'p99 ms':>8} {'jobs/s':>9}")
    for mode, figures in summary["modes"].items():
        print(f"{mode:<8} {figures['p50_ms']:>8.3f} {figures['p99_ms']:>8.3f} "
              f"{figures['throughput_jobs_per_s']:>9.0f}")
    ratios = summary["ratios"]
    print(f"proxy/direct: p50 {ratios['p50']:.2f}x (target <= {P50_TARGET:g}), "
          f"p99 {ratios['p99']:.2f}x, "
          f"throughput {ratios['throughput']:.0%} (target >= {THROUGHPUT_TARGET:.0%}) -> "
          f"{'targets met' if summary['targets_met'] else 'TARGETS MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per mode")
    parser.add_argument("--threads", type=int, default=4, help="threads for throughput")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    summary = run(args.jobs, args.rounds, args.threads)
    print_table(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if summary["targets_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
