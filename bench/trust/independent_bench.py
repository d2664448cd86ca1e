#!/usr/bin/env python3
"""An independent check of a Kiln package's numbers: nothing of Kiln's timing,
loader or checker is used.

Each packaged cubin (rank-0 variant of every kernel, kiln-package/2) is loaded
with the CUDA driver API through ctypes (cuModuleLoadData, cuModuleGetFunction,
cuLaunchKernel; TMA descriptors encoded here with cuTensorMapEncodeTiled;
the tensors a variant names in `zero_before_launch` cleared before each launch), its
launch built from the manifest alone (grid and scalar expressions evaluated here
by Python's own arithmetic), run on torch.randn inputs, compared with the
operator's PyTorch reference computed in float64, and timed with `triton.testing.do_bench` (its own
L2 flush, CUDA events, median). In the same harness and the same process it
times torch eager on the same inputs (and, for matmul-like operators, the
cuBLAS GEMM alone). The catalog's numbers it compares against come from the
manifest (`confirmed.median_ms`, else `value_ms`).

    python3 bench/trust/independent_bench.py PKG [--json OUT.json] [--rounds 3]

Prints a table: kernel, correct, do_bench ms (median of rounds), catalog ms,
difference, torch eager ms, speedup.

Correct: every output finite, and its worst |error| / (tol + tol |ref|) (tol
1e-4 for fp32, 1e-2 for fp16 / bf16) at most 4 -- or at most twice torch
eager's own worst on the same inputs against the same float64 reference, where
that is larger: a fixed tolerance does not grow with a long reduction, and
PyTorch's own fp32 GEMM of 256x256 by K=524288 reads 7.3 by it (on a CPU).
Both worsts are in the JSON (`worst_err_over_tol`, `eager_worst_err_over_tol`).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import statistics
import sys

import torch
import triton.testing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64,
      "i32": torch.int32, "i64": torch.int64}
TMA_DTYPE = {"fp16": 6, "bf16": 9, "fp32": 7}  # CUtensorMapDataType


def ev(expr: str, shape: list[int]) -> int:
    """Evaluates a manifest expression with Python's own integer arithmetic."""
    if not re.fullmatch(r"[0-9s+\-*/%(), cdivminax]*", expr):
        raise ValueError(f"unexpected expression {expr!r}")
    env = {f"s{i}": int(d) for i, d in enumerate(shape)}
    env.update(cdiv=lambda a, b: -(-a // b), min=min, max=max)
    return int(eval(expr, {"__builtins__": {}}, env))


class Driver:
    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the primary context, current on this thread

    def check(self, rc, what):
        if rc != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(rc, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {rc} {s.value.decode() if s.value else ''}")

    def load(self, image: bytes, name: str, shared: int):
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        buf = ctypes.create_string_buffer(image, len(image))
        self.check(self.cu.cuModuleLoadData(ctypes.byref(mod), buf), "cuModuleLoadData")
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
        if shared > 48 * 1024:
            self.check(self.cu.cuFuncSetAttribute(fn, 8, ctypes.c_int(shared)), "cuFuncSetAttribute")
        return fn

    def tensormap(self, t: torch.Tensor, b: dict, shape):
        dims = [ev(str(e), shape) for e in b["dims"]]
        strides = [ev(str(e), shape) for e in b["strides_bytes"]]
        box = [int(x) for x in b["box"]]
        esize = t.element_size()
        swz = {0: 0, 32: 1, 64: 2, 128: 3}[int(b["swizzle_bytes"])]
        # Triton's host launcher: the innermost dimension first
        rank = len(dims)
        gdim = (ctypes.c_uint64 * rank)(*reversed(dims))
        gstride = (ctypes.c_uint64 * max(rank - 1, 1))(*reversed(strides))
        boxdim = (ctypes.c_uint32 * rank)(*reversed(box))
        estr = (ctypes.c_uint32 * rank)(*([1] * rank))
        tmap = (ctypes.c_uint8 * 128)()
        self.check(self.cu.cuTensorMapEncodeTiled(
            ctypes.byref(tmap), ctypes.c_int(TMA_DTYPE[b["elem"]]), ctypes.c_uint32(rank),
            ctypes.c_void_p(t.data_ptr()), gdim, gstride, boxdim, estr,
            ctypes.c_int(0), ctypes.c_int(swz), ctypes.c_int(2), ctypes.c_int(0)),
            "cuTensorMapEncodeTiled")
        del esize
        return tmap


def scalar(ty: str, v):
    if ty in ("i32", "u32", "i1"):
        return ctypes.c_int32(int(v))
    if ty in ("i64", "u64"):
        return ctypes.c_int64(int(v))
    if ty == "fp32":
        return ctypes.c_float(float(v))
    if ty == "fp64":
        return ctypes.c_double(float(v))
    raise ValueError(f"scalar type {ty}")


def make_launch(drv: Driver, pkg: str, k: dict, v: dict, tensors: list[torch.Tensor]):
    shape = k["shape"]
    with open(os.path.join(pkg, v["file"]), "rb") as f:
        image = f.read()
    if v["file"].endswith(".co"):
        raise RuntimeError("bundles are AMD-only; this harness loads cubins")
    fn = drv.load(image, v["kernel_name"], int(v.get("shared_bytes") or 0))
    grid = [ev(str(e), shape) for e in v["grid"]]
    keep, ptrs = [], []
    for a in v["args"]:
        b = a["bind"]
        if "tensor" in b:
            c = ctypes.c_void_p(tensors[b["tensor"]].data_ptr())
        elif "expr" in b:
            c = scalar(a["type"], ev(str(b["expr"]), shape))
        elif "value" in b:
            c = scalar(a["type"], b["value"])
        elif "scratch" in b:
            size = int(v.get(f"{b['scratch']}_scratch_size") or 0)
            if size:
                buf = torch.empty(size * math.prod(grid) + 256, dtype=torch.uint8, device="cuda")
                keep.append(buf)
                c = ctypes.c_void_p(buf.data_ptr())
            else:
                c = ctypes.c_void_p(0)
        elif "tma" in b:
            c = drv.tensormap(tensors[b["tma"]["tensor"]], b["tma"], shape)
        else:
            raise RuntimeError(f"argument {a['name']}: unknown binding {b}")
        keep.append(c)
        ptrs.append(ctypes.cast(ctypes.byref(c), ctypes.c_void_p))
    params = (ctypes.c_void_p * len(ptrs))(*ptrs)
    block = v["block"]
    shared = int(v.get("shared_bytes") or 0)
    # zero_before_launch: the tensors (by argument name) a split-K kernel adds
    # into; cleared on the launch's stream before every launch (timed with it)
    by_name = {a["name"]: a["bind"] for a in v["args"]}
    zero = [tensors[by_name[n]["tensor"]] for n in v.get("zero_before_launch") or []]

    def launch():
        for t in zero:
            t.zero_()
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        drv.check(drv.cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                        shared, stream, params, None), "cuLaunchKernel")
    launch.keep = (keep, params)
    return launch


def template_module(k: dict):
    """The operator's template module (kernels/<family>.py, by kernels/operators.yaml)."""
    import yaml
    with open(os.path.join(ROOT, "kernels", "operators.yaml")) as f:
        entry = yaml.safe_load(f)["operators"][k["operator"]]
    return __import__(f"kernels.{entry['module']}", fromlist=["reference"])


def reference_fn(k: dict):
    """The operator's PyTorch reference (inputs by name), the same module the
    catalog's checks used -- a definition of the operator, not Kiln's timing."""
    mod = template_module(k)
    return lambda ins: mod.reference(k["operator"], ins, k.get("params") or {})


def eager_fn(k: dict):
    """What a PyTorch user calls: the template's `eager` hook (SDPA for
    attention), else its reference."""
    mod = template_module(k)
    fn = getattr(mod, "eager", None) or mod.reference
    return lambda ins: fn(k["operator"], ins, k.get("params") or {})


def judge(outs, eouts, refs, dtype: str) -> tuple[bool, float, float]:
    """(correct, worst, eager's worst): the outputs against the float64
    references by |error| / (tol + tol |ref|), the module docstring's rule."""
    tol = 1e-2 if dtype in ("fp16", "bf16") else 1e-4
    finite, worst, eworst = True, 0.0, 0.0
    for o, e, r in zip(outs, eouts, refs):
        r = r.to(torch.float64).reshape(o.shape)
        bound = tol + tol * r.abs()
        finite &= bool(torch.isfinite(o.double()).all())
        worst = max(worst, float(((o.double() - r).abs() / bound).max()))
        eworst = max(eworst, float(((e.double().reshape(o.shape) - r).abs() / bound).max()))
    return finite and worst <= max(4.0, 2.0 * eworst), worst, eworst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pkg")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="regex over operator names")
    args = ap.parse_args()
    with open(os.path.join(args.pkg, "manifest.json")) as f:
        man = json.load(f)
    drv = Driver()
    rows = []
    for k in man["kernels"]:
        if args.only and not re.search(args.only, k["operator"]):
            continue
        cands = [v for v in k["variants"] if v.get("rank", 0) == 0 and v["file"].endswith(".cubin")]
        if not cands:
            continue
        v = cands[0]
        shape = k["shape"]
        row = {"operator": k["operator"], "shape": shape, "dtype": k["dtype"], "file": v["file"]}
        try:
            tens = []
            for t in k["tensors"]:
                tshape = [ev(str(e), shape) for e in t["shape"]]
                dt = DT[t["dtype"]]
                if t["role"] == "input":
                    tens.append(torch.randn(tshape, device="cuda").to(dt) if dt.is_floating_point
                                else torch.randint(0, 7, tshape, device="cuda", dtype=dt))
                else:  # poisoned: NaN, or an integer output's largest value (argmax / argmin)
                    poison = float("nan") if dt.is_floating_point else torch.iinfo(dt).max
                    tens.append(torch.full(tshape, poison, device="cuda", dtype=dt))
            launch = make_launch(drv, args.pkg, k, v, tens)
            launch()
            torch.cuda.synchronize()
            ins = {d["name"]: t for t, d in zip(tens, k["tensors"]) if d["role"] == "input"}
            outs = [t for t, d in zip(tens, k["tensors"]) if d["role"] == "output"]
            ref = reference_fn(k)({n: x.double() if x.is_floating_point() else x for n, x in ins.items()})
            refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
            eager_call = eager_fn(k)
            eout = eager_call(ins)
            eouts = list(eout) if isinstance(eout, (tuple, list)) else [eout]
            row["correct"], row["worst_err_over_tol"], row["eager_worst_err_over_tol"] = \
                judge(outs, eouts, refs, k["dtype"])
            del eout, eouts
            ms = [triton.testing.do_bench(launch, warmup=50, rep=300, return_mode="median")
                  for _ in range(args.rounds)]
            row["ms"] = statistics.median(ms)
            row["ms_rounds"] = ms
            eager = lambda: eager_call(ins)  # noqa: E731
            row["eager_ms"] = statistics.median(
                [triton.testing.do_bench(eager, warmup=50, rep=300, return_mode="median")
                 for _ in range(args.rounds)])
            if k["operator"] in ("matmul", "gemm_bias_act"):
                a, b = list(ins.values())[:2]
                row["cublas_gemm_ms"] = statistics.median(
                    [triton.testing.do_bench(lambda: a @ b if a.shape[-1] == b.shape[0] else a @ b.t(),
                                             warmup=50, rep=300, return_mode="median")
                     for _ in range(args.rounds)])
        except Exception as e:  # one kernel's failure is its row, not the run's end
            row["error"] = f"{type(e).__name__}: {e}"
        cat = (v.get("confirmed") or {}).get("median_ms") or v.get("value_ms")
        row["catalog_ms"] = cat
        rows.append(row)
    print(f"{'kernel':34} {'ok':>3} {'do_bench':>9} {'catalog':>9} {'diff':>7} {'eager':>9} {'speedup':>7}")
    for r in rows:
        name = f"{r['operator']} {'x'.join(map(str, r['shape']))} {r['dtype']}"
        if "error" in r:
            print(f"{name[:34]:34} ERR {r['error'][:80]}")
            continue
        diff = (r["ms"] / r["catalog_ms"] - 1) * 100 if r.get("catalog_ms") else float("nan")
        print(f"{name[:34]:34} {'yes' if r['correct'] else 'NO':>3} {r['ms']:9.4f} "
              f"{(r['catalog_ms'] or float('nan')):9.4f} {diff:+6.1f}% {r['eager_ms']:9.4f} "
              f"{r['eager_ms'] / r['ms']:6.2f}x")
    sp = [r["eager_ms"] / r["ms"] for r in rows if r.get("correct") and r.get("ms") and r.get("eager_ms")]
    if sp:
        gm = math.exp(sum(math.log(x) for x in sp) / len(sp))
        print(f"geometric-mean speedup over eager (this harness, {len(sp)} correct kernels): {gm:.3f}x; "
              f"at or above 1.0x: {sum(x >= 1.0 for x in sp)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, f, indent=1)
    return 0 if all(r.get("correct") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
