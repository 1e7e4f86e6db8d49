"""One Celery worker process under test (docs/celery.md): the app of chaos_celery.py, a threads
pool of CHAOS_CONCURRENCY, late acks, on the queue CHAOS_QUEUE.

Its own log (stdout, one line each, flushed as it happens) is what a verdict is checked against:

    <unix ms> start id=<task id> worker=<name>
    <unix ms> finish id=<task id> worker=<name>

A payload is the contract's JSON ({"handler_ms": <int>, "crash": <bool>, "pad": "..."}): the task
sleeps handler_ms, or SIGKILLs its own process when crash is true (a poison pill)."""

from __future__ import annotations

import os
import signal

from chaos_celery import app, milliseconds, register_handler, setting

NAME = setting("CHAOS_NAME")
# a poison pill SIGKILLs its own process
register_handler(lambda: os.kill(os.getpid(), signal.SIGKILL))


def main() -> None:
    concurrency = milliseconds("CHAOS_CONCURRENCY", "1", minimum=1)
    app.worker_main(["worker", "--pool", "threads", "--concurrency", str(concurrency),
                     "--without-gossip", "--without-mingle", "--without-heartbeat",
                     "--loglevel", os.environ.get("CHAOS_CELERY_LOGLEVEL", "WARNING"),
                     "--queues", setting("CHAOS_QUEUE"), "--hostname", f"{NAME}@chaos"])


if __name__ == "__main__":
    main()
