"""Tuning ``lease_ms``, ``reap_interval_ms`` and ``heartbeat_ms`` from evidence (pure logic).

Three things, all without Valkey, so every rule is unit-testable on hand-written data:

* **Measurements from a history** (the run's judged one: the scripts' events, or the MONITOR
  recorder's for a queue whose scripts record nothing): how long a handler holds a lease (claim →
  its complete, per attempt, on the server clock: the span a lease must cover when nothing renews
  it), the extend round trips (``rtt_ms`` on extend events, measured by the client; a history read
  from MONITOR has none), and the *renewal gap*: the longest time a live, unfaulted holder went
  without reaching the server (claim → extend → … → complete). A lease shorter than a renewal gap
  lapses under a live worker: a needless redelivery. The run event names the family (its
  ``dialect``), which fixes the bound below.
* **The analytic model** (docs/design.md §4): a fault strands a lease last renewed at most one
  heartbeat before it, so the deadline falls in ``[fault + L − H, fault + L]`` and the recovery
  at most the family's bound: recovery ∈ ``[max(0, L − H), bound]`` (without a heartbeat, H is
  the handler duration), where the bound is the family's (``chaos.registry.BoundModel``):
  ``L + R`` for the reference protocol (the reaper sweeps at most R after the deadline), each
  other family its own.
* **The recommendation**: among the cells that passed every invariant, the one that meets the
  recovery target with zero needless redeliveries and the widest safety margin, where
  margin = min(recovery headroom, lease headroom); or which constraint binds when none does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.check.verdict import LatencySummary
from chaos.history.events import Event
from chaos.history.schema import CLIENT_CALLS, Claim, Extend, ExtendRejected, Run, rtt_ms
from chaos.history.windows import UNKNOWN_WORKER, fault_windows
from chaos.registry import bound_model

RENEWALS = CLIENT_CALLS  # a holder's calls on its lease: each one reached the server
ROUND_TO_MS = 50  # interpolated settings are rounded to this (a setting, not a measurement)


# --- the family's bound ---------------------------------------------------------------------


def family_bound_ms(lease_ms: int, reap_interval_ms: int, dialect: str = "") -> int:
    """Renewal to recovery at worst, as the checker judges the family (its ``recovery_bound``
    less the tolerance; ``chaos.registry.BoundModel``): L + R for the reference queue."""
    return bound_model(dialect).bound_ms(lease_ms, reap_interval_ms)


def bound_formula(dialect: str = "") -> str:
    """The bound's formula in the sweep's letters (L lease, R reap interval)."""
    return bound_model(dialect).letters


# --- measurements from one history ----------------------------------------------------------


@dataclass
class HistoryMeasurements:
    """Raw samples (ms) from one run; pooled over runs by concatenation."""

    handler_ms: list[int] = field(default_factory=list)  # claim -> complete, per attempt
    extend_rtt_ms: list[int] = field(default_factory=list)  # client-measured extend round trips
    renewal_gap_ms: list[int] = field(default_factory=list)  # per attempt, its longest gap
    extends: int = 0  # extend calls seen (accepted or rejected), with a round trip or not
    dialect: str = ""  # the family that made the history (its run event's); "" is echomq

    def extend(self, other: HistoryMeasurements) -> None:
        self.handler_ms += other.handler_ms
        self.extend_rtt_ms += other.extend_rtt_ms
        self.renewal_gap_ms += other.renewal_gap_ms
        self.extends += other.extends
        self.dialect = self.dialect or other.dialect


def measure_history(events: list[Event]) -> HistoryMeasurements:
    """Handler durations, extend round trips and renewal gaps of one run's history, and the
    family it names (``measured.dialect``)."""
    # A holder cut off (killed, frozen, partitioned) meanwhile: its renewal gaps measure the
    # fault, not the lease it needs.
    windows = fault_windows(events)
    # (job, attempt) -> (holder, server times of its claim and every later call it made)
    attempts: dict[tuple[str, int], tuple[str, list[int]]] = {}
    finished: dict[tuple[str, int], int] = {}  # claim -> complete (accepted or rejected)
    measured = HistoryMeasurements()
    for event in events:
        if event.type == Run.TYPE:
            measured.dialect = Run.decode(event).dialect
            continue
        if event.type in (Extend.TYPE, ExtendRejected.TYPE):
            measured.extends += 1
            rtt = rtt_ms(event)
            if rtt is not None:
                measured.extend_rtt_ms.append(rtt)
        if event.type not in RENEWALS or event.job_id is None or event.attempt is None:
            continue
        key = (event.job_id, event.attempt)
        if event.type == Claim.TYPE:
            attempts[key] = (event.worker or UNKNOWN_WORKER, [event.ts])
            continue
        holder = attempts.get(key)
        if holder is None or holder[0] != event.worker or key in finished:
            # A stale holder's call under a newer attempt, a claim before the history, or a
            # heartbeat that arrives after its own complete (held up on a slow link): the
            # lease was already over, so none of these is a renewal gap.
            continue
        holder[1].append(event.ts)
        if event.type.startswith("complete"):
            finished[key] = event.ts - holder[1][0]
    for key, (worker, times) in attempts.items():
        if key not in finished:
            continue  # never finished (its worker died): no duration, no full set of gaps
        start, end = times[0], times[-1]
        if windows.cut_off_during(worker, start, end):
            continue  # the holder was frozen or cut off meanwhile: a needed redelivery's span
        measured.handler_ms.append(finished[key])
        measured.renewal_gap_ms.append(max(b - a for a, b in zip(times, times[1:], strict=False)))
    return measured


# --- one cell of a sweep --------------------------------------------------------------------


@dataclass
class CellResult:
    """One (lease, reap interval, heartbeat) setting, pooled over its repetitions."""

    lease_ms: int
    reap_interval_ms: int
    heartbeat_ms: int  # 0 = no heartbeat
    verdict: str  # pass | fail | aborted | error: the worst over the repetitions
    failed_invariants: list[str] = field(default_factory=list)
    runs: int = 1
    recovery: LatencySummary = field(default_factory=LatencySummary)  # reap - fault, pooled
    recomplete: LatencySummary = field(default_factory=LatencySummary)  # re-complete - fault
    needless: int = 0
    needed: int = 0
    jobs: int = 0  # enqueued, over the repetitions
    throughput_per_s: float = 0.0  # mean accepted completes/s over the repetitions
    load_rps: dict[str, float] = field(default_factory=dict)  # report["load"] ops, when present
    renewal_gap: LatencySummary = field(default_factory=LatencySummary)
    tolerance_ms: int = 0
    run_dirs: list[str] = field(default_factory=list)
    wall_ms: int = 0
    # What the sweep set: None = the scenario's own heartbeat (default lease/3); groups heatmaps.
    heartbeat_set: int | None = None
    dialect: str = ""  # the family its runs' histories name ("" the reference): its bound

    @property
    def key(self) -> str:
        heartbeat = f"{self.heartbeat_ms}" if self.heartbeat_ms else "off"
        return f"lease {self.lease_ms} / reap {self.reap_interval_ms} / heartbeat {heartbeat}"

    @property
    def bound_ms(self) -> int:
        """The family's bound on renewal to recovery: L + R, or BullMQ's 2R + max(L, R)."""
        return family_bound_ms(self.lease_ms, self.reap_interval_ms, self.dialect)

    @property
    def bound_formula(self) -> str:
        return bound_formula(self.dialect)

    @property
    def needless_rate(self) -> float:
        """Needless redeliveries per enqueued job."""
        return self.needless / self.jobs if self.jobs else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(key=self.key, bound_ms=self.bound_ms, bound_formula=self.bound_formula,
                    needless_rate=round(self.needless_rate, 6))
        return data


@dataclass
class ModelRange:
    """The recovery (reap − fault) the analytic model allows, beside what was measured."""

    low_ms: int
    high_ms: int
    agrees: bool | None  # None: nothing was stranded, nothing to compare
    note: str


def predicted_recovery(cell: CellResult, handler_max_ms: int | None = None) -> ModelRange:
    """[max(0, L − H), bound]: the stranded lease was renewed at most H before the fault
    (without a heartbeat: claimed at most one handler duration before it), so its deadline is
    within (fault + L − H, fault + L], and it is recovered within the family's bound of that
    renewal (L + R: the reaper sweeps at most R after the deadline; BullMQ: 2R + max(L, R),
    its stalled checks). Nothing comes back before its lease lapsed, in either family."""
    renewal = cell.heartbeat_ms or handler_max_ms or cell.lease_ms
    low = max(0, cell.lease_ms - renewal)
    high = cell.bound_ms
    measured = cell.recovery
    if not measured.count or measured.min_ms is None or measured.max_ms is None:
        return ModelRange(low, high, None, "no stranded lease")
    slack = cell.tolerance_ms
    notes = []
    if measured.max_ms > high + slack:
        late = bound_model(cell.dialect).late
        notes.append(f"max {measured.max_ms} > {cell.bound_formula} {high}: {late}")
    if measured.min_ms < low - slack:
        notes.append(f"min {measured.min_ms} < L-H {low}: a lease was older than one heartbeat")
    return ModelRange(low, high, not notes, "; ".join(notes) or "within the model")


# --- the recommendation ---------------------------------------------------------------------


@dataclass
class Evidence:
    """The pooled distributions the recommendation argues from."""

    handler: LatencySummary
    extend_rtt: LatencySummary
    renewal_overhead_ms: int | None  # longest renewal gap beyond the heartbeat, any passing cell
    renewal_gap: LatencySummary = field(default_factory=LatencySummary)  # every run's, pooled
    extends: int = 0  # extend calls in the histories, with a round trip or not

    @classmethod
    def of(cls, measured: HistoryMeasurements, cells: list[CellResult]) -> Evidence:
        overheads = [cell.renewal_gap.max_ms - cell.heartbeat_ms for cell in cells
                     if cell.heartbeat_ms and cell.verdict == "pass"
                     and cell.renewal_gap.max_ms is not None]
        return cls(LatencySummary.of(measured.handler_ms),
                   LatencySummary.of(measured.extend_rtt_ms),
                   max(overheads) if overheads else None,
                   LatencySummary.of(measured.renewal_gap_ms), measured.extends)

    def lease_need_ms(self, heartbeat_ms: int) -> int | None:
        """The modelled longest time a live holder goes without renewing: with a heartbeat, the
        heartbeat + the longest delay beyond it in any passing cell's renewal gaps, else (no
        gap measured) + the longest extend round trip; None without either."""
        if not heartbeat_ms:
            return self.handler.max_ms
        if self.renewal_overhead_ms is not None:
            return heartbeat_ms + max(0, self.renewal_overhead_ms)
        if self.extend_rtt.max_ms is not None:
            return heartbeat_ms + self.extend_rtt.max_ms
        return None


@dataclass
class Assessment:
    cell: CellResult
    recovery_worst_ms: int  # max(the bound, the measured max): a few faults cannot show the worst
    recovery_margin_ms: int  # target - recovery_worst_ms
    lease_need_ms: int | None  # the renewal gap a lease must outlast (measured and modelled)
    lease_margin_ms: int | None  # lease_ms - lease_need_ms

    @property
    def margin_ms(self) -> int:
        lease = self.lease_margin_ms if self.lease_margin_ms is not None else 0
        return min(self.recovery_margin_ms, lease)

    @property
    def meets(self) -> bool:
        return (self.cell.verdict == "pass" and self.cell.needless == 0
                and self.recovery_margin_ms >= 0
                and self.lease_margin_ms is not None and self.lease_margin_ms >= 0)


def assess(cell: CellResult, target_ms: int, evidence: Evidence) -> Assessment:
    worst = max(cell.bound_ms, cell.recovery.max_ms or 0)
    # The longer of what this cell showed and what every passing cell's evidence predicts for
    # its heartbeat: one cell's few hundred attempts are a noisy sample of its worst gap.
    needs = [need for need in (cell.renewal_gap.max_ms,
                               evidence.lease_need_ms(cell.heartbeat_ms)) if need is not None]
    need = max(needs) if needs else None
    return Assessment(cell, worst, target_ms - worst, need,
                      None if need is None else cell.lease_ms - need)


@dataclass
class Recommendation:
    target_ms: int
    cell: str | None  # the chosen measured cell's key; None when no cell meets the target
    settings: dict[str, int] | None  # lease_ms, reap_interval_ms, heartbeat_ms of that cell
    margin_ms: int | None
    interpolated: dict[str, int] | None  # a balanced setting between measured cells, if better
    binding: str | None  # which constraint binds when no cell meets the target
    text: str
    warning: str | None = None  # said loudly beside the text (a 0 ms safety margin)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _round(value: float) -> int:
    return max(ROUND_TO_MS, int(round(value / ROUND_TO_MS)) * ROUND_TO_MS)


def _interpolate(best: Assessment, target_ms: int, evidence: Evidence,
                 leases: list[int]) -> dict[str, int] | None:
    """Where recovery headroom and lease headroom are equal (the widest min of the two), keeping
    the chosen reap interval and heartbeat-to-lease ratio; only inside the swept lease range.

    With L >= R the family's bound is L + its excess over the lease (R for echomq, 2R for
    BullMQ), so T - L - excess = L(1 - f) - overhead. Below R BullMQ's bound stays 3R whatever
    the lease, so a balance point under R is no better than L = R there."""
    cell = best.cell
    reap = cell.reap_interval_ms
    excess = family_bound_ms(reap, reap, cell.dialect) - reap
    if cell.heartbeat_ms:
        ratio = cell.heartbeat_ms / cell.lease_ms
        overhead = (best.lease_need_ms or 0) - cell.heartbeat_ms
        lease = (target_ms - excess + overhead) / (2 - ratio)
    else:
        ratio, overhead = 0.0, best.lease_need_ms or 0
        lease = (target_ms - excess + overhead) / 2  # T-L-excess = L - handler
    if bound_model(cell.dialect).lease_floor_is_interval:
        lease = max(lease, reap)
    lease_ms = _round(lease)
    if not min(leases) <= lease_ms <= max(leases) or lease_ms == cell.lease_ms:
        return None
    heartbeat = _round(ratio * lease_ms) if ratio else 0
    margin = min(target_ms - family_bound_ms(lease_ms, reap, cell.dialect),
                 lease_ms - heartbeat - overhead)
    if margin <= best.margin_ms or heartbeat >= lease_ms:
        return None
    return {"lease_ms": lease_ms, "reap_interval_ms": reap, "heartbeat_ms": heartbeat,
            "margin_ms": margin}


def _distributions(evidence: Evidence) -> str:
    """What the lease headroom was judged from, in words: never a figure that was not measured."""
    handler, rtt, gaps = evidence.handler, evidence.extend_rtt, evidence.renewal_gap
    parts = []
    if handler.count:
        parts.append(f"handlers held a lease (claim to complete) p50 {handler.p50_ms}, "
                     f"p99 {handler.p99_ms}, max {handler.max_ms} ms (n={handler.count})")
    if rtt.count:
        parts.append(f"extend round trips p50 {rtt.p50_ms}, p99 {rtt.p99_ms}, max {rtt.max_ms} "
                     f"ms (n={rtt.count})")
    elif evidence.extends:
        parts.append(f"the {evidence.extends} extends recorded carry no round trip (a history "
                     "read from the server's MONITOR feed sees when a renewal reached the "
                     "server, not how long its client waited), so the renewal evidence is the "
                     "gaps between a live holder's calls on its lease")
    else:
        parts.append("no extend was recorded (no heartbeat ran, or every handler finished "
                     "before its first renewal), so the renewal evidence is the gaps between a "
                     "live holder's calls on its lease")
    if gaps.count:
        overhead = evidence.renewal_overhead_ms
        parts.append(f"renewal gaps (per attempt, the longest a live, unfaulted holder went "
                     f"without reaching the server) p50 {gaps.p50_ms}, p99 {gaps.p99_ms}, max "
                     f"{gaps.max_ms} ms (n={gaps.count})"
                     + ("" if overhead is None else
                        f", at most {overhead} ms beyond the heartbeat in a passing cell"
                        if overhead > 0 else ", none beyond the heartbeat in a passing cell"))
    else:
        parts.append("no renewal gap was measured (no attempt of a live, unfaulted holder "
                     "finished)")
    return "; ".join(parts)


def recommend(cells: list[CellResult], target_ms: int, evidence: Evidence) -> Recommendation:
    """Pick the cell to use, or say which constraint binds. Never a cell that failed an
    invariant (or errored, or was aborted)."""
    passing = [cell for cell in cells if cell.verdict == "pass"]
    dropped = [cell for cell in cells if cell.verdict != "pass"]
    dropped_text = (f" {len(dropped)} cell(s) were not considered because they did not pass: "
                    + ", ".join(f"{c.key} ({c.verdict}"
                                + (f": {', '.join(c.failed_invariants)}" if c.failed_invariants
                                   else "") + ")" for c in dropped) + "."
                    ) if dropped else ""
    if not passing:
        return Recommendation(target_ms, None, None, None, None, "invariants",
                              "No cell passed every invariant, so none can be recommended: the "
                              "queue is broken before it is mistuned." + dropped_text)
    assessed = [assess(cell, target_ms, evidence) for cell in passing]
    meeting = [a for a in assessed if a.meets]
    if meeting:
        best = max(meeting, key=lambda a: (a.margin_ms, a.recovery_margin_ms
                                           + (a.lease_margin_ms or 0),
                                           -(a.cell.recovery.p99_ms or 0),
                                           a.cell.throughput_per_s))
        return _chosen(best, meeting, target_ms, evidence,
                       sorted({cell.lease_ms for cell in cells}), dropped_text)
    return _binding(assessed, target_ms, evidence, dropped_text)


def _chosen(best: Assessment, meeting: list[Assessment], target_ms: int, evidence: Evidence,
            leases: list[int], dropped_text: str) -> Recommendation:
    cell = best.cell
    heartbeat = f"heartbeat_ms = {cell.heartbeat_ms}" if cell.heartbeat_ms else "no heartbeat"
    measured_max = cell.recovery.max_ms
    renew = ("the longest a live worker went without renewing (measured here, or heartbeat + "
             "the longest renewal delay seen in any cell, whichever is longer)")
    text = (
        f"Use lease_ms = {cell.lease_ms}, reap_interval_ms = {cell.reap_interval_ms}, "
        f"{heartbeat}. Its worst-case recovery is {best.recovery_worst_ms} ms "
        f"({cell.bound_formula} = {cell.bound_ms}, measured max "
        f"{'-' if measured_max is None else measured_max} ms over {cell.recovery.count} "
        f"stranded lease(s)), {best.recovery_margin_ms} ms inside the {target_ms} ms target; "
        f"{renew} is {best.lease_need_ms} ms, so the lease has {best.lease_margin_ms} ms of "
        f"headroom, and it made 0 needless redeliveries in {cell.jobs} jobs over {cell.runs} "
        f"run(s). Its safety margin, the smaller of the two headrooms, is {best.margin_ms} ms: "
        f"the widest of the {len(meeting)} cell(s) that meet the target with zero needless "
        f"redeliveries (ties go to the larger other headroom). Evidence: "
        f"{_distributions(evidence)}."
    )
    interpolated = _interpolate(best, target_ms, evidence, leases)
    if interpolated:
        text += (
            f" Between the measured cells, lease_ms ≈ {interpolated['lease_ms']}"
            f" (heartbeat_ms ≈ {interpolated['heartbeat_ms'] or 'off'}, same reap interval) "
            f"would balance the two headrooms at about {interpolated['margin_ms']} ms by the "
            f"model; it was not measured, so sweep it before relying on it."
        )
    warning = None
    if best.margin_ms <= 0:
        sweeper = bound_model(cell.dialect).sweep
        warning = (f"the chosen cell's safety margin is {best.margin_ms} ms: it meets the target "
                   f"with nothing to spare, so any slower handler, late renewal or late {sweeper} "
                   "breaks it; sweep a wider grid before relying on it")
    return Recommendation(target_ms, cell.key, {"lease_ms": cell.lease_ms,
                                                "reap_interval_ms": cell.reap_interval_ms,
                                                "heartbeat_ms": cell.heartbeat_ms},
                          best.margin_ms, interpolated, None, text + dropped_text, warning)


def _binding(assessed: list[Assessment], target_ms: int, evidence: Evidence,
             dropped_text: str) -> Recommendation:
    fast = [a for a in assessed if a.recovery_margin_ms >= 0]
    safe = [a for a in assessed if a.cell.needless == 0 and a.lease_margin_ms is not None
            and a.lease_margin_ms >= 0]
    quickest = min(assessed, key=lambda a: a.recovery_worst_ms)
    longest_need = max((a.lease_need_ms for a in assessed if a.lease_need_ms is not None),
                       default=None)
    dialect = assessed[0].cell.dialect
    formula = bound_formula(dialect)
    if not fast:
        binding = "recovery"
        text = (f"No cell meets the {target_ms} ms recovery target: the quickest passing cell, "
                f"{quickest.cell.key}, can take {quickest.recovery_worst_ms} ms ({formula} = "
                f"{quickest.cell.bound_ms}, measured max {quickest.cell.recovery.max_ms} ms). "
                f"The recovery target binds: sweep shorter leases or reap intervals, or accept "
                f"a target of at least {quickest.recovery_worst_ms} ms.")
    elif longest_need is None:
        binding = "evidence"
        text = (f"No cell can be judged against needless redeliveries: the histories hold no "
                f"renewal evidence (no extend round trip, and no finished attempt of a live, "
                f"unfaulted holder to measure a renewal gap on), so how long a lease must be "
                f"is unknown. {len(fast)} passing cell(s) meet the {target_ms} ms recovery "
                f"target (e.g. {fast[0].cell.key}); run them with load that completes jobs "
                f"outside the faults.")
    elif not safe:
        binding = "lease"
        redelivering = [a for a in assessed if a.cell.needless]
        lucky = [a for a in assessed if not a.cell.needless]
        silent = max(assessed, key=lambda a: a.cell.renewal_gap.max_ms or 0)
        if silent.cell.renewal_gap.max_ms is not None:
            text = (f"No cell is safe from needless redeliveries: the longest a live, unfaulted "
                    f"worker went without reaching the server on a lease it held was "
                    f"{silent.cell.renewal_gap.max_ms} ms (in {silent.cell.key})")
        else:
            text = (f"No cell is safe from needless redeliveries: no cell's own renewal gap was "
                    f"measured, and the model puts the renewal gap at up to {longest_need} ms")
        if redelivering:
            most = max(redelivering, key=lambda a: a.cell.needless)
            text += (f", and {len(redelivering)} of {len(assessed)} passing cells redelivered "
                     f"needlessly (most: {most.cell.key}, {most.cell.needless} in "
                     f"{most.cell.jobs} jobs)")
        if lucky:
            example = max(lucky, key=lambda a: a.cell.lease_ms)
            text += (f"; the {len(lucky)} cell(s) with none (e.g. {example.cell.key}) lease for "
                     f"less than that silence (the conservative model, heartbeat + the longest "
                     f"delay beyond one seen in any cell, puts their need at "
                     f"{example.lease_need_ms} ms), so their zero is timing luck, not margin")
        need = min((a.lease_need_ms for a in assessed if a.lease_need_ms is not None),
                   default=None)
        reap = min(a.cell.reap_interval_ms for a in assessed)
        text += ". The lease binds: the handler or the network outlasts every swept lease_ms."
        if need is not None:
            worst = family_bound_ms(need, reap, dialect)
            text += (f" Zero needless redeliveries needs lease_ms above about {need} ms; with "
                     f"the shortest swept reap interval ({reap} ms) recovery could then take "
                     f"{worst} ms ({formula}), so "
                     + (f"the {target_ms} ms target cannot also be met: raise it, or remove "
                        f"what silences live workers (a shorter heartbeat helps only when the "
                        f"silence is the heartbeat's own period)." if worst > target_ms
                        else "sweep leases up to that."))
    else:
        binding = "conflict"
        safe_fastest = min(safe, key=lambda a: a.recovery_worst_ms)
        text = (f"The two constraints conflict on this grid: the cells that recover within "
                f"{target_ms} ms (e.g. {fast[0].cell.key}) redeliver needlessly or leave the "
                f"lease shorter than the renewal gap (up to {longest_need} ms), while the "
                f"quickest cell with zero needless redeliveries, {safe_fastest.cell.key}, can "
                f"take {safe_fastest.recovery_worst_ms} ms. Zero needless redeliveries needs "
                f"lease_ms above the renewal gap, and the target needs {formula} <= "
                f"{target_ms}: raise the target to "
                f"{safe_fastest.recovery_worst_ms} ms, shorten the heartbeat, or speed up the "
                f"handler.")
    text += f" Evidence: {_distributions(evidence)}." + dropped_text
    return Recommendation(target_ms, None, None, None, None, binding, text)
