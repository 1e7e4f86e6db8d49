"""Whose queue a report describes, in that queue's own terms: the recovery bound the verdict
judged with its formula, the settings' names, and what ran. Read from report.json (and the
history's run event, where the page has it), so the terminal summary, junit.xml and
report.html say the same, and a saved run re-renders alike.

- The bound: the checker writes the family's bound in its own words into
  ``invariants.recovery_bound.model`` (``chaos.check.judgements.bound_words``: formula, figures,
  setting names, what some invariants check in its terms); the reports render that, and never
  ask whose queue it is. A report.json written before it carries the reference protocol's words
  (lease_ms + reap_interval_ms + tolerance).
- What ran: report.json's ``run.sut`` (``chaos.run.result``): the reference worker and reaper
  (then ``run.protocol`` names the variant), or the user's own processes and the dialect the
  MONITOR recorder decoded them in (its family's words, ``chaos.registry``). A report without
  it (written before it was recorded, or by the pytest plugin's cluster) names what the history
  says and no more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.check.verdict import WHAT_IT_CHECKS
from chaos.registry import SCRIPTS_RECORDED, BoundModel, UnknownFamily, family_spec


def bound_model_words(bound: Mapping[str, Any]) -> dict[str, Any]:
    """``recovery_bound.model``, or the reference protocol's words for a report without it."""
    model = bound.get("model")
    if isinstance(model, dict):
        return model
    default = BoundModel()
    lease, interval = int(bound.get("lease_ms") or 0), int(bound.get("reap_interval_ms") or 0)
    return {"family": SCRIPTS_RECORDED, "formula": default.formula,
            "terms": default.terms(lease, interval), "beyond": "",
            "recovered_by": default.recovered_by,
            "reap_lag_terms": default.reap_lag_terms(lease, interval),
            "interval_name": default.interval_name, "sweep_slack": "allowance",
            "setting_names": {}, "checks": {}, "lines": []}


@dataclass(frozen=True)
class BoundFormula:
    """``invariants.recovery_bound``'s bound and the formula it came from, in the words the
    checker wrote for the queue's family."""

    lease_ms: int
    reap_interval_ms: int
    tolerance_ms: int
    bound_ms: int
    name: str  # the formula in the queue's own names, without figures
    terms: str  # the formula with its figures, before the tolerance
    beyond: str = ""  # what a per-recovery bound adds past the tolerance
    family: str = SCRIPTS_RECORDED
    recovered_by: str = "the reaper"
    reap_lag_terms: str = ""
    interval_name: str = "reap"
    sweep_slack: str = "allowance"
    setting_names: Mapping[str, str] = field(default_factory=dict)
    lines: tuple[str, ...] = ()  # the family's own summary lines (its figures)

    @classmethod
    def of(cls, bound: dict[str, Any]) -> BoundFormula:
        words = bound_model_words(bound)
        return cls(int(bound["lease_ms"]), int(bound["reap_interval_ms"]),
                   int(bound["tolerance_ms"]), int(bound["bound_ms"]), str(words["formula"]),
                   str(words["terms"]), str(words.get("beyond") or ""),
                   str(words.get("family") or SCRIPTS_RECORDED),
                   str(words.get("recovered_by") or "the reaper"),
                   str(words.get("reap_lag_terms") or ""),
                   str(words.get("interval_name") or "reap"),
                   str(words.get("sweep_slack") or "allowance"),
                   dict(words.get("setting_names") or {}), tuple(words.get("lines") or ()))

    @property
    def base_ms(self) -> int:
        """The queue's own bound, before the tolerance (as judged: the bound less it)."""
        return self.bound_ms - self.tolerance_ms

    @property
    def text(self) -> str:
        """``<bound> ms = <formula with figures> + tolerance <t>``."""
        return f"{self.bound_ms} ms = {self.terms} + tolerance {self.tolerance_ms}{self.beyond}"


def what_it_checks(name: str, report: dict[str, Any]) -> str:
    """The one line junit.xml and report.html show for an invariant, in the queue's terms."""
    bound = (report.get("invariants") or {}).get("recovery_bound") or {}
    own = (bound_model_words(bound).get("checks") or {}).get(name)
    return str(own) if own else WHAT_IT_CHECKS.get(name, "")


def setting_name(name: str, names: Mapping[str, str]) -> str:
    """A scenario setting as the queue under test calls it (``lockDuration (lease_ms)``);
    ``names``: the family's (``BoundFormula.setting_names``)."""
    own = names.get(name)
    return f"{own} ({name})" if own else name


def has_setting(name: str, names: Mapping[str, str]) -> bool:
    """False for a setting the family has no equivalent of (named "" by it)."""
    return names.get(name, name) != ""


def _argv(argv: Any) -> str:
    return " ".join(str(part) for part in argv) if isinstance(argv, list) else str(argv)


def what_ran(report: dict[str, Any], protocol: str | None = None,
             dialect: str = "") -> list[tuple[str, str]]:
    """Rows naming the system under test. ``protocol`` and ``dialect``: the history's run event's
    (the fallback for a report that does not record ``run.sut``). The protocol variant
    (``sound`` or a mutant) is the reference worker's: never said of anyone else's queue."""
    run = report.get("run") or {}
    sut = run.get("sut")
    if isinstance(sut, dict):
        dialect = str(sut.get("dialect") or dialect)
        if not sut.get("foreign"):
            return [("system under test", "the reference worker and reaper"),
                    ("protocol", str(run.get("protocol") or protocol or "?"))]
        if sut.get("attached"):
            return [("system under test", "a queue already deployed, attached to: "
                                          + ", ".join(map(str, sut["attached"]))),
                    ("dialect", dialect_text(dialect))]
        reaper = sut.get("reaper")
        reaper_text = ("the built-in reaper" if reaper == "builtin" else
                       "no reaper (the workers recover stalled jobs)" if reaper == "none" else
                       f"reaper {_argv(reaper)}")
        return [("system under test", f"own workers {_argv(sut.get('workers'))}, "
                                      f"{reaper_text}"),
                ("dialect", dialect_text(dialect, str(sut.get("contract") or "toolkit")))]
    known = _system_under_test(dialect)
    if known:
        return [("system under test", known), ("dialect", dialect_text(dialect))]
    if dialect or report.get("history_recorder"):  # recorded from MONITOR: anyone's queue
        return [("system under test", "not recorded in this report.json"),
                *([("dialect", dialect_text(dialect))] if dialect else [])]
    return [("protocol", str(run.get("protocol") or protocol or "?"))] if (
        run.get("protocol") or protocol) else []


def _system_under_test(dialect: str) -> str:
    try:
        return family_spec(dialect).system_under_test if dialect else ""
    except UnknownFamily:
        return ""


def dialect_text(dialect: str, contract: str | None = None) -> str:
    """How the MONITOR recorder read the queue's calls, in its family's words
    (``FamilySpec.dialect_text``). ``contract``: whose scripts the SUT's processes ran
    (``run.sut.contract``: ``toolkit``, the exported scripts; ``echomq``, the real EchoMQ's own);
    None where the run does not say (an attached deployment)."""
    try:
        texts = family_spec(dialect).dialect_text if dialect else {}
    except UnknownFamily:  # a family no longer installed: its name is all there is
        return dialect
    return texts.get(contract or "") or texts.get("") or dialect
