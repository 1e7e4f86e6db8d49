"""The queue families the toolkit can judge, found by name (docs/families.md).

A family is one package that describes itself with a ``FamilySpec`` and registers it under the
Python entry point group ``echomq_chaos.families`` (the name of the entry is the family's). The
toolkit's own families register the same way, in its pyproject.toml; a family from outside the
repository is one more installed distribution with such an entry point. Every stage finds what
differs between queues here, by the name the run event's ``dialect`` (or the scenario's
``sut.dialect``) carries, and never asks which family it has:

    scenario    which dialect names are valid, which settings a family refuses
    history     the MONITOR decoder (``FamilySpec.dialect``)
    check       the recovery bound and its words (``FamilySpec.bound``, a ``BoundModel``)
    report      the same words, as the checker wrote them into report.json
    family      the runner's seam (``FamilySpec.family``: producer, backlog, holders, sweepers)

This module is pure and imports no stage: a spec's factories are plain callables, typed loosely
here and precisely by the stage that calls them. Families load lazily, once, on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "echomq_chaos.families"
# The family of a history the toolkit's own scripts recorded (the run event's dialect "").
SCRIPTS_RECORDED = "reference"


def _lease_plus_interval(lease_ms: int, reap_interval_ms: int) -> int:
    return lease_ms + reap_interval_ms


def _lease_plus_interval_terms(lease_ms: int, reap_interval_ms: int) -> str:
    return f"lease {lease_ms} + reap {reap_interval_ms}"


def _reap_terms(lease_ms: int, reap_interval_ms: int) -> str:
    return f"reap {reap_interval_ms}"


@dataclass(frozen=True)
class BoundModel:
    """A queue's recovery bound: renewal to recovery at worst, from its two settings (lease L,
    reap interval R), and the words every report spells it in. The default is the reference
    protocol's (DESIGN.md §3): a lease renewed last at t is reaped by t + L + R."""

    bound_ms: Callable[[int, int], int] = _lease_plus_interval
    formula: str = "lease_ms + reap_interval_ms"  # in the queue's own names, no figures
    letters: str = "L+R"  # the sweep's tables (L lease, R reap interval)
    terms: Callable[[int, int], str] = _lease_plus_interval_terms  # with the figures
    # reap_prompt's limit (the bound less the lease) in words, with the figures
    reap_lag_terms: Callable[[int, int], str] = _reap_terms
    explained: str = ("L + R, a lease renewed last at t is reaped by t + L + R; the verdict "
                      "allows the tolerance beyond it")
    recovered_by: str = "the reaper"  # who returns a stranded lease
    late: str = "the reaper ran late"  # a recovery past the bound, said of the family
    sweep: str = "reaper tick"  # one sweep
    interval_name: str = "reap"  # the reap interval, in the cadence line
    # reap_cadence's slack beyond one interval: the sweep allowance (a reaper's wake-up), or
    # the tolerance (a queue whose sweeps the recovery bound already judges at that slack)
    sweep_slack: str = "sweep_allowance"
    # The scenario's settings as the queue calls them (lease_ms -> lockDuration).
    setting_names: Mapping[str, str] = field(default_factory=dict)
    # What some invariants check, in the queue's terms (replacing chaos.check's lines).
    checks: Mapping[str, str] = field(default_factory=dict)
    # Per-recovery judging (``chaos.check.judgements.judge_recovery_bound``): called with the
    # replay's facts, the check config and the store's outages; returns an object judging each
    # recovery on what the history shows (None: every recovery is judged on ``bound_ms``).
    per_recovery: Callable[..., Any] | None = None
    # A lease shorter than the interval buys nothing (the bound stays at L = R there).
    lease_floor_is_interval: bool = False

    def reap_lag_ms(self, lease_ms: int, reap_interval_ms: int) -> int:
        """Lease deadline to recovery at worst: the bound less the lease."""
        return self.bound_ms(lease_ms, reap_interval_ms) - lease_ms


