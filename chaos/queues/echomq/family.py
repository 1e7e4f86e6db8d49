"""A queue of EchoMQ's key layout, decoded by effect (docs/echomq.md): the real EchoMQ, or a
worker of the user's (the Node example). Its jobs get EchoMQ's branded ids (EchoMQ refuses any
other), and the holders of its leases come from the recorder's own view: its rows need not name
a worker, the connection that claimed a job is its holder."""

from __future__ import annotations

from typing import Any

from chaos.family import QueueFamily, RecordedHolders
from chaos.faults.nemesis import HistoryWriter
from chaos.load.sources import LoadSource, payload_maker
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import QueueClient
from chaos.protocol.ids import id_maker
from chaos.queues.echomq.lanes import GroupedAdmission, GroupedProducer
from chaos.runtime.base import RuntimeBase
from chaos.scenario.model import Load


class EchoMQFamily(QueueFamily):
    name = "echomq"
    id_style = "branded"

    def producer(self, runtime: RuntimeBase, load: Load) -> LoadSource:
        """With ``load.groups``, the built-in producer admits each job into a group's lane
        (EchoMQ.Lanes' grouped admission, ``chaos.queues.echomq.lanes``); else the default."""
        if not load.groups:
            return super().producer(runtime, load)
        scenario = self.scenario
        return GroupedProducer(
            GroupedAdmission(runtime.client(retrying=False), self.keys, load.groups),
            load, AckLedger(runtime.ack_ledger_path("producer")),
            payload_maker(scenario.topology.handler, load, scenario.seed),
            job_id=id_maker(self.id_style))

    def backlog(self, queue: QueueClient) -> tuple[int, int]:
        """(waiting, leased): waiting counts the jobs in the schedule too (EchoMQ's retries,
        delays and scheduled admissions) and in every group's lane (EchoMQ.Lanes) but a paused
        one, which the drain waits for as for pending ones. The groups that may hold jobs are
        those on the ring, with live leases, with a limit or paused: a lane off the ring is at
        its limit or paused (a group stuck at a limit no lease holds still shows its jobs
        here). A paused lane's jobs wait for their operator, not for the pool: ``held``."""
        base = queue.keys.base
        pipe = queue.client.pipeline(transaction=False)
        pipe.zcard(queue.keys.pending)
        pipe.zcard(queue.keys.schedule)
        pipe.zcard(queue.keys.active)
        pipe.lrange(f"{base}ring", 0, -1)
        pipe.hkeys(f"{base}gactive")
        pipe.hkeys(f"{base}glimit")
        pipe.smembers(f"{base}paused")
        pending, scheduled, active, ring, live, limited, paused = pipe.execute()
        paused_groups = {_text(group) for group in paused}
        groups = {_text(group) for group in (*ring, *live, *limited)} - paused_groups
        waiting_in_lanes = 0
        if groups:
            lanes = queue.client.pipeline(transaction=False)
            for group in sorted(groups):
                lanes.zcard(f"{base}g:{group}:pending")
            waiting_in_lanes = sum(int(count) for count in lanes.execute())
        return int(pending) + int(scheduled) + waiting_in_lanes, int(active)

    def held(self, queue: QueueClient) -> tuple[str, ...]:
        """The jobs waiting in a paused group's lane (EchoMQ.Lanes.pause), as the store has
        them when the drain ends."""
        base = queue.keys.base
        paused = sorted(_text(group) for group in queue.client.smembers(f"{base}paused"))
        if not paused:
            return ()
        lanes = queue.client.pipeline(transaction=False)
        for group in paused:
            lanes.zrange(f"{base}g:{group}:pending", 0, -1)
        return tuple(_text(job_id) for members in lanes.execute() for job_id in members)

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
        return RecordedHolders(queue, recorder.dialect, recorder.read_through)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
