"""The reference worker: ``concurrency`` slots that work and complete, a claimer, a heartbeat.

The claimer claims a job for every free slot in one call (``claim_many``: one fencing token,
lease and claim event per job, as one claim each would give) and hands them to the slots; a
protocol whose claim is not the sound one-script claim (client-clock, nonatomic-claim) has each
slot claim one job per call for itself instead.

Run as ``python -m chaos.reference.worker --url valkey://127.0.0.1:PORT --name worker-1 ...``.
The password,
if any, comes from ``ECHOMQ_VALKEY_PASSWORD``. SIGTERM stops claiming and finishes held jobs.

The heartbeat extends every held lease each ``heartbeat_ms``; a rejected extend means the lease
is gone (reaped and maybe re-claimed), so the heartbeat stops renewing it and the worker cancels
the handler working on it. The slot still sends its fenced complete, once: the server, not the
worker, decides whether it counts, and a rejected stale complete is exactly what the history must
show.

Where the heartbeat runs (--heartbeat; --heartbeat-ms 0 turns it off: leases are never renewed,
a handler longer than the lease loses its lease, a needless redelivery):
  process  (default) a child process of its own, fed the held leases over a pipe: it keeps
           renewing while a handler holds the CPU and the GIL (the BullMQ "Missing lock" case:
           a CPU-bound handler starves the renewal timer). It ignores SIGTERM (it stops when
           the worker closes the pipe) and dies with the worker (PR_SET_PDEATHSIG); kill/pause
           faults signal the worker's whole process group, so it dies and freezes with it
  thread   a thread of the worker: a GIL-holding handler starves it and its leases lapse

Poison jobs: a job whose payload says ``"crash": true`` (chaos.reference.payload) crashes the
worker that claims it (SIGKILL to itself, as a segfaulting native library would), every time.

Benchmarks only:
  --no-events          claim, extend and complete write no event to the history (the cost of
                       the evidence, ``python -m benchmarks``); nothing can be checked after it,
                       so the runtime never passes it

Store faults:
  --ack-ledger PATH    append every acknowledged claim and accepted complete to PATH (one JSON
                       line each, chaos.check.ledger), so a store that loses them can be caught out
  --wait-replicas N    after each script call, WAIT until N replicas have it; fewer within the
                       timeout counts as a failed call (the transition is not acknowledged)

Memory:
  --completed-retention-ms N
                       a completed job's hash expires N ms after its accepted complete
                       (default 0: kept for good), so a long run's memory stays flat

Fault control (--control-file): on SIGUSR1 the worker reads that JSON file,
``{"kind": "cpu_hog" | ..., "duration_ms": N, "fault_id": "f1"}``:
  cpu_hog          the next handler to start is CPU-bound for N ms and holds the GIL throughout
                   (``hold_gil``); it records a ``handler_hog`` event naming the job
  block_heartbeat  the heartbeat renews nothing for N ms (its thread or process is blocked)
  heartbeat_lag    for N ms the heartbeat hears of finished jobs only when the N ms are over
                   (it keeps renewing them after their complete)
  claim_gap_hold   a two-step claim (nonatomic-claim) stays N ms in the gap of its next claim
                   and says so: the fault id in the file CONTROL_FILE + CLAIM_GAP_SUFFIX (the
                   runtime kills it there); a one-step claim has no gap and ignores it

Protocol variants (all optional; the defaults run the sound protocol):
  --protocol NAME      one of chaos.names.PROTOCOLS (default sound); the worker's claim, extend
                       and complete follow that variant (see the table in chaos.protocol.client);
                       under reused-token a rejected complete is retried with the job's current
                       attempt, re-read from the store
  --clock-file PATH    this process's clock offset file (protocol.clock: one integer, ms; absent or
                       empty = 0), re-read when it changes, so a clock_skew fault can shift it.
                       Every worker has a clock; only the client-clock variant leases by it
  --claim-gap-ms MS    nonatomic-claim: the gap between popping a job and leasing it
                       (default 100 under nonatomic-claim; other protocols have no gap)

A changed build (calibration of ``trend`` only): ECHOMQ_CHAOS_BUILD_VARIANT's claim_delay_ms
and handler_scale (chaos.reference.variant) slow each claim call and each handler.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from queue import SimpleQueue

from chaos.lifeline import die_with_parent
from chaos.names import PROTOCOLS
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import Claimed, QueueKeys
from chaos.reference.config import CLAIM_GAP_SUFFIX, WorkerConfig, queue_client
from chaos.reference.heartbeat import (
    TRANSIENT,
    Heartbeat,
    NoHeartbeat,
    ProcessHeartbeat,
    ThreadHeartbeat,
)
from chaos.reference.payload import HandlerDistribution, is_crash
from chaos.reference.variant import VariantError, build_variant

log = logging.getLogger("chaos.reference.worker")
HEARTBEAT_MODES = ("process", "thread")
CONTROL_KINDS = ("cpu_hog", "block_heartbeat", "heartbeat_lag", "claim_gap_hold")


# --- CPU-bound work -----------------------------------------------------------------------

def hold_gil(duration_ms: float) -> None:
    """Busy for ``duration_ms`` without ever letting another thread of this process run: C calls
    (a builtin ``sum`` over a ``range``, a few ms each, during which no bytecode runs) under a
    switch interval longer than the hog, so no waiting thread is handed the GIL in between (a
    plain Python loop yields it every switch interval, 5 ms by default). What a handler stuck in
    a native library or a tight CPU-bound loop does to everything else in its process."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(duration_ms / 1000 + 1)
    try:
        end = time.perf_counter() + duration_ms / 1000
        while time.perf_counter() < end:
            sum(range(50_000))
    finally:
        sys.setswitchinterval(previous)


