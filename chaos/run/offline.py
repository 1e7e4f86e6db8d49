"""A saved run directory, judged again: ``echomq-chaos check``, ``report`` and ``clean``.

All three go through ``chaos.run.evaluate``, as the runner does, so a re-check says exactly what
the run said; this module adds what a saved run needs on top: the report.json the run wrote, to
compare with and to keep what the run saw, and the report ``clean`` writes for a runner killed
before its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.check.checker import Verdict
from chaos.errors import exit_code_for
from chaos.files import write_json_atomic
from chaos.history.events import Event, replay_history
from chaos.history.schema import Phase
from chaos.report.summary import write_rendered_reports
from chaos.run.evaluate import (
    CHECKER_RAISED,
    HISTORY,
    Evaluation,
    SavedRunError,
    evaluate,
    scenario_name,
)
from chaos.run.sources import judged_history

# report.json keys the checker decides; the rest (run, load, error, ...) is what the run saw.
VERDICT_KEYS = ("verdict", "invariants", "jobs", "redeliveries", "recovery", "stranded_leases",
                "faults", "rejected", "events", "throughput_per_s", "report_only", "store_faults",
                "outcomes", "dead_letter", "needless_by_fault", "needless_by_duration",
                "ack_ledger", "stranded_lease_count", "slowed_lease_count", "undrained",
                "evidence", "checker_errors", "faults_skipped", "exercised", "exercise",
                "pace")
# Decided by the checker, but only since a later version: a report written before has none,
# and a re-check adding them is no disagreement.
ADDED_LATER = frozenset(("exercised", "exercise", "pace"))

__all__ = ["VERDICT_KEYS", "SavedRun", "SavedRunError", "recheck", "write_missing_report"]


@dataclass
class SavedRun:
    run_dir: Path
    verdict: Verdict | None  # None: the checker itself raised (``checker-errors.txt``)
    report: dict[str, Any]  # rebuilt: the fresh verdict plus what report.json saw of the run
    saved: dict[str, Any] | None  # report.json as the run wrote it, if any

    @property
    def word(self) -> str:
        return str(self.report["verdict"])

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.word)

    @property
    def saved_is_stub(self) -> bool:
        """The saved report.json holds no verdict: the stub a runner stopped before judging
        leaves (a second Ctrl-C, or Ctrl-C while checking)."""
        return self.saved is not None and "invariants" not in self.saved

    def differences(self) -> list[str]:
        """Verdict keys on which the re-check disagrees with the saved report.json (none
        for a stub: it judged nothing to disagree with)."""
        if self.saved is None or self.saved_is_stub:
            return []
        return [key for key in VERDICT_KEYS if (key in self.saved or key in self.report
                                                 and key not in ADDED_LATER)
                and self.saved.get(key) != self.report.get(key)]


def recheck(run_dir: Path) -> SavedRun:
    """Judge ``run_dir`` again; the report keeps what the saved report.json saw of the run."""
    evaluation = evaluate(run_dir)
    if evaluation.verdict is None and evaluation.word == "checker_error":
        return SavedRun(run_dir, None, evaluation.report(error=CHECKER_RAISED), evaluation.saved)
    if evaluation.verdict is None:
        history = judged_history(run_dir)  # the monitor source's, for a run judged on it
        raise SavedRunError(f"{history}: " + ("empty: nothing to check" if history.exists()
                                              else "no such file"))
    _count_unexported_acks(run_dir, evaluation)
    judged = {"schema", "scenario", "verdict", "ack_ledger", *evaluation.verdict.as_dict()}
    seen = {key: value for key, value in (evaluation.saved or {}).items() if key not in judged}
    return SavedRun(run_dir, evaluation.verdict, evaluation.report(**seen), evaluation.saved)


def _has_end(events: Iterable[Event]) -> bool:
    return any(event.type == Phase.TYPE and Phase.decode(event).name == "end"
               for event in events)


def _count_unexported_acks(run_dir: Path, evaluation: Evaluation) -> None:
    """A history without its end event was cut off (the runner was SIGKILLed, or exited on a
    second Ctrl-C before exporting the last events): an acknowledged transition it lacks may
    still have been in the store, so it counts as ``unexported``, not as a store loss."""
    acks = evaluation.ack_ledger
    if not acks or not acks["lost"] or acks.get("compared_with") != HISTORY:
        return
    if replay_history(run_dir / HISTORY, _has_end):
        return
    acks["unexported"], acks["unexported_examples"] = acks["lost"], acks["examples"]
    acks["lost"], acks["examples"], acks["jobs_affected"] = 0, [], 0
    acks["lost_by_op"] = dict.fromkeys(acks["lost_by_op"], 0)


def write_missing_report(run_dir: Path) -> str:
    """A runner that was SIGKILLed wrote no report.json: write one from the evidence it left,
    judged as `check` judges it (``aborted`` unless the history says the run finished)."""
    error = "the runner was killed before it wrote a report; written by `echomq-chaos clean`"
    try:
        evaluation = evaluate(run_dir)
        _count_unexported_acks(run_dir, evaluation)
        if evaluation.verdict is None:
            error += " (no history to check)"
    except SavedRunError as failure:
        evaluation = Evaluation(scenario_name(run_dir), "aborted", None, None)
        error += f" (history not checkable: {failure})"
    report = evaluation.report(error=error)
    write_json_atomic(run_dir / "report.json", report)
    # a drawing problem costs nothing
    write_rendered_reports(run_dir, report, evaluation.verdict, judged_history(run_dir))
    return (f"{run_dir}: wrote report.json ({evaluation.word}), report.html and junit.xml from "
            "the history the runner left")
