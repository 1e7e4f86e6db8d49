"""The reference queue (docs/design.md §2): the toolkit's own worker and reaper, or a worker of
the user's speaking its contract through the exported scripts. Its scripts record the history
themselves (the run event's dialect ""); with ``history.source = "monitor"`` the ``echomq``
family's decoder reads it. Its seam is ``chaos.family.QueueFamily`` itself, whose defaults
are this queue's. Registered as ``reference``."""

from __future__ import annotations

from typing import Any

from chaos.registry import ConformanceSample, FamilySpec


def _family(scenario: Any, keys: Any) -> Any:
    from chaos.family import QueueFamily

    return QueueFamily(scenario, keys)


FAMILY = FamilySpec(
    name="reference",
    summary="the toolkit's own queue (its worker and reaper, or the exported scripts)",
    family=_family,
    # no MONITOR lines to decode (its scripts write the history): its bound's cases only
    conformance=lambda: ConformanceSample("emq:", "jobs", [], [],
                                          bounds=[(1000, 250, 1250), (300, 1000, 1300)]),
)
