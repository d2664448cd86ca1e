"""Launch metadata of the template families added for structural retrieval
(bmm, softmax_variants, scan, reduce_dim, norm_dim, pool, pointwise), with each
family's own Python launcher as the oracle (tests/python/launch_oracle.py: its
`launch` run with the kernel call intercepted).

    TRITON_INTERPRET=1 python3 -m pytest -q tests/python/test_launch_new_families.py

* launch_exprs' tensors, grid and argument expressions, evaluated at several
  shapes for every config of the family's space on two targets, equal what
  the launcher passes (grid, which tensor each pointer is, every integer and
  float argument), and the launcher's constexprs are compile_spec's (the
  code object packaged is the one the launcher runs);
* through a real worker: `evaluate` (Triton interpreter + a real cross-compile
  to an sm_90 cubin) then `package_info` with neighbours; the answer's texts,
  evaluated at the job shape and at every verified neighbour, bind the
  compiled kernel's parameters as the launcher does there.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
HOME = Path(__file__).resolve().parents[2]
for p in (str(HOME / "worker"), str(HOME), str(HOME / "tests" / "python"),
          str(HOME / "tests" / "python" / "fixtures")):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from kiln_worker.packaging import launch_exprs, package_info  # noqa: E402
from kiln_worker.packaging.shape_expr import evaluate  # noqa: E402
from kiln_worker.evaluation.templates import Library  # noqa: E402
from launch_oracle import launcher_call  # noqa: E402
from worker_client import TARGET_H200, TARGET_MI300X, Worker, worker_env  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="runs the templates under TRITON_INTERPRET=1")

LIB = Library(HOME / "kernels")
NEW_MODULES = ("bmm", "softmax_variants", "scan", "reduce_dim", "norm_dim", "pool", "pointwise")

# (op, dtype, params, shapes): shapes cross the branches the templates take
# (one-pass vs looped, inner 1 vs not, transposed operands, odd sizes)
CASES = [
    ("bmm", "fp16", {}, [[2, 40, 24, 33], [3, 64, 48, 32], [1, 16, 1, 64]]),
    ("bmm", "fp32", {"trans_a": True, "trans_b": True}, [[2, 17, 30, 40], [1, 64, 64, 16]]),
    ("bmm", "bf16", {"trans_b": True}, [[4, 33, 8, 20]]),
    # split-K (few tiles, long K) and the matrix-vector kernel (N == 1, M == 1)
    ("bmm", "fp32", {"trans_a": True}, [[1, 32, 40, 4000], [2, 40, 1, 3000], [1, 1, 50, 2000]]),
    ("bmm", "fp32", {"trans_b": True}, [[2, 24, 1, 2100], [1, 1, 33, 4096]]),
    ("scaled_softmax", "fp32", {"scale": 0.125}, [[6, 40], [3, 5000], [1, 33]]),
    ("log_softmax", "bf16", {"scale": 1.0}, [[7, 100], [2, 40000]]),
    ("cumsum", "fp32", {}, [[5, 100], [3, 9000], [1, 1]]),
    ("cumprod", "fp16", {}, [[4, 300], [2, 3000]]),
    ("reduce_dim", "fp32", {"kind": "sum"}, [[4, 50, 1], [3, 20, 70], [1, 7, 300]]),
    ("reduce_dim", "fp16", {"kind": "argmax"}, [[2, 33, 17], [5, 100, 1]]),
    ("reduce_dim", "bf16", {"kind": "amin"}, [[2, 9, 40]]),
    ("norm_dim", "fp32", {"kind": "rms", "eps": 1e-6}, [[4, 64, 1], [2, 30, 50]]),
    ("norm_dim", "bf16", {"kind": "l2"}, [[3, 17, 9]]),
    ("pool2d", "fp32", {"kind": "max", "kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2,
                        "pad_h": 1, "pad_w": 1, "dilation_h": 1, "dilation_w": 1},
     [[2, 3, 9, 10], [1, 4, 16, 16], [1, 1, 3, 3]]),
    ("pool2d", "fp16", {"kind": "avg", "kernel_h": 2, "kernel_w": 4, "stride_h": 1, "stride_w": 3,
                        "pad_h": 0, "pad_w": 2, "dilation_h": 1, "dilation_w": 1}, [[2, 2, 7, 11]]),
    ("pool2d", "fp32", {"kind": "max", "kernel_h": 1, "kernel_w": 3, "stride_h": 1, "stride_w": 2,
                        "pad_h": 0, "pad_w": 1, "dilation_h": 1, "dilation_w": 2}, [[3, 4, 1, 40]]),
    ("pointwise", "fp32", {"expr": "(mul (silu x0) x1)", "inputs": "full,full"}, [[6, 40], [1, 1000]]),
    ("pointwise", "bf16", {"expr": "(add (gelu_tanh (add x0 x1)) (mul x2 0.5))", "inputs": "full,row,col"},
     [[5, 70], [33, 16]]),
]
IDS = [f"{op}-{dtype}-{i}" for i, (op, dtype, _, _) in enumerate(CASES)]


def _params(op, params):
    """The params as a job carries them: operators.yaml's defaults filled in."""
    spec = LIB.operators[op].get("params") or {}
    out = {k: v["default"] for k, v in spec.items() if isinstance(v, dict) and "default" in v}
    out.update(params)
    return out


