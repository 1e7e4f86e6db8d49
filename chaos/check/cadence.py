"""The reapers' cadence, read from their sweeps (``sweep`` events): how long each reaper went
between two sweeps, and which of those gaps broke its promise (docs/design.md §4,
``reap_cadence``).

A reaper that sweeps every reap interval R takes every lapsed lease at most R after its
deadline; one that sweeps less often is caught through a lapse only when a lapse happens to fall
early in one of its long gaps (a reaper sweeping every third interval misses R + allowance for
two lapses in three, but all of a run's lapses often fall at one point of its cycle). Its sweeps
show it every time: the gap between two of them is the reaper's cadence itself.

Every queue family that promises a cadence brings the processes that keep it (the run event's
``sweepers``: the reference reapers, on a fixed-rate grid; BullMQ's workers, each with its own
stalled-check timer) and the longest gap it allows (``CheckConfig.sweep_limit_ms``). A gap
between two sweeps of one of them longer than that is late unless something held that process
in between: a fault on it (killed, frozen, cut off, slowed), or the store down (a sweep needs
the store). The same judgement serves ``reap_cadence`` over the whole run and BullMQ's
per-recovery stalled checks (``chaos.queues.bullmq.bound``), over the checks a recovery waited on.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from collections.abc import Iterator, Sequence

from chaos.history.windows import UNKNOWN_WORKER, FaultWindows

# A sweep lock's interval as two server-ms stamps can show it: each is rounded down to the ms,
# so a sweep turned away just inside the interval can read up to 1 ms past it (measured, stock
# BullMQ: 501 ms at most with stalledInterval 500; docs/bullmq.md); 2 ms leaves one to spare.
SWEEP_LOCK_ROUNDING_MS = 2


def outages_until_seen(down: Sequence[tuple[int, int]], seen: Sequence[int],
                       settle_ms: int) -> list[tuple[int, int]]:
    """(down from, exempt until) per store outage ((down from, back at), server ms): until the
    process was seen at work again once the store was back (``seen``: its reaps, or its
    sweeps, sorted), and at least ``settle_ms`` after it was back (it has to find the store
    again: reconnect, ask Sentinel, wait for a replica to acknowledge); for good when it never
    was, since what happened after is then the fault's as much as the reaper's."""
    outages = []
    for killed, back in down:
        index = bisect.bisect_left(seen, back)
        first = seen[index] if index < len(seen) else None
        outages.append((killed, max(back + settle_ms, first) if first is not None
                        else sys.maxsize))
    return outages


class SweepCadence:
    """Each sweeper's sweeps (server ms, in order; BullMQ's turned-away attempts included: the
    timer fired all the same), the fault windows, the store's outages ((down from, back at),
    server ms), and the longest gap allowed between two sweeps of one sweeper. An outage holds
    a sweeper until its first sweep after the store was back, and at least ``limit_ms`` after
    (``outages_until_seen``): under ``wait_replicas`` that first sweep may wait out a WAIT the
    new primary's replica cannot acknowledge yet."""

    def __init__(self, sweeps: Sequence[tuple[int, str, bool]], windows: FaultWindows,
                 limit_ms: int, store_down: Sequence[tuple[int, int]] = ()) -> None:
        self.times: dict[str, list[int]] = {}  # sweeper -> its sweeps
        for ts, sweeper, _ in sweeps:
            self.times.setdefault(sweeper or UNKNOWN_WORKER, []).append(ts)
        for times in self.times.values():
            times.sort()
        self.windows = windows
        self.limit_ms = limit_ms
        self.store_down = list(store_down)
        self._outages: dict[str, list[tuple[int, int]]] = {}  # sweeper -> (down, exempt until)

    @property
    def unattributed(self) -> list[int]:
        """Sweeps whose sweeper the history does not name (a connection the recorder could
        not resolve): any reaper's, for all the history says."""
        return self.times.get(UNKNOWN_WORKER, [])

    def held(self, sweeper: str, start_ts: int, end_ts: int) -> bool:
        """Was the sweeper under a fault, or the store down, at some point between two server
        times? Then a longer gap is no broken promise: nothing could sweep, or not on time."""
        if any(window.overlaps_ts(start_ts, end_ts) for window in self.windows.of(sweeper)):
            return True
        if not self.store_down:
            return False
        outages = self._outages.get(sweeper)
        if outages is None:
            outages = self._outages[sweeper] = outages_until_seen(
                self.store_down, self.times.get(sweeper, []), self.limit_ms)
        return any(down <= end_ts and start_ts <= until for down, until in outages)

    def late(self, sweeper: str, after_ts: int | None = None,
             before_ts: int | None = None) -> Iterator[tuple[int, int]]:
        """(earlier, later) of each two consecutive sweeps of ``sweeper`` more than the limit
        apart with nothing holding it between; only the gaps that close after ``after_ts`` and
        open before ``before_ts`` (each None: no such bound)."""
        times = self.times.get(sweeper, [])
        start = 1 if after_ts is None else max(1, bisect.bisect_right(times, after_ts))
        for index in range(start, len(times)):
            earlier, later = times[index - 1], times[index]
            if before_ts is not None and earlier >= before_ts:
                break
            if later - earlier > self.limit_ms and not self.held(sweeper, earlier, later):
                yield earlier, later

    def gaps(self, sweeper: str) -> list[int]:
        """Between consecutive sweeps of ``sweeper`` where nothing held it (figures)."""
        return [later - earlier
                for earlier, later in itertools.pairwise(self.times.get(sweeper, []))
                if not self.held(sweeper, earlier, later)]

    def named(self) -> list[str]:
        """The sweepers the history names, in order."""
        return sorted(sweeper for sweeper in self.times if sweeper != UNKNOWN_WORKER)
