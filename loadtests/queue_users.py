"""Locust users for a lease queue on Valkey, and the client that reports every script call.

Each script call (EVALSHA through ``chaos.protocol.client.QueueClient``, the same scripts the
workers
use) fires Locust's ``events.request`` with request_type ``EVALSHA`` and name ``enqueue``,
``claim``, ``extend`` or ``complete`` (``claim_empty``: a claim that found the queue empty), so
Locust's statistics, CSV, HTML report and ``--exit-code-on-error`` work unchanged. A batched
enqueue (``--batch N``: N script calls in one pipelined round trip) is counted per job, each with
the round trip's time: Locust's figures count jobs, never calls.

Runs inside Locust (gevent); nothing in ``chaos`` imports this module.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import secrets
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import gevent
from locust import User, events, task
from locust.env import Environment
from redis import AuthenticationError, RedisError

from chaos.lifeline import die_with_parent
from chaos.names import PROTOCOLS
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.protocol.ids import ID_STYLES, BrandedIds
from chaos.reference.payload import HandlerDistribution, PayloadMaker

T = TypeVar("T")

REQUEST_TYPE = "EVALSHA"
PASSWORD_VARIABLE = "ECHOMQ_VALKEY_PASSWORD"


# What this process's users were told succeeded (chaos.check.ledger), when --ack-ledger-dir is set.
LEDGER = AckLedger(None)


class DuplicateJob(Exception):
    """The server refused an enqueue because the id exists: ids must be unique per run."""


class StaleLease(Exception):
    """An extend or complete was refused: the lease was no longer this consumer's."""


@events.init_command_line_parser.add_listener
def _queue_options(parser: Any) -> None:
    group = parser.add_argument_group("echomq queue (loadtests/queue.py)")

    def option(flag: str, **settings: Any) -> None:
        # Each also LOCUST_<NAME> in the environment, like Locust's own options (the compose
        # stack hands its master these variables).
        group.add_argument(flag, env_var="LOCUST_" + flag[2:].upper().replace("-", "_"),
                           **settings)

    option("--queue-prefix", default="emq:", help="key prefix (default emq:)")
    option("--queue-name", default="jobs", help="queue name (default jobs)")
    option("--protocol", default="sound", choices=PROTOCOLS,
           help="protocol variant the consumers speak (default sound)")
    option("--producer-rate", type=float, default=100.0,
           help="jobs/s each producer user enqueues; 0 = as fast as it can (default 100)")
    option("--batch", type=int, default=1,
           help="jobs per pipelined enqueue round trip (default 1)")
    option("--payload-bytes", type=int, default=16, help="job payload filler size (pad)")
    option("--handler", default="{}",
           help="the handler distribution each job's payload draws its handler_ms from "
                "(JSON, as the scenario's topology.handler; default uniform 50..200 ms)")
    option("--seed", type=int, default=1, help="seeds the payloads' handler times (default 1)")
    option("--producers", type=int, default=0,
           help="exactly this many users are producers (0: by weight, 1:1)")
    option("--consumers", type=int, default=0,
           help="exactly this many users are consumers (0: by weight, 1:1)")
    option("--lease-ms", type=int, default=30_000, help="consumer lease (ms)")
    option("--work-min-ms", type=float, default=10.0,
           help="consumer's simulated work per job, uniform min (ms)")
    option("--work-max-ms", type=float, default=50.0,
           help="consumer's simulated work per job, uniform max (ms)")
    option("--poll-ms", type=float, default=20.0,
           help="consumer's wait after finding the queue empty (ms)")
    option("--wait-replicas", type=int, default=0,
           help="WAIT for this many replicas after each call (a batch: one WAIT)")
    option("--id-style", default="plain", choices=ID_STYLES,
           help="the job ids producers mint: plain (L<token>-<n>) or branded (EchoMQ's "
                "JOB + 11 base62 digits of a snowflake; default plain)")
    # The server's password, for remote workers: the master reads it from the environment and
    # hands it to each worker with its first spawn message (never on a command line).
    group.add_argument("--valkey-password", env_var=PASSWORD_VARIABLE, default="",
                       help=f"the server's password (from {PASSWORD_VARIABLE}; a remote worker "
                            "gets it from its master)")
    option("--producer-relay", default="",
           help="HOST:PORT of the runner's relay to the user's own producer command ([sut] "
                "producer): producer users send it their payloads, a line each, and the "
                "command mints the ids (chaos.load.command; the runner sets it)")
    option("--ack-ledger-dir", default="",
           help="append every acknowledged enqueue, claim and accepted complete to "
                "DIR/locust-<pid>.jsonl (chaos.check.ledger; the runner sets it)")


