"""Adding jobs to a real BullMQ queue from Python: ``sut/bullmq/producer.js`` (BullMQ's own
``Queue.add``, hence its own ``addStandardJob`` script) as a child process, fed over pipes.

Why not the PyPI port of BullMQ: it ships its own copies of the Lua scripts, released on its own
schedule, so the add script it runs is not necessarily the one the workers' package has
(docs/bullmq.md). One Node process serves a whole Python process (the built-in producer, or
every user of one Locust process): calls are serialised under a lock, each waits for the
server's acknowledgement, and a batch is written at once and its replies read in order.

``BullMQQueue.enqueue`` has the built-in producer's signature (``chaos.load.sources.Producer``
calls ``queue.enqueue(job_id, payload)`` / ``enqueue(job_id, POISON, kind=POISON)``). A job's data
is the SUT contract's payload: a payload that is already a JSON object is sent as it is; any
other payload becomes ``{"handler_ms": default_handler_ms, "crash": <poison>, "pad": payload}``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import chaos
from chaos.errors import InfraError
from chaos.load.sources import LocustLoad, Producer
from chaos.load.sources import locust_argv as echomq_locust_argv
from chaos.protocol.client import QueueClient

POISON_KIND = "poison"


def sut_dir() -> Path:
    """``sut/bullmq`` of this checkout (the package is installed editable, with the repo)."""
    return Path(chaos.__file__).resolve().parent.parent / "sut" / "bullmq"


class BullMQUnavailable(InfraError):
    """Node or the installed bullmq package is missing, or the producer would not start (an
    infrastructure error: exit code 3)."""


def require_installed(folder: Path | None = None) -> Path:
    """The folder the workers run from (a scenario's ``[sut] cwd``; ``sut/bullmq`` by
    default), after checking node is on PATH, ``npm ci`` was run there and it holds
    ``producer.js``: the jobs go in through the workers' own bullmq package."""
    folder = folder or sut_dir()
    if shutil.which("node") is None:
        raise BullMQUnavailable("node is not on PATH (BullMQ runs on Node >= 18)")
    if not (folder / "node_modules" / "bullmq" / "package.json").exists():
        raise BullMQUnavailable(f"{folder}/node_modules has no bullmq: run "
                                f"`npm ci --prefix {folder}`")
    if not (folder / "producer.js").is_file():
        raise BullMQUnavailable(f"{folder} has no producer.js (the jobs are added through the "
                                f"workers' own bullmq): copy {sut_dir() / 'producer.js'} there")
    return folder


def job_data(payload: str, kind: str = "", default_handler_ms: int = 0) -> dict[str, Any]:
    """The job data BullMQ stores for a payload (see the module's docstring)."""
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    if isinstance(data, dict):
        if kind == POISON_KIND:
            data["crash"] = True
        return data
    return {"handler_ms": default_handler_ms, "crash": kind == POISON_KIND, "pad": payload}