# --- the worker -----------------------------------------------------------------------------


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.stop = threading.Event()
        self.completed = 0
        self.rejected = 0
        self.cancelled = 0
        # (job id, attempt) -> set when the lease is lost: the handler stops working on it
        self.cancels: dict[tuple[str, int], threading.Event] = {}
        self.cancels_lock = threading.Lock()
        self.hog_ms = 0  # the next handler holds the GIL this long (a cpu_hog fault)
        self.gap_hold: tuple[int, str] | None = None  # (ms, fault id) of a claim_gap_hold
        self.lagged_drops: list[tuple[str, int]] | None = None  # under a heartbeat_lag
        # the claimer's side of the slots: how many wait for a job, and the jobs handed over
        self.free_slots = 0
        self.slots_free = threading.Condition()
        self.handoff: SimpleQueue[Claimed | None] = SimpleQueue()
        # a changed build (calibration only, chaos.reference.variant): a slower claim path,
        # a slower handler
        self.variant = build_variant()
        self.heartbeat: Heartbeat
        if config.heartbeat_ms > 0 and config.heartbeat == "process":
            self.heartbeat = ProcessHeartbeat(config, self.lease_lost)
            # Forked before any thread; it connects while the worker does (start-up time).
            self.heartbeat.start()
        self.queue = queue_client(config, config.name)
        self.queue.in_claim_gap = self._in_claim_gap
        self.ledger = AckLedger(config.ack_ledger)
        if config.heartbeat_ms <= 0:  # 0: no heartbeat, a lease is never renewed
            self.heartbeat = NoHeartbeat()
        elif config.heartbeat == "thread":
            self.heartbeat = ThreadHeartbeat(self.queue, config, self.lease_lost)
        # Renewing before run() starts the slots: nothing is claimed before renewals work.
        self.heartbeat.wait_ready()

    def lease_lost(self, job_id: str, attempt: int) -> None:
        with self.cancels_lock:
            cancel = self.cancels.get((job_id, attempt))
        if cancel is not None:
            cancel.set()

    def control(self, *_: object) -> None:
        """SIGUSR1: apply the fault written in the control file."""
        if not self.config.control_file:
            return
        try:
            order = json.loads(Path(self.config.control_file).read_text())
        except (OSError, ValueError) as error:
            log.warning("control file unreadable: %s", error)
            return
        kind, duration_ms = order.get("kind"), int(order.get("duration_ms", 0))
        log.info("control: %s for %d ms (fault %s)", kind, duration_ms, order.get("fault_id"))
        if kind == "cpu_hog":
            self.hog_ms = duration_ms
        elif kind == "block_heartbeat":
            self.heartbeat.block(duration_ms)
        elif kind == "heartbeat_lag":
            with self.cancels_lock:
                self.lagged_drops = self.lagged_drops or []
            timer = threading.Timer(duration_ms / 1000, self._end_heartbeat_lag)
            timer.daemon = True
            timer.start()
        elif kind == "claim_gap_hold":
            self.gap_hold = (duration_ms, str(order.get("fault_id", "")))

    def _in_claim_gap(self, job_id: str) -> None:
        """Inside a two-step claim's gap: on a claim_gap_hold order, say so and stay."""
        hold, self.gap_hold = self.gap_hold, None
        if hold is None or not self.config.control_file:
            return
        duration_ms, fault_id = hold
        # Said in the log before the file: the runtime kills on seeing the file, and the log
        # line naming the held job is the evidence of what the kill lost.
        log.info("in the claim gap of %s for %d ms (fault %s)", job_id, duration_ms, fault_id)
        Path(self.config.control_file + CLAIM_GAP_SUFFIX).write_text(fault_id)
        time.sleep(duration_ms / 1000)

    def _drop(self, job_id: str, attempt: int) -> None:
        """The heartbeat stops renewing a finished job: now, or when a heartbeat_lag ends."""
        with self.cancels_lock:
            if self.lagged_drops is not None:
                self.lagged_drops.append((job_id, attempt))
                return
        self.heartbeat.drop(job_id, attempt)

    def _end_heartbeat_lag(self) -> None:
        with self.cancels_lock:
            drops, self.lagged_drops = self.lagged_drops or [], None
        for job_id, attempt in drops:
            self.heartbeat.drop(job_id, attempt)

    def _slot(self, index: int) -> None:
        rng = random.Random(self.config.seed * 1_000_003 + index)
        while (job := self._next_job()) is not None:
            self._work(job, rng)

    def _next_job(self) -> Claimed | None:
        """The slot's next job: handed over by the claimer, or (a protocol that claims one job
        per call, e.g. nonatomic-claim's two steps) claimed by the slot itself. None: stop."""
        if self.queue.claims_in_batches:
            with self.slots_free:
                self.free_slots += 1
                self.slots_free.notify()
            return self.handoff.get()
        cfg = self.config
        while not self.stop.is_set():
            try:
                self._claim_delay()
                job = self.queue.claim(cfg.lease_ms, cfg.name)
            except TRANSIENT as error:
                log.warning("claim failed: %s", error)
                self.stop.wait(0.1)
                continue
            if job is None:
                self.stop.wait(cfg.poll_ms / 1000)
                continue
            self._record_claim(job)
            return job
        return None

    def _claimer(self) -> None:
        """One call claims a job for every free slot (claim_many), then hands them over; until
        stopped, then each slot is told to stop once it has finished what it was handed."""
        cfg = self.config
        while not self.stop.is_set():
            with self.slots_free:
                # the timeout: a stop (set by a signal handler) is seen without a notify
                if not self.free_slots and not self.slots_free.wait(0.1):
                    continue
                count = self.free_slots
            try:
                self._claim_delay()
                jobs = self.queue.claim_many(count, cfg.lease_ms, cfg.name)
            except TRANSIENT as error:
                log.warning("claim failed: %s", error)
                self.stop.wait(0.1)
                continue
            if not jobs:
                self.stop.wait(cfg.poll_ms / 1000)
                continue
            with self.slots_free:
                self.free_slots -= len(jobs)
            for job in jobs:
                self._record_claim(job)
                self.handoff.put(job)
        for _ in range(cfg.concurrency):
            self.handoff.put(None)

    def _claim_delay(self) -> None:
        """A changed build's slower claim path: each claim call takes that much longer."""
        if self.variant.claim_delay_ms:
            time.sleep(self.variant.claim_delay_ms / 1000)

    def _record_claim(self, job: Claimed) -> None:
        self.ledger.record("claim", job.job_id, attempt=job.attempt, worker=self.config.name,
                           deadline=job.deadline_ms)

    def _work(self, job: Claimed, rng: random.Random) -> None:
        """Run the handler on a claimed job, then complete it."""
        cfg = self.config
        if is_crash(job.payload):
            # A poison pill: this handler brings the whole worker down, every time.
            log.error("poison job %s attempt %d: crashing", job.job_id, job.attempt)
            os.kill(os.getpid(), signal.SIGKILL)
        key = (job.job_id, job.attempt)
        cancel = threading.Event()
        with self.cancels_lock:
            self.cancels[key] = cancel
        self.heartbeat.hold(*key)
        duration_ms = cfg.handler.draw_ms(rng) * self.variant.handler_scale
        hog_ms, self.hog_ms = self.hog_ms, 0
        if hog_ms:
            self._record_hog(job.job_id, job.attempt, hog_ms)
            hold_gil(hog_ms)  # the work is CPU-bound this time: nothing else in here runs
        else:
            cancel.wait(duration_ms / 1000)
        if cancel.is_set():
            self.cancelled += 1
            log.info("lease on %s attempt %d lost: handler cancelled", *key)
        self._complete(job.job_id, job.attempt)
        with self.cancels_lock:
            self.cancels.pop(key, None)

    def _record_hog(self, job_id: str, attempt: int, hog_ms: int) -> None:
        try:
            self.queue.record(type="handler_hog", id=job_id, attempt=attempt,
                              worker=self.config.name, duration_ms=hog_ms)
        except TRANSIENT as error:
            log.warning("could not record the hog: %s", error)

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
        self._drop(job_id, attempt)
        if not accepted and self.queue.protocol == "reused-token":
            reused = self._complete_with_reused_token(job_id)
            accepted, attempt = reused is not None, reused or attempt
        if accepted:
            self.ledger.record("complete", job_id, attempt=attempt, worker=self.config.name)
            self.completed += 1
        else:
            self.rejected += 1
            log.info("complete of %s attempt %d rejected: the lease was lost", job_id, attempt)

    def _complete_with_reused_token(self, job_id: str) -> int | None:
        """MUTANT reused-token: after a rejection, re-read the job's current attempt (another
        holder's fencing token) and complete with it; the store takes the token as proof.
        The attempt it was accepted with, or None."""
        try:
            current = self.queue.current_attempt(job_id)
            if current > 0 and self.queue.complete(job_id, current, self.config.name):
                return current
        except TRANSIENT as error:
            log.warning("complete of %s with a re-read token failed: %s", job_id, error)
        return None

    def run(self) -> int:
        threads = [
            threading.Thread(target=self._slot, args=(i,), name=f"slot-{i}", daemon=True)
            for i in range(self.config.concurrency)
        ]
        if self.queue.claims_in_batches:
            threads.append(threading.Thread(target=self._claimer, name="claimer", daemon=True))
        if not isinstance(self.heartbeat, ProcessHeartbeat):  # (that one is up since __init__)
            self.heartbeat.start()
        for thread in threads:
            thread.start()
        log.info("%s up: %d slots, protocol %s, heartbeat %s%s", self.config.name,
                 self.config.concurrency, self.queue.protocol, self.config.heartbeat,
                 "" if self.variant.sound else f", build variant {self.variant.describe()}")
        while not self.stop.is_set():
            self.stop.wait(0.5)
        for thread in threads:
            thread.join(timeout=30)
        self.heartbeat.close()  # after the slots: held leases stay renewed until completed
        self.ledger.close()
        log.info("%s stopped: %d completed, %d rejected, %d cancelled", self.config.name,
                 self.completed, self.rejected, self.cancelled)
        return 0


