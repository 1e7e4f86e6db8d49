"""A queue of EchoMQ's key layout (docs/echomq.md), decoded by what its calls do to the keys:
the real EchoMQ, or a worker of the user's (the Node examples). Its decoder is the reference
protocol's own (``chaos.history.dialects.echomq``: the layout of docs/design.md §2 is
EchoMQ's); its seam is ``family`` (branded ids, EchoMQ's backlog, the holders the recorder
saw claim, the processes that reap). Registered as ``echomq``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.registry import ConformanceSample, FamilySpec


def _family(scenario: Any, keys: Any) -> Any:
    from chaos.queues.echomq.family import EchoMQFamily

    return EchoMQFamily(scenario, keys)


def _dialect(prefix: str, queue: str, lease_ms: int | None) -> Any:
    from chaos.history.dialects.echomq import EchoMQ

    return EchoMQ(prefix, queue, lease_ms)


def _conformance() -> ConformanceSample:
    """The reference scripts on EchoMQ's layout, captured from a real server (every transition
    kind; tests/fixtures/capture_monitor.py): what the lines must decode to is what the scripts
    wrote to their own events stream in the same session."""
    data = json.loads((Path(__file__).with_name("conformance.json")).read_text())
    expect = [(record["type"], record["id"]) for record in data["stream"] if "id" in record]
    return ConformanceSample("emq:", "jobs", data["monitor"], expect,
                             bounds=[(1000, 250, 1250), (300, 1000, 1300), (30000, 5000, 35000)])


FAMILY = FamilySpec(
    name="echomq",
    summary="EchoMQ's key layout (the real EchoMQ, or the user's workers on the reference "
            "scripts), decoded from MONITOR by effect",
    family=_family,
    dialect=_dialect,
    dialect_text={
        "toolkit": "echomq (the reference protocol's scripts and keys)",
        "echomq": "echomq (EchoMQ's own scripts, decoded by what they do to its keys)",
        "": "echomq (decoded by what the calls do to the queue's keys)"},
    conformance=_conformance,
    group_lanes=True,  # load.groups: EchoMQ.Lanes' grouped admission (lanes.py)
    consumer_loops=True,  # reap_rhythm = "loop": EchoMQ.Consumer's parks on the wake list
)
