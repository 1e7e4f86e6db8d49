"""Runs into the run store (``--store URL``, else ``$ECHOMQ_CHAOS_STORE``; none: nothing is
stored), once each run directory is fully written.

A store that cannot be opened or written never costs a run: the failure is printed with the
run directory (``echomq-chaos store import`` adds it later) and the command exits 3 at the end
(``RunRecorder.exit_code``), its runs done and their directories complete.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from chaos.check.checker import Verdict
from chaos.errors import EXIT_INFRA
from chaos.run.events import SearchFinished, run_finished, search_finished
from chaos.run.result import RunResult
from chaos.store.database import STORE_ENV, RunStore, StoreError, open_store
from chaos.store.record import RunRecord, capacity_record, record_of


def store_url(given: str | None) -> str | None:
    """``--store``, else the environment's; an empty value stores nothing."""
    url = given if given is not None else os.environ.get(STORE_ENV)
    return url or None


def resolved_settings(run_dir: Path) -> dict[str, Any] | None:
    """The run's resolved scenario (scenario.json, written before anything starts)."""
    try:
        settings = json.loads((run_dir / "scenario.json").read_text())
    except (OSError, ValueError):
        return None
    return settings if isinstance(settings, dict) else None


def written_ms(run_dir: Path, report: Mapping[str, Any], name: str = "report.json") -> int:
    """When the run started, for a run whose history has no run event: its report's write time
    less its wall time."""
    try:
        written = (run_dir / name).stat().st_mtime * 1000
    except OSError:
        written = time.time() * 1000
    wall = (report.get("run") or {}).get("wall_ms") or 0
    return int(written - wall)


def run_record(run_dir: Path, report: Mapping[str, Any], verdict: Verdict | None,
               exit_code: int, command: str, labels: Mapping[str, str]) -> RunRecord:
    return record_of(report, verdict, resolved_settings(run_dir), exit_code=exit_code,
                     command=command, run_dir=str(run_dir.resolve()), labels=labels,
                     fallback_started_ms=written_ms(run_dir, report))


class RunRecorder:
    """Stores each finished run of one command; remembers what could not be stored."""

    def __init__(self, url: str, labels: Mapping[str, str], command: str,
                 stream: TextIO = sys.stderr) -> None:
        self.url = url
        self.labels = dict(labels)
        self.command = command
        self.stream = stream
        self.failures: list[str] = []
        self._store: RunStore | None = None
        self._broken: StoreError | None = None  # opening failed: not retried for every run

    def _open(self) -> RunStore:
        if self._broken is not None:
            raise self._broken
        if self._store is None:
            try:
                self._store = open_store(self.url)
            except StoreError as error:
                self._broken = error
                raise
        return self._store

    def record(self, run_dir: Path, report: Mapping[str, Any], verdict: Verdict | None,
               exit_code: int) -> None:
        """Store one run whose directory is written; a failure is printed and kept, never
        raised."""
        self._add(run_dir, run_record(run_dir, report, verdict, exit_code, self.command,
                                      self.labels))

    def _add(self, run_dir: Path, record: RunRecord) -> None:
        try:
            self._open().add(record)
        except StoreError as error:
            self.failures.append(str(error))
            print(f"error: {error}; the run directory {run_dir} is complete: `echomq-chaos "
                  f"store import {run_dir}` adds it later", file=self.stream, flush=True)

    def record_result(self, result: RunResult) -> None:
        self.record(result.run_dir, result.report, result.checked, result.exit_code)

    def record_search(self, search: SearchFinished) -> None:
        """Store one capacity search (one pool size) as capacity.json holds it."""
        self._add(search.out, capacity_record(
            search.summary, search.settings, exit_code=search.exit_code,
            run_dir=str(search.out.resolve()), labels=self.labels,
            started_ms=written_ms(search.out, {}, "capacity.json")))

    @contextmanager
    def listening(self) -> Iterator[RunRecorder]:
        """Store every run and capacity search finished inside the block; the store is closed
        after it."""
        removals = [run_finished.add_listener(self.record_result),
                    search_finished.add_listener(self.record_search)]
        try:
            yield self
        finally:
            for remove in removals:
                remove()
            self.close()

    def exit_code(self, code: int) -> int:
        """The command's exit code: 3 when a run could not be stored (unless it is 130, or
        already 3)."""
        from chaos.run.suite import worst_exit_code

        return worst_exit_code([code, EXIT_INFRA]) if self.failures else code

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def recorder_for(url: str | None, labels: Mapping[str, str], command: str,
                 stream: TextIO = sys.stderr) -> RunRecorder | None:
    """A recorder when a store is named (``store_url``), else None: nothing is stored."""
    resolved = store_url(url)
    return RunRecorder(resolved, labels, command, stream) if resolved else None
