"""The GPU lock: benchmarks alone on a GPU, checks side by side but never during one.

Several evaluator workers (and the sandbox children of generated code) share a
GPU. A file lock per physical GPU (``lock_path``) orders them: benchmarks hold it
exclusively, checks and input draws shared (``gpu_lock``). Each hold is recorded
as a span (``take_spans``) and the wait for it per kind (``take_lock_waits``):
the engine merges every worker's spans into the run's GPU busy fraction.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time


# Spans during which this process held the GPU lock: (start, end, kind) in unix
# seconds, kind "bench" (exclusive) or "check" (shared). The evaluator takes them
# per evaluation (take_spans) and reports them in timings.gpu_spans; the engine
# merges every worker's spans into the run's GPU busy fraction.
_SPANS: list[tuple[float, float, str]] = []
# Per thread, the mode in which it holds the GPU lock now ("shared",
# "exclusive"; held() tells, None when it holds none): a nested gpu_lock()
# inside an exclusive one is a no-op. Per thread, because a worker's warm-up
# and job set-up run in threads of their own (device.WarmUp, evaluate._SetUp):
# each thread's hold is its own flock on its own open file, so two threads of
# one process exclude each other as two processes do.
_STATE = threading.local()
# Seconds spent waiting for the GPU lock since the last take_lock_waits(), per kind.
_WAITS: dict[str, float] = {}


def take_spans() -> list[tuple[float, float, str]]:
    """The spans recorded since the last call, and forget them."""
    out = list(_SPANS)
    _SPANS.clear()
    return out


def held() -> str | None:
    """How the calling thread holds the GPU lock now: "shared", "exclusive" or None."""
    return getattr(_STATE, "held", None)


def forget(kind: str) -> None:
    """Drops the spans and the lock waits of one kind (the warm-up's, which
    belong to no evaluation)."""
    _SPANS[:] = [s for s in _SPANS if s[2] != kind]
    _WAITS.pop(kind, None)


def take_lock_waits() -> dict[str, float]:
    """Seconds this process waited for the GPU lock since the last call, per
    kind ("check", "bench"), and forget them: with many workers per GPU, the
    part of a check or benchmark that was queueing rather than working."""
    out = dict(_WAITS)
    _WAITS.clear()
    return out


def lock_path() -> str:
    """$KILN_GPU_LOCK, else /tmp/kiln-gpu-<physical id>.lock: one lock per
    physical GPU whatever CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES say ("unset", "0", "GPU-<uuid>" name the same GPU).
    The id is the GPU's UUID (torch's device properties; NVML's / the driver's
    for NVIDIA, the KFD's for AMD), else its PCI bus id; without torch's CUDA
    or a GPU, the visible-devices string as before (lock_key)."""
    path = os.environ.get("KILN_GPU_LOCK")
    if not path:
        path = f"/tmp/kiln-gpu-{lock_key()}.lock"
    return path


_IDENTITY: dict = {}


def device_identity(index: int = 0) -> dict:
    """The physical identity of visible GPU `index` (of this process): uuid,
    pci_bus_id, name, driver; {} without a GPU. Read once per process (torch's
    device properties; the driver version from torch / NVML / sysfs)."""
    if index in _IDENTITY:
        return _IDENTITY[index]
    ident: dict = {}
    try:
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized() or _cuda_usable(torch):
            p = torch.cuda.get_device_properties(index)
            uuid = str(getattr(p, "uuid", "") or "")
            ident = {"uuid": uuid or None,
                     "pci_bus_id": _pci_bus_id(torch, p, index),
                     "name": getattr(p, "name", None),
                     "driver": _driver_version(torch)}
    except Exception:  # noqa: BLE001 - no identity: the caller falls back
        ident = {}
    _IDENTITY[index] = ident
    return ident


def _cuda_usable(torch) -> bool:
    try:
        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:  # noqa: BLE001
        return False


def _pci_bus_id(torch, props, index: int) -> str | None:
    """"0000:1b:00.0" from the device properties (pci_domain_id / bus / device),
    or torch.cuda's own string where it has one."""
    try:
        dom = int(getattr(props, "pci_domain_id"))
        bus = int(getattr(props, "pci_bus_id"))
        dev = int(getattr(props, "pci_device_id"))
        return f"{dom:04x}:{bus:02x}:{dev:02x}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def _driver_version(torch) -> str | None:
    try:
        if getattr(torch.version, "hip", None):
            with open("/sys/module/amdgpu/version") as f:
                return "amdgpu " + f.read().strip()
        with open("/proc/driver/nvidia/version") as f:
            line = f.readline()
        import re
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9.]+)", line)
        return m.group(1) if m else line.strip()[:80]
    except OSError:
        return None


def lock_key(identity: dict | None = None) -> str:
    """The lock file's name part: the physical GPU's UUID or PCI bus id
    (device_identity), else the visible-devices string ("all" when unset)."""
    ident = device_identity() if identity is None else identity
    for k in ("uuid", "pci_bus_id"):
        v = ident.get(k) if ident else None
        if v:
            return "".join(c if c.isalnum() or c in "-." else "_" for c in str(v))
    vis = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES") \
        or os.environ.get("ROCR_VISIBLE_DEVICES") or "all"
    return vis.replace(",", "_")


@contextlib.contextmanager
def gpu_lock(shared: bool = False, kind: str | None = None):
    """Serialise benchmarks on one GPU across the worker processes sharing it.

    Several evaluation slots may share a GPU: they compile concurrently, but
    timings taken while another process runs kernels on the same GPU are wrong.
    Benchmarks take the lock exclusively. Correctness checks take it shared
    (``shared=True``): checks need no exclusive use of the GPU and run side by
    side, but none runs while a benchmark is timing, so they cannot perturb it.

    The lock is a file lock on $KILN_GPU_LOCK, else /tmp/kiln-gpu-<physical
    GPU id>.lock (lock_path: one per GPU however it is named), released by the
    kernel if the process dies. A second file,
    <lock>.turn, is a turnstile that makes the lock prefer benchmarks: everyone
    passes it on the way in, and a benchmark holds it while it waits for the
    checks in progress to finish, so a stream of checks from several workers
    cannot starve it (flock alone does not order waiters).

    ``kind`` names the span and the wait it records (default "check" for a
    shared hold, "bench" for an exclusive one; the evaluation's input draws
    hold it shared as "setup").

    With $KILN_GPU_LOCK_NICE (an integer), the holder runs at that niceness
    while it holds the lock (``_lock_priority``): the other workers' compiles
    then take the CPU from it less, so the GPU waits less for its host work.
    """
    if held() is not None and (held() == "exclusive" or shared):
        yield  # nested in a lock this thread holds already (an OOM retry holds it whole)
        return
    path = lock_path()
    asked = time.time()
    with open(path + ".turn", "a") as turn, open(path, "a") as f:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        t0 = time.time()
        kind = kind or ("check" if shared else "bench")
        _WAITS[kind] = _WAITS.get(kind, 0.0) + (t0 - asked)
        _STATE.held = "shared" if shared else "exclusive"
        try:
            with _lock_priority():
                yield
        finally:
            _STATE.held = None
            _SPANS.append((t0, time.time(), kind))
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _lock_priority():
    """The calling thread at $KILN_GPU_LOCK_NICE's niceness inside, its own
    outside. Unset, or not permitted (raising priority needs CAP_SYS_NICE):
    no change."""
    want = os.environ.get("KILN_GPU_LOCK_NICE", "").strip()
    if not want:
        yield
        return
    try:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, int(want))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before)
        except OSError:
            pass
