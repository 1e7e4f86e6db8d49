"""Queue families: everything that differs between the queues the toolkit judges, in one object
chosen once per run (docs/design.md §5). A family brings

    dialect          how the MONITOR recorder decodes its calls (``chaos.history.dialects``)
    producer         how the built-in producer and Locust add jobs it accepts (ids, scripts)
    backlog          how many jobs wait and are leased (the drain and the progress panel)
    lease holders    who holds the oldest live lease (the ``holding_oldest_lease`` target)
    sweepers         the processes it promises sweep at least every reap interval, whose
                     cadence the checker judges (``reap_cadence``; the run event's ``sweepers``)
    battery fit      how a scenario of certify's battery fits the queue: as written, adapted
                     (a queue whose workers are its only reapers gets a standalone reaper
                     where every worker is stopped at once), or not at all, with the reason

and the checker's recovery-bound model is named by the run event's ``dialect``
(``chaos.registry.BoundModel``). The runner never asks which queue it runs. This module holds
the seam (``QueueFamily``, whose defaults are the reference queue's: the toolkit's own scripts
and keys, docs/design.md §2); each family is a package of its own under ``chaos/queues/``
(or installed from outside), found by name through ``chaos.registry`` (docs/families.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.faults.nemesis import HistoryWriter
from chaos.history.dialects import Dialect, make_dialect
from chaos.load.command import CommandLocustLoad, command_producer
from chaos.load.sources import LoadSource, LocustLoad, Producer, payload_maker
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.protocol.ids import id_maker
from chaos.registry import SCRIPTS_RECORDED, bound_model, family_spec
from chaos.runtime.base import RuntimeBase
from chaos.scenario.model import Load, Scenario


@dataclass(frozen=True)
class BatteryFit:
    """How one scenario of certify's battery fits a queue: ``scenario`` as it runs (None: it
    cannot), ``adapted`` how it was changed for this queue and why, ``not_applicable`` why it
    cannot run."""

    scenario: Scenario | None
    adapted: str | None = None
    not_applicable: str | None = None


class QueueFamily:
    """The reference queue: the toolkit's own scripts and keys. The other families override
    what differs."""

    name = "reference"
    id_style = "plain"  # the job ids it accepts (chaos.protocol.ids)
    # Why heartbeat_ms = 0 cannot switch this queue's lease renewal off (None: it can).
    renewal_off_refused: str | None = None

    def __init__(self, scenario: Scenario, keys: QueueKeys) -> None:
        self.scenario = scenario
        self.keys = keys

    @property
    def dialect_name(self) -> str:
        """How a recorder decodes it, and whose recovery bound the checker applies (the run
        event's ``dialect``; "" when the scripts record the history themselves)."""
        history = self.scenario.history
        return "" if history.source == "scripts" else history.dialect

    def bound_source(self) -> str:
        """The recovery bound of the scenario's own settings, in this queue's terms (the
        sweep's default target says where its number comes from)."""
        topology = self.scenario.topology
        model = bound_model(self.dialect_name)
        return (f"the scenario's own {model.formula} = "
                f"{model.terms(topology.lease_ms, topology.reap_interval_ms)}")

    @property
    def key_base(self) -> str:
        """How every key of the queue starts (who calls the queue: docs/attach.md)."""
        return self.keys.base

    @property
    def key_layout(self) -> str:
        """The queue's keys as the plan prints them (``validate``, ``run --dry-run``)."""
        return f"{self.key_base}*"

    def dialect(self) -> Dialect:
        """A fresh decoder for the MONITOR recorder."""
        return make_dialect(self.scenario.history.dialect, self.keys.prefix, self.keys.queue,
                            self.scenario.topology.lease_ms)

    def producer(self, runtime: RuntimeBase, load: Load) -> LoadSource:
        """The built-in producer, adding jobs this queue accepts; with ``[sut] producer``,
        driving that command, the user's own enqueue path (``chaos.load.command``)."""
        if self.scenario.sut.producer is not None:
            return command_producer(runtime, self.scenario, load)
        return Producer(QueueClient(runtime.client(retrying=False), self.keys,
                                    wait_replicas=self.scenario.wait_replicas),
                        load, AckLedger(runtime.ack_ledger_path("producer")),
                        payload_maker(self.scenario.topology.handler, load, self.scenario.seed),
                        job_id=id_maker(self.id_style))

    def locust_load(self, runtime: RuntimeBase, load: Load, run_dir: Path, name: str,
                    prefix: str, ready: QueueClient | None) -> LocustLoad:
        """Locust's users adding jobs this queue accepts; with ``[sut] producer``, its
        producer users enqueue through that command (``chaos.load.command``)."""
        kind = LocustLoad if self.scenario.sut.producer is None else CommandLocustLoad
        return kind(runtime, load, self.keys, self.scenario.topology.lease_ms,
                          self.scenario.protocol, run_dir, name, prefix, ready=ready,
                          id_style=self.id_style)

    @property
    def sweepers(self) -> tuple[str, ...]:
        """The reference reapers: each ticks on a fixed-rate grid of the reap interval and
        records a sweep at every tick (reap.lua), so each must sweep at least every interval."""
        return tuple(self.scenario.reaper_names)

    def backlog(self, queue: QueueClient) -> tuple[int, int]:
        """(waiting, leased)."""
        return queue.backlog()

    def held(self, queue: QueueClient) -> tuple[str, ...]:
        """The jobs the queue holds back by its operator's choice when the drain ends (none
        here): left out of ``backlog``, listed in the end event so the checker counts them
        waiting, not lost, only where the store has them."""
        return ()

    def fresh_backlog(self, queue: QueueClient) -> int:
        """Waiting jobs less those the reaper returned (a recovered job is scored 0, so it
        goes first): what grows when the pool cannot keep up with new load (capacity)."""
        return int(queue.client.zcount(queue.keys.pending, "(0", "+inf"))

    def reaping_workers(self) -> str | None:
        """Why the workers are the queue's reapers when it runs no reaper process (None:
        they are not; the reference queue's reaper is a process of its own, and ``no-reaper``
        runs none on purpose)."""
        sut = self.scenario.sut
        if sut.foreign and sut.reaper == "none":
            return "its workers reap (sut.reaper = 'none')"
        return None

    def battery_fit(self) -> BatteryFit:
        """This family's run of a battery scenario (``self.scenario``, the SUT's parts merged
        in). A scenario that stops every worker at once must still leave a reaper running, or
        nothing could recover a lease however sound the queue: where the workers are the only
        reapers, the SUT's standalone reaper (``[sut] standalone_reaper``) runs beside them as
        the scenario's reaper(s), and without one the scenario is not applicable."""
        scenario = self.scenario
        reaping = self.reaping_workers()
        if scenario.reaper_names or reaping is None or not scenario.may_cut_off_every_worker():
            return BatteryFit(scenario)
        why = f"its faults stop every worker at once, and {reaping}"
        standalone = scenario.sut.standalone_reaper
        if standalone is None:
            return BatteryFit(None, not_applicable=(
                f"{why}: nothing could recover a lease, however sound the queue (give [sut] "
                "standalone_reaper, a process of the queue that only reaps)"))
        sut = scenario.sut.model_copy(update={"reaper": standalone, "standalone_reaper": None})
        count = scenario.topology.reapers
        return BatteryFit(scenario.model_copy(update={"sut": sut}), adapted=(
            f"{why}: {count} standalone reaper{'s' if count > 1 else ''} "
            f"({' '.join(standalone)}) beside them"))

    def lease_holders(self, queue: QueueClient, recorder: Any) -> HistoryWriter:
        """What the nemesis records through and asks for the oldest leases' holders
        (``recorder``: the run's MONITOR recorder, None without one)."""
        return queue


class RecordedHolders:
    """The nemesis's view of a queue through its recorder: runner events are recorded as
    always, and the oldest live leases' holders are those the recorder saw claim them (for a
    family whose rows need not name their holder: the calling connection is). ``read_through``
    (the recorder's): asked first, so the answer is the queue as of the question, not as of
    the last line the recorder happened to read."""

    def __init__(self, queue: QueueClient, dialect: Any,
                 read_through: Callable[[int], bool] | None = None) -> None:  # server µs
        self.queue = queue
        self.dialect = dialect  # the run's dialect, fed by the recorder: it knows who claimed what
        self.read_through = read_through

    def record(self, **fields: object) -> int:
        stamp: int = self.queue.record(**fields)
        return stamp

    def lease_holders_oldest_first(self, limit: int = 100) -> list[str]:
        seconds, micros = self.queue.client.time()
        now_us = int(seconds) * 1_000_000 + int(micros)
        if self.read_through is not None:
            self.queue.client.time()  # a command the feed shows after now_us: the wait ends
            self.read_through(now_us)
        holders: list[str] = self.dialect.lease_holders_oldest_first(now_us // 1000, limit)
        return holders


def family_of(scenario: Scenario) -> QueueFamily:
    """The family of the scenario's queue, on the keys its ``[valkey]`` section names."""
    return family_for(scenario, QueueKeys(scenario.valkey.prefix, scenario.valkey.queue))


def family_for(scenario: Scenario, keys: QueueKeys) -> QueueFamily:
    """The family of the scenario's queue: the reference one unless ``[sut]`` names workers
    of the user's or the queue is attached to, then the family of the dialect they speak."""
    family: QueueFamily = family_spec(scenario.queue_dialect or SCRIPTS_RECORDED).family(
        scenario, keys)
    return family
