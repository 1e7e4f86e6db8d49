"""The checker's BullMQ bound (chaos.check.bullmq), on hand-written histories: a run event with
``dialect = "bullmq"`` makes recovery_bound judge 2 x stalledInterval + max(lockDuration,
stalledInterval) and reap_prompt its lag; every other history keeps lease + reap interval."""

from __future__ import annotations

import pytest
from histories import History

from chaos.check.bullmq import (
    bound_comparison,
    bullmq_bound_ms,
    bullmq_reap_lag_ms,
    checks_on_time_bound_ms,
)
from chaos.check.checker import check
from chaos.history.schema import Run

LEASE, INTERVAL, TOLERANCE = 300, 1000, 100  # a short lock: lockDuration < stalledInterval


def _killed_holder(dialect: str, reap_after_renewal_ms: int) -> History:
    """w1 claims a, renews it at 100, is killed at 150; a is reaped ``reap_after_renewal_ms``
    after that renewal, claimed again by w2 and completed."""
    h = History(LEASE, INTERVAL, TOLERANCE, run=False)
    h.write(Run(scenario="hand-written", lease_ms=LEASE, reap_interval_ms=INTERVAL,
                tolerance_ms=TOLERANCE, dialect=dialect), 0)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=1)
    h.extend("a", attempt=1, worker="w1", ts=100)
    h.fault("kill", "w1", ts=150)
    reap_ts = 100 + reap_after_renewal_ms
    h.reap("a", attempt=1, ts=reap_ts)
    h.claim("a", attempt=2, worker="w2", ts=reap_ts + 1)
    h.complete("a", attempt=2, worker="w2", ts=reap_ts + 50)
    h.phase("end", ts=reap_ts + 60, drained=1)
    return h


def test_formulas():
    assert checks_on_time_bound_ms(1000, 500) == 1500  # L >= S: lease + one interval
    assert checks_on_time_bound_ms(300, 1000) == 2000  # L < S: two intervals
    assert bullmq_bound_ms(1000, 500) == 2000 and bullmq_bound_ms(300, 1000) == 3000
    assert bullmq_reap_lag_ms(1000, 500) == 1000 and bullmq_reap_lag_ms(300, 1000) == 2700
    assert bound_comparison(300, 1000, [1200, 2672]) == {
        "recoveries": 2, "worst_renewal_to_reap_ms": 2672,
        "lease_plus_interval_ms": 1300, "within_lease_plus_interval": False,
        "checks_on_time_ms": 2000, "within_checks_on_time": False,
        "bullmq_bound_ms": 3000, "within_bullmq_bound": True}
    assert bound_comparison(300, 1000, [])["within_bullmq_bound"] is None


def test_a_recovery_past_lease_plus_interval_passes_only_under_bullmqs_bound():
    """2672 ms after the renewal: past L + S + ε (1400) but within 2S + max(L, S) + ε (3100)."""
    bullmq = check(_killed_holder("bullmq", 2672).events())
    assert bullmq.passed, {n: r.examples for n, r in bullmq.invariants.items() if not r.ok}
    assert bullmq.invariants["recovery_bound"].figures["bound_ms"] == 3100
    assert bullmq.invariants["recovery_bound"].figures["bullmq"]["within_lease_plus_interval"] \
        is False
    echomq = check(_killed_holder("", 2672).events())
    assert not echomq.invariants["recovery_bound"].ok
    assert not echomq.invariants["reap_prompt"].ok
    assert "bullmq" not in echomq.invariants["recovery_bound"].figures


@pytest.mark.parametrize("late_ms", [3101, 3500])
def test_a_recovery_past_bullmqs_bound_fails_it(late_ms):
    verdict = check(_killed_holder("bullmq", late_ms).events())
    broken = sorted(name for name, result in verdict.invariants.items() if not result.ok)
    assert broken == ["reap_prompt", "recovery_bound"]
    (example,) = verdict.invariants["recovery_bound"].examples
    assert example["renewal_to_reap_ms"] == late_ms


def test_a_long_lock_keeps_lease_plus_interval():
    """lockDuration >= 2 x stalledInterval: BullMQ's bound is lease + two intervals."""
    h = History(2000, 500, TOLERANCE, run=False)
    h.write(Run(scenario="hand-written", lease_ms=2000, reap_interval_ms=500,
                tolerance_ms=TOLERANCE, dialect="bullmq"), 0)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=1)
    h.fault("kill", "w1", ts=10)
    h.reap("a", attempt=1, ts=3102)  # 3101 after the claim: past 2000 + 2 x 500 + 100
    verdict = check(h.events(), final=False)
    assert verdict.invariants["recovery_bound"].figures["bound_ms"] == 3100
    assert not verdict.invariants["recovery_bound"].ok


def test_the_summary_states_the_worst_case_against_every_formula():
    from chaos.report.summary import build_report, summary_text

    verdict = check(_killed_holder("bullmq", 2672).events())
    text = summary_text(build_report("hand-written", "pass", verdict))
    assert ("bound 3100 (BullMQ: 2 x stalledInterval 1000 + max(lockDuration 300, "
            "stalledInterval) + tolerance 100)") in text
    assert ("bullmq    renewal-to-reap ms max 2672 (n=1): lease + interval 1300 EXCEEDED, "
            "S + max(L, S) 2000 EXCEEDED, 2S + max(L, S) 3000 held") in text
    echomq = summary_text(build_report("hand-written", "fail",
                                       check(_killed_holder("", 2672).events())))
    assert "(lease 300 + reap 1000 + tolerance 100)" in echomq and "bullmq " not in echomq
