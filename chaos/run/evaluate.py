"""A run directory judged: the one path from the evidence a run leaves to its verdict.

The runner at the end of a run, ``echomq-chaos check`` and ``report``, ``echomq-chaos clean`` (for
a runner killed before its report) and the pytest plugin's ``chaos_cluster`` all call
``evaluate``, so none of them can judge a run differently. It reads from the run directory:

    history.jsonl            the events, streamed to the checker
    history-surviving.jsonl  what the store kept, when a store fault rolled events back
    acks/                    the clients' acknowledgement ledger, compared with the history
    scenario.json            the checker's configuration, if the history lacks its run event
    report.json              how the run ended, if the history lacks its end event

The checker's configuration comes from the history's ``run`` event (what the runner used), else
from ``scenario.json``; how the run ended (finished, interrupted, or broken by an infrastructure
or internal error) from the caller when it knows (the runner), else from the history's ``end``
event, so a re-check says exactly what the run said.
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.check.checker import CheckConfig, Verdict, check
from chaos.check.ledger import check_with_ledger
from chaos.errors import exit_code_for
from chaos.history.events import Event, replay_history
from chaos.history.schema import Phase, Run
from chaos.names import DEFAULT_ALLOWANCE_MS, DEFAULT_SWEEP_ALLOWANCE_MS
from chaos.report.summary import build_report, read_report
from chaos.run.sources import evidence, judged_history

HISTORY = "history.jsonl"
CHECKER_ERRORS = "checker-errors.txt"  # the tracebacks of a checker that raised
CHECKER_RAISED = (f"the checker raised (a bug of the toolkit's, not the queue's): its traceback "
                  f"is in {CHECKER_ERRORS}")
OUTCOMES = ("finished", "aborted", "error")
CLOCK_STEP_ALLOWANCE_MS = 250  # far above any clock slew over a run of seconds


class SavedRunError(ValueError):
    """The run directory cannot be judged (exit code 2)."""


@dataclass
class Evaluation:
    """What a run directory's evidence says: the verdict word and what report.json holds of it."""

    scenario: str
    word: str  # pass | fail | unknown | aborted | error
    verdict: Verdict | None  # None: no history to judge (the run broke before it had one)
    ack_ledger: dict[str, Any] | None  # report.json["ack_ledger"]; None without acks/
    saved: dict[str, Any] | None = None  # report.json as found, when it was read
    recorder: dict[str, Any] | None = None  # report.json["history_recorder"] (monitor source)
    clock_step: dict[str, Any] | None = None  # report.json["clock_step"]: the clock jumped

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.word)

    def report(self, **seen: Any) -> dict[str, Any]:
        """report.json: the judged keys (the checker's, store-fault figures included, and the
        ledger comparison), with ``seen``, what the run itself saw (run, load, error, ...)."""
        extra = dict(seen)
        if self.ack_ledger is not None:
            extra["ack_ledger"] = self.ack_ledger
        if self.recorder is not None:
            extra["history_recorder"] = self.recorder
        if self.clock_step is not None:
            extra["clock_step"] = self.clock_step
        return build_report(self.scenario, self.word, self.verdict, **extra)


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
                               int(scenario["topology"].get("max_stalls") or 0),
                               int(scenario["check"].get("reap_allowance_ms",
                                                         DEFAULT_ALLOWANCE_MS)),
                               _optional_int(scenario["check"].get("max_needless")),
                               sweep_allowance_ms=int(scenario["check"].get(
                                   "sweep_allowance_ms", DEFAULT_SWEEP_ALLOWANCE_MS)))
        except (KeyError, TypeError, ValueError) as error:
            raise SavedRunError(f"{resolved}: lacks topology.lease_ms, "
                                f"topology.reap_interval_ms or check.tolerance_ms ({error})"
                                ) from None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def run_outcome(end: Phase | None) -> str | None:
    """finished | aborted | error from the history's end event; None when it has none (the
    runner could not write it: Valkey gone, or the runner itself killed)."""
    if end is None:
        return None
    if not end.aborted:
        return "finished"
    return "error" if end.cause in ("infra", "internal") else "aborted"


def saved_report(run_dir: Path) -> dict[str, Any] | None:
    """report.json as the run wrote it; None if there is none."""
    path = run_dir / "report.json"
    if not path.exists():
        return None
    try:
        return read_report(path)  # in this version's shape, whatever schema wrote it
    except (OSError, ValueError) as error:
        raise SavedRunError(f"{path}: not readable JSON: {error}") from None