@functools.cache
def parser() -> argparse.ArgumentParser:
    """Built once (the fork server builds it before forking: argparse takes milliseconds)."""
    parser = argparse.ArgumentParser(prog="python -m chaos.reference.worker", description=__doc__,
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
    parser.add_argument("--heartbeat", choices=HEARTBEAT_MODES, default="process",
                        help="where leases are renewed (default process)")
    parser.add_argument("--control-file", default=None,
                        help="fault control file, read on SIGUSR1")
    parser.add_argument("--no-events", action="store_true",
                        help="benchmarks only: write no history events (nothing to check)")
    parser.add_argument("--ack-ledger", default=None,
                        help="append each acknowledged claim/complete here (chaos.check.ledger)")
    parser.add_argument("--wait-replicas", type=int, default=0,
                        help="WAIT for N replicas after each script call (default 0: no WAIT)")
    parser.add_argument("--completed-retention-ms", type=int, default=0,
                        help="expire a completed job's hash N ms after (default 0: keep it)")
    return parser


def parse_args(argv: list[str] | None = None) -> WorkerConfig:
    args = parser().parse_args(argv)
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
        heartbeat=args.heartbeat,
        control_file=args.control_file,
        record_events=not args.no_events,
        ack_ledger=args.ack_ledger,
        wait_replicas=args.wait_replicas,
        completed_retention_ms=args.completed_retention_ms,
    )


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a fault order before we can read it: none
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        build_variant()
    except VariantError as error:
        parser().exit(2, f"chaos.reference.worker: error: {error}\n")
    worker = Worker(parse_args(argv))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop.set())
    signal.signal(signal.SIGINT, lambda *_: worker.stop.set())
    signal.signal(signal.SIGUSR1, worker.control)
    return worker.run()


if __name__ == "__main__":
    raise SystemExit(main())
