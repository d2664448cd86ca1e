"""Helpers shared by the Kiln template modules.

What lives here:

* dtype names ("fp32", "fp16", "bf16") <-> torch dtypes and Triton signature types,
  plus default correctness tolerances per dtype;
* random inputs (`randn`): fresh, seeded, normal; drawn on the GPU for a GPU
  device (the same numbers for a seed on every CUDA device) and on the CPU
  otherwise;
* target helpers: backend, warp size, shared-memory (LDS) limit, `GPUTarget`;
* config-space helpers: `product` / `expand` (deterministic cartesian products),
  `amd_knobs` (the AMD option axes a target supports) and `runtime_options`,
  which splits a config into compile/launch options and constexprs and keeps the
  AMD knobs only for hip;
* `compilable`, `cross_compile`, `compiler_mode`, `ast_source`: cross-compilation
  of Triton and Gluon kernels, also while the Triton interpreter is on (see
  below); `jit_helper`, the decorator for @jit helpers that kernels call;
* `spec`: builds the dict that `compile_spec` returns.

Interpreter and cross-compilation in one process
------------------------------------------------
With ``TRITON_INTERPRET=1`` set before Triton is imported, ``@triton.jit`` returns an
``InterpretedFunction`` (it runs on torch CPU tensors) instead of a ``JITFunction``.
The worker needs both in one process: run a candidate on the CPU *and*
cross-compile it to hsaco / cubin. What is in the way, checked on Triton 3.6.0
(torch 2.13, NumPy 2.5), and what this module does about it:

1. Our kernels are ``InterpretedFunction``s, which ``triton.compile`` cannot lower.
   Each keeps the plain Python function in ``.fn``; ``compilable(kernel)`` returns
   a cached ``JITFunction(kernel.fn)`` (or the kernel itself on a GPU), and
   ``compile_spec`` always puts that in ``spec["fn"]``.
2. Triton's own ``@jit`` library functions (``tl.max``, ``tl.sum``, ``tl.zeros``,
   ``tl.cdiv``, ``tl.sigmoid``, ...) are ``InterpretedFunction``s too, and the code
   generator would call them as plain Python ("'ir.value' object has no attribute
   'data'"). At import, this module replaces them (in every ``triton.language*``
   module and on the tensor class) by ``InterpretableJIT`` objects: real
   ``JITFunction``s that the compiler inlines, and that run the original
   interpreted function when an interpreted kernel calls them.
3. A library call from an interpreted kernel (``InterpretedFunction.__call__``)
   patches ``tl.core`` for the interpreter and never restores it, so compiling
   after running e.g. ``tl.sigmoid`` fails ("'ir.value' object has no attribute
   'dtype'"). At import, ``__call__`` is replaced by the same body plus the restore.

Two interpreter bugs that affect correctness runs are fixed the same way: scalar
arguments as loop bounds (``range(0, K, BLOCK_K)``) fail with NumPy >= 2.4, and
``tl.dot`` on bf16 multiplies the raw bits (see the ``_fix_*`` functions).

All fixes are applied once, only when the interpreter is in use, and are
idempotent. After that a plain ``triton.compile(ASTSource(spec["fn"], ...))`` works
in the interpreter process; ``cross_compile(spec, target)`` does exactly that, with
the interpret knob off for the duration (``compiler_mode()``), which is the safe way
(the knob changes how constexpr functions return values). Verified by
tests/python/test_kernels.py, which interleaves interpreted runs and compiles.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import types

import torch
import triton
from triton.runtime.jit import JITFunction

# ---------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# Default tolerances (atol, rtol) for comparing against a reference computed in
# higher precision. Half types lose ~3 decimal digits on the output store alone.
TOLERANCES = {
    "fp32": {"atol": 1e-5, "rtol": 1e-4},
    "fp16": {"atol": 1e-2, "rtol": 1e-2},
    "bf16": {"atol": 2e-2, "rtol": 2e-2},
}


def torch_dtype(name: str) -> torch.dtype:
    """'fp16' -> torch.float16."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; expected one of {sorted(TORCH_DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """torch.float16 -> 'fp16'."""
    return DTYPE_NAMES[dtype]


def element_bytes(name: str) -> int:
    return ELEMENT_BYTES[name]


def pointer_type(name: str) -> str:
    """Triton signature type of a pointer to `name` elements: 'fp32' -> '*fp32'."""
    torch_dtype(name)  # validate
    return "*" + name


def tolerance(name: str) -> dict:
    return dict(TOLERANCES[name])


def randn(shape, dtype: str, seed: int, device, scale: float = 1.0, generator=None) -> torch.Tensor:
    """Normal random tensor of `dtype` from `seed` (or from `generator`, to draw
    several tensors from one stream), drawn where the generator lives -- on the
    GPU for a GPU device (common.generator) -- and moved to `device`.

    On a GPU the draw is on the GPU: every worker draws each job's inputs for
    itself, and drawing a 8192 x 8192 pair on one CPU core took seconds per
    seed, times the workers sharing a GPU (the busiest part of a check). The
    numbers are the same for the same seed on every CUDA device (Philox), but
    not the same as the CPU's."""
    if generator is None:
        generator = _seeded_generator(seed, device)
    t = torch.randn(tuple(int(s) for s in shape), generator=generator, dtype=torch.float32,
                    device=generator.device)
    if scale != 1.0:
        t = t * scale
    return t.to(torch_dtype(dtype)).to(device)


