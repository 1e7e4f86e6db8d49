"""Trends over the run store: each scenario's figures over time, and its latest runs judged
against a baseline window of the runs before them (docs/store.md, "trend").

Pure: plain records and their samples in, plain results out; the store is read by the caller.

The test is on the samples behind the figures (RunStore.samples: each stranded lease's reap,
re-claim and re-complete, ms after the fault, and each lapsed lease's deadline to reap), pooled
over the runs of each window, not on one noisy percentile per run:

- a one-sided Mann-Whitney U test (candidates later than the baseline), exact over the pooled
  ranks for small windows, else the normal approximation with the tie correction;
- the effect: the Hodges-Lehmann shift (the median of every candidate - baseline difference),
  which must reach a threshold for a significant shift to be an alarm: ``min_shift_ms``,
  ``min_shift_of_bound`` of the baseline's recovery bound, and NOISE_FACTOR times how far one
  baseline run alone sits from the others. Leases
  stranded by one fault are reaped by the same reaper pass, so the samples of one run are not
  independent and the p-value alone is optimistic (a run-to-run wobble of 15 ms comes out at
  p < 1e-5); the threshold is what keeps that wobble from alarming (calibrated in
  docs/store.md).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.check.verdict import LatencySummary, percentile
from chaos.store.record import SAMPLE_FIGURES

if TYPE_CHECKING:
    from chaos.store.database import StoredRun

DEFAULT_BASELINE = 5
DEFAULT_CANDIDATES = 3
MIN_BASELINE_RUNS = 2  # fewer: "too few runs", never an alarm
HL_MAX_VALUES = 1000  # values a side of the shift estimate (quantiles past it)
EXACT_MAX_SAMPLES = 24  # pooled samples up to which the U test is exact (a count of splits)
# The shift an alarm needs is at least this many times how far one baseline run alone sits from
# the others (run_noise_ms). Over windows of 5 + 3 unchanged runs whose offsets spread widely,
# x1.5 alarms in up to 2% of them, x2 in up to 0.6%, x3 in none but flags a 300 ms shift in a
# quarter of them only (benchmarks/trend_calibration.py --synthetic; docs/store.md, "trend").
NOISE_FACTOR = 2.0
BASELINE_VERDICTS = ("pass",)  # the standard a change is compared against
CANDIDATE_VERDICTS = ("pass", "fail")  # judged runs; unknown, error and aborted are not
BOUND_FIGURE = "bound_ms"
CAPACITY_SUFFIX = " (capacity)"  # the group of a scenario's capacity searches
# figure name of each sample kind in the table, and the report figure plotted with it
SAMPLE_PLOTS = {kind: f"{figure}_p99_ms" for kind, figure in SAMPLE_FIGURES.items()}


class TrendError(ValueError):
    """Bad trend arguments (exit 2)."""


@dataclass(frozen=True)
class TrendSettings:
    baseline: int = DEFAULT_BASELINE
    candidates: int = DEFAULT_CANDIDATES
    alpha: float = 0.01
    min_shift_ms: float = 50.0
    min_shift_of_bound: float = 0.05

    def validate(self) -> None:
        if self.baseline < MIN_BASELINE_RUNS:
            raise TrendError(f"--baseline {self.baseline}: must be at least "
                             f"{MIN_BASELINE_RUNS} runs")
        if self.candidates < 1:
            raise TrendError(f"--candidates {self.candidates}: must be at least 1 run")
        if not 0 < self.alpha < 1:
            raise TrendError(f"--alpha {self.alpha}: must be between 0 and 1")
        if self.min_shift_ms < 0 or self.min_shift_of_bound < 0:
            raise TrendError("--min-shift-ms and --min-shift-of-bound must be >= 0")


# --- the test ---------------------------------------------------------------------------------


def midranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, ties sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def mann_whitney_greater(baseline: Sequence[float], candidates: Sequence[float]) -> float:
    """One-sided p-value of the Mann-Whitney U test that ``candidates`` tend to be larger than
    ``baseline``: exact (every split of the pooled midranks counted) up to EXACT_MAX_SAMPLES
    pooled samples, else the normal approximation with tie and continuity corrections."""
    n_base, n_cand = len(baseline), len(candidates)
    if not n_base or not n_cand:
        return 1.0
    ranks = midranks([*baseline, *candidates])
    rank_sum = sum(ranks[n_base:])
    if n_base + n_cand <= EXACT_MAX_SAMPLES:
        return _exact_upper_tail(ranks, n_cand, rank_sum)
    pooled = n_base + n_cand
    u = rank_sum - n_cand * (n_cand + 1) / 2
    ties = sum(t ** 3 - t for t in Counter(ranks).values())
    variance = n_base * n_cand / 12 * ((pooled + 1) - ties / (pooled * (pooled - 1)))
    if variance <= 0:
        return 1.0  # every sample equal: nothing moved
    z = (u - n_base * n_cand / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _exact_upper_tail(ranks: Sequence[float], drawn: int, observed: float) -> float:
    """P(rank sum of ``drawn`` ranks picked at random >= observed): a count over subsets by
    dynamic programming on doubled (so integer) midranks."""
    doubled = [round(rank * 2) for rank in ranks]
    target = round(observed * 2)
    # ways[k] maps a doubled rank sum to the number of k-subsets having it
    ways: list[Counter[int]] = [Counter({0: 1})] + [Counter() for _ in range(drawn)]
    for rank in doubled:
        for k in range(drawn, 0, -1):
            for total, count in ways[k - 1].items():
                ways[k][total + rank] += count
    everything = sum(ways[drawn].values())
    return sum(count for total, count in ways[drawn].items() if total >= target) / everything


# --- windows ----------------------------------------------------------------------------------


@dataclass
class Comparison:
    """One sample kind of one group: the baseline window against the candidates."""

    figure: str  # recovery | prompt | reclaim | recomplete
    kind: str  # the sample kind (RunStore.samples)
    status: str  # regression | ok | too few runs | no samples
    baseline_runs: list[int] = field(default_factory=list)
    candidate_runs: list[int] = field(default_factory=list)
    baseline_samples: int = 0
    candidate_samples: int = 0
    baseline_p50_ms: float | None = None
    candidate_p50_ms: float | None = None
    baseline_p99_ms: float | None = None
    candidate_p99_ms: float | None = None
    shift_ms: float = 0.0  # the Hodges-Lehmann shift: the median of candidate - baseline
    threshold_ms: float = 0.0  # the shift an alarm needs
    noise_ms: float = 0.0  # how far one baseline run sits from the others (run_noise_ms)
    p_value: float = 1.0

    @property
    def regression(self) -> bool:
        return self.status == "regression"

    def as_dict(self) -> dict[str, Any]:
        return {"figure": self.figure, "kind": self.kind, "status": self.status,
                "baseline_runs": self.baseline_runs, "candidate_runs": self.candidate_runs,
                "baseline_samples": self.baseline_samples,
                "candidate_samples": self.candidate_samples,
                "baseline_p50_ms": self.baseline_p50_ms,
                "candidate_p50_ms": self.candidate_p50_ms,
                "baseline_p99_ms": self.baseline_p99_ms,
                "candidate_p99_ms": self.candidate_p99_ms, "shift_ms": self.shift_ms,
                "threshold_ms": self.threshold_ms, "noise_ms": self.noise_ms,
                "p_value": self.p_value}

    def text(self) -> str:
        """What moved, as one line: baseline vs now, the shift, its threshold and p-value."""
        if self.status in ("too few runs", "no samples"):
            return (f"{self.figure}: {self.status} ({len(self.baseline_runs)} baseline, "
                    f"{len(self.candidate_runs)} candidate run(s))")
        return (f"{self.figure}: p50 {_ms(self.baseline_p50_ms)} -> "
                f"{_ms(self.candidate_p50_ms)} ms, p99 {_ms(self.baseline_p99_ms)} -> "
                f"{_ms(self.candidate_p99_ms)} ms (shift {self.shift_ms:+.0f} ms, alarm at "
                f">= {self.threshold_ms:.0f} ms; Mann-Whitney p = {self.p_value:.2g}; "
                f"{self.baseline_samples} vs {self.candidate_samples} samples of "
                f"{len(self.baseline_runs)} vs {len(self.candidate_runs)} runs)")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pooled(runs: Iterable[Mapping[str, list[int]]], kind: str) -> list[int]:
    return [value for samples in runs for value in samples.get(kind, ())]


def compare_kind(kind: str, baseline: Sequence[Mapping[str, list[int]]],
                 candidates: Sequence[Mapping[str, list[int]]], settings: TrendSettings,
                 bound_ms: float | None = None, baseline_ids: Sequence[int] = (),
                 candidate_ids: Sequence[int] = ()) -> Comparison:
    """Judge one sample kind: the candidates' pooled samples against the baseline's."""
    comparison = Comparison(SAMPLE_FIGURES.get(kind, kind), kind, "ok",
                            list(baseline_ids), list(candidate_ids))
    if len(baseline) < MIN_BASELINE_RUNS or not candidates:
        comparison.status = "too few runs"
        return comparison
    base, cand = _pooled(baseline, kind), _pooled(candidates, kind)
    comparison.baseline_samples, comparison.candidate_samples = len(base), len(cand)
    if not base or not cand:
        comparison.status = "no samples"
        return comparison
    base_summary, cand_summary = LatencySummary.of(base), LatencySummary.of(cand)
    comparison.baseline_p50_ms = _median(base)
    comparison.candidate_p50_ms = _median(cand)
    comparison.baseline_p99_ms = float(base_summary.p99_ms or 0)
    comparison.candidate_p99_ms = float(cand_summary.p99_ms or 0)
    comparison.shift_ms = hodges_lehmann(base, cand)
    comparison.noise_ms = run_noise_ms(baseline, kind)
    comparison.threshold_ms = max(settings.min_shift_ms,
                                  settings.min_shift_of_bound * (bound_ms or 0),
                                  NOISE_FACTOR * comparison.noise_ms)
    comparison.p_value = mann_whitney_greater(base, cand)
    if comparison.p_value < settings.alpha and comparison.shift_ms >= comparison.threshold_ms:
        comparison.status = "regression"
    return comparison


def hodges_lehmann(baseline: Sequence[float], candidates: Sequence[float]) -> float:
    """The shift estimate that goes with the U test: the median of every candidate - baseline
    difference. Robust where a median is not: samples in clusters (one per reaper pass) whose
    pooled median jumps from one cluster to the next. Past HL_MAX_VALUES values a side, each is
    first reduced to that many evenly spaced quantiles."""
    import numpy as np

    def reduced(values: Sequence[float]) -> Any:
        ordered = np.sort(np.asarray(values, dtype=float))
        if len(ordered) <= HL_MAX_VALUES:
            return ordered
        return np.quantile(ordered, np.linspace(0, 1, HL_MAX_VALUES))

    return float(np.median(np.subtract.outer(reduced(candidates), reduced(baseline))))


def run_noise_ms(runs: Sequence[Mapping[str, list[int]]], kind: str) -> float:
    """How far one baseline run alone sits from the others: the largest Hodges-Lehmann shift
    (either way) of a run against the rest of the baseline pooled. A shift of the candidates no
    larger than that is what a single run already differs by."""
    samples = [list(run[kind]) for run in runs if run.get(kind)]
    if len(samples) < 2:
        return 0.0
    return max(abs(hodges_lehmann([v for j, other in enumerate(samples) if j != i
                                   for v in other], own)) for i, own in enumerate(samples))


def _median(values: list[int]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1]
                                                           + ordered[middle]) / 2


def compare_windows(baseline: Sequence[Mapping[str, list[int]]],
                    candidates: Sequence[Mapping[str, list[int]]],
                    settings: TrendSettings, bound_ms: float | None = None,
                    baseline_ids: Sequence[int] = (),
                    candidate_ids: Sequence[int] = ()) -> list[Comparison]:
    """Every sample kind (SAMPLE_FIGURES, in order) of two windows of runs' samples."""
    return [compare_kind(kind, baseline, candidates, settings, bound_ms, baseline_ids,
                         candidate_ids) for kind in SAMPLE_FIGURES]


