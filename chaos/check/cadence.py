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
import functools
import itertools
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
                 limit_ms: int, store_down: Sequence[tuple[int, int]] = (),
                 since_ts: int | None = None) -> None:
        self.times: dict[str, list[int]] = {}  # sweeper -> its sweeps
        for ts, sweeper, _ in sweeps:
            # Before ``since_ts`` (the run's first phase, once every process was at work:
            # chaos.run.startup) a sweeper's sweeps are its start-up's (Celery's mingle sweeps
            # once, then waits a second for its peers), not the cadence it promises.
            if since_ts is None or ts >= since_ts:
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


@dataclass(frozen=True)
class LoopStep:
    """One turn of one consumer loop: its sweep, the park that ended its drain (None: it was
    still draining when the history ends or it swept again without parking), and the loop's
    next sweep (None: none followed)."""

    worker: str
    client: str
    sweep_ts: int
    park_ts: int | None
    next_sweep_ts: int | None

    @property
    def drain_ms(self) -> int | None:
        """Sweep to park: what the loop claimed and handled before it parked."""
        return None if self.park_ts is None else self.park_ts - self.sweep_ts


@dataclass(frozen=True)
class LoopRecovery:
    """One recovery judged on the loops' sweeps: ``bound_ms`` from the holder's renewal to
    the first sweep after the lease's deadline (the tolerance left out)."""

    bound_ms: int
    judged: bool  # False: no sweep after the deadline, judged on the base bound
    late_checks: list[dict[str, object]] = field(default_factory=list)


