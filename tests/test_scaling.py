"""The capacity plan's pure part (chaos.tools.scaling) on synthetic knees: a known USL is found
again, the hold-out check and the band say what they should, the plan picks the smallest pool
or says why none will do."""

from __future__ import annotations

import pytest

from chaos.tools.scaling import (
    TRUSTED_HOLDOUT,
    USL,
    Knee,
    PlanRequest,
    fit_usl,
    recommend,
    scaling_model,
)

TRUE = USL(lam=15.0, sigma=0.05, kappa=0.002)
SIZES = [1, 2, 4, 8, 16]


def knees_of(model: USL, sizes: list[int], step: float = 5.0,
             bottleneck: str = "pool", held: bool = True) -> list[Knee]:
    """Knees on ``model``'s curve, each with the next step's rate over it."""
    return [Knee(n, round(model.rate(n), 3), round(model.rate(n) + step, 3), bottleneck, held)
            for n in sizes]


def test_a_known_usl_is_found_again():
    fitted = fit_usl(SIZES, [TRUE.rate(n) for n in SIZES])
    assert fitted.lam == pytest.approx(TRUE.lam, rel=0.01)
    assert fitted.sigma == pytest.approx(TRUE.sigma, abs=0.005)
    assert fitted.kappa == pytest.approx(TRUE.kappa, abs=0.0005)
    assert fitted.peak_workers == pytest.approx(TRUE.peak_workers, rel=0.1)


def test_a_fit_has_no_more_parameters_than_sizes():
    one = fit_usl([4], [60.0])
    assert (one.lam, one.sigma, one.kappa) == (pytest.approx(15.0), 0.0, 0.0)
    two = fit_usl([1, 4], [15.0, 48.0])  # Amdahl: sigma alone bends it
    assert two.kappa == 0.0 and two.rate(4) == pytest.approx(48.0, rel=0.01)
    assert two.sigma == pytest.approx((4 * 15 / 48 - 1) / 3, abs=0.01)
    with pytest.raises(ValueError, match="rates > 0"):
        fit_usl([1, 2], [10.0, 0.0])


def test_the_holdout_predicts_the_largest_size_from_the_others():
    model = scaling_model(knees_of(TRUE, SIZES))
    assert model is not None and model.trusted, model.distrust
    assert model.holdout_workers == 16 and model.holdout_error is not None
    assert abs(model.holdout_error) < 0.02
    assert model.as_dict()["kind"] == "usl"
    # Noise on the largest size shows in the hold-out error, with its sign.
    noisy = [*knees_of(TRUE, SIZES[:-1]), Knee(16, TRUE.rate(16) * 0.6, TRUE.rate(16))]
    model = scaling_model(noisy)
    assert model is not None and model.holdout_error is not None
    assert model.holdout_error > TRUSTED_HOLDOUT and not model.trusted  # predicted over measured
    assert any("off the measured" in why for why in model.distrust)



def test_too_few_sizes_or_the_host_as_bottleneck_are_not_to_be_trusted():
    model = scaling_model(knees_of(TRUE, [1, 2, 4]))
    assert model is not None and not model.trusted
    assert "3 pool size(s) with a knee" in model.distrust[0]
    host = [*knees_of(TRUE, [1, 2, 4]), *knees_of(TRUE, [8], bottleneck="host")]
    model = scaling_model(host)
    assert model is not None and not model.trusted
    assert any("set by the host, not the queue" in why for why in model.distrust)


def test_predictions_stop_at_the_store_ceiling_and_the_band_holds_the_measurements():
    knees = knees_of(TRUE, [1, 2, 4, 8], step=5.0)
    model = scaling_model(knees, ceiling=100.0, predict_to=32)
    assert model is not None
    by_size = {p.workers: p for p in model.predictions}
    assert max(p.high for p in model.predictions) <= 100.0
    assert by_size[32].capped and by_size[32].rate == 100.0
    for knee in knees:  # the band spans the fits to the knees and to the rates over them
        prediction = by_size[knee.workers]
        assert prediction.low <= knee.rate + 0.1 and prediction.high >= knee.rate - 0.1
        assert prediction.measured == knee.rate
    assert by_size[8].high > by_size[8].low  # the upper-bound fit widens it


def test_the_plan_takes_a_measured_knee_then_the_models_low_band():
    knees = knees_of(TRUE, [1, 2, 4, 8], step=5.0)
    model = scaling_model(knees, predict_to=32)
    measured = recommend(PlanRequest(45.0, lose=1, hold_ms=30000), knees, model, ceiling=None)
    assert measured.workers == 5 and measured.measured and measured.held  # 4 measured 51
    assert "with 1 lost, 4 carry 45 jobs/s (held 30 s at" in measured.text
    modelled = recommend(PlanRequest(90.0, lose=2), knees, model, ceiling=None)
    assert modelled.workers is not None and modelled.workers > 10 and not modelled.measured
    assert "predicted, not held" in modelled.text and "not to be trusted" not in modelled.text
    assert "hold it: echomq-chaos capacity SCENARIO --set topology.workers=" in modelled.text
    assert model is not None
    assert model.predict(modelled.workers - 2).low >= 90.0


