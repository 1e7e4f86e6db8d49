"""pytest plugin (registered through the ``pytest11`` entry point): chaos runs as fixtures.

    def test_release(chaos_run):
        assert chaos_run("scenarios/kill-worker.toml").passed

    def test_my_worker(chaos_cluster):            # valkey + reaper + workers, no load, no faults
        chaos_cluster.queue.enqueue("job-1")
        ...
        assert chaos_cluster.check().passed

``chaos_run(path, out=None, **overrides)`` runs one scenario (overrides as ``--set`` takes them,
``__`` for the dots: ``phases__chaos_ms=1000``) in a run directory under the test's ``tmp_path``
(or ``out``) and returns the run's result (``.passed``, ``.verdict``, ``.report``, ``.run_dir``,
``.checked``). When a test that used it fails, the report shows each run's invariant table.
``chaos_cluster`` takes its scenario from ``@pytest.mark.chaos_scenario(path, **overrides)``,
else a small default (2 workers, 1 s leases, 250 ms reaps).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the plugin loads in every pytest session: keep its import cheap
    from chaos.check.checker import Verdict
    from chaos.run.evaluate import Evaluation
    from chaos.run.runner import Run, RunResult
    from chaos.scenario.model import Scenario

RUNS = pytest.StashKey[list["RunResult"]]()
DEFAULT_CLUSTER = {"name": "pytest-cluster",
                   "topology": {"workers": 2, "concurrency": 2, "lease_ms": 1000,
                                "reap_interval_ms": 250}}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos_scenario(path, **overrides): the scenario chaos_cluster brings up")


def overrides_as_set(overrides: dict[str, Any]) -> list[str]:
    """``phases__chaos_ms=1000`` → ``["phases.chaos_ms=1000"]`` (values written as TOML)."""
    return [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]


def _load(path: str | Path, overrides: dict[str, Any], rootpath: Path) -> Scenario:
    from chaos.scenario.loading import load_scenario

    candidate = Path(path)
    if not candidate.is_absolute() and not candidate.exists() and (rootpath / candidate).exists():
        candidate = rootpath / candidate
    return load_scenario(candidate, overrides_as_set(overrides))


class ChaosRunner:
    """The callable ``chaos_run`` fixture; remembers its results for the failure report."""

    def __init__(self, tmp_path: Path, rootpath: Path) -> None:
        self.tmp_path = tmp_path
        self.rootpath = rootpath
        self.results: list[RunResult] = []

    def __call__(self, path: str | Path, out: str | Path | None = None,
                 **overrides: Any) -> RunResult:
        from chaos.run.runner import run_scenario

        scenario = _load(path, overrides, self.rootpath)
        run_dir = Path(out) if out is not None else \
            self.tmp_path / f"{len(self.results) + 1}-{scenario.name}"
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "console.log", "w", encoding="utf-8") as console:
            result = run_scenario(scenario, run_dir, stream=console)
        self.results.append(result)
        if result.verdict == "aborted":  # Ctrl-C during the run stops the session too
            raise KeyboardInterrupt
        return result


@pytest.fixture
def chaos_run(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosRunner:
    runner = ChaosRunner(tmp_path, request.config.rootpath)
    request.node.stash[RUNS] = runner.results
    return runner


class ChaosCluster:
    """A running local cluster (Valkey, reaper(s), workers) whose history is being recorded."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.evaluation: Evaluation | None = None  # set by check()

    @property
    def url(self) -> str:
        return self.runtime.url

    @property
    def queue(self) -> Any:
        """A ``chaos.protocol.client.QueueClient`` on the cluster's queue."""
        return self.run.queue

    @property
    def runtime(self) -> Any:
        """The run's runtime: ``kill(name)``, ``pause(name)``, ``resume(name)``."""
        return self.run.runtime

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    def check(self) -> Verdict:
        """Stop the workers, export the last events and judge the run directory, as `run` and
        `check` do (``self.evaluation`` keeps the ack-ledger comparison too)."""
        if self.evaluation is None:
            from chaos.run.evaluate import evaluate

            self.run.wind_down()
            self.evaluation = evaluate(self.run_dir)
        if self.evaluation.verdict is None:
            raise AssertionError(f"{self.run_dir}: no history was recorded")
        return self.evaluation.verdict


@pytest.fixture
def chaos_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChaosCluster]:
    from chaos.run.progress import Progress
    from chaos.run.runner import Run
    from chaos.scenario.loading import scenario_from_dict

    marker = request.node.get_closest_marker("chaos_scenario")
    if marker is not None:
        scenario = _load(marker.args[0], dict(marker.kwargs), request.config.rootpath)
    else:
        scenario = scenario_from_dict(DEFAULT_CLUSTER, "chaos_cluster default")
    run_dir = tmp_path / f"cluster-{scenario.name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "console.log", "w", encoding="utf-8") as console:
        run = Run(scenario, run_dir, Progress(console, scenario))
        try:
            run.bring_up()
            cluster = ChaosCluster(run)
            yield cluster
            cluster.check()
        finally:
            run.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran scenarios shows each run's invariant table."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    results = item.stash.get(RUNS, None)
    if report.when != "call" or not report.failed or not results:
        return
    from chaos.report.summary import summary_text

    for result in results:
        report.sections.append(
            (f"chaos run {result.report.get('scenario')}: {result.verdict.upper()}",
             f"{summary_text(result.report)}\nrun directory: {result.run_dir} "
             "(report.html, junit.xml, history.jsonl)"))
