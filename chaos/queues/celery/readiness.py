"""When a Celery worker is started (chaos.history.readiness): at its consumer loop's first
BRPOP on the queue's list. Not at its first restore: a worker with mingle on (Celery's default)
restores once while mingle waits a second for its peers' replies, before its loop runs, and a
BRPOP on mingle's reply queue is no work on this queue either."""

from __future__ import annotations

from typing import Any

from chaos.history.dialects import Call, Decoded


def ready_action(dialect: Any, call: Call, decoded: Decoded) -> str | None:
    """The call as a Celery worker's first queue action, or None (``dialect``: the run's
    ``Celery`` decoder, which knows the queue's keys)."""
    args = call.args
    if args and args[0].upper() == "BRPOP" and any(dialect._is_queue(key) for key in args[1:-1]):
        return f"BRPOP {dialect.queue_key}"
    return None
