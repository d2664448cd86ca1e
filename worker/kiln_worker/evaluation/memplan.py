"""A job's memory plan: how much GPU memory one seed of its check needs, and
what that leaves this worker for caching the job's other seeds.

Several workers share one GPU (``SHARERS_ENV``); each may use its *share*,
the GPU's memory divided among them (``share_bytes``). One seed of a check
(evaluate.py) holds, at its peak:

    the pristine inputs (cached, the reference reads them)
  + the reference output, upcast (cached with them)
  + the candidate's own copy of the inputs (check.snapshot)
  + the upcast copy of the inputs the reference reads (check.upcast: float64
    for fp32 inputs, 2x their bytes; float32 for fp16/bf16, also 2x)
  + the kernel's output

(``MemoryPlan.working_set``). The check computes the reference before it takes
the candidate's copies, so the upcast copy and the candidate's copies never
coexist: the sum leaves room for the reference's own temporaries (a norm's
``x.pow(2)`` is one more upcast-sized tensor). What the share leaves beside
the working set, ``cache_bytes``, bounds the job's *other* cached seeds; a job
whose working set passes the share (``alone``) runs its check alone on the
GPU (the GPU lock held exclusively, the other workers asked to give back their
memory: processes/pressure.py).

The sizes come from the template module itself -- ``make_inputs`` and
``output_like`` run on meta tensors (``meta_tensors``: shapes and dtypes,
no storage; a 16 GiB KernelBench input costs nothing) -- so they are exact
for every template. A template that needs values to make its inputs (an
``.item()``, numpy) runs under torch's FakeTensorMode instead, which carries
them; ``job_plan`` returns None when it cannot run there either (the caller
then keeps its older bound: half the share for the cache).

FakeTensorMode's first construction in a process imports torch._dynamo (about
800 modules: 1-1.4 s on an idle core; 7-8 s on an H200 node where twelve
workers start at once beside their first compiles, and the first check
waited for it), so it is imported only where a plan needs it:
``start_import`` runs the import in a thread, ``wait_for_import`` waits for
it, and ``import_report`` says how long it took and how long the plan
waited.

Pure functions of their arguments and the environment, and the one import
thread; thread-safe.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

BUDGET_ENV = "KILN_WORKER_INPUT_BYTES"  # this worker's share in bytes, on any device (tests)
SHARERS_ENV = "KILN_GPU_SHARERS"  # how many workers share this worker's GPU (the engine sets it)
BIG_BYTES = 1 << 30  # a working set above this is a big job (allocator cache emptied between seeds)
# Per worker, off its share: its CUDA context, the comparison's temporaries
# (check.COMPARE_CHUNK elements at a time) and the allocator's rounding.
HEADROOM_BYTES = 2 << 30


@dataclass(frozen=True)
class MemoryPlan:
    input_bytes: int    # one seed's inputs
    upcast_bytes: int   # their upcast copy (the reference's inputs)
    ref_bytes: int      # the reference output (upcast)
    output_bytes: int   # the kernel's output
    share_bytes: int | None  # this worker's share of the GPU; None: no bound (the CPU)

    @property
    def entry_bytes(self) -> int:
        """One cached seed: its inputs and its reference."""
        return self.input_bytes + self.ref_bytes

    @property
    def working_set(self) -> int:
        """One seed's check at its peak (module docstring)."""
        return self.entry_bytes + self.input_bytes + self.upcast_bytes + self.output_bytes

    @property
    def cache_bytes(self) -> int | None:
        """Bytes the job's other seeds may hold cached beside one seed's check
        (0 when the working set alone fills the share; None: no bound)."""
        if self.share_bytes is None:
            return None
        return max(0, self.share_bytes - self.working_set)

    @property
    def alone(self) -> bool:
        """The working set passes this worker's share: the check runs alone."""
        return self.share_bytes is not None and self.working_set > self.share_bytes

    @property
    def big(self) -> bool:
        return self.working_set > BIG_BYTES

    def seeds_fit(self, n: int) -> bool:
        """n seeds cached at once fit beside one seed's check (a set-up ahead
        of the check draws them all)."""
        return self.cache_bytes is None or (n - 1) * self.entry_bytes <= self.cache_bytes

    def describe(self) -> dict:
        gib = float(1 << 30)
        return {"working_set_gib": round(self.working_set / gib, 3),
                "share_gib": None if self.share_bytes is None else round(self.share_bytes / gib, 3),
                "alone": self.alone}