@events.init.add_listener
def _check_options(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    problems = [f"--{name.replace('_', '-')} {getattr(options, name)}: must be {rule}"
                for name, rule, ok in (
                    ("producer_rate", ">= 0", options.producer_rate >= 0),
                    ("batch", ">= 1", options.batch >= 1),
                    ("payload_bytes", ">= 0", options.payload_bytes >= 0),
                    ("producers", ">= 0", options.producers >= 0),
                    ("consumers", ">= 0", options.consumers >= 0),
                    ("lease_ms", ">= 3", options.lease_ms >= 3),
                    ("work_min_ms", ">= 0", options.work_min_ms >= 0),
                    ("work_max_ms", ">= --work-min-ms", options.work_max_ms >= options.work_min_ms),
                    ("poll_ms", "> 0", options.poll_ms > 0),
                    ("wait_replicas", ">= 0", options.wait_replicas >= 0),
                ) if not ok]
    try:
        HandlerDistribution(**json.loads(options.handler))
    except (ValueError, TypeError) as error:
        problems.append(f"--handler {options.handler!r}: {error}")
    if problems:
        raise SystemExit("loadtests/queue.py: " + "; ".join(problems))
    if not options.worker:  # a worker learns the host from its master, which checked it
        _check_credentials(options.host or QueueUser.host)
    if options.processes and options.worker:
        # A worker forked by --processes: die with the Locust process that forked it (the
        # runner's teardown reaches that one; the kernel then takes care of us).
        die_with_parent()
    if options.headless and not options.worker:
        # Ctrl-C / SIGINT stops like --run-time does: users finish the call they are in (within
        # --stop-timeout), then Locust writes its reports. Python's default handler would raise
        # KeyboardInterrupt inside whichever user happens to run, losing its call's figures.
        gevent.signal_handler(signal.SIGINT, _quit_gracefully, environment)
    global LEDGER
    if options.ack_ledger_dir:  # one file per process: --processes forks before this event
        LEDGER = AckLedger(Path(options.ack_ledger_dir) / f"locust-{os.getpid()}.jsonl")
    if options.master:  # its remote workers' account, written when it quits
        environment.events.worker_connect.add_listener(_WORKERS.connected)
        environment.events.worker_report.add_listener(_WORKERS.reported)
        environment.events.test_stop.add_listener(_WORKERS.at_stop)
        environment.events.quitting.add_listener(_WORKERS.save)
    # Exact counts, when given, decide the mix (Locust spawns fixed_count users first).
    ProducerUser.fixed_count = options.producers
    ConsumerUser.fixed_count = options.consumers


class _RemoteWorkers:
    """On a master: each remote worker's users and requests as it reports them, and whether it
    was lost (went missing, or left before the end): ``<csv prefix>_workers.json``, which the
    run's load summary carries, so a lost worker is reported, never hidden."""

    def __init__(self) -> None:
        self.workers: dict[str, dict[str, Any]] = {}
        self.stopped_at = 0.0  # when the test stopped (master's clock)

    def _worker(self, client_id: str) -> dict[str, Any]:
        return self.workers.setdefault(client_id, {
            "id": client_id, "connected_at": time.time(), "users": 0, "requests": 0,
            "failures": 0})

    def connected(self, client_id: str, **_: Any) -> None:
        self._worker(client_id)

    def reported(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        worker = self._worker(client_id)
        worker["last_report_at"] = time.time()
        for entry in data.get("stats", []):
            worker["requests"] += int(entry.get("num_requests", 0))
            worker["failures"] += int(entry.get("num_failures", 0))
        worker["users"] = max(worker["users"], int(data.get("user_count", 0)))

    def at_stop(self, environment: Environment, **_: Any) -> None:
        """When the test stops: a worker no longer connected, or missing, was lost."""
        clients = getattr(environment.runner, "clients", {})
        self.stopped_at = time.time()
        for client_id, worker in self.workers.items():
            node = clients.get(client_id)
            worker["state"] = node.state if node is not None else "gone"
            worker["lost"] = node is None or node.state == "missing"

    def save(self, environment: Environment, **_: Any) -> None:
        """When the master quits (the workers' last reports are in)."""
        options = environment.parsed_options
        if options is None or not options.csv_prefix or environment.runner is None:
            return
        if any("lost" not in worker for worker in self.workers.values()):
            self.at_stop(environment)  # quitting without a test stop
        for worker in self.workers.values():
            # A live worker sends its last report as it stops; one that sent none since the
            # stop died before it (the master may not have missed its heartbeats yet).
            if worker.get("last_report_at", 0.0) < self.stopped_at:
                worker["lost"] = True
        expected = int(getattr(options, "expect_workers", 0) or 0)
        account = {"expected": expected, "connected": len(self.workers),
                   "lost": sorted(w["id"] for w in self.workers.values() if w["lost"]),
                   "workers": sorted(self.workers.values(), key=lambda w: w["connected_at"])}
        Path(f"{options.csv_prefix}_workers.json").write_text(json.dumps(account, indent=1))


_WORKERS = _RemoteWorkers()


def _check_credentials(url: str) -> None:
    """Stop here, once, if Valkey refuses our credentials: every user would die on it, each with
    the same traceback. Any other connection failure (a server still starting) is left to the
    users, as it was before this check."""
    client = connect(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except AuthenticationError as error:
        parts = urlsplit(url)
        if parts.password:
            hint = "the password in --host was refused"
        elif os.environ.get(PASSWORD_VARIABLE):
            hint = f"{PASSWORD_VARIABLE} is set, but the server refused it"
        else:
            hint = f"set {PASSWORD_VARIABLE} to the server's password (never on a command line)"
        raise SystemExit(f"loadtests/queue.py: Valkey at {parts.hostname}:{parts.port} "
                         f"refused the connection ({error}): {hint}") from None
    except RedisError:
        pass
    finally:
        client.close()


def _quit_gracefully(environment: Environment) -> None:
    if environment.runner is not None:
        environment.runner.quit()


class ValkeyQueueLocustClient:
    """``QueueClient`` calls, each reported to Locust as one request per job it carries."""

    def __init__(self, environment: Environment, url: str, keys: QueueKeys,
                 protocol: str = "sound", wait_replicas: int = 0,
                 password: str | None = None) -> None:
        self.environment = environment
        # The password: given (a remote worker's, from its master), in the URL, or in
        # ECHOMQ_VALKEY_PASSWORD (chaos.protocol.client.connect).
        self.queue = QueueClient(connect(url, password), keys, protocol=protocol,
                                 wait_replicas=wait_replicas)

    def close(self) -> None:
        self.queue.client.close()

    def _report(self, name: str, started: float, length: int, exception: Exception | None,
                count: int = 1) -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        for _ in range(count):
            self.environment.events.request.fire(
                request_type=REQUEST_TYPE, name=name, response_time=elapsed_ms,
                response_length=length, exception=exception, context={},
            )

    def _timed(self, name: str, call: Callable[[], T], length: Callable[[T], int],
               refused: Callable[[T], Exception | None] = lambda _: None) -> T | None:
        started = time.perf_counter()
        try:
            result = call()
        except Exception as error:  # every failure is Locust's to count, none stops the user
            self._report(name, started, 0, error)
            return None
        self._report(name, started, length(result), refused(result))
        return result

    def enqueue_batch(self, jobs: list[tuple[str, str]]) -> int:
        """Enqueue jobs in one round trip; one Locust request per job. How many were accepted."""
        started = time.perf_counter()
        try:
            accepted = self.queue.enqueue_batch(jobs)
        except Exception as error:
            self._report("enqueue", started, 0, error, count=len(jobs))
            return 0
        for job_id in accepted:
            LEDGER.record("enqueue", job_id)
        length = sum(len(job_id) + len(payload) for job_id, payload in jobs) // len(jobs)
        self._report("enqueue", started, length, None, count=len(accepted))
        if len(accepted) < len(jobs):
            self._report("enqueue", started, 0, DuplicateJob("job id exists"),
                         count=len(jobs) - len(accepted))
        return len(accepted)

    def claim(self, lease_ms: int, worker: str) -> Any:
        started = time.perf_counter()
        try:
            claimed = self.queue.claim(lease_ms, worker)
        except Exception as error:
            self._report("claim", started, 0, error)
            return None
        if claimed is None:
            self._report("claim_empty", started, 0, None)
        else:
            LEDGER.record("claim", claimed.job_id, attempt=claimed.attempt, worker=worker,
                          deadline=claimed.deadline_ms)
            self._report("claim", started, len(claimed.job_id) + len(claimed.payload), None)
        return claimed

    def extend(self, job_id: str, attempt: int, lease_ms: int, worker: str) -> int | None:
        return self._timed(
            "extend", lambda: self.queue.extend(job_id, attempt, lease_ms, worker),
            length=lambda _: 0,
            refused=lambda deadline: None if deadline else StaleLease(f"extend {job_id}"))

    def complete(self, job_id: str, attempt: int, worker: str) -> bool:
        accepted = bool(self._timed(
            "complete", lambda: self.queue.complete(job_id, attempt, worker),
            length=lambda _: 0,
            refused=lambda ok: None if ok else StaleLease(f"complete {job_id}")))
        if accepted:
            LEDGER.record("complete", job_id, attempt=attempt, worker=worker)
        return accepted


class ProducerCommandClient:
    """A producer user's line to ``[sut] producer`` through the runner's relay
    (``chaos.load.command.CommandRelay``): a payload a line out, ``enqueue id=<id>``,
    ``duplicate`` or ``failed <why>`` back, each reported to Locust as one enqueue. The relay
    keeps the acknowledged ids in the ledger: they are the command's."""

    def __init__(self, environment: Environment, address: str) -> None:
        self.environment = environment
        host, _, port = address.rpartition(":")
        self.connection = socket.create_connection((host, int(port)), timeout=30)
        self.lines = self.connection.makefile("rb")

    def close(self) -> None:
        self.lines.close()
        self.connection.close()

    def enqueue_batch(self, jobs: list[tuple[str, str]]) -> int:
        """Each payload through the command in turn (the ids are its own); how many it
        acknowledged."""
        accepted = 0
        for _, payload in jobs:
            started = time.perf_counter()
            error: Exception | None = None
            try:
                self.connection.sendall(payload.replace("\n", " ").encode() + b"\n")
                reply = self.lines.readline().decode("utf-8", "replace").strip()
            except OSError as failure:
                reply, error = "", failure
            if error is None and not reply.startswith("enqueue id="):
                error = DuplicateJob("job id exists") if reply == "duplicate" else \
                    ProducerCommandFailed(reply or "the relay closed")
            elapsed_ms = (time.perf_counter() - started) * 1000
            self.environment.events.request.fire(
                request_type=REQUEST_TYPE, name="enqueue", response_time=elapsed_ms,
                response_length=0 if error else len(payload), exception=error, context={})
            accepted += error is None
        return accepted


class ProducerCommandFailed(Exception):
    """The user's producer command did not acknowledge a payload (the relay says why)."""


class QueueUser(User):
    """A user with its own connection to the queue named by the host and the queue options."""

    abstract = True
    host = "valkey://127.0.0.1:6379/0"

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.options = options
        keys = QueueKeys(options.queue_prefix, options.queue_name)
        self.client = ValkeyQueueLocustClient(self.environment, str(self.host), keys,
                                              options.protocol, options.wait_replicas,
                                              getattr(options, "valkey_password", "") or None)
        # Unique per user across processes and machines: job ids and worker names use it.
        self.token = f"{os.getpid():x}{secrets.token_hex(4)}"

    def on_stop(self) -> None:
        self.client.close()


_PRODUCER_NUMBERS = itertools.count(1)


class ProducerUser(QueueUser):
    """Enqueues at ``--producer-rate`` jobs/s (deadline-based pacing: a slow call is caught up
    on, not silently lost), ``--batch`` jobs per round trip."""

    def on_start(self) -> None:
        super().on_start()
        self.sent = 0
        self.started = time.monotonic()
        options = self.options
        # docs/sut.md: {"handler_ms", "crash", "pad"}; each user its own seeded draws
        number = next(_PRODUCER_NUMBERS)
        self.payloads = PayloadMaker(HandlerDistribution(**json.loads(options.handler)),
                                     options.payload_bytes, hash((options.seed, number)))
        # branded ids: a node per producer user (the process's pid keeps Locust's worker
        # processes apart), so no two users mint one id in the same millisecond
        self.branded = BrandedIds((os.getpid() * 8 + number) % 1024) \
            if options.id_style == "branded" else None
        # [sut] producer: the user's own command enqueues, and mints the ids
        self.command = ProducerCommandClient(self.environment, options.producer_relay) \
            if options.producer_relay else None

    def on_stop(self) -> None:
        if self.command is not None:
            self.command.close()
        super().on_stop()

    def wait_time(self) -> float:
        rate = self.options.producer_rate
        if rate <= 0:
            return 0.0
        return max(0.0, self.started + self.sent / rate - time.monotonic())

    @task
    def enqueue(self) -> None:
        if self.branded is not None:
            batch = [(self.branded(), self.payloads.make()) for _ in range(self.options.batch)]
        else:
            batch = [(f"L{self.token}-{self.sent + i:08d}", self.payloads.make())
                     for i in range(self.options.batch)]
        self.sent += len(batch)
        (self.command or self.client).enqueue_batch(batch)


class ConsumerUser(QueueUser):
    """Claims a job, works on it (``--work-min-ms``..``--work-max-ms``, extending the lease every
    lease/3 while it works, like a worker's heartbeat), then completes it."""

    def on_start(self) -> None:
        super().on_start()
        self.worker_name = f"locust-{self.token}"
        self.rng = random.Random(self.token)

    def wait_time(self) -> float:
        return 0.0

    @task
    def work_one(self) -> None:
        options = self.options
        claimed = self.client.claim(options.lease_ms, self.worker_name)
        if claimed is None:
            time.sleep(options.poll_ms / 1000)  # gevent-patched: yields to other users
            return
        work_s = self.rng.uniform(options.work_min_ms, options.work_max_ms) / 1000
        heartbeat_s = options.lease_ms / 3 / 1000
        done_at = time.monotonic() + work_s
        while (left := done_at - time.monotonic()) > heartbeat_s:
            time.sleep(heartbeat_s)
            if self.client.extend(claimed.job_id, claimed.attempt, options.lease_ms,
                                  self.worker_name) is None:
                return  # the lease is gone: someone else owns the job now
        time.sleep(max(0.0, left))
        self.client.complete(claimed.job_id, claimed.attempt, self.worker_name)
