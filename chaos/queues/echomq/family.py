"""A queue of EchoMQ's key layout, decoded by effect (docs/echomq.md): the real EchoMQ, or a
worker of the user's (the Node example). Its jobs get EchoMQ's branded ids (EchoMQ refuses any
other), and the holders of its leases come from the recorder's own view: its rows need not name
a worker, the connection that claimed a job is its holder."""

from __future__ import annotations

from typing import Any

from chaos.family import QueueFamily
from chaos.faults.nemesis import HistoryWriter
from chaos.protocol.client import QueueClient


class EchoMQFamily(QueueFamily):
    name = "echomq"
    id_style = "branded"

    def backlog(self, queue: QueueClient) -> tuple[int, int]:
        """(waiting, leased): waiting counts the jobs in the schedule too (EchoMQ's retries,
        delays and scheduled admissions), which the drain waits for as for pending ones."""
        pipe = queue.client.pipeline(transaction=False)
        pipe.zcard(queue.keys.pending)
        pipe.zcard(queue.keys.schedule)
        pipe.zcard(queue.keys.active)
        pending, scheduled, active = pipe.execute()
        return int(pending) + int(scheduled), int(active)

    @property
    def sweepers(self) -> tuple[str, ...]:
        """The processes that reap, each held to the contract's promise (docs/sut.md: a reap
        every CHAOS_REAP_INTERVAL_MS; the same allowance as the reference reaper's, which a
        loop sleeping the interval after a short sweep keeps): the built-in reaper, the
        reaper command's processes, or, with ``reaper = "none"``, the workers, which reap
        themselves. So a sparse reaper gets a decided answer. An attached deployment's
        reapers promise what its operators set up, unknown here: reported, not judged."""
        scenario = self.scenario
        if scenario.attach is not None:
            return ()
        if scenario.sut.reaper == "none":
            return tuple(scenario.worker_names)
        return tuple(scenario.reaper_names)

    def lease_holders(self, queue: QueueClient, recorder: Any) -> HistoryWriter:
        if recorder is None:  # history from the scripts: the rows name their holders
            return queue
        return RecordedHolders(queue, recorder.dialect)


class RecordedHolders:
    """The nemesis's view of a queue through its recorder: runner events are recorded as
    always, and the oldest live leases' holders are those the recorder saw claim them."""

    def __init__(self, queue: QueueClient, dialect: Any) -> None:
        self.queue = queue
        self.dialect = dialect  # chaos.history.dialects.echomq.EchoMQ, fed by the recorder

    def record(self, **fields: object) -> int:
        stamp: int = self.queue.record(**fields)
        return stamp

    def lease_holders_oldest_first(self, limit: int = 100) -> list[str]:
        holders: list[str] = self.dialect.lease_holders_oldest_first(
            self.queue.server_time_ms(), limit)
        return holders