class ConsumerLoops:
    """Sweepers that reap once a loop (``[sut] reap_rhythm = "loop"``; EchoMQ.Consumer's
    rhythm: reap, promote, drain the ring, park on the wake list at most ``beat_ms``). Their
    sweeps are not on a grid: a loop sweeps again only once its drain is done and its park
    is over, so the gap between two sweeps is a drain (as long as the work it found) plus a
    park. What such a loop promises, and what is judged, is the park: from each park to the
    loop's next sweep at most ``limit_ms`` (the reap interval and the allowance), unless a
    fault held the process or the store was down (``SweepCadence.held``). The drain is
    measured, not judged; it is what the recovery bound adds to lease + interval.

    Each connection of a process is a loop of its own (its sweeps and parks carry the
    connection's address); a history without addresses reads each process as one loop."""

    def __init__(self, events: Sequence[tuple[int, str, str, bool]], cadence: SweepCadence,
                 limit_ms: int, lease_ms: int, interval_ms: int) -> None:
        """``events``: each sweep that ran and each park, in history order (server ms,
        process, connection, True for a sweep): a park and the sweep after it often share a
        ms, so their order is the history's, not the clock's."""
        self.cadence = cadence
        self.limit_ms, self.lease_ms, self.interval_ms = limit_ms, lease_ms, interval_ms
        lines: dict[tuple[str, str], list[tuple[int, bool]]] = {}  # (process, conn) -> turns
        for ts, worker, client, is_sweep in events:
            lines.setdefault((worker, client), []).append((ts, is_sweep))
        self.steps: list[LoopStep] = []
        self.parks_after_last: list[tuple[str, str, int]] = []  # (process, conn, park ts)
        for (worker, client), line in sorted(lines.items()):
            sweep_ts: int | None = None  # the loop's turn so far: its sweep, its first park
            park_ts: int | None = None
            for ts, is_sweep in line:
                if not is_sweep:
                    if park_ts is None:
                        park_ts = ts
                    continue
                if sweep_ts is not None:
                    self.steps.append(LoopStep(worker, client, sweep_ts, park_ts, ts))
                elif park_ts is not None:  # parked before its first sweep in the history
                    self.steps.append(LoopStep(worker, client, park_ts, park_ts, ts))
                sweep_ts, park_ts = ts, None
            if sweep_ts is not None:
                self.steps.append(LoopStep(worker, client, sweep_ts, park_ts, None))
            if park_ts is not None:
                self.parks_after_last.append((worker, client, park_ts))
        self.sweep_times = sorted(ts for ts, _, _, is_sweep in events if is_sweep)

    def __bool__(self) -> bool:
        return bool(self.sweep_times)

    @property
    def parked(self) -> bool:
        """Does the history show the loops park at all (a dialect that reads their parks)?"""
        return any(step.park_ts is not None for step in self.steps) or bool(
            self.parks_after_last)

    def late_parks(self, sweeper: str, end_ts: int | None) -> Iterator[tuple[int, int, str]]:
        """(park, next sweep or ``end_ts``, reason) of each park of ``sweeper``'s loops that
        lasted past the limit with nothing holding the process."""
        spans = [(step.park_ts, step.next_sweep_ts, "parked past the interval")
                 for step in self.steps if step.worker == sweeper
                 and step.park_ts is not None and step.next_sweep_ts is not None]
        if end_ts is not None:
            spans += [(park_ts, end_ts, "parked, and no sweep since while the run went on")
                      for worker, _, park_ts in self.parks_after_last
                      if worker == sweeper and park_ts < end_ts]
        for park_ts, next_ts, reason in sorted(spans):
            if next_ts - park_ts > self.limit_ms and \
                    not self.cadence.held(sweeper, park_ts, next_ts):
                yield park_ts, next_ts, reason

    def parks_ms(self, sweeper: str | None = None) -> list[int]:
        """Each park to its loop's next sweep, of one sweeper or of all, where nothing held
        the process between (figures)."""
        return [step.next_sweep_ts - step.park_ts for step in self.steps
                if step.park_ts is not None and step.next_sweep_ts is not None
                and (sweeper is None or step.worker == sweeper)
                and not self.cadence.held(step.worker, step.park_ts, step.next_sweep_ts)]

    @functools.cached_property
    def _drains(self) -> list[tuple[str, int, bool]]:
        """(process, drain ms, from a heal) of each finished drain: found once, read by the
        bound, the figures and the words alike. One a fault on its process cut through is
        measured from the fault's heal (the thaw) to the park: the work the loop did once it
        could."""
        drains = []
        for step in self.steps:
            if step.park_ts is None:
                continue
            start = self.drain_start(step.worker, step.sweep_ts, step.park_ts)
            if start is not None:
                drains.append((step.worker, step.park_ts - start, start != step.sweep_ts))
        return drains

    def drain_start(self, worker: str, sweep_ts: int, park_ts: int) -> int | None:
        """Where a drain from ``sweep_ts`` to ``park_ts`` is measured from: its sweep, when
        nothing held the process between; the last heal of the faults on it in between, when
        they were all over before the park and nothing else held it after; else None (a drain
        inside a fault, or across the store's outage, measures the fault, not the loop)."""
        if not self.cadence.held(worker, sweep_ts, park_ts):
            return sweep_ts
        ends = [window.end_ts for window in self.cadence.windows.of(worker)
                if window.overlaps_ts(sweep_ts, park_ts)]
        if not ends or None in ends:
            return None
        thaw = max(end for end in ends if end is not None)
        if thaw >= park_ts or self.cadence.held(worker, thaw + 1, park_ts):
            return None
        return thaw

    def drains_ms(self, sweeper: str | None = None) -> list[int]:
        """Each finished drain (sweep to park, or the thaw to the park when a fault cut
        through it), of one sweeper or of all."""
        return [drain for worker, drain, _ in self._drains
                if sweeper is None or worker == sweeper]

    def first_sweep_after(self, ts: int) -> int | None:
        """The first sweep of any loop strictly after ``ts`` (a lease lapses past its
        deadline: a sweep in the same ms may not take it)."""
        index = bisect.bisect_right(self.sweep_times, ts)
        return self.sweep_times[index] if index < len(self.sweep_times) else None

    # --- the recovery bound, judged per recovery (``judge_recovery_bound``) ---------------
    late_reason = "a sweep after its deadline passed it by"

    @property
    def base_bound_ms(self) -> int:
        """Renewal to recovery at worst, as this run's loops went: lease + the longest drain
        measured + the interval (a loop's park)."""
        return self.lease_ms + max(self.drains_ms(), default=0) + self.interval_ms

    def recovery(self, renewed_ts: int, reap_ts: int) -> LoopRecovery:
        first = self.first_sweep_after(renewed_ts + self.lease_ms)
        if first is None:
            return LoopRecovery(self.base_bound_ms, judged=False)
        return LoopRecovery(first - renewed_ts, judged=True)

    def figures(self, renewal_to_reap_ms: Iterable[int]) -> dict[str, object]:
        drains = self.drains_ms()
        samples = list(renewal_to_reap_ms)
        return {"recoveries": len(samples),
                "worst_renewal_to_reap_ms": max(samples) if samples else None,
                "drains": len(drains), "longest_drain_ms": max(drains, default=None),
                "drains_from_heal": sum(thawed for _, _, thawed in self._drains),
                "lease_plus_interval_ms": self.lease_ms + self.interval_ms,
                "lease_drain_interval_ms": self.base_bound_ms}

    def lines(self, figures: Mapping[str, Any]) -> list[str]:
        longest = figures.get("longest_drain_ms")
        if longest is None:
            return []
        worst = figures.get("worst_renewal_to_reap_ms")
        beyond = "" if worst is None else (
            f"; worst renewal-to-reap {worst} ms, "
            + ("within" if worst <= figures["lease_plus_interval_ms"]
               else "past") + " lease + interval")
        thawed = figures.get("drains_from_heal")
        return [f"  loops     longest drain {longest} ms over {figures['drains']} drains"
                + (f" ({thawed} measured from the heal of a fault that froze it mid-drain)"
                   if thawed else "") + ": "
                f"lease {self.lease_ms} + drain {longest} + park {self.interval_ms} = "
                f"{figures['lease_drain_interval_ms']} ms at worst (lease + interval alone: "
                f"{figures['lease_plus_interval_ms']}{beyond})"]

    def words(self) -> dict[str, str]:
        longest = max(self.drains_ms(), default=0)
        return {"formula": "lease_ms + drain + reap_interval_ms",
                "terms": f"lease {self.lease_ms} + longest drain {longest} + park "
                         f"{self.interval_ms}",
                "beyond": "; each recovery judged on the first sweep after its deadline"}