def scenario_name(run_dir: Path, run: Run | None = None,
                  saved: dict[str, Any] | None = None) -> str:
    """The run's scenario: its run event's, else scenario.json's, else report.json's, else the
    run directory's name."""
    if run is not None and run.scenario:
        return run.scenario
    try:
        return str(json.loads((run_dir / "scenario.json").read_text())["name"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if saved and saved.get("scenario"):
        return str(saved["scenario"])
    return run_dir.name


def clock_step_ms(history_span_ms: int | None, wall_ms: int | None) -> int | None:
    """How far the Valkey clock jumped ahead during a run, or None when it did not (or the run's
    duration is not known): the history (written inside the run) cannot span more server time
    than the run took on the monotonic clock, unless the system clock was stepped forward (NTP,
    a VM's host sync)."""
    if history_span_ms is None or wall_ms is None or \
            history_span_ms - wall_ms <= CLOCK_STEP_ALLOWANCE_MS:
        return None
    return history_span_ms - wall_ms


def _saved_wall_ms(saved: dict[str, Any] | None) -> int | None:
    try:
        return int(saved["run"]["wall_ms"]) if saved else None
    except (KeyError, TypeError, ValueError):
        return None


def _word(outcome: str | None, verdict: Verdict | None, saved: dict[str, Any] | None) -> str:
    if outcome == "finished":
        # unknown: nothing broken, but jobs left undrained or evidence missing: cannot decide
        return verdict.word if verdict is not None else "fail"
    if verdict is not None and verdict.checker_error:
        return "checker_error"  # a judge raised: say so whatever else ended the run
    if outcome is not None:
        return outcome
    # Only the run knew how it ended (report.json), or nothing does: it did not finish.
    return str(saved["verdict"]) if saved and saved.get("verdict") in (
        "aborted", "error") else "aborted"


def _save_checker_errors(run_dir: Path, errors: dict[str, str]) -> None:
    """The checker's own tracebacks, for whoever fixes it (``checker-errors.txt``)."""
    path = run_dir / CHECKER_ERRORS
    with contextlib.suppress(OSError):  # a read-only run directory: report.json names it
        if not errors:
            path.unlink(missing_ok=True)  # a re-check by a mended checker leaves no stale one
            return
        path.write_text("".join(f"== {name}\n{text}\n" for name, text in errors.items()))


def evaluate(run_dir: Path, outcome: str | None = None,
             wall_ms: int | None = None) -> Evaluation:
    """Judge ``run_dir``: the checker over its history (streamed, memory stays flat; the
    surviving history when a store fault rolled events back), the store-fault figures, and the
    ack-ledger comparison.

    ``outcome`` (finished | aborted | error) is how the run ended, when the caller knows it (the
    runner); else the history's end event says, else report.json's verdict, else ``aborted``.
    Only a finished run gets the end-of-run judgements (nothing lost, every lease recovered).
    ``wall_ms``: how long the run took on the monotonic clock (the runner's; else report.json's):
    a history spanning more Valkey-clock time than that, beyond CLOCK_STEP_ALLOWANCE_MS, had
    its clock stepped forward, every deadline with it, so its verdict is ``unknown``.
    No history, or an empty one, gives no verdict. Raises ``SavedRunError`` when the evidence
    cannot be read.
    """
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r}: expected one of {', '.join(OUTCOMES)}")
    history = judged_history(run_dir)
    saved = saved_report(run_dir) if outcome is None else None
    if not history.exists() or not history.stat().st_size:
        return Evaluation(scenario_name(run_dir, saved=saved), _word(outcome, None, saved),
                          None, None, saved)
    final = None if outcome is None else outcome == "finished"
    try:
        config = check_config(history)

        def judge(events: Iterable[Event]) -> Verdict:
            # the verdict notes the run event, the end event and the span itself: no wrapper
            # on the per-event path
            return check(events, config, final=final)

        verdict, acks = check_with_ledger(run_dir, history, judge)
        recorder = evidence(run_dir, config, final)
    except (ValueError, OSError) as error:  # read_history names the file and line
        message = str(error)
        raise SavedRunError(message if message.startswith(str(history))
                            else f"{history}: {message}") from None
    except Exception:  # noqa: BLE001 - the checker itself broke: a verdict of its own
        _save_checker_errors(run_dir, {"checker": traceback.format_exc()})
        return Evaluation(scenario_name(run_dir, saved=saved), "checker_error", None, None,
                          saved)
    _save_checker_errors(run_dir, {name: result.error for name, result
                                   in verdict.invariants.items() if result.error})
    if outcome is None:
        outcome = run_outcome(verdict.end_event)
    word = _word(outcome, verdict, saved)
    if word == "pass" and recorder is not None and recorder["problems"]:
        word = "unknown"  # the monitor evidence is incomplete or disagrees: cannot decide
    if wall_ms is None:
        wall_ms = _saved_wall_ms(saved)
    step_ms = clock_step_ms(verdict.span_ms, wall_ms)
    clock_step = None
    if step_ms is not None:
        clock_step = {
            "stepped_ms": step_ms, "history_span_ms": verdict.span_ms, "wall_ms": wall_ms,
            "reason": f"the system clock stepped about {step_ms} ms forward during the run (the "
                      f"history spans more Valkey-clock time than the run took): every lease "
                      f"deadline moved with it, so the verdict ({word}) is no evidence either "
                      f"way"}
        if word in ("pass", "fail"):
            word = "unknown"
    return Evaluation(scenario_name(run_dir, verdict.run_event, saved), word, verdict, acks,
                      saved, recorder, clock_step)
