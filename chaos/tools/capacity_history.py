"""A capacity step's events in the judged history: those between its ``capacity-step-N`` phase
and the ``capacity-settle-N`` phase recorded once it ends, read from the events stream or, for
a foreign SUT, from the MONITOR recorder's history file as it is written."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.history.events import Event
from chaos.history.schema import Phase


def step_name(index: int) -> str:
    return f"capacity-step-{index}"


def settle_name(index: int) -> str:
    """The phase recorded once step ``index`` ends: its events end here."""
    return f"capacity-settle-{index}"


def _phase_at(events: list[Event], name: str) -> int | None:
    return next((i for i, event in enumerate(events)
                 if event.type == Phase.TYPE and event.extra.get("phase") == name), None)


def step_events(events: list[Event], index: int) -> tuple[list[Event], list[Event]] | None:
    """Step ``index``'s events (after its phase, before its settle phase) and what follows
    them; None while its settle phase is not among ``events``."""
    end = _phase_at(events, settle_name(index))
    if end is None:
        return None
    start = _phase_at(events[:end], step_name(index))
    return events[(start + 1 if start is not None else 0):end], events[end + 1:]


class HistoryTail:
    """A history file read while its writer appends to it: whole lines only, each once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""  # a line not yet written whole

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        return [Event.from_record(json.loads(line)) for line in lines if line.strip()]