def _configs(op, shape, dtype, params, target):
    mod = LIB.launch_module(op)
    out = []
    for c in mod.config_space(op, shape, dtype, params, target):
        try:
            mod.compile_spec(op, shape, dtype, params, c, target)
        except ValueError:
            continue
        out.append(c)
    return out


def assert_launch_is_the_launchers(op, shape, dtype, params, config, target, L=None, where=""):
    """launch_exprs (or the given Launch) at `shape` against the launcher's call."""
    L = L or launch_exprs.launch(LIB, op, len(shape), dtype, params, config, target)
    want = launcher_call(LIB, op, shape, dtype, params, config)
    where = where or f"{op} {shape} {dtype} {params} {config} {target['name']}"
    assert [e.eval(shape) for e in L.grid] == want["grid"], where
    got_t = [{"shape": [e.eval(shape) for e in t["shape"]], "dtype": t["dtype"]} for t in L.tensors]
    assert got_t == want["tensors"], where
    mod = LIB.launch_module(op)
    spec, spec_args = package_info.traced_spec(LIB, mod, op, shape, dtype, params, config, target)
    floats = {n: v for n, ty, v in spec_args if ty.startswith("fp")}
    passed = set()
    for name, (kind, v) in want["args"].items():
        if kind == "constexpr":
            assert dict(spec["constexprs"]).get(name) == v, (where, name, v)
            continue
        passed.add(name)
        if kind == "tensor":
            assert L.pointers.get(name) == v, (where, name)
        elif kind == "int" and name not in L.ints and v == 1:
            # Triton's constant 1: not a parameter of the code object, which has it built in
            assert dict(spec["constexprs"]).get(name) == 1, (where, name)
        elif kind == "int":
            assert name in L.ints and L.ints[name].eval(shape) == v, (where, name, v)
        else:
            assert name in floats and np.float32(floats[name]) == np.float32(v), (where, name, v)
    assert set(L.pointers) | set(L.ints) <= passed, (where, set(L.pointers) | set(L.ints))
    return want


def test_every_template_module_has_launch_expressions():
    """kiln package refuses a module without them: every module of
    operators.yaml has an entry."""
    assert set(LIB.modules()) <= set(launch_exprs.modules()), set(LIB.modules()) - set(launch_exprs.modules())
    assert set(NEW_MODULES) <= set(launch_exprs.modules())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_launch_expressions_equal_the_launcher(case):
    op, dtype, params, shapes = case
    params = _params(op, params)
    checked = 0
    for target in (TARGET_H200, TARGET_MI300X):
        for shape in shapes:
            for config in _configs(op, shape, dtype, params, target):
                L = launch_exprs.launch(LIB, op, len(shape), dtype, params, config, target)
                assert_launch_is_the_launchers(op, shape, dtype, params, config, target, L)
                # the same texts a package carries, at the other shapes of the case
                # where compile_spec gives this config the same code object
                base, _ = package_info.traced_spec(LIB, LIB.launch_module(op), op, shape, dtype, params, config,
                                                   target)
                for other in shapes:
                    if other == shape:
                        continue
                    try:
                        o, _ = package_info.traced_spec(LIB, LIB.launch_module(op), op, other, dtype, params,
                                                        config, target)
                    except ValueError:
                        continue
                    if package_info.base_serves(base, o) is None:
                        assert_launch_is_the_launchers(op, other, dtype, params, config, target, L)
                checked += 1
    assert checked >= len(shapes), checked


# ---------------------------------------------------------------------------
# through a real worker: a real compile for sm_90, package_info with neighbours
# ---------------------------------------------------------------------------