def _seeded_generator(seed: int, device) -> torch.Generator:
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    where = dev if dev.type == "cuda" else torch.device("cpu")
    return torch.Generator(device=where).manual_seed(int(seed))


def generator(seed: int, device="cpu") -> torch.Generator:
    """A seeded generator on `device`'s kind: the GPU for a CUDA / ROCm device
    (torch calls both "cuda"), else the CPU."""
    return _seeded_generator(seed, device)


def numel(shape) -> int:
    return int(math.prod(int(s) for s in shape))


# ---------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------

# Fallback shared-memory (LDS) bytes per workgroup when the target dict does not say.
_LDS_BY_ARCH = {
    "gfx90a": 64 * 1024,
    "gfx942": 64 * 1024,
    "gfx950": 160 * 1024,
    "gfx1100": 64 * 1024,
    "sm_80": 166912,   # 163 KiB opt-in
    "sm_86": 101376,   # 99 KiB
    "sm_89": 101376,
    "sm_90": 232448,   # 227 KiB opt-in
}
# Keys a target yaml may use for the per-block shared-memory limit, in bytes.
_LDS_KEYS = ("max_shared_per_block", "shared_memory_per_block", "max_shared_memory_per_block",
             "lds_bytes", "lds_per_workgroup", "shared_bytes")


def backend(target: dict) -> str:
    """'hip' or 'cuda' (from target['backend'], else guessed from the arch)."""
    b = target.get("backend")
    if b:
        return b
    return "hip" if str(target.get("arch", "")).startswith("gfx") else "cuda"


def is_hip(target: dict) -> bool:
    return backend(target) == "hip"


def arch(target: dict) -> str:
    return str(target.get("arch", ""))


def warp_size(target: dict) -> int:
    """Threads per warp/wavefront: target['warp_size'], else 32 on NVIDIA and
    RDNA (gfx10+), 64 on CDNA (gfx9)."""
    if target.get("warp_size"):
        return int(target["warp_size"])
    a = arch(target)
    if a.startswith("gfx"):
        return 64 if a.startswith("gfx9") else 32
    return 32


def has_mfma(target: dict) -> bool:
    """CDNA matrix cores (gfx90a, gfx942, gfx950): where matrix_instr_nonkdim and
    kpack apply. RDNA (gfx11) uses WMMA and ignores them."""
    return is_hip(target) and arch(target).startswith("gfx9")


def shared_limit(target: dict) -> int:
    """Shared memory / LDS bytes a single workgroup may use."""
    for key in _LDS_KEYS:
        if target.get(key):
            return int(target[key])
    a = arch(target)
    if a in _LDS_BY_ARCH:
        return _LDS_BY_ARCH[a]
    return 64 * 1024 if a.startswith("gfx") else 48 * 1024


def gpu_target(target: dict):
    """triton GPUTarget for a target dict: gfx942 -> ('hip', 'gfx942', 64),
    sm_90 -> ('cuda', 90, 32)."""
    from triton.backends.compiler import GPUTarget
    a = arch(target)
    if is_hip(target):
        return GPUTarget("hip", a, warp_size(target))
    cc = int(a[3:]) if a.startswith("sm_") else int(a)
    return GPUTarget("cuda", cc, 32)


