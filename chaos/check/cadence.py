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
per-recovery stalled checks (``chaos.check.bullmq``), over the checks a recovery waited on.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence

from chaos.history.windows import UNKNOWN_WORKER, FaultWindows


class SweepCadence:
    """Each sweeper's sweeps (server ms, in order; BullMQ's turned-away attempts included: the
    timer fired all the same), the fault windows, the store's outages ((down from, back at),
    server ms), and the longest gap allowed between two sweeps of one sweeper."""

    def __init__(self, sweeps: Sequence[tuple[int, str, bool]], windows: FaultWindows,
                 limit_ms: int, outages: Sequence[tuple[int, int]] = ()) -> None:
        self.times: dict[str, list[int]] = {}  # sweeper -> its sweeps
        for ts, sweeper, _ in sweeps:
            self.times.setdefault(sweeper or UNKNOWN_WORKER, []).append(ts)
        for times in self.times.values():
            times.sort()
        self.windows = windows
        self.limit_ms = limit_ms
        self.outages = list(outages)

    @property
    def unattributed(self) -> list[int]:
        """Sweeps whose sweeper the history does not name (a connection the recorder could
        not resolve): any reaper's, for all the history says."""
        return self.times.get(UNKNOWN_WORKER, [])

    def held(self, sweeper: str, start_ts: int, end_ts: int) -> bool:
        """Was the sweeper under a fault, or the store down, at some point between two server
        times? Then a longer gap is no broken promise: nothing could sweep, or not on time."""
        return any(window.overlaps_ts(start_ts, end_ts) for window in self.windows.of(sweeper)) \
            or any(down <= end_ts and start_ts <= back for down, back in self.outages)

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
