"""One worker at a time through a compile that every worker of a node needs.

A GPU worker's warm-up compiles the comparison kernel of the checks
(device.warm_up). Twelve workers starting at once used to compile the same
kernels twelve times, each beside its own first candidate's compile and in
the same interpreter (one GIL): 3.5-4.4 s of warm-up on a 16-core H200 node,
with every first check waiting for it. Under ``compile_once`` the first
worker compiles into Triton's on-disk cache while the others wait (blocked
in flock, not holding the GIL) and then load what it wrote.

The lock is an flock on a file in Triton's cache directory, so it is shared
by exactly the processes that share that cache, and a process that dies
holding it releases it. Waiting is bounded: after ``wait_s`` a worker goes
on without the lock (a compile that hangs costs the others one wait, never
their start). Where the file cannot be opened (a read-only cache) it
proceeds unlocked. Safe to use from any thread: each use opens its own file.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time

WAIT_S = 60.0      # the longest a worker waits for another's compile
POLL_S = 0.02


def triton_cache_dir() -> str:
    """Triton's on-disk cache: TRITON_CACHE_DIR, else its default ~/.triton/cache."""
    return os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")


@contextlib.contextmanager
def compile_once(name: str, wait_s: float = WAIT_S, directory: str | None = None):
    """Holds the node-wide lock `name` for the body; yields whether it was
    taken (False: the wait timed out or the lock file could not be opened,
    and the body runs unlocked)."""
    path = os.path.join(directory or triton_cache_dir(), f"kiln-{name}.lock")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "a")
    except OSError:
        yield False
        return
    with f:
        deadline = time.monotonic() + wait_s
        taken = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
        try:
            yield taken
        finally:
            if taken:
                fcntl.flock(f, fcntl.LOCK_UN)
