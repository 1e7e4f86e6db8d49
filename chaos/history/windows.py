"""Fault windows: per worker, the stretches of the history during which a fault held it.

One fault event opens a window on its worker, the heal with the same fault id closes it (a kill
is never healed: its window stays open). The checker asks whether a lease's holder was cut off
between its last renewal and its reap (a needed redelivery) or only slowed (a needless one); the
tuning model leaves out the handlers that ran under a cutting fault; the HTML report draws the
windows as bands. All three build them here, in the pass they already make over the history:
``FaultWindows.observe`` takes every fault and heal event as it comes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from chaos.history.events import Event, seq_key
from chaos.history.schema import Fault, Heal

UNKNOWN_WORKER = "?"  # the holder (or target) of an event that names none


@dataclass(slots=True)
class FaultWindow:
    fault: Fault
    start: tuple[int, int]  # history positions (stream ids), so same-millisecond events order
    end: tuple[int, int] | None = None  # None: not healed (a kill never is)
    end_ts: int | None = None

    @property
    def fault_id(self) -> str:
        return self.fault.fault_id

    @property
    def kind(self) -> str:
        return self.fault.kind

    @property
    def worker(self) -> str:
        return self.fault.worker or UNKNOWN_WORKER

    @property
    def cuts_off(self) -> bool:
        return self.fault.cuts_off

    @property
    def start_ts(self) -> int:
        return self.fault.ts

    def overlaps(self, start: tuple[int, int], end: tuple[int, int]) -> bool:
        """Did it hold at some point between these two history positions?"""
        return self.start <= end and (self.end is None or self.end >= start)

    def overlaps_ts(self, start_ts: int, end_ts: int) -> bool:
        """Did it hold at some point between these two server times?"""
        return self.fault.ts <= end_ts and (self.end_ts is None or start_ts <= self.end_ts)


@dataclass
class FaultWindows:
    """Every fault window of a history, in the order the faults were applied."""

    windows: list[FaultWindow] = field(default_factory=list)
    by_worker: dict[str, list[FaultWindow]] = field(default_factory=dict)
    _open: dict[str, FaultWindow] = field(default_factory=dict)  # fault id -> until healed

    def observe(self, event: Event) -> FaultWindow | None:
        """Take a fault or heal event (anything else is ignored); the window it opened or
        closed, if any."""
        if event.type == Fault.TYPE:
            return self.opened(Fault.decode(event))
        if event.type == Heal.TYPE:
            return self.healed(Heal.decode(event))
        return None

    def opened(self, fault: Fault) -> FaultWindow:
        window = FaultWindow(fault, seq_key(fault.seq))
        self.windows.append(window)
        self.by_worker.setdefault(window.worker, []).append(window)
        self._open[fault.fault_id] = window
        return window

    def healed(self, heal: Heal) -> FaultWindow | None:
        window = self._open.pop(heal.fault_id, None)
        if window is not None:
            window.end = seq_key(heal.seq)
            window.end_ts = heal.ts
        return window

    def of(self, worker: str) -> list[FaultWindow]:
        return self.by_worker.get(worker, [])

    def cut_off_between(self, worker: str, start_seq: str, end_seq: str) -> bool:
        """Was ``worker`` killed, frozen or cut off at some point between two history
        positions (a lease's last renewal and its reap)?"""
        windows = self.by_worker.get(worker)
        if not windows:
            return False
        start, end = seq_key(start_seq), seq_key(end_seq)
        return any(window.cuts_off and window.overlaps(start, end) for window in windows)

    def slowed_by(self, worker: str, start_seq: str, end_seq: str) -> str:
        """The kind of the first fault that held ``worker`` between two history positions
        ("fault" if it has none, "none" if there was no fault)."""
        start, end = seq_key(start_seq), seq_key(end_seq)
        for window in self.by_worker.get(worker, []):
            if window.overlaps(start, end):
                return window.kind or "fault"
        return "none"

    def cut_off_during(self, worker: str, start_ts: int, end_ts: int) -> bool:
        """Was ``worker`` cut off at some point between two server times?"""
        return any(window.cuts_off and window.overlaps_ts(start_ts, end_ts)
                   for window in self.by_worker.get(worker, []))


def fault_windows(events: Iterable[Event]) -> FaultWindows:
    """The fault windows of a whole history (one pass; for readers that make no pass of
    their own)."""
    windows = FaultWindows()
    for event in events:
        if event.type == Fault.TYPE or event.type == Heal.TYPE:
            windows.observe(event)
    return windows
