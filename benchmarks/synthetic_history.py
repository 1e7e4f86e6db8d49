"""A synthetic ``history.jsonl`` of any size, shaped like a real run's, that the checker passes.

Jobs go through in blocks, one job per worker slot: enqueue, claim, (for some) an extend, then
complete, on a server clock that advances ``block_ms`` per block. Every ``fault_every`` jobs one
worker is hit, alternately:

* killed: its leases are never renewed; the reaper returns them at deadline + a bit (inside the
  recovery bound), another worker re-claims and completes them; the dead name never returns;
* paused for longer than the lease: the same recovery, then the paused worker wakes up and its
  stale completes are rejected (``complete_rejected``), and the pause is healed.

So the history has faults, stranded leases, redeliveries and rejections, and the verdict is a
pass with every job completed exactly once: a benchmark can check the verdict as well as time it.
``acks``: a directory to also write the clients' acknowledgement ledger to (``acks/<client>.jsonl``,
as ``chaos.protocol.acks`` writes it: the producer's enqueues, each worker's claims and accepted
completes, stamped 1 ms after their event), every line matching an event of the history.
Events that fall later (reaps, re-claims) wait in a heap and are written in server-time order,
with stream ids ``<ms>-<n>`` as Valkey gives them.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LEASE_MS = 1000
REAP_INTERVAL_MS = 250
REAP_AFTER_DEADLINE_MS = 120  # when the reaper's sweep finds a lapsed lease (< REAP_INTERVAL_MS)


@dataclass(frozen=True)
class SyntheticHistory:
    jobs: int
    events: int
    faults: int
    stranded: int  # leases a fault stranded (each one reaped, re-claimed, completed)
    rejected: int


class _Writer:
    """Writes records in stream order, holding back the ones that happen later."""

    def __init__(self, handle: IO[str], acks: Path | None = None) -> None:
        self.handle = handle
        self.acks = acks
        self.ledgers: dict[str, IO[str]] = {}
        self.later: list[tuple[int, int, dict[str, str]]] = []  # (ts, order, record)
        self.order = 0
        self.last_ms = -1
        self.counter = 0
        self.events = 0

    def emit(self, ts: int, **fields: object) -> None:
        record = {name: str(value) for name, value in fields.items()}
        self.release_until(ts)
        self._write(ts, record)

    def emit_later(self, ts: int, **fields: object) -> None:
        self.order += 1
        record = {name: str(value) for name, value in fields.items()}
        heapq.heappush(self.later, (ts, self.order, record))

    def release_until(self, ts: int) -> None:
        while self.later and self.later[0][0] <= ts:
            when, _, record = heapq.heappop(self.later)
            self._write(when, record)

    def _write(self, ts: int, record: dict[str, str]) -> None:
        ms = max(ts, self.last_ms)
        self.counter = self.counter + 1 if ms == self.last_ms else 0
        self.last_ms = ms
        record["ts"] = str(ts)
        self.handle.write(json.dumps({"seq": f"{ms}-{self.counter}", **record},
                                     separators=(",", ":")) + "\n")
        self.events += 1
        if self.acks is not None and record["type"] in ("enqueue", "claim", "complete"):
            self._acknowledge(record)

    def _acknowledge(self, record: dict[str, str]) -> None:
        client = record.get("worker", "producer")
        ledger = self.ledgers.get(client)
        if ledger is None:
            assert self.acks is not None
            ledger = self.ledgers[client] = open(  # noqa: SIM115 - closed in close()
                self.acks / f"{client}.jsonl", "w", encoding="utf-8")
        ack: dict[str, object] = {"op": record["type"], "id": record["id"]}
        if record["type"] != "enqueue":
            ack.update(attempt=int(record["attempt"]), worker=client)
        if record["type"] == "claim":
            ack["deadline"] = int(record["deadline"])
        ack["t"] = int(record["ts"]) + 1
        ledger.write(json.dumps(ack, separators=(",", ":")) + "\n")

    def close(self) -> None:
        for ledger in self.ledgers.values():
            ledger.close()


def write_synthetic_history(path: Path, jobs: int, workers: int = 64, slots: int = 8,
                            fault_every: int = 20_000, extend_every: int = 5,
                            block_ms: int = 2, acks: Path | None = None) -> SyntheticHistory:
    """Write a passing history of ``jobs`` jobs to ``path`` (and its ledger to ``acks``);
    returns what it holds."""
    names = [f"worker-{number}" for number in range(1, workers + 1)]
    next_name = workers + 1
    block = workers * slots
    faults = stranded = rejected = 0
    with open(path, "w", encoding="utf-8") as handle:
        if acks is not None:
            acks.mkdir(parents=True, exist_ok=True)
        out = _Writer(handle, acks)
        now = 1_700_000_000_000
        out.emit(now, type="run", scenario="synthetic", seed=1, lease_ms=LEASE_MS,
                 reap_interval_ms=REAP_INTERVAL_MS, tolerance_ms=250,
                 workers=",".join(names), concurrency=slots, protocol="sound")
        out.emit(now, type="phase", phase="chaos")
        done = 0
        next_fault = fault_every
        while done < jobs:
            now += block_ms
            ids = [f"job-{number:07d}" for number in range(done + 1,
                                                          min(jobs, done + block) + 1)]
            holders = [names[index % len(names)] for index in range(len(ids))]
            for job_id in ids:
                out.emit(now, type="enqueue", id=job_id)
            for job_id, worker in zip(ids, holders, strict=True):
                out.emit(now, type="claim", id=job_id, attempt=1, worker=worker,
                         lease_ms=LEASE_MS, deadline=now + LEASE_MS)
            for index, (job_id, worker) in enumerate(zip(ids, holders, strict=True)):
                if (done + index) % extend_every == 0:
                    out.emit(now, type="extend", id=job_id, attempt=1, worker=worker,
                             lease_ms=LEASE_MS, deadline=now + LEASE_MS)
            victim = None
            if done + len(ids) >= next_fault:
                next_fault += fault_every
                victim = holders[0]
                kind = "kill" if faults % 2 == 0 else "pause"
                faults += 1
                fault_id = f"f{faults}"
                out.emit(now, type="fault", kind=kind, worker=victim, fault_id=fault_id,
                         target=victim, cuts_off=1,
                         duration_ms=LEASE_MS * 2 if kind == "pause" else "")
                reap_ts = now + LEASE_MS + REAP_AFTER_DEADLINE_MS
                rescuer_index = (names.index(victim) + 1) % len(names)
                for job_id, worker in zip(ids, holders, strict=True):
                    if worker != victim:
                        continue
                    stranded += 1
                    rescuer = names[rescuer_index]
                    out.emit_later(reap_ts, type="reap", id=job_id, attempt=1, worker=victim,
                                   deadline=now + LEASE_MS)
                    out.emit_later(reap_ts + 1, type="claim", id=job_id, attempt=2,
                                   worker=rescuer, lease_ms=LEASE_MS,
                                   deadline=reap_ts + 1 + LEASE_MS)
                    out.emit_later(reap_ts + 2, type="complete", id=job_id, attempt=2,
                                   worker=rescuer)
                    if kind == "pause":  # wakes up after the pause: its complete is stale
                        rejected += 1
                        out.emit_later(now + LEASE_MS * 2 + 1, type="complete_rejected",
                                       id=job_id, attempt=1, current_attempt=2, worker=victim)
                if kind == "pause":
                    out.emit_later(now + LEASE_MS * 2, type="heal", kind="resume",
                                   worker=victim, fault_id=fault_id)
                # A fresh worker takes the victim's place (a dead or frozen one claims nothing).
                names[names.index(victim)] = f"worker-{next_name}"
                next_name += 1
            now += block_ms
            for job_id, worker in zip(ids, holders, strict=True):
                if worker != victim:
                    out.emit(now, type="complete", id=job_id, attempt=1, worker=worker)
            done += len(ids)
        out.release_until(now + 10 * LEASE_MS)
        end = max(now, out.last_ms) + 1
        out.emit(end, type="phase", phase="end", drained=1, aborted=0)
        out.close()
    return SyntheticHistory(jobs=jobs, events=out.events, faults=faults, stranded=stranded,
                            rejected=rejected)
