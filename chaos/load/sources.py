"""The load source of a run: the built-in producer (a thread) or Locust (a subprocess).

Both enqueue ``load.rate`` jobs/s from warmup until the heal phase and end with the same summary,
``report.json["load"]``::

    {"engine": "locust" | "builtin", "users": int,
     "operations": {"enqueue" | "claim" | "complete" | "extend":
                    {"requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms"}},
     "files": [raw Locust CSV/HTML/JSON in the run directory]}

Locust runs with its own CLI on ``loadtests/queue.py`` (gevent never enters the runner process),
headless, and is stopped with SIGINT, on which it writes its final statistics. The figures come
from its ``--json-file`` (written at shutdown, so exact); its CSV, written every second, is the
fallback and stays in the run directory with the HTML report.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import TimeoutError as StoreTimeoutError

from chaos.errors import InfraError
from chaos.lifeline import toolkit_python
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import POISON, QueueClient, QueueKeys
from chaos.protocol.ids import plain_id
from chaos.reference.payload import HandlerDistribution, PayloadMaker
from chaos.scenario.model import Handler, Load

if TYPE_CHECKING:
    from chaos.runtime.base import Child, RuntimeBase

OPERATIONS = ("enqueue", "claim", "complete", "extend")
WORKERS_SUFFIX = "_workers.json"  # the master's account of its remote workers
# The master's log line as each worker connects ("... N workers connected.")
_WORKERS_CONNECTED = re.compile(r"(\d+) workers? connected")
LOCUST_PREFIX = "locust"  # raw files: locust_stats.csv, locust.html, locust.json, ...
LOCUST_STOP_TIMEOUT_S = 20.0


class LoadSource(Protocol):
    def start(self) -> None: ...
    def request_stop(self) -> None: ...
    def stop(self) -> None: ...
    @property
    def enqueued(self) -> int | None: ...  # acknowledged so far, when known live
    def summary(self) -> dict[str, Any]: ...
    def describe(self) -> dict[str, Any]: ...  # report.json["run"]["load"]: what it was, sent


def percentile_of_histogram(histogram: dict[int, int], fraction: float) -> float:
    """The response time at ``fraction`` of a {ms: count} histogram, the way Locust computes
    its percentiles (so our figures and its HTML report agree)."""
    total = sum(histogram.values())
    if total == 0:
        return 0.0
    wanted = int(total * fraction)
    seen = 0
    for value in sorted(histogram, reverse=True):
        seen += histogram[value]
        if total - seen <= wanted:
            return float(value)
    return float(min(histogram))


def _locust_bucket(ms: float) -> int:
    """Locust's response-time resolution: 1 ms below 100 ms, 10 ms below 1 s, then 100 ms."""
    if ms < 100:
        return round(ms)
    if ms < 1000:
        return int(round(ms, -1))
    return int(round(ms, -2))


def operation_figures(requests: int, failures: int, seconds: float,
                      histogram: dict[int, int]) -> dict[str, Any]:
    return {
        "requests": requests,
        "failures": failures,
        "rps": round(requests / seconds, 2) if seconds > 0 else 0.0,
        "p50_ms": percentile_of_histogram(histogram, 0.50),
        "p95_ms": percentile_of_histogram(histogram, 0.95),
        "p99_ms": percentile_of_histogram(histogram, 0.99),
    }


