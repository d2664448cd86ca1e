"""Memory pressure notices: a worker about to need most of a shared GPU asks the
other workers on it to give back the memory they only cache.

A notice is a small JSON file next to the GPU lock (gpulock.lock_path()),
``<lock>.pressure.<pid>``: ``{"pid", "bytes", "time"}`` -- who asks, how many
bytes its work needs, when it asked (unix seconds). One per requesting
process, written whole (a temporary file renamed over it), removed by its
owner when its work is done (``posted`` removes it on the way out, errors
included).

Every worker looks for notices (``others``) at its safe points -- before it
takes the GPU lock for its own work, and at the end of each evaluation -- and,
seeing one, drops its cached inputs and empties its allocator's cache (the
caller's business: evaluate.Evaluation.yield_memory). A notice whose process
is gone, or older than STALE_S, is ignored (and, when its process is gone,
removed); a process never sees its own.

The requester, after it takes the GPU lock exclusively (no other worker
allocates meanwhile), waits for the memory (``wait_for_free``): bounded by
WAIT_S, after which it proceeds anyway -- an out-of-memory error is then
handled as before (evaluate.Evaluation.run retries once).

Failure: every file error is swallowed (a notice that cannot be written or
read is a notice that does not exist: the workers behave as without them).
Threading: the functions hold no state of their own; a process posts from one
thread at a time.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import time
from typing import Callable

from . import gpulock

STALE_S = 900.0   # a notice older than this is ignored (its owner forgot it)
WAIT_S = 30.0     # how long a requester waits for the memory it needs
POLL_S = 0.2      # between two looks at the free memory


def _prefix(lock: str | None = None) -> str:
    return (lock or gpulock.lock_path()) + ".pressure."


def post(nbytes: int, lock: str | None = None) -> str | None:
    """Posts this process's notice (replacing its previous one); its path, or
    None when it could not be written."""
    path = _prefix(lock) + str(os.getpid())
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "bytes": int(nbytes), "time": time.time()}, f)
        os.replace(tmp, path)
        return path
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None


def withdraw(lock: str | None = None) -> None:
    """Removes this process's notice, if any."""
    with contextlib.suppress(OSError):
        os.unlink(_prefix(lock) + str(os.getpid()))


@contextlib.contextmanager
def posted(nbytes: int, lock: str | None = None):
    """This process's notice posted inside, withdrawn on the way out."""
    post(nbytes, lock)
    try:
        yield
    finally:
        withdraw(lock)


def others(lock: str | None = None, now: float | None = None) -> list[dict]:
    """The live notices of other processes on this GPU (module docstring)."""
    now = time.time() if now is None else now
    me = os.getpid()
    live = []
    for path in glob.glob(glob.escape(_prefix(lock)) + "*"):
        if path.endswith(".tmp"):
            continue
        try:
            with open(path) as f:
                notice = json.load(f)
            pid, t = int(notice["pid"]), float(notice["time"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid == me or now - t > STALE_S:
            continue
        if not _alive(pid):
            with contextlib.suppress(OSError):
                os.unlink(path)
            continue
        live.append(notice)
    return live


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def wait_for_free(need: int, free: Callable[[], int], timeout: float = WAIT_S,
                  poll: float = POLL_S) -> tuple[float, int]:
    """Polls free() (bytes free on the device) until it reaches `need` or
    `timeout` seconds pass; (seconds waited, the last free()). Never raises
    for a failing free(): the wait then ends at once."""
    t0 = time.monotonic()
    while True:
        try:
            have = int(free())
        except Exception:  # noqa: BLE001
            return time.monotonic() - t0, -1
        waited = time.monotonic() - t0
        if have >= need or waited >= timeout:
            return waited, have
        time.sleep(min(poll, max(0.0, timeout - waited)))
