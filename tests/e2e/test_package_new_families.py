"""`kiln package` of the template families added for structural retrieval (bmm,
scaled_softmax / log_softmax, cumsum / cumprod, reduce_dim, norm_dim, pool2d,
pointwise), for real: a catalog run on this machine's CPU (Triton interpreter,
sm_90 cubins cross-compiled), packaged for the H200 by the real worker with
neighbours, then read by libkilnrt (static target, no device) up to the device
boundary: for every kernel, at its job shape and at every verified neighbour
the runtime admits, the launch the runtime resolves (kiln_kernel_plan: grid,
tensor sizes, and every argument as the driver's parameter buffer holds it)
equals what the family's own Python launcher passes at that shape
(tests/python/launch_oracle.py). An operator packaged with two params sets at
one shape is refused without params and found with them. bmm's split-K
kernel (few tiles, long K: the first config of its space) carries
zero_before_launch into its variant and the runtime's plan; its
matrix-vector kernel (N == 1) and the plain tiles carry none.

    KILN_BIN=$PWD/build/kiln python3 -m pytest -q tests/e2e/test_package_new_families.py
"""
import ctypes
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import OpenOptions, kilnrt
from test_e2e import KILN, ROOT, db_rows, kiln

MANIFEST = """name: newfamilies
targets: [H200]
defaults:
  exploration: {strategy: exhaustive, max_candidates: 1, timeout_s: 300}
  validation: {seeds: 1}
  benchmark: {warmup: 1, runs: 2}
operators:
  - {op: bmm, input_shape: [2, 24, 20, 32], dtypes: [fp16], params: {trans_b: true}}
  - {op: bmm, input_shape: [1, 16, 16, 512], dtypes: [fp32]}
  - {op: bmm, input_shape: [1, 24, 1, 1024], dtypes: [fp32], params: {trans_a: true}}
  - {op: scaled_softmax, input_shape: [6, 40], dtypes: [fp32], params: {scale: 0.5}}
  - {op: log_softmax, input_shape: [4, 100], dtypes: [fp16]}
  - {op: cumsum, input_shape: [5, 90], dtypes: [fp32]}
  - {op: cumprod, input_shape: [3, 40], dtypes: [bf16]}
  - {op: reduce_dim, input_shape: [3, 20, 24], dtypes: [fp32], params: {kind: argmax}}
  - {op: reduce_dim, input_shape: [3, 20, 24], dtypes: [fp32], params: {kind: sum}}
  - {op: norm_dim, input_shape: [2, 30, 8], dtypes: [fp16], params: {kind: l2}}
  - {op: pool2d, input_shape: [1, 3, 9, 10], dtypes: [fp32],
     params: {kind: max, kernel_h: 3, kernel_w: 3, stride_h: 2, stride_w: 2, pad_h: 1, pad_w: 1}}
  - {op: pointwise, input_shape: [6, 40], dtypes: [fp32],
     params: {expr: "(add (mul (silu x0) x1) x2)", inputs: "full,full,row"}}
"""
FAMILIES = {"bmm", "scaled_softmax", "log_softmax", "cumsum", "cumprod", "reduce_dim", "norm_dim", "pool2d",
            "pointwise"}


class Runtime:
    """A package opened by libkilnrt for the H200 target, no device."""

    def __init__(self, pkg):
        self.lib = kilnrt()
        self.h = ctypes.c_void_p()
        opts = OpenOptions(ctypes.sizeof(OpenOptions), None, b"H200", 0)
        assert self.lib.kiln_package_open(str(pkg).encode(), ctypes.byref(opts), ctypes.byref(self.h)) == 0, \
            self.lib.kiln_last_error()

    def find(self, op, shape, dtype, params=None):
        """(status, plan dict or error text, tensor bytes)."""
        k = ctypes.c_void_p()
        dims = (ctypes.c_int64 * len(shape))(*shape)
        if params is None:
            rc = self.lib.kiln_kernel_find(self.h, op.encode(), dims, len(shape), dtype.encode(), ctypes.byref(k))
        else:
            rc = self.lib.kiln_kernel_find_params(self.h, op.encode(), json.dumps(params).encode(), dims,
                                                  len(shape), dtype.encode(), ctypes.byref(k))
        if rc != 0:
            return rc, self.lib.kiln_last_error().decode(), None
        plan = json.loads(self.lib.kiln_kernel_plan(k).decode())
        nbytes = [self.lib.kiln_kernel_tensor_bytes(k, i) for i in range(len(plan["numel"]))]
        self.lib.kiln_kernel_free(k)
        return 0, plan, nbytes

    def close(self):
        self.lib.kiln_package_close(self.h)


