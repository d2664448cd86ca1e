"""Choosing the executing device (KILN_DEVICE) and importing torch/triton.

``KILN_DEVICE=cpu``  -> the Triton interpreter (TRITON_INTERPRET=1 is set before
                        Triton is imported), torch CPU tensors.
``KILN_DEVICE=gpu``  -> the GPU; if there is none, every request answers
                        ok:false with a clear error (starting from hello).
``KILN_DEVICE=auto`` -> the GPU when torch.cuda.is_available(), else the CPU
(default).          torch.version.hip tells AMD (device kind "hip") from NVIDIA
                        ("cuda").
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

REQUIREMENTS_HINT = "pip install -r worker/requirements.txt"
MISSING_PACKAGE_EXIT = 3


@dataclass
class Device:
    kind: str               # "cpu" | "cuda" | "hip"
    name: str               # "cpu (Triton interpreter)" | torch's device name
    torch_device: str       # "cpu" | "cuda"
    arch: str | None = None  # "sm_90" | "gfx942" on a GPU
    error: str | None = None  # set when KILN_DEVICE=gpu but no GPU is usable

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "hip") and self.error is None

    def as_json(self) -> dict:
        d = {"kind": self.kind, "name": self.name}
        if self.arch:
            d["arch"] = self.arch
        # What the engine bound this worker to (kiln run --gpus, kiln-mpi ranks).
        for var in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
            if os.environ.get(var) is not None:
                d[var.lower()] = os.environ[var]
        return d


def _missing(pkg: str, pip_name: str, exc: BaseException) -> None:
    sys.stderr.write(f"kiln_worker: Python package '{pkg}' is missing or broken ({exc}); "
                     f"install it with: {REQUIREMENTS_HINT}  (or: pip install {pip_name})\n")
    sys.stderr.flush()
    sys.exit(MISSING_PACKAGE_EXIT)


def select_device() -> Device:
    """Imports torch, decides the device, sets TRITON_INTERPRET, imports triton.

    Exits with code 3 and a one-line message on stderr when a package is missing.
    """
    mode = os.environ.get("KILN_DEVICE", "auto").strip().lower() or "auto"
    if mode not in ("cpu", "gpu", "auto"):
        sys.stderr.write(f"kiln_worker: KILN_DEVICE must be cpu, gpu or auto (got {mode!r}); using auto\n")
        mode = "auto"
    try:
        import yaml  # noqa: F401
    except Exception as exc:
        _missing("yaml", "pyyaml", exc)
    try:
        import torch
    except Exception as exc:
        _missing("torch", "torch", exc)

    dev: Device
    if mode == "cpu":
        dev = Device("cpu", "cpu (Triton interpreter)", "cpu")
    else:
        has_gpu = False
        err = None
        try:
            has_gpu = bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
        except Exception as exc:  # broken driver
            err = str(exc)
        if has_gpu:
            kind = "hip" if getattr(torch.version, "hip", None) else "cuda"
            props = torch.cuda.get_device_properties(0)
            if kind == "hip":
                arch = str(getattr(props, "gcnArchName", "") or "").split(":")[0] or None
            else:
                arch = f"sm_{props.major}{props.minor}"
            dev = Device(kind, torch.cuda.get_device_name(0), "cuda", arch)
        elif mode == "gpu":
            why = f": {err}" if err else ""
            dev = Device("cpu", "none", "cpu", None,
                         error=("KILN_DEVICE=gpu but no GPU is usable (torch "
                                f"{torch.__version__}, torch.cuda.is_available() is False{why}); "
                                "install a CUDA/ROCm build of torch or use KILN_DEVICE=cpu|auto"))
        else:
            dev = Device("cpu", "cpu (Triton interpreter)", "cpu")

    if dev.is_gpu:
        create_context_early(torch, dev.torch_device)  # beside the Triton import below
    if dev.kind == "cpu" and dev.error is None:
        try:
            import numpy  # noqa: F401  (the Triton interpreter computes with NumPy)
        except Exception as exc:
            _missing("numpy", "numpy", exc)
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.stderr.write("kiln_worker: ignoring TRITON_INTERPRET on a GPU worker\n")
        os.environ["TRITON_INTERPRET"] = "0"
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
        from triton.backends.compiler import GPUTarget  # noqa: F401
    except Exception as exc:
        _missing("triton", "triton", exc)

    if dev.is_gpu:
        # the reference must not run in reduced precision (the baselines put
        # PyTorch's defaults back while they run: as_pytorch_defaults)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:
        pass
    return dev


def create_context_early(torch, device: str):
    """Creates the GPU context in a thread of its own, started while the main
    thread goes on importing Triton: the warm-up's first step (warm_up,
    context_s) then finds it made, or waits only for the rest of it. The
    context is the process's; the thread keeps nothing and ends. A failure is
    dropped here: the warm-up's own first allocation meets it again and
    reports it. Returns the thread (tests join it)."""
    import threading

    def make() -> None:
        try:
            torch.empty(1, device=device)  # the context and the caching allocator
        except Exception:  # noqa: BLE001
            pass
    t = threading.Thread(target=make, name="kiln-context", daemon=True)
    t.start()
    return t


# PyTorch's own defaults for the precision flags the worker changes above
# (torch.backends docs: cuda.matmul.allow_tf32 False since 1.12,
# cudnn.allow_tf32 True, float32 matmul precision "highest").
PYTORCH_DEFAULTS = {"matmul_tf32": False, "cudnn_tf32": True, "matmul_precision": "highest"}


def as_pytorch_defaults(fn):
    """fn, called with PyTorch's default precision flags and the worker's own
    put back after each call: what a PyTorch user's eager call runs with (a
    baseline under the worker's reference flags would time fp32 convolutions
    without TF32, several times slower than a user's process runs them).
    Not thread-safe: the flags are the process's."""
    import torch

    def call(*args, **kwargs):
        mm, cd = torch.backends.cuda.matmul, torch.backends.cudnn
        saved = (mm.allow_tf32, cd.allow_tf32, torch.get_float32_matmul_precision())
        mm.allow_tf32, cd.allow_tf32 = PYTORCH_DEFAULTS["matmul_tf32"], PYTORCH_DEFAULTS["cudnn_tf32"]
        torch.set_float32_matmul_precision(PYTORCH_DEFAULTS["matmul_precision"])
        try:
            return fn(*args, **kwargs)
        finally:
            mm.allow_tf32, cd.allow_tf32 = saved[0], saved[1]
            torch.set_float32_matmul_precision(saved[2])
    return call


