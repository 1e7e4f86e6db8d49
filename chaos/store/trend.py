"""Trends over the run store: each scenario's figures over time, and its latest runs judged
against a baseline window of the runs before them (docs/store.md, "trend").

Pure: plain records and their samples in, plain results out; the store is read by the caller.

The test is on the samples behind the figures (RunStore.samples: each stranded lease's reap,
re-claim and re-complete, ms after the fault, and each lapsed lease's deadline to reap; the
run's pace: sweep gaps, claim waits, completes a second; chaos.store.kinds), pooled over the
runs of each window, not on one noisy percentile per run, towards the worse of each figure:

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

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.check.verdict import percentile
from chaos.store.kinds import (
    BY_KIND,
    FLOOR_BOUND,
    FLOOR_COUNT,
    FLOOR_MS,
    KINDS,
    SHARE_FLOOR,
    Kind,
)
from chaos.store.ranks import (  # noqa: F401 (EXACT_MAX_SAMPLES, _exact_upper_tail, midranks:
    EXACT_MAX_SAMPLES,  # re-exported for the tests and benchmarks that read them here)
    _exact_upper_tail,
    enough_runs,
    hodges_lehmann,
    mann_whitney_greater,
    midranks,
    smallest_p,
)

if TYPE_CHECKING:
    from chaos.store.database import StoredRun

DEFAULT_BASELINE = 5
DEFAULT_CANDIDATES = 3
MIN_BASELINE_RUNS = 2  # fewer: "too few runs", never an alarm
# The shift an alarm needs is at least this many times how far one baseline run alone sits from
# the others (run_noise_ms). Over windows of 5 + 3 unchanged runs whose offsets spread widely,
# x1.5 alarms in up to 2% of them, x2 in up to 0.6%, x3 in none but flags a 300 ms shift in a
# quarter of them only (benchmarks/trend_calibration.py --synthetic; docs/store.md, "trend").
NOISE_FACTOR = 2.0
BASELINE_VERDICTS = ("pass",)  # the standard a change is compared against
CANDIDATE_VERDICTS = ("pass", "fail")  # judged runs; unknown, error and aborted are not
BOUND_FIGURE = "bound_ms"
CAPACITY_SUFFIX = " (capacity)"  # the group of a scenario's capacity searches
# the report figure plotted with each kind
SAMPLE_PLOTS = {kind.kind: kind.plot for kind in KINDS}


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


# --- windows ----------------------------------------------------------------------------------


@dataclass
class Comparison:
    """One sample kind of one group: the baseline window against the candidates."""

    figure: str  # recovery | prompt | ... (chaos.store.kinds.KINDS)
    kind: str  # the sample kind (RunStore.samples) or per-run figure
    status: str  # regression | ok | too few runs | no samples | cannot alarm | shown
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
    unit: str = "ms"
    worse: int = 1  # +1: a larger value is worse; -1: a smaller one
    per_run: bool = False  # one value a run (a figure), not samples
    smallest_p: float = 0.0  # the smallest p-value these sizes can give (exact test)
    enough: str = ""  # cannot alarm: the window that could

    @property
    def regression(self) -> bool:
        return self.status == "regression"

    @property
    def baseline_values(self) -> list[float]:
        return self._values[0]

    @property
    def candidate_values(self) -> list[float]:
        return self._values[1]

    _values: tuple[list[float], list[float]] = field(default=([], []), repr=False)

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
                "p_value": self.p_value, "unit": self.unit, "worse": self.worse,
                "per_run": self.per_run, "smallest_p": self.smallest_p,
                "enough": self.enough or None}

    def text(self) -> str:
        """What moved, as one line: baseline vs now, the shift, its threshold and p-value."""
        if self.status in ("too few runs", "no samples"):
            return (f"{self.figure}: {self.status} ({len(self.baseline_runs)} baseline, "
                    f"{len(self.candidate_runs)} candidate run(s))")
        unit = f" {self.unit}" if self.unit else ""
        alarm = (f">= {self.threshold_ms:.0f}" if self.worse > 0
                 else f"<= {-self.threshold_ms:.1f}")
        shift = f"{self.shift_ms:+.0f}" if self.worse > 0 else f"{self.shift_ms:+.1f}"
        sizes = (f"one value a run, {len(self.baseline_runs)} vs {len(self.candidate_runs)}"
                 f" runs" if self.per_run else
                 f"{self.baseline_samples} vs {self.candidate_samples} samples of "
                 f"{len(self.baseline_runs)} vs {len(self.candidate_runs)} runs")
        middle = ("median" if self.per_run else "p50")
        text = (f"{self.figure}: {middle} {_ms(self.baseline_p50_ms)} -> "
                f"{_ms(self.candidate_p50_ms)}{unit}"
                + ("" if self.per_run else f", p99 {_ms(self.baseline_p99_ms)} -> "
                   f"{_ms(self.candidate_p99_ms)}{unit}")
                + f" (shift {shift}{unit}, alarm at {alarm}{unit}; Mann-Whitney p = "
                f"{self.p_value:.2g}; {sizes})")
        if self.status == "shown":
            text += "; shown, not tested: the sum of figures tested on their own"
        if self.status == "cannot alarm":
            text += (f"; cannot alarm at these sizes: the smallest p they give is "
                     f"{self.smallest_p:.2g}{self.enough}")
        return text


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pooled(runs: Iterable[Mapping[str, list[int]]], kind: str) -> list[int]:
    return [value for samples in runs for value in samples.get(kind, ())]


def compare_kind(kind: str, baseline: Sequence[Mapping[str, list[int]]],
                 candidates: Sequence[Mapping[str, list[int]]], settings: TrendSettings,
                 bound_ms: float | None = None, baseline_ids: Sequence[int] = (),
                 candidate_ids: Sequence[int] = ()) -> Comparison:
    """Judge one kind (chaos.store.kinds): the candidates' pooled samples against the
    baseline's, one-sided towards the worse (a latency up, a throughput down). The shift and
    its threshold are in the kind's unit, signed as candidate - baseline."""
    meta = BY_KIND.get(kind) or Kind(kind, kind, "ms", 1, FLOOR_BOUND, "")
    comparison = Comparison(meta.figure, kind, "ok", list(baseline_ids), list(candidate_ids),
                            unit=meta.unit, worse=meta.worse, per_run=bool(meta.per_run))
    if len(baseline) < MIN_BASELINE_RUNS or not candidates:
        comparison.status = "too few runs"
        return comparison
    base, cand = _pooled(baseline, kind), _pooled(candidates, kind)
    comparison.baseline_samples, comparison.candidate_samples = len(base), len(cand)
    if not base or not cand:
        comparison.status = "no samples"
        return comparison
    comparison._values = ([float(v) for v in base], [float(v) for v in cand])
    comparison.baseline_p50_ms, comparison.candidate_p50_ms = _median(base), _median(cand)
    comparison.baseline_p99_ms = float(percentile(sorted(base), 99))
    comparison.candidate_p99_ms = float(percentile(sorted(cand), 99))
    sign = meta.worse
    comparison.shift_ms = hodges_lehmann(base, cand)
    comparison.noise_ms = run_noise_ms(baseline, kind)
    floor = (max(settings.min_shift_ms, settings.min_shift_of_bound * (bound_ms or 0))
             if meta.floor == FLOOR_BOUND else settings.min_shift_ms if meta.floor == FLOOR_MS
             else 1.0 if meta.floor == FLOOR_COUNT
             else SHARE_FLOOR * abs(comparison.baseline_p50_ms))
    comparison.threshold_ms = max(floor, NOISE_FACTOR * comparison.noise_ms)
    comparison.p_value = mann_whitney_greater([sign * v for v in base],
                                              [sign * v for v in cand])
    comparison.smallest_p = smallest_p(len(base), len(cand))
    if not meta.tested:
        comparison.status = "shown"  # its parts are tested (chaos.store.kinds.Kind.tested)
    elif comparison.smallest_p >= settings.alpha:
        comparison.status = "cannot alarm"
        comparison.enough = enough_runs(len(base), len(cand), settings.alpha,
                                        meta.per_run != ())
    elif comparison.p_value < settings.alpha and \
            sign * comparison.shift_ms >= comparison.threshold_ms:
        comparison.status = "regression"
    return comparison


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
    """Every kind (chaos.store.kinds.KINDS, in order) of two windows of runs' samples."""
    return [compare_kind(kind.kind, baseline, candidates, settings, bound_ms, baseline_ids,
                         candidate_ids) for kind in KINDS]


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
    label: str | None = None  # the --by label's value ("" when the run has none)
    labels: dict[str, str] = field(default_factory=dict)  # every label of the run


