"""Leftovers of a run: the pid files of its children, and ``echomq-chaos clean`` that uses them.

Children die with the runner (``die_with_parent``), and a normal teardown stops them and deletes
their pid files. When something still goes wrong (the runner was SIGKILLed before a child set
PDEATHSIG, a child left grandchildren behind), ``<run dir>/pids/<name>.json`` names what to kill.
A pid alone is not an identity (the kernel recycles pids), so each file also holds the boot id
and the process start time (``/proc/PID/stat`` field 22); ``clean`` kills only a process whose
pid, boot and start time all match, plus the members of its process group (every child leads
its own session), and deletes the file either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from chaos.files import write_json_atomic

PID_DIR = "pids"
RUNNER = "runner"  # the runner's own record: while it lives, its run is left alone


@dataclass(frozen=True)
class PidRecord:
    name: str
    pid: int
    start_ticks: int  # clock ticks after boot when the process started
    boot_id: str
    cmdline: list[str]


def _stat_fields(pid: int) -> list[str] | None:
    """The fields after the command name of a live (not zombie) process, None if none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat.rsplit(")", 1)[1].split()
    # A zombie has already died; only its parent's wait() is missing.
    return None if fields[0] in ("Z", "X") else fields


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 overall; fields here start at 3


def process_group(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[2]) if fields else None  # field 5


def process_state(pid: int) -> str | None:
    """The one-letter state of a live process (``T``: stopped), None once it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def group_members(group: int) -> list[int]:
    """Every live process in process group ``group``."""
    return [int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and process_group(int(entry.name)) == group]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def record_process(run_dir: Path, name: str, pid: int, command: list[str] | None = None) -> None:
    """Write ``<run_dir>/pids/<name>.json`` (atomically) for a process just started.
    ``command``: what it runs, when its own command line does not say (a forked member)."""
    ticks = start_ticks(pid)
    if ticks is None:  # already gone: nothing will be left of it
        return
    record = PidRecord(name, pid, ticks, boot_id(), command or cmdline(pid))
    write_json_atomic(run_dir / PID_DIR / f"{name}.json", asdict(record))


def forget_process(run_dir: Path, name: str) -> None:
    (run_dir / PID_DIR / f"{name}.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # the last one out removes the directory
        (run_dir / PID_DIR).rmdir()


def read_record(path: Path) -> PidRecord | None:
    try:
        data = json.loads(path.read_text())
        return PidRecord(str(data["name"]), int(data["pid"]), int(data["start_ticks"]),
                         str(data["boot_id"]), [str(part) for part in data["cmdline"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_alive(record: PidRecord) -> bool:
    """The very process the record was written for is still running (not a recycled pid)."""
    return record.boot_id == boot_id() and start_ticks(record.pid) == record.start_ticks


def leftovers(record: PidRecord) -> list[int]:
    """The recorded process, if it is still that process, and the rest of its process group.

    While any member of a group lives, the kernel does not hand its id out as a new pid; so if
    no process has the recorded pid, any process in group ``pid`` is one of ours left behind.
    If the pid belongs to a different process now, the group is someone else's: nothing.
    """
    if record.boot_id != boot_id():
        return []
    leader_ticks = start_ticks(record.pid)
    if leader_ticks is not None and leader_ticks != record.start_ticks:
        return []
    found = group_members(record.pid)
    if leader_ticks is not None and record.pid not in found:
        found.append(record.pid)  # alive but moved to another group: still ours
    return sorted(found)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)  # SIGKILL also ends a stopped (paused) process


def dirs_at(root: Path) -> list[Path]:
    """``root`` and every directory directly under it: where run directories may be."""
    return [root, *sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []


def run_dirs_under(root: Path) -> list[Path]:
    """``root`` itself if it is a run directory, and every run directory directly under it."""
    return [path for path in dirs_at(root) if (path / PID_DIR).is_dir()]


def clean_processes(root: Path,
                    write_report: Callable[[Path], str] | None = None) -> list[str]:
    """Kill what runs under ``root`` left behind; delete their pid files. Idempotent.

    ``write_report(run_dir)`` is called for a run whose runner died before its report.json
    (the evaluation lives above this stage). Returns one line per thing done (empty: nothing was
    left).
    """
    done: list[str] = []
    for run_dir in run_dirs_under(root):
        pid_dir = run_dir / PID_DIR
        runner = read_record(pid_dir / f"{RUNNER}.json")
        if runner is not None and is_alive(runner):
            done.append(f"{run_dir}: still running (runner pid {runner.pid}); left alone")
            continue
        if write_report and runner is not None and not (run_dir / "report.json").exists():
            done.append(write_report(run_dir))
        for path in sorted(pid_dir.glob("*.json")):
            record = read_record(path)
            if record is None:
                done.append(f"{path}: unreadable pid file removed")
                path.unlink(missing_ok=True)
                continue
            if record.name != RUNNER:
                for pid in leftovers(record):
                    _kill(pid)
                    command = " ".join(cmdline(pid) or record.cmdline)[:120]
                    done.append(f"{run_dir}: killed {record.name} pid {pid} ({command})")
            path.unlink(missing_ok=True)
            done.append(f"{run_dir}: removed pid file {path.name}")
        with contextlib.suppress(OSError):
            pid_dir.rmdir()
    return done
