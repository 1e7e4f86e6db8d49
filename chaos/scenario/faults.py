"""The fault kinds a scenario can plan: one declaration each, the registry everything reads.

Each kind is a model of its own, told apart by ``kind`` (a pydantic union discriminated on it),
the way Toxiproxy registers its toxics and Jepsen builds its nemeses. A declaration says:

- its parameters, as fields: required ones have no default, and a field another kind has is an
  error here ("not a parameter of a latency fault"), so a typo cannot pass silently;
- its targets: which processes a fault of this kind may hit (``targets``);
- whether it cuts the holder off (``cuts_off``): a lease lost under a fault that does was a
  needed redelivery, under one that only slows the holder a needless one;
- its colour in the HTML report and its one-line description (the docstring's first line).

What a kind *does* (apply and heal, through the runtime) lives in ``chaos.faults.kinds``, one
module per kind under the same name; a test holds the two registries to the same names. Adding a
kind: a declaration here (and in the ``Fault`` union), a behaviour module there, their tests.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator

from chaos.scenario.fields import NonNegativeMs, PositiveMs, Strict

HOLDING_OLDEST_LEASE = "holding_oldest_lease"
TOXIC_TYPES = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer",
               "limit_data")
# Toxic types that leave the holder unable to reach Valkey at all (vs. merely slowed).
CUTTING_TOXICS = {"timeout", "reset_peer", "limit_data"}
GREY = "#7f7f7f"  # the report's colour for a kind without one of its own

# Which processes a kind may hit: the workers; the workers and the reapers; those of them that
# reach Valkey through a Toxiproxy proxy of their own; or a node of the store itself.
Targets = Literal["workers", "processes", "proxied", "store"]

Stream = Literal["upstream", "downstream", "both"] | None  # default "both"
Toxicity = Annotated[float, Field(ge=0, le=1)] | None  # share of connections; default 1
UNTIL_CHAOS_ENDS = "healed after this long, else when the chaos phase ends"


class RandomTarget(Strict):
    random: Annotated[int, Field(ge=1)]


Target = str | RandomTarget


class FaultBase(Strict):
    """What every fault has: a target, when it fires and whether it repeats."""

    kind: str  # each kind narrows it to its own name: the union's tag
    # A process name, "holding_oldest_lease" (picked when it fires), or {random = k}.
    target: Target
    at_ms: NonNegativeMs = 0  # from the start of the chaos phase
    # Each occurrence fires at a point drawn evenly from [at, at + at_spread_ms), from the
    # run's seed: runs of other seeds meet the queue's reaper ticks at other phases (a fault
    # at one fixed time measures recovery at one phase of them; docs/faults.md)
    at_spread_ms: NonNegativeMs = 0
    every_ms: PositiveMs | None = None  # repeat until the chaos phase ends
    duration_ms: int | None  # each kind declares it with its own meaning (or forbids it)

    targets: ClassVar[Targets] = "workers"
    cuts_holder_off: ClassVar[bool] = False
    needs_heartbeat: ClassVar[bool] = False  # means nothing when topology.heartbeat_ms = 0
    # Does the heal at the chaos phase's end undo it (a pause resumed, a toxic removed)? Not a
    # worker's own order (it holds for its whole duration_ms) nor a store fault (over before
    # it is recorded): those are never cut short.
    healed_at_chaos_end: ClassVar[bool] = True
    color: ClassVar[str] = GREY

    @model_validator(mode="after")
    def _spread_within_repeat(self) -> FaultBase:
        if self.every_ms is not None and self.at_spread_ms > self.every_ms:
            raise ValueError(f"at_spread_ms = {self.at_spread_ms}: at most every_ms = "
                             f"{self.every_ms}, so the occurrences keep their order")
        return self

    @field_validator("target", mode="before")
    @classmethod
    def _target_shape(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) != {"random"}:
            raise ValueError(f"a table target must be {{random = k}}, got {value!r}")
        return value

    @classmethod
    def summary(cls) -> str:
        """The kind in one line, for the plan and the docs."""
        return (cls.__doc__ or "").strip().splitlines()[0]

    @classmethod
    def parameter_names(cls) -> list[str]:
        """The settings of this kind besides those every fault has (target, at_ms, ...)."""
        return [name for name in cls.model_fields if name not in COMMON_FIELDS]

    def cuts_off(self) -> bool:
        """Can the target still act under this fault? Decides needed vs needless redeliveries."""
        return self.cuts_holder_off

    def describe_duration(self) -> str:
        """How long it holds, as the plan says it."""
        if self.duration_ms:
            return f" for {self.duration_ms} ms"
        return " until the chaos phase ends"

    def cut_to_ms(self, at_ms: int, chaos_ms: int) -> int | None:
        """How long it holds at most when fired ``at_ms`` into a chaos phase of ``chaos_ms``,
        if the phase's end (which heals every fault) comes before its ``duration_ms`` is over;
        None when it holds as long as it asks."""
        if not self.healed_at_chaos_end or not self.duration_ms \
                or at_ms + self.duration_ms <= chaos_ms:
            return None
        return max(chaos_ms - at_ms, 0)

    @property
    def is_network(self) -> bool:
        return self.targets == "proxied"

    @property
    def is_store(self) -> bool:
        return self.targets == "store"


COMMON_FIELDS = ("kind", "target", "at_ms", "at_spread_ms", "every_ms", "duration_ms")


# --- processes: signals ------------------------------------------------------------------------


class _Killing(FaultBase):
    """A fault that kills its target: it has no duration, the worker stays dead."""

    duration_ms: None = None

    @field_validator("duration_ms", mode="before")
    @classmethod
    def _no_duration(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("a kill has no duration_ms: the worker stays dead")

    cuts_holder_off = True


class Kill(_Killing):
    """SIGKILL a worker with its process group; it stays dead."""

    kind: Literal["kill"] = "kill"

    color = "#d62728"

    def describe_duration(self) -> str:
        return ""


class KillInClaimGap(_Killing):
    """SIGKILL a worker while it holds a job popped but not yet leased (a two-step claim)."""

    kind: Literal["kill_in_claim_gap"] = "kill_in_claim_gap"
    # How long the worker may take to pop a job once told to stay in its claim gap; a worker
    # whose claim is one step (the sound protocol) has no gap and is killed when it is over.
    wait_ms: PositiveMs = 2000

    color = "#e377c2"

    def describe_duration(self) -> str:
        return f" (inside its claim gap, or after {self.wait_ms} ms)"


class Pause(FaultBase):
    """Freeze a worker (SIGSTOP) for duration_ms, then let it go on (SIGCONT)."""

    kind: Literal["pause"] = "pause"
    duration_ms: PositiveMs = Field(description="how long the worker stays frozen")

    cuts_holder_off = True
    color = "#9467bd"


# --- network: through the target's own Toxiproxy proxy -------------------------------------------


class NetworkFault(FaultBase):
    targets = "proxied"
    duration_ms: PositiveMs | None = Field(None, description=UNTIL_CHAOS_ENDS)


class Latency(NetworkFault):
    """Delay the target's traffic to Valkey by latency_ms (plus or minus jitter_ms)."""

    kind: Literal["latency"] = "latency"
    latency_ms: NonNegativeMs
    jitter_ms: NonNegativeMs | None = None
    stream: Stream = None
    toxicity: Toxicity = None

    color = "#ff7f0e"