@dataclass
class Group:
    """The runs of one scenario (and one value of the ``--by`` label), oldest first."""

    scenario: str
    label: str | None  # the --by label's value ("" when a run has none); None without --by
    points: list[Point]
    baseline_ids: list[int] = field(default_factory=list)
    candidate_ids: list[int] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    # a comparison by label (--by, --compare): (key, the baseline's value); the candidates'
    # value is ``label``. None: the latest runs against the runs before them.
    compared: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        if self.compared is not None:
            key, before = self.compared
            return f"{self.scenario} [{key}: {before} -> {self.label}]"
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
            "compared": None if self.compared is None else
            {"key": self.compared[0], "baseline": self.compared[1], "candidates": self.label},
            "verdicts": self.verdicts, "unknown_rate": self.unknown_rate,
            "unknown_reasons": dict(Counter(reason for point in self.points
                                            for reason in point.unknown_reasons)),
            "settings_changes": [{"run": run_id, "from": old, "to": new}
                                 for run_id, old, new in self.settings_changes],
            "baseline_runs": self.baseline_ids, "candidate_runs": self.candidate_ids,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "history": [{"run": p.run_id, "started_ms": p.started_ms, "verdict": p.verdict,
                         "settings_hash": p.settings_hash, "labels": p.labels,
                         "figures": p.figures} for p in self.points],
        }