# --- groups -----------------------------------------------------------------------------------


@dataclass
class Point:
    """One run in a group's history."""

    run_id: int
    started_ms: int
    verdict: str
    settings_hash: str
    figures: dict[str, float]
    unknown_reasons: list[str]


@dataclass
class Group:
    """The runs of one scenario (and one value of the ``--by`` label), oldest first."""

    scenario: str
    label: str | None  # the --by label's value ("" when a run has none); None without --by
    points: list[Point]
    baseline_ids: list[int] = field(default_factory=list)
    candidate_ids: list[int] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.scenario if self.label is None else f"{self.scenario} [{self.label}]"

    @property
    def verdicts(self) -> dict[str, int]:
        return dict(Counter(point.verdict for point in self.points))

    @property
    def unknown_rate(self) -> float:
        """The share of its runs that ended ``unknown``: how flaky the scenario is."""
        return (sum(p.verdict == "unknown" for p in self.points) / len(self.points)
                if self.points else 0.0)

    @property
    def settings_changes(self) -> list[tuple[int, str, str]]:
        """(run id, hash before, hash from it on) wherever the resolved settings changed."""
        changes = []
        for before, after in zip(self.points, self.points[1:], strict=False):
            if before.settings_hash != after.settings_hash:
                changes.append((after.run_id, before.settings_hash, after.settings_hash))
        return changes

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.regression]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "label": self.label, "runs": len(self.points),
            "verdicts": self.verdicts, "unknown_rate": self.unknown_rate,
            "unknown_reasons": dict(Counter(reason for point in self.points
                                            for reason in point.unknown_reasons)),
            "settings_changes": [{"run": run_id, "from": old, "to": new}
                                 for run_id, old, new in self.settings_changes],
            "baseline_runs": self.baseline_ids, "candidate_runs": self.candidate_ids,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "history": [{"run": p.run_id, "started_ms": p.started_ms, "verdict": p.verdict,
                         "settings_hash": p.settings_hash, "figures": p.figures}
                        for p in self.points],
        }


