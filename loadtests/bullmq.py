"""Locustfile: producer users that add jobs to a real BullMQ queue (docs/bullmq.md).

    ECHOMQ_VALKEY_PASSWORD=... locust -f loadtests/bullmq.py --host valkey://127.0.0.1:6379/0 \\
        --queue-prefix bull --queue-name jobs --producer-rate 50 \\
        --handler '{"distribution": "uniform", "min_ms": 50, "max_ms": 200}'

Each job goes in through BullMQ's own ``Queue.add`` (``chaos.queues.bullmq.load``: one
``producer.js`` per Locust process, shared by its users) and carries the SUT contract's payload,
its handler time drawn from ``--handler`` (the scenario's ``topology.handler``, seeded by
``--seed``), as the echomq producer users' are. The queue options are ``loadtests/queue.py``'s
(``python -m loadtests.queue --help``); consumers are the BullMQ workers under test, not users.
Each acknowledged add fires Locust's ``events.request`` (type ``BULLMQ``, name ``enqueue``) and,
with ``--ack-ledger-dir``, is written to the acknowledgement ledger.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from locust import User, events, task

import loadtests.queue_users as queue_users  # registers the queue options; its users stay out
from chaos.queues.bullmq.load import BullMQQueue, sut_dir
from chaos.reference.payload import HandlerDistribution, PayloadMaker

REQUEST_TYPE = "BULLMQ"
_shared: BullMQQueue | None = None
_shared_lock = threading.Lock()
_USER_NUMBERS = itertools.count(1)  # each producer user of this process its own seed


def node_url(host: str) -> str:
    """``host`` as the redis:// URL Node's client takes, the password from the environment
    added when the URL has none (it is handed to the child through its environment)."""
    parts = urlsplit(host)
    scheme = {"valkey": "redis", "valkeys": "rediss"}.get(parts.scheme, parts.scheme)
    netloc = parts.netloc
    password = os.environ.get(queue_users.PASSWORD_VARIABLE)
    if password and "@" not in netloc:
        netloc = f":{quote(password, safe='')}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--bullmq-dir", default=str(sut_dir()),
                        help="the folder whose producer.js and bullmq add the jobs: the one the "
                             "workers run from (default: sut/bullmq)")


def shared_queue(host: str, queue: str, prefix: str, folder: str = "") -> BullMQQueue:
    """This Locust process's one producer (users share it; its calls are serialised)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = BullMQQueue(node_url(host), queue, prefix, name=f"locust-{os.getpid()}",
                                  folder=Path(folder) if folder else None)
        return _shared


class BullMQProducerUser(User):
    """Adds ``--batch`` jobs per round trip at ``--producer-rate`` jobs/s."""

    host = "valkey://127.0.0.1:6379/0"

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.options = options
        self.queue = shared_queue(str(self.host), options.queue_name, options.queue_prefix,
                                  options.bullmq_dir)
        self.token = f"{os.getpid():x}{secrets.token_hex(4)}"
        # docs/sut.md: {"handler_ms", "crash", "pad"}; each user its own seeded draws
        self.payloads = PayloadMaker(HandlerDistribution(**json.loads(options.handler)),
                                     options.payload_bytes,
                                     hash((options.seed, next(_USER_NUMBERS))))
        self.sent = 0
        self.started = time.monotonic()

    def wait_time(self) -> float:
        rate = self.options.producer_rate
        if rate <= 0:
            return 0.0
        return max(0.0, self.started + self.sent / rate - time.monotonic())

    @task
    def enqueue(self) -> None:
        jobs = [(f"B{self.token}-{self.sent + i:08d}", self.payloads.make())
                for i in range(self.options.batch)]
        self.sent += len(jobs)
        started = time.perf_counter()
        try:
            accepted = self.queue.enqueue_batch(jobs)
            error: Exception | None = None
        except Exception as failure:  # every failure is Locust's to count
            accepted, error = [], failure
        elapsed_ms = (time.perf_counter() - started) * 1000
        for job_id in accepted:
            queue_users.LEDGER.record("enqueue", job_id)
        for index in range(len(jobs)):
            self.environment.events.request.fire(
                request_type=REQUEST_TYPE, name="enqueue", response_time=elapsed_ms,
                response_length=len(jobs[index][1]), context={},
                exception=None if index < len(accepted) else (
                    error or RuntimeError("add refused")))


__all__ = ["BullMQProducerUser"]
