"""Small process helpers shared by the runner and its children."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


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
