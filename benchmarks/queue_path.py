"""The queue path: claims/s and jobs/s against the server's own ceiling, what the events stream
costs, and whether the history exporter keeps up. All on one throwaway valkey-server.

How the reference worker claims (``chaos.reference.worker``): its claimer sends one
``claim_many`` for every free slot (``concurrency`` of them, 4 by default) and hands the jobs to
its slot threads, one script call per round trip, no pipelining. The baselines are
``redis-benchmark`` (C, on the same server) sending the same EVALSHA calls:

* claim path: Python claims/s (``QueueClient.claim_many(slots)`` from one thread, what the
  claimer sends while all its slots are free) vs redis-benchmark sending that call from one
  connection (what the Python client costs), vs redis-benchmark's best with the one-job claim
  script (many connections, pipelined: the server's ceiling), and vs ``slots`` threads claiming
  one job per call (how the slots claim under client-clock and nonatomic-claim);
* full job: enqueue -> claim -> complete jobs/s (a producer thread enqueuing one job per round
  trip, as ``chaos.load.sources`` does, and a real ``python -m chaos.reference.worker``
  process with a 0 ms handler)
  vs redis-benchmark running the same three scripts (1 / the sum of their per-call times);
* evidence: the same full-job workload with the events stream on (and the exporter copying it to
  a file, as in a run) vs off (the benchmarks-only protocol flag); rounds interleaved;
* export: events/s the exporter wrote during the events-on rounds vs events/s the run produced,
  the largest lag seen, and the exporter's own capacity (draining the finished stream).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.utils import HIREDIS_AVAILABLE

from benchmarks.common import (
    Row,
    fill,
    median,
    redis_benchmark,
    redis_benchmark_missing,
    valkey_server,
)
from chaos.history.events import EXPORT_POLL_S, HistoryExporter
from chaos.protocol.client import QueueClient, QueueKeys, connect, load_script_source
from chaos.runtime.valkey import ValkeyServer
from chaos.scenario.model import Topology

LEASE_MS = 60_000  # no lease lapses during a measurement: no reaps, no extends
SLOTS = Topology().concurrency  # slots per worker a scenario gets by default
CEILING_CLIENTS, CEILING_PIPELINE = 32, 32


@dataclass(frozen=True)
class Sizes:
    claims: int  # jobs claimed per Python / redis-benchmark measurement
    jobs: int  # jobs per full-job round
    rounds: int
    ceiling_claims: int = 0  # claims per server-ceiling run (redis-benchmark); 0: ``claims``


@dataclass
class ClientClaims:
    per_s: float
    cpu_us_per_claim: float  # this process's CPU (all threads) per claim: the client's cost


def python_claims_per_s(server: ValkeyServer, keys: QueueKeys, claims: int,
                        slots: int) -> ClientClaims:
    """``slots`` threads sharing one client, each claiming one job per call (the slots of a
    protocol whose claim cannot batch)."""
    queue = QueueClient(connect(server.url, server.password), keys)
    done = [0] * slots
    barrier = threading.Barrier(slots + 1)

    def slot(index: int) -> None:
        barrier.wait()
        while queue.claim(LEASE_MS, f"bench-{index}") is not None:
            done[index] += 1

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(slots)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started, cpu_started = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    queue.client.close()
    if sum(done) != claims:
        raise RuntimeError(f"claimed {sum(done)} of {claims} jobs")
    return ClientClaims(claims / elapsed, cpu / claims * 1e6)


def claimer_claims_per_s(server: ValkeyServer, keys: QueueKeys, claims: int,
                         slots: int) -> ClientClaims:
    """The worker's claimer with ``slots`` free slots: one ``claim_many(slots)`` per call."""
    queue = QueueClient(connect(server.url, server.password), keys)
    done = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    while batch := queue.claim_many(slots, LEASE_MS, "bench"):
        done += len(batch)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    queue.client.close()
    if done != claims:
        raise RuntimeError(f"claimed {done} of {claims} jobs")
    return ClientClaims(claims / elapsed, cpu / claims * 1e6)


def claim_many_command(server: ValkeyServer, keys: QueueKeys, count: int) -> list[str]:
    client = connect(server.url, server.password)
    sha = str(client.script_load(load_script_source("claim_many")))
    client.close()
    return ["EVALSHA", sha, "3", keys.pending, keys.active, keys.events, keys.job_prefix,
            str(LEASE_MS), "bench", str(count)]


