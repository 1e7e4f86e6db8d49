"""A tiny builder for hand-written histories, shaped exactly like ``history.jsonl`` lines.

    h = History(lease_ms=1000, reap_interval_ms=250, tolerance_ms=100)
    h.enqueue("a", ts=0)
    h.claim("a", attempt=1, worker="w1", ts=10)
    f1 = h.fault("kill", "w1", ts=200)
    h.reap("a", attempt=1, ts=1300)
    events = h.events()

Every record is encoded by its typed event (``chaos.history.schema``), carries string values (as
the events stream does) and goes through ``Event.from_record``, so the checker sees what it would
see from a real run. Stream ids
(``seq``) are assigned automatically: ``<ms>-<n>``, strictly increasing, ``<ms>`` following
``ts`` (never going backwards, like a Valkey stream id).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.history.events import Event
from chaos.history.schema import (
    Blind,
    Claim,
    Complete,
    CompleteRejected,
    Dead,
    Enqueue,
    Extend,
    ExtendRejected,
    Fault,
    Heal,
    Phase,
    Reap,
    Run,
    Sweep,
    TypedEvent,
)


def _seq_ids(records: list[dict[str, Any]]) -> list[str]:
    """Strictly increasing stream ids that follow each record's ``ts``."""
    ids = []
    last_ms, last_n = -1, -1
    for record in records:
        ms = max(int(record.get("ts", 0)), last_ms)
        last_n = last_n + 1 if ms == last_ms else 0
        last_ms = ms
        ids.append(f"{ms}-{last_n}")
    return ids