def warm_up(dev: Device) -> dict:
    """A GPU worker's first CUDA work, done once when it starts instead of in
    its first evaluation; returns the seconds of each phase ({} off a GPU):
    context_s (the CUDA context: what is left of it, select_device having
    started it beside the Triton import), compile_s (check.compare's kernel, compiled
    and not run: compare_kernel; compile_wait_s of it waiting for another
    worker's compile of it) and kernels_s (the tiny kernels, the wait for
    the lock included).

    A worker's first candidate used to create the CUDA context and load the
    libraries its set-up and check call (cuRAND's generator, cuBLAS, the
    reductions of the comparison) -- 1.5-2 s of its first input draw and check
    on an H200 with 12 workers starting at once, all of it holding the GPU lock,
    where it delays the benchmarks queued behind (docs/performance-journal.md, "Two GPUs
    against one, 2026-12-01"). Here the context is created outside the lock (no
    kernel runs), then a few tiny kernels of each kind run holding it shared
    (kind "warmup"), as the evaluations' own GPU work does, so that a worker
    restarted during a run never runs them during another worker's timed runs.
    The lock spans of the warm-up belong to no evaluation (the evaluator takes
    its spans from its start) and so are not in the run's GPU busy time.
    """
    if not dev.is_gpu:
        return {}
    import time

    import torch

    from ..evaluation import compare_kernel
    from .compile_once import compile_once
    from .gpulock import gpu_lock
    phases = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        phases[name] = now - t
        t = now

    # the context and the caching allocator; select_device started creating
    # them beside the Triton import (create_context_early): what is left of it
    torch.empty(1, device=dev.torch_device)
    lap("context_s")
    # check.compare's kernel: compiled, not run; by one worker of the node,
    # the others wait for it and load it from Triton's cache (compile_once)
    with compile_once("compare-kernel"):
        phases["compile_wait_s"] = time.perf_counter() - t
        compare_kernel.precompile(dev.torch_device)
    lap("compile_s")
    with gpu_lock(shared=True, kind="warmup"):
        compare_kernel.warm(dev.torch_device)
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            a = torch.randn(64, 64, device=dev.torch_device, dtype=dt)
            b = (a @ a).float()
            torch.isfinite(b).all()
            (b - a.float()).abs().max()
        torch.zeros(1024, device=dev.torch_device).zero_()  # the benchmark's L2 flush
        torch.cuda.Event(enable_timing=True).record()
        sleep = getattr(torch.cuda, "_sleep", None)  # the benchmark's spin (timing._Cuda.sleep)
        if sleep is not None:
            sleep(1000)
        torch.cuda.synchronize()
    lap("kernels_s")
    return phases