WORKER_CASES = [
    ("bmm", [2, 24, 20, 32], "fp16", {"trans_b": True},
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 2, "num_stages": 2}),
    ("bmm", [2, 16, 24, 200], "fp32", {"trans_b": True},
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "SPLIT_K": 4, "num_warps": 2, "num_stages": 2}),
    ("bmm", [2, 40, 1, 300], "fp32", {"trans_a": True},
     {"gemv": 1, "BLOCK_M": 16, "BLOCK_K": 32, "SPLIT_K": 2, "num_warps": 2, "num_stages": 2}),
    ("bmm", [1, 1, 48, 100], "fp16", {},
     {"gemv": 1, "BLOCK_M": 32, "BLOCK_K": 16, "SPLIT_K": 1, "num_warps": 2, "num_stages": 2}),
    ("scaled_softmax", [6, 40], "fp32", {"scale": 0.5},
     {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1}),
    ("log_softmax", [4, 100], "fp16", {"scale": 1.0},
     {"BLOCK_M": 1, "BLOCK_N": 32, "num_warps": 1, "num_stages": 1}),
    ("cumsum", [5, 90], "fp32", {}, {"BLOCK_M": 2, "BLOCK_N": 32, "num_warps": 1, "num_stages": 1}),
    ("cumprod", [3, 40], "fp32", {}, {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 2, "num_stages": 1}),
    ("reduce_dim", [3, 20, 24], "fp32", {"kind": "argmax"},
     {"BLOCK_R": 8, "BLOCK_I": 16, "num_warps": 1, "num_stages": 1}),
    ("norm_dim", [2, 30, 1], "fp16", {"kind": "rms", "eps": 1e-5},
     {"BLOCK_R": 16, "BLOCK_I": 1, "num_warps": 1, "num_stages": 1}),
    ("pool2d", [1, 3, 9, 10], "fp32", {"kind": "max", "kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2,
                                       "pad_h": 1, "pad_w": 1},
     {"BLOCK": 128, "num_warps": 4, "num_stages": 1}),
    ("pointwise", [6, 40], "fp32", {"expr": "(add (mul (silu x0) x1) x2)", "inputs": "full,full,row"},
     {"BLOCK": 256, "num_warps": 2, "num_stages": 1}),
    ("pointwise", [5, 48], "bf16", {"expr": "(mul (log x0) (rsqrt x1))", "inputs": "full,col"},
     {"BLOCK": 256, "num_warps": 2, "num_stages": 1}),
]


@pytest.fixture(scope="module")
def worker():
    w = Worker(worker_env(kernels_dir=None, KILN_PTXAS_SPILLS="0"))
    yield w
    assert w.close() == 0, w.stderr[-3000:]


def _as_launch(result) -> launch_exprs.Launch:
    """package_info's answer (texts) read back as a Launch, as a loader reads it."""
    from kiln_worker.packaging.shape_expr import parse
    L = launch_exprs.Launch()
    for t in result["tensors"]:
        L.tensors.append({"name": t["name"], "role": t["role"], "dtype": t["dtype"],
                          "shape": [parse(e) for e in t["shape"]]})
    L.grid = [parse(g) for g in result["grid"]]
    for a in result["args"]:
        b = a["bind"]
        if "tensor" in b:
            L.pointers[a["name"]] = b["tensor"]
        elif "expr" in b:
            L.ints[a["name"]] = parse(b["expr"])
    return L


@pytest.mark.parametrize("op,shape,dtype,params,config", WORKER_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(WORKER_CASES)])
def test_package_info_for_a_real_cubin_is_the_launchers(worker, op, shape, dtype, params, config):
    params = _params(op, params)
    job = {"op": op, "shape": shape, "dtype": dtype, "params": params, "target": TARGET_H200,
           "validation": {"seeds": 1}, "benchmark": {"runs": 0}}
    ans = worker.call("evaluate", job=job, config=config, artifact_dir=None, timeout=300)
    assert ans["ok"] and ans["result"]["status"] == "ok", ans
    art = ans["result"]["artifact"]
    assert art.get("sha256") and art.get("args"), art
    ans = worker.call("package_info", job=job, config=config, artifact=art, neighbours=True, verify_seed=5,
                      timeout=600)
    assert ans["ok"], ans
    r = ans["result"]
    # the compiled kernel's parameters, in order, each bound; scratch last
    assert [a["name"] for a in r["args"]] == [a["name"] for a in art["args"]]
    assert [a["name"] for a in r["args"]][-2:] == ["global_scratch", "profile_scratch"]
    L = _as_launch(r)
    shapes = [shape] + ([s for s in r["range"]["verified_shapes"] if s != shape] if "dims" in r["range"] else [])
    for s in shapes:
        want = assert_launch_is_the_launchers(op, s, dtype, params, config, TARGET_H200, L,
                                              where=f"{op} packaged for {shape}, launched at {s}")
        # every argument the launcher passes that is not Triton's constant 1 is a parameter of the cubin
        cubin_params = {a["name"] for a in r["args"]}
        spec, _ = package_info.traced_spec(LIB, LIB.launch_module(op), op, s, dtype, params, config, TARGET_H200)
        for name, (kind, v) in want["args"].items():
            if kind != "constexpr" and name not in dict(spec["constexprs"]):
                assert name in cubin_params, (op, s, name)
    for a in r["args"]:
        if "value" in a["bind"]:  # a float scalar: the launcher's value
            want = launcher_call(LIB, op, shape, dtype, params, config)["args"][a["name"]]
            assert want[0] == "float" and np.float32(want[1]) == np.float32(a["bind"]["value"]), (a, want)
    out = [t for t in r["tensors"] if t["role"] == "output"]
    # a split-K kernel adds into its output: the loader must clear it first
    if config.get("SPLIT_K", 1) > 1:
        assert r["zero_before_launch"] == ["c_ptr"], r.get("zero_before_launch")
        assert r["args"][2]["name"] == "c_ptr" and r["args"][2]["bind"] == {"tensor": 2}
    else:
        assert "zero_before_launch" not in r
    if op == "reduce_dim":
        assert out[0]["dtype"] == "i64"
    v = r["verify"]
    assert v["outputs"] and all(np.isfinite(o["sum"]) for o in v["outputs"])

