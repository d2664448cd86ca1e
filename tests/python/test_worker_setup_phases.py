"""Where a worker's first evaluation goes: the phases its timings report
(module_s, plan_s and the fake-tensor import, inputs_s, reference_s,
setup_wait_s, worker_s), and the memory plan's fake-tensor import done in a
thread of the worker's start (memplan.start_import) instead of in the first
evaluation. A real worker (CPU, Triton interpreter, the fixture template
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
    # the job's memory plan, computed once per job and worker; the first waited
    # for the fake-tensor import of the worker's start at most as long as it took
    assert first["plan_s"] > 0
    imp = first["plan_import"]
    assert imp["import_s"] > 0 and 0 <= imp["wait_s"] <= imp["import_s"] and "error" not in imp
    assert imp["wait_s"] <= first["plan_s"]
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
    assert other["plan_s"] < imp["import_s"]


def test_a_worker_imports_the_fake_tensors_before_its_first_request(worker, tmp_path):
    assert worker.call("hello")["ok"]
    time.sleep(6)  # a worker waiting for work (the import takes 1-2 s here)
    first = evaluate(worker, tmp_path)
    imp = first["plan_import"]
    # done while the worker waited: its first plan did not pay for it
    assert imp["wait_s"] < imp["import_s"] / 2, imp
    assert first["plan_s"] < imp["import_s"] / 2, (first["plan_s"], imp)


def test_the_import_thread_in_process():
    # start_import is idempotent; job_plan waits for it; the report comes once
    memplan.start_import()
    memplan.start_import()
    waited = memplan.wait_for_import()
    assert waited >= 0
    rep = memplan.import_report()
    assert rep is not None and rep["import_s"] > 0 and "error" not in rep
    assert memplan.import_report() is None
    assert memplan.wait_for_import() == 0.0
