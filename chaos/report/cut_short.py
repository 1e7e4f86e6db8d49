"""The summary's word on faults the chaos phase's end cut short (report.json ``run.faults``:
``cut_short``, ``applied_ms`` recorded against ``duration_ms`` asked; docs/faults.md)."""

from __future__ import annotations

from typing import Any


def cut_short_lines(report: dict[str, Any]) -> list[str]:
    """One line naming each fault healed by the chaos phase's end before its duration was over,
    with the length it held (fault to heal, server clock) and the length it asked for."""
    run = report.get("run")
    faults = run.get("faults") if isinstance(run, dict) else None
    cut = [fault for fault in faults or [] if isinstance(fault, dict) and fault.get("cut_short")]
    if not cut:
        return []
    return ["  cut short " + "; ".join(
        f"{fault['kind']} {fault['worker']} held {fault.get('applied_ms')} of the "
        f"{fault.get('duration_ms')} ms asked" for fault in cut)
        + " (the chaos phase's end healed it first)"]