def device_backend(t: torch.Tensor) -> str:
    """Where a launch on this tensor runs: 'cpu' (Triton interpreter), 'hip' or 'cuda'."""
    if t.device.type == "cpu":
        return "cpu"
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def local_gpu_arch() -> str | None:
    """The arch of this process's CUDA GPU ("sm_90"), or None when kernels run
    on the CPU here: no CUDA GPU, or the Triton interpreter is on. Spaces use it
    to offer configs that only such a GPU can run (and so verify), e.g.
    attention's Gluon `ws` tiles."""
    if _interpreter_in_use() or getattr(torch.version, "hip", None) or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


# ---------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------

LAUNCH_KEYS = ("num_warps", "num_stages")
AMD_KNOBS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


def product(**axes) -> list[dict]:
    """Cartesian product of the axes as a list of dicts, in a deterministic order
    (first axis varies slowest, values in the order given)."""
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*(axes[k] for k in keys))]


def expand(base: list[dict], axes: dict, keep=None) -> list[dict]:
    """Every base config combined with every combination of `axes` (e.g. the AMD
    knobs), the axes varying slowest: all base configs with the first knob values
    come first, so a truncated walk of the space still sees every tile with the
    default knobs. `keep(config) -> bool` filters."""
    out = []
    for combo in product(**axes):
        for b in base:
            c = dict(b)
            c.update(combo)
            if keep is None or keep(c):
                out.append(c)
    return out


def amd_knobs(target: dict, dot: bool = False) -> dict:
    """Config axes for the AMD compile options on this target ({} off hip).

    waves_per_eu (0 = compiler default, 2 = ask for 2 waves per SIMD) everywhere on
    hip; for kernels built on tl.dot on CDNA (gfx9) also matrix_instr_nonkdim
    (16 / 32: the MFMA shape) and kpack (1 / 2; gfx950 only accepts 1). Default
    values first."""
    if not is_hip(target):
        return {}
    axes = {}
    if dot and has_mfma(target):
        axes["matrix_instr_nonkdim"] = [16, 32]
        axes["kpack"] = [1] if arch(target) == "gfx950" else [1, 2]
    axes["waves_per_eu"] = [0, 2]
    return axes


def runtime_options(config: dict, backend: str) -> tuple[dict, dict]:
    """Split a config into (options, constexprs).

    options: num_warps, num_stages, and on `backend == 'hip'` the AMD knobs
    (waves_per_eu, matrix_instr_nonkdim, kpack) — the keyword options of a Triton
    launch / `triton.compile`. On 'cuda' and 'cpu' the AMD knobs are dropped (the
    NVIDIA backend rejects them; the interpreter ignores options anyway).
    constexprs: the UPPER_CASE keys (block sizes). Any other lower-case key is a
    template's own knob (matmul's `persistent`, the row kernels' `programs` /
    `stream`, conv2d's and attention's variants): neither, the template reads
    it from the config."""
    options, constexprs = {}, {}
    for k, v in config.items():
        if k in LAUNCH_KEYS:
            options[k] = v
        elif k in AMD_KNOBS:
            if backend == "hip":
                options[k] = v
        elif not k.islower():
            constexprs[k] = v
    return options, constexprs


def is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


# ---------------------------------------------------------------------------
# compilation, and the interpreter fixes (see the module docstring)
# ---------------------------------------------------------------------------

_COMPILABLE: dict = {}


def compilable(kernel):
    """A real JITFunction for `kernel`: the kernel itself when it is one (on a
    GPU), else a cached JITFunction(kernel.fn) (under the interpreter)."""
    if isinstance(kernel, JITFunction):
        return kernel
    fn = kernel.fn
    jf = _COMPILABLE.get(fn)
    if jf is None:
        jf = JITFunction(fn, **getattr(kernel, "kwargs", {}))
        _COMPILABLE[fn] = jf
    return jf


class InterpretableJIT(JITFunction):
    """A JITFunction that the code generator inlines like any @jit function and
    that, called from an interpreted kernel, runs the InterpretedFunction it
    replaces (a plain JITFunction refuses to be called outside a kernel)."""

    def __init__(self, interpreted):
        super().__init__(interpreted.fn, **getattr(interpreted, "kwargs", {}))
        self.interpreted = interpreted

    def __call__(self, *args, **kwargs):
        return self.interpreted(*args, **kwargs)


