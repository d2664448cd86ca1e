"""A template family's own Python launcher as the oracle of a packaged launch.

`launcher_call(lib, op, shape, dtype, params, config)` runs the template's
`launch(op, inputs, out, config, params)` on CPU tensors from its
`make_inputs` / `output_like` with the kernel's `run` intercepted (nothing
executes) and returns what the launcher passed: the grid, and per kernel
argument name either ("tensor", i) -- the index of the tensor in kiln_launch's
order (inputs as make_inputs returns them, then the output) --, ("int", v),
("float", v), or ("constexpr", v); plus the tensors' shapes and dtypes.

Run as a script (TRITON_INTERPRET=1), it answers JSON lines on stdin
({"op", "shape", "dtype", "params", "config"}) with one JSON object each, for
tests that cannot import torch themselves (tests/e2e).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
HOME = Path(__file__).resolve().parents[2]
for p in (str(HOME / "worker"), str(HOME)):
    if p not in sys.path:
        sys.path.insert(0, p)

import torch  # noqa: E402

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int64: "i64"}


@contextlib.contextmanager
def _intercepted(sink: list):
    """Every Triton kernel launch (JIT or interpreted) records its call instead of running."""
    from triton.runtime import interpreter, jit
    classes = [interpreter.InterpretedFunction, jit.JITFunction]
    saved = [c.run for c in classes]

    def run(self, *args, grid, warmup=False, **kwargs):
        sink.append((self, args, grid, kwargs))

    for c in classes:
        c.run = run
    try:
        yield
    finally:
        for c, r in zip(classes, saved):
            c.run = r


def _constexpr_names(fn) -> set:
    inner = getattr(fn, "fn", fn)
    params = getattr(inner, "params", None) or getattr(fn, "params", None) or []
    out = {p.name for p in params if getattr(p, "is_constexpr", False)}
    if not out:  # the interpreter's function: read the annotations
        import inspect
        for name, prm in inspect.signature(getattr(inner, "fn", inner)).parameters.items():
            if "constexpr" in str(prm.annotation):
                out.add(name)
    return out


def launcher_call(lib, op, shape, dtype, params, config) -> dict:
    mod = lib.launch_module(op)
    inputs = mod.make_inputs(op, list(shape), dtype, params, 0, "cpu")
    out = mod.output_like(op, inputs, params)
    tensors = list(inputs.values()) + [out]
    sink: list = []
    with _intercepted(sink):
        mod.launch(op, inputs, out, config, params)
    if len(sink) != 1:
        raise AssertionError(f"{op}: the launcher made {len(sink)} kernel launches, expected 1")
    fn, args, grid, kwargs = sink[0]
    names = list(fn.arg_names)
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    if callable(grid):
        grid = grid(dict(bound))
    grid = [int(g) for g in grid] + [1] * (3 - len(grid))
    constexprs = _constexpr_names(fn)
    out_args = {}
    for name in names:
        v = bound.get(name)
        if name in constexprs:
            out_args[name] = ("constexpr", v)
        elif isinstance(v, torch.Tensor):
            idx = [i for i, t in enumerate(tensors) if t is v]
            if not idx:
                raise AssertionError(f"{op}: argument {name} is a tensor the launcher made itself")
            out_args[name] = ("tensor", idx[0])
        elif isinstance(v, bool):
            out_args[name] = ("int", int(v))
        elif isinstance(v, int):
            out_args[name] = ("int", v)
        elif isinstance(v, float):
            out_args[name] = ("float", v)
        else:
            raise AssertionError(f"{op}: argument {name} = {v!r}: not a tensor or scalar")
    kernel = getattr(getattr(fn, "fn", fn), "__name__", None)
    return {"kernel": kernel, "grid": grid, "args": out_args,
            "tensors": [{"shape": list(t.shape), "dtype": _DTYPES[t.dtype]} for t in tensors]}


def main() -> int:
    from kiln_worker.evaluation.templates import Library
    lib = Library(Path(os.environ.get("KILN_KERNELS_DIR") or HOME / "kernels"))
    for line in sys.stdin:
        if not line.strip():
            continue
        q = json.loads(line)
        try:
            ans = launcher_call(lib, q["op"], q["shape"], q["dtype"], q.get("params") or {}, q["config"])
            ans["args"] = {k: list(v) for k, v in ans["args"].items()}
        except Exception as exc:  # noqa: BLE001
            ans = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(ans), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