def group_runs(stored: Sequence[StoredRun], by: str | None = None,
               scenario: str | None = None) -> list[Group]:
    """The store's runs per scenario name (whatever its settings hash: a ``--set`` is compared
    with the runs before it), and per value of the label ``by``; each oldest first. A capacity
    search of a scenario is a group of its own (``<name> (capacity)``): it has figures of
    another kind and no samples, and would hide the scenario's runs from its windows."""
    groups: dict[tuple[str, str | None], list[Point]] = {}
    for run in sorted(stored, key=lambda run: (run.record.started_ms, run.id)):
        record = run.record
        if scenario is not None and record.scenario != scenario:
            continue
        name = record.scenario + (CAPACITY_SUFFIX if record.command == "capacity" else "")
        key = (name, None if by is None else record.labels.get(by, ""))
        groups.setdefault(key, []).append(Point(
            run.id, record.started_ms, record.verdict, record.settings_hash,
            dict(record.figures), list(record.unknown_reasons)))
    return [Group(name, label, points) for (name, label), points in sorted(
        groups.items(), key=lambda item: (item[0][0], item[0][1] or ""))]


def choose_windows(group: Group, settings: TrendSettings) -> None:
    """The candidates: the group's latest ``candidates`` judged runs; the baseline: the
    ``baseline`` passing runs before the first of them."""
    judged = [p for p in group.points if p.verdict in CANDIDATE_VERDICTS]
    candidates = judged[-settings.candidates:]
    first = group.points.index(candidates[0]) if candidates else len(group.points)
    before = [p for p in group.points[:first] if p.verdict in BASELINE_VERDICTS]
    group.candidate_ids = [p.run_id for p in candidates]
    group.baseline_ids = [p.run_id for p in before[-settings.baseline:]]


def judge_group(group: Group, samples: Mapping[int, Mapping[str, list[int]]],
                settings: TrendSettings) -> None:
    """Compare the group's windows (choose_windows first) on every sample kind."""
    by_id = {p.run_id: p for p in group.points}
    bounds = [by_id[i].figures[BOUND_FIGURE] for i in group.baseline_ids
              if BOUND_FIGURE in by_id[i].figures]
    group.comparisons = compare_windows(
        [samples.get(i, {}) for i in group.baseline_ids],
        [samples.get(i, {}) for i in group.candidate_ids], settings,
        bound_ms=percentile(sorted(int(b) for b in bounds), 50) if bounds else None,
        baseline_ids=group.baseline_ids, candidate_ids=group.candidate_ids)


def figure_names(groups: Sequence[Group]) -> list[str]:
    """Every figure the groups' runs hold, the sampled ones first."""
    seen = dict.fromkeys(SAMPLE_PLOTS.values())
    for group in groups:
        for point in group.points:
            seen.update(dict.fromkeys(point.figures))
    present = {name for group in groups for point in group.points for name in point.figures}
    return [name for name in seen if name in present and name != BOUND_FIGURE]
