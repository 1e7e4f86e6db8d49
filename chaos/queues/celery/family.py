"""Celery under test (docs/celery.md): kombu's keys, its backlog, the holders the recorder saw
reserve, and every worker as a restorer (kombu runs restore_visible in each worker's loop)."""

from __future__ import annotations

from typing import Any

from chaos.family import QueueFamily, RecordedHolders
from chaos.faults.nemesis import HistoryWriter
from chaos.protocol.client import QueueClient
from chaos.queues.celery.dialect import PRIORITY_SEP

# The nemesis's view through the recorder, as for EchoMQ: the holders the dialect saw reserve

# kombu's default priority steps: a queue's lists are <queue> and <queue>\x06\x16<n>
PRIORITY_STEPS = (3, 6, 9)


class CeleryFamily(QueueFamily):
    name = "celery"

    @property
    def key_base(self) -> str:
        return self.keys.prefix

    @property
    def key_layout(self) -> str:
        """kombu's keys: no hash tag, no common stem beyond the prefix (docs/celery.md)."""
        prefix, queue = self.keys.prefix, self.keys.queue
        return (f"{prefix}{queue} (and its priority lists {prefix}{queue}\\x06\\x16<n>), "
                f"{prefix}unacked, {prefix}unacked_index, {prefix}unacked_mutex (kombu's)")

    def queue_lists(self) -> list[str]:
        base = self.keys.prefix + self.keys.queue
        return [base, *(f"{base}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS)]

    @property
    def sweepers(self) -> tuple[str, ...]:
        """Every worker: each runs restore_visible every unacked_restore_interval (the mutex
        turns one away while another's runs)."""
        return tuple(self.scenario.worker_names) + tuple(self.scenario.reaper_names)

    def backlog(self, queue: QueueClient) -> tuple[int, int]:
        """(waiting, reserved): the queue's lists, and the unacked hash."""
        pipe = queue.client.pipeline(transaction=False)
        for key in self.queue_lists():
            pipe.llen(key)
        pipe.hlen(self.keys.prefix + "unacked")
        *waiting, reserved = pipe.execute()
        return sum(int(count) for count in waiting), int(reserved)

    def fresh_backlog(self, queue: QueueClient) -> int:
        """kombu puts a restored message back on the list like a new one: every waiting one."""
        return self.backlog(queue)[0]

    def reaping_workers(self) -> str:
        return "Celery's workers are its only restorers (kombu has no reaper process)"

    def lease_holders(self, queue: QueueClient, recorder: Any) -> HistoryWriter:
        return RecordedHolders(queue, recorder.dialect, recorder.read_through)