def claim_command(server: ValkeyServer, keys: QueueKeys, record_events: bool = True) -> list[str]:
    client = connect(server.url, server.password)
    sha = str(client.script_load(load_script_source("claim")))
    client.close()
    return ["EVALSHA", sha, "3", keys.pending, keys.active, keys.events, keys.job_prefix,
            str(LEASE_MS), "bench", *([] if record_events else ["0"])]


def script_commands(server: ValkeyServer, keys: QueueKeys) -> dict[str, list[str]]:
    """The full job's three scripts as redis-benchmark commands: enqueue of random fresh ids,
    claim of the prefilled queue, complete of a job that is not held (the rejected path: the
    same lookups and one event, like an accepted complete)."""
    client = connect(server.url, server.password)
    sha = {name: str(client.script_load(load_script_source(name)))
           for name in ("enqueue", "complete")}
    client.close()
    return {
        "enqueue": ["EVALSHA", sha["enqueue"], "2", keys.pending, keys.events, keys.job_prefix,
                    "rb-__rand_int__", "x" * 16],
        "claim": claim_command(server, keys),
        "complete": ["EVALSHA", sha["complete"], "2", keys.active, keys.events,
                     keys.job_prefix, "not-held", "1", "bench"],
    }


@dataclass
class FullJobRound:
    jobs_per_s: float
    events: int  # events the round wrote to the stream
    produced_per_s: float  # events per second of the round
    exported_during: int  # events the exporter had written when the round's last job completed
    exported_per_s: float  # exported_during over the round's time
    max_lag: int  # the most events the exporter was behind the stream at any sample
    catch_up_s: float  # after the last job: until the exporter had written every event


def start_worker(server: ValkeyServer, keys: QueueKeys, slots: int, record_events: bool,
                 log: Path) -> subprocess.Popen[bytes]:
    name = f"bench-worker-{keys.queue}"  # a new name each round: the last one may still be listed
    argv = [sys.executable, "-m", "chaos.reference.worker", "--url", server.url, "--name", name,
            "--prefix", keys.prefix, "--queue", keys.queue, "--lease-ms", str(LEASE_MS),
            "--concurrency", str(slots),
            "--handler", json.dumps({"distribution": "fixed", "fixed_ms": 0})]
    if not record_events:
        argv.append("--no-events")
    env = {**os.environ, "ECHOMQ_VALKEY_PASSWORD": server.password}
    with open(log, "ab") as handle:
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    client = connect(server.url, server.password)
    deadline = time.monotonic() + 30
    try:
        while not any(c.get("name") == name for c in client.client_list()):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the benchmark worker did not start: {log.read_text()[-800:]}")
            time.sleep(0.02)
    finally:
        client.close()
    return process


def full_job_round(server: ValkeyServer, keys: QueueKeys, jobs: int, slots: int,
                   record_events: bool, work_dir: Path) -> FullJobRound:
    """Enqueue ``jobs`` (one per round trip) while a real worker process claims and completes
    them; timed from the first enqueue until both sorted sets are empty again."""
    worker = start_worker(server, keys, slots, record_events, work_dir / "worker.log")
    monitor = QueueClient(connect(server.url, server.password), keys)
    exporter = None
    if record_events:
        exporter = HistoryExporter(connect(server.url, server.password), keys.events,
                                   work_dir / f"history-{keys.queue}.jsonl")
        exporter.start()
    producer_queue = QueueClient(connect(server.url, server.password), keys,
                                 record_events=record_events)
    payload = "x" * 16

    def produce() -> None:
        for number in range(jobs):
            producer_queue.enqueue(f"job-{number:07d}", payload)

    producer = threading.Thread(target=produce)
    max_lag = 0
    try:
        started = time.perf_counter()
        producer.start()
        next_sample = started
        while True:
            time.sleep(0.005)
            if not producer.is_alive() and monitor.backlog() == (0, 0):
                break
            if exporter is not None and time.perf_counter() >= next_sample:
                next_sample += 0.05
                max_lag = max(max_lag, int(monitor.client.xlen(keys.events)) - exporter.exported)
        finished = time.perf_counter()
        exported_during = exporter.exported if exporter else 0
        events = int(monitor.client.xlen(keys.events))
        catch_up_s = 0.0
        if exporter is not None:
            while exporter.exported < events:
                time.sleep(0.005)
                if time.perf_counter() - finished > 60:
                    raise RuntimeError("the history exporter did not catch up within 60 s")
            catch_up_s = time.perf_counter() - finished
            max_lag = max(max_lag, events - exported_during)
    finally:
        producer.join()
        # Measured already; a graceful stop would wait out the heartbeat's sleep (lease / 3).
        worker.kill()
        worker.wait()
        if exporter is not None:
            exporter.close()
        for queue in (monitor, producer_queue):
            queue.client.close()
    elapsed = finished - started
    return FullJobRound(jobs / elapsed, events, events / elapsed, exported_during,
                        exported_during / elapsed, max_lag, catch_up_s)


