"""Celery 5 on Valkey (kombu's Redis transport, docs/celery.md), one family package:

    dialect     kombu's commands (no Lua), as MONITOR lists them, decoded into history events
    family      the runner's seam: backlog, reservation holders, the workers as restorers

Jobs are added by the user's own enqueue path only (``[sut] producer``: ``sut/celery/
producer.py`` sends each payload through Celery's ``send_task``). Registered as ``celery``
(pyproject.toml's ``echomq_chaos.families`` entry points)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.registry import BoundModel, ConformanceSample, FamilySpec


def _family(scenario: Any, keys: Any) -> Any:
    from chaos.queues.celery.family import CeleryFamily

    return CeleryFamily(scenario, keys)


def _dialect(prefix: str, queue: str, lease_ms: int | None) -> Any:
    from chaos.queues.celery.dialect import Celery

    return Celery(prefix, queue, lease_ms)


def _refuses(scenario: Any) -> str | None:
    """The contract's settings Celery has no equivalent of (docs/celery.md's mapping)."""
    topology = scenario.topology
    if topology.effective_heartbeat_ms:
        return (f"topology.heartbeat_ms = {topology.effective_heartbeat_ms}"
                f"{'' if topology.heartbeat_ms is not None else ' (the default, lease / 3)'}: "
                "Celery never renews a reservation (visibility_timeout counts from delivery); "
                "set heartbeat_ms = 0")
    if topology.max_stalls:
        return (f"topology.max_stalls = {topology.max_stalls}: kombu restores a message however "
                "often it was restored; no stall limit exists")
    if topology.completed_retention_ms:
        return (f"topology.completed_retention_ms = {topology.completed_retention_ms}: an ack "
                "deletes the reservation, Celery keeps no completed message")
    if scenario.sut.producer is None:
        return ("[sut] producer is absent: Celery's messages are kombu envelopes only Celery "
                "writes; give the command that sends them (sut/celery/producer.py)")
    return None


def _conformance() -> ConformanceSample:
    """Two real Celery workers on kombu's Redis transport, the first killed holding two tasks
    and the second restoring them (tests/fixtures/capture_celery_sample.py): what the lines must
    decode to is what the workers' own logs and Valkey said after the capture."""
    return ConformanceSample.from_json(
        json.loads((Path(__file__).with_name("conformance.json")).read_text()))


# The scenario's names as Celery's settings call them ("" none: its workers restore
# themselves, no reaper process exists)
SETTING_NAMES = {"lease_ms": "visibility_timeout", "reap_interval_ms": "unacked_restore_interval",
                 "heartbeat_ms": "", "max_stalls": "", "reap_limit": "unacked_restore_limit",
                 "reapers": ""}

CHECKS = {
    "recovery_bound": "every task stranded by a cut-off fault (kill, pause, partition) is "
                      "restored by a worker's restore_visible within visibility_timeout + "
                      "unacked_restore_interval + tolerance_ms of its delivery (Celery never "
                      "renews a reservation; unacked_restore_throttle = 1)",
}


def _terms(lease_ms: int, interval_ms: int) -> str:
    return f"Celery: visibility_timeout {lease_ms} + unacked_restore_interval {interval_ms}"


def _reap_lag_terms(lease_ms: int, interval_ms: int) -> str:
    return f"unacked_restore_interval {interval_ms}"


BOUND = BoundModel(
    formula="visibility_timeout + unacked_restore_interval",
    letters="L+R",
    terms=_terms,
    reap_lag_terms=_reap_lag_terms,
    explained=("L + R, Celery's (a reservation delivered at t is restored by the first worker "
               "sweep after t + visibility_timeout, every unacked_restore_interval with "
               "unacked_restore_throttle 1: docs/celery.md); the verdict allows the tolerance "
               "beyond it"),
    recovered_by="a Celery worker's restore_visible",
    late="the workers' restores ran late",
    sweep="restore_visible",
    interval_name="unacked_restore_interval",
    setting_names=SETTING_NAMES,
    checks=CHECKS,
)

FAMILY = FamilySpec(
    name="celery",
    summary="Celery 5 workers on kombu's Redis transport, decoded from MONITOR by what its "
            "plain commands do (no Lua, no fencing token)",
    family=_family,
    dialect=_dialect,
    bound=BOUND,
    dialect_text={"": "celery (kombu's Redis transport, by effect)"},
    system_under_test="Celery workers",
    refuses=_refuses,
    conformance=_conformance,
)
