"""Did the run exercise recovery? A run whose faults stranded no lease passes on nothing: its
``recovery_bound`` held for want of a case, and "PASS ... 0 leases stranded" must not read as a
run that proved recovery (docs/reports-and-ci.md, "Exercised").

One rule, from the replay's own facts (``ReplayFacts.faults_applied``: each fault with the live
leases its target held when it was recorded; ``stranded``: the leases ``recovery_bound``
judges, those a holder renewed or finished after its fault already left out):

- a fault **can strand** a lease when it cuts its target off (kill, pause, partition, a cutting
  toxic: the fault's ``cuts_off``), is not a store fault, and hits a worker (the run event's
  ``workers``; a history without them: any target). Only those count. Per fault: ``exercised``
  true when it stranded a lease, false when its target held none at the fault or each lease it
  held was renewed or finished by its holder after it; None (with why) for a fault that cannot.
- the run is **exercised** when some fault stranded a lease; **not exercised** (false) when
  faults that can strand were applied and none did, or the only such faults planned found no
  target; **None** when nothing in it could strand a lease: no fault at all (steady state), or
  only faults that slow a worker, skew a clock, stop a reaper or crash the store. None is no
  verdict on the run: it tested something else, and says what.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chaos.history.schema import Fault, FaultSkipped


class Stranded(Protocol):
    """What is read of a stranded lease (``verdict.StrandedLease``): the fault that did it."""

    @property
    def fault_id(self) -> str: ...


@dataclass(frozen=True)
class FaultExercise:
    """One applied fault: what its target held at it, what it stranded, and in words why that
    does or does not exercise recovery."""

    fault_id: str
    kind: str
    worker: str  # its target (a store node for a store fault)
    target: str  # as the scenario named it: a name, "random 1", "holding_oldest_lease"
    ts: int
    at_ms: int | None  # into the chaos phase (None: the history shows no chaos phase)
    held: int  # live leases its target held when the fault was recorded
    stranded: int  # of them, left for the reaper (never renewed or finished by their holder)
    exercised: bool | None  # None: a fault that cannot strand a lease
    reason: str

    def describe(self) -> str:
        """``kill f2 worker-3 at chaos+1204 ms``: the fault as the summary names it (its time
        counted as the plan counts ``at_ms``, from the chaos phase's start)."""
        at = f" at chaos+{self.at_ms} ms" if self.at_ms is not None else ""
        return f"{self.kind} {self.fault_id} {self.worker}{at}"


@dataclass(frozen=True)
class Exercise:
    exercised: bool | None  # None: nothing in the run could strand a lease
    reason: str
    faults: list[FaultExercise] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """report.json's ``exercise`` (its ``exercised`` is also a top-level key)."""
        return {"exercised": self.exercised, "reason": self.reason,
                "faults": [asdict(fault) for fault in self.faults]}


def exercise(applied: Sequence[tuple[Fault, int]], stranded: Sequence[Stranded],
             skipped: Sequence[FaultSkipped] = (), workers: Sequence[str] = (),
             chaos_ts: int | None = None) -> Exercise:
    """The run's and each fault's exercise (module docstring), from the replay's facts."""
    by_fault = Counter(item.fault_id for item in stranded)
    faults = [_fault(fault, held, by_fault[fault.fault_id], workers, chaos_ts)
              for fault, held in applied]
    counted = [fault for fault in faults if fault.exercised is not None]
    hits = [fault for fault in counted if fault.exercised]
    if hits:
        leases = sum(fault.stranded for fault in hits)
        return Exercise(True, f"{leases} lease(s) stranded by {len(hits)} of the "
                              f"{len(counted)} fault(s) that can strand one", faults)
    if counted:
        return Exercise(False, "no fault stranded a lease: " + "; ".join(
            f"{fault.describe()} {fault.reason}" for fault in counted[:3])
            + (f"; {len(counted) - 3} more" if len(counted) > 3 else ""), faults)
    if skipped:
        return Exercise(False, f"no fault that can strand a lease was applied: {len(skipped)} "
                               "planned fault(s) found no target when due ("
                        + ", ".join(f"{item.kind} {item.target}" for item in skipped[:3])
                        + ")", faults)
    if not faults:
        return Exercise(None, "no fault in the run: nothing to strand a lease, recovery was not "
                              "what it tested", faults)
    kinds = Counter(fault.kind for fault in faults)
    return Exercise(None, "no fault of the run can strand a lease ("
                    + ", ".join(f"{kind} {count}" for kind, count in kinds.items())
                    + "): recovery was not what it tested", faults)


def _fault(fault: Fault, held: int, stranded: int, workers: Sequence[str],
           chaos_ts: int | None) -> FaultExercise:
    exercised: bool | None
    if fault.is_store:
        exercised, reason = None, "crashes the store: it strands no lease (its figures are the " \
                                  "clients' recovery)"
    elif not fault.cuts_off:
        exercised, reason = None, (f"only slows its target: it strands no lease by design "
                                   f"({held} lease(s) held under it)")
    elif workers and fault.worker not in workers:
        exercised, reason = None, "hits no worker: its target holds no lease"
    elif stranded:
        exercised, reason = True, f"stranded {stranded} lease(s)"
    elif not held:
        exercised, reason = False, "stranded no lease (its target held none" + (
            ": no worker held a live lease when it was applied)" if fault.holder_found is False
            else ")")
    else:
        exercised, reason = False, (f"stranded no lease (its target held {held}, and renewed "
                                    "or finished each after the fault)")
    return FaultExercise(fault.fault_id, fault.kind, fault.worker, fault.target, fault.ts,
                         None if chaos_ts is None else fault.ts - chaos_ts, held, stranded,
                         exercised, reason)
