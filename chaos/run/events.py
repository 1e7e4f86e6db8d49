"""Hooks a command can listen on, as Locust's event hooks are: ``run_finished`` is fired with
each run's ``RunResult`` once its directory is fully written (report.json and the rendered
reports), whichever command ran it (`run`, a suite, `certify`, `sweep`, the pytest plugin);
``search_finished`` with each capacity search once its capacity.json is written.

A listener must not raise: a failing one is reported on stderr and the others still run, so a
listener (the run store) can never cost a run its verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from chaos.run.result import RunResult

Payload = TypeVar("Payload")


class Hook(Generic[Payload]):
    """Listeners called in the order added; ``add_listener`` returns their removal."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[Callable[[Payload], None]] = []

    def add_listener(self, listener: Callable[[Payload], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def fire(self, payload: Payload) -> None:
        for listener in list(self._listeners):
            try:
                listener(payload)
            except Exception as failure:  # never the run's failure (docstring)
                print(f"   ({self.name} listener failed: {type(failure).__name__}: {failure})",
                      file=sys.stderr, flush=True)


@dataclass
class SearchFinished:
    """One capacity search (one pool size) as it ended: its directory, capacity.json's content,
    its exit code and the resolved scenario it searched."""

    out: Path
    summary: dict[str, Any]
    exit_code: int
    settings: dict[str, Any]


run_finished: Hook[RunResult] = Hook("run_finished")
search_finished: Hook[SearchFinished] = Hook("search_finished")
