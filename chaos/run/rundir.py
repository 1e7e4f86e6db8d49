"""The run directory: where a run's evidence goes, made ready before anything starts."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from chaos.runtime.pids import PID_DIR, RUNNER, clean_processes, is_alive, read_record


class RunDirError(Exception):
    """The run directory cannot be used (exit code 2)."""


def default_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """``runs/<utc-time>-<name>``: sortable, and never the same for two runs a second apart."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return root / f"{stamp}-{name}"


def prepare_run_dir(run_dir: Path, force: bool) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: exists and is not a directory")
    if run_dir.exists() and any(run_dir.iterdir()) and not force:
        raise RunDirError(f"{run_dir}: run directory exists and is not empty (use --force)")
    if force and run_dir.exists():
        runner = read_record(run_dir / PID_DIR / f"{RUNNER}.json")
        if runner is not None and is_alive(runner):
            raise RunDirError(f"{run_dir}: a run is still going there (runner pid {runner.pid})")
        from chaos.check.ledger import SURVIVING_HISTORY  # only on --force: the checker's
        from chaos.history.monitor import HEALTH_FILE, MONITOR_HISTORY
        from chaos.protocol.acks import ACKS_DIR

        clean_processes(run_dir)  # whatever a crashed earlier run left behind
        for name in ("history.jsonl", "report.json", "report.html", "junit.xml",
                     SURVIVING_HISTORY, MONITOR_HISTORY, HEALTH_FILE):
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / ACKS_DIR, ignore_errors=True)  # a ledger is per run
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"{run_dir}: cannot create the run directory: {error}") from None