def jit_helper(fn):
    """@triton.jit for a helper that kernels call (decorate it with this
    instead). Under TRITON_INTERPRET=1, @triton.jit makes an
    InterpretedFunction, which the code generator cannot inline when a kernel
    is cross-compiled (compilable() only converts the kernel itself): the
    helper becomes an InterpretableJIT then, as Triton's own library functions
    do (_fix_library_functions). On a GPU it is the plain JITFunction."""
    jf = triton.jit(fn)
    return jf if isinstance(jf, JITFunction) else InterpretableJIT(jf)


def _fix_library_functions() -> None:
    """Point 2: replace Triton's own @jit library functions, created as
    InterpretedFunctions under TRITON_INTERPRET=1, by InterpretableJIT
    equivalents, in every triton.language* module and on the tensor class."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    namespaces = [m for name, m in list(sys.modules.items())
                  if isinstance(m, types.ModuleType)
                  and (name == "triton.language" or name.startswith("triton.language."))]
    namespaces.append(tl.core.tensor)
    replaced: dict = {}
    for ns in namespaces:
        for key, value in list(vars(ns).items()):
            if isinstance(value, InterpretedFunction):
                if id(value) not in replaced:
                    replaced[id(value)] = InterpretableJIT(value)
                setattr(ns, key, replaced[id(value)])


def _fix_nested_call_leak() -> None:
    """Point 3: Triton 3.6's InterpretedFunction.__call__ (a @jit function called
    from an interpreted kernel) patches triton.language for the callee's globals
    and never undoes it, leaving tl.core patched after the kernel finishes. Same
    body, plus the restore."""
    from triton.runtime import interpreter
    cls = interpreter.InterpretedFunction
    if getattr(cls.__call__, "_kiln_interpreter_patch", False):
        return

    def __call__(self, *args, **kwargs):
        scope = interpreter._patch_lang(self.fn)
        try:
            fn = self.rewrite()
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                raise interpreter.InterpreterError(repr(e)) from e
        finally:
            scope.restore()

    __call__._kiln_interpreter_patch = True
    cls.__call__ = __call__


def _fix_interpreter_scalar_index() -> None:
    """NumPy >= 2.4 refuses int() of a 1-element 1-D array, which is how Triton
    3.6's interpreter turns a scalar kernel argument into a Python int (its
    patched `tensor.__index__`), so `for k in range(0, K, BLOCK_K)` with a
    runtime bound fails with "only 0-dimensional arrays can be converted to
    Python scalars". Re-patch `__index__` to take the single element."""
    import numpy as np
    from triton.runtime import interpreter
    try:
        int(np.array([1]))
        return  # older NumPy: nothing to fix
    except TypeError:
        pass
    original = interpreter._patch_lang_tensor
    if getattr(original, "_kiln_interpreter_patch", False):
        return

    def index(self):
        return int(self.handle.data.reshape(-1)[0])

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", index)

    patch_lang_tensor._kiln_interpreter_patch = True
    interpreter._patch_lang_tensor = patch_lang_tensor


