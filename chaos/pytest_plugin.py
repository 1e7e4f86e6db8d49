"""pytest plugin (registered through the ``pytest11`` entry point): chaos runs as fixtures.

    def test_release(chaos_run):
        assert chaos_run("scenarios/kill-worker.toml").passed

    def test_my_worker(chaos_cluster):            # valkey + reaper + workers, no load, no faults
        chaos_cluster.queue.enqueue("job-1")
        assert chaos_cluster.check().passed       # waits until the queue drained, then judges

``chaos_run(path, out=None, **overrides)`` runs one scenario (overrides as ``--set`` takes them,
``__`` for the dots: ``phases__chaos_ms=2500``) in a run directory under the test's ``tmp_path``
(or ``out``) and returns the run's result (``.passed``, ``.verdict``, ``.report``, ``.run_dir``,
``.checked``). ``chaos_cluster`` takes its scenario from
``@pytest.mark.chaos_scenario(path, **overrides)``, else a small default (2 workers, 1 s leases,
250 ms reaps). ``chaos_cluster.wait_until_drained(timeout=None)`` waits until nothing is pending
or leased (``NotDrained``, naming the jobs left, on timeout); ``check(timeout=None)`` waits so,
then stops the workers and judges the run directory, writing report.json, report.html and
junit.xml there. When a test that used either fixture fails, the report shows each run's
invariant table and its run directory (a cluster the test had not judged is judged then, its
end-of-run invariants only if it had drained).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the plugin loads in every pytest session: keep its import cheap
    from chaos.check.checker import Verdict
    from chaos.run.evaluate import Evaluation
    from chaos.run.runner import Run, RunResult
    from chaos.run.storing import RunRecorder
    from chaos.scenario.model import Scenario

RUNS = pytest.StashKey[list["RunResult"]]()
CLUSTERS = pytest.StashKey["ChaosCluster"]()
DEFAULT_CLUSTER = {"name": "pytest-cluster",
                   "topology": {"workers": 2, "concurrency": 2, "lease_ms": 1000,
                                "reap_interval_ms": 250}}


RECORDER = pytest.StashKey["RunRecorder | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("echomq-chaos")
    group.addoption("--chaos-store", metavar="URL", default=None,
                    help="record each chaos_run in this run store: a path (an SQLite file) or "
                         "a postgresql:// URL (default: $ECHOMQ_CHAOS_STORE; docs/store.md)")
    group.addoption("--chaos-label", action="append", default=[], metavar="KEY=VALUE",
                    help="tag the stored runs, e.g. git=abc123 (repeatable)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos_scenario(path, **overrides): the scenario chaos_cluster brings up")
    given = config.getoption("--chaos-store")  # else the environment's, as the CLI's --store
    url = given if given is not None else os.environ.get("ECHOMQ_CHAOS_STORE")
    config.stash[RECORDER] = None
    if not url:  # nothing stored: the store's modules stay unimported (every session loads us)
        return
    from chaos.run.storing import recorder_for
    from chaos.store.record import LabelError, parse_labels

    try:
        config.stash[RECORDER] = recorder_for(url, parse_labels(
            config.getoption("--chaos-label")), "pytest")
    except LabelError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run that could not be stored makes the session exit 3 (its run directory is kept:
    `echomq-chaos store import` adds it later)."""
    recorder = session.config.stash.get(RECORDER, None)
    if recorder is None:
        return
    recorder.close()
    if recorder.failures and exitstatus == 0:
        session.exitstatus = recorder.exit_code(0)


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

    def __init__(self, tmp_path: Path, rootpath: Path,
                 recorder: RunRecorder | None = None) -> None:
        self.tmp_path = tmp_path
        self.rootpath = rootpath
        self.recorder = recorder  # the session's run store (--chaos-store), if any
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
        if self.recorder is not None:
            self.recorder.record_result(result)
        self.results.append(result)
        if result.verdict == "aborted":  # Ctrl-C during the run stops the session too
            raise KeyboardInterrupt
        return result


