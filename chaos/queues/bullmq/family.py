"""Real BullMQ under test (docs/bullmq.md): its own keys, its own add script (through the
``producer.js`` of the scenario's ``[sut] cwd``, ``sut/bullmq`` in the shipped scenarios), its own
backlog and lock holders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.family import QueueFamily
from chaos.faults.nemesis import HistoryWriter
from chaos.load.sources import LoadSource, LocustLoad, payload_maker
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import QueueClient
from chaos.queues.bullmq.dialect import bullmq_base
from chaos.queues.bullmq.load import (
    BullMQFaultHistory,
    BullMQLocustLoad,
    BullMQProducer,
    BullMQQueue,
    admin_url,
    backlog,
)
from chaos.runtime.base import RuntimeBase
from chaos.scenario.model import Load


class BullMQFamily(QueueFamily):
    name = "bullmq"
    renewal_off_refused = ("BullMQ always renews its locks: heartbeat_ms = 0 gives "
                           "lockRenewTime = lockDuration / 2 (its default), not 'off'; sweep "
                           "values in ms instead")

    def producer(self, runtime: RuntimeBase, load: Load) -> LoadSource:
        if self.scenario.sut.producer is not None:  # the user's own enqueue path
            return super().producer(runtime, load)
        # producer.js from the folder the workers run from: their own bullmq adds the jobs
        return BullMQProducer(
            BullMQQueue(admin_url(runtime.url, runtime.password), self.keys.queue,
                        self.keys.prefix, folder=Path(self.scenario.sut.cwd)),
            load, AckLedger(runtime.ack_ledger_path("producer")),
            payload_maker(self.scenario.topology.handler, load, self.scenario.seed))

    def locust_load(self, runtime: RuntimeBase, load: Load, run_dir: Path, name: str,
                    prefix: str, ready: QueueClient | None) -> LocustLoad:
        if self.scenario.sut.producer is not None:  # the user's own enqueue path
            return super().locust_load(runtime, load, run_dir, name, prefix, ready)
        return BullMQLocustLoad(runtime, load, self.keys, self.scenario.topology.lease_ms,
                                self.scenario.protocol, run_dir, name, prefix, ready=ready)

    @property
    def key_base(self) -> str:
        return bullmq_base(self.keys.prefix, self.keys.queue)

    @property
    def sweepers(self) -> tuple[str, ...]:
        """Every worker: each runs its own stalled-check timer, a stalledInterval after its
        previous attempt (ran or turned away by the shared key: docs/bullmq.md); and a
        standalone checker where one runs as the reaper (certify's fit): the same timer."""
        return tuple(self.scenario.worker_names) + tuple(self.scenario.reaper_names)

    def backlog(self, queue: QueueClient) -> tuple[int, int]:
        return backlog(queue.client, self.keys.prefix, self.keys.queue)

    def fresh_backlog(self, queue: QueueClient) -> int:
        """BullMQ puts a stalled job back on its wait list like a new one: every waiting job."""
        return self.backlog(queue)[0]

    def reaping_workers(self) -> str:
        return "BullMQ's workers are its only stalled checkers (it has no reaper)"

    def lease_holders(self, queue: QueueClient, recorder: Any) -> HistoryWriter:
        return BullMQFaultHistory(queue, queue.client, self.keys.prefix, self.keys.queue)