def _fix_interpreter_bf16_dot() -> None:
    """Triton 3.6's interpreter keeps bf16 tensors as raw uint16 bits and its
    `tl.dot` multiplies those bits as integers, so any bf16 GEMM is garbage on the
    CPU. Widen bf16 operands to fp32 first (exact: bf16 is the top half of an
    fp32); the products of two bf16 values are exact in fp32 too, so this matches
    a GPU's bf16 MMA with fp32 accumulation up to summation order."""
    import numpy as np
    from triton.runtime import interpreter
    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    if getattr(original, "_kiln_interpreter_patch", False):
        return

    def widen(h):
        if getattr(h.dtype, "name", None) != "bf16":
            return h
        f32 = (h.data.astype(np.uint32) << 16).view(np.float32)
        return interpreter.TensorHandle(f32, triton.language.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    create_dot._kiln_interpreter_patch = True
    builder.create_dot = create_dot


def _interpreter_in_use() -> bool:
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    return bool(triton.knobs.runtime.interpret) or isinstance(tl.max, InterpretedFunction)


# Applied once per process, when this module is first imported; each is
# idempotent (a re-import of the package finds them in place).
if _interpreter_in_use():
    _fix_nested_call_leak()
    _fix_library_functions()
    _fix_interpreter_scalar_index()
    _fix_interpreter_bf16_dot()


@contextlib.contextmanager
def compiler_mode():
    """Turn the interpret knob off while compiling (it changes how constexpr
    functions return their values). Not thread-safe: don't run interpreted
    kernels on another thread meanwhile."""
    interpret = triton.knobs.runtime.interpret
    triton.knobs.runtime.interpret = False
    try:
        yield
    finally:
        triton.knobs.runtime.interpret = interpret


def ast_source(fn, signature, constexprs, attrs=None):
    """The compiler's source object for a kernel: a GluonASTSource for a Gluon
    kernel (@gluon.jit; it is lowered from its own layouts), else an ASTSource."""
    if getattr(fn, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource
        return GluonASTSource(fn, signature, constexprs, attrs)
    from triton.compiler import ASTSource
    return ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


def cross_compile(spec_: dict, target: dict):
    """triton.compile a `compile_spec` dict for a target dict; returns the
    CompiledKernel (`.asm["hsaco"]` / `.asm["cubin"]`, `.metadata`)."""
    with compiler_mode():
        src = ast_source(compilable(spec_["fn"]), spec_["signature"], spec_["constexprs"], spec_.get("attrs"))
        return triton.compile(src, target=gpu_target(target), options=spec_["options"])


def spec(kernel, args: list[tuple[str, str, object]], constexprs: dict, options: dict, grid,
         target: dict | None = None) -> dict:
    """The dict that `compile_spec` returns.

    args: (name, type, value) for each runtime argument in the kernel's order;
    type is '*fp16' / 'i32' / 'fp32'. The value is used for the specialisation
    the JIT makes at launch: pointers are assumed 16-byte aligned (torch
    allocations are) and ints that are multiples of 16 are marked so; an int
    equal to 1 becomes the constexpr 1. A pointer's value is the byte size of
    its tensor (None: unknown): for an AMD `target` (the JIT's HIP backend with
    Triton's `knobs.amd.use_buffer_ops`, on by default) a tensor of at most
    2^31 - 1 bytes is marked as such (tt.pointer_range 32: buffer loads and
    stores), as the JIT on an AMD GPU would. The hints go in 'attrs'
    ({(arg_index,): [["tt.divisibility", 16]]}), to be passed as
    `ASTSource(..., attrs=spec["attrs"])`; without them the compiled code loses
    vectorised loads.

    The attrs are exactly those Triton's JIT builds at launch (JITFunction.
    _pack_args): an entry, in parameter order, for every pointer and int
    argument (an empty list when not aligned) and for every string constexpr
    (BaseBackend.parse_attr of the string). Triton's cache key includes
    str(attrs), so any other form -- say, leaving the empty entries out --
    makes the worker's first launch compile the kernel a second time instead
    of finding the one the compile stage just built.
    """
    jf = compilable(kernel)
    signature, by_index = {}, {}
    constexprs = dict(constexprs)
    names = jf.arg_names
    hip = target is not None and is_hip(target)
    ranged = hip and _buffer_ops()  # pointers within 2 GiB get "S" (HIPBackend)
    no_specialise = {names[i] if isinstance(i, int) else i for i in (getattr(jf, "do_not_specialize", None) or [])}
    for name, ty, value in args:
        pointer = ty.startswith("*")
        integer = not pointer and isinstance(value, int) and not isinstance(value, bool)
        if integer and value == 1 and name not in no_specialise:
            constexprs[name] = 1  # the JIT's ("constexpr", 1)
            continue
        if ty == "i32" and integer and not -2**31 <= value < 2**31:
            ty = "i64"  # as the JIT would specialise it
        signature[name] = ty
        if pointer:
            within_2gb = isinstance(value, int) and value <= 2**31 - 1
            by_index[names.index(name)] = "DS" if ranged and within_2gb else "D"
        elif integer:
            by_index[names.index(name)] = "D" if value % 16 == 0 else ""
    for name, value in constexprs.items():
        signature[name] = "constexpr"
        if isinstance(value, str) and name in names:
            by_index[names.index(name)] = value
    # Keep the signature in the kernel's parameter order.
    signature = {n: signature[n] for n in names if n in signature}
    missing = [n for n in names if n not in signature]
    if missing:
        raise ValueError(f"{jf.__name__}: no value for parameter(s) {missing}")
    attrs = {(i,): _parse_attr(by_index[i], hip) for i in sorted(by_index)}
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    return dict(fn=jf, signature=signature, constexprs=constexprs, attrs=attrs,
                options=dict(options), grid=grid)


def _buffer_ops() -> bool:
    """Triton's knobs.amd.use_buffer_ops (TRITON_AMD_USE_BUFFER_OPS), as the
    JIT's HIP backend reads it."""
    try:
        from triton import knobs
        return bool(knobs.amd.use_buffer_ops)
    except (ImportError, AttributeError):  # pragma: no cover - older Triton
        return False


def _parse_attr(desc: str, hip: bool = False) -> list:
    """The backend's parse_attr (the JIT's attribute of a specialisation
    string: "D" = divisible by 16; on AMD "S" = within 2 GiB)."""
    try:
        if hip:
            from triton.backends.amd.compiler import HIPBackend
            return HIPBackend.parse_attr(desc)
        from triton.backends.compiler import BaseBackend
        return BaseBackend.parse_attr(desc)
    except (ImportError, AttributeError):  # pragma: no cover - older Triton
        return ([["tt.divisibility", 16]] if "D" in desc else []) + \
            ([["tt.pointer_range", 32]] if hip and "S" in desc else [])


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---------------------------------------------------------------------------
# row kernels (softmax, layernorm, rmsnorm, reduce): a persistent grid and
# streaming cache hints as config knobs, shared launch / compile_spec plumbing
# ---------------------------------------------------------------------------

# Lower-case config knobs of the one-pass row kernels (absent = off):
#   programs  > 0: a persistent grid of that many programs, each walking row
#             blocks pid, pid + programs, ...; the row loop is software-pipelined
#             num_stages deep (tl.range(..., num_stages=STAGES)), so the next
#             row's load is in flight while the current one is reduced.
#   stream    1: every byte of x is read once and every output byte written once:
#             loads of x with eviction_policy="evict_first", stores with
#             cache_modifier=".cs" (streaming; non-temporal on CDNA3/4).
ROW_KNOBS = ("programs", "stream")

# SMs / CUs per arch, when the target dict lacks compute_units.
_CUS_BY_ARCH = {"sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132,
                "gfx90a": 110, "gfx942": 304, "gfx950": 256, "gfx1100": 96}


def compute_units(target: dict) -> int:
    """SMs (NVIDIA) / CUs (AMD): target['compute_units'], else by arch, else 0."""
    if target.get("compute_units"):
        return int(target["compute_units"])
    return _CUS_BY_ARCH.get(arch(target), 0)


def resident_warps(target: dict) -> int:
    """Warps / waves one SM / CU keeps resident: max_waves_per_simd x
    simds_per_cu from the target, else 64 on NVIDIA and 32 on AMD."""
    if target.get("max_waves_per_simd") and target.get("simds_per_cu"):
        return int(target["max_waves_per_simd"]) * int(target["simds_per_cu"])
    return 32 if is_hip(target) else 64


def persistent_programs(target: dict, n_blocks: int, per_cu: int) -> int:
    """Program count for a persistent grid of about compute_units x per_cu,
    rounded down so the n_blocks row blocks split evenly (every program walks
    the same number of blocks, the last one maybe fewer, and the whole grid is
    resident at once: no tail wave). 0 (no persistent grid) when the CU count is
    unknown or each program would get a single block."""
    cus = compute_units(target)
    if cus <= 0 or per_cu <= 0:
        return 0
    per_program = cdiv(n_blocks, cus * per_cu)
    if per_program <= 1:
        return 0
    return cdiv(n_blocks, per_program)


def row_variants(tiles, target: dict, n_rows: int, elem_bytes: int, first: int = 3) -> list[dict]:
    """Knob variants of one-pass row-kernel tiles, the likely-best first.

    tiles: (BLOCK_M, BLOCK_N, num_warps) of the one-pass kernel, best first (the
    measured best leading). For each of the first `first` tiles: the plain config,
    the streaming one, a persistent streaming one with a 2-deep row pipeline and
    about half an SM's worth of resident warps in programs (a quarter for large
    tiles per thread); then, for the same
    tiles, the persistent one without the pipeline, with 3 stages, and with half
    the programs; then the remaining tiles, plain and streaming. Persistent
    configs whose pipeline buffers (NVIDIA: (stages - 1) tiles in shared memory per
    program) would not fit are left out."""
    cus_lds = int(target.get("lds_bytes_per_cu") or shared_limit(target))
    half_sm = max(1, resident_warps(target) // 2)

    def plain(bm, bn, w, **knobs):
        return dict({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": 1}, **knobs)

    def persistent(bm, bn, w, stages, per_cu):
        if not is_hip(target) and stages > 1:
            smem = (stages - 1) * bm * bn * elem_bytes
            if smem > shared_limit(target):
                return None
            per_cu = min(per_cu, cus_lds // smem)
        programs = persistent_programs(target, cdiv(n_rows, bm), per_cu)
        if programs <= 0:
            return None
        return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": stages,
                "programs": programs, "stream": 1}

    def per_cu(bm, bn, w):
        # programs per SM/CU: half its resident warps; a quarter for tiles of >= 32
        # elements per thread (~80-128 registers on sm_90: more would not all be
        # resident, and a second wave of persistent programs is a tail again)
        k = max(1, half_sm // w)
        return max(1, k // 2) if bm * bn >= 32 * w * warp_size(target) else k

    top, rest = list(tiles[:first]), list(tiles[first:])
    out = []
    for bm, bn, w in top:
        out += [plain(bm, bn, w), plain(bm, bn, w, stream=1), persistent(bm, bn, w, 2, per_cu(bm, bn, w))]
    for bm, bn, w in top:
        k = per_cu(bm, bn, w)
        out += [persistent(bm, bn, w, 1, k), persistent(bm, bn, w, 3, k),
                persistent(bm, bn, w, 2, k // 2) if k > 1 else None]
    for bm, bn, w in rest:
        out += [plain(bm, bn, w), plain(bm, bn, w, stream=1)]
    return [c for c in out if c is not None]


def dedupe(configs, cap: int | None = None) -> list[dict]:
    """The configs without repeats (first occurrence kept), at most `cap`."""
    seen, out = set(), []
    for c in configs:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out[:cap] if cap else out


def row_options(config: dict, backend: str, n_rows: int, knobs: bool = True, two_pass: bool = False):
    """(options, constexprs, grid) of a row-kernel config.

    runtime_options of the config (which leaves the ROW_KNOBS out); with `knobs` (the
    one-pass kernels) also the constexprs PERSISTENT, STAGES (num_stages: depth
    of the persistent row loop's pipeline), LOAD_POLICY and STORE_CACHE; the grid
    is the row blocks, or the persistent program count when smaller. Without
    `knobs` (looped kernels, which re-read rows) the knobs are refused; with
    `two_pass` as well (a looped kernel that reads each row twice: softmax,
    layernorm, rmsnorm) the FIRST_POLICY / SECOND_POLICY constexprs of the
    `l2hint` knob (two_pass_policies)."""
    programs = int(config.get("programs", 0) or 0)
    stream = bool(config.get("stream", 0))
    options, constexprs = runtime_options(config, backend)
    blocks = cdiv(n_rows, config["BLOCK_M"])
    if knobs:
        constexprs.update(PERSISTENT=programs > 0, STAGES=int(config.get("num_stages", 1)),
                          LOAD_POLICY="evict_first" if stream else "",
                          STORE_CACHE=".cs" if stream else "")
    elif programs or stream:
        raise ValueError("programs / stream apply to one-pass row kernels only (BLOCK_N >= cols)")
    elif two_pass:
        constexprs.update(two_pass_policies(config))
    grid = (min(programs, blocks) if programs > 0 else blocks, 1, 1)
    return options, constexprs, grid


def row_hints(config: dict, shape, dtype: str) -> dict:
    """The config model's hint for a row kernel (softmax, layernorm, rmsnorm,
    row reductions): `bytes_in_flight`, the bytes one program has loading at a
    time -- BLOCK_M whole rows for a one-pass tile (times the pipeline depth
    num_stages - 1 of a persistent one), one BLOCK_M x BLOCK_N chunk for a
    looped tile. On the H200 the row kernels' times follow it: a looped
    512-wide chunk on 16 warps (1 KiB per program) measured 5x the best
    softmax, 8 KiB one-pass rows were within 1% of it (src/explore/strategy.cpp
    turns it into a memory efficiency by Little's law)."""
    rows, cols = shape[0], shape[-1]
    e = element_bytes(dtype)
    bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    if bn >= cols:
        depth = max(1, int(config.get("num_stages", 1)) - 1) if int(config.get("programs", 0) or 0) > 0 else 1
        return {"bytes_in_flight": bm * cols * e * depth}
    return {"bytes_in_flight": bm * bn * e}


def two_pass_policies(config: dict) -> dict:
    """FIRST_POLICY / SECOND_POLICY constexprs of the two-pass (looped) row
    kernels, which read each row twice. Knob `l2hint` 1: the first pass loads
    with evict_last, so the row is still in L2 for the second, and the second
    with evict_first, so a finished row leaves room for the next (what
    torch.compile's reductions do); absent or 0: no hints."""
    hint = bool(config.get("l2hint", 0))
    return {"FIRST_POLICY": "evict_last" if hint else "", "SECOND_POLICY": "evict_first" if hint else ""}


def prefer(tiles, preferred) -> list:
    """(BLOCK_M, BLOCK_N, num_warps) tiles reordered: those whose (BLOCK_M,
    num_warps) is in `preferred` first, in its order, then the others as given."""
    rank = {p: i for i, p in enumerate(preferred)}
    return sorted(tiles, key=lambda t: rank.get((t[0], t[2]), len(rank)))


def norm_row_space(shape, dtype: str, target: dict, preferred, looped_blocks, per_thread_max: int,
                   max_one_pass: int, max_configs: int, looped_lead: bool = False) -> list[dict]:
    """The config space of softmax, layernorm and rmsnorm (a one-pass kernel
    holding BLOCK_M whole rows, and a looped one walking a row in BLOCK_N
    chunks), before the AMD knobs are expanded in:

    * one-pass tiles (BLOCK_N = the row padded to pow2) when it is at most
      max_one_pass, BLOCK_M 1..16 rows of at most 8192 elements in all;
    * looped tiles, one row in `looped_blocks` chunks smaller than the row;
    * per tile, every warp count (1..16) giving each thread at least one
      element and at most per_thread_max fp32 values;
    * the one-pass tiles reordered by `preferred` ((BLOCK_M, num_warps), the
      measured best first) with their knob variants (row_variants) in front;
    * on NVIDIA, every looped tile also with `l2hint` (evict_last on the first
      read of a row, evict_first on the second; two_pass_policies), the hinted
      ones first among the looped;
    * on NVIDIA with `looped_lead`, a few hinted looped tiles ahead of everything: chunks
      of half the row (at most 2048) on 8 and 4 warps, one and two rows. For
      rmsnorm on an H200 ([16384, 4096] bf16) one row in 2048-chunks on 8
      warps with the hint measured 0.0676 ms, the best one-pass tile 0.0698
      (bench/row_sweep.py);
    * repeats dropped, at most max_configs."""
    import triton
    rows, cols = shape
    ws = warp_size(target)
    row_block = triton.next_power_of_2(cols)
    max_bm = triton.next_power_of_2(rows)

    shapes = []  # (BLOCK_M, BLOCK_N)
    if row_block <= max_one_pass:
        for bm in [1, 2, 4, 8, 16]:
            if bm == 1 or (bm <= max_bm and bm * row_block <= 8192):
                shapes.append((bm, row_block))
    for bn in looped_blocks:
        if bn < cols:
            shapes.append((1, bn))

    base = []
    for bm, bn in shapes:
        tile = bm * bn
        for warps in [1, 2, 4, 8, 16]:
            if (warps == 1 or warps * ws <= tile) and tile <= warps * ws * per_thread_max:
                base.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": 1})
    one_pass = [(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]) for c in base if c["BLOCK_N"] >= cols]
    tiles = prefer(one_pass, preferred)
    looped = [c for c in base if c["BLOCK_N"] < cols]
    # The hints are measured on NVIDIA only; AMD spaces stay as they were.
    cuda = backend(target) == "cuda"
    hinted = [dict(c, l2hint=1) for c in looped] if cuda else []
    lead = []
    if cuda and looped_lead and row_block >= 1024:
        bn = min(2048, row_block // 2)
        for bm, warps in [(1, 8), (2, 8), (1, 4)]:
            if bm <= max_bm and bm * bn <= warps * ws * per_thread_max:
                lead.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": 1, "l2hint": 1})
    space = (lead + row_variants(tiles, target, rows, element_bytes(dtype))
             + [c for c in base if c["BLOCK_N"] >= cols] + hinted + looped)
    return expand(dedupe(space, max_configs), amd_knobs(target))