def resequence(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fresh stream ids for an edited record list (inserted or dropped records), in list order."""
    fresh = [dict(record) for record in records]
    for record, seq in zip(fresh, _seq_ids(fresh), strict=True):
        record["seq"] = seq
    return fresh


def to_events(records: list[dict[str, Any]]) -> list[Event]:
    return [Event.from_record(record) for record in records]


class History:
    """Append events in stream order; ``events()`` gives the checker's input."""

    def __init__(
        self,
        lease_ms: int = 1000,
        reap_interval_ms: int = 250,
        tolerance_ms: int | None = 100,
        *,
        run: bool = True,
        ts: int = 0,
        max_stalls: int | None = None,
        sweepers: tuple[str, ...] = (),
    ) -> None:
        self.lease_ms = lease_ms
        self.reap_interval_ms = reap_interval_ms
        self._records: list[dict[str, Any]] = []
        self._last_ms = -1
        self._last_n = -1
        self._leases: dict[str, tuple[int, str, int]] = {}  # id -> (attempt, worker, deadline)
        self._fault_workers: dict[str, str] = {}
        if run:
            self.write(Run(scenario="hand-written", seed=1, lease_ms=lease_ms,
                           reap_interval_ms=reap_interval_ms, tolerance_ms=tolerance_ms,
                           max_stalls=max_stalls, sweepers=sweepers), ts)

    # --- generic -------------------------------------------------------------------------
    def add(self, type: str, ts: int, **fields: Any) -> dict[str, Any]:
        """Append one record; ``None`` fields are left out, everything else becomes a string."""
        ms = max(ts, self._last_ms)
        self._last_n = self._last_n + 1 if ms == self._last_ms else 0
        self._last_ms = ms
        record: dict[str, Any] = {"seq": f"{ms}-{self._last_n}", "type": type}
        record.update({name: str(value) for name, value in fields.items() if value is not None})
        record["ts"] = str(ts)
        self._records.append(record)
        return record

    def write(self, event: TypedEvent, ts: int, **more: Any) -> dict[str, Any]:
        """Append a typed event, as its encoder writes it (plus ``more`` fields, if any)."""
        fields = {**event.fields(), **more}
        return self.add(fields.pop("type"), ts=ts, **fields)

    def records(self) -> list[dict[str, Any]]:
        return [dict(record) for record in self._records]

    def events(self) -> list[Event]:
        return to_events(self._records)

    def write_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        with open(path, "w", encoding="utf-8") as handle:
            for record in self._records:
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        return path

    # --- queue transitions ---------------------------------------------------------------
    def phase(self, name: str, ts: int, **extra: Any) -> dict[str, Any]:
        return self.write(Phase(name), ts, **extra)

    def enqueue(self, job_id: str, ts: int, kind: str | None = None) -> dict[str, Any]:
        return self.write(Enqueue(job_id, kind or ""), ts)

    def claim(
        self, job_id: str, attempt: int, worker: str, ts: int, lease_ms: int | None = None,
        deadline: int | None = None,
    ) -> dict[str, Any]:
        return self._lease("claim", job_id, attempt, worker, ts, lease_ms, deadline)

    def extend(
        self, job_id: str, attempt: int, worker: str, ts: int, lease_ms: int | None = None,
        deadline: int | None = None,
    ) -> dict[str, Any]:
        return self._lease("extend", job_id, attempt, worker, ts, lease_ms, deadline)

    def _lease(
        self, kind: str, job_id: str, attempt: int, worker: str, ts: int, lease_ms: int | None,
        deadline: int | None,
    ) -> dict[str, Any]:
        """A claim or an accepted extend: the lease now runs to ``deadline`` (the score written
        to active; default ts + lease_ms), recording ``lease_ms`` (default the run's)."""
        lease_ms = self.lease_ms if lease_ms is None else lease_ms
        deadline = ts + lease_ms if deadline is None else deadline
        self._leases[job_id] = (attempt, worker, deadline)
        lease = Claim if kind == "claim" else Extend
        return self.write(lease(job_id, attempt, worker, lease_ms, deadline), ts)

    def extend_rejected(
        self, job_id: str, attempt: int, worker: str, ts: int, current_attempt: int | None = None
    ) -> dict[str, Any]:
        return self._rejected("extend_rejected", job_id, attempt, worker, ts, current_attempt)

    def complete(self, job_id: str, attempt: int, worker: str, ts: int) -> dict[str, Any]:
        return self.write(Complete(job_id, attempt, worker), ts)

    def complete_rejected(
        self, job_id: str, attempt: int, worker: str, ts: int, current_attempt: int | None = None
    ) -> dict[str, Any]:
        return self._rejected("complete_rejected", job_id, attempt, worker, ts, current_attempt)

    def _rejected(
        self, kind: str, job_id: str, attempt: int, worker: str, ts: int,
        current_attempt: int | None,
    ) -> dict[str, Any]:
        current = attempt if current_attempt is None else current_attempt
        rejected = ExtendRejected if kind == "extend_rejected" else CompleteRejected
        return self.write(rejected(job_id, attempt, worker, current), ts)

    def reap(
        self,
        job_id: str,
        attempt: int,
        ts: int,
        worker: str | None = None,
        deadline: int | None = None,
    ) -> dict[str, Any]:
        """``worker`` and ``deadline`` default to the last claim/extend written for the job."""
        _, last_worker, last_deadline = self._leases.get(job_id, (attempt, "", ts))
        return self.write(Reap(job_id, attempt, last_worker if worker is None else worker,
                               last_deadline if deadline is None else deadline), ts)

    def dead(
        self, job_id: str, attempt: int, ts: int, stalls: int, worker: str | None = None,
    ) -> dict[str, Any]:
        """The reaper dead-lettered the job's lapsed lease at its ``stalls``-th stall."""
        _, last_worker, last_deadline = self._leases.get(job_id, (attempt, "", ts))
        return self.write(Dead(job_id, attempt, last_worker if worker is None else worker,
                               last_deadline, stalls), ts)

    def sweep(self, worker: str, ts: int, ran: bool = True) -> dict[str, Any]:
        """A reaper's sweep (``worker``: the reaper; BullMQ's: the worker whose check it was)."""
        return self.write(Sweep(worker, ran), ts)

    def blind(self, job_id: str | None, ts: int, lacks: str = "transition",
              why: str = "undecoded call") -> dict[str, Any]:
        """The history source could not see ``lacks`` of ``job_id`` (None: any job) from ts."""
        return self.write(Blind(lacks, why, job_id), ts)

    # --- faults ----------------------------------------------------------------------------
    def fault(
        self,
        kind: str,
        worker: str,
        ts: int,
        fault_id: str | None = None,
        duration_ms: int | None = None,
        cuts_off: bool | None = None,
    ) -> str:
        """Returns the fault id (``f1``, ``f2``, ... unless given) for ``heal``."""
        if fault_id is None:
            number = len(self._fault_workers) + 1
            while f"f{number}" in self._fault_workers:
                number += 1
            fault_id = f"f{number}"
        self._fault_workers[fault_id] = worker
        fields = Fault(fault_id, kind, worker, target=worker, duration_ms=duration_ms,
                       cuts_off=True if cuts_off is None else cuts_off).fields()
        if cuts_off is None:  # as histories written before faults said so: read as cut off
            del fields["cuts_off"]
        self.add(fields.pop("type"), ts=ts, **fields)
        return fault_id

    def heal(self, fault_id: str, ts: int, kind: str = "resume") -> dict[str, Any]:
        return self.write(Heal(fault_id, kind, self._fault_workers.get(fault_id, "")), ts)
