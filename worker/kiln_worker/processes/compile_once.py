"""A compile that every worker of a node needs, done by one of them.

A GPU worker's warm-up compiles the comparison kernel of the checks
(device.warm_up). Twelve workers starting at once used to compile the same
kernels twelve times, each beside its own first candidate's compile and in
the same interpreter (one GIL). Under ``compile_once`` the first worker
compiles into Triton's on-disk cache, holding the lock exclusively; the
others wait for it (blocked in flock, not holding the GIL) and then run the
same body side by side, finding what it wrote in the cache. They do not take
turns: loading a kernel from the cache still costs each one its key's
computation, and in turn that queued 11 workers behind each other.

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
    """Runs the body as the node's compiler of `name` (the lock held
    exclusively) or after it (another process held it: this one waited until
    it was released, and runs the body unlocked, beside any other waiter).
    Yields "compiled" (the exclusive holder), "waited" (after another's
    compile) or "unlocked" (the wait timed out, or no lock file)."""
    path = os.path.join(directory or triton_cache_dir(), f"kiln-{name}.lock")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "a")
    except OSError:
        yield "unlocked"
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            try:
                yield "compiled"
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
            return
        # Another process is compiling: a shared hold is granted once it
        # has released its exclusive one, and is let go at once.
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                state = "waited"
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    state = "unlocked"
                    break
                time.sleep(POLL_S)
    yield state
