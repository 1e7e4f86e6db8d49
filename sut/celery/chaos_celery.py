"""The Celery 5 app under test (docs/celery.md): Valkey as the broker through kombu's redis://
transport, every setting from the SUT contract's environment (docs/sut.md).

    CHAOS_VALKEY_URL        redis:// URL, this process's own ACL user when it has one
    CHAOS_NAME              member name (worker-2): the client name of every connection
                            (not in the ordinary app of plain_worker.py)
    CHAOS_QUEUE             the Celery queue (kombu's list key)
    CHAOS_PREFIX            kombu's global_keyprefix (every key it writes starts with it)
    CHAOS_LEASE_MS          -> visibility_timeout (s): a reservation's age at which any
                               worker's restore puts it back on the queue
    CHAOS_REAP_INTERVAL_MS  -> unacked_restore_interval (s), with unacked_restore_throttle 1:
                               each worker's event loop restores every that often
    CHAOS_HEARTBEAT_MS      must be 0: Celery never renews a reservation
    CHAOS_REAP_LIMIT        -> unacked_restore_limit (messages restored a sweep; 0 = all)
    CHAOS_CONCURRENCY       -> the threads pool's concurrency (prefetch multiplier 1)
    CHAOS_MUTEX_EXPIRE_MS   -> unacked_mutex_expire (s); default: the restore interval, so a
                               worker killed inside its sweep bars the others one sweep at most
    CELERY_SUT_RESTORE_THROTTLE  unacked_restore_throttle, 1 unless set: for measuring what
                               kombu's default (10) does to the bound (benchmarks/celery_restore.py;
                               outside the contract, so the runner passes it through)

A setting this app cannot honour ends it with exit 3 and the reason on stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

from celery import Celery


def fail(message: str) -> None:
    sys.stderr.write(f"celery sut: {message}\n")
    sys.exit(3)


def setting(name: str, fallback: str | None = None) -> str:
    value = os.environ.get(name, "")
    if value == "":
        if fallback is None:
            fail(f"{name} is not set")
        return str(fallback)
    return value


def milliseconds(name: str, fallback: str | None = None, minimum: int = 0) -> int:
    raw = setting(name, fallback)
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        fail(f"{name}={raw!r}: expected an integer >= {minimum}")
    return value


def make_app(ordinary: bool = False) -> Celery:
    """The app; ``ordinary``: as its users write one (plain_worker.py): no connection named,
    remote control and task events on, Celery's defaults for all the contract does not set."""
    lease_ms = milliseconds("CHAOS_LEASE_MS", minimum=1)
    interval_ms = milliseconds("CHAOS_REAP_INTERVAL_MS", minimum=1)
    if milliseconds("CHAOS_HEARTBEAT_MS", "0") != 0:
        fail(f"CHAOS_HEARTBEAT_MS={os.environ['CHAOS_HEARTBEAT_MS']}: Celery never renews a "
             "reservation (visibility_timeout counts from delivery); set heartbeat_ms = 0")
    if milliseconds("CHAOS_MAX_STALLS", "0") != 0:
        fail("CHAOS_MAX_STALLS: Celery restores a message however often it was restored")
    limit = milliseconds("CHAOS_REAP_LIMIT", "0")
    mutex_ms = milliseconds("CHAOS_MUTEX_EXPIRE_MS", str(interval_ms), minimum=1)
    queue = setting("CHAOS_QUEUE")
    options: dict[str, object] = {
        "visibility_timeout": lease_ms / 1000,
        "unacked_restore_interval": interval_ms / 1000,
        "unacked_restore_throttle": int(os.environ.get("CELERY_SUT_RESTORE_THROTTLE", "1")),
        "unacked_mutex_expire": mutex_ms / 1000,
        "global_keyprefix": os.environ.get("CHAOS_PREFIX", ""),
    }
    if not ordinary:
        options["client_name"] = setting("CHAOS_NAME")
    if limit:
        options["unacked_restore_limit"] = limit
    app = Celery("chaos_celery", broker=setting("CHAOS_VALKEY_URL"))
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue,
        broker_transport_options=options,
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
    )
    if not ordinary:
        app.conf.update(
            worker_enable_remote_control=False,  # no pidbox: only the queue's own traffic
            worker_send_task_events=False,
        )
    return app


# The ordinary app's worker (plain_worker.py) sets this before it imports the module.
app = make_app(ordinary=os.environ.get("CELERY_SUT_ORDINARY") == "1")


def register_handler(crash: Callable[[], None]) -> None:
    """The task the producer sends (``chaos.handle``), for a worker of either app: it logs
    ``<unix ms> start|finish id=<task id> worker=<name>`` (its log is what a verdict is checked
    against), sleeps the payload's handler_ms, and calls ``crash`` for a poison pill."""
    name = setting("CHAOS_NAME")

    def log(word: str, task_id: str) -> None:
        # os.write: one line in one call, from any pool thread or process (Celery redirects
        # sys.stdout)
        os.write(1, f"{int(time.time() * 1000)} {word} id={task_id} worker={name}\n".encode())

    @app.task(name="chaos.handle", bind=True)
    def handle(self, payload: str) -> None:  # type: ignore[no-untyped-def]
        task_id = self.request.id
        log("start", task_id)
        job = json.loads(payload)
        if job.get("crash"):
            crash()
        time.sleep(int(job.get("handler_ms", 0)) / 1000)
        log("finish", task_id)
