"""One run as the store keeps it: plain data read from what the run left (its report.json, the
checker's verdict and the resolved scenario), never recomputed here.

The figures are report.json's, by name (``FIGURES``: where each is read from); the samples are
the checker's own (``Verdict.recovery_samples``: ms after the fault of each stranded lease's
reap, re-claim and re-complete, and each lapsed lease's deadline to reap).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.check.verdict import Verdict
from chaos.report.terms import bound_model_words

# figure name -> its path in report.json. ``recovery`` is fault-to-reap (recovery_bound's
# latencies), ``prompt`` lease deadline to reap (reap_prompt's).
FIGURES: dict[str, tuple[str, ...]] = {
    "recovery_p50_ms": ("recovery", "reap", "p50_ms"),
    "recovery_p99_ms": ("recovery", "reap", "p99_ms"),
    "recovery_max_ms": ("recovery", "reap", "max_ms"),
    "prompt_p50_ms": ("recovery", "deadline_to_reap", "p50_ms"),
    "prompt_p99_ms": ("recovery", "deadline_to_reap", "p99_ms"),
    "reclaim_p50_ms": ("recovery", "reclaim", "p50_ms"),
    "reclaim_p99_ms": ("recovery", "reclaim", "p99_ms"),
    "recomplete_p50_ms": ("recovery", "recomplete", "p50_ms"),
    "recomplete_p99_ms": ("recovery", "recomplete", "p99_ms"),
    "needless_redeliveries": ("redeliveries", "needless"),
    "completes_per_s": ("throughput_per_s",),
    "lost": ("jobs", "lost"),
    "duplicated": ("jobs", "double_completed"),
    "bound_ms": ("invariants", "recovery_bound", "bound_ms"),
    # the pace (report.json's ``pace``: chaos.check.pace), what a code change moves whatever the
    # reaper's phase against the faults
    "sweep_gap_p50_ms": ("pace", "sweep_gap", "p50_ms"),
    "claim_wait_p50_ms": ("pace", "claim_wait", "p50_ms"),
    "claim_wait_p99_ms": ("pace", "claim_wait", "p99_ms"),
    "drain_ms": ("pace", "drain_ms"),
    "needed_redeliveries": ("redeliveries", "needed"),
}
# The checker's sample lists (Verdict.recovery_samples) and the figures they are behind.
SAMPLE_FIGURES = {"reap": "recovery", "deadline_to_reap": "prompt", "reclaim": "reclaim",
                  "recomplete": "recomplete"}
# The pace's sample lists (Verdict.pace.samples: chaos.check.pace), stored beside them.
PACE_KINDS = ("sweep_gap", "claim_wait", "completes_per_s")
# A run's samples of one kind kept at most (a long run's claim waits: evenly spaced order
# statistics of them), so one run weighs no more than this many samples in a pooled window.
MAX_SAMPLES = 1000
# Settings that differ run to run without making it another scenario: left out of the hash.
UNHASHED_SETTINGS = ("seed",)


@dataclass
class RunRecord:
    """A run as stored: what ran (scenario, settings hash, family, seed, labels), when, how it
    ended (verdict, exit code), its figures and the samples behind them."""

    scenario: str
    settings_hash: str
    family: str
    seed: int | None
    started_ms: int  # Valkey's clock at the run event (else the report's write time)
    verdict: str
    exit_code: int
    command: str  # run | certify | sweep | capacity | pytest | import
    run_dir: str
    figures: dict[str, float] = field(default_factory=dict)
    samples: dict[str, list[int]] = field(default_factory=dict)
    unknown_reasons: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)


def settings_hash(settings: Mapping[str, Any] | None) -> str:
    """A short hash of the resolved scenario (scenario.json) without its seed: runs of the same
    settings share it, a ``--set`` gives another."""
    if not settings:
        return ""
    kept = {key: value for key, value in settings.items() if key not in UNHASHED_SETTINGS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def _dig(report: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = report
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def report_figures(report: Mapping[str, Any]) -> dict[str, float]:
    """The FIGURES report.json holds (a run stopped before it was judged holds none)."""
    figures = {}
    for name, path in FIGURES.items():
        value = _dig(report, path)
        if isinstance(value, int | float) and not isinstance(value, bool):
            figures[name] = float(value)
    return figures


def unknown_reasons(report: Mapping[str, Any]) -> list[str]:
    """Why the checker could not decide, as report.json says: undrained jobs, invariants blind
    for want of evidence, planned faults that found no target."""
    reasons = []
    if _dig(report, ("undrained", "count")):
        reasons.append("undrained")
    reasons += [f"blind:{name}" for name in _dig(report, ("evidence", "blind_invariants")) or []]
    if report.get("faults_skipped"):
        reasons.append("faults_skipped")
    return reasons


def family_of(report: Mapping[str, Any]) -> str:
    """The family whose bound judged the run (report.json's recovery_bound.model)."""
    bound = _dig(report, ("invariants", "recovery_bound"))
    if isinstance(bound, Mapping):
        return str(bound_model_words(bound).get("family") or "")
    return ""


def record_of(report: Mapping[str, Any], verdict: Verdict | None,
              settings: Mapping[str, Any] | None, *, exit_code: int, command: str,
              run_dir: str, labels: Mapping[str, str], fallback_started_ms: int) -> RunRecord:
    """The record of one run from what it left: report.json (as a dict), the checker's verdict
    (None: the run broke before it had a history) and the resolved scenario."""
    run_event = verdict.run_event if verdict is not None else None
    seed = run_event.seed if run_event is not None else None
    if seed is None and settings is not None and isinstance(settings.get("seed"), int):
        seed = settings["seed"]
    return RunRecord(
        scenario=str(report.get("scenario") or (settings or {}).get("name") or "?"),
        settings_hash=settings_hash(settings),
        family=family_of(report) or (run_event.dialect if run_event is not None else ""),
        seed=seed,
        started_ms=run_event.ts if run_event is not None and run_event.ts else
        fallback_started_ms,
        verdict=str(report.get("verdict") or "error"),
        exit_code=exit_code,
        command=command,
        run_dir=run_dir,
        figures=report_figures(report),
        samples=run_samples(verdict),
        unknown_reasons=unknown_reasons(report) if report.get("verdict") == "unknown" else [],
        labels=dict(labels),
    )


def run_samples(verdict: Verdict | None) -> dict[str, list[int]]:
    """The verdict's recovery samples and its pace's, each kind at most MAX_SAMPLES."""
    if verdict is None:
        return {}
    kinds = dict(verdict.recovery_samples)
    if verdict.pace is not None:
        kinds.update({kind: verdict.pace.samples.get(kind, []) for kind in PACE_KINDS})
    return {kind: capped(values) for kind, values in kinds.items()}


def capped(values: list[int], most: int = MAX_SAMPLES) -> list[int]:
    """``values`` as they are up to ``most``; past it, ``most`` evenly spaced order statistics
    (the smallest and the largest kept)."""
    if len(values) <= most:
        return list(values)
    ordered = sorted(values)
    return [ordered[round(k * (len(ordered) - 1) / (most - 1))] for k in range(most)]


# figure name -> its key in a capacity search's capacity.json
CAPACITY_FIGURES = {"knee_rate_per_s": "knee_rate", "store_ceiling_per_s": "store_ceiling",
                    "workers": "workers", "slots": "slots"}


def capacity_record(summary: Mapping[str, Any], settings: Mapping[str, Any], *, exit_code: int,
                    run_dir: str, labels: Mapping[str, str], started_ms: int) -> RunRecord:
    """The record of one capacity search (one pool size) from its capacity.json: its knee (the
    highest rate that fit, None when none did) and the store's ceiling, as figures."""
    figures = {name: float(summary[key]) for name, key in CAPACITY_FIGURES.items()
               if isinstance(summary.get(key), int | float)}
    stopped_by = str(summary.get("stopped_by") or "")
    verdict = ("pass" if exit_code == 0 else "aborted" if stopped_by == "aborted"
               else "error" if stopped_by == "error" else "fail")
    seed = settings.get("seed")
    return RunRecord(
        scenario=str(summary.get("scenario") or settings.get("name") or "?"),
        settings_hash=settings_hash(settings),
        family=str((settings.get("history") or {}).get("dialect") or ""),
        seed=seed if isinstance(seed, int) else None, started_ms=started_ms, verdict=verdict,
        exit_code=exit_code, command="capacity", run_dir=run_dir, figures=figures,
        labels=dict(labels))


class LabelError(ValueError):
    """A ``--label`` that is not KEY=VALUE (exit 2)."""


def parse_labels(assignments: list[str]) -> dict[str, str]:
    """``--label KEY=VALUE`` (repeatable) -> {KEY: VALUE}; LabelError names a bad one."""
    labels = {}
    for text in assignments:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise LabelError(f"--label {text!r}: expected KEY=VALUE, e.g. sut_version=2.6.5")
        labels[key.strip()] = value
    return labels
