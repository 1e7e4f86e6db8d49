"""The reaper: a fixed-rate sweep that returns lapsed leases to pending.

Ticks fall on a deadline grid (start + k * interval), not "sleep after work", so the period really
is the reap interval. Within a tick it sweeps again while a sweep returns a full batch, so a mass
failure with more stranded leases than ``limit`` is still cleared in one tick. Every reap call
records a ``sweep`` event with the reaper's name (the reap script's own XADD), so the history
shows its cadence, swept empty or not (``reap_cadence``, docs/design.md §4).

Run as ``python -m chaos.reference.reaper --url valkey://127.0.0.1:PORT --interval-ms 250``.

Optional flags (the defaults run the sound protocol):
  --name NAME            client name and the name its sweep events carry (default ``reaper``);
                         two racing reapers get two names
  --protocol NAME        one of chaos.protocol.client.PROTOCOLS (default sound). Under
                         single-batch-reaper a tick sweeps one batch, full or not. Under
                         grace-reaper a lease is taken only GRACE_INTERVALS intervals after its
                         deadline. Under idle-backoff-reaper the sleep doubles after each sweep
                         that moved nothing, up to BACKOFF_INTERVALS intervals. Under
                         sparse-reaper it sweeps on every SPARSE_TICKS-th tick only. Under
                         no-reaper the reaper refuses to run (exit code 2): that variant is a
                         runtime that starts no reaper at all
  --clock-file PATH      this process's clock offset file (protocol.clock: one integer, ms; absent
                         or empty = 0); only the client-clock variant reaps by it
  --race-window-ms MS    nonatomic-reap: the wait between the scan and the moves
                         (default 100 under nonatomic-reap; other protocols have no window)
  --wait-replicas N      WAIT for N replicas after each reap script (a failed WAIT is retried
                         on the next tick)
  --max-stalls N         stall limit: a job reaped N times is dead-lettered at its next stall
                         (a `dead` event, the dead set) instead of going back to pending;
                         0 (default): no limit

A changed build (calibration of ``trend`` only): ECHOMQ_CHAOS_BUILD_VARIANT's reaper_period_ms
(chaos.reference.variant) sweeps at that period whatever ``--interval-ms`` says.
"""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
import threading
import time

from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import TimeoutError as StoreTimeoutError

from chaos.lifeline import die_with_parent
from chaos.names import PROTOCOLS
from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.protocol.clock import LocalClock
from chaos.reference.variant import VariantError, build_variant

log = logging.getLogger("chaos.reference.reaper")
# MUTANT grace-reaper: how many reap intervals a lease must have lapsed before it is taken. Above
# one interval plus the checker's allowance, so every reap this variant makes is late.
GRACE_INTERVALS = 1.5
# MUTANT idle-backoff-reaper: the longest sleep between sweeps, in reap intervals.
BACKOFF_INTERVALS = 8
# MUTANT sparse-reaper: it sweeps on one tick of its grid in this many.
SPARSE_TICKS = 3


def sweep(queue: QueueClient, limit: int, max_stalls: int = 0, name: str = "") -> int:
    """One tick: reap until a batch comes back short of the limit. Each reap call records a
    ``sweep`` event with ``name``, the reaper's (one XADD inside the script: no round trip)."""
    if queue.protocol == "single-batch-reaper":
        # MUTANT single-batch-reaper: one batch per tick, even a full one; the rest of a mass
        # failure waits for later ticks, past the recovery bound.
        return queue.reap(limit, max_stalls, name)
    total = 0
    while True:
        moved = queue.reap(limit, max_stalls, name)
        total += moved
        if moved < limit:
            return total


def run(queue: QueueClient, interval_ms: int, limit: int, stop: threading.Event,
        max_stalls: int = 0, name: str = "") -> None:
    interval = interval_ms / 1000
    next_tick = time.monotonic()
    backoff = 1  # idle-backoff-reaper: the next sleep, in intervals
    while not stop.is_set():
        moved = 0
        try:
            moved = sweep(queue, limit, max_stalls, name)
            if moved:
                log.info("reaped %d", moved)
        except (StoreConnectionError, StoreTimeoutError, OSError) as error:
            log.warning("sweep failed: %s", error)
            # Find the primary anew on the next sweep. A reap that WAIT saw no replica confirm
            # (NotReplicated) leaves the connection up: after a second failover it may be to a
            # demoted primary Sentinel has not reconfigured yet, which takes every reap and
            # loses them all when it is (no reaps for seconds, seen in failover.toml). A
            # dropped connection makes the next one ask Sentinel (_PrimaryConnection).
            queue.client.connection_pool.disconnect()
        if queue.protocol == "idle-backoff-reaper":
            # MUTANT idle-backoff-reaper: an idle sweep doubles the sleep, a busy one resets it;
            # a lease that lapses while it sleeps long waits up to BACKOFF_INTERVALS intervals.
            backoff = 1 if moved else min(backoff * 2, BACKOFF_INTERVALS)
            next_tick += interval * (backoff - 1)
        elif queue.protocol == "sparse-reaper":
            # MUTANT sparse-reaper: the grid stays, but only every SPARSE_TICKS-th tick sweeps;
            # a lease that lapses just after a sweep waits up to SPARSE_TICKS intervals.
            next_tick += interval * (SPARSE_TICKS - 1)
        next_tick += interval
        now = time.monotonic()
        if next_tick < now:  # fell behind (stalled): skip missed ticks rather than burst
            next_tick = now + interval - (now - next_tick) % interval
        stop.wait(next_tick - now)


@functools.cache
def parser() -> argparse.ArgumentParser:
    """Built once (the fork server builds it before forking: argparse takes milliseconds)."""
    parser = argparse.ArgumentParser(prog="python -m chaos.reference.reaper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", default="emq:")
    parser.add_argument("--queue", default="jobs")
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--name", default="reaper", help="client name (default reaper)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="sound")
    parser.add_argument("--clock-file", default=None, help="clock offset file (ms)")
    parser.add_argument("--race-window-ms", type=int, default=None,
                        help="nonatomic-reap scan-to-move window (default 100 there, else 0)")
    parser.add_argument("--wait-replicas", type=int, default=0,
                        help="WAIT for N replicas after each script call (default 0: no WAIT)")
    parser.add_argument("--max-stalls", type=int, default=0,
                        help="dead-letter a job at its stall past N (default 0: no limit)")
    return parser


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parser().parse_args(argv)
    try:
        variant = build_variant()
    except VariantError as error:
        parser().exit(2, f"chaos.reference.reaper: error: {error}\n")
    if args.protocol == "no-reaper":
        parser().exit(2, "chaos.reference.reaper: error: protocol 'no-reaper' means no reaper "
                       "runs at all; "
                       "the runtime must not start a reaper for this variant\n")
    queue = QueueClient(
        connect(args.url, client_name=args.name), QueueKeys(args.prefix, args.queue),
        protocol=args.protocol, clock=LocalClock(args.clock_file),
        race_window_ms=args.race_window_ms, wait_replicas=args.wait_replicas,
        reap_grace_ms=(round(args.interval_ms * GRACE_INTERVALS)
                       if args.protocol == "grace-reaper" else 0),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # A changed build (calibration only, chaos.reference.variant): another period than the
    # interval the scenario configured
    period_ms = variant.reaper_period_ms or args.interval_ms
    log.info("%s up: every %d ms, batch %d, protocol %s, max stalls %d%s", args.name,
             period_ms, args.limit, args.protocol, args.max_stalls,
             "" if variant.sound else f", build variant {variant.describe()}")
    run(queue, period_ms, args.limit, stop, args.max_stalls, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