class Oracle:
    """tests/python/launch_oracle.py as a process: the launchers' calls."""

    def __init__(self):
        env = dict(os.environ, TRITON_INTERPRET="1")
        self.p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "python" / "launch_oracle.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def __call__(self, op, shape, dtype, params, config):
        self.p.stdin.write(json.dumps({"op": op, "shape": shape, "dtype": dtype, "params": params,
                                       "config": config}) + "\n")
        self.p.stdin.flush()
        ans = json.loads(self.p.stdout.readline())
        assert "error" not in ans, (op, shape, ans)
        return ans

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")
    tmp = tmp_path_factory.mktemp("newfam")
    cat = tmp / "kiln.db"
    (tmp / "m.yaml").write_text(MANIFEST)
    kiln("submit", tmp / "m.yaml", catalog=cat)
    kiln("run", "--workers", "2", "--scratch", tmp / "scratch", catalog=cat)
    assert db_rows(cat, "SELECT DISTINCT state FROM jobs") == [("done",)]
    r = kiln("package", "--target", "H200", "--out", tmp / "pkg", "--json", catalog=cat)
    return dict(out=tmp / "pkg", result=r.stdout, man=json.loads((tmp / "pkg" / "manifest.json").read_text()))


def test_every_new_family_is_packaged(packaged):
    ops = {k["operator"] for k in packaged["man"]["kernels"]}
    assert FAMILIES <= ops, FAMILIES - ops
    for k in packaged["man"]["kernels"]:
        v = [v for v in k["variants"] if v["rank"] == 0]
        assert v and v[0]["file"].endswith(".cubin") and v[0]["args"] and len(v[0]["grid"]) == 3, k["operator"]
        ver = json.loads((packaged["out"] / v[0]["verify"]).read_text())
        assert ver["shape"] == k["shape"] and ver["outputs"], k["operator"]
        assert all(math.isfinite(o["sum"]) for o in ver["outputs"]), k["operator"]


def test_runtime_resolves_the_launchers_launch(packaged):
    """For every kernel, at its shape and every verified neighbour: the plan
    libkilnrt resolves equals the family's launcher's call."""
    rt, oracle = Runtime(packaged["out"]), Oracle()
    checked = []
    try:
        for k in packaged["man"]["kernels"]:
            op, dtype, params = k["operator"], k["dtype"], k["params"]
            (var,) = [v for v in k["variants"] if v["rank"] == 0]
            shapes = [k["shape"]] + [s for s in var["range"].get("verified_shapes", []) if s != k["shape"]]
            for shape in shapes:
                where = f"{op} {params} packaged at {k['shape']}, launched at {shape}"
                rc, plan, nbytes = rt.find(op, shape, dtype, params)
                assert rc == 0, (where, plan)
                want = oracle(op, shape, dtype, params, var["config"])
                assert plan["kernel"] == want["kernel"], where
                assert plan["grid"] == want["grid"], (where, plan["grid"], want["grid"])
                assert plan["numel"] == [math.prod(t["shape"]) for t in want["tensors"]], where
                eb = {"fp32": 4, "fp16": 2, "bf16": 2, "i64": 8}
                assert nbytes == [math.prod(t["shape"]) * eb[t["dtype"]] for t in want["tensors"]], where
                by_name = {a["name"]: a for a in plan["args"]}
                for name, (kind, v) in want["args"].items():
                    if kind == "constexpr":
                        continue
                    a = by_name.get(name)
                    if a is None:  # only Triton's constant 1 is no parameter of the code object
                        assert kind == "int" and v == 1, (where, name, v)
                        continue
                    if kind == "tensor":
                        assert a.get("tensor") == v, (where, name, a)
                    elif kind == "int":
                        assert a.get("value") == v, (where, name, a, v)
                    else:
                        assert np.float32(a["value"]) == np.float32(v), (where, name, a, v)
                launcher = {n for n, (kind, _) in want["args"].items() if kind != "constexpr"}
                extra = [a["name"] for a in plan["args"] if "scratch" not in a and a["name"] not in launcher]
                assert extra == [], (where, extra)
                assert [a.get("scratch") for a in plan["args"][-2:]] == ["global", "profile"], where
                checked.append((op, tuple(shape)))
    finally:
        rt.close()
        oracle.close()
    print(f"{len(checked)} resolved launches checked against the launchers, "
          f"{len(packaged['man']['kernels'])} kernels")
    assert {op for op, _ in checked} >= FAMILIES
    # the neighbours the package verified are launched too, not only the job shapes
    assert len(checked) > len(packaged["man"]["kernels"]), checked


