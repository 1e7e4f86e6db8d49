"""How a worker pool's knee grows with its size: the Universal Scalability Law fitted to measured
knees, checked on a size it was not fitted to, and the smallest pool that carries a target rate.

Pure: knees in, a model and a recommendation out (``chaos.tools.capacity`` measures the knees).

    X(N) = lambda N / (1 + sigma (N - 1) + kappa N (N - 1))

lambda is one worker's rate, sigma the share of the work that serialises (contention: the knee
flattens), kappa the cost of keeping workers coherent (crosstalk: past N* = sqrt((1 - sigma) /
kappa) more workers carry less). The fit minimises the relative error of each size (a knee of
15 jobs/s counts as much as one of 120): for fixed sigma and kappa the best lambda has a closed
form, so a grid over (sigma, kappa), refined around its best cell, finds the optimum without
a solver. A fit never has more parameters than sizes: one size fits lambda alone, two add sigma
(Amdahl's law), three or more all three.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

MODEL_KIND = "usl"
TRUSTED_SIZES = 4  # fewer sizes than this: the fit has (nearly) as many parameters as points
TRUSTED_HOLDOUT = 0.2  # a hold-out prediction off by more than this share: not to be trusted
SIGMA_MAX, KAPPA_MAX = 1.0, 1.0
GRID = 41  # points per axis of each grid pass
PASSES = 4  # each pass narrows the grid around the best cell so far
# Bottlenecks that make a knee a lower bound of the pool's capacity, not a measure of it.
NOT_THE_QUEUES = ("host", "generator")


@dataclass(frozen=True)
class Knee:
    """One pool size's measured knee: the highest rate that fit (``rate``), the first that did
    not (``over``; None when every step fit), and what limited it."""

    workers: int
    rate: float
    over: float | None = None
    bottleneck: str = "pool"
    held: bool = False  # the knee was held (confirmed over a longer window), not only stepped


@dataclass(frozen=True)
class USL:
    lam: float  # jobs/s of one worker (lambda)
    sigma: float = 0.0
    kappa: float = 0.0

    def rate(self, workers: float) -> float:
        n = workers
        return self.lam * n / (1 + self.sigma * (n - 1) + self.kappa * n * (n - 1))

    @property
    def peak_workers(self) -> float | None:
        """Where X(N) peaks (None: it never does, kappa = 0)."""
        if self.kappa <= 0:
            return None
        return math.sqrt(max(0.0, 1 - self.sigma) / self.kappa)


def _scaled(workers: np.ndarray, sigma: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    """X(N) / lambda for each (sigma, kappa) of the grid (rows) and each size (columns)."""
    n = workers[None, :]
    return n / (1 + sigma[:, None] * (n - 1) + kappa[:, None] * n * (n - 1))


def _best_on(workers: np.ndarray, rates: np.ndarray, sigmas: np.ndarray,
             kappas: np.ndarray) -> tuple[float, float, float, float]:
    """The least relative squared error over a grid: (error, lambda, sigma, kappa)."""
    sigma, kappa = (axis.ravel() for axis in np.meshgrid(sigmas, kappas, indexing="ij"))
    shape = _scaled(workers, sigma, kappa) / rates[None, :]  # predicted / measured, per lambda
    lam = shape.sum(axis=1) / (shape ** 2).sum(axis=1)  # minimises sum (lam * shape - 1)^2
    error = ((lam[:, None] * shape - 1) ** 2).sum(axis=1)
    # Ties (fewer points than the grid's freedom) go to the simplest model: least sigma+kappa.
    best = int(np.lexsort((sigma + kappa, np.round(error, 12)))[0])
    return float(error[best]), float(lam[best]), float(sigma[best]), float(kappa[best])


def fit_usl(workers: Sequence[float], rates: Sequence[float]) -> USL:
    """The USL through measured (pool size, rate) points, at most one parameter per point."""
    if not workers or len(workers) != len(rates):
        raise ValueError("fit_usl needs as many rates as pool sizes, at least one")
    if min(rates) <= 0 or min(workers) < 1:
        raise ValueError(f"fit_usl needs rates > 0 and sizes >= 1: sizes {list(workers)}, "
                         f"rates {list(rates)}")
    n = np.asarray(workers, dtype=float)
    x = np.asarray(rates, dtype=float)
    free = len(set(workers))
    if free == 1:  # lambda alone: the mean per-worker rate, relative error
        shape = n / x
        return USL(float(shape.sum() / (shape ** 2).sum()))
    sigma_range = (0.0, SIGMA_MAX)
    kappa_range = (0.0, KAPPA_MAX if free >= 3 else 0.0)
    best = (math.inf, 0.0, 0.0, 0.0)
    for _ in range(PASSES):
        sigmas = np.linspace(*sigma_range, GRID)
        # kappa spans orders of magnitude: a square-root spacing puts points near 0
        kappas = np.linspace(math.sqrt(kappa_range[0]), math.sqrt(kappa_range[1]), GRID) ** 2
        found = _best_on(n, x, sigmas, kappas)
        if found[0] <= best[0]:
            best = found
        _, _, sigma, kappa = best
        sigma_step = (sigma_range[1] - sigma_range[0]) / (GRID - 1)
        root_step = (math.sqrt(kappa_range[1]) - math.sqrt(kappa_range[0])) / (GRID - 1)
        sigma_range = (max(0.0, sigma - 2 * sigma_step), min(SIGMA_MAX, sigma + 2 * sigma_step))
        root = math.sqrt(kappa)
        kappa_range = (max(0.0, root - 2 * root_step) ** 2,
                       min(math.sqrt(KAPPA_MAX), root + 2 * root_step) ** 2)
    _, lam, sigma, kappa = best
    return USL(lam, sigma, kappa)


@dataclass(frozen=True)
class Prediction:
    workers: int
    rate: float  # the fit's, capped at the store's ceiling and the pool's service rate
    low: float
    high: float
    measured: float | None = None  # the knee measured at this size, if it was run
    capped: bool = False  # the store's ceiling, not the model, sets it
    served: bool = False  # the pool's service rate (N x slots / mean hold), not the model, sets it


@dataclass
class ScalingModel:
    kind: str
    usl: USL
    sizes: int  # pool sizes the fit used
    holdout_workers: int | None = None
    holdout_predicted: float | None = None
    holdout_measured: float | None = None
    holdout_error: float | None = None  # (predicted - measured) / measured at the left-out size
    holdout_band: tuple[float, float] | None = None  # the fit without it: its band there
    ceiling: float | None = None  # the store's, jobs/s
    service_per_worker: float | None = None  # slots / mean claim-to-complete, one worker's
    trusted: bool = False
    distrust: list[str] = field(default_factory=list)
    fits: list[USL] = field(default_factory=list)  # the band's: jackknife and upper-bound fits
    # How far below and above the fit the knees measured fell (the fit's residuals and the
    # hold-out's error, as shares of the fit): the band spans at least these at every size.
    spread: tuple[float, float] = (0.0, 0.0)
    predictions: list[Prediction] = field(default_factory=list)

    def predict(self, workers: int) -> Prediction:
        central = self.usl.rate(workers)
        rates = [fit.rate(workers) for fit in self.fits]
        low = min([central * (1 + self.spread[0]), *rates])
        high = max([central * (1 + self.spread[1]), *rates])
        capped = self.ceiling is not None and central > self.ceiling
        served = (self.service_per_worker is not None
                  and central > workers * self.service_per_worker
                  and (self.ceiling is None or workers * self.service_per_worker < self.ceiling))
        for cap in (self.ceiling,
                    None if self.service_per_worker is None
                    else workers * self.service_per_worker):
            if cap is not None:
                central, low, high = (min(value, cap) for value in (central, low, high))
        return Prediction(workers, round(central, 1), round(low, 1), round(high, 1),
                          capped=capped, served=served)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "lambda": round(self.usl.lam, 3),
            "sigma": round(self.usl.sigma, 4), "kappa": round(self.usl.kappa, 5),
            "peak_workers": (None if self.usl.peak_workers is None
                             else round(self.usl.peak_workers, 1)),
            "sizes": self.sizes, "holdout_workers": self.holdout_workers,
            "holdout_predicted": self.holdout_predicted,
            "holdout_measured": self.holdout_measured, "holdout_error": self.holdout_error,
            "holdout_band": self.holdout_band, "spread": self.spread,
            "store_ceiling": self.ceiling, "service_per_worker": self.service_per_worker,
            "trusted": self.trusted, "distrust": self.distrust,
            "predictions": [asdict(p) for p in self.predictions],
        }


def _fit(knees: Sequence[Knee], upper: bool = False) -> USL:
    """Fitted to the knees (the highest rates that fit), or to the first rates that did not
    (``upper``: the capacity lies between the two)."""
    return fit_usl([k.workers for k in knees],
                   [(k.over if upper and k.over is not None else k.rate) for k in knees])


def _spread(fit: USL, knees: Sequence[Knee], extra: Sequence[float] = ()) -> tuple[float, float]:
    """How far below (<= 0) and above (>= 0) ``fit`` the knees lie, as shares of the fit."""
    errors = [k.rate / fit.rate(k.workers) - 1 for k in knees if fit.rate(k.workers) > 0]
    errors += list(extra)
    return round(min([0.0, *errors]), 4), round(max([0.0, *errors]), 4)


def _band_model(knees: Sequence[Knee], ceiling: float | None,
                service_per_worker: float | None) -> ScalingModel:
    """The fit to ``knees`` with its band (no hold-out): what the hold-out check predicts with."""
    model = ScalingModel(MODEL_KIND, _fit(knees), len(knees), ceiling=ceiling,
                         service_per_worker=service_per_worker)
    if len(knees) >= 2:
        model.fits = [_fit([k for k in knees if k is not left]) for left in knees]
    if any(k.over is not None for k in knees):
        model.fits.append(_fit(knees, upper=True))
    model.spread = _spread(model.usl, knees)
    return model


def scaling_model(knees: Sequence[Knee], ceiling: float | None = None,
                  predict_to: int | None = None,
                  service_per_worker: float | None = None) -> ScalingModel | None:
    """The USL through the knees (None without one), its hold-out check (fitted without the
    largest size, predicting it, with that fit's band there), a band and predictions up to
    ``predict_to`` workers (default twice the largest size), capped at the store's ``ceiling``
    and at N x ``service_per_worker`` (Little's law: no pool serves more than its slots over
    the mean hold time).

    The band at each size spans the fits leaving out each size in turn, the fit to the first
    rates that did not fit, and the fit widened by the largest share any knee (and the hold-out
    measurement) lay below or above it: so it holds every knee measured, and a size not run is
    given at least the uncertainty the hold-out showed."""
    usable = sorted((k for k in knees if k.rate > 0), key=lambda k: k.workers)
    if not usable:
        return None
    model = _band_model(usable, ceiling, service_per_worker)
    holdout_error: list[float] = []
    outside = ""  # the hold-out measurement outside the band the fit without it gave
    if len(usable) >= 2:
        held, rest = usable[-1], usable[:-1]
        without = _band_model(rest, ceiling, service_per_worker)
        guess = without.predict(held.workers)
        model.holdout_workers = held.workers
        model.holdout_predicted = round(without.usl.rate(held.workers), 1)
        model.holdout_measured = held.rate
        model.holdout_error = round((model.holdout_predicted - held.rate) / held.rate, 3)
        model.holdout_band = (guess.low, guess.high)
        holdout_error = [held.rate / without.usl.rate(held.workers) - 1]
        if not guess.low <= held.rate <= guess.high:
            outside = (f"the fit without {held.workers} workers gives a band of "
                       f"{guess.low:g}-{guess.high:g} jobs/s there; the knee measured, "
                       f"{held.rate:g}, lies outside it")
    model.spread = _spread(model.usl, usable, holdout_error)
    if len(usable) < TRUSTED_SIZES:
        model.distrust.append(f"{len(usable)} pool size(s) with a knee: at least "
                              f"{TRUSTED_SIZES} are needed to fit three parameters and check "
                              "them")
    if outside:
        model.distrust.append(outside)
    if model.holdout_error is not None and abs(model.holdout_error) > TRUSTED_HOLDOUT:
        model.distrust.append(f"the fit without {model.holdout_workers} workers predicts "
                              f"{model.holdout_predicted:g} jobs/s there, "
                              f"{model.holdout_error:+.0%} off the measured "
                              f"{model.holdout_measured:g}")
    unheld = [k.workers for k in usable if not k.held]
    if unheld:
        model.distrust.append("the knee(s) at " + ", ".join(map(str, unheld)) + " workers "
                              "were not held (a step's, not a rate shown sustained)")
    for knee in usable:
        if knee.bottleneck in NOT_THE_QUEUES:
            model.distrust.append(f"the knee at {knee.workers} workers was set by the "
                                  f"{knee.bottleneck}, not the queue: a lower bound")
        if knee.over is None:
            model.distrust.append(f"at {knee.workers} workers every step fit: the knee is "
                                  "only a lower bound")
    model.trusted = not model.distrust
    largest = usable[-1].workers
    measured = {k.workers: k.rate for k in usable}
    for workers in range(1, (predict_to or 2 * largest) + 1):
        p = model.predict(workers)
        seen = measured.get(workers)
        low, high = (p.low, p.high) if seen is None else (min(p.low, seen), max(p.high, seen))
        model.predictions.append(Prediction(workers, p.rate, low, high, seen, p.capped,
                                            p.served))
    return model


@dataclass(frozen=True)
class PlanRequest:
    target_rate: float
    lose: int = 0
    under_faults: bool = False  # the knees were measured with the scenario's faults in each step
    hold_ms: int = 0  # how long each knee was held (0: not held)
    confirm: str = ""  # the command that holds one pool (``--set topology.workers=N`` follows)


@dataclass
class Recommendation:
    workers: int | None  # the smallest pool that carries the target, None when none can
    text: str
    measured: bool = False  # the carrying size (less the lost workers) was measured, not modelled
    held: bool = False  # ... and held at the target rate or above

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _confirm(request: PlanRequest, left: int) -> str:
    hold_ms = request.hold_ms or 30_000
    command = request.confirm or "echomq-chaos capacity SCENARIO"
    return (f"hold it: {command} --set topology.workers={left} --start-rate "
            f"{request.target_rate:g} --steps 1 --hold-ms {hold_ms}"
            + (" --fault" if request.under_faults else ""))


def recommend(request: PlanRequest, knees: Sequence[Knee], model: ScalingModel | None,
              ceiling: float | None, max_workers: int = 256) -> Recommendation:
    """The smallest pool N whose N - lose workers were held at the target rate (a held knee at
    or above it), else the smallest one predicted to carry it (a knee not held, or the model's
    low band: "predicted, not held", with the command that holds it), never past the store's
    ceiling."""
    rate, lose = request.target_rate, request.lose
    faults = ("with the scenario's faults in every step" if request.under_faults
              else "without faults (add --fault to size under them)")
    if ceiling is not None and rate > ceiling:
        return Recommendation(None, (
            f"no pool on this store can carry {rate:g} jobs/s: the store's ceiling is "
            f"{ceiling:g} jobs/s (its main thread busy all the time at the CPU per job "
            "measured); a faster store or a queue sharded over several is needed"))
    measured = {k.workers: k for k in knees}
    predicted: Recommendation | None = None  # the smallest pool predicted, not held
    for workers in range(lose + 1, max_workers + 1):
        left = workers - lose
        knee = measured.get(left)
        if knee is not None and knee.rate >= rate and knee.held:
            smaller = ("" if predicted is None else
                       f"; fewer may do: {predicted.text}")
            return Recommendation(workers, (
                f"{workers} workers: with {lose} lost, {left} carry {rate:g} jobs/s (held "
                f"{request.hold_ms / 1000:g} s at {knee.rate:g} jobs/s, {faults}){smaller}"),
                measured=True, held=True)
        if predicted is not None:
            continue  # looking on for a held pool only
        if knee is not None and knee.rate >= rate:
            predicted = Recommendation(workers, (
                f"{workers} workers, predicted, not held: with {lose} lost, {left} fit "
                f"{rate:g} jobs/s in steps (knee {knee.rate:g} jobs/s, {faults}) but were not "
                f"held there; {_confirm(request, left)}"), measured=True)
            continue
        if knee is not None and knee.over is not None and knee.bottleneck not in NOT_THE_QUEUES:
            continue  # measured, and the queue's limit is below the target: no model overrules
        if model is None:
            continue
        band = model.predict(left)
        if band.low >= rate:
            trust = ("" if model.trusted else
                     "; the model is not to be trusted (" + "; ".join(model.distrust) + ")")
            predicted = Recommendation(workers, (
                f"{workers} workers, predicted, not held: with {lose} lost, {left} are "
                f"predicted to carry {band.low:g}-{band.high:g} jobs/s (USL, knees {faults}); "
                f"{_confirm(request, left)}{trust}"))
    if predicted is not None:
        return predicted
    if model is not None and model.usl.peak_workers is not None:
        peak = model.usl.rate(model.usl.peak_workers)
        if peak < rate:
            return Recommendation(None, (
                f"no pool on this store can carry {rate:g} jobs/s: the fitted USL peaks at "
                f"{peak:.1f} jobs/s near {model.usl.peak_workers:.0f} workers (kappa "
                f"{model.usl.kappa:.4g}: more workers carry less past it)"))
    lower = [k for k in knees if k.bottleneck in NOT_THE_QUEUES]
    why = ("; the knees at " + ", ".join(f"{k.workers}" for k in lower)
           + " workers were set by the host or the generator, not the queue") if lower else ""
    return Recommendation(None, (
        f"no pool of up to {max_workers} workers is shown to carry {rate:g} jobs/s with "
        f"{lose} lost: neither a measured knee nor the model's low band reaches it{why}"))
