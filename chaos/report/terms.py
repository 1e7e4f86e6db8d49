"""Whose queue a report describes, in that queue's own terms: the recovery bound the verdict
judged with its formula, the settings' names, and what ran. Read from report.json's shape (and
the history's run event, where the page has it), so the terminal summary, junit.xml and
report.html say the same, and a saved run re-renders alike.

- The bound: the reference protocol's (an EchoMQ-style lease queue) is lease_ms +
  reap_interval_ms + tolerance; BullMQ's is 2 x stalledInterval + max(lockDuration,
  stalledInterval) + tolerance (``chaos.check.bullmq``). Told apart as the checker tells them:
  it adds its ``bullmq`` figures to ``invariants.recovery_bound`` for a BullMQ history.
- What ran: report.json's ``run.sut`` (``chaos.run.result``): the reference worker and reaper
  (then ``run.protocol`` names the variant), or the user's own processes and the dialect the
  MONITOR recorder decoded them in. A report without it (written before it was recorded, or by
  the pytest plugin's cluster) names what the history says and no more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.check.verdict import WHAT_IT_CHECKS

BULLMQ = "bullmq"
# The scenario's names as BullMQ's Worker options call them (docs/bullmq.md).
BULLMQ_NAMES = {"lease_ms": "lockDuration", "reap_interval_ms": "stalledInterval",
                "heartbeat_ms": "lockRenewTime", "max_stalls": "maxStalledCount"}


@dataclass(frozen=True)
class BoundFormula:
    """``invariants.recovery_bound``'s bound and the formula it came from."""

    bullmq: bool
    lease_ms: int
    reap_interval_ms: int
    tolerance_ms: int
    bound_ms: int
    # BullMQ judged per recovery on the stalled checks that ran (the history has its sweeps):
    # S + max(L, S) + each gap between checks beyond S; else the worst case for every job
    per_check: bool = False

    @classmethod
    def of(cls, bound: dict[str, Any]) -> BoundFormula:
        return cls(BULLMQ in bound, int(bound["lease_ms"]), int(bound["reap_interval_ms"]),
                   int(bound["tolerance_ms"]), int(bound["bound_ms"]),
                   bool((bound.get(BULLMQ) or {}).get("judged_per_recovery")))

    @property
    def base_ms(self) -> int:
        """The queue's own bound, before the tolerance (as judged: the bound less it)."""
        return self.bound_ms - self.tolerance_ms

    @property
    def name(self) -> str:
        """The formula in the queue's own names, without figures."""
        if self.per_check:
            return ("stalledInterval + max(lockDuration, stalledInterval) + each gap between "
                    "the stalled checks that ran beyond stalledInterval")
        return ("2 x stalledInterval + max(lockDuration, stalledInterval)" if self.bullmq
                else "lease_ms + reap_interval_ms")

    @property
    def terms(self) -> str:
        """The formula with its figures, before the tolerance (the summary's words)."""
        if self.per_check:
            return (f"BullMQ, per recovery on the stalled checks that ran: stalledInterval "
                    f"{self.reap_interval_ms} + max(lockDuration {self.lease_ms}, "
                    "stalledInterval)")
        if self.bullmq:
            return (f"BullMQ: 2 x stalledInterval {self.reap_interval_ms} + max(lockDuration "
                    f"{self.lease_ms}, stalledInterval)")
        return f"lease {self.lease_ms} + reap {self.reap_interval_ms}"

    @property
    def beyond(self) -> str:
        """What a per-recovery bound adds past the tolerance (empty otherwise)."""
        return ", + each gap between them beyond stalledInterval" if self.per_check else ""

    @property
    def text(self) -> str:
        """``<bound> ms = <formula with figures> + tolerance <t>``."""
        return f"{self.bound_ms} ms = {self.terms} + tolerance {self.tolerance_ms}{self.beyond}"


# What recovery_bound, reap_prompt and reap_cadence check on a BullMQ history, in place of the
# reference protocol's lines (``chaos.check.verdict.WHAT_IT_CHECKS``): the bound BullMQ has.
BULLMQ_CHECKS = {
    "recovery_bound": "every lease stranded by a cut-off fault (kill, pause, partition) is "
                      "returned by BullMQ's stalled check within stalledInterval + "
                      "max(lockDuration, stalledInterval) + tolerance_ms of its holder's last "
                      "renewal, plus each gap between the stalled checks that ran beyond "
                      "stalledInterval (2 x stalledInterval + ... without their record), while "
                      "every worker's checks run at most stalledInterval + tolerance_ms apart",
    "reap_prompt": "every lapsed lock, faulted or not, is returned within 2 x stalledInterval "
                   "+ max(lockDuration, stalledInterval) - lockDuration + reap_allowance_ms of "
                   "its deadline (server clock); a lock never returned counts as late once the "
                   "stalled check has run that long past its deadline",
    "reap_cadence": "every worker runs its stalled check (run or turned away by the "
                    "stalled-check key) at most stalledInterval + tolerance_ms after its "
                    "previous one, unless a fault holds it or the store is down; and the key "
                    "turns no check away more than stalledInterval after the last that ran",
}


def what_it_checks(name: str, report: dict[str, Any]) -> str:
    """The one line junit.xml and report.html show for an invariant, in the queue's terms."""
    bound = (report.get("invariants") or {}).get("recovery_bound") or {}
    if BULLMQ in bound and name in BULLMQ_CHECKS:
        return BULLMQ_CHECKS[name]
    return WHAT_IT_CHECKS.get(name, "")


def setting_name(name: str, dialect: str) -> str:
    """A scenario setting as the queue under test calls it (``lockDuration (lease_ms)``)."""
    own = BULLMQ_NAMES.get(name) if dialect == BULLMQ else None
    return f"{own} ({name})" if own else name


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
    if dialect == BULLMQ:
        return [("system under test", "BullMQ workers"), ("dialect", dialect_text(dialect))]
    if dialect or report.get("history_recorder"):  # recorded from MONITOR: anyone's queue
        return [("system under test", "not recorded in this report.json"),
                *([("dialect", dialect_text(dialect))] if dialect else [])]
    return [("protocol", str(run.get("protocol") or protocol or "?"))] if (
        run.get("protocol") or protocol) else []


def dialect_text(dialect: str, contract: str | None = None) -> str:
    """How the MONITOR recorder read the queue's calls. ``contract``: whose scripts the SUT's
    processes ran (``run.sut.contract``: ``toolkit``, the exported scripts; ``echomq``, the
    real EchoMQ's own); None where the run does not say (an attached deployment)."""
    if dialect == "echomq":
        return {"toolkit": "echomq (the reference protocol's scripts and keys)",
                "echomq": "echomq (EchoMQ's own scripts, decoded by what they do to its keys)",
                }.get(contract or "", "echomq (decoded by what the calls do to the queue's keys)")
    return {BULLMQ: "bullmq (real BullMQ's scripts)"}.get(dialect, dialect)
