"""Small process helpers shared by the runner and its children."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
from collections.abc import Mapping
from importlib.machinery import PathFinder
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
SAFE_PATH = "-P"  # Python 3.11's safe-path mode: no working or script directory on sys.path


def die_with_parent(parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux only).

    Children of a run must not outlive it, even when the runner itself is SIGKILLed.
    ``parent``: the pid the parent had when it started us, when the caller knows it; without
    it a parent pid of 1 means the parent is gone (re-parented to init), which is wrong only
    for the child of a container's PID 1 (a worker's heartbeat process under Docker).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    # The parent already died before prctl took effect: we were re-parented.
    orphaned = os.getppid() != parent if parent is not None else os.getppid() == 1
    if orphaned:
        os._exit(1)


def name_process(name: str) -> None:
    """Name this process for ps -o comm, top and pgrep (Linux: its first 15 bytes): a member
    forked by the fork server otherwise shows the fork server's name."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_NAME, name.encode()[:15])
    except OSError:
        return


# --- the toolkit's own Python children ------------------------------------------------------


def toolkit_python(*args: str, python: str | None = None) -> list[str]:
    """The command line of a Python child that runs this toolkit's code (the fork server, Locust,
    the built-in Toxiproxy; a worker or reaper in a container, there with its ``python``): the
    runner's interpreter in safe-path mode, so nothing is put before the child's import path but
    what ``toolkit_env`` says. ``python -m`` alone puts the working directory first: run from a
    directory holding a ``chaos/`` folder (a user's own experiments, another checkout of this
    toolkit), the child would import *that* while the runner uses the toolkit that started it.
    Start such children with ``toolkit_env`` too."""
    return [python or sys.executable, SAFE_PATH, *args]


def toolkit_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a ``toolkit_python`` child on this machine: with the directory the runner's
    ``chaos`` package came from first on ``PYTHONPATH`` when the child would not find that
    package without it (a checkout run as ``python -m chaos`` from its own root and not
    installed); else unchanged (an installed toolkit, editable or not, is found as the runner
    found it: site-packages and its ``.pth`` files are not the working directory)."""
    root = _root_lost_in_safe_path()
    if root is None:
        return dict(env)
    return {**env, "PYTHONPATH": os.pathsep.join(
        [root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])}


@functools.cache
def _root_lost_in_safe_path() -> str | None:
    """The directory holding the runner's ``chaos`` package, if a safe-path child of the same
    interpreter and environment would import no ``chaos`` or another one: the runner's import
    path without its first entry (the one safe-path mode leaves out: the working directory under
    ``-m``, the script's directory for a console script), searched as the import system does."""
    import chaos

    origin = Path(chaos.__file__ or "").resolve()
    if sys.flags.safe_path:
        return None
    for finder in sys.meta_path:
        if finder is PathFinder:
            spec = PathFinder.find_spec("chaos", sys.path[1:])
        else:
            find = getattr(finder, "find_spec", None)
            spec = find("chaos", None) if find is not None else None
        if spec is not None:
            if spec.origin and Path(spec.origin).resolve() == origin:
                return None
            break
    return str(origin.parent.parent)
