"""`capacity --workers`: what limited a knee (pure, on hand-made figures), bad plan options
refused before anything starts, and one real small plan over two pool sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.tools.bottleneck import HOST_WAY_OUT, StepLoad, host_busy, host_cpu_times, name
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
                     "--steps", "2", "--step-ms", "2500", "--target-rate", "4", "--lose", "1",
                     "--out", str(out))
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
    assert plan["recommendation"]["workers"] == 2  # one left carries 4 jobs/s (measured)
    assert "hold-out: fitted without 2 workers" in result.stdout
    assert "recommendation (target 4 jobs/s" in result.stdout
    page = (out / "capacity.html").read_text()
    assert "<svg" in page and "USL fit" in page and "http" not in page.split("<svg")[0]
    assert processes_mentioning(str(out)) == []  # its servers gone (valkey.conf is in there)
