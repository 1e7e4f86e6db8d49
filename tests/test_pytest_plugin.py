"""The pytest plugin used as a user would: ``chaos_run`` and ``chaos_cluster`` (this file uses
both fixtures), and what a failing test that used them shows."""

from __future__ import annotations

from pathlib import Path

import pytest

# In the outer session, before any in-process inner one: SQLAlchemy first imported inside an
# inner session (by its --chaos-store) failed there ('InternalTraversal' object is not callable).
from chaos.store.database import open_store

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]  # runs a user's test file that uses the fixtures


@pytest.mark.integration
def test_chaos_run_fixture_returns_the_verdict(chaos_run):
    result = chaos_run("scenarios/steady-state.toml", phases__chaos_ms=1000)
    assert result.passed, result
    assert result.report["scenario"] == "steady-state"
    assert (result.run_dir / "report.html").exists() and (result.run_dir / "junit.xml").exists()
    assert "phase chaos" in (result.run_dir / "console.log").read_text()


@pytest.mark.integration
def test_chaos_cluster_check_judges_only_once_the_queue_drained(chaos_cluster):
    """The README's example filled in the obvious way: enqueue, then check. ``check()`` waits
    for the workers to finish every job before it stops them."""
    jobs = 200
    for number in range(jobs):
        assert chaos_cluster.queue.enqueue(f"job-{number}")
    verdict = chaos_cluster.check()
    assert verdict.passed, chaos_cluster.evaluation
    assert verdict.jobs.completed == jobs
    for name in ("report.json", "report.html", "junit.xml"):
        assert (chaos_cluster.run_dir / name).exists(), name


@pytest.mark.integration
def test_wait_until_drained_times_out_naming_what_is_left(chaos_cluster):
    for worker in chaos_cluster.run.scenario.topology.worker_names:
        chaos_cluster.runtime.pause(worker)
    for number in range(3):
        chaos_cluster.queue.enqueue(f"stuck-{number}")
    with pytest.raises(AssertionError) as raised:
        chaos_cluster.wait_until_drained(timeout=0.3)
    message = str(raised.value)
    assert "not drained after 0.3 s" in message
    assert "3 pending (stuck-0, stuck-1, stuck-2)" in message and "0 active" in message
    for worker in chaos_cluster.run.scenario.topology.worker_names:
        chaos_cluster.runtime.resume(worker)
    chaos_cluster.wait_until_drained()
    assert chaos_cluster.queue.backlog() == (0, 0)


@pytest.mark.integration
def test_a_failing_chaos_run_prints_its_invariant_table(pytester: pytest.Pytester):
    pytester.makepyfile(f"""
        def test_release(chaos_run):
            assert chaos_run({str(ROOT / 'scenarios/mutants/unfenced-complete.toml')!r}).passed
        """)
    store = pytester.path / "runs.sqlite"
    result = pytester.runpytest("-p", "no:cacheprovider", "--chaos-store", str(store),
                                "--chaos-label", "git=abc123")
    assert result.ret == 1
    output = result.stdout.str()
    assert "chaos run unfenced-complete: FAIL" in output
    # --chaos-store recorded the run as it was judged, tagged
    opened = open_store(str(store))
    try:
        (stored,) = opened.runs()
    finally:
        opened.close()
    assert (stored.record.scenario, stored.record.verdict, stored.record.exit_code,
            stored.record.command, stored.record.labels) == \
        ("unfenced-complete", "fail", 1, "pytest", {"git": "abc123"})
    assert stored.record.figures["duplicated"] >= 1
    assert "[FAIL] no_double_completion" in output and "[ok  ] no_loss" in output
    assert "RunResult(unfenced-complete: fail, failed no_double_completion" in output


@pytest.mark.integration
def test_a_failing_chaos_cluster_test_prints_its_invariant_table(pytester: pytest.Pytester):
    """As ``chaos_run`` does: the table and the run directory, whether the test judged the
    cluster itself (then failed on its own assertion) or failed before judging it."""
    pytester.makepyfile("""
        def test_judged(chaos_cluster):
            chaos_cluster.queue.enqueue("job-1")
            verdict = chaos_cluster.check()
            assert verdict.jobs.completed == 2

        def test_not_judged(chaos_cluster):
            chaos_cluster.queue.enqueue("job-1")
            assert False, "the test's own failure"

        def test_never_drained(chaos_cluster):
            for worker in chaos_cluster.run.scenario.topology.worker_names:
                chaos_cluster.runtime.pause(worker)
            chaos_cluster.queue.enqueue("job-1")
            chaos_cluster.check(timeout=0.3)
        """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == 1
    output = result.stdout.str()
    assert output.count("chaos cluster pytest-cluster: PASS") == 2, output
    assert output.count("[ok  ] no_loss") == 2, output
    # Not drained: judged as it stood, without calling the job in flight lost.
    assert "NotDrained: chaos_cluster not drained after 0.3 s: 1 pending (job-1)" in output
    assert "chaos cluster pytest-cluster: ABORTED" in output
    assert "[skip] no_loss" in output and "judged before the queue drained" in output
    assert output.count("run directory: ") == 3, output