class BullMQQueue:
    """A running ``producer.js`` on one BullMQ queue. ``url``: a redis:// URL with credentials
    (never logged); ``name``: the connection's client name."""

    def __init__(self, url: str, queue: str, prefix: str, name: str = "producer",
                 default_handler_ms: int = 0, folder: Path | None = None,
                 start_timeout_s: float = 30.0,
                 job_options: dict[str, Any] | None = None) -> None:
        folder = require_installed(folder)
        self.default_handler_ms = default_handler_ms
        # BullMQ's own job options for every add (e.g. attempts and backoff: retries)
        self.job_options = dict(job_options or {})
        env = {**os.environ, "CHAOS_VALKEY_URL": url, "CHAOS_QUEUE": queue,
               "CHAOS_PREFIX": prefix, "CHAOS_NAME": name}
        # Its errors go to a file (a pipe nobody drains would stall it once full). It exits
        # when its stdin closes, so it never outlives this process.
        self._errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            ["node", str(folder / "producer.js")], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._errors, text=True, bufsize=1,
            start_new_session=True)
        self._lock = threading.Lock()
        ready = self._read_line(start_timeout_s)
        if ready.get("ready") is not True:
            error = self._stderr_tail()
            self.close()
            raise BullMQUnavailable(f"the bullmq producer did not start: {error or ready}")

    def _read_line(self, timeout_s: float | None = None) -> dict[str, Any]:
        assert self.process.stdout is not None
        if timeout_s is not None:
            timer = threading.Timer(timeout_s, self.process.kill)
            timer.start()
        try:
            line = self.process.stdout.readline()
        finally:
            if timeout_s is not None:
                timer.cancel()
        if not line:
            raise BullMQUnavailable(f"the bullmq producer exited (code {self.process.poll()}): "
                                    f"{self._stderr_tail()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _stderr_tail(self) -> str:
        self._errors.seek(0)
        return self._errors.read()[-2000:].strip()

    def enqueue(self, job_id: str, payload: str, kind: str = "") -> bool:
        """Add one job; True once the server acknowledged it."""
        return job_id in self.enqueue_batch([(job_id, payload)], kind)

    def enqueue_batch(self, jobs: list[tuple[str, str]], kind: str = "") -> list[str]:
        """Add jobs in one write; the ids the server acknowledged, in order."""
        requests = "".join(
            json.dumps({"id": job_id,
                        "data": job_data(payload, kind, self.default_handler_ms),
                        **({"opts": self.job_options} if self.job_options else {})}) + "\n"
            for job_id, payload in jobs)
        with self._lock:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(requests)
                self.process.stdin.flush()
            except (BrokenPipeError, OSError) as error:
                raise BullMQUnavailable(f"the bullmq producer is gone: {error}") from error
            replies = [self._read_line() for _ in jobs]
        return [reply["id"] for reply in replies if reply.get("ok")]

    def close(self) -> None:
        """End the producer (it finishes the adds in flight, then exits)."""
        if self.process.poll() is None:
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._errors.close()


def locust_argv(echomq_argv: list[str]) -> list[str]:
    """``chaos.load.sources.locust_argv``'s command line, for BullMQ: the same options (rate,
    batch, handler times, ledger), ``loadtests/bullmq.py`` as the locustfile and its producer user
    instead of the echomq users (BullMQ's workers are the consumers)."""
    argv = list(echomq_argv)
    index = argv.index("-f") + 1
    argv[index] = str(Path(argv[index]).with_name("bullmq.py"))
    return [arg for arg in argv if arg not in ("ProducerUser", "ConsumerUser")] + [
        "BullMQProducerUser"]


def queue_key(prefix: str, queue: str, suffix: str) -> str:
    """A BullMQ key: ``<prefix>:<queue>:<suffix>`` (a trailing ":" of the prefix dropped, as
    ``sut/bullmq`` does)."""
    return f"{prefix.rstrip(':') or 'bull'}:{queue}:{suffix}"


def backlog(client: Any, prefix: str, queue: str) -> tuple[int, int]:
    """(waiting, active) of a BullMQ queue: what the drain waits for (waiting counts the wait,
    paused, prioritized and delayed jobs)."""
    def key(suffix: str) -> str:
        return queue_key(prefix, queue, suffix)

    pipe = client.pipeline(transaction=False)
    pipe.llen(key("wait"))
    pipe.llen(key("paused"))
    pipe.zcard(key("prioritized"))
    pipe.zcard(key("delayed"))
    pipe.llen(key("active"))
    wait, paused, prioritized, delayed, active = pipe.execute()
    return int(wait) + int(paused) + int(prioritized) + int(delayed), int(active)


def jobs_added(client: Any, prefix: str, queue: str) -> int:
    """How many adds the queue has seen: every add script INCRs ``<queue>:id``, custom ids
    included (what a load source's 'first job is in' wait can watch)."""
    return int(client.get(queue_key(prefix, queue, "id")) or 0)


def holders_oldest_first(client: Any, prefix: str, queue: str, limit: int = 100) -> list[str]:
    """Workers holding BullMQ's ``limit`` longest-held jobs, oldest first (repeats kept): the
    active list grows at its head, so its tail is the oldest; a job's holder is its ``pb``
    (processedBy, the worker's name)."""
    oldest = list(reversed(client.lrange(queue_key(prefix, queue, "active"), -limit, -1)))
    if not oldest:
        return []
    pipe = client.pipeline(transaction=False)
    for job_id in oldest:
        pipe.hget(queue_key(prefix, queue, str(job_id)), "pb")
    return [str(holder) for holder in pipe.execute() if holder]


class BullMQFaultHistory:
    """What the nemesis needs (``chaos.faults.nemesis.HistoryWriter``) for a BullMQ queue: the
    runner's events recorded as always (``record``: the echomq record script, which the bullmq
    dialect decodes too), and the holders of BullMQ's oldest jobs for ``holding_oldest_lease``."""

    def __init__(self, recorder: Any, client: Any, prefix: str, queue: str) -> None:
        self.recorder = recorder  # a chaos.protocol.client.QueueClient
        self.client, self.prefix, self.queue = client, prefix, queue

    def record(self, **fields: object) -> int:
        stamp: int = self.recorder.record(**fields)
        return stamp

    def lease_holders_oldest_first(self) -> list[str]:
        return holders_oldest_first(self.client, self.prefix, self.queue)


# --- the runner's load sources for a BullMQ SUT -------------------------------------------------


def admin_url(url: str, password: str | None) -> str:
    """The run's server URL (``valkey://host:port/db``) as Node's client takes it, with the
    password (handed to ``producer.js`` through its environment, never a command line)."""
    from urllib.parse import quote

    rest = url.split("://", 1)[1]
    return f"redis://:{quote(password, safe='')}@{rest}" if password else f"redis://{rest}"


class BullMQProducer(Producer):
    """The built-in producer, adding through ``producer.js``: ``Producer`` only calls
    ``queue.enqueue(job_id, payload, kind=...)``, which ``BullMQQueue`` has."""

    def __init__(self, bullmq: BullMQQueue, *args: Any, **kwargs: Any) -> None:
        from typing import cast

        super().__init__(cast(QueueClient, bullmq), *args, **kwargs)
        self.bullmq = bullmq

    def stop(self) -> None:
        super().stop()
        self.bullmq.close()


class BullMQLocustLoad(LocustLoad):
    """Locust with ``loadtests/bullmq.py``'s producer users; ready once BullMQ counts an add."""

    def start(self) -> None:
        scenario = self.runtime.scenario
        extra = ["--wait-replicas", str(scenario.wait_replicas),
                 "--ack-ledger-dir", str(self.runtime.ack_ledger_path("locust").parent),
                 "--bullmq-dir", str(require_installed(Path(scenario.sut.cwd)))]
        argv = locust_argv(echomq_locust_argv(
            self.load, self.runtime.url, self.keys, self.lease_ms, self.protocol,
            self.run_dir / self.prefix, extra, scenario.topology.handler, scenario.seed))
        # the adds so far: a queue that already had adds (capacity's earlier steps) must see
        # this Locust's own first one
        before = (jobs_added(self.ready.client, self.keys.prefix, self.keys.queue)
                  if self.ready is not None else 0)
        self.child = self.runtime.spawn(self.name, argv)
        if self.ready is not None:
            self.wait_until_enqueuing(self.ready, before=before)

    def wait_until_enqueuing(self, queue: QueueClient, timeout: float = 60.0,
                             before: int = 0) -> None:
        """Block until BullMQ counts an add beyond ``before`` (Locust's start-up takes a second
        or more), so a phase timed after ``start()`` has load all along."""
        import time

        from chaos.errors import InfraError

        assert self.child is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive:
                log = (self.run_dir / "logs" / f"{self.name}.log").read_text(errors="replace")
                raise InfraError(f"locust exited during start-up; its log ends:\n{log[-2000:]}")
            if jobs_added(queue.client, self.keys.prefix, self.keys.queue) > before:
                return
            time.sleep(0.05)
        raise InfraError(f"locust added nothing within {timeout:.0f}s (logs/{self.name}.log)")
