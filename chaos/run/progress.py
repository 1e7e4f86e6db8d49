"""Live progress of a run: a rich panel on a terminal; off a terminal (CI logs), one line per
phase and, in a long phase, one line a minute, so an hour's soak is never silent.

The runner only says what happens (``enter`` a phase, ``say`` a notable line, ``update`` the
figures); this module decides how much of it a reader sees.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO

from chaos.scenario.model import Scenario

REFRESH_S = 0.25
QUIET_LINE_EVERY_S = 60.0  # off a terminal: how often a long phase says its figures


@dataclass
class Status:
    """What the runner knows at one instant (counts from the history exported so far)."""

    enqueued: int = 0
    claimed: int = 0
    completed: int = 0
    reaped: int = 0
    pending: int = 0
    active: int = 0
    faults: int = 0
    planned_faults: int = 0

    def line(self) -> str:
        return (f"enqueued {self.enqueued}  claimed {self.claimed}  completed {self.completed}  "
                f"reaped {self.reaped}  pending {self.pending}  active {self.active}  "
                f"faults {self.faults}/{self.planned_faults}")


class Progress:
    """``live``: a rich panel redrawn a few times a second (stream is a terminal). Otherwise
    quiet: each phase is one line carrying the figures so far, one more every
    ``quiet_line_every_s`` while a phase lasts, plus the lines the runner says."""

    def __init__(self, stream: TextIO, scenario: Scenario, planned_faults: int = 0,
                 quiet_line_every_s: float = QUIET_LINE_EVERY_S) -> None:
        self.stream = stream
        self.scenario = scenario
        self.live = _isatty(stream)
        self.started = time.monotonic()
        self.phase = "setup"
        self.phase_started = self.started
        phases = scenario.phases
        self.planned_s = (phases.warmup_ms + phases.chaos_ms + phases.heal_ms) / 1000
        self.drain_max_s = scenario.drain_timeout_ms / 1000
        self.status = Status(planned_faults=planned_faults)
        self._display: Any = None  # rich.live.Live while running on a terminal
        self._last_draw = 0.0
        self.quiet_line_every_s = quiet_line_every_s
        self._last_quiet_line = self.started
        if self.live:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=stream, highlight=False)
            self._display = Live(self._panel(), console=console, auto_refresh=False,
                                 transient=True)
            self._display.start()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        line = f"[{self.elapsed_s:6.1f}s] {text}"
        if self._display is not None:
            self._display.console.print(line, markup=False, highlight=False)
            self._draw(force=True)
        else:
            print(line, file=self.stream, flush=True)

    def enter(self, phase: str, detail: str = "") -> None:
        self.phase = phase
        self.phase_started = self._last_quiet_line = time.monotonic()
        figures = "" if phase == "setup" else f"  ({self.status.line()})"
        self.say(f"phase {phase}{' ' + detail if detail else ''}{figures}")

    def update(self, status: Status) -> None:
        status.planned_faults = self.status.planned_faults
        self.status = status
        self._draw()
        now = time.monotonic()
        if not self.live and now - self._last_quiet_line >= self.quiet_line_every_s:
            self._last_quiet_line = now
            self.say(f"{self.phase} for {now - self.phase_started:.0f} s of "
                     f"{self.planned_s:.0f} s planned  ({status.line()})")

    def close(self) -> None:
        if self._display is not None:
            self._display.stop()
            self._display = None

    # --- the terminal panel ------------------------------------------------------------------
    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._display is None or (not force and now - self._last_draw < REFRESH_S):
            return
        self._last_draw = now
        self._display.update(self._panel(), refresh=True)

    def _panel(self) -> Any:
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        status, elapsed = self.status, self.elapsed_s
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        bar = ProgressBar(total=self.planned_s or 1, completed=min(elapsed, self.planned_s),
                          width=30)
        timing = Table.grid(padding=(0, 1))
        timing.add_row(bar, Text(f"{elapsed:5.1f} / {self.planned_s:.1f} s planned, "
                                 f"drain ≤ {self.drain_max_s:.1f} s"))
        in_phase = time.monotonic() - self.phase_started
        grid.add_row("phase", Text.assemble((self.phase, "bold cyan"), f" for {in_phase:.1f} s"))
        grid.add_row("time", timing)
        grid.add_row("jobs", Text(f"enqueued {status.enqueued}   claimed {status.claimed}   "
                                  f"completed {status.completed}   reaped {status.reaped}"))
        grid.add_row("backlog", Text(f"pending {status.pending}   active {status.active}"))
        grid.add_row("faults", Text(f"{status.faults} of {status.planned_faults} applied"))
        return Panel(grid, title=Text(f"echomq-chaos · {self.scenario.name}"), expand=False)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without a terminal
        return False
