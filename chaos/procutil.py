"""Small process helpers shared by the runner and its children."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux only).

    Children of a run must not outlive it, even when the runner itself is SIGKILLed.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() == 1:  # the parent already died before prctl took effect
        os._exit(1)
