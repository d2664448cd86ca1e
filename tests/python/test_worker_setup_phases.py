"""Where a worker's first evaluation goes: the phases its timings report
(module_s, plan_s, inputs_s, reference_s, setup_wait_s, worker_s), and the
memory plan on meta tensors, with the fake-tensor import (torch._dynamo) only
where a template needs values. A real worker (CPU, Triton interpreter, the fixture template
library); the engine's summary of these is tests/cpp/first_results_test.cpp.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from worker_client import TARGET_MI300X, Worker  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))
from kiln_worker.evaluation import memplan  # noqa: E402

CONFIG = {"BLOCK": 64, "num_warps": 1, "num_stages": 1}


def job(shape=(3, 50)):
    return {"op": "add", "shape": list(shape), "dtype": "fp32", "params": {}, "target": TARGET_MI300X,
            "constraints": [], "validation": {"seeds": 2}, "benchmark": {"warmup": 1, "runs": 2}}


def evaluate(w, tmp_path, shape=(3, 50)):
    ans = w.call("evaluate", job=job(shape), config=CONFIG, artifact_dir=str(tmp_path / "art"))
    assert ans["ok"] is True, ans
    r = ans["result"]
    assert r["status"] == "ok", r["message"]
    return r["timings"]


@pytest.fixture()
def worker():
    w = Worker()
    yield w
    assert w.close() == 0, w.stderr[-3000:]


def test_a_first_evaluation_says_where_its_time_went(worker, tmp_path):
    assert worker.call("hello")["ok"]
    t0 = time.perf_counter()
    first = evaluate(worker, tmp_path)
    wall = time.perf_counter() - t0
    # the whole evaluation in the worker, within the client's round trip
    assert 0 < first["worker_s"] <= wall
    # what the main thread did adds up to no more than the whole
    main = first["module_s"] + first["compile_s"] + first["check_s"] + first["bench_s"]
    assert main <= first["worker_s"] + 1e-6, first
    # the job's memory plan, computed once per job and worker, on meta tensors:
    # no fake-tensor import (torch._dynamo) to wait for
    assert first["plan_s"] > 0
    assert "plan_import" not in first
    # on the CPU the plan runs beside the compile; the check waits for it
    assert 0 <= first["setup_wait_s"] <= first["check_s"]
    # the set-up's parts are its whole: the inputs drawn and the references made
    assert first["setup_s"] > 0
    assert first["inputs_s"] + first["reference_s"] == pytest.approx(first["setup_s"], abs=1e-9)

    again = evaluate(worker, tmp_path)  # the same job: planned and set up already
    assert "plan_s" not in again and "plan_import" not in again and "setup_wait_s" not in again
    assert again["setup_s"] == 0
    other = evaluate(worker, tmp_path, shape=(5, 20))  # another job: its own plan, no import
    assert other["plan_s"] > 0 and "plan_import" not in other


PLAN_IN_A_FRESH_PROCESS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from kiln_worker.evaluation import memplan

class Plain:  # draws as the templates do: a seeded generator, a dtype, a device
    @staticmethod
    def make_inputs(op, shape, dtype, params, seed, device):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=g, device=g.device).to(torch.float16).to(device)
        return {"x": x, "w": torch.ones(shape[-1], device=device).cuda()}
    @staticmethod
    def output_like(op, inputs, params):
        return torch.empty_like(inputs["x"])

class NeedsAValue:  # an .item(): no meta tensor answers; a fake one does
    @staticmethod
    def make_inputs(op, shape, dtype, params, seed, device):
        n = int(torch.tensor(shape[0]).item())
        return {"x": torch.zeros(n, 3, device=device)}
    @staticmethod
    def output_like(op, inputs, params):
        return torch.empty_like(inputs["x"])

out = {}
# the library's templates whose inputs are scaled and shifted (torch._refs'
# meta kernels for that import torch._dynamo) and whose outputs are made
# empty_like (those import sympy): planned with neither imported
sys.path.insert(0, sys.argv[2])
import importlib
from kiln_worker.evaluation import templates
lib = templates.Library()
library = {}
for op, shape, dt in (("gemm_bias_act", [512, 256, 128], "bf16"), ("rmsnorm", [64, 4096], "bf16"),
                      ("conv2d", [2, 3, 32, 32], "fp16"), ("layernorm", [64, 4096], "fp16"),
                      ("attention", [1, 2, 128, 64], "bf16"), ("add", [1 << 20], "fp32")):
    mod = importlib.import_module("kernels." + lib.module_name_for(op).split(".")[-1])
    q = memplan.job_plan(mod, op, shape, dt, lib.complete_params(op, {}), None)
    library[op] = [q.input_bytes, q.output_bytes]
out["library"] = library
out["sympy_after_library"] = "sympy" in sys.modules
out["dynamo_after_library"] = "torch._dynamo" in sys.modules
p = memplan.job_plan(Plain, "x", [1 << 20, 4096], "fp16", {}, None)  # 8 GiB of fp16: nothing drawn
out["plain"] = [p.input_bytes, p.upcast_bytes, p.output_bytes, p.ref_bytes]
out["dynamo_after_plain"] = "torch._dynamo" in sys.modules
out["report_after_plain"] = memplan.import_report()
q = memplan.job_plan(NeedsAValue, "x", [7, 3], "fp32", {}, None)
out["needs"] = [q.input_bytes, q.output_bytes]
out["dynamo_after_needs"] = "torch._dynamo" in sys.modules
out["report_after_needs"] = memplan.import_report()
print(json.dumps(out))
"""


