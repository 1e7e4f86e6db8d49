"""Real BullMQ (docs/bullmq.md), one family package:

    bound       the recovery bound BullMQ really has, judged per recovery on its stalled checks
    dialect     its scripts' calls, as MONITOR lists them, decoded into history events
    load        jobs added through BullMQ's own ``Queue.add`` (``sut/bullmq/producer.js``)
    family      the runner's seam: producer, Locust, backlog, lock holders, stalled checkers

Its locustfile is ``loadtests/bullmq.py``. Registered as ``bullmq`` (pyproject.toml's
``echomq_chaos.families`` entry points)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.queues.bullmq.bound import BOUND
from chaos.registry import ConformanceSample, FamilySpec


def _family(scenario: Any, keys: Any) -> Any:
    from chaos.queues.bullmq.family import BullMQFamily

    return BullMQFamily(scenario, keys)


def _dialect(prefix: str, queue: str, lease_ms: int | None) -> Any:
    from chaos.queues.bullmq.dialect import BullMQ

    return BullMQ(prefix, queue)


def _refuses(scenario: Any) -> str | None:
    retention = scenario.topology.completed_retention_ms
    if retention:
        return (f"topology.completed_retention_ms = {retention}: BullMQ keeps or removes its "
                "completed jobs by its own removeOnComplete option")
    return None


def _conformance() -> ConformanceSample:
    """One real BullMQ worker taking two jobs (tests/fixtures/capture_bullmq_sample.py): what
    the lines must decode to is what BullMQ's own record said after the capture."""
    return ConformanceSample.from_json(
        json.loads((Path(__file__).with_name("conformance.json")).read_text()))


FAMILY = FamilySpec(
    name="bullmq",
    summary="real BullMQ workers (Node), decoded from MONITOR by what its scripts do",
    family=_family,
    dialect=_dialect,
    bound=BOUND,
    dialect_text={"": "bullmq (real BullMQ's scripts)"},
    system_under_test="BullMQ workers",
    refuses=_refuses,
    conformance=_conformance,
)