def test_split_k_output_is_cleared_before_every_launch(packaged):
    """The split-K bmm adds into its output: its variant names c_ptr, and the
    runtime's plan clears tensor 2 (the output) at the launch's own shape,
    the job's and every verified neighbour's; the other bmm kernels clear
    nothing."""
    by_shape = {tuple(k["shape"]): k for k in packaged["man"]["kernels"] if k["operator"] == "bmm"}
    split = [v for v in by_shape[(1, 16, 16, 512)]["variants"] if v["rank"] == 0][0]
    assert split["config"].get("SPLIT_K", 1) > 1, split["config"]
    assert split["zero_before_launch"] == ["c_ptr"], split
    assert [a["bind"] for a in split["args"] if a["name"] == "c_ptr"] == [{"tensor": 2}]
    gemv = [v for v in by_shape[(1, 24, 1, 1024)]["variants"] if v["rank"] == 0][0]
    assert gemv["config"].get("gemv") == 1 and gemv["kernel_name"] == "bmv_kernel", gemv["config"]
    for k in by_shape.values():
        for v in k["variants"]:
            assert ("zero_before_launch" in v) == (v["config"].get("SPLIT_K", 1) > 1), (k["shape"], v["config"])
    rt = Runtime(packaged["out"])
    try:
        shapes = [[1, 16, 16, 512]] + split["range"].get("verified_shapes", [])
        for shape in shapes:
            rc, plan, nbytes = rt.find("bmm", shape, "fp32")
            assert rc == 0, (shape, plan)
            assert plan["zero_before_launch"] == [{"tensor": 2, "bytes": nbytes[2]}], (shape, plan)
            assert nbytes[2] == shape[0] * shape[1] * shape[2] * 4
        rc, plan, _ = rt.find("bmm", [1, 24, 1, 1024], "fp32", {"trans_a": True})
        assert rc == 0 and plan["zero_before_launch"] == [] and plan["kernel"] == "bmv_kernel", plan
    finally:
        rt.close()


def test_params_pick_the_kernel_and_ambiguity_is_refused(packaged):
    rt = Runtime(packaged["out"])
    try:
        rc, err, _ = rt.find("reduce_dim", [3, 20, 24], "fp32")
        assert rc == 1 and "different params" in err and "argmax" in err and "sum" in err, (rc, err)
        rc, plan, nbytes = rt.find("reduce_dim", [3, 20, 24], "fp32", {"kind": "argmax"})
        assert rc == 0 and nbytes == [3 * 20 * 24 * 4, 3 * 24 * 8], (plan, nbytes)  # int64 indices
        rc, plan, nbytes = rt.find("reduce_dim", [3, 20, 24], "fp32", {"kind": "sum"})
        assert rc == 0 and nbytes == [3 * 20 * 24 * 4, 3 * 24 * 4], (plan, nbytes)
        rc, err, _ = rt.find("reduce_dim", [3, 20, 24], "fp32", {"kind": "amin"})
        assert rc == 11 and "with params" in err, (rc, err)  # KILN_E_NOT_FOUND
        rc, plan, _ = rt.find("cumsum", [5, 90], "fp32")  # one params set: no params needed
        assert rc == 0, plan
        rc, plan, _ = rt.find("pool2d", [1, 3, 9, 10], "fp32", {"kernel_h": 3.0, "stride_w": 2})
        assert rc == 0, plan  # numbers compared by value
    finally:
        rt.close()


def test_kiln_rt_verifies_the_package_statically(packaged):
    rt = Path(KILN).parent / "kiln-rt"
    if not rt.exists():
        pytest.fail(f"{rt} is missing: build first")
    r = subprocess.run([str(rt), "verify", str(packaged["out"]), "--target", "sm_90"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, (r.stdout, r.stderr)  # verified statically only: no device here
    assert " 0 problems" in r.stdout, r.stdout
