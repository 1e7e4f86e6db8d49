"""`capacity --workers`: what limited a knee (pure, on hand-made figures), bad plan options
refused before anything starts, and one real small plan over two pool sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.tools.bottleneck import HOST_WAY_OUT, StepLoad, host_busy, host_cpu_times, name
from chaos.tools.capacity import CapacityResult, CapacitySearch, Step
from chaos.tools.capacity_plan import CapacityPlan, PlanSpec, plan_table, render_html
from chaos.tools.scaling import scaling_model
from tests.procs import processes_mentioning
from tests.test_capacity import KILL_WORKER, run_cli


def load(**figures: float | None) -> StepLoad:
    base: dict[str, float | None] = {"target_rate": 40.0, "delivered_rate": 40.0,
                                     "slots_busy": 0.5, "store_cpu": 0.05, "host_cpu": 0.3,
                                     "hold_p50_ms": 250.0}
    base.update(figures)
    return StepLoad(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("figures", "expected", "words"), [
    ({"slots_busy": 0.97}, "pool", "the pool's slots 97% busy"),
    ({"store_cpu": 0.85, "slots_busy": 0.97}, "store", "the store's main thread 85% busy"),
    ({"delivered_rate": 20.0}, "generator", "delivered 20 of 40 jobs/s"),
    ({"delivered_rate": 20.0, "host_cpu": 0.98}, "host", "fell short of 40 jobs/s on a host"),
    # Every slot busy because the work itself slowed on a saturated host: the host's limit.
    ({"slots_busy": 1.0, "host_cpu": 0.95, "hold_p50_ms": 400.0}, "host", "the work slowed"),
    # Every slot busy at the work's own pace, on a busy host: still the pool's.
    ({"slots_busy": 1.0, "host_cpu": 0.95, "hold_p50_ms": 260.0}, "pool", "slots 100% busy"),
    ({"host_cpu": 0.93}, "host", "neither the pool nor the store was full"),
    ({}, "unknown", "the claim path's own latency"),
])
def test_the_bottleneck_is_named_from_the_first_step_over(figures: dict[str, float],
                                                          expected: str, words: str):
    found, why = name(load(**figures), first_hold_ms=250.0)
    assert found == expected and words in why, why
    if found == "host":
        assert HOST_WAY_OUT in why  # the way out: more hosts (docs/attach.md)
    assert name(None, 250.0)[0] == "none"


def test_host_cpu_is_read_from_proc_stat():
    before = host_cpu_times()
    sum(i * i for i in range(200_000))
    busy = host_busy(before, host_cpu_times())
    assert busy is None or 0.0 <= busy <= 1.0
    assert host_busy((10.0, 100.0), (60.0, 200.0)) == 0.5
    assert host_busy(None, (1.0, 2.0)) is None


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--workers", "0"], 2, "--workers 0: 0 must be 1..64"),
    (["--workers", "1,x"], 2, "--workers 1,x: 'x' is not a whole number"),
    (["--workers", "1,2", "--target-rate", "40", "--lose", "2"], 2,
     "--lose 2: must be less than the largest pool (--workers 1,2)"),
    (["--workers", "1,2", "--lose", "1"], 2, "--lose 1: needs --target-rate"),
    (["--workers", "2", "--target-rate", "0"], 2, "--target-rate 0.0: must be > 0"),
    (["--target-rate", "40"], 2, "--target-rate: only with --workers"),
    (["--workers", "1,2", "--set", "valkey.url=redis://127.0.0.1:1"], 3,
     "valkey.url redis://127.0.0.1:1: the store does not answer"),
])
def test_bad_plan_options_exit_before_anything_starts(tmp_path: Path, args: list[str],
                                                      code: int, message: str):
    result = run_cli("capacity", KILL_WORKER, "--out", str(tmp_path / "cap"), *args, timeout=60)
    assert result.returncode == code and message in result.stderr, result.stderr
    assert not (tmp_path / "cap").exists()  # nothing started, nothing written


@pytest.mark.integration
def test_a_plan_over_two_pool_sizes(tmp_path: Path):
    """One and two workers of two slots (100-400 ms of work: about 8 jobs/s a worker), rates
    per slot 2 and 6 (a worker: 4 and 12 jobs/s, as test_capacity's small pool): each knee is
    the pool's, twice the slots carry more, and the plan names a pool for 4 jobs/s with one
    worker lost."""
    out = tmp_path / "plan"
    result = run_cli("capacity", KILL_WORKER, "--workers", "1,2", "--concurrency", "2",
                     "--set", "faults=[]", "--start-rate", "2", "--step-rate", "4",
                     "--steps", "2", "--step-ms", "2500", "--hold-ms", "3000",
                     "--target-rate", "4", "--lose", "1", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    plan = json.loads((out / "capacity.json").read_text())
    one, two = plan["sizes"]
    assert (one["workers"], two["workers"]) == (1, 2)
    assert one["knee_rate"] is not None and two["knee_rate"] > one["knee_rate"]
    for size in (one, two):
        assert size["bottleneck"] in ("pool", "host"), size["bottleneck_why"]
        over = [step for step in size["steps"] if not step["within"]]
        assert over and over[0]["slots_busy"] > 0.5 and over[0]["store_cpu"] is not None
    model = plan["model"]
    assert model["kind"] == "usl" and model["holdout_error"] is not None
    assert not model["trusted"] and "2 pool size(s)" in model["distrust"][0]
    assert plan["store_ceiling"] > two["knee_rate"]
    for size in (one, two):  # each knee held, none above what the pool serves
        assert size["held"] and size["knee_rate"] <= size["service_rate"], size
    assert plan["recommendation"]["workers"] == 2  # one left carries 4 jobs/s (held)
    assert plan["recommendation"]["held"], plan["recommendation"]
    assert "hold-out: fitted without 2 workers" in result.stdout
    assert "recommendation (target 4 jobs/s" in result.stdout
    page = (out / "capacity.html").read_text()
    assert "<svg" in page and "USL fit" in page and "http" not in page.split("<svg")[0]
    assert processes_mentioning(str(out)) == []  # its servers gone (valkey.conf is in there)


def hand_made_plan(faults: int, recorder: bool, host: bool) -> CapacityPlan:
    """Two sizes of 4 slots measured in 5 s steps, each knee held 30 s."""
    search = CapacitySearch(start_rate=7.5, step_rate=7.5, max_steps=3, step_ms=5000,
                            p99_ms=500, hold_ms=30000, fault=faults > 0)
    plan = CapacityPlan("kill-worker", search, PlanSpec((1, 2)), 4, faults > 0)
    for workers in (1, 2):
        slots = 4 * workers
        over = Step(3, 22.5 * workers, delivered_rate=22.5 * workers, slots_busy=0.99,
                    store_cpu=0.02, host_cpu=0.95 if host else 0.3, hold_p50_ms=240.0,
                    live_workers_min=workers - 1 if faults else workers, faults=faults,
                    completed=100, reason="claim wait p99 900 ms > 500")
        steps = [Step(1, 7.5 * workers, within=True, completed=100, hold_p50_ms=240.0),
                 Step(2, 15.0 * workers, within=True, completed=100), over,
                 Step(4, 15.0 * workers, kind="hold", length_ms=30000, within=True,
                      completed=100)]
        size = CapacityResult("kill-worker", search, steps, 15.0 * workers, "over capacity",
                              workers=workers, slots=slots, held=True, service_ms_mean=249.7,
                              recorder=recorder)
        size.name_bottleneck()
        if host:
            size.bottleneck, size.bottleneck_why = "host", "the host 95% busy"
        plan.sizes.append(size)
    plan.model = scaling_model(plan.knees(), None, predict_to=8,
                               service_per_worker=plan.service_per_worker())
    return plan


def test_the_page_says_only_what_applies():
    """Issue 45: the page printed "as few as N alive" for a run with no faults, a MONITOR note
    where no recorder ran, the host paragraph where no knee was the host's, and not the step
    length."""
    plain = hand_made_plan(faults=0, recorder=False, host=False)
    page, text = render_html(plain), plan_table(plain)
    for shown in (page, text):
        assert "as few as" not in shown and "MONITOR" not in shown
        assert "this machine's limit" not in shown and "this machine's, not" not in shown
        assert "steps of 5 s, each knee held 30 s" in shown
    assert "predicted knees, not measured (jobs/s, band): 3 workers" in text
    for workers in range(3, 9):  # every size predicted, not a chosen few
        assert f" {workers} workers " in text.split("predicted knees, not measured")[1]
        assert f"<tr><td>{workers}</td>" in page
    busy = hand_made_plan(faults=2, recorder=True, host=True)
    page = render_html(busy)
    assert "MONITOR" in page and "this machine's limit" in page
    faulted = hand_made_plan(faults=2, recorder=False, host=False)
    assert "as few as 1 worker(s) alive" in plan_table(faulted)
