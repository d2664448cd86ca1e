"""The worker as a real subprocess speaking JSON lines (CPU / Triton interpreter).

Uses the fixture template library in tests/python/fixtures/kiln_fixture_kernels
(KILN_KERNELS_DIR), so it does not depend on kernels/*.py being finished; the
last test runs against the real library when kernels/elementwise.py exists.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from worker_client import (FIXTURE_KERNELS, HOME, TARGET_H200, TARGET_MI300X, Worker,  # noqa: E402
                           worker_env)

N = 1000


def job(op="add", shape=(N,), dtype="fp32", target=TARGET_MI300X, **extra):
    j = {"op": op, "shape": list(shape), "dtype": dtype, "params": {}, "target": target,
         "constraints": [], "validation": {"seeds": 2, "atol": None, "rtol": None},
         "benchmark": {"warmup": 2, "runs": 5}}
    j.update(extra)
    return j


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    rc = w.close()
    assert rc == 0, w.stderr[-3000:]


@pytest.fixture()
def artifacts(tmp_path):
    d = tmp_path / "artifacts"
    return str(d)


def evaluate(worker, artifact_dir, config, **job_kw):
    ans = worker.call("evaluate", job=job(**job_kw), config=config, artifact_dir=artifact_dir)
    assert ans["ok"] is True, ans
    return ans["result"]


# -- hello / space -------------------------------------------------------------

def test_hello(worker):
    import torch
    import triton
    ans = worker.call("hello")
    assert ans["ok"] is True, ans
    r = ans["result"]
    assert r["device"] == {"kind": "cpu", "name": "cpu (Triton interpreter)"}
    assert r["torch"] == torch.__version__
    assert r["triton"] == triton.__version__
    assert r["python"] == ".".join(map(str, sys.version_info[:3]))
    ops = yaml.safe_load((FIXTURE_KERNELS / "operators.yaml").read_text())["operators"]
    assert r["operators"] == list(ops)
    common = FIXTURE_KERNELS / "common.py"
    shared = common.read_bytes() if common.is_file() else b""
    expected = {m: hashlib.sha256((FIXTURE_KERNELS / f"{m}.py").read_bytes()
                                  + b"\0common.py\0" + shared).hexdigest()
                for m in ("elementwise", "reduce")}
    assert r["templates"] == expected
    # how long each step of the start took; no GPU steps on the CPU
    st = r["startup"]
    assert set(st) == {"process_s", "imports_s", "library_s", "hello_s"}, st
    assert all(v >= 0 for v in st.values()) and st["imports_s"] > 0.05  # torch and triton at least


def test_space_hip_and_cuda(worker):
    a = worker.call("space", job=job(target=TARGET_MI300X))
    assert a["ok"], a
    cfgs = a["result"]["configs"]
    assert [c["BLOCK"] for c in cfgs] == [64, 64, 256, 256]
    assert all(c.get("waves_per_eu") == 0 for c in cfgs)
    assert a["result"]["traffic"] == {"bytes": 3 * N * 4, "flops": N}
    b = worker.call("space", job=job(target=TARGET_H200, dtype="fp16"))
    assert b["ok"], b
    assert all("waves_per_eu" not in c for c in b["result"]["configs"])
    assert b["result"]["traffic"]["bytes"] == 3 * N * 2


def test_traffic_sizes_every_job_and_never_fails_as_a_whole(worker):
    # kiln submit's claim order: each job's minimum traffic and its space's size
    good = [job(target=TARGET_MI300X), job(target=TARGET_H200, dtype="fp16")]
    a = worker.call("traffic", jobs=[good[0], {"op": "no_such_op"}, good[1]])
    assert a["ok"], a
    spaces = [len(worker.call("space", job=j)["result"]["configs"]) for j in good]
    assert a["result"]["traffic"] == [{"bytes": 3 * N * 4, "flops": N}, None, {"bytes": 3 * N * 2, "flops": N}]
    assert a["result"]["space"] == [spaces[0], None, spaces[1]] and spaces[0] == 4
    assert not worker.call("traffic", jobs="all")["ok"]


# -- evaluate: ok ----------------------------------------------------------------

def _read_elf_machine(path):
    data = Path(path).read_bytes()
    assert data[:4] == b"\x7fELF"
    return int.from_bytes(data[18:20], "little"), int.from_bytes(data[48:52], "little")


def test_evaluate_ok_hip(worker, artifacts):
    cfg = {"BLOCK": 256, "num_warps": 2, "num_stages": 1, "waves_per_eu": 0}
    r = evaluate(worker, artifacts, cfg, target=TARGET_MI300X)
    assert r["status"] == "ok", r["message"]
    assert r["exec_device"] == "cpu (Triton interpreter)"
    assert r["latency"] is None  # no GPU: no benchmark
    c = r["correctness"]
    assert c["passed"] is True and c["seeds"] == 2
    assert 0 <= c["max_abs_err"] < 1e-5
    a = r["artifact"]
    assert a["kind"] == "hsaco" and a["arch"] == "gfx942" and a["target"] == "MI300X"
    data = Path(a["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == a["sha256"]
    assert Path(a["path"]).name == f"{a['sha256']}.hsaco"
    assert Path(a["path"]).parent == Path(artifacts)
    machine, flags = _read_elf_machine(a["path"])
    assert machine == 224 and flags & 0xFF == 0x4C  # gfx942
    assert a["kernel_name"] == "add_kernel"
    assert a["num_warps"] == 2 and a["warp_size"] == 64 and a["block"] == [128, 1, 1]
    assert a["grid"] == [math.ceil(N / 256), 1, 1]
    assert a["shared_bytes"] == 0
    assert isinstance(a["registers"], int) and a["registers"] > 0
    assert isinstance(a["sgprs"], int) and a["sgprs"] > 0
    assert a["spills"] == 0 and a["scratch_bytes"] == 0
    assert 1 <= a["occupancy"] <= 8
    visible = [x for x in a["args"] if not x.get("hidden")]
    hidden = [x for x in a["args"] if x.get("hidden")]
    assert visible == [{"name": "x_ptr", "type": "*fp32"}, {"name": "y_ptr", "type": "*fp32"},
                       {"name": "out_ptr", "type": "*fp32"}, {"name": "n", "type": "i32"},
                       {"name": "alpha", "type": "fp32"}]
    assert len(hidden) == 2
    assert a["metadata"]["name"] == "add_kernel" and a["metadata"]["arch"] == "gfx942"
    assert a["metadata"]["target"] == {"backend": "hip", "arch": "gfx942", "warp_size": 64}
    assert r["traffic"] == {"bytes": 3 * N * 4, "flops": N}
    # the stages, the job's set-up and the whole evaluation; a CPU one has no GPU figures
    assert {"compile_s", "check_s", "bench_s", "setup_s", "module_s", "worker_s"} <= set(r["timings"])
    assert set(r["timings"]) <= {"compile_s", "check_s", "bench_s", "setup_s", "module_s", "worker_s", "plan_s",
                                 "plan_import", "setup_wait_s", "inputs_s", "reference_s"}, r["timings"]


def test_job_setup_is_paid_by_the_first_candidate_only(worker, artifacts):
    # the job's seeds' inputs and references are made once per job and worker
    # (the input cache); each candidate sets up its own seed (check.seed_list)
    shape = (3, 41)  # a job no other test of this worker uses
    first = evaluate(worker, artifacts, {"BLOCK": 64, "num_warps": 1, "num_stages": 1}, shape=shape)
    second = evaluate(worker, artifacts, {"BLOCK": 128, "num_warps": 1, "num_stages": 1}, shape=shape)
    again = evaluate(worker, artifacts, {"BLOCK": 128, "num_warps": 1, "num_stages": 1}, shape=shape)
    assert first["status"] == second["status"] == again["status"] == "ok"
    assert 0 < first["timings"]["setup_s"] <= first["timings"]["check_s"]
    s1, s2 = first["correctness"]["seeds_used"], second["correctness"]["seeds_used"]
    assert len(s1) == len(s2) == 2 and s1[0] == s2[0] and s1[1] != s2[1]
    assert second["timings"]["setup_s"] > 0  # its own seed
    assert again["timings"]["setup_s"] == 0 and again["correctness"]["seeds_used"] == s2
    # on the CPU there is no GPU lock to load the kernel before (preload.py)
    assert "preload_s" not in first["timings"] and "preload_s" not in second["timings"]


def test_evaluate_ok_cuda_fp16(worker, artifacts):
    r = evaluate(worker, artifacts, {"BLOCK": 64, "num_warps": 1, "num_stages": 1},
                 target=TARGET_H200, dtype="fp16", shape=(10, 37))
    assert r["status"] == "ok", r["message"]
    a = r["artifact"]
    assert a["kind"] == "cubin" and a["path"].endswith(".cubin")
    machine, _ = _read_elf_machine(a["path"])
    assert machine == 190
    assert a["block"] == [32, 1, 1] and a["grid"] == [math.ceil(370 / 64), 1, 1]
    assert isinstance(a["registers"], int) and 0 < a["registers"] <= 255
    assert a["spills"] == 0
    # one warp per block, few registers: limited by 32 blocks per SM
    assert a["occupancy"] == 32
    assert a["args"][0] == {"name": "x_ptr", "type": "*fp16"}
    assert r["correctness"]["passed"] and r["correctness"]["atol"] >= 1e-2


# -- evaluate: failures ------------------------------------------------------------

def test_compile_error(worker, artifacts):
    r = evaluate(worker, artifacts, {"BLOCK": 100, "num_warps": 1}, target=TARGET_MI300X)
    assert r["status"] == "compile_error"
    assert "power of 2" in r["message"]
    assert r["artifact"] is None and r["correctness"] is None
    assert not os.path.isdir(artifacts) or os.listdir(artifacts) == []


def test_compile_spec_rejecting_config_is_compile_error(worker, artifacts):
    r = evaluate(worker, artifacts, {"num_warps": 1}, target=TARGET_MI300X)  # no BLOCK
    assert r["status"] == "compile_error"
    assert "compile_spec" in r["message"] and "BLOCK" in r["message"]


def test_incorrect_reports_worst_element(worker, artifacts):
    r = evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1}, op="add_wrong")
    assert r["status"] == "incorrect"
    assert f"[{N - 1}]" in r["message"], r["message"]
    assert "max abs err" in r["message"]
    assert r["correctness"]["passed"] is False
    assert abs(r["correctness"]["max_abs_err"] - 0.5) < 1e-3
    assert r["artifact"] is not None  # it compiled fine for the target


def test_incorrect_2d_index(worker, artifacts):
    # fp16: Triton 3.6's interpreter cannot do bf16 arithmetic with Python scalars
    # (InterpreterBuilder has no get_bf16), so the fixture's "+ 0.5" would crash there
    r = evaluate(worker, artifacts, {"BLOCK": 64, "num_warps": 1}, op="add_wrong", shape=(20, 50),
                 dtype="fp16")
    assert r["status"] == "incorrect"
    assert "[19, 49]" in r["message"], r["message"]


def test_unwritten_output_is_nan_and_fails(worker, artifacts):
    r = evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1}, op="add_skip")
    assert r["status"] == "incorrect"
    assert "NaN" in r["message"] and f"[{N - 1}]" in r["message"], r["message"]


def test_tolerance_override(worker, artifacts):
    j = {"validation": {"seeds": 1, "atol": 0.6, "rtol": 0.0}}
    r = evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1}, op="add_wrong", **j)
    assert r["status"] == "ok", r["message"]
    assert r["correctness"]["atol"] == 0.6 and r["correctness"]["seeds"] == 1
    j = {"validation": {"seeds": 1, "atol": 0.4, "rtol": 0.0}}
    r = evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1}, op="add_wrong", **j)
    assert r["status"] == "incorrect"


def test_modified_inputs(worker, artifacts):
    r = evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1}, op="add_mutate")
    assert r["status"] == "incorrect"
    assert r["message"].startswith("kernel modified its inputs"), r["message"]


def test_crash_in_launch(worker, artifacts):
    r = evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1}, op="add_crash")
    assert r["status"] == "crash"
    assert "add_crash always fails at launch" in r["message"]
    assert "Traceback" in r["message"] or "launch" in r["message"]


def test_resource_error_shared_memory(worker, artifacts):
    tiny = dict(TARGET_MI300X, name="tiny-lds", max_shared_per_block=8, lds_bytes_per_cu=8)
    cfg = {"BLOCK": 1024, "num_warps": 4}
    r = evaluate(worker, artifacts, cfg, op="rowsum", shape=(4, 1000), target=tiny)
    assert r["status"] == "resource_error", r
    assert r["artifact"]["shared_bytes"] > 8
    assert "shared memory" in r["message"] and "tiny-lds" in r["message"]
    # the same kernel on the real target is fine, and correct
    r = evaluate(worker, artifacts, cfg, op="rowsum", shape=(4, 1000), target=TARGET_MI300X)
    assert r["status"] == "ok", r["message"]
    assert r["artifact"]["shared_bytes"] > 0


def test_params_default_from_registry_and_override(worker, artifacts):
    j = job()
    j["params"] = {"alpha": 2.0}
    ans = worker.call("evaluate", job=j, config={"BLOCK": 256, "num_warps": 1},
                      artifact_dir=artifacts)
    assert ans["ok"] and ans["result"]["status"] == "ok", ans


# -- malformed requests -------------------------------------------------------------

def test_malformed_then_still_serving(worker):
    worker.send_raw("this is not json")
    ans = worker.read()
    assert ans["ok"] is False and ans["id"] is None and "malformed" in ans["error"]
    worker.send_raw("[1, 2, 3]")
    ans = worker.read()
    assert ans["ok"] is False
    ans = worker.call("frobnicate")
    assert ans["ok"] is False and "unknown method" in ans["error"]
    ans = worker.call("evaluate", job={"op": "add"}, config={})
    assert ans["ok"] is False and "shape" in ans["error"]
    ans = worker.call("space", job=job(op="no_such_op"))
    assert ans["ok"] is False and "no_such_op" in ans["error"]
    ans = worker.call("evaluate", job=job(), config="BLOCK=256", artifact_dir="/tmp/x")
    assert ans["ok"] is False and "config" in ans["error"]
    ans = worker.call("hello")
    assert ans["ok"] is True


def test_eof_exits_zero():
    w = Worker()
    assert w.call("hello")["ok"]
    assert w.close() == 0


def test_stray_stdout_goes_to_stderr(worker, artifacts):
    # the fixture's launch prints to sys.stdout and writes to fd 1; the answers stay clean
    evaluate(worker, artifacts, {"BLOCK": 256, "num_warps": 1})
    assert "fixture: stray print() on stdout" in worker.stderr
    assert "fixture: raw write to file descriptor 1" in worker.stderr


# -- environment --------------------------------------------------------------------

def test_missing_package_exit_code(tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text("raise ImportError('No module named torch (test)')\n")
    w = Worker(env=worker_env(extra_pythonpath=[str(shadow)]))
    rc = w.close()
    assert rc == 3
    err = w.stderr.strip().splitlines()
    assert any("pip install -r worker/requirements.txt" in line and "torch" in line for line in err), err


def test_missing_yaml_exit_code(tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "yaml").mkdir(parents=True)
    (shadow / "yaml" / "__init__.py").write_text("raise ImportError('No module named yaml (test)')\n")
    w = Worker(env=worker_env(extra_pythonpath=[str(shadow)]))
    assert w.close() == 3
    assert "pip install" in w.stderr and "yaml" in w.stderr


def test_gpu_requested_without_gpu():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    w = Worker(env=worker_env(device="gpu"))
    ans = w.call("hello")
    assert ans["ok"] is False and "KILN_DEVICE=gpu" in ans["error"] and "no GPU" in ans["error"]
    ans = w.call("hello")  # still serving, still the same clear error
    assert ans["ok"] is False
    assert w.close() == 0


def test_missing_template_module(tmp_path):
    kdir = tmp_path / "kiln_tmp_kernels"
    kdir.mkdir()
    (kdir / "operators.yaml").write_text(
        "version: 1\noperators:\n  softmax: {module: softmax, shape: {rank: 2}, dtypes: [fp32], params: {}}\n")
    w = Worker(env=worker_env(kernels_dir=kdir))
    h = w.call("hello")
    assert h["ok"] and h["result"]["templates"] == {} and h["result"]["operators"] == ["softmax"]
    ans = w.call("space", job=job(op="softmax", shape=(4, 8)))
    assert ans["ok"] is False and "softmax.py" in ans["error"]
    assert w.close() == 0


# -- the real template library, when it is there ---------------------------------------

@pytest.mark.skipif(not (HOME / "kernels" / "elementwise.py").is_file(),
                    reason="kernels/elementwise.py not written yet")
def test_real_elementwise_template(tmp_path):
    w = Worker(env=worker_env(kernels_dir=None))
    try:
        h = w.call("hello")
        assert h["ok"], h
        assert "elementwise" in h["result"]["templates"]
        assert "add" in h["result"]["operators"]
        sp = w.call("space", job=job(op="add", shape=(3, 333)))
        assert sp["ok"], sp
        configs = sp["result"]["configs"]
        assert configs
        ans = w.call("evaluate", job=job(op="add", shape=(3, 333)), config=configs[0],
                     artifact_dir=str(tmp_path), timeout=300)
        assert ans["ok"], ans
        assert ans["result"]["status"] == "ok", ans["result"]["message"]
    finally:
        assert w.close() == 0


def test_answers_are_strict_json(worker, artifacts):
    # NaN-producing failure: the answer must still be strict JSON (no NaN tokens)
    worker.send_raw(json.dumps({"id": 7, "method": "evaluate", "job": job(op="add_skip"),
                                "config": {"BLOCK": 256, "num_warps": 1}, "artifact_dir": artifacts}))
    line = worker.lines.get(timeout=120)
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
