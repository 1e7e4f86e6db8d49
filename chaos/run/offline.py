"""A saved run directory, judged again: ``history.jsonl`` in, the same verdict out.

``echomq-chaos check`` and ``echomq-chaos report`` use this. The checker's configuration comes
from the history's ``run`` event (what the runner used), else from ``scenario.json``; the verdict
word comes from the history's ``end`` event (finished, interrupted, or broken by an
infrastructure or internal error), so a re-check says exactly what the run said.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.check.checker import CheckConfig, Verdict, check
from chaos.check.ledger import check_with_ledger
from chaos.errors import exit_code_for
from chaos.files import write_json_atomic
from chaos.history.events import Event, replay_history
from chaos.history.schema import Phase, Run
from chaos.report.summary import build_report, read_report, write_rendered_reports

# report.json keys the checker decides; the rest (run, load, error, ...) is what the run saw.
VERDICT_KEYS = ("verdict", "invariants", "jobs", "redeliveries", "recovery", "stranded_leases",
                "faults", "rejected", "events", "throughput_per_s", "report_only", "store_faults",
                "outcomes", "dead_letter", "needless_by_fault", "needless_by_duration",
                "ack_ledger", "stranded_lease_count")


class SavedRunError(ValueError):
    """The run directory cannot be re-checked (exit code 2)."""


@dataclass
class SavedRun:
    run_dir: Path
    verdict: Verdict
    report: dict[str, Any]  # rebuilt: the fresh verdict plus what report.json saw of the run
    saved: dict[str, Any] | None  # report.json as the run wrote it, if any

    @property
    def word(self) -> str:
        return str(self.report["verdict"])

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.word)

    def differences(self) -> list[str]:
        """Verdict keys on which the re-check disagrees with the saved report.json."""
        if self.saved is None:
            return []
        return [key for key in VERDICT_KEYS if (key in self.saved or key in self.report)
                and self.saved.get(key) != self.report.get(key)]


class _Watched:
    """The events, passed through to the checker; keeps the run and the last end event."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events = events
        self.run: Run | None = None
        self.end: Phase | None = None

    def __iter__(self) -> Iterator[Event]:
        for event in self.events:
            if event.type == Run.TYPE and self.run is None:
                self.run = Run.decode(event)
            elif event.type == Phase.TYPE and (phase := Phase.decode(event)).name == "end":
                self.end = phase
            yield event


def _first_run_event(events: Iterable[Event]) -> Event | None:
    return next((event for event in events if event.type == "run"), None)


def check_config(history: Path) -> CheckConfig:
    """The run's own configuration: its history's ``run`` event, else ``scenario.json``."""
    run = replay_history(history, _first_run_event)
    try:
        return CheckConfig.from_history([run] if run is not None else [])
    except ValueError as missing:
        resolved = history.parent / "scenario.json"
        if not resolved.exists():
            raise SavedRunError(f"{history}: {missing}, and there is no {resolved.name} to "
                                "read them from") from None
        try:
            scenario = json.loads(resolved.read_text())
            return CheckConfig(int(scenario["topology"]["lease_ms"]),
                               int(scenario["topology"]["reap_interval_ms"]),
                               int(scenario["check"]["tolerance_ms"]),
                               tuple(scenario["check"].get("report_only", ())),
                               int(scenario["topology"].get("max_stalls") or 0))
        except (KeyError, TypeError, ValueError) as error:
            raise SavedRunError(f"{resolved}: lacks topology.lease_ms, "
                                f"topology.reap_interval_ms or check.tolerance_ms ({error})"
                                ) from None


def run_outcome(end: Phase | None) -> str | None:
    """finished | aborted | error from the history's end event; None when it has none (the
    runner could not write it: Valkey gone, or the runner itself killed)."""
    if end is None:
        return None
    if not end.aborted:
        return "finished"
    return "error" if end.cause in ("infra", "internal") else "aborted"


def recheck(run_dir: Path) -> SavedRun:
    """Judge ``run_dir/history.jsonl`` again, streamed (memory stays flat for a long run)."""
    history = run_dir / "history.jsonl"
    if not history.exists():
        raise SavedRunError(f"{history}: no such file")
    saved_path = run_dir / "report.json"
    saved: dict[str, Any] | None = None
    if saved_path.exists():
        try:
            saved = read_report(saved_path)
        except (OSError, ValueError) as error:
            raise SavedRunError(f"{saved_path}: not readable JSON: {error}") from None
    try:
        config = check_config(history)
        watched: list[_Watched] = []

        def judge(events: Iterable[Event]) -> Verdict:
            watched.append(_Watched(events))  # a fresh watch if the file is re-read sorted
            return check(watched[-1], config, final=None)

        # As the runner judged it: the surviving history when a store fault rolled events back,
        # and the clients' acknowledgement ledger beside it (report.json["ack_ledger"]).
        verdict, acks = check_with_ledger(run_dir, history, judge)
    except (ValueError, KeyError, OSError) as error:  # read_history names the file and line
        message = str(error)
        raise SavedRunError(message if message.startswith(str(history))
                            else f"{history}: {message}") from None
    outcome = run_outcome(watched[-1].end)
    if outcome == "finished":
        word = "pass" if verdict.passed else "fail"
    elif outcome is not None:
        word = outcome
    else:  # only the run knew how it ended
        word = str(saved["verdict"]) if saved and saved.get("verdict") in (
            "aborted", "error") else "aborted"
    run = watched[-1].run
    name = (run.scenario if run is not None else None) \
        or (saved or {}).get("scenario", "?")
    judged = {"schema", "scenario", "verdict", "ack_ledger", *verdict.as_dict()}
    extras = {key: value for key, value in (saved or {}).items() if key not in judged}
    if acks is not None:
        extras["ack_ledger"] = acks
    report = build_report(str(name), word, verdict, **extras)
    return SavedRun(run_dir, verdict, report, saved)


def write_missing_report(run_dir: Path) -> str:
    """A runner that was SIGKILLed wrote no report.json: write one from the history it left
    (verdict ``aborted``, the end-of-run judgements skipped), as `check` would judge it."""
    try:
        name = str(json.loads((run_dir / "scenario.json").read_text())["name"])
    except (OSError, ValueError, KeyError, TypeError):
        name = run_dir.name
    error = "the runner was killed before it wrote a report; written by `echomq-chaos clean`"
    verdict = None
    try:
        verdict = replay_history(run_dir / "history.jsonl",
                                 lambda events: check(events, final=False))
    except (OSError, ValueError) as failure:
        error += f" (history not checkable: {failure})"
    report = build_report(name, "aborted", verdict, error=error)
    write_json_atomic(run_dir / "report.json", report)
    write_rendered_reports(run_dir, report, verdict)  # a drawing problem costs nothing
    return (f"{run_dir}: wrote report.json (aborted), report.html and junit.xml from the "
            "history the runner left")