class Partition(NetworkFault):
    """Cut the target off from Valkey: a timeout-0 toxic (mode timeout) or its proxy off."""

    kind: Literal["partition"] = "partition"
    # timeout (default): nothing passes, nothing closes; disable: the proxy refuses connections
    mode: Literal["timeout", "disable"] | None = None

    cuts_holder_off = True
    color = "#8c564b"


class Bandwidth(NetworkFault):
    """Throttle the target's traffic to Valkey to rate_kb_s KB/s."""

    kind: Literal["bandwidth"] = "bandwidth"
    rate_kb_s: Annotated[int, Field(ge=0)]
    stream: Stream = None
    toxicity: Toxicity = None


class ResetPeer(NetworkFault):
    """Reset the target's connections to Valkey (TCP RST) timeout_ms after data arrives."""

    kind: Literal["reset_peer"] = "reset_peer"
    timeout_ms: NonNegativeMs | None = None
    stream: Stream = None
    toxicity: Toxicity = None

    cuts_holder_off = True


class SlowClose(NetworkFault):
    """Delay the close of the target's connections to Valkey by delay_ms."""

    kind: Literal["slow_close"] = "slow_close"
    delay_ms: NonNegativeMs
    stream: Stream = None
    toxicity: Toxicity = None


class Toxic(NetworkFault):
    """Any Toxiproxy toxic, with its attributes, on the target's proxy."""

    kind: Literal["toxic"] = "toxic"
    toxic: str  # a Toxiproxy toxic type ...
    attributes: dict[str, int | float] | None = None  # ... and its attributes
    stream: Stream = None
    toxicity: Toxicity = None

    @field_validator("toxic")
    @classmethod
    def _known_toxic(cls, value: str) -> str:
        if value not in TOXIC_TYPES:
            raise ValueError(f"not a Toxiproxy toxic type; expected one of "
                             f"{', '.join(TOXIC_TYPES)}")
        return value

    def cuts_off(self) -> bool:
        return self.toxic in CUTTING_TOXICS


# --- the target's clock and its own orders -------------------------------------------------------


