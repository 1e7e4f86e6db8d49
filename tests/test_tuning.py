"""chaos.check.tuning on hand-written data: measurements from histories, the analytic model, and the
recommendation (never a failed cell; the widest margin; which constraint binds)."""

from __future__ import annotations

from histories import History

from chaos.check.checker import LatencySummary
from chaos.check.tuning import (
    CellResult,
    Evidence,
    HistoryMeasurements,
    assess,
    family_bound_ms,
    measure_history,
    predicted_recovery,
    recommend,
)
from chaos.history.schema import Run


def cell(lease: int, reap: int, heartbeat: int | None = None, *, verdict: str = "pass",
         failed: list[str] | None = None, recovery: list[int] | None = None, needless: int = 0,
         gaps: list[int] | None = None, jobs: int = 200, throughput: float = 40.0,
         dialect: str = "") -> CellResult:
    heartbeat = lease // 3 if heartbeat is None else heartbeat
    if recovery is None:  # a kill strands leases renewed up to one heartbeat before it
        recovery = [lease - heartbeat // 2 + reap // 2, lease + reap - 10]
    if gaps is None:
        gaps = [heartbeat + 5, heartbeat + 12] if heartbeat else [300, 420]
    return CellResult(lease_ms=lease, reap_interval_ms=reap, heartbeat_ms=heartbeat,
                      verdict=verdict, failed_invariants=failed or [],
                      recovery=LatencySummary.of(recovery), needless=needless, jobs=jobs,
                      throughput_per_s=throughput, renewal_gap=LatencySummary.of(gaps),
                      tolerance_ms=100, dialect=dialect)


def evidence_for(cells: list[CellResult], handler: list[int] | None = None,
                 rtts: list[int] | None = None) -> Evidence:
    measured = HistoryMeasurements(handler_ms=handler or [150, 250, 420],
                                   extend_rtt_ms=rtts or [1, 2, 9])
    return Evidence.of(measured, cells)


def monitor_evidence(cells: list[CellResult], gaps: list[int], extends: int = 17) -> Evidence:
    """As a history read from MONITOR gives it: extends with no round trip, renewal gaps."""
    measured = HistoryMeasurements(handler_ms=[103, 245, 401], renewal_gap_ms=gaps,
                                   extends=extends, dialect="bullmq")
    return Evidence.of(measured, cells)


GRID = [cell(lease, reap) for lease in (500, 1000, 2000) for reap in (100, 250, 500)]


# --- the recommendation ---------------------------------------------------------------------


def test_recommends_the_passing_cell_with_the_widest_margin_of_both_headrooms():
    evidence = evidence_for(GRID)
    rec = recommend(GRID, 3000, evidence)
    assert rec.binding is None and rec.settings is not None and rec.margin_ms is not None
    chosen = next(c for c in GRID if c.key == rec.cell)
    margins = {c.key: assess(c, 3000, evidence).margin_ms for c in GRID}
    assert rec.margin_ms == margins[rec.cell] == max(margins.values())
    # Lease 2000 + reap 100: recovery headroom 900, lease headroom 2000 - 666 - 12 = 1322.
    assert (chosen.lease_ms, chosen.reap_interval_ms) == (2000, 100)
    assert rec.margin_ms == 900
    assert "lease_ms = 2000" in rec.text and "900 ms" in rec.text and "3000 ms" in rec.text
    assert "0 needless redeliveries" in rec.text and "p99" in rec.text


def test_a_recommendation_with_no_safety_margin_carries_a_warning():
    """Lease 1000 + reap 250 against a 1250 ms target: recovery headroom 0."""
    tight = cell(1000, 250, recovery=[900, 1240])
    rec = recommend([tight], 1250, evidence_for([tight]))
    assert rec.cell == tight.key and rec.margin_ms == 0
    assert rec.warning is not None and "safety margin is 0 ms" in rec.warning
    assert recommend(GRID, 3000, evidence_for(GRID)).warning is None


def test_never_recommends_a_cell_that_failed_an_invariant_even_with_the_widest_margin():
    broken = [cell(2000, 100, verdict="fail", failed=["recovery_bound"]),
              cell(1000, 100), cell(500, 250)]
    evidence = evidence_for(broken)
    best_margin = assess(broken[0], 3000, evidence).margin_ms
    assert best_margin > assess(broken[1], 3000, evidence).margin_ms  # it would have won
    rec = recommend(broken, 3000, evidence)
    assert rec.cell == broken[1].key
    assert "recovery_bound" in rec.text and "not considered" in rec.text


def test_aborted_or_errored_cells_are_never_recommended_either():
    cells = [cell(1000, 100, verdict="aborted"), cell(2000, 100, verdict="error")]
    rec = recommend(cells, 3000, evidence_for(cells))
    assert rec.cell is None and rec.binding == "invariants"


def test_a_cell_with_needless_redeliveries_is_not_recommended():
    cells = [cell(1000, 100, needless=3), cell(500, 100)]
    rec = recommend(cells, 3000, evidence_for(cells))
    assert rec.cell == cells[1].key


def test_when_every_cell_recovers_too_slowly_the_recovery_target_binds():
    rec = recommend(GRID, 550, evidence_for(GRID))
    assert rec.cell is None and rec.binding == "recovery"
    assert "600 ms" in rec.text  # the quickest cell: lease 500 + reap 100


def test_when_every_lease_is_shorter_than_the_handler_the_lease_binds():
    no_heartbeat = [cell(lease, 100, heartbeat=0, needless=12, gaps=[300, 900])
                    for lease in (250, 500)]
    rec = recommend(no_heartbeat, 3000, evidence_for(no_heartbeat, handler=[300, 900]))
    assert rec.cell is None and rec.binding == "lease"
    assert "was 900 ms" in rec.text and "12 in 200 jobs" in rec.text
    # Feasible with a longer lease: 900 + the shortest reap interval (100) is inside 3000 ms.
    assert "above about 900 ms" in rec.text and "1000 ms" in rec.text
    assert "sweep leases up to that" in rec.text


def test_a_zero_needless_cell_shorter_than_the_observed_silence_is_luck_not_margin():
    # As in latency-spike: one cell saw a live worker silent for 3 s; a 2 s lease with zero
    # needless redeliveries was only spared by timing, and 3 s + R cannot meet a 3 s target.
    cells = [cell(500, 100, heartbeat=166, needless=6, gaps=[300, 3068]),
             cell(2000, 100, heartbeat=666, gaps=[700, 1374])]
    rec = recommend(cells, 3000, evidence_for(cells))
    assert rec.cell is None and rec.binding == "lease"
    assert "was 3068 ms" in rec.text and "timing luck" in rec.text
    assert "cannot also be met" in rec.text


def test_when_fast_cells_redeliver_and_safe_cells_are_slow_the_conflict_is_named():
    cells = [cell(500, 100, heartbeat=0, needless=5, gaps=[700]),
             cell(2000, 500, heartbeat=0, gaps=[700])]
    rec = recommend(cells, 1000, evidence_for(cells, handler=[200, 700]))
    assert rec.cell is None and rec.binding == "conflict"
    assert "2500 ms" in rec.text  # the safe cell's worst case, L + R


def test_a_measured_recovery_above_l_plus_r_counts_against_the_target():
    slow = cell(1000, 100, recovery=[1000, 1900])  # the reaper ran late
    quick = cell(1000, 250)
    evidence = evidence_for([slow, quick])
    assert assess(slow, 1500, evidence).recovery_worst_ms == 1900
    rec = recommend([slow, quick], 1500, evidence)
    assert rec.cell == quick.key


def test_the_lease_need_is_the_longer_of_the_cells_gap_and_the_pooled_model():
    quiet = cell(1000, 100, gaps=[340])  # overhead 7 ms in this cell
    noisy = cell(500, 100, gaps=[166 + 200])  # overhead 200 ms: a slow heartbeat round
    evidence = evidence_for([quiet, noisy])
    assert evidence.renewal_overhead_ms == 200
    assert assess(quiet, 3000, evidence).lease_need_ms == 333 + 200
    assert evidence.lease_need_ms(0) == 420  # no heartbeat: the longest handler


def test_interpolates_a_balanced_lease_between_measured_cells():
    cells = [cell(500, 100), cell(2000, 100)]
    evidence = evidence_for(cells)
    rec = recommend(cells, 2500, evidence)
    assert rec.cell == cells[0].key or rec.cell == cells[1].key
    assert rec.interpolated is not None
    lease = rec.interpolated["lease_ms"]
    assert 500 < lease < 2000 and lease % 50 == 0
    assert rec.interpolated["margin_ms"] > (rec.margin_ms or 0)
    assert rec.interpolated["heartbeat_ms"] < lease
    assert "not measured" in rec.text


def test_no_interpolation_outside_the_swept_leases():
    cells = [cell(500, 100), cell(1000, 100)]
    rec = recommend(cells, 10_000, evidence_for(cells))  # balance point far above 1000
    assert rec.cell == cells[1].key and rec.interpolated is None


# --- the analytic model ---------------------------------------------------------------------


def test_model_range_is_lease_minus_heartbeat_to_lease_plus_reap():
    model = predicted_recovery(cell(1000, 250, heartbeat=333, recovery=[700, 1200]))
    assert (model.low_ms, model.high_ms, model.agrees) == (667, 1250, True)


def test_model_flags_a_recovery_beyond_lease_plus_reap():
    model = predicted_recovery(cell(1000, 250, heartbeat=333, recovery=[700, 1600]))
    assert model.agrees is False and "reaper ran late" in model.note


def test_model_flags_a_lease_older_than_one_heartbeat():
    model = predicted_recovery(cell(1000, 250, heartbeat=333, recovery=[200, 900]))
    assert model.agrees is False and "older than one heartbeat" in model.note


def test_model_without_heartbeat_uses_the_longest_handler():
    model = predicted_recovery(cell(1000, 250, heartbeat=0, recovery=[700]), handler_max_ms=400)
    assert (model.low_ms, model.high_ms) == (600, 1250)


def test_model_with_nothing_stranded_has_nothing_to_compare():
    model = predicted_recovery(cell(1000, 250, recovery=[]))
    assert model.agrees is None


# --- measurements from a history ------------------------------------------------------------


def test_measures_handler_spans_round_trips_and_renewal_gaps():
    h = History(lease_ms=1000)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.add("extend", ts=340, id="a", attempt=1, worker="w1", lease_ms=1000, rtt_ms="")
    h.add("extend", ts=700, id="a", attempt=1, worker="w1", lease_ms=1000, rtt_ms=4)
    h.complete("a", attempt=1, worker="w1", ts=760)
    measured = measure_history(h.events())
    assert measured.handler_ms == [750]
    assert measured.extend_rtt_ms == [4]
    assert measured.renewal_gap_ms == [360]  # 340 -> 700


def test_a_lapsed_lease_still_counts_its_holders_late_calls_as_its_gap():
    h = History(lease_ms=200)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.reap("a", attempt=1, ts=260)
    h.claim("a", attempt=2, worker="w2", ts=270)
    h.complete_rejected("a", attempt=1, worker="w1", ts=500, current_attempt=2)
    h.complete("a", attempt=2, worker="w2", ts=400)
    measured = measure_history(h.events())
    assert sorted(measured.handler_ms) == [130, 500]
    assert sorted(measured.renewal_gap_ms) == [130, 500]  # no heartbeat: the handler span


def test_attempts_of_a_cut_off_worker_are_not_lease_evidence():
    h = History(lease_ms=1000)
    h.enqueue("a", ts=0)
    h.enqueue("b", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.claim("b", attempt=1, worker="w2", ts=10)
    fault = h.fault("pause", "w1", ts=100)
    h.heal(fault, ts=3000)
    h.complete_rejected("a", attempt=1, worker="w1", ts=3010)
    h.complete("b", attempt=1, worker="w2", ts=200)
    slowed = h.fault("latency", "w2", ts=300, cuts_off=False)
    h.claim("c", attempt=1, worker="w2", ts=310)
    h.complete("c", attempt=1, worker="w2", ts=1900)
    h.heal(slowed, ts=2000)
    measured = measure_history(h.events())
    assert sorted(measured.handler_ms) == [190, 1590]  # w1's frozen span is left out


def test_a_killed_workers_unfinished_attempt_has_no_duration():
    h = History(lease_ms=1000)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.fault("kill", "w1", ts=50)
    measured = measure_history(h.events())
    assert measured.handler_ms == [] and measured.renewal_gap_ms == []


def test_a_heartbeat_arriving_after_its_own_complete_is_not_a_renewal_gap():
    h = History(lease_ms=2000)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=0)
    h.complete("a", attempt=1, worker="w1", ts=780)
    h.extend_rejected("a", attempt=1, worker="w1", ts=3150)  # sent before, delayed by latency
    measured = measure_history(h.events())
    assert measured.handler_ms == [780] and measured.renewal_gap_ms == [780]


# --- the family: BullMQ's bound, renewal evidence without round trips -----------------------


def test_bullmqs_cells_are_modelled_on_its_own_bound():
    """2R + max(L, R) (chaos.queues.bullmq.bound), as the checker judges a bullmq history."""
    assert family_bound_ms(1000, 250) == 1250
    assert family_bound_ms(1000, 250, "bullmq") == 1500
    assert family_bound_ms(300, 1000, "bullmq") == 3000
    short = cell(600, 250, heartbeat=500, recovery=[300, 1050], dialect="bullmq")
    assert short.bound_ms == 1100 and short.bound_formula == "2R+max(L,R)"
    model = predicted_recovery(short)
    # 1050 ms lies past L + R (850) but inside BullMQ's bound: it agrees with the model
    assert (model.low_ms, model.high_ms, model.agrees) == (100, 1100, True)
    late = predicted_recovery(cell(600, 250, heartbeat=500, recovery=[300, 1400],
                                   dialect="bullmq"))
    assert late.agrees is False and "2R+max(L,R) 1100: the stalled checks ran late" in late.note
    assert short.as_dict()["bound_formula"] == "2R+max(L,R)"


def test_a_bullmq_sweep_recommends_from_renewal_gaps_when_extends_carry_no_round_trip():
    """The four cells of `sweep scenarios/bullmq/kill-worker.toml` (all passed, 0 needless):
    no rtt_ms on any extend, so the lease need comes from the renewal gaps, never "None ms"."""
    cells = [cell(lease, reap, heartbeat=500, gaps=[245, 401], dialect="bullmq",
                  recovery=[lease - 400, lease + reap])
             for lease in (600, 1000) for reap in (250, 500)]
    evidence = monitor_evidence(cells, gaps=[103, 245, 401])
    assert evidence.extend_rtt.count == 0 and evidence.renewal_overhead_ms == 401 - 500
    assert evidence.lease_need_ms(500) == 500  # the heartbeat: no gap ran past it
    rec = recommend(cells, 2000, evidence)
    assert rec.binding is None and rec.settings is not None
    # lease 1000 / reap 250: bound 2 x 250 + 1000 = 1500, 500 inside the target; lease
    # headroom 1000 - 500 = 500
    assert rec.settings == {"lease_ms": 1000, "reap_interval_ms": 250, "heartbeat_ms": 500}
    assert rec.margin_ms == 500
    assert "2R+max(L,R) = 1500" in rec.text
    assert "17 extends recorded carry no round trip" in rec.text
    assert "renewal gaps" in rec.text and "max 401 ms (n=3)" in rec.text
    assert "None" not in rec.text and "no heartbeat ran" not in rec.text


def test_without_any_renewal_evidence_the_recommendation_says_so():
    cells = [cell(1000, 250, heartbeat=500, gaps=[], dialect="bullmq")]
    evidence = monitor_evidence(cells, gaps=[], extends=0)
    rec = recommend(cells, 2000, Evidence(evidence.handler, evidence.extend_rtt, None))
    assert rec.cell is None and rec.binding == "evidence"
    assert "no renewal evidence" in rec.text and "None" not in rec.text


def test_the_interpolated_bullmq_lease_balances_on_its_bound():
    cells = [cell(600, 250, heartbeat=300, gaps=[320], dialect="bullmq"),
             cell(2000, 250, heartbeat=1000, gaps=[1020], dialect="bullmq")]
    rec = recommend(cells, 2500, monitor_evidence(cells, gaps=[320, 1020]))
    assert rec.interpolated is not None
    lease, heartbeat = rec.interpolated["lease_ms"], rec.interpolated["heartbeat_ms"]
    # T - (L + 2R) = L - H - overhead, H = L/2, overhead 20: L = (2500 - 500 + 20) / 1.5
    assert lease == 1350 and heartbeat == 700
    assert rec.interpolated["margin_ms"] == min(2500 - (lease + 500), lease - heartbeat - 20)


def test_measurements_name_the_family_and_count_extends_without_round_trips():
    h = History(lease_ms=1000, run=False)
    h.write(Run(scenario="s", seed=1, lease_ms=1000, reap_interval_ms=500, dialect="bullmq"), 0)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    h.add("extend", ts=510, id="a", attempt=1, worker="w1", lease_ms=1000)
    h.complete("a", attempt=1, worker="w1", ts=700)
    measured = measure_history(h.events())
    assert measured.dialect == "bullmq" and measured.extends == 1
    assert measured.extend_rtt_ms == [] and measured.renewal_gap_ms == [500]
    pooled = HistoryMeasurements()
    pooled.extend(measured)
    assert pooled.dialect == "bullmq" and pooled.extends == 1