def parse_compare(by: str | None, compare: str | None) -> tuple[str | None,
                                                                 tuple[str, str] | None]:
    """``--by KEY`` and ``--compare KEY=A..B`` -> (the label's key, (A, B) or None); TrendError
    (exit 2) names a malformed one."""
    if compare is None:
        return by, None
    key, sep, pair = compare.partition("=")
    before, dots, after = pair.partition("..")
    if not sep or not dots or not key.strip() or not before or not after:
        raise TrendError(f"--compare {compare!r}: expected KEY=A..B, e.g. code=v1..v2")
    if by is not None and by != key.strip():
        raise TrendError(f"--by {by} and --compare {compare}: two labels; give one")
    return key.strip(), (before, after)


def group_runs(stored: Sequence[StoredRun], by: str | None = None,
               scenario: str | None = None,
               compare: tuple[str, str] | None = None) -> list[Group]:
    """The store's runs per scenario name (whatever its settings hash: a ``--set`` is compared
    with the runs before it), each oldest first. A capacity search of a scenario is a group of
    its own (``<name> (capacity)``): it has figures of another kind and no samples, and would
    hide the scenario's runs from its windows.

    By a label (``by``, the label's key): per scenario, the latest value of the label (the one
    whose first run came last) against the value before it (``compare``: (A, B), the value A
    against B, whenever their runs came); runs without the label are left out. A scenario with
    one value of it: its latest runs against the runs before them, as without ``by``."""
    per_scenario: dict[str, list[Point]] = {}
    for run in sorted(stored, key=lambda run: (run.record.started_ms, run.id)):
        record = run.record
        if scenario is not None and record.scenario != scenario:
            continue
        name = record.scenario + (CAPACITY_SUFFIX if record.command == "capacity" else "")
        per_scenario.setdefault(name, []).append(Point(
            run.id, record.started_ms, record.verdict, record.settings_hash,
            dict(record.figures), list(record.unknown_reasons),
            None if by is None else record.labels.get(by), dict(record.labels)))
    groups = []
    for name, points in sorted(per_scenario.items()):
        if by is None:
            groups.append(Group(name, None, points))
            continue
        labelled = [p for p in points if p.label is not None]
        values = list(dict.fromkeys(p.label for p in labelled if p.label is not None))
        pair = compare if compare is not None else (
            (values[-2], values[-1]) if len(values) >= 2 else None)
        if pair is None:
            if values:
                groups.append(Group(name, values[0], labelled))
            continue
        if not any(p.label == pair[0] for p in labelled) or \
                not any(p.label == pair[1] for p in labelled):
            continue  # a scenario without runs of both values: nothing to compare
        groups.append(Group(name, pair[1], [p for p in labelled if p.label in pair],
                            compared=(by, pair[0])))
    return groups


def choose_windows(group: Group, settings: TrendSettings) -> None:
    """The candidates: the group's latest ``candidates`` judged runs; the baseline: the
    ``baseline`` passing runs before the first of them. Compared by label: the latest
    ``candidates`` judged runs of the candidates' value, the latest ``baseline`` passing runs
    of the baseline's value."""
    if group.compared is not None:
        baseline_value = group.compared[1]
        group.candidate_ids = [p.run_id for p in group.points if p.label == group.label
                               and p.verdict in CANDIDATE_VERDICTS][-settings.candidates:]
        group.baseline_ids = [p.run_id for p in group.points if p.label == baseline_value
                              and p.verdict in BASELINE_VERDICTS][-settings.baseline:]
        return
    judged = [p for p in group.points if p.verdict in CANDIDATE_VERDICTS]
    candidates = judged[-settings.candidates:]
    first = group.points.index(candidates[0]) if candidates else len(group.points)
    before = [p for p in group.points[:first] if p.verdict in BASELINE_VERDICTS]
    group.candidate_ids = [p.run_id for p in candidates]
    group.baseline_ids = [p.run_id for p in before[-settings.baseline:]]


def judge_group(group: Group, samples: Mapping[int, Mapping[str, list[int]]],
                settings: TrendSettings) -> None:
    """Compare the group's windows (choose_windows first) on every kind: the runs' samples,
    and the figures a run gives one of (``Kind.per_run``) as a sample of one."""
    by_id = {p.run_id: p for p in group.points}
    bounds = [by_id[i].figures[BOUND_FIGURE] for i in group.baseline_ids
              if BOUND_FIGURE in by_id[i].figures]

    def of_run(run_id: int) -> dict[str, list[int]]:
        kept = dict(samples.get(run_id, {}))
        figures = by_id[run_id].figures
        for kind in KINDS:
            if kind.per_run and all(name in figures for name in kind.per_run):
                kept[kind.kind] = [round(sum(figures[name] for name in kind.per_run))]
        return kept

    group.comparisons = compare_windows(
        [of_run(i) for i in group.baseline_ids],
        [of_run(i) for i in group.candidate_ids], settings,
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