class ClockSkew(FaultBase):
    """Shift the target's local clock by offset_ms (only variants that trust it care)."""

    kind: Literal["clock_skew"] = "clock_skew"
    duration_ms: PositiveMs | None = Field(None, description=UNTIL_CHAOS_ENDS)
    # added to the target process's local clock (negative: behind)
    offset_ms: Annotated[int, Field(ge=-86_400_000, le=86_400_000)]

    targets = "processes"
    color = "#17becf"


# The worker applies these to itself on the runtime's order (control file + SIGUSR1): it stays
# alive and reachable, so a lease it loses under one is a needless redelivery.
HOLDS = "how long it holds; about lease_ms or more to matter"


class CpuHog(FaultBase):
    """The worker's next handler holds the CPU (and the GIL) for duration_ms."""

    kind: Literal["cpu_hog"] = "cpu_hog"
    duration_ms: PositiveMs = Field(description=HOLDS)

    healed_at_chaos_end = False


class HeartbeatLag(FaultBase):
    """The worker tells its heartbeat of jobs it finished only when duration_ms is over."""

    kind: Literal["heartbeat_lag"] = "heartbeat_lag"
    # Meanwhile the heartbeat renews every job finished under the fault after its complete:
    # the race of a renewal with its own worker's complete, made certain.
    duration_ms: PositiveMs = Field(description="how long finished jobs are reported late")

    needs_heartbeat = True
    healed_at_chaos_end = False


class BlockHeartbeat(FaultBase):
    """The worker's heartbeat renews no lease for duration_ms."""

    kind: Literal["block_heartbeat"] = "block_heartbeat"
    duration_ms: PositiveMs = Field(description=HOLDS)

    needs_heartbeat = True
    healed_at_chaos_end = False


# --- the store itself ----------------------------------------------------------------------------


class StoreFaultBase(FaultBase):
    targets = "store"
    cuts_holder_off = True  # no client can act while the store is down
    healed_at_chaos_end = False
    store_node: ClassVar[str]  # the only target a fault of this kind takes
    replication: ClassVar[str]  # the valkey.replication it needs

    def describe_duration(self) -> str:
        return f", down >= {self.duration_ms} ms" if self.duration_ms else ""


class ValkeyRestart(StoreFaultBase):
    """SIGKILL valkey-server, keep it down duration_ms, restart it on the same port and data."""

    kind: Literal["valkey_restart"] = "valkey_restart"
    # how long the store stays down (default: restarted at once)
    duration_ms: PositiveMs | None = None

    store_node = "valkey"
    replication = "none"


class Failover(StoreFaultBase):
    """Move the primary role: SIGKILL the primary (mode kill) or SENTINEL FAILOVER."""

    kind: Literal["failover"] = "failover"
    # mode kill: how long the old primary stays down (at least until a new one serves)
    duration_ms: PositiveMs | None = None
    mode: Literal["kill", "sentinel"] | None = None  # default kill

    store_node = "primary"
    replication = "sentinel"


# --- the registry ---------------------------------------------------------------------------------

Fault = Annotated[
    Kill | Pause | Latency | Partition | Bandwidth | ResetPeer | SlowClose | Toxic | ClockSkew
    | CpuHog | BlockHeartbeat | ValkeyRestart | Failover | KillInClaimGap | HeartbeatLag,
    Field(discriminator="kind"),
]


def kind_of(declaration: type[FaultBase]) -> str:
    """The ``kind`` a declaration answers to (its Literal tag)."""
    return str(get_args(declaration.model_fields["kind"].annotation)[0])


FAULT_KINDS: dict[str, type[FaultBase]] = {
    kind_of(declaration): declaration for declaration in get_args(get_args(Fault)[0])}
FAULT_COLORS = {kind: declaration.color for kind, declaration in FAULT_KINDS.items()}
FAULT_DESCRIPTIONS = {kind: declaration.summary() for kind, declaration in FAULT_KINDS.items()}
STORE_KINDS = tuple(kind for kind, declaration in FAULT_KINDS.items()
                    if declaration.targets == "store")
# Every parameter some kind takes: a key outside these is unknown, not just misplaced.
ALL_FAULT_PARAMETERS = sorted({name for declaration in FAULT_KINDS.values()
                               for name in declaration.parameter_names()})


def fault_parameters(fault: FaultBase) -> dict[str, object]:
    """The kind-specific settings a fault was given, for its history event and the plan (the
    scalars: a history event is flat, so a toxic's attributes table stays out)."""
    given = {name: getattr(fault, name) for name in fault.parameter_names()}
    return {name: value for name, value in given.items()
            if value is not None and not isinstance(value, dict)}


def describe_target(fault: FaultBase) -> str:
    """The target as written: a name, "random 2" or "holding_oldest_lease"."""
    if isinstance(fault.target, RandomTarget):
        return f"random {fault.target.random}"
    return fault.target