def test_a_plan_runs_on_meta_tensors_and_imports_the_fake_ones_only_where_it_needs_values():
    """job_plan sizes a job on meta tensors (factories, generators, .to and
    .cuda inside the template kept on the meta device): exact sizes, nothing
    allocated, torch._dynamo not imported; a template that needs a value
    falls back to FakeTensorMode, whose import it then reports. A fresh
    interpreter, so nothing else has imported torch._dynamo."""
    import json
    import subprocess
    worker_dir = str(Path(__file__).resolve().parents[2] / "worker")
    repo = str(Path(__file__).resolve().parents[2])
    r = subprocess.run([sys.executable, "-c", PLAN_IN_A_FRESH_PROCESS, worker_dir, repo], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["sympy_after_library"] is False and out["dynamo_after_library"] is False
    # a, b bf16 and a bias; out bf16
    assert out["library"]["gemm_bias_act"] == [2 * (512 * 128 + 128 * 256 + 256), 2 * 512 * 256]
    assert out["library"]["add"] == [2 * 4 * (1 << 20), 4 * (1 << 20)]
    n = (1 << 20) * 4096
    # x fp16 + w fp32 (ones() takes the default dtype); an fp16 job is checked in
    # float32 (check.upcast_dtype): x doubles, w stays 4 bytes an element
    assert out["plain"] == [2 * n + 4 * 4096, 4 * n + 4 * 4096, 2 * n, 4 * n]
    assert out["dynamo_after_plain"] is False and out["report_after_plain"] is None
    assert out["needs"] == [7 * 3 * 4, 7 * 3 * 4]
    assert out["dynamo_after_needs"] is True
    rep = out["report_after_needs"]
    assert rep["import_s"] > 0 and rep["wait_s"] > 0 and "error" not in rep


def test_the_import_thread_in_process(monkeypatch):
    # start_import is idempotent; job_plan waits for it; the report comes once
    # (a fresh thread: another test in this process may have started one and
    # taken its report: a plan that fell back to fake tensors)
    monkeypatch.setattr(memplan, "_IMPORT", None)
    memplan.start_import()
    memplan.start_import()
    waited = memplan.wait_for_import()
    assert waited >= 0
    rep = memplan.import_report()
    assert rep is not None and rep["import_s"] > 0 and "error" not in rep
    assert memplan.import_report() is None
    assert memplan.wait_for_import() == 0.0