def exporter_capacity(server: ValkeyServer, stream: str, path: Path) -> float:
    """Events/s the exporter writes when the stream is already full (its own ceiling)."""
    client = connect(server.url, server.password)
    exporter = HistoryExporter(client, stream, path)
    started = time.perf_counter()
    exporter.drain()
    elapsed = time.perf_counter() - started
    exported = exporter.exported
    exporter.close()
    client.close()
    return exported / elapsed


def measure(sizes: Sizes) -> dict[str, Any]:
    """The claim path, evidence and export sections: their rows and raw figures."""
    rows: list[Row] = []
    raw: dict[str, Any] = {"slots": SLOTS, "sizes": vars(sizes)}
    skipped = redis_benchmark_missing("the server-side baselines (each ratio to "
                                      "redis-benchmark)")
    have_benchmark = skipped is None
    with valkey_server("queue") as server, \
            tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        work_dir = Path(tmp)
        admin = connect(server.url, server.password)
        counter = iter(range(1_000_000))

        def fresh_keys(label: str) -> QueueKeys:
            admin.flushdb()  # each measurement on an empty server
            return QueueKeys("bench:", f"{label}-{next(counter)}")

        claimer: list[ClientClaims] = []
        per_slot: list[ClientClaims] = []
        same_calls: list[float] = []
        ceiling: list[float] = []
        ceiling_off: list[float] = []
        ceiling_claims = sizes.ceiling_claims or sizes.claims
        per_script: dict[str, list[float]] = {"enqueue": [], "claim": [], "complete": []}
        for _ in range(sizes.rounds):
            keys = fresh_keys("claimer")
            fill(server.url, server.password, keys, sizes.claims)
            claimer.append(claimer_claims_per_s(server, keys, sizes.claims, SLOTS))
            keys = fresh_keys("per-slot")
            fill(server.url, server.password, keys, sizes.claims)
            per_slot.append(python_claims_per_s(server, keys, sizes.claims, SLOTS))
            if not have_benchmark:
                continue
            keys = fresh_keys("rb")
            fill(server.url, server.password, keys, sizes.claims)
            # requests are calls: each claims SLOTS jobs
            same_calls.append(SLOTS * redis_benchmark(
                server, claim_many_command(server, keys, SLOTS), sizes.claims // SLOTS, 1, 1))
            # events on and off side by side, in an order alternating round by round
            for record in (True, False) if len(ceiling) % 2 == 0 else (False, True):
                keys = fresh_keys("rb-ceiling" if record else "rb-ceiling-off")
                fill(server.url, server.password, keys, ceiling_claims)
                (ceiling if record else ceiling_off).append(redis_benchmark(
                    server, claim_command(server, keys, record), ceiling_claims,
                    CEILING_CLIENTS, CEILING_PIPELINE))
            keys = fresh_keys("rb-scripts")
            fill(server.url, server.password, keys, sizes.claims)
            for name, command in script_commands(server, keys).items():
                per_script[name].append(redis_benchmark(server, command, sizes.claims, SLOTS, 1,
                                                         random_range=10**9))

        on_rounds: list[FullJobRound] = []
        off_rounds: list[FullJobRound] = []
        for number in range(sizes.rounds):  # interleaved, alternating which mode goes first
            for record_events in ((True, False) if number % 2 == 0 else (False, True)):
                keys = fresh_keys("on" if record_events else "off")
                result = full_job_round(server, keys, sizes.jobs, SLOTS, record_events,
                                        work_dir)
                (on_rounds if record_events else off_rounds).append(result)
        # the exporter's own ceiling: draining a stream already holding ``claims`` events
        keys = fresh_keys("capacity")
        fill(server.url, server.password, keys, sizes.claims)
        capacity = exporter_capacity(server, keys.events, work_dir / "capacity.jsonl")
        admin.close()

    claims = median([c.per_s for c in claimer])
    cpu_per_claim = median([c.cpu_us_per_claim for c in claimer])
    client_bound = (f"client CPU {cpu_per_claim:.0f} us per claim = "
                    f"{claims * cpu_per_claim / 1e6:.0%} of one core; redis-py "
                    f"{'with' if HIREDIS_AVAILABLE else 'WITHOUT'} hiredis")
    jobs_on = median([r.jobs_per_s for r in on_rounds])
    jobs_off = median([r.jobs_per_s for r in off_rounds])
    produced = median([r.produced_per_s for r in on_rounds])
    exported_rate = median([r.exported_per_s for r in on_rounds])
    missing = "redis-benchmark not installed (apt-get install redis-tools): ratio skipped"
    script_jobs = (1 / sum(1 / median(rates) for rates in per_script.values())
                   if have_benchmark else None)
    rows += [
        Row("claim path", f"Python claims/s, claim_many of {SLOTS} slots per call", claims,
            "claims/s", median(same_calls) if have_benchmark else None,
            f"redis-benchmark EVALSHA claim_many {SLOTS}, -c 1 -P 1",
            note=client_bound if have_benchmark else missing),
        Row("claim path", f"Python claims/s, claim_many vs {SLOTS} threads claiming one each",
            claims, "claims/s", median([c.per_s for c in per_slot]),
            f"{SLOTS} slot threads, one claim per call",
            note="how slots claim under client-clock and nonatomic-claim"),
        Row("claim path", "Python claims/s vs the server's ceiling", claims, "claims/s",
            median(ceiling) if have_benchmark else None,
            f"redis-benchmark EVALSHA claim, -c {CEILING_CLIENTS} -P {CEILING_PIPELINE}",
            target=(">=", 0.5), note="" if have_benchmark else missing),
        Row("claim path", "full job (enqueue, claim, complete) jobs/s, worker process",
            jobs_on, "jobs/s", script_jobs,
            f"redis-benchmark, the same 3 scripts, -c {SLOTS} -P 1",
            note="" if have_benchmark else missing),
        Row("evidence", "full jobs/s, events on + exporter vs events off", jobs_on, "jobs/s",
            jobs_off, "events off (benchmarks-only protocol flag)", target=(">=", 0.8)),
        # the value is the events-off median times the median of the rounds' paired ratios,
        # so the printed ratio is that median (a round the machine slowed down moves it less)
        Row("evidence", "server ceiling claims/s, events on vs off",
            median(ceiling_off) * median([on / off for on, off in zip(
                ceiling, ceiling_off, strict=True)]) if have_benchmark else None, "claims/s",
            median(ceiling_off) if have_benchmark else None,
            f"redis-benchmark claim without XADD, -c {CEILING_CLIENTS} -P {CEILING_PIPELINE}",
            target=(">=", 0.8), note=f"median of {len(ceiling)} paired rounds of "
                                     f"{ceiling_claims} claims; what each part of the event "
                                     "costs: the fields section" if have_benchmark else missing),
        Row("export", "events/s exported during the run vs produced", exported_rate, "events/s",
            produced, "events/s the run produced",
            note=f"max lag {max(r.max_lag for r in on_rounds)} events"),
        Row("export", "exporter behind after the last job vs its poll interval",
            max(r.catch_up_s for r in on_rounds) * 1000, "ms", EXPORT_POLL_S * 1000,
            f"an idle exporter polls every {EXPORT_POLL_S * 1000:g} ms", target=("<=", 2.0),
            note="the worst round: how long until history.jsonl held every event"),
        Row("export", "exporter capacity (full stream) vs production rate", capacity,
            "events/s", produced, "events/s the run produced", target=(">=", 1.0)),
    ]
    raw.update({
        "python_claims_claimer": [vars(c) for c in claimer],
        "python_claims_per_slot_threads": [vars(c) for c in per_slot],
        "redis_benchmark": {"claim_many_one_connection": same_calls,
                            "claim_ceiling": ceiling, "claim_ceiling_events_off": ceiling_off,
                            "scripts_same_connections": per_script}
        if have_benchmark else None,
        "full_job_events_on": [vars(r) for r in on_rounds],
        "full_job_events_off": [vars(r) for r in off_rounds],
        "exporter_capacity_events_per_s": capacity,
    })
    return {"rows": rows, "raw": raw, **({"skipped": skipped} if skipped else {})}
