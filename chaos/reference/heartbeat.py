"""The reference worker's heartbeat (docs/design.md §2): renew every held lease each
``heartbeat_ms``, in a thread of the worker or a process of its own (see chaos.reference.worker
for the modes), and report each lease it found lost."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import TimeoutError as StoreTimeoutError

from chaos.lifeline import die_with_parent
from chaos.protocol.client import QueueClient
from chaos.reference.config import WorkerConfig, queue_client

log = logging.getLogger("chaos.reference.worker")
TRANSIENT = (StoreConnectionError, StoreTimeoutError, OSError)


class LeaseRenewer:
    """Extends every held lease each ``heartbeat_ms`` until stopped; a rejected extend drops the
    lease and reports it to ``on_lost``. ``block`` makes it renew nothing for a while."""

    def __init__(self, queue: QueueClient, config: WorkerConfig,
                 on_lost: Callable[[str, int], None]) -> None:
        self.queue = queue
        self.config = config
        self.on_lost = on_lost
        self.held: dict[str, int] = {}  # job id -> attempt
        self.lock = threading.Lock()
        self.blocked_until = 0.0  # monotonic
        self.stop = threading.Event()

    def hold(self, job_id: str, attempt: int) -> None:
        with self.lock:
            self.held[job_id] = attempt

    def drop(self, job_id: str, attempt: int) -> None:
        with self.lock:
            if self.held.get(job_id) == attempt:
                del self.held[job_id]

    def block(self, duration_ms: int) -> None:
        self.blocked_until = time.monotonic() + duration_ms / 1000
        log.info("heartbeat blocked for %d ms", duration_ms)

    def run(self) -> None:
        cfg = self.config
        period = cfg.heartbeat_ms / 1000
        next_beat = time.monotonic()
        while True:
            next_beat += period
            if self.stop.wait(max(0.0, next_beat - time.monotonic())):
                return
            # A block_heartbeat fault: this thread renews nothing until it ends, as a blocked
            # event loop or a stuck timer would (but a stop still ends it at once).
            if self.blocked_until > time.monotonic():
                while (left := self.blocked_until - time.monotonic()) > 0:
                    if self.stop.wait(left):
                        return
                next_beat = time.monotonic()  # one beat right after the block, not a burst
            next_beat = max(next_beat, time.monotonic() - period)
            with self.lock:
                leases = list(self.held.items())
            for job_id, attempt in leases:
                try:
                    renewed = self.queue.extend(job_id, attempt, cfg.lease_ms, cfg.name)
                except TRANSIENT as error:
                    log.warning("extend %s failed: %s", job_id, error)
                    # As the reaper: a renewal WAIT saw unreplicated may have gone to a primary
                    # Sentinel has just failed away from, and still a primary; an idle connection
                    # dropped makes the next call ask Sentinel (in-flight calls keep theirs).
                    self.queue.client.connection_pool.disconnect(inuse_connections=False)
                    continue
                if renewed is None:
                    self.drop(job_id, attempt)
                    log.info("lease on %s attempt %d lost; no longer renewing", job_id, attempt)
                    self.on_lost(job_id, attempt)


class Heartbeat(Protocol):
    def start(self) -> None: ...
    def wait_ready(self) -> None: ...
    def hold(self, job_id: str, attempt: int) -> None: ...
    def drop(self, job_id: str, attempt: int) -> None: ...
    def block(self, duration_ms: int) -> None: ...
    def close(self) -> None: ...


class NoHeartbeat:
    """``--heartbeat-ms 0``: leases are never renewed."""

    def start(self) -> None: ...
    def wait_ready(self) -> None: ...
    def hold(self, job_id: str, attempt: int) -> None: ...
    def drop(self, job_id: str, attempt: int) -> None: ...
    def block(self, duration_ms: int) -> None: ...
    def close(self) -> None: ...


class ThreadHeartbeat:
    """``--heartbeat thread``: the renewer in a thread of the worker (shares its GIL)."""

    def __init__(self, queue: QueueClient, config: WorkerConfig,
                 on_lost: Callable[[str, int], None]) -> None:
        self.renewer = LeaseRenewer(queue, config, on_lost)
        self.thread = threading.Thread(target=self.renewer.run, name="heartbeat", daemon=True)
        self.hold, self.drop, self.block = (self.renewer.hold, self.renewer.drop,
                                            self.renewer.block)

    def start(self) -> None:
        self.thread.start()

    def wait_ready(self) -> None: ...

    def close(self) -> None:
        self.renewer.stop.set()
        self.thread.join(timeout=5)


class ProcessHeartbeat:
    """``--heartbeat process``: the renewer in a child process with its own connection; the
    worker tells it what it holds over a pipe and hears back which leases were lost."""

    def __init__(self, config: WorkerConfig, on_lost: Callable[[str, int], None]) -> None:
        # fork, while the worker has no thread yet (built first thing in Worker.__init__).
        # Not spawn: that also starts multiprocessing's resource tracker, a process nothing
        # stops if it is frozen (a pause fault) when the worker dies.
        context = multiprocessing.get_context("fork")
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=heartbeat_process,
                                       args=(config, child_conn, os.getpid()),
                                       name=f"{config.name}-heartbeat", daemon=True)
        self.child_conn = child_conn
        self.on_lost = on_lost
        self.send_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="heartbeat-reader", daemon=True)

    def start(self) -> None:
        """Fork the heartbeat process; ``wait_ready`` then waits until it renews (the worker
        sets up its own connection meanwhile)."""
        assert threading.active_count() == 1, "fork the heartbeat before starting threads"
        self.process.start()
        self.child_conn.close()

    def wait_ready(self) -> None:
        if not self.conn.poll(60) or self.conn.recv() != ("ready",):
            raise RuntimeError("the heartbeat process did not come up")
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return
            if message[0] == "lost":
                self.on_lost(message[1], message[2])

    def _send(self, *message: Any) -> None:
        with self.send_lock:
            try:
                self.conn.send(message)
            except (BrokenPipeError, OSError) as error:
                log.warning("heartbeat process unreachable: %s", error)

    def hold(self, job_id: str, attempt: int) -> None:
        self._send("hold", job_id, attempt)

    def drop(self, job_id: str, attempt: int) -> None:
        self._send("drop", job_id, attempt)

    def block(self, duration_ms: int) -> None:
        self._send("block", duration_ms)

    def close(self) -> None:
        self._send("stop")
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()


def heartbeat_process(config: WorkerConfig, conn: Connection, worker_pid: int) -> None:
    """The heartbeat child: renew what the worker says it holds; report lost leases back."""
    die_with_parent(worker_pid)  # may be 1: the worker is PID 1 of its container under Docker
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the worker stops it, after its slots
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s chaos.heartbeat %(levelname)s %(message)s")
    send_lock = threading.Lock()

    def lost(job_id: str, attempt: int) -> None:
        with send_lock:
            conn.send(("lost", job_id, attempt))

    renewer = LeaseRenewer(queue_client(config, f"{config.name}-heartbeat"), config, lost)
    thread = threading.Thread(target=renewer.run, name="heartbeat", daemon=True)
    thread.start()
    with send_lock:
        conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "hold":
            renewer.hold(message[1], message[2])
        elif message[0] == "drop":
            renewer.drop(message[1], message[2])
        elif message[0] == "block":
            renewer.block(message[1])
        elif message[0] == "stop":
            break
    renewer.stop.set()
    thread.join(timeout=5)
