"""``selftest --history monitor|both``: the zoo judged on the MONITOR recorder's history.

``monitor``: every run (mutant and sound) is judged on the recorder's history alone, so each
mutant must be caught by its expected invariants on evidence decoded from the server, and the
sound protocol must pass on it. ``both``: one run records both sources; the verdict is the
scripts', and the recorder's history is judged too and compared with it (``SourceAgreement``):
per-invariant verdicts, the checker's figures, and the transitions event by event (same fields,
timestamps within ``TS_TOLERANCE_MS``). A variant whose two sources disagree fails the selftest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.check.checker import CheckConfig, Verdict, check
from chaos.history.events import read_history
from chaos.history.monitor import MONITOR_HISTORY
from chaos.run.sources import SCRIPTS_HISTORY, SOURCES, TS_TOLERANCE_MS, compare_histories
from chaos.scenario.model import Scenario

# A figure that is a difference of two timestamps may differ by one tolerance per timestamp.
_MS_TOLERANCE = 2 * TS_TOLERANCE_MS
_DIFFERENCES_LISTED = 5


def with_history(scenario: Scenario, source: str | None) -> Scenario:
    """The scenario recorded from ``source`` (None: the scenario's own)."""
    if source is None:
        return scenario
    if source not in SOURCES:
        raise ValueError(f"history source {source!r}: expected one of {', '.join(SOURCES)}")
    return scenario.model_copy(
        update={"history": scenario.history.model_copy(update={"source": source})})


@dataclass
class SourceAgreement:
    """One ``both`` run's two histories, judged and compared."""

    scripts_failed: list[str]
    monitor_failed: list[str]
    events_agree: bool  # same transitions, same fields, timestamps within TS_TOLERANCE_MS
    max_ts_diff_ms: int
    event_mismatches: list[str] = field(default_factory=list)
    figure_differences: list[str] = field(default_factory=list)  # "jobs.completed 40 vs 39"
    error: str | None = None  # a history missing or unreadable: no agreement to claim

    @property
    def same_verdicts(self) -> bool:
        return self.error is None and self.scripts_failed == self.monitor_failed

    @property
    def agree(self) -> bool:
        return self.same_verdicts and self.events_agree and not self.figure_differences

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "same_verdicts": self.same_verdicts, "agree": self.agree}


def judge_sources(run_dir: Path) -> SourceAgreement:
    """Both histories of a ``both`` run judged with the run's own configuration, and compared."""
    try:
        scripts = read_history(run_dir / SCRIPTS_HISTORY)
        monitor = read_history(run_dir / MONITOR_HISTORY)
    except (OSError, ValueError, KeyError) as error:
        return SourceAgreement([], [], False, 0, error=str(error))
    config = CheckConfig.from_history([event for event in scripts if event.type == "run"][:1])
    ours, theirs = check(scripts, config), check(monitor, config)
    events = compare_histories(scripts, monitor)
    return SourceAgreement(ours.failed_invariants(), theirs.failed_invariants(),
                           bool(events["agree"]), int(events["max_ts_diff_ms"]),
                           list(events["mismatches"]), figure_differences(ours, theirs))


def figure_differences(scripts: Verdict, monitor: Verdict) -> list[str]:
    """The checker's figures that differ between the two verdicts (job counts, redeliveries,
    recovery latencies, rejected calls, each invariant's violations and figures); a figure in
    milliseconds may differ by ``_MS_TOLERANCE``. The first few, as "name a vs b"."""
    differences: list[str] = []
    _compare("", _figures(scripts), _figures(monitor), differences)
    return differences[:_DIFFERENCES_LISTED]


def _figures(verdict: Verdict) -> dict[str, Any]:
    return {
        "jobs": asdict(verdict.jobs),
        "redeliveries": asdict(verdict.redeliveries),
        "recovery": {kind: asdict(summary) for kind, summary in verdict.recovery.items()},
        "stranded": verdict.stranded,
        "rejected": verdict.rejected,
        "invariants": {name: {"violations": result.violations, **result.figures,
                              "first_violation_ts": result.first_violation_ts}
                       for name, result in verdict.invariants.items()},
    }


def _compare(name: str, ours: Any, theirs: Any, differences: list[str]) -> None:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(ours.keys() | theirs.keys(), key=str):
            _compare(f"{name}.{key}" if name else str(key), ours.get(key), theirs.get(key),
                     differences)
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _compare(f"{name}[{index}]", a, b, differences)
    elif not _same(name, ours, theirs):
        differences.append(f"{name} {ours!r} vs {theirs!r}")


def _same(name: str, ours: Any, theirs: Any) -> bool:
    timed = name.endswith(("_ms", "_ts"))
    if timed and isinstance(ours, int | float) and isinstance(theirs, int | float):
        return abs(ours - theirs) <= _MS_TOLERANCE
    return bool(ours == theirs)


def agreement_rows(rows: Sequence[tuple[str, int, str, SourceAgreement]]
                   ) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The agreement table's header and lines: variant x seed x run (mutant or sound) x
    scripts verdict x monitor verdict x events and figures alike? x agree?"""
    header: tuple[str, ...] = ("variant", "seed", "run", "scripts verdict", "monitor verdict",
                               "events", "figures", "agree?")
    lines: list[tuple[str, ...]] = []
    for variant, seed, run, found in rows:
        if found.error is not None:
            lines.append((variant, str(seed), run, "-", "-", "-", "-", f"NO ({found.error})"))
            continue
        lines.append((
            variant, str(seed), run, _verdict(found.scripts_failed),
            _verdict(found.monitor_failed),
            f"{'same' if found.events_agree else 'DIFFER'} (max ts diff {found.max_ts_diff_ms} ms)",
            "same" if not found.figure_differences else
            "DIFFER " + "; ".join(found.figure_differences[:2]),
            "yes" if found.agree else "NO"))
    return header, lines


def _verdict(failed: list[str]) -> str:
    return f"fail ({','.join(failed)})" if failed else "pass"
