"""Capturing the Triton launches of generated code, and compiling them for a target.

Capture: ``Capture.install()`` wraps ``JITFunction.run`` (GPU) and
``InterpretedFunction.run`` (Triton interpreter) at class level -- every
``kernel[grid](...)`` goes through ``run`` (``Autotuner`` and ``Heuristics`` call
it too). For kernels defined in the generated module it records, *before*
launching, the kernel's name, a JSON description of every argument (tensors by
dtype, 16-byte alignment residue and storage size; scalars by value; constexprs
by value), the launch options (``num_warps``, ``num_stages``, ...) and the grid
(a callable grid is evaluated on the bound arguments, as Triton does). While a
launch runs, ``in_launch`` is set (the run-time compute monitor lets the
interpreter's own torch ops through) and, on a GPU, the stream Triton launches on
is compared with the stream the evaluator made current (a launch on any other
stream is the ``side_stream`` rule).

Compile: ``compile_launches`` rebuilds each recorded launch with stand-in
arguments (``meta`` tensors with the recorded dtype, alignment and storage size,
so Triton's specialisation -- divisibility by 16, AMD's 32-bit pointer range --
is the one the real launch had), binds them with Triton's own binder for the
*target's* backend (``create_function_from_signature`` and
``JITFunction._pack_args``, Triton 3.6), and cross-compiles with
``triton.compile(ASTSource(...), target=GPUTarget(...))`` exactly like the
template path (``targetcompile.py``), then reads resources from the code object.
Identical (kernel, signature, constexprs, attributes, options) are compiled once.
"""
from __future__ import annotations

import json
from typing import Any

LAUNCH_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "waves_per_eu",
                      "matrix_instr_nonkdim", "kpack", "enable_fp_fusion", "launch_cooperative_grid",
                      "launch_pdl", "debug")


def describe_arg(v: Any) -> dict:
    import torch
    if isinstance(v, torch.Tensor):
        st = v.untyped_storage()
        return {"t": "tensor", "dtype": str(v.dtype).replace("torch.", ""),
                "align": int(v.data_ptr() % 16), "nbytes": int(st.nbytes()),
                "itemsize": int(v.element_size())}
    if isinstance(v, bool):
        return {"t": "bool", "v": v}
    if isinstance(v, int):
        return {"t": "int", "v": v}
    if isinstance(v, float):
        return {"t": "float", "v": v if v == v and v not in (float("inf"), float("-inf")) else repr(v)}
    if v is None:
        return {"t": "none"}
    if isinstance(v, str):
        return {"t": "str", "v": v}
    if isinstance(v, (tuple, list)):
        return {"t": "tuple", "v": [describe_arg(x) for x in v]}
    try:
        import triton.language as tl
        if isinstance(v, tl.constexpr):
            return describe_arg(v.value)
        if isinstance(v, tl.dtype):
            return {"t": "tl_dtype", "v": str(v)}
    except Exception:
        pass
    return {"t": "unknown", "type": type(v).__name__}


