"""Structural retrieval (worker/kiln_worker/structural): tracing KernelBench-form
modules under fake tensors, the canonical graph, the family patterns and their
bindings, the reference module as the oracle of a served job, and the worker's
`match` method as a real subprocess.

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_structural.py -q
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "structural"
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
os.environ.setdefault("TRITON_INTERPRET", "1")

from kiln_worker.structural import oracle  # noqa: E402
from kiln_worker.structural.method import match_job  # noqa: E402
from kiln_worker.structural.trace import trace_reference  # noqa: E402
from kiln_worker.evaluation.templates import Library  # noqa: E402

H200 = {"name": "H200", "backend": "cuda", "arch": "sm_90", "warp_size": 32}


@pytest.fixture(scope="module")
def lib():
    return Library(ROOT / "kernels")


def write(tmp_path, name, body):
    p = tmp_path / f"{name}.py"
    p.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + textwrap.dedent(body))
    return p


def m(lib, path, dtype="fp32", tmp="/tmp"):
    return match_job(lib, {"reference": {"path": str(path)}, "dtype": dtype, "target": H200}, str(tmp))


# The hand-written modules of tests/data/structural and what serves them (read off the modules).
EXPECTED = [
    ("rms_manual", "fp32", "rmsnorm", [6, 48], {"eps": 1e-6}),
    ("a_bt", "fp16", "bmm", [1, 32, 48, 64], {"trans_a": False, "trans_b": True}),
    ("a_bt", "fp32", "bmm", [1, 32, 48, 64], {"trans_a": False, "trans_b": True}),
    ("amax", "fp32", "row_max", [16, 100], {}),
    ("bias_tanh_gelu", "fp32", "bias_gelu", [12, 40], {"approximate": "tanh"}),
    ("conv1x1", "fp32", "conv2d", [1, 4, 6, 6], {"out_channels": 8, "kernel_size": 1, "stride": 1, "padding": 0}),
    ("causal_sdpa", "fp16", "attention", [1, 2, 32, 16], {"causal": True, "sm_scale": 0.0}),
    ("swiglu_gate", "fp32", "pointwise", [8, 96], {"expr": "(mul (silu x0) x1)", "inputs": "full,full"}),
    ("temp_softmax", "fp32", "scaled_softmax", [10, 70], {"scale": 2.0}),
    ("affine_ln", "fp32", "layernorm", [20, 64], {"eps": 1e-5}),
    ("linear_gelu", "fp16", "gemm_bias_act", [16, 48, 32], {"activation": "gelu"}),
    ("conv3x3", "fp32", "conv2d", [1, 3, 8, 8], {"out_channels": 8, "kernel_size": 3, "stride": 1, "padding": 1}),
    ("running_total", "fp32", "cumsum", [6, 50], {}),
    ("window_max_1d", "fp32", "pool2d", [2, 3, 1, 37], {"kind": "max", "kernel_w": 4, "stride_w": 2, "pad_w": 2,
                                                        "dilation_w": 2, "kernel_h": 1}),
    ("rms_channels", "fp32", "norm_dim", [2, 6, 35], {"kind": "rms", "eps": 1e-5}),
    ("unit_rows", "fp32", "norm_dim", [9, 130, 1], {"kind": "l2"}),
    ("patch_mean_2d", "fp16", "pool2d", [1, 2, 11, 9], {"kind": "avg", "kernel_h": 3, "stride_h": 2, "pad_h": 1}),
]


@pytest.mark.parametrize("case", EXPECTED, ids=lambda c: c[0])
def test_served_and_the_oracle_agrees(lib, tmp_path, case):
    name, dtype, op, shape, params = case
    ref = {"path": str(DATA / f"{name}.py")}
    r = m(lib, DATA / f"{name}.py", dtype, tmp_path)
    assert r["served"] is True, r
    assert r["score"] == 1.0 and r["op"] == op and r["shape"] == shape, r
    for k, v in params.items():
        assert r["params"][k] == pytest.approx(v) if isinstance(v, float) else r["params"][k] == v, (k, r["params"])
    assert r["space"] > 0 and r["traffic"]["bytes"] > 0
    job = {"op": op, "shape": shape, "dtype": dtype, "params": r["params"], "oracle": {**r["oracle"], "reference": ref}}
    oracle.verify(lib, job)  # raises when the template does not compute what the module computes


def test_plain_matmul_by_dtype(lib, tmp_path):
    """a @ b: the tuned matmul template for half inputs, bmm (IEEE fp32) for fp32."""
    p = write(tmp_path, "mm", """
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)


        def get_inputs():
            return [torch.randn(32, 64), torch.randn(64, 16)]


        def get_init_inputs():
            return []
        """)
    half = m(lib, p, "fp16", tmp_path)
    assert half["served"] and half["op"] == "matmul" and half["shape"] == [32, 16, 64]
    assert any(a["op"] == "bmm" for a in half["alternatives"])
    full = m(lib, p, "fp32", tmp_path)
    assert full["served"] and full["op"] == "bmm" and full["shape"] == [1, 32, 16, 64]


def test_unserved_problem_says_why(lib, tmp_path):
    r = m(lib, DATA / "sorted_rows.py", "fp32", tmp_path)
    assert r["served"] is False and r["score"] == 0.0
    assert "sort" in r["reason"]


def test_oracle_catches_a_wrong_binding(lib, tmp_path):
    """The oracle is real: a binding that says the wrong thing fails the job."""
    ref = {"path": str(DATA / "temp_softmax.py")}
    r = m(lib, DATA / "temp_softmax.py", "fp32", tmp_path)
    job = {"op": "scaled_softmax", "shape": r["shape"], "dtype": "fp32", "params": {"scale": 1.0},  # not 1/T
           "oracle": {**r["oracle"], "reference": ref}}
    with pytest.raises(oracle.OracleMismatch, match="does not compute"):
        oracle.verify(lib, job)
    ref = {"path": str(DATA / "a_bt.py")}
    r = m(lib, DATA / "a_bt.py", "fp16", tmp_path)
    job = {"op": "bmm", "shape": r["shape"], "dtype": "fp16", "params": {"trans_b": False},  # forget keys.t()
           "oracle": {**r["oracle"], "reference": ref}}
    with pytest.raises(oracle.OracleMismatch):
        oracle.verify(lib, job)


EQUIVALENT = {  # each group: modules written differently that compute the same thing
    "rms": ["return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w",
            "return self.w * (x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5))",
            "return x / (x ** 2).mean(dim=x.dim() - 1, keepdim=True).add(1e-5).sqrt() * self.w"],
    "temp": ["return torch.softmax(x / 4.0, dim=-1)", "return F.softmax(x * 0.25, dim=1)",
             "return torch.nn.Softmax(dim=-1)(0.25 * x)"],
}


@pytest.mark.parametrize("group", sorted(EQUIVALENT))
def test_equivalent_spellings_bind_alike(lib, tmp_path, group):
    results = []
    for i, line in enumerate(EQUIVALENT[group]):
        p = write(tmp_path, f"{group}{i}", f"""
            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(torch.randn(64))

                def forward(self, x):
                    {line}


            def get_inputs():
                return [torch.randn(8, 64)]


            def get_init_inputs():
                return []
            """)
        r = m(lib, p, "fp32", tmp_path)
        assert r["served"], (line, r)
        results.append((r["op"], r["shape"], r["params"]))
    assert all(x == results[0] for x in results), results


def test_partial_match_scores_below_threshold(lib, tmp_path):
    p = write(tmp_path, "rms_relu", """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.randn(64))

            def forward(self, x):
                return torch.relu(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w)


        def get_inputs():
            return [torch.randn(8, 64)]


        def get_init_inputs():
            return []
        """)
    r = m(lib, p, "fp32", tmp_path)
    assert r["served"] is False
    assert 0 < r["score"] < 0.8 and "rmsnorm" in r["reason"], r


def test_reductions_over_any_dim_and_arg_reductions(lib, tmp_path):
    p = write(tmp_path, "argmax1", """
        class Model(nn.Module):
            def forward(self, x):
                return torch.argmax(x, dim=1)


        def get_inputs():
            return [torch.randn(4, 30, 7)]


        def get_init_inputs():
            return []
        """)
    r = m(lib, p, "fp32", tmp_path)
    assert r["served"] and r["op"] == "reduce_dim" and r["shape"] == [4, 30, 7] and r["params"] == {"kind": "argmax"}
    oracle.verify(lib, {"op": "reduce_dim", "shape": r["shape"], "dtype": "fp32", "params": r["params"],
                        "oracle": {**r["oracle"], "reference": {"path": str(p)}}})


def test_multiple_outputs_are_not_served(lib, tmp_path):
    p = write(tmp_path, "two", """
        class Model(nn.Module):
            def forward(self, x):
                return x.relu(), x.sigmoid()


        def get_inputs():
            return [torch.randn(4, 8)]


        def get_init_inputs():
            return []
        """)
    r = m(lib, p, "fp32", tmp_path)
    assert r["served"] is False and "2 tensors" in r["reason"]


def test_huge_module_is_traced_without_allocating(tmp_path):
    """get_inputs() of 64 GiB and a 16 GiB parameter: traced under fake tensors in
    a fresh process whose peak memory stays far below either."""
    p = write(tmp_path, "huge", """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(65536, 65536)

            def forward(self, x):
                return F.gelu(self.proj(x))


        def get_inputs():
            return [torch.randn(262144, 65536)]


        def get_init_inputs():
            return []
        """)
    code = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {str(ROOT / 'worker')!r})
        from kiln_worker.structural.trace import trace_reference
        g, facts = trace_reference({{"path": {str(p)!r}}}, {str(tmp_path)!r})
        print(json.dumps({{"text": g.text(), "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                           "shape": facts["inputs"][0]["shape"]}}))
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["shape"] == [262144, 65536]
    assert "mm(" in res["text"] and "gelu(" in res["text"]
    assert res["peak_kib"] < 3 * 1024 * 1024, res["peak_kib"]  # < 3 GiB (torch itself is ~0.5)


def test_worker_match_method(tmp_path):
    from worker_client import TARGET_H200, Worker, worker_env
    w = Worker(env=worker_env(kernels_dir=ROOT / "kernels"))
    try:
        hello = w.call("hello")
        assert "match" in hello["result"]["methods"]
        jobs = [{"reference": {"path": str(DATA / "rms_manual.py")}, "dtype": "fp32", "target": TARGET_H200},
                {"op": "softmax", "shape": [4, 4]},
                {"reference": {"path": str(DATA / "sorted_rows.py")}, "dtype": "fp32", "target": TARGET_H200},
                {"reference": {"path": str(tmp_path / "missing.py")}, "dtype": "fp32", "target": TARGET_H200}]
        ans = w.call("match", jobs=jobs)
        assert ans["ok"], ans
        res = ans["result"]["matches"]
        assert res[0]["served"] and res[0]["op"] == "rmsnorm"
        assert res[1] is None
        assert res[2]["served"] is False and "sort" in res[2]["reason"]
        assert res[3]["served"] is False and "not found" in res[3]["reason"]
        # a served job's space runs the oracle first; a wrong one fails the space request
        job = {"op": "rmsnorm", "shape": res[0]["shape"], "dtype": "fp32", "params": {"eps": 0.5},
               "target": TARGET_H200, "oracle": {**res[0]["oracle"], "reference": jobs[0]["reference"]}}
        bad = w.call("space", job=job)
        assert bad["ok"] is False and "does not compute" in bad["error"], bad
        job["params"] = res[0]["params"]
        good = w.call("space", job=job)
        assert good["ok"] is True and good["result"]["configs"], good
    finally:
        w.close()


def test_oracle_check_holds_the_gpu_alone_and_gives_its_memory_back(lib, tmp_path, monkeypatch):
    """On a GPU the once-per-job full-size check runs alone: its memory-pressure
    notice posted for the other workers and the GPU lock held exclusively
    (concurrent set-ups ran an H200 out of memory on KernelBench's convolutions
    and pointwise problems); on the CPU it takes no lock and posts nothing. Its
    failure still propagates, and the notice is withdrawn either way."""
    import os
    from types import SimpleNamespace
    from kiln_worker.processes import gpulock
    monkeypatch.setenv("KILN_GPU_LOCK", str(tmp_path / "gpu.lock"))
    notice = tmp_path / f"gpu.lock.pressure.{os.getpid()}"
    seen = []

    def fake_verify(lib_, job, device):
        seen.append((gpulock.held(), device, notice.exists()))
        if job.get("bad"):
            raise oracle.OracleMismatch("differs")

    monkeypatch.setattr(oracle, "verify", fake_verify)
    oracle.verify_on(lib, {"op": "softmax"}, SimpleNamespace(is_gpu=True, torch_device="cpu"))
    oracle.verify_on(lib, {"op": "softmax"}, SimpleNamespace(is_gpu=False, torch_device="cpu"))
    with pytest.raises(oracle.OracleMismatch):
        oracle.verify_on(lib, {"op": "softmax", "bad": True}, SimpleNamespace(is_gpu=True, torch_device="cpu"))
    assert seen == [("exclusive", "cpu", True), (None, "cpu", False), ("exclusive", "cpu", True)]
    assert gpulock.held() is None  # released, also after the failure
    assert not notice.exists()


def test_oracle_compare_in_chunks_finds_every_difference(monkeypatch):
    """compare() works CHUNK elements at a time (a full-size float64 copy of a
    KernelBench output ran a shared GPU out of memory): a difference, a NaN in
    one output only, or an integer mismatch in any chunk is still found, and
    equal outputs (NaNs in the same places) pass."""
    import torch
    monkeypatch.setattr(oracle, "CHUNK", 7)
    b = torch.randn(5, 11)
    assert oracle.compare(b.clone(), b, exact=False) is None
    for i in (0, 6, 7, 54):  # first, chunk edge, next chunk, last
        a = b.clone().reshape(-1)
        a[i] += 1.0
        assert "1 of 55" in oracle.compare(a.reshape(5, 11), b, exact=False)
        a = b.clone().reshape(-1)
        a[i] = float("nan")
        assert oracle.compare(a.reshape(5, 11), b, exact=False) is not None
    both = b.clone().reshape(-1)
    both[30] = float("nan")
    assert oracle.compare(both.clone(), both, exact=False) is None
    ints = torch.arange(55)
    other = ints.clone()
    other[50] = -1
    assert oracle.compare(other, ints, exact=True) == "1 of 55 elements differ"
    assert oracle.compare(ints, ints, exact=True) is None
    assert "elements" in oracle.compare(torch.zeros(3), torch.zeros(4), exact=False)


def test_oracle_plan_counts_its_full_size_copies_without_allocating(lib, monkeypatch):
    """The oracle check's working set at KernelBench size (a 6 GiB fp32 input):
    the float64 inputs, the template's reference and the module's output (both
    float64) and one comparison temporary -- sized from the shapes alone."""
    from types import SimpleNamespace
    monkeypatch.setenv("KILN_WORKER_INPUT_BYTES", str(68 << 30))
    rows, cols = 4096, 393216
    f64 = rows * cols * 8
    plan = oracle._plan(lib, {"op": "softmax", "shape": [rows, cols], "dtype": "fp32"},
                        SimpleNamespace(is_gpu=True, torch_device="cpu"))
    assert plan is not None
    assert plan.working_set == 4 * f64  # 48 GiB
    assert plan.share_bytes == 68 << 30 and not plan.alone
    assert oracle._plan(lib, {"op": "no_such_op", "shape": [1]}, SimpleNamespace(is_gpu=True)) is None
