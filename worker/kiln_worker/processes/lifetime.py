"""A child process's lifetime tied to its parent's (Linux prctl)."""
from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> bool:
    """Asks the kernel for SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG):
    a ``kill -9`` of the engine kills the worker's group, and a child started by
    the worker (a compile child mid-compile, a sandbox child running generated
    code, a worker forked by the fork server) goes with it at once. Then checks
    the parent is still alive: if it died before the prctl (``parent_pid`` is no
    longer the parent), exits. Returns whether the signal was set (False off
    Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(0)  # the parent is already gone
    return True