def rebuild_arg(d: dict) -> Any:
    import torch
    t = d.get("t")
    if t == "tensor":
        dt = getattr(torch, d["dtype"])
        item = max(1, int(d.get("itemsize") or 1))
        n = max(1, int(d.get("nbytes") or item) // item)
        base = torch.empty(n + 16, dtype=dt, device="meta")
        off = int(d.get("align") or 0) // item
        return base[off:off + n] if off else base[:n]
    if t == "bool":
        return bool(d["v"])
    if t == "int":
        return int(d["v"])
    if t == "float":
        return float(d["v"])
    if t == "none":
        return None
    if t == "str":
        return d["v"]
    if t == "tuple":
        return tuple(rebuild_arg(x) for x in d["v"])
    if t == "tl_dtype":
        import triton.language as tl
        return tl.dtype(d["v"])
    raise ValueError(f"cannot rebuild a launch argument of type {d.get('type')}")


class Capture:
    """Records launches of kernels whose function lives in one of ``modules``."""

    def __init__(self, modules: set[str], expected_stream=None):
        self.modules = modules
        self.calls: list[list[dict]] = []     # launches per forward call
        self.current: dict | None = None      # the launch in progress (set on failure)
        self.in_launch = 0
        self.expected_stream = expected_stream  # callable -> raw stream handle, GPU only
        self.stream_violations: list[str] = []
        self.installed = False

    def begin_call(self) -> None:
        self.calls.append([])

    def last_call(self) -> list[dict]:
        return self.calls[-1] if self.calls else []

    def _record(self, kernel, args, kwargs, grid) -> dict:
        fn = kernel.fn
        names = list(getattr(kernel, "arg_names", []) or [])
        params, opts = {}, {}
        for k, v in kwargs.items():
            (opts if (k in LAUNCH_OPTION_KEYS and k not in names) else params)[k] = v
        rec = {"kernel": fn.__name__, "qualname": getattr(fn, "__qualname__", fn.__name__),
               "args": [describe_arg(a) for a in args],
               "kwargs": {k: describe_arg(v) for k, v in params.items()},
               "options": {k: describe_arg(v) for k, v in opts.items()},
               "grid": None}
        try:
            g = grid
            if callable(g):
                import inspect
                sig = inspect.signature(fn)
                bound = sig.bind_partial(*args, **params)
                bound.apply_defaults()
                g = g(dict(bound.arguments))
            if isinstance(g, int):
                g = (g,)
            rec["grid"] = [int(x) for x in list(g)[:3]] + [1] * (3 - min(3, len(list(g))))
        except Exception as exc:  # a bad grid fails the launch itself; keep the record
            rec["grid_error"] = f"{type(exc).__name__}: {exc}"
        return rec

    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        from triton.runtime.jit import JITFunction
        classes = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except Exception:
            pass
        for cls in classes:
            self._wrap(cls)

    def _wrap(self, cls) -> None:
        orig = cls.run
        cap = self

        def run(kernel, *args, grid, warmup, **kwargs):
            fn = getattr(kernel, "fn", None)
            if warmup or getattr(fn, "__module__", None) not in cap.modules:
                return orig(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            cap.in_launch += 1  # our own torch calls (data_ptr, storage) pass the monitor
            try:
                rec = cap._record(kernel, args, kwargs, grid)
            finally:
                cap.in_launch -= 1
            if cap.expected_stream is not None:
                try:
                    import torch
                    cur = torch.cuda.current_stream().cuda_stream
                    exp = cap.expected_stream()
                    if cur != exp:
                        cap.stream_violations.append(
                            f"{rec['kernel']} launched on stream {cur:#x}, not the current stream "
                            f"{exp:#x} the evaluator set")
                except Exception:
                    pass
            if cap.calls:
                cap.calls[-1].append(rec)
            cap.current = rec
            cap.in_launch += 1
            try:
                ret = orig(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                cap.in_launch -= 1
            cap.current = None
            return ret

        run.__wrapped__ = orig
        cls.run = run


def find_kernel(module, rec: dict):
    """The JITFunction for a recorded launch, from the generated module."""
    from triton.runtime.jit import JITFunction
    obj = module
    for part in rec.get("qualname", rec["kernel"]).split("."):
        if part == "<locals>":
            obj = None
            break
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is None:
        obj = getattr(module, rec["kernel"], None)
    seen = 0
    while obj is not None and not isinstance(obj, JITFunction) and seen < 8:
        obj = getattr(obj, "fn", None)  # Autotuner / Heuristics wrap the JITFunction
        seen += 1
    if not isinstance(obj, JITFunction):
        raise LookupError(f"kernel {rec.get('qualname', rec['kernel'])} is not a module-level "
                          "@triton.jit function of the generated module")
    return obj


def bind_for_target(jf, rec: dict, backend):
    """(signature, constexprs, attrs, options) as Triton's JIT would bind them for backend."""
    from triton.runtime.jit import create_function_from_signature
    args = [rebuild_arg(a) for a in rec["args"]]
    kwargs = {k: rebuild_arg(v) for k, v in rec.get("kwargs", {}).items()}
    opts = {k: rebuild_arg(v) for k, v in rec.get("options", {}).items()}
    fields = set(getattr(backend.parse_options({}), "__dict__", {}).keys())
    kwargs.update({k: v for k, v in opts.items() if k in fields})
    binder = create_function_from_signature(jf.signature, jf.params, backend)
    bound, spec, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jf._pack_args(backend, kwargs, bound, spec, options)
    return signature, constexprs, attrs, options


def compile_launches(module, launches: list[dict], target: dict, artifact_dir: str | None,
                     untrusted=None) -> dict:
    """{"status", "message", "artifacts", "failed_kernel"} for the job's target.

    ``untrusted``: a context-manager factory wrapped around Triton's compile of the
    generated kernels (the sandbox's audit phase); artifacts are written outside it.
    """
    import contextlib
    import triton
    from triton.compiler import ASTSource, make_backend
    from .targetcompile import (CompileFailure, build_artifact, check_target_limits,
                                describe_exception, gpu_target, is_resource_error)
    from .elf import ElfError
    phase = untrusted or contextlib.nullcontext
    try:
        tgt = gpu_target(target)
    except ValueError as exc:
        return {"status": "compile_error", "message": str(exc), "artifacts": []}
    backend = make_backend(tgt)
    arts, seen = [], {}
    for i, rec in enumerate(launches):
        try:
            jf = find_kernel(module, rec)
            signature, constexprs, attrs, options = bind_for_target(jf, rec, backend)
        except Exception as exc:
            return {"status": "compile_error", "failed_kernel": rec.get("kernel"),
                    "message": f"cannot bind the launch of {rec.get('kernel')} for {target.get('name')}: "
                               f"{describe_exception(exc)}", "artifacts": arts}
        key = json.dumps([rec["qualname"], signature, repr(sorted(constexprs.items())),
                          repr(sorted(attrs.items())), repr(sorted(options.__dict__.items()))],
                         default=str)
        if key in seen:
            arts[seen[key]].setdefault("launch_indices", []).append(i)
            continue
        try:
            with phase():
                compiled = triton.compile(ASTSource(jf, signature, constexprs, attrs), target=tgt,
                                          options=options.__dict__)
        except Exception as exc:
            status = "resource_error" if is_resource_error(exc) else "compile_error"
            return {"status": status, "failed_kernel": rec["kernel"],
                    "message": f"{rec['kernel']} for {target.get('name')} ({tgt.arch}): "
                               f"{describe_exception(exc)}", "artifacts": arts}
        names = list(jf.arg_names)
        spec = {"fn": jf, "signature": signature,
                "constexprs": {names[k[0]] if isinstance(k, tuple) and len(k) == 1 else str(k): v
                               for k, v in constexprs.items()},
                "grid": rec.get("grid")}
        try:
            art = build_artifact(compiled, spec, target, artifact_dir)
        except (ElfError, KeyError, ValueError) as exc:
            return {"status": "compile_error", "failed_kernel": rec["kernel"],
                    "message": f"the code object of {rec['kernel']} could not be read: "
                               f"{describe_exception(exc)}", "artifacts": arts}
        art["launch_indices"] = [i]
        art["constexprs"] = {k: (v if isinstance(v, (int, float, bool, str)) or v is None else str(v))
                             for k, v in spec["constexprs"].items()}
        seen[key] = len(arts)
        arts.append(art)
        limit = check_target_limits(art, target)
        if limit:
            return {"status": "resource_error", "failed_kernel": rec["kernel"],
                    "message": f"{rec['kernel']}: {limit}", "artifacts": arts}
    _ = CompileFailure  # (same classification as the template path)
    return {"status": "ok", "message": "", "artifacts": arts}


class TimedBinaries:
    """Inside the with block, the code objects actually launched: JITFunction.run
    (every ``kernel[grid](...)``, through Autotuner / Heuristics too) wrapped at
    class level, its CompiledKernel's binary (``kernel.kernel``: the cubin /
    hsaco bytes Triton loaded with the driver, ``asm['cubin' | 'hsaco']``)
    hashed once per CompiledKernel. ``modules``: only kernels defined there
    (None: all). Restored on exit. The wrapper adds one dict look-up per launch
    (the benchmark's GPU spin covers host time)."""

    def __init__(self, modules: set[str] | None = None):
        self.modules = modules
        self.seen: dict[int, dict] = {}
        self._cls = None
        self._orig = None

    def __enter__(self):
        from triton.runtime.jit import JITFunction
        import hashlib
        orig = JITFunction.run
        me = self

        def run(kernel, *args, grid, warmup, **kwargs):
            ret = orig(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            if warmup or ret is None:
                return ret
            fn = getattr(kernel, "fn", None)
            if me.modules is not None and getattr(fn, "__module__", None) not in me.modules:
                return ret
            rec = me.seen.get(id(ret))
            if rec is None:
                blob = getattr(ret, "kernel", None)
                if isinstance(blob, str):
                    blob = blob.encode()
                backend = str(getattr(getattr(ret.metadata, "target", None), "backend", "") or "")
                rec = me.seen[id(ret)] = {
                    "kernel": getattr(ret, "name", None), "kind": "hsaco" if backend == "hip" else "cubin",
                    "sha256": hashlib.sha256(blob).hexdigest() if isinstance(blob, bytes) else None,
                    "launches": 0, "_keep": ret}
            rec["launches"] += 1
            return ret

        run.__wrapped__ = orig
        self._cls, self._orig = JITFunction, orig
        JITFunction.run = run
        return self

    def __exit__(self, *exc):
        if self._cls is not None:
            self._cls.run = self._orig
        return False

    def describe(self) -> dict:
        """{"binary_sha256": the timed binary (the first launched), "binaries":
        every distinct one with its kernel name, kind and launch count}."""
        bins = [{k: v for k, v in r.items() if k != "_keep"} for r in self.seen.values()]
        return {"binary_sha256": bins[0]["sha256"] if bins else None, "binaries": bins}


def same_device(target: dict | None, exec_arch: str | None) -> bool:
    """Whether the job's target is the executing device's architecture."""
    if not target or not exec_arch:
        return False
    arch = str(target.get("arch") or "").lower()
    if exec_arch.startswith("sm_"):
        from .targetcompile import cuda_capability
        try:
            return cuda_capability(arch) == int(exec_arch[3:])
        except ValueError:
            return False
    return arch.split(":")[0] == exec_arch.lower()


def match_timed(artifacts: list[dict], latency: dict | None, target: dict | None,
                exec_arch: str | None) -> str | None:
    """Marks each artifact with the binary timed for its kernel
    (``timed_sha256``) and whether they are the same (``timed_match``; None
    when the target is not the executing device, so nothing of it was timed).
    Returns a message when the target is the executing device and a shipped
    code object is not the binary that was timed, else None."""
    bins = (latency or {}).get("binaries") or []
    by_name: dict[str, list[str]] = {}
    for b in bins:
        by_name.setdefault(b.get("kernel"), []).append(b.get("sha256"))
    here = same_device(target, exec_arch)
    bad = None
    for a in artifacts:
        if not isinstance(a, dict):
            continue
        timed = by_name.get(a.get("kernel_name")) or []
        a["timed_sha256"] = timed[0] if len(timed) == 1 else (timed or None)
        if not here or not bins:
            a["timed_match"] = None
            a["timed_check"] = ("the target is not the executing device: nothing of it was timed"
                                if not here else "no timed launch went through JITFunction.run")
            continue
        a["timed_match"] = a.get("sha256") in timed
        if not a["timed_match"] and bad is None:
            bad = (f"the code object shipped for {a.get('kernel_name')} (sha256 {str(a.get('sha256'))[:16]}) "
                   f"is not the binary timed on this device ({', '.join(str(t)[:16] for t in timed) or 'none'})")
    return bad


def untimed(artifacts: list[dict]) -> None:
    """On the CPU (the Triton interpreter) no binary runs: timed_sha256 null."""
    for a in artifacts:
        if isinstance(a, dict):
            a["timed_sha256"] = None
            a["timed_match"] = None
            a["timed_check"] = "not timed: the Triton interpreter runs no binary"
