"""Whose queue a report describes, in that queue's own terms: the recovery bound the verdict
judged with its formula, and the settings' names. Read from report.json's shape, so the terminal
summary, junit.xml and report.html say the same, and a saved run re-renders alike.

- The bound: the reference protocol's (an EchoMQ-style lease queue) is lease_ms +
  reap_interval_ms + tolerance; BullMQ's is 2 x stalledInterval + max(lockDuration,
  stalledInterval) + tolerance (``chaos.check.bullmq``). Told apart as the checker tells them:
  it adds its ``bullmq`` figures to ``invariants.recovery_bound`` for a BullMQ history.
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

    @classmethod
    def of(cls, bound: dict[str, Any]) -> BoundFormula:
        return cls(BULLMQ in bound, int(bound["lease_ms"]), int(bound["reap_interval_ms"]),
                   int(bound["tolerance_ms"]), int(bound["bound_ms"]))

    @property
    def base_ms(self) -> int:
        """The queue's own bound, before the tolerance (as judged: the bound less it)."""
        return self.bound_ms - self.tolerance_ms

    @property
    def name(self) -> str:
        """The formula in the queue's own names, without figures."""
        return ("2 x stalledInterval + max(lockDuration, stalledInterval)" if self.bullmq
                else "lease_ms + reap_interval_ms")

    @property
    def terms(self) -> str:
        """The formula with its figures, before the tolerance (the summary's words)."""
        if self.bullmq:
            return (f"BullMQ: 2 x stalledInterval {self.reap_interval_ms} + max(lockDuration "
                    f"{self.lease_ms}, stalledInterval)")
        return f"lease {self.lease_ms} + reap {self.reap_interval_ms}"

    @property
    def text(self) -> str:
        """``<bound> ms = <formula with figures> + tolerance <t>``."""
        return f"{self.bound_ms} ms = {self.terms} + tolerance {self.tolerance_ms}"


# What recovery_bound and reap_prompt check on a BullMQ history, in place of the reference
# protocol's lines (``chaos.check.verdict.WHAT_IT_CHECKS``): the bound BullMQ has.
BULLMQ_CHECKS = {
    "recovery_bound": "every lease stranded by a cut-off fault (kill, pause, partition) is "
                      "returned by BullMQ's stalled check within 2 x stalledInterval + "
                      "max(lockDuration, stalledInterval) + tolerance_ms of its holder's last "
                      "renewal",
    "reap_prompt": "every lapsed lock, faulted or not, is returned within 2 x stalledInterval "
                   "+ max(lockDuration, stalledInterval) - lockDuration + reap_allowance_ms of "
                   "its deadline (server clock); a lock never returned counts as late once the "
                   "stalled check has run that long past its deadline",
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
