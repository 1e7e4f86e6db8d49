"""The built-in producer: enqueues jobs at a steady rate in a background thread.

Pacing is deadline-based (job i is due at start + i / rate), so a slow call is caught up on
rather than silently lowering the rate. Locust replaces this as the load source in later work.
"""

from __future__ import annotations

import threading
import time

from valkey.exceptions import ConnectionError as ValkeyConnectionError
from valkey.exceptions import TimeoutError as ValkeyTimeoutError

from chaos.protocol import QueueClient
from chaos.scenario import Load


class Producer:
    def __init__(self, queue: QueueClient, load: Load) -> None:
        self.queue = queue
        self.load = load
        self.enqueued = 0  # acknowledged by the server
        self.errors = 0
        self.payload = "x" * load.payload_bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        start = time.monotonic()
        limit = self.load.max_jobs
        sent = 0
        while not self._stop.is_set() and (limit is None or sent < limit):
            due = start + sent / self.load.rate
            delay = due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
                continue
            sent += 1
            try:
                if self.queue.enqueue(f"job-{sent:07d}", self.payload):
                    self.enqueued += 1
            except (ValkeyConnectionError, ValkeyTimeoutError, OSError):
                self.errors += 1
