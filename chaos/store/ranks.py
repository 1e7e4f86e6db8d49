"""The rank test ``trend`` runs (docs/store.md, "trend"): a one-sided Mann-Whitney U test,
exact over the pooled midranks for small windows, else the normal approximation with the tie
correction; the Hodges-Lehmann shift that goes with it; and the smallest p-value a window's
sizes can give at all (a test of one value a run over 5 + 3 runs can never reach 0.01).

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

HL_MAX_VALUES = 1000  # values a side of the shift estimate (quantiles past it)
EXACT_MAX_SAMPLES = 24  # pooled samples up to which the U test is exact (a count of splits)


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


def smallest_p(n_base: int, n_cand: int) -> float:
    """The smallest one-sided p the exact test can give at these sizes (every candidate above
    every baseline value, no ties): 1 / C(n_base + n_cand, n_cand); the normal approximation
    past EXACT_MAX_SAMPLES has no such floor worth naming (0)."""
    if n_base + n_cand > EXACT_MAX_SAMPLES:
        return 0.0
    return 1 / math.comb(n_base + n_cand, n_cand)


def enough_runs(n_base: int, n_cand: int, alpha: float, per_run: bool) -> str:
    """The windows that could reach ``alpha``: more baseline runs, or more candidates."""
    what = "runs" if per_run else "samples"
    base = next(b for b in range(n_base, n_base + 1000) if smallest_p(b, n_cand) < alpha)
    cand = next(c for c in range(n_cand, n_cand + 1000) if smallest_p(n_base, c) < alpha)
    if per_run:
        return (f" (>= alpha {alpha:g}); --baseline {base} or --candidates {cand} could alarm")
    return f" (>= alpha {alpha:g}); {base} vs {n_cand} or {n_base} vs {cand} {what} could"


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