def fold_locust_json(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-operation figures from Locust's ``--json-file`` (one entry per request name)."""
    operations: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = entry.get("name")
        if name not in OPERATIONS:
            continue
        seconds = float(entry.get("last_request_timestamp") or 0) - float(
            entry.get("start_time") or 0)
        histogram = {int(float(ms)): int(count)
                     for ms, count in (entry.get("response_times") or {}).items()}
        operations[name] = operation_figures(int(entry["num_requests"]),
                                             int(entry["num_failures"]), seconds, histogram)
    return operations


def fold_locust_csv(path: Path) -> dict[str, dict[str, Any]]:
    """Per-operation figures from Locust's ``_stats.csv`` (the fallback: rewritten every second,
    so it may miss the last second of a run)."""
    operations: dict[str, dict[str, Any]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("Name") not in OPERATIONS:
                continue
            operations[row["Name"]] = {
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "rps": round(float(row["Requests/s"]), 2),
                "p50_ms": float(row["50%"]),
                "p95_ms": float(row["95%"]),
                "p99_ms": float(row["99%"]),
            }
    return operations


def locust_summary(run_dir: Path, users: int, prefix: str = LOCUST_PREFIX) -> dict[str, Any]:
    """``report.json["load"]`` from the raw files a Locust run left in ``run_dir``."""
    json_path = run_dir / f"{prefix}.json"
    csv_path = run_dir / f"{prefix}_stats.csv"
    operations: dict[str, dict[str, Any]] = {}
    if json_path.exists() and json_path.stat().st_size:
        operations = fold_locust_json(json.loads(json_path.read_text()))
    elif csv_path.exists():
        operations = fold_locust_csv(csv_path)
    files = sorted(path.name for path in run_dir.glob(f"{prefix}*") if path.is_file())
    summary = {"engine": "locust", "users": users, "operations": operations, "files": files}
    workers_path = run_dir / f"{prefix}{WORKERS_SUFFIX}"
    if workers_path.exists():  # remote workers: what each did, and which were lost
        try:
            workers = json.loads(workers_path.read_text())
        except ValueError:
            workers = {"error": f"{workers_path.name} is not readable JSON"}
        summary["remote_workers"] = workers
    return summary


def locustfile() -> Path:
    """``loadtests/queue.py``, found where the ``loadtests`` package is installed."""
    spec = importlib.util.find_spec("loadtests")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the loadtests package is not installed (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations))) / "queue.py"


def locust_argv(load: Load, url: str, keys: QueueKeys, lease_ms: int, protocol: str,
                out_prefix: Path, extra: list[str] | None = None,
                handler: Handler | None = None, seed: int = 1) -> list[str]:
    """Locust's own CLI for a headless run of ``load`` (no password: that goes in the env),
    started as ``python -P -m loadtests`` (loadtests/__main__.py: on the runner's toolkit, not a
    ``chaos/`` in the working directory). ``extra``: more locustfile options
    (``--wait-replicas``, ``--ack-ledger-dir`` ...)."""
    producers, consumers = load.producers, load.consumers
    argv = [
        *toolkit_python("-m", "loadtests"), "-f", str(locustfile()), "--headless",
        "--host", url, "-u", str(load.users), "-r", str(load.spawn_rate),
        "--csv", str(out_prefix), "--html", f"{out_prefix}.html",
        "--json-file", str(out_prefix), "--only-summary", "--stop-timeout", "5",
        "--queue-prefix", keys.prefix, "--queue-name", keys.queue, "--protocol", protocol,
        "--producers", str(producers), "--consumers", str(consumers),
        "--producer-rate", str(load.rate / producers), "--batch", str(load.batch),
        "--payload-bytes", str(load.payload_bytes), "--lease-ms", str(lease_ms),
        "--work-min-ms", str(load.work_min_ms), "--work-max-ms", str(load.work_max_ms),
        "--handler", json.dumps((handler or Handler()).model_dump()), "--seed", str(seed),
    ]
    if load.processes > 1:
        argv += ["--processes", str(load.processes)]
    if load.remote_workers:  # a master only: the users run on the workers that connect
        host, port = load.master_address
        argv += ["--master", "--master-bind-host", host, "--master-bind-port", str(port),
                 "--expect-workers", str(load.remote_workers),
                 "--expect-workers-max-wait", str(math.ceil(load.remote_wait_s))]
    argv += extra or []
    argv += ["ProducerUser"] + (["ConsumerUser"] if consumers else [])
    return argv


