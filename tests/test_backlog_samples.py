"""The runner's backlog samples (report.json ``run.backlog``) stay bounded on a long run."""

from __future__ import annotations

from chaos.run.runner import thin_samples


def test_samples_stay_bounded_and_evenly_spread_over_a_long_run():
    kept, period, samples = 100, 1, []
    next_t = 0
    for t in range(100_000):  # one tick a ms; a sample every `period` ms
        if t >= next_t:
            samples.append(t)
            if thin_samples(samples, kept):
                period *= 2
            next_t = t + period
    assert len(samples) <= kept + 1
    assert samples[0] == 0 and samples[-1] > 100_000 - 2 * period
    gaps = {b - a for a, b in zip(samples, samples[1:], strict=False)}
    assert max(gaps) <= 2 * min(gaps)  # no stretch of the run thinned more than another


def test_a_short_run_keeps_every_sample():
    samples = list(range(50))
    assert not thin_samples(samples, 100) and samples == list(range(50))