def test_the_plan_says_why_no_pool_can():
    knees = knees_of(TRUE, [1, 2, 4, 8], step=5.0)
    model = scaling_model(knees, ceiling=150.0)
    over_ceiling = recommend(PlanRequest(200.0), knees, model, ceiling=150.0)
    assert over_ceiling.workers is None and "the store's ceiling is 150" in over_ceiling.text
    assert model is not None and model.usl.peak_workers is not None
    peak = model.usl.rate(model.usl.peak_workers)
    beyond_peak = recommend(PlanRequest(peak + 10), knees, model, ceiling=None)
    assert beyond_peak.workers is None and "peaks at" in beyond_peak.text
    host = knees_of(TRUE, [1, 2], bottleneck="host")
    unknown = recommend(PlanRequest(500.0), host, None, ceiling=None, max_workers=8)
    assert unknown.workers is None and "set by the host or the generator" in unknown.text


# The plan of issue 45, as its 5 s steps measured it: every knee from 2 to 6 workers 16.875 x N,
# one worker 16.1, while the pool served 16.0 jobs/s a worker (4 slots / 249.7 ms).
ISSUE_KNEES = [Knee(1, 16.1, 17.0), *(Knee(n, 16.875 * n, 18.75 * n) for n in range(2, 7))]
SERVED = 4 * 1000 / 249.7


def test_no_prediction_is_above_what_the_pool_serves():
    model = scaling_model(ISSUE_KNEES, predict_to=12, service_per_worker=SERVED)
    assert model is not None
    for prediction in model.predictions:
        assert prediction.rate <= prediction.workers * SERVED + 0.1, prediction
        if prediction.measured is None:
            assert prediction.high <= prediction.workers * SERVED + 0.1, prediction
    assert any(p.served for p in model.predictions)


def test_the_band_holds_every_knee_and_the_holdout_measurement():
    """The fit through knees that are not all on one line: its band (residuals, hold-out error,
    leave-one-out and upper-bound fits) holds each knee measured, the one left out too; and
    knees not held are said to be so."""
    model = scaling_model(ISSUE_KNEES, predict_to=12)
    assert model is not None
    for knee in ISSUE_KNEES:
        band = model.predictions[knee.workers - 1]
        assert band.low <= knee.rate <= band.high, (knee, band)
    assert model.holdout_band is not None and model.holdout_measured == 16.875 * 6
    assert not model.trusted and any("not held" in why for why in model.distrust)
    scattered = [Knee(1, 15.0, 22.5, held=True), Knee(2, 33.0, 40.0, held=True),
                 Knee(3, 45.0, 52.5, held=True), Knee(4, 52.0, 60.0, held=True)]
    model = scaling_model(scattered, predict_to=8)
    assert model is not None and model.spread[0] < 0 < model.spread[1]
    for knee in scattered:
        band = model.predictions[knee.workers - 1]
        assert band.low <= knee.rate <= band.high, (knee, band)
    # the hold-out's own band (the fit without 4 workers) is reported, and judged
    low, high = model.holdout_band or (0.0, 0.0)
    assert (low <= 52.0 <= high) == (not any("lies outside it" in why
                                             for why in model.distrust))


def test_a_target_is_met_by_a_held_pool_or_said_predicted_not_held():
    """Issue 45: "--target-rate 50 --lose 1" took 4 workers because 3 stepped through 50.625,
    yet 3 workers held at 50 jobs/s for 30 s fell behind. A knee not held is a prediction."""
    stepped = [Knee(1, 15.0, 22.5), Knee(2, 30.0, 45.0), Knee(3, 50.625, 56.25),
               Knee(4, 60.0, 67.5)]
    request = PlanRequest(50.0, lose=1, hold_ms=30000,
                          confirm="echomq-chaos capacity scenarios/kill-worker.toml")
    answer = recommend(request, stepped, None, ceiling=None)
    assert answer.workers == 4 and not answer.held
    assert answer.text.startswith("4 workers, predicted, not held:")
    assert ("hold it: echomq-chaos capacity scenarios/kill-worker.toml --set topology.workers=3 "
            "--start-rate 50 --steps 1 --hold-ms 30000") in answer.text
    held = [Knee(1, 15.0, 22.5, held=True), Knee(2, 30.0, 45.0, held=True),
            Knee(3, 45.0, 48.0, held=True), Knee(4, 60.0, 67.5, held=True)]
    answer = recommend(request, held, None, ceiling=None)
    assert answer.workers == 5 and answer.held and answer.measured
    assert "with 1 lost, 4 carry 50 jobs/s (held 30 s at 60 jobs/s" in answer.text
