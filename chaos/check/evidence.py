"""What the history lacks, and which invariants that blinds (docs/design.md §4, "No verdict on
missing evidence").

A history source that cannot see everything says so in the history itself: a ``blind`` event
(``chaos.history.schema.Blind``) per job a call it could not decode touched (or one for every
job, when it cannot tell which), per job a decoded call of an unknown connection touched, and
one for every job where its feed broke or a gap hid writes. ``BlindSpots`` collects them as the
replay meets them.

Each invariant needs some evidence (``NEEDS``): every one needs the transitions, and those that
ask who held a lease (exclusive_lease, recovery_bound, reap_prompt, needless_limit,
live_lease_honoured) need the holder too. An offence is *blinded* when it concerns a job that
evidence it needs is missing for, from the time the offence was proven or earlier: the missing
call may be what explains it (an undecoded claim makes the next holder's complete look stray, an
undecoded complete makes a job look lost). An offence that stands on decoded evidence alone still
fails the invariant. An invariant with no standing offence whose evidence is incomplete is
neither passed nor failed: it is *blind*, and the run is ``unknown``.

``lease_length`` is the one invariant whose offence is its own evidence: a decoded grant of the
wrong length is wrong whatever else ran, so its offences are never blinded (its pass still
needs every grant seen).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chaos.history.schema import HOLDER_EVIDENCE, TRANSITION_EVIDENCE, Blind
from chaos.names import INVARIANTS

_BOTH = frozenset((TRANSITION_EVIDENCE, HOLDER_EVIDENCE))
_TRANSITIONS = frozenset((TRANSITION_EVIDENCE,))
NEEDS: dict[str, frozenset[str]] = {
    "no_loss": _TRANSITIONS,
    "no_double_completion": _TRANSITIONS,
    "recovery_bound": _BOTH,  # which leases a fault stranded: who held them
    "reap_prompt": _BOTH,  # a late call of the holder's shows a lease unreaped
    "no_premature_reap": _TRANSITIONS,
    "exclusive_lease": _BOTH,
    "lease_length": _TRANSITIONS,
    "attempts_monotonic": _TRANSITIONS,
    "stall_limit": _TRANSITIONS,
    "needless_limit": _BOTH,  # needless or needed: was the holder cut off
    "live_lease_honoured": _BOTH,  # whether the refused call was the live holder's
    # A sweep is seen by its scan, decoded or not; only what hides every call (a broken feed,
    # an unreadable line, a gap) can hide one. A sweep whose sweeper is unknown blinds the gaps
    # it falls in (chaos.check.judgements.judge_reap_cadence).
    "reap_cadence": _TRANSITIONS,
    # the claims that made a group's leases and the settles that ended them
    "group_limit": _TRANSITIONS,
    # the pauses and resumes, and the claims made meanwhile
    "paused_group": _TRANSITIONS,
    # the children's enqueues and completes, and the parent's release and claims
    "flow_order": _TRANSITIONS,
}
assert tuple(NEEDS) == INVARIANTS, "every invariant says what evidence it needs"
SELF_EVIDENT = frozenset(("lease_length",))  # offences that are their own evidence


class BlindSpots:
    """The blind events of a history: per job and for every job, the earliest server time from
    which each kind of evidence is missing, and why (counted, for the report)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, int]] = {}  # job -> lacks -> earliest ts
        self.every_job: dict[str, int] = {}  # lacks -> earliest ts (a blind spot on any job)
        self.reasons: Counter[tuple[str, str]] = Counter()  # (lacks, why) -> blind events
        self.jobs_by_reason: dict[tuple[str, str], set[str]] = {}
        self.every_job_reasons: set[tuple[str, str]] = set()

    def __bool__(self) -> bool:
        return bool(self.every_job or self.jobs)

    def note(self, blind: Blind) -> None:
        reason = (blind.lacks, blind.why)
        self.reasons[reason] += 1
        if blind.job_id is None:
            table = self.every_job
            self.every_job_reasons.add(reason)
        else:
            table = self.jobs.setdefault(blind.job_id, {})
            self.jobs_by_reason.setdefault(reason, set()).add(blind.job_id)
        if blind.lacks not in table or blind.ts < table[blind.lacks]:
            table[blind.lacks] = blind.ts

    def covers(self, job_id: str | None, proven_ts: int, needs: frozenset[str]) -> bool:
        """Was evidence of a kind in ``needs`` missing for ``job_id`` at or before
        ``proven_ts``, the moment the history proved an offence on it?"""
        for lacks, since in self.every_job.items():
            if lacks in needs and since <= proven_ts:
                return True
        spots = self.jobs.get(job_id or "")
        return spots is not None and any(
            lacks in needs and since <= proven_ts for lacks, since in spots.items())

    def lacks_any(self, needs: frozenset[str]) -> bool:
        """Is evidence of a kind in ``needs`` missing anywhere in the history?"""
        return any(lacks in needs for lacks in self.every_job) or any(
            lacks in needs for spots in self.jobs.values() for lacks in spots)

    def summary(self) -> list[dict[str, Any]]:
        """report.json ``evidence.missing``: one row per reason."""
        return [{"lacks": lacks, "why": why, "blind_events": count,
                 "jobs": len(self.jobs_by_reason.get((lacks, why), ())),
                 "every_job": (lacks, why) in self.every_job_reasons}
                for (lacks, why), count in sorted(self.reasons.items())]