@dataclass(frozen=True)
class FamilySpec:
    """Everything the core asks of one queue family."""

    name: str  # the entry point's name, the run event's dialect, the scenario's sut.dialect
    summary: str  # one line for `echomq-chaos families`
    # The family's runner seam: (scenario, keys) -> a ``chaos.family.QueueFamily``.
    family: Callable[[Any, Any], Any]
    # The MONITOR decoder: (prefix, queue, lease_ms) -> a ``chaos.history.dialects.Dialect``;
    # None for a family whose own scripts record the history (the reference queue).
    dialect: Callable[[str, str, int | None], Any] | None = None
    bound: BoundModel = field(default_factory=BoundModel)
    # The settings row of a report: how the recorder read its calls, by whose scripts the SUT
    # ran (``run.sut.contract``: "toolkit", "echomq"); "" when the run does not say.
    dialect_text: Mapping[str, str] = field(default_factory=dict)
    system_under_test: str = ""  # a report that does not record run.sut: what ran
    # A scenario setting the family cannot honour: (scenario) -> why, or None.
    refuses: Callable[[Any], str | None] | None = None
    # The conformance suite's recorded sample (a ``ConformanceSample``; None: a family whose
    # own scripts record its history has no MONITOR lines to decode).
    conformance: Callable[[], ConformanceSample] | None = None
    # Whether its built-in producer can admit jobs into group lanes (``load.groups``); a
    # family without lanes refuses that setting at validation.
    group_lanes: bool = False
    # Whether its dialect reads a consumer loop's parks (``park`` events), so a scenario of
    # its may say ``[sut] reap_rhythm = "loop"``; a family without refuses that setting.
    consumer_loops: bool = False


@dataclass(frozen=True)
class ConformanceSample:
    """A family's recorded sample for the conformance suite (tests/test_family_conformance.py):
    real MONITOR lines of a short session on one connection (``connection``: its member
    name), on the keys ``prefix`` / ``queue``, and what they must decode to (``expect``: each
    event's type and job id, in order, as the queue's own record says it happened); ``bounds``:
    (lease_ms, reap_interval_ms, bound_ms) cases the family's bound must give."""

    prefix: str
    queue: str
    monitor: list[str]
    expect: list[tuple[str, str]]
    bounds: list[tuple[int, int, int]]
    lease_ms: int | None = None
    connection: str = "worker-1"
    # The settings the family's smallest scenario needs beyond ``[sut] workers`` and
    # ``dialect`` (a section -> its fields), where its defaults are settings it refuses.
    scenario: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConformanceSample:
        return cls(str(data["prefix"]), str(data["queue"]), list(data["monitor"]),
                   [(str(kind), str(job)) for kind, job in data["expect"]],
                   [(int(lease), int(interval), int(bound))
                    for lease, interval, bound in data["bounds"]],
                   data.get("lease_ms"), str(data.get("connection", "worker-1")),
                   dict(data.get("scenario", {})))


class UnknownFamily(ValueError):
    """A name no installed family has."""


@dataclass(frozen=True)
class Origin:
    """Where a family came from: its entry point (``module:attribute``) and distribution."""

    entry_point: str
    distribution: str


_ORIGINS: dict[str, Origin] = {}


@functools.cache
def _loaded() -> dict[str, FamilySpec]:
    found: dict[str, FamilySpec] = {}
    _ORIGINS.clear()
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda entry: entry.name):
        if entry.name in found:  # the same distribution seen twice on the path: the first
            continue
        spec = entry.load()
        if not isinstance(spec, FamilySpec) or spec.name != entry.name:
            raise TypeError(f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP}) "
                            "must name a FamilySpec of the same name")
        found[entry.name] = spec
        _ORIGINS[entry.name] = Origin(entry.value, entry.dist.name if entry.dist else "?")
    if SCRIPTS_RECORDED not in found:
        raise RuntimeError(f"no family {SCRIPTS_RECORDED!r} among the {ENTRY_POINT_GROUP} "
                           "entry points: is the package installed (pip install -e .)?")
    return found


def origin(name: str) -> Origin:
    """Where the installed family ``name`` was registered."""
    _loaded()
    return _ORIGINS[name]


def families() -> dict[str, FamilySpec]:
    """Every installed family, by name."""
    return dict(_loaded())


def family_names() -> tuple[str, ...]:
    return tuple(_loaded())


def dialect_names() -> tuple[str, ...]:
    """The families whose calls the MONITOR recorder can decode (valid ``sut.dialect``s)."""
    return tuple(name for name, spec in _loaded().items() if spec.dialect is not None)


def family_spec(name: str) -> FamilySpec:
    """The family of that name; "" is the family whose scripts record the history."""
    specs = _loaded()
    spec = specs.get(name or SCRIPTS_RECORDED)
    if spec is None:
        raise UnknownFamily(f"unknown queue family {name!r}; installed: {', '.join(specs)}")
    return spec


def bound_model(dialect: str) -> BoundModel:
    """The recovery bound of the family a history names (its run event's ``dialect``)."""
    return family_spec(dialect).bound


def reset() -> None:
    """Forget what was loaded (a test that installs a family mid-session)."""
    _loaded.cache_clear()
