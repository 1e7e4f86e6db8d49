"""Ctrl-C and SIGTERM during a run, a selftest, a sweep or a capacity search: the first tears
down in order, a second exits at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from chaos.errors import EXIT_ABORTED
from chaos.files import write_json_atomic


class InterruptsTearDown:
    """SIGINT and SIGTERM (Ctrl-C, a cancelled CI job, `kill`) raise KeyboardInterrupt, so the
    run tears down in order: stop the load, heal, stop the children, write the report. A second
    one does not wait for that: every child is SIGKILLed and the process exits 130 at once,
    leaving an ``aborted`` report.json if none was written yet (the history is on disk already).

    Set explicitly: a shell's background job inherits SIGINT ignored, and Python would then
    leave Ctrl-C ignored too.
    """

    def __init__(self, name: str, run_dir: Path) -> None:
        self.name = name
        self.run_dir = run_dir
        self.interrupted = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> InterruptsTearDown:
        self.previous = {signum: signal.signal(signum, self._handle)
                         for signum in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        force_exit(self.name, self.run_dir)


def force_exit(name: str, run_dir: Path) -> None:
    # The runtime is loaded by then; importing it here keeps the CLI light.
    from chaos.runtime.base import kill_all_now

    kill_all_now()  # first: nothing below may keep it from happening
    report = run_dir / "report.json"
    if not report.exists():
        # The reports may be half-imported right now (the second signal came while the
        # verdict was being written): then the exit goes without a stub report.
        with contextlib.suppress(OSError, ImportError):
            from chaos.report.summary import build_report

            write_json_atomic(report, build_report(
                name, "aborted", None,
                error="interrupted twice: children SIGKILLed, orderly teardown skipped"))
    print("!! interrupted again: children killed, exiting now", file=sys.stderr, flush=True)
    os._exit(EXIT_ABORTED)
