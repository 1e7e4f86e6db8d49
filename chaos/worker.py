"""The reference worker: ``concurrency`` slots that claim, work and complete, plus a heartbeat.

Run as ``python -m chaos.worker --url valkey://127.0.0.1:PORT --name worker-1 ...``. The password,
if any, comes from ``ECHOMQ_VALKEY_PASSWORD``. SIGTERM stops claiming and finishes held jobs.

The heartbeat extends every held lease each ``heartbeat_ms``; a rejected extend means the lease
is gone (reaped and maybe re-claimed), so the heartbeat stops renewing it. The slot still sends
its fenced complete when the handler ends: the server, not the worker, decides whether it counts,
and a rejected stale complete is exactly what the history must show.

Protocol variants (all optional; the defaults run the sound protocol):
  --protocol NAME      one of chaos.protocol.PROTOCOLS (default sound); the worker's claim, extend
                       and complete follow that variant (see the table in chaos.protocol)
  --clock-file PATH    this process's clock offset file (chaos.clock: one integer, ms; absent or
                       empty = 0), re-read when it changes, so a clock_skew fault can shift it.
                       Every worker has a clock; only the client-clock variant leases by it
  --claim-gap-ms MS    nonatomic-claim: the gap between popping a job and leasing it
                       (default 100 under nonatomic-claim; other protocols have no gap)

Benchmarks only:
  --no-events          claim, extend and complete write no event to the history (the cost of
                       the evidence, ``python -m benchmarks``); nothing can be checked after it,
                       so the runtime never passes it

Store faults:
  --ack-ledger PATH    append every acknowledged claim and accepted complete to PATH (one JSON
                       line each, chaos.ledger), so a store that loses them can be caught out
  --wait-replicas N    after each script call, WAIT until N replicas have it; fewer within the
                       timeout counts as a failed call (the transition is not acknowledged)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass

from valkey.exceptions import ConnectionError as ValkeyConnectionError
from valkey.exceptions import TimeoutError as ValkeyTimeoutError

from chaos.clock import LocalClock
from chaos.ledger import AckLedger
from chaos.procutil import die_with_parent
from chaos.protocol import PROTOCOLS, QueueClient, QueueKeys, connect

log = logging.getLogger("chaos.worker")
TRANSIENT = (ValkeyConnectionError, ValkeyTimeoutError, OSError)


@dataclass(frozen=True)
class HandlerDistribution:
    distribution: str = "uniform"
    fixed_ms: int = 100
    min_ms: int = 50
    max_ms: int = 200
    median_ms: int = 100
    sigma: float = 0.5

    def draw_ms(self, rng: random.Random) -> float:
        if self.distribution == "fixed":
            return float(self.fixed_ms)
        if self.distribution == "uniform":
            return rng.uniform(self.min_ms, self.max_ms)
        return rng.lognormvariate(math.log(self.median_ms), self.sigma)


@dataclass(frozen=True)
class WorkerConfig:
    url: str
    name: str
    keys: QueueKeys
    lease_ms: int
    heartbeat_ms: int
    concurrency: int = 4
    poll_ms: int = 20
    handler: HandlerDistribution = HandlerDistribution()
    seed: int = 1
    protocol: str = "sound"
    clock_file: str | None = None
    claim_gap_ms: int | None = None  # None: the protocol's default
    record_events: bool = True  # False: benchmarks only (--no-events)
    ack_ledger: str | None = None  # chaos.ledger file for this worker's acknowledged transitions
    wait_replicas: int = 0  # WAIT for this many replicas after each script call


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.queue = QueueClient(
            connect(config.url, client_name=config.name), config.keys,
            protocol=config.protocol, clock=LocalClock(config.clock_file),
            claim_gap_ms=config.claim_gap_ms, record_events=config.record_events,
            wait_replicas=config.wait_replicas,
        )
        self.ledger = AckLedger(config.ack_ledger)
        self.stop = threading.Event()
        self.held: dict[str, int] = {}  # job id -> attempt, for the heartbeat
        self.held_lock = threading.Lock()
        self.completed = 0
        self.rejected = 0

    def _slot(self, index: int) -> None:
        cfg = self.config
        rng = random.Random(cfg.seed * 1_000_003 + index)
        while not self.stop.is_set():
            try:
                job = self.queue.claim(cfg.lease_ms, cfg.name)
            except TRANSIENT as error:
                log.warning("claim failed: %s", error)
                self.stop.wait(0.1)
                continue
            if job is None:
                self.stop.wait(cfg.poll_ms / 1000)
                continue
            self.ledger.record("claim", job.job_id, attempt=job.attempt, worker=cfg.name,
                               deadline=job.deadline_ms)
            with self.held_lock:
                self.held[job.job_id] = job.attempt
            time.sleep(cfg.handler.draw_ms(rng) / 1000)
            self._complete(job.job_id, job.attempt)

    def _complete(self, job_id: str, attempt: int) -> None:
        for _ in range(50):  # a blip must not strand a finished job; the lease covers retries
            try:
                accepted = self.queue.complete(job_id, attempt, self.config.name)
                break
            except TRANSIENT as error:
                log.warning("complete %s failed: %s", job_id, error)
                time.sleep(0.1)
        else:
            accepted = False
        with self.held_lock:
            self.held.pop(job_id, None)
        if accepted:
            self.ledger.record("complete", job_id, attempt=attempt, worker=self.config.name)
            self.completed += 1
        else:
            self.rejected += 1
            log.info("complete of %s attempt %d rejected: the lease was lost", job_id, attempt)

    def _heartbeat(self) -> None:
        cfg = self.config
        next_beat = time.monotonic()
        while not self.stop.is_set() or self.held:
            next_beat += cfg.heartbeat_ms / 1000
            time.sleep(max(0.0, next_beat - time.monotonic()))
            next_beat = max(next_beat, time.monotonic() - cfg.heartbeat_ms / 1000)
            with self.held_lock:
                leases = list(self.held.items())
            for job_id, attempt in leases:
                try:
                    renewed = self.queue.extend(job_id, attempt, cfg.lease_ms, cfg.name)
                except TRANSIENT as error:
                    log.warning("extend %s failed: %s", job_id, error)
                    continue
                if renewed is None:
                    with self.held_lock:
                        if self.held.get(job_id) == attempt:
                            del self.held[job_id]
                    log.info("lease on %s attempt %d lost; no longer renewing", job_id, attempt)

    def run(self) -> int:
        threads = [
            threading.Thread(target=self._slot, args=(i,), name=f"slot-{i}", daemon=True)
            for i in range(self.config.concurrency)
        ]
        beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        for thread in threads:
            thread.start()
        if self.config.heartbeat_ms > 0:  # 0: no heartbeat, a lease is never renewed
            beat.start()
        log.info("%s up: %d slots, protocol %s", self.config.name, self.config.concurrency,
                 self.queue.protocol)
        while not self.stop.is_set():
            self.stop.wait(0.5)
        for thread in threads:
            thread.join(timeout=30)
        if beat.is_alive():
            beat.join(timeout=5)
        self.ledger.close()
        log.info("%s stopped: %d completed, %d rejected", self.config.name, self.completed,
                 self.rejected)
        return 0


def parse_args(argv: list[str] | None = None) -> WorkerConfig:
    parser = argparse.ArgumentParser(prog="python -m chaos.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="valkey://127.0.0.1:PORT")
    parser.add_argument("--name", required=True)
    parser.add_argument("--prefix", default="emq:")
    parser.add_argument("--queue", default="jobs")
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--heartbeat-ms", type=int, default=None,
                        help="default lease/3; 0 = no heartbeat")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--poll-ms", type=int, default=20)
    parser.add_argument("--handler", default="{}", help="JSON, e.g. {\"distribution\":\"fixed\"}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--protocol", choices=PROTOCOLS, default="sound")
    parser.add_argument("--clock-file", default=None, help="clock offset file (ms)")
    parser.add_argument("--claim-gap-ms", type=int, default=None,
                        help="nonatomic-claim pop-to-lease gap (default 100 there, else 0)")
    parser.add_argument("--no-events", action="store_true",
                        help="benchmarks only: write no history events (nothing to check)")
    parser.add_argument("--ack-ledger", default=None,
                        help="append each acknowledged claim/complete here (chaos.ledger)")
    parser.add_argument("--wait-replicas", type=int, default=0,
                        help="WAIT for N replicas after each script call (default 0: no WAIT)")
    args = parser.parse_args(argv)
    return WorkerConfig(
        url=args.url,
        name=args.name,
        keys=QueueKeys(args.prefix, args.queue),
        lease_ms=args.lease_ms,
        heartbeat_ms=(args.heartbeat_ms if args.heartbeat_ms is not None
                      else max(1, args.lease_ms // 3)),
        concurrency=args.concurrency,
        poll_ms=args.poll_ms,
        handler=HandlerDistribution(**json.loads(args.handler)),
        seed=args.seed,
        protocol=args.protocol,
        clock_file=args.clock_file,
        claim_gap_ms=args.claim_gap_ms,
        record_events=not args.no_events,
        ack_ledger=args.ack_ledger,
        wait_replicas=args.wait_replicas,
    )


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(parse_args(argv))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop.set())
    signal.signal(signal.SIGINT, lambda *_: worker.stop.set())
    return worker.run()


if __name__ == "__main__":
    raise SystemExit(main())
