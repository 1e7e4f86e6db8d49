"""What a run comes to: its report written from the run directory (``chaos.run.evaluate``, the
one path `check` takes too), the summary printed, and the result the CLI and tools act on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from chaos.files import write_json_atomic

if TYPE_CHECKING:
    from chaos.check.checker import Verdict
    from chaos.run.preflight import Preflight
    from chaos.scenario.model import Scenario


class FinishedRun(Protocol):
    """What ``finish`` reads of a run (``chaos.run.runner.Run``)."""

    run_dir: Path
    scenario: Scenario
    preflight: Preflight | None

    def load_summary(self) -> dict[str, Any] | None: ...
    def describe(self, wall_ms: int, load: dict[str, Any] | None) -> dict[str, Any]: ...


@dataclass
class RunResult:
    verdict: str  # pass | fail | unknown | aborted | error
    exit_code: int
    run_dir: Path
    report: dict[str, Any]
    checked: Verdict | None

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def __repr__(self) -> str:  # what pytest prints for `assert result.passed`
        failed = self.checked.failed_invariants() if self.checked else []
        return (f"RunResult({self.report.get('scenario')}: {self.verdict}"
                + (f", failed {', '.join(failed)}" if failed else "")
                + f", run_dir={str(self.run_dir)!r})")



def sut_seen(scenario: Scenario) -> dict[str, Any]:
    """``report.json["run"]["sut"]``: what ran as the workers and the reaper, so the reports
    name it (the reference worker's protocol variant is ``run.protocol``; a foreign SUT's is
    its own, spoken in ``dialect``)."""
    sut = scenario.sut
    if scenario.attach is not None:  # a deployed queue: its members, as the scenario names them
        return {"foreign": True, "dialect": scenario.history.dialect,
                "attached": [f"{member.name} ({member.role}, {member.driver})"
                             for member in scenario.attach.members]}
    return {"foreign": sut.foreign, "dialect": sut.dialect, "workers": sut.workers,
            "reaper": sut.reaper, **({"contract": sut.contract} if sut.foreign else {})}


def finish(run: FinishedRun, outcome: str, error: str | None, wall_ms: int,
           stream: TextIO) -> RunResult:
    """Judge the run directory (``chaos.run.evaluate``, as `check` does) and write the reports;
    ``outcome``: finished | aborted | error."""
    from chaos.report.summary import summary_text, write_rendered_reports
    from chaos.run.evaluate import CHECKER_RAISED, Evaluation, SavedRunError, evaluate
    from chaos.run.sources import judged_history

    try:
        evaluation = evaluate(run.run_dir, outcome, wall_ms)
    except SavedRunError as failure:
        error = f"history unreadable: {failure}"
        evaluation = Evaluation(run.scenario.name, "error", None, None)
    if evaluation.verdict is None and evaluation.word == "checker_error":
        error = f"{error}; {CHECKER_RAISED}" if error else CHECKER_RAISED
    load = run.load_summary()
    seen: dict[str, Any] = {"run": {**run.describe(wall_ms, load), "sut": sut_seen(run.scenario)}}
    if load is not None:
        seen["load"] = load
    if run.preflight is not None:
        seen["preflight"] = run.preflight.as_dict()
    if error:
        seen["error"] = error
    report = evaluation.report(**seen)
    write_json_atomic(run.run_dir / "report.json", report)
    for problem in write_rendered_reports(run.run_dir, report, evaluation.verdict,
                                          judged_history(run.run_dir)):
        print(f"   (report not rendered: {problem})", file=stream, flush=True)
    for problem in (evaluation.recorder or {}).get("problems", []):  # why never a pass
        print(f"!! history evidence: {problem}", file=stream, flush=True)
    print(summary_text(report), file=stream, flush=True)
    print(f"run directory: {run.run_dir}", file=stream, flush=True)
    return RunResult(evaluation.word, evaluation.exit_code, run.run_dir, report,
                     evaluation.verdict)
