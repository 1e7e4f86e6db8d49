"""A Celery worker written the ordinary way (docs/celery.md, "An ordinary app"): the prefork
pool, late acks, and Celery's defaults for everything the SUT contract does not set: mingle,
gossip, heartbeats, remote control and task events on, no connection named (the recorder knows
each process by its ACL user). It logs each task as worker.py does (its log is what a verdict is
checked against):

    <unix ms> start id=<task id> worker=<name>
    <unix ms> finish id=<task id> worker=<name>

``--stop-sweeping-after-ms N``: a broken worker for the checker to catch: N ms after Celery says
it is ready, its restore_visible stops doing anything (no sweep, no restore), while it goes on
taking and finishing tasks."""

from __future__ import annotations

import argparse
import os
import signal
import time

os.environ["CELERY_SUT_ORDINARY"] = "1"  # chaos_celery builds the ordinary app

from celery import signals  # noqa: E402
from chaos_celery import app, milliseconds, register_handler, setting  # noqa: E402

NAME = setting("CHAOS_NAME")
# a poison pill takes its worker down, pool and all (its process group)
register_handler(lambda: os.killpg(os.getpgid(0), signal.SIGKILL))


def stop_sweeping_after(delay_ms: int) -> None:
    """Turn kombu's restore_visible into nothing ``delay_ms`` after the worker is ready."""
    from kombu.transport import redis as kombu_redis

    deadline: list[float] = []
    signals.worker_ready.connect(lambda **_: deadline.append(time.monotonic() + delay_ms / 1000),
                                 weak=False)
    restore_visible = kombu_redis.QoS.restore_visible

    def restore_unless_stopped(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if deadline and time.monotonic() >= deadline[0]:
            return None
        return restore_visible(self, *args, **kwargs)

    kombu_redis.QoS.restore_visible = restore_unless_stopped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-sweeping-after-ms", type=int, default=None)
    options = parser.parse_args()
    if options.stop_sweeping_after_ms is not None:
        stop_sweeping_after(options.stop_sweeping_after_ms)
    concurrency = milliseconds("CHAOS_CONCURRENCY", "1", minimum=1)
    app.worker_main(["worker", "--concurrency", str(concurrency),
                     "--loglevel", os.environ.get("CHAOS_CELERY_LOGLEVEL", "WARNING"),
                     "--queues", setting("CHAOS_QUEUE"), "--hostname", f"{NAME}@chaos"])


if __name__ == "__main__":
    main()