def share_bytes(dev) -> int | None:
    """This worker's share of its GPU's memory: the total over SHARERS_ENV
    workers, less HEADROOM_BYTES (at most half the share). BUDGET_ENV, where set to a positive integer, is the share on any
    device (the CPU included: tests). None on the CPU otherwise, and where the
    GPU's memory cannot be read (no bound rather than no worker)."""
    raw = os.environ.get(BUDGET_ENV, "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    if not getattr(dev, "is_gpu", False):
        return None
    try:
        import torch
        total = torch.cuda.get_device_properties(dev.torch_device).total_memory
    except Exception:  # noqa: BLE001
        return None
    raw = os.environ.get(SHARERS_ENV, "1")
    sharers = int(raw) if raw.isdigit() and int(raw) > 0 else 1
    share = int(total // sharers)
    return share - min(HEADROOM_BYTES, share // 2)


class _Import:
    """The fake-tensor import in its thread (start_import); its seconds and
    the waits for it."""

    def __init__(self):
        self.done = threading.Event()
        self.import_s: float | None = None
        self.error: str | None = None
        self.waited_s = 0.0      # by job_plan callers, summed
        self.reported = False    # import_report's first call done
        threading.Thread(target=self._run, name="kiln-fake-import", daemon=True).start()

    def _run(self):
        t0 = time.perf_counter()
        try:
            import_fake_tensors()
        except Exception as exc:  # noqa: BLE001 - job_plan imports again and meets it
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.import_s = time.perf_counter() - t0
            self.done.set()


_IMPORT: _Import | None = None
_IMPORT_LOCK = threading.Lock()


def import_fake_tensors() -> None:
    """Imports what job_plan's FakeTensorMode needs: constructing one imports
    torch._dynamo and its configs (torch 2.x); the instance is dropped (no
    mode is entered, so no thread's dispatch changes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    FakeTensorMode(allow_non_fake_inputs=True)


def start_import() -> None:
    """Starts import_fake_tensors in a daemon thread (once per process; later
    calls do nothing). Touches no device: safe before the GPU is used."""
    global _IMPORT
    with _IMPORT_LOCK:
        if _IMPORT is None:
            _IMPORT = _Import()


def wait_for_import() -> float:
    """Blocks until start_import's thread has finished (at once when none was
    started); returns the seconds waited."""
    imp = _IMPORT
    if imp is None or imp.done.is_set():
        return 0.0
    t0 = time.perf_counter()
    imp.done.wait()
    waited = time.perf_counter() - t0
    with _IMPORT_LOCK:
        imp.waited_s += waited
    return waited


def import_report() -> dict | None:
    """Once, after start_import's thread has finished: {"import_s": its
    seconds, "wait_s": what job_plan's callers waited for it} (and "error" if
    it failed); None before that, after the first call, or with no thread."""
    imp = _IMPORT
    if imp is None or not imp.done.is_set():
        return None
    with _IMPORT_LOCK:
        if imp.reported:
            return None
        imp.reported = True
        out = {"import_s": imp.import_s, "wait_s": imp.waited_s}
    if imp.error:
        out["error"] = imp.error
    return out


def job_plan(mod, op: str, shape, dtype: str, params: dict, share: int | None) -> MemoryPlan | None:
    """The plan of one job of template module `mod` (module docstring), its
    sizes from make_inputs / output_like on meta tensors (meta_tensors), else
    on fake tensors (the fake-tensor import started and waited for here);
    None when they run on neither."""
    try:
        with meta_tensors():
            return _plan(mod, op, shape, dtype, params, share)
    except Exception:  # noqa: BLE001 - needs values (.item(), numpy): fake tensors carry them
        pass
    start_import()
    wait_for_import()
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            return _plan(mod, op, shape, dtype, params, share)
    except Exception:  # noqa: BLE001 - a template that needs real data: no plan
        return None


def _plan(mod, op: str, shape, dtype: str, params: dict, share: int | None) -> MemoryPlan:
    from . import check
    updt = check.upcast_dtype(dtype)
    inputs = mod.make_inputs(op, list(shape), dtype, params, 0, "cpu")
    out = mod.output_like(op, inputs, params)
    tensors = list(_tensors(inputs))
    input_bytes = sum(_nbytes(t) for t in tensors)
    upcast_bytes = sum(_nbytes(t, updt if t.is_floating_point() else None) for t in tensors)
    outs = list(_tensors(out))
    output_bytes = sum(_nbytes(t) for t in outs)
    ref_bytes = sum(_nbytes(t, updt if t.is_floating_point() else None) for t in outs)
    return MemoryPlan(input_bytes, upcast_bytes, ref_bytes, output_bytes, share)


# Factory functions that make a tensor on the default device when given none.
_FACTORIES = ("empty", "empty_strided", "zeros", "ones", "full", "rand", "randn", "randint", "randperm",
              "arange", "linspace", "logspace", "eye", "tensor", "normal", "empty_like", "zeros_like",
              "ones_like", "full_like", "rand_like", "randn_like", "randint_like")


# Random draws, answered on the meta device with torch.empty: PyTorch's own
# meta kernels for them are Python (torch._refs), and their first call imports
# sympy (~490 modules).
_RANDOM_FACTORIES = ("randn", "rand", "randint", "randperm")
_RANDOM_FILLS = ("normal_", "uniform_", "random_", "bernoulli_", "exponential_", "cauchy_",
                 "log_normal_", "geometric_")
# ... and tensors made like another (PyTorch's meta empty_like, through
# torch._refs, imports sympy too); the plan needs their size, not their strides.
_LIKE = ("randn_like", "rand_like", "randint_like", "empty_like", "zeros_like", "ones_like", "full_like")
# Arithmetic whose result is the broadcast of its operands in their promoted
# dtype: answered with torch.empty. PyTorch's meta kernels for these go
# through torch._refs, whose first call imports torch._dynamo (~900 modules,
# 1.2 s on an idle core; several seconds for each of twelve workers starting
# together, in a thread beside the first compile).
_ARITH = {name: op for op, names in {"add": ("add", "__add__", "__radd__"),
                                      "sub": ("sub", "__sub__", "__rsub__"),
                                      "mul": ("mul", "__mul__", "__rmul__"),
                                      "div": ("div", "true_divide", "__truediv__", "__rtruediv__")}.items()
          for name in names}
_ARITH_INPLACE = {"add_": "add", "sub_": "sub", "mul_": "mul", "div_": "div",
                  "__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__itruediv__": "div"}


def meta_tensors():
    """A torch function mode in which every tensor made lives on the meta
    device (shapes and dtypes, no storage, no values): factory functions get
    device="meta" and no generator, `.to(device)` / `.cuda()` / `.cpu()`
    keep a tensor where it is, random in-place fills drop their generator.
    Code that needs values (`.item()`, numpy, data-dependent shapes) raises.
    Unlike FakeTensorMode it imports nothing beyond torch (FakeTensorMode's
    first use imports torch._dynamo: seconds per worker at a run's start):
    random draws, tensors made like another and the arithmetic templates do
    on their inputs (a scale, a shift) are answered here (_RANDOM_*, _LIKE,
    _ARITH), since PyTorch's meta kernels for them import sympy and
    torch._dynamo; anything else runs PyTorch's meta kernel."""
    import torch
    from torch.overrides import TorchFunctionMode

    def is_device(x) -> bool:
        return isinstance(x, (str, torch.device, int)) and not isinstance(x, bool)

    def size_of(args) -> tuple:
        if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
            return tuple(int(a) for a in args[0])
        return tuple(int(a) for a in args)

    def meta_empty(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta")

    def random_factory(name, args, kwargs):
        dtype = kwargs.get("dtype")
        if name == "randperm":  # randperm(n)
            return meta_empty((int(args[0]),), dtype or torch.int64)
        if name == "randint":  # randint(high, size) / randint(low, high, size)
            size = kwargs["size"] if "size" in kwargs else args[-1]
            return meta_empty(size_of((size,)), dtype or torch.int64)
        # randn / rand: randn(2, 3), randn((2, 3)), randn(size=(2, 3))
        shape = size_of((kwargs["size"],)) if "size" in kwargs else size_of(args)
        return meta_empty(shape, dtype or torch.get_default_dtype())

    def arith(op, a, b, kwargs):
        if not all(isinstance(x, (torch.Tensor, int, float, bool)) for x in (a, b)):
            return NotImplemented
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.device != b.device:
            return NotImplemented
        if op == "div" and kwargs.get("rounding_mode") is None:
            dt = torch.result_type(a, b)
            dtype = dt if dt.is_floating_point or dt.is_complex else torch.get_default_dtype()
        else:
            dtype = torch.result_type(a, b)
        shapes = [tuple(x.shape) for x in (a, b) if isinstance(x, torch.Tensor)]
        return meta_empty(broadcast(shapes), dtype)

    def on_meta(args) -> bool:
        return any(isinstance(a, torch.Tensor) and a.is_meta for a in args)

    class _Meta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            kwargs.pop("generator", None)
            kwargs.pop("pin_memory", None)
            first_meta = bool(args) and isinstance(args[0], torch.Tensor) and args[0].is_meta
            if name in _RANDOM_FACTORIES and not (args and isinstance(args[0], torch.Tensor)):
                return random_factory(name, args, kwargs)
            if name in _LIKE and first_meta:
                return meta_empty(tuple(args[0].shape), kwargs.get("dtype") or args[0].dtype)
            if name in _RANDOM_FILLS and first_meta:
                return args[0]
            op = _ARITH.get(name) or _ARITH_INPLACE.get(name)
            if op and len(args) == 2 and on_meta(args) and set(kwargs) <= {"alpha", "rounding_mode"}:
                a, b = (args[1], args[0]) if name.startswith("__r") else args
                out = arith(op, a, b, kwargs)
                if out is not NotImplemented:
                    if name in _ARITH:
                        return out
                    if first_meta and tuple(out.shape) == tuple(args[0].shape):
                        return args[0]  # in place: the same tensor
            if name in ("cuda", "cpu") and args and isinstance(args[0], torch.Tensor):
                return args[0]
            if name == "to" and args and isinstance(args[0], torch.Tensor):
                kwargs.pop("device", None)
                rest = []
                for a in args[1:]:
                    if isinstance(a, torch.Tensor):
                        kwargs.setdefault("dtype", a.dtype)
                    elif not is_device(a):
                        rest.append(a)
                args = (args[0], *rest)
            elif "device" in kwargs or name in _FACTORIES:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)
    return _Meta()


def broadcast(shapes: list[tuple]) -> tuple:
    """The broadcast of concrete shapes, as torch.broadcast_shapes computes it
    (which imports sympy on its first call); ValueError where they do not
    broadcast."""
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dims = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _tensors(value):
    """The tensors in value (nested dicts, lists and tuples)."""
    import torch
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _nbytes(t, as_dtype=None) -> int:
    import torch
    size = torch.empty((), dtype=as_dtype).element_size() if as_dtype is not None else t.element_size()
    return int(t.numel()) * int(size)