@pytest.fixture
def chaos_run(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosRunner:
    runner = ChaosRunner(tmp_path, request.config.rootpath,
                         request.config.stash.get(RECORDER, None))
    request.node.stash[RUNS] = runner.results
    return runner


class NotDrained(AssertionError):
    """``chaos_cluster`` still had jobs pending or leased when its wait ran out."""


class ChaosCluster:
    """A running local cluster (Valkey, reaper(s), workers) whose history is being recorded."""

    SHOWN_IDS = 5  # job ids a NotDrained message names, per set

    def __init__(self, run: Run) -> None:
        self.run = run
        self.evaluation: Evaluation | None = None  # set once judged (check(), or a failure)
        self.report: dict[str, Any] | None = None  # report.json as written then
        self.gave_up = False  # a wait until drained timed out (NotDrained)

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

    def wait_until_drained(self, timeout: float | None = None) -> None:
        """Return once nothing is pending or leased. ``timeout``: seconds in all; by default
        wait as long as the backlog keeps shrinking, and give up once it has not for the
        scenario's drain timeout (lease + reap interval + drain margin), the runner's bound
        for one drain. Raises ``NotDrained`` naming the jobs still pending and active."""
        queue = self.run.queue
        assert queue is not None
        started = last_progress = time.monotonic()
        stall_s = self.run.scenario.drain_timeout_ms / 1000
        smallest = None
        while True:
            backlog = queue.backlog()
            if backlog == (0, 0):
                self.run.drained = True
                return
            now = time.monotonic()
            if smallest is None or sum(backlog) < smallest:
                smallest, last_progress = sum(backlog), now
            if timeout is not None and now - started >= timeout:
                self.gave_up = True
                raise NotDrained(self._left(f"after {timeout:g} s"))
            if timeout is None and now - last_progress >= stall_s:
                self.gave_up = True
                raise NotDrained(self._left(f"after {now - started:.1f} s (no job left the "
                                            f"backlog for {stall_s:g} s)"))
            time.sleep(0.05)

    def _left(self, when: str) -> str:
        assert self.run.queue is not None
        keys, client = self.run.keys, self.run.queue.client
        parts = []
        for label, key in (("pending", keys.pending), ("active", keys.active)):
            count = client.zcard(key)
            ids = [_text(member) for member in client.zrange(key, 0, self.SHOWN_IDS - 1)]
            more = ", …" if count > len(ids) else ""
            parts.append(f"{count} {label}" + (f" ({', '.join(ids)}{more})" if ids else ""))
        return (f"chaos_cluster not drained {when}: {', '.join(parts)}; run directory "
                f"{self.run_dir}")

    def check(self, timeout: float | None = None) -> Verdict:
        """Wait until drained (``wait_until_drained(timeout)``), stop the workers, export the
        last events and judge the run directory as `run` and `check` do, writing report.json,
        report.html and junit.xml there (``self.evaluation`` keeps the ack-ledger comparison
        too). Judging a queue with jobs still in flight would call them lost: a cluster that
        does not drain raises ``NotDrained`` instead of a verdict."""
        if self.evaluation is None:
            if self.run.queue is not None:  # a live cluster (not a saved run directory)
                self.wait_until_drained(timeout)
            self.judge()
        assert self.evaluation is not None
        if self.evaluation.verdict is None:
            raise AssertionError(f"{self.run_dir}: no history was recorded")
        return self.evaluation.verdict

    def judge(self) -> None:
        """Stop the workers and judge the run as it stands; a cluster that had not drained is
        judged as an aborted run (no end-of-run judgements: what is in flight is not lost)."""
        from chaos.files import write_json_atomic
        from chaos.report.summary import write_rendered_reports
        from chaos.run.evaluate import evaluate
        from chaos.run.sources import judged_history

        unfinished = self.run.queue is not None and not self.run.drained
        self.run.wind_down(aborted=unfinished, cause="interrupt" if unfinished else "")
        self.evaluation = evaluate(self.run_dir)
        extra = {"error": "chaos_cluster judged before the queue drained"} if unfinished else {}
        self.report = self.evaluation.report(**extra)
        write_json_atomic(self.run_dir / "report.json", self.report)
        write_rendered_reports(self.run_dir, self.report, self.evaluation.verdict,
                               judged_history(self.run_dir))


def _text(member: Any) -> str:
    return member.decode() if isinstance(member, bytes) else str(member)


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
            request.node.stash[CLUSTERS] = cluster
            yield cluster
            if cluster.evaluation is None:  # not judged by the test: stop the workers only
                run.wind_down(aborted=not run.drained, cause="" if run.drained else "interrupt")
        finally:
            run.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran scenarios, or used a cluster, shows each run's invariant table
    and run directory."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    from chaos.report.summary import summary_text

    for result in item.stash.get(RUNS, []):
        report.sections.append(
            (f"chaos run {result.report.get('scenario')}: {result.verdict.upper()}",
             f"{summary_text(result.report)}\nrun directory: {result.run_dir} "
             "(report.html, junit.xml, history.jsonl)"))
    cluster = item.stash.get(CLUSTERS, None)
    if cluster is None:
        return
    if cluster.report is None:
        try:
            # As the runner drains before it judges; if it does not drain, judged as it
            # stands, without calling lost what is still in flight.
            if not cluster.gave_up:  # the test's own wait already timed out: not again
                with contextlib.suppress(NotDrained):
                    cluster.wait_until_drained()
            cluster.judge()
        except Exception as failure:  # the test's own failure matters more than this one
            report.sections.append(("chaos cluster", f"not judged: {failure}\n"
                                                     f"run directory: {cluster.run_dir}"))
            return
    assert cluster.report is not None
    report.sections.append(
        (f"chaos cluster {cluster.report.get('scenario')}: "
         f"{str(cluster.report['verdict']).upper()}",
         f"{summary_text(cluster.report)}\nrun directory: {cluster.run_dir} "
         "(report.html, junit.xml, history.jsonl)"))