class LocustLoad:
    """Locust as a child of the runtime (torn down with the others on every exit path)."""

    def __init__(self, runtime: RuntimeBase, load: Load, keys: QueueKeys, lease_ms: int,
                 protocol: str, run_dir: Path, name: str = "locust",
                 prefix: str = LOCUST_PREFIX, ready: QueueClient | None = None,
                 id_style: str = "plain") -> None:
        self.runtime = runtime
        self.id_style = id_style  # the job ids its producer users mint (chaos.protocol.ids)
        self.load = load
        self.keys = keys
        self.lease_ms = lease_ms
        self.protocol = protocol
        self.run_dir = run_dir
        self.name = name
        self.prefix = prefix
        self.ready = ready  # when given, start() returns once Locust's first job is in
        self.say: Callable[[str], None] = lambda message: None  # progress lines
        self.child: Child | None = None
        self.exit_code: int | None = None

    @property
    def enqueued(self) -> int | None:
        return None  # Locust's figures arrive when it stops

    def locust_options(self) -> list[str]:
        """The locustfile's options beyond the load's own. The same evidence as the built-in
        producer's: WAIT if asked, and an ack ledger (acks/locust-<pid>.jsonl, one per Locust
        process; remote workers write theirs on their own host, where that directory
        exists)."""
        return ["--wait-replicas", str(self.runtime.scenario.wait_replicas),
                "--ack-ledger-dir", str(self.runtime.ack_ledger_path("locust").parent),
                "--id-style", self.id_style]

    def start(self) -> None:
        scenario = self.runtime.scenario
        argv = locust_argv(self.load, self.runtime.url, self.keys, self.lease_ms, self.protocol,
                           self.run_dir / self.prefix, self.locust_options(),
                           scenario.topology.handler, scenario.seed)
        self.child = self.runtime.spawn(self.name, argv)
        if self.load.remote_workers:
            self.wait_for_workers()
        if self.ready is not None:
            self.wait_until_enqueuing(self.ready)

    def wait_for_workers(self) -> None:
        """Until every remote worker has connected to the master (bounded by
        ``load.remote_wait_s``), saying how many have as they come."""
        assert self.child is not None
        wanted, host_port = self.load.remote_workers, self.load.master_bind
        log = self.run_dir / "logs" / f"{self.name}.log"
        self.say(f"locust master at {host_port}: waiting for {wanted} remote worker(s) "
                 f"(locust -f {locustfile()} --worker --master-host HOST --master-port "
                 f"{self.load.master_address[1]})")
        deadline = time.monotonic() + self.load.remote_wait_s + 5
        seen = 0
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            connected = max((int(n) for n in _WORKERS_CONNECTED.findall(text)), default=0)
            if connected != seen:
                seen = connected
                self.say(f"locust master: {seen} of {wanted} remote worker(s) connected")
            if seen >= wanted:
                return
            if not self.child.alive:
                raise InfraError(f"locust master exited waiting for its workers (code "
                                 f"{self.child.process.returncode}); its log ends:\n"
                                 f"{text[-2000:]}")
            time.sleep(0.1)
        raise InfraError(f"only {seen} of {wanted} remote Locust worker(s) connected to "
                         f"{host_port} within {self.load.remote_wait_s:g}s (load.remote_wait_s)")

    def wait_until_enqueuing(self, queue: QueueClient, timeout: float = 60.0) -> None:
        """Block until Locust's first job is in (its start-up takes a second or more), so a
        phase timed after ``start()`` has load all along."""
        from chaos.errors import InfraError

        assert self.child is not None
        # An enqueue event, not any new event: the reapers' sweeps go on meanwhile.
        newest = queue.client.xrevrange(self.keys.events, count=1)
        after = newest[0][0] if newest else "0-0"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive:
                log = (self.run_dir / "logs" / f"{self.name}.log").read_text(errors="replace")
                raise InfraError(f"locust exited during start-up (code "
                                 f"{self.child.process.returncode}); its log ends:\n"
                                 f"{log[-2000:]}")
            entries = queue.client.xrange(self.keys.events, min=f"({_as_text(after)}",
                                          count=1000)
            if any(_as_text(fields.get("type", fields.get(b"type", ""))) == "enqueue"
                   for _, fields in entries):
                return
            if entries:
                after = entries[-1][0]
            time.sleep(0.05)
        raise InfraError(f"locust enqueued nothing within {timeout:.0f}s "
                         f"(see logs/{self.name}.log)")

    def request_stop(self) -> None:
        """SIGINT: Locust stops its users, writes its reports and exits (see ``stop``)."""
        if self.child is None:
            return
        self.child.expected_exit = True
        if self.child.alive:
            self.child.process.send_signal(signal.SIGINT)

    def stop(self) -> None:
        if self.child is None:
            return
        self.request_stop()
        try:
            self.exit_code = self.child.process.wait(timeout=LOCUST_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            from chaos.runtime.base import kill_group

            kill_group(self.child.process)
            self.exit_code = self.child.process.wait()

    def summary(self) -> dict[str, Any]:
        return locust_summary(self.run_dir, self.load.users, self.prefix)

    def describe(self) -> dict[str, Any]:
        return {"target_rate": self.load.rate, "engine": "locust", "poison_sent": 0}


def payload_maker(handler: Handler, load: Load, seed: int) -> PayloadMaker:
    """The payloads of a scenario's jobs (chaos.reference.payload), seeded by its seed."""
    return PayloadMaker(HandlerDistribution(**handler.model_dump()), load.payload_bytes, seed)


class Producer:
    """The built-in producer: enqueues at ``load.rate`` jobs/s in a background thread.

    Pacing is deadline-based (job i is due at start + i / rate), so a slow call is caught up on
    rather than silently lowering the rate.
    """

    def __init__(self, queue: QueueClient, load: Load, ledger: AckLedger | None = None,
                 payloads: PayloadMaker | None = None,
                 job_id: Callable[[int], str] = plain_id) -> None:
        self.queue = queue
        self.load = load
        self.job_id = job_id  # the id of the n-th job, as the queue under test accepts it
        # docs/sut.md: each job says how long its handler works and whether it crashes
        self.payloads = payloads or payload_maker(Handler(), load, 1)
        self.ledger = ledger or AckLedger(None)  # every acknowledged enqueue (chaos.check.ledger)
        self.enqueued = 0  # acknowledged by the server
        self.errors = 0
        self.latency_ms: dict[int, int] = {}  # Locust-style histogram, for the same figures
        self.poisoned = 0  # poison jobs sent (Load.poison_fraction, poison_jobs)
        self.failure = ""  # why it stopped early, if its enqueue path failed for good
        self._started: float | None = None
        self._stopped: float | None = None
        self._stop = threading.Event()
        self.first_answered = threading.Event()  # its first enqueue came back, whatever it said
        self._thread = threading.Thread(target=self._loop, name="producer", daemon=True)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._started is not None and self._stopped is None:
            self._stopped = time.monotonic()
        self.ledger.close()

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
            began = time.perf_counter()
            poison = self.load.is_poison(sent, self.poisoned)
            self.poisoned += poison
            try:
                job_id = self.job_id(sent)
                accepted = self.queue.enqueue(job_id, self.payloads.make(crash=poison),
                                              kind=POISON if poison else "")
                if accepted:
                    # a queue that mints its own ids (a producer command) says which
                    self.ledger.record("enqueue", accepted if isinstance(accepted, str)
                                       else job_id)
                    self.enqueued += 1
                else:
                    self.errors += 1
            except (StoreConnectionError, StoreTimeoutError, OSError):
                self.errors += 1
            except InfraError as failure:  # the enqueue path itself is gone: stop, say why
                self.errors += 1
                self.failure = str(failure)
                print(f"!! producer stopped: {failure}", file=sys.stderr)
                return
            bucket = _locust_bucket((time.perf_counter() - began) * 1000)
            self.latency_ms[bucket] = self.latency_ms.get(bucket, 0) + 1
            if sent == 1:
                # The pace counts from the first answer: an enqueue path that took a second to
                # start (a producer command's own start-up) is not caught up on in a burst.
                start = time.monotonic()
                self.first_answered.set()

    def summary(self) -> dict[str, Any]:
        seconds = 0.0
        if self._started is not None:
            seconds = (self._stopped or time.monotonic()) - self._started
        figures = operation_figures(self.enqueued + self.errors, self.errors, seconds,
                                    dict(self.latency_ms))
        return {"engine": "builtin", "users": 1, "operations": {"enqueue": figures},
                "files": []}

    def describe(self) -> dict[str, Any]:
        return {"target_rate": self.load.rate, "engine": "builtin", "poison_sent": self.poisoned}


def _as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