class WarmUp:
    """warm_up in a thread of its own, started with the worker: meanwhile the
    worker answers hello and compiles its first candidates (Triton compiles in
    several threads of a process, its AsyncCompileMode does). Whatever runs on
    the GPU first calls wait() -- the first check, a generated kernel's
    evaluation -- so the warm-up's kernels still run before the worker's own,
    and nothing of this process holds the GPU lock while the warm-up does.

    On a CPU (or a GPU that reported an error) there is nothing to do and
    wait() returns at once. A warm-up that fails is logged and forgotten: the
    first evaluation meets the same error and reports it.
    """

    def __init__(self, dev: Device, log=None):
        import threading
        self.phases: dict = {}           # warm_up's seconds per phase, once done
        self.error: str | None = None
        self._log = log
        self._done = threading.Event()
        self._waited = False
        if not dev.is_gpu:
            self._done.set()
            self._waited = True  # nothing to report
            return
        threading.Thread(target=self._run, args=(dev,), name="kiln-warm-up", daemon=True).start()

    def _run(self, dev: Device) -> None:
        try:
            self.phases = warm_up(dev)
            if self._log:
                self._log("warmed up: " + describe_steps(self.phases))
        except Exception as exc:  # noqa: BLE001
            self.error = f"{type(exc).__name__}: {exc}"
            if self._log:
                self._log(f"warm-up failed: {self.error}")
        finally:
            # Its lock span and wait belong to no evaluation. Dropped here,
            # before anyone waiting goes on: no other thread of the worker
            # holds the lock yet, so no other span can be in the list.
            from . import gpulock
            gpulock.forget("warmup")
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def join(self) -> None:
        """Blocks until the warm-up has finished (reports nothing: wait() does)."""
        self._done.wait()

    def wait(self) -> dict | None:
        """Blocks until the warm-up has finished. The first call returns its
        phases and the seconds this call waited (wait_s), for the first
        evaluation's timings; later calls return None."""
        import time
        t0 = time.perf_counter()
        self._done.wait()
        if self._waited:
            return None
        self._waited = True
        return {**self.phases, "wait_s": time.perf_counter() - t0}


def describe_steps(steps: dict) -> str:
    """"context 0.42 s, compile 1.24 s" from {"context_s": 0.42, ...} (None left out)."""
    return ", ".join(f"{k.removesuffix('_s')} {v:.2f} s" for k, v in steps.items() if v is not None)


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc), None where unknown:
    what the interpreter's start and the imports before main() took."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def install_scratch_allocator(torch_device: str = "cuda") -> None:
    """Gives Triton a global-scratch allocator (triton.set_allocator): a kernel
    whose metadata asks for global scratch -- device-side tensor descriptors
    (tl.make_tensor_descriptor, attention's `tma` knob) -- gets its buffer from
    torch's caching allocator on the launch's device. Without one such a launch
    fails ("Kernel requires a runtime memory allocation, but no allocator was
    set"). Triton calls it with (size, alignment, stream); the buffer is a
    view aligned as asked (the view keeps its allocation alive)."""
    import torch
    import triton

    def alloc(size: int, alignment: int, stream):
        size, alignment = max(1, int(size)), max(1, int(alignment))
        raw = torch.empty(size + alignment, dtype=torch.int8, device=torch_device)
        skip = (-raw.data_ptr()) % alignment
        return raw[skip:skip + size]

    triton.set_allocator(alloc)
