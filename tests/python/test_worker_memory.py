"""The worker's GPU memory: the per-job plan (memplan.py), the input cache it
bounds, the check alone on the GPU, and the memory-pressure notices between
workers (processes/pressure.py) -- on the CPU, with real templates, real
files and real worker processes."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

HOME = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HOME / "worker"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))

from worker_client import TARGET_H200, Worker, worker_env  # noqa: E402
from kiln_worker.evaluation import memplan  # noqa: E402
from kiln_worker.evaluation.templates import Library  # noqa: E402
from kiln_worker.processes import gpulock, pressure  # noqa: E402

GiB = 1 << 30
H200 = 140 * GiB
LIB = Library(HOME / "kernels")


def plan_of(op, shape, dtype, params, share):
    return memplan.job_plan(LIB.launch_module(op), op, shape, dtype, LIB.complete_params(op, params), share)


# -- the plan ----------------------------------------------------------------------

def test_share_is_the_gpu_over_its_workers(monkeypatch):
    props = SimpleNamespace(total_memory=H200)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    gpu = SimpleNamespace(is_gpu=True, torch_device="cuda:0")
    monkeypatch.delenv(memplan.BUDGET_ENV, raising=False)
    assert memplan.share_bytes(SimpleNamespace(is_gpu=False)) is None
    monkeypatch.setenv(memplan.SHARERS_ENV, "4")
    assert memplan.share_bytes(gpu) == 35 * GiB - 2 * GiB   # less the worker's headroom
    for bad in ("0", "x", ""):
        monkeypatch.setenv(memplan.SHARERS_ENV, bad)
        assert memplan.share_bytes(gpu) == H200 - 2 * GiB
    small = SimpleNamespace(total_memory=2 * GiB)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: small)
    assert memplan.share_bytes(gpu) == GiB                   # the headroom takes at most half
    monkeypatch.setenv(memplan.BUDGET_ENV, "12345")  # the tests' override, on any device
    assert memplan.share_bytes(gpu) == memplan.share_bytes(SimpleNamespace(is_gpu=False)) == 12345


def test_kernelbench_pool2d_runs_alone_and_caches_nothing_beside_its_check():
    """Issue 20's pool2d: [16, 64, 2048, 2048] fp32, 2x2 max pool, on an H200
    shared by 2 workers. The sizes are shape arithmetic here; the plan reads
    them from the template on fake tensors (nothing of the 16 GiB allocated)."""
    shape = [16, 64, 2048, 2048]
    x = 16 * 64 * 2048 * 2048 * 4                     # 16 GiB of fp32
    out = 16 * 64 * 1024 * 1024 * 4                   # the pooled output, 4 GiB
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    plan = plan_of("pool2d", shape, "fp32", {"kind": "max", "kernel_h": 2, "kernel_w": 2,
                                             "stride_h": 2, "stride_w": 2}, H200 // 2 - 2 * GiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 512 * 1024  # KiB: no 16 GiB drawn
    assert (plan.input_bytes, plan.upcast_bytes, plan.output_bytes, plan.ref_bytes) == (x, 2 * x, out, 2 * out)
    # pristine + snapshot + float64 copy + float64 reference + output: 76 GiB
    assert plan.working_set == x + x + 2 * x + 2 * out + out == 76 * GiB
    assert plan.alone and plan.cache_bytes == 0 and not plan.seeds_fit(2)
    # alone on the GPU (one worker): it fits, and one more seed beside it too
    one = plan_of("pool2d", shape, "fp32", {}, H200)
    assert not one.alone and one.cache_bytes == H200 - 76 * GiB and one.seeds_fit(3)


def test_kernelbench_norm_dim_keeps_only_its_current_seed_with_two_workers():
    """Issue 20's norm_dim: [1, 1879048192, 1] fp32 (7 GiB). Two workers on an
    H200: a 49 GiB working set in a 68 GiB share (70 less the headroom) leaves
    19 GiB, less than one more seed (21 GiB): tight, no set-up ahead; with a
    whole 70 GiB share one more seed fits; four workers: alone."""
    n = 1879048192
    two = plan_of("norm_dim", [1, n, 1], "fp32", {"kind": "rms"}, H200 // 2 - 2 * GiB)
    assert two.entry_bytes == 4 * n + 8 * n == 21 * GiB
    assert two.working_set == 4 * n * 2 + 8 * n * 2 + 4 * n == 49 * GiB
    assert not two.alone and two.cache_bytes == 19 * GiB and not two.seeds_fit(2)
    whole = plan_of("norm_dim", [1, n, 1], "fp32", {"kind": "rms"}, H200 // 2)
    assert whole.cache_bytes == 21 * GiB and whole.seeds_fit(2) and not whole.seeds_fit(3)
    assert plan_of("norm_dim", [1, n, 1], "fp32", {}, H200 // 4 - 2 * GiB).alone


@pytest.mark.parametrize("dtype,factor", [("fp16", 2), ("bf16", 2), ("fp32", 2)])
def test_upcast_bytes_follow_the_checks_upcast_dtype(dtype, factor):
    """fp32 is checked in float64, fp16 / bf16 in float32 (check.upcast_dtype):
    the upcast copy is twice the inputs either way."""
    plan = plan_of("pool2d", [2, 3, 64, 64], dtype, {}, None)
    elem = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    assert plan.input_bytes == 2 * 3 * 64 * 64 * elem
    assert plan.upcast_bytes == factor * plan.input_bytes
    assert plan.ref_bytes == factor * plan.output_bytes == factor * 2 * 3 * 32 * 32 * elem
    assert plan.cache_bytes is None and not plan.alone and plan.seeds_fit(100)


def test_a_template_that_needs_real_data_has_no_plan():
    class NeedsData:
        @staticmethod
        def make_inputs(op, shape, dtype, params, seed, device):
            x = torch.randn(shape)
            return {"x": x[: int(x.sum().item() > 0) + 1]}  # data-dependent: no fake tensor answers

        @staticmethod
        def output_like(op, inputs, params):
            return torch.empty_like(inputs["x"])

    assert memplan.job_plan(NeedsData, "x", [8], "fp32", {}, GiB) is None


# -- the input cache under a plan --------------------------------------------------

def _draw(nbytes, log, name):
    def f():
        log.append(name)
        return {"pristine": {"x": torch.zeros(nbytes, dtype=torch.uint8)}, "ref": torch.zeros(0), "memo": {}}
    return f


def test_cache_limit_drops_candidates_own_seeds_first_then_the_oldest(monkeypatch):
    from kiln_worker.evaluation import evaluate as ev
    monkeypatch.setattr(ev, "_release_cached_gpu_memory", lambda: None)
    job = ("pool2d", "[1]", "fp32", "{}", "cpu")
    c = ev._InputCache(budget_bytes=10 ** 9)   # the plan's limit wins over the plain budget
    c.limit(job, 250)                          # room for two other seeds of 100 bytes
    log = []
    c.get(job + (1,), _draw(100, log, 1))
    c.get(job + (2,), _draw(100, log, 2))
    c.get(job + (9,), _draw(100, log, 9), transient=True)   # a candidate's own seed
    assert sorted(k[-1] for k in c.entries) == [1, 2, 9] and not c.tight(job + (1,))
    c.get(job + (1,), _draw(100, log, 1))                   # the next candidate: a hit
    c.get(job + (3,), _draw(100, log, 3))                   # 300 held: the own seed goes first
    assert sorted(k[-1] for k in c.entries) == [1, 2, 3] and not c.tight(job + (1,))
    c.get(job + (4,), _draw(100, log, 4))                   # then the job's oldest
    assert sorted(k[-1] for k in c.entries) == [2, 3, 4] and c.tight(job + (1,))
    assert log == [1, 2, 9, 3, 4]


def _job(shape=4096, seeds=3):
    return {"op": "add", "shape": [shape], "dtype": "fp32", "params": {}, "target": TARGET_H200,
            "validation": {"seeds": seeds}, "benchmark": {"runs": 0}}


@pytest.fixture
def evaluation(monkeypatch, tmp_path):
    """A real Evaluation on the CPU (Triton interpreter), its GPU lock and
    notices in tmp_path; make(share) builds one with that share."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    monkeypatch.setenv("KILN_GPU_LOCK", str(tmp_path / "gpu.lock"))
    from kiln_worker.evaluation import evaluate
    from kiln_worker.evaluation.evaluate import space
    from kiln_worker.processes.device import select_device
    made = []

    def make(share):
        monkeypatch.setenv(memplan.BUDGET_ENV, str(share))
        ev = evaluate.Evaluation(make.lib, select_device())
        made.append(ev)
        return ev

    make.lib = LIB
    make.config = space(LIB, _job())["configs"][0]
    yield make
    for ev in made:
        if ev.compiler is not None:
            ev.compiler.close()


def test_a_job_whose_working_set_passes_the_budget_keeps_one_seed(evaluation):
    """add of 4096 fp32: inputs 32 KiB, float64 copy 64 KiB, reference 32 KiB,
    output 16 KiB: a 176 KiB working set. With a share of 10 MB all three seeds
    stay cached and the next candidate draws nothing; with 200 kB only the
    current seed fits (tight) and every candidate draws its seeds again (a
    right kernel still passes all three)."""
    roomy = evaluation(10 ** 7)
    assert roomy.run(_job(), evaluation.config, None)["status"] == "ok"
    assert len(roomy.inputs.entries) == 3
    again = roomy.run(_job(), evaluation.config, None)
    assert again["status"] == "ok" and again["timings"]["setup_s"] == 0.0

    tight = evaluation(200_000)
    plan = tight._plan(LIB.launch_module("add"), "add", [4096], "fp32", {})
    x, ref, out = 2 * 4096 * 4, 4096 * 8, 4096 * 4    # x and y; float64 reference; output
    assert plan.working_set == x + ref + x + 2 * x + out == 180224 and not plan.alone
    for _ in range(2):
        r = tight.run(_job(), evaluation.config, None)
        assert r["status"] == "ok" and r["correctness"]["seeds"] == 3, r["message"]
        assert len(tight.inputs.entries) == 1 and r["timings"]["setup_s"] > 0
        assert tight.inputs.tight(next(iter(tight.inputs.entries)))
    # 250 kB: room for one other seed beside the check (69776 bytes past the
    # working set; half the share, the bound without a plan, would keep none)
    one_more = evaluation(250_000)
    for _ in range(2):
        assert one_more.run(_job(), evaluation.config, None)["status"] == "ok"
        assert len(one_more.inputs.entries) == 2


def test_a_job_past_its_share_checks_alone_with_its_notice_posted(evaluation, tmp_path, monkeypatch):
    """A working set past the share: each seed's launch runs holding the GPU
    lock exclusively with this worker's notice posted (bytes: the working
    set); afterwards the notice is gone, the lock free, one seed cached.
    The kernel's launch records what it sees."""
    ev = evaluation(150_000)
    mod = LIB.launch_module("add")
    seen = []
    real_launch = mod.launch

    def launch(*a, **k):
        notice = tmp_path / f"gpu.lock.pressure.{os.getpid()}"
        seen.append((gpulock.held(), json.loads(notice.read_text()) if notice.exists() else None))
        return real_launch(*a, **k)

    monkeypatch.setattr(mod, "launch", launch)
    r = ev.run(_job(), evaluation.config, None)
    assert r["status"] == "ok", r["message"]
    assert len(seen) == 3
    for held, notice in seen:
        assert held == "exclusive" and notice["pid"] == os.getpid() and notice["bytes"] == 180224
    assert not list(tmp_path.glob("gpu.lock.pressure.*")) and len(ev.inputs.entries) == 1


def test_a_wrong_kernel_still_fails_a_tight_check(evaluation, monkeypatch):
    """The fixture library's add that writes a wrong last element, under a
    share that keeps one seed, and one whose check runs alone: still
    incorrect (the reference computed first, the candidate's copies after)."""
    fixtures = HOME / "tests" / "python" / "fixtures" / "kiln_fixture_kernels"
    monkeypatch.setenv("KILN_KERNELS_DIR", str(fixtures))  # the compile child's library
    monkeypatch.setattr(evaluation, "lib", Library(fixtures))
    from kiln_worker.evaluation.evaluate import space
    job = dict(_job(), op="add_wrong")
    for share in (200_000, 150_000):
        ev = evaluation(share)
        r = ev.run(job, space(evaluation.lib, job)["configs"][0], None)
        assert r["status"] == "incorrect" and "out of tolerance" in r["message"], r


# -- notices between processes ------------------------------------------------------

POSTER = """
import sys, time
sys.path.insert(0, {worker!r})
from kiln_worker.processes import pressure
with pressure.posted({nbytes}):
    print("posted", flush=True)
    sys.stdin.readline()
print("withdrawn", flush=True)
"""


def _poster(lock, nbytes=5 * GiB):
    env = dict(os.environ, KILN_GPU_LOCK=str(lock))
    p = subprocess.Popen([sys.executable, "-c", POSTER.format(worker=str(HOME / "worker"), nbytes=nbytes)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "posted"
    return p


def _evaluate(w, job, config):
    ans = w.call("evaluate", job=job, config=config)
    assert ans["ok"] and ans["result"]["status"] == "ok", ans
    return ans["result"]


def test_a_worker_gives_back_its_cache_when_another_posts_a_notice(tmp_path):
    """Worker B (a real worker process) caches a job's seeds; process A posts
    a notice: B's next evaluation finds its cache dropped (it draws the seeds
    again, and says so on stderr). A's notice withdrawn, B caches again. A
    notice of a dead process, or a stale one, changes nothing (the dead one's
    file is removed)."""
    lock = tmp_path / "gpu.lock"
    w = Worker(env=worker_env(kernels_dir=None, KILN_GPU_LOCK=str(lock)))
    try:
        job = _job(seeds=[11, 12])  # the job's own seeds: cached across candidates
        config = w.call("space", job=job)["result"]["configs"][0]
        assert _evaluate(w, job, config)["timings"]["setup_s"] > 0
        assert _evaluate(w, job, config)["timings"]["setup_s"] == 0.0  # cached: this test can fail

        a = _poster(lock)
        notice = json.loads((tmp_path / f"gpu.lock.pressure.{a.pid}").read_text())
        assert notice["pid"] == a.pid and notice["bytes"] == 5 * GiB
        assert _evaluate(w, job, config)["timings"]["setup_s"] > 0   # dropped at its check's start
        assert f"memory pressure from pid {a.pid}" in w.stderr
        a.stdin.write("done\n")
        a.stdin.flush()
        assert a.stdout.readline().strip() == "withdrawn" and a.wait(10) == 0
        assert not list(tmp_path.glob("gpu.lock.pressure.*"))
        _evaluate(w, job, config)                                     # (the last one's end dropped it too)
        assert _evaluate(w, job, config)["timings"]["setup_s"] == 0.0

        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        dead_file = tmp_path / f"gpu.lock.pressure.{dead.pid}"
        dead_file.write_text(json.dumps({"pid": dead.pid, "bytes": GiB, "time": time.time()}))
        stale_file = tmp_path / f"gpu.lock.pressure.{os.getpid()}"  # a live pid, long ago
        stale_file.write_text(json.dumps({"pid": os.getpid(), "bytes": GiB,
                                          "time": time.time() - pressure.STALE_S - 60}))
        assert _evaluate(w, job, config)["timings"]["setup_s"] == 0.0
        assert not dead_file.exists() and stale_file.exists()
        assert w.stderr.count("memory pressure from pid") == 2  # A's: at the check and at the end
    finally:
        assert w.close() == 0, w.stderr[-3000:]


def test_notices_are_per_process_and_the_wait_is_bounded(tmp_path):
    lock = str(tmp_path / "gpu.lock")
    assert pressure.others(lock) == []
    with pressure.posted(123, lock):
        assert (tmp_path / f"gpu.lock.pressure.{os.getpid()}").exists()
        assert pressure.others(lock) == []                  # never one's own
        a = _poster(lock, nbytes=77)
        try:
            assert [(n["pid"], n["bytes"]) for n in pressure.others(lock)] == [(a.pid, 77)]
        finally:
            a.stdin.write("\n")
            a.stdin.flush()
            a.wait(10)
        assert pressure.others(lock) == []
    assert not list(tmp_path.iterdir()) or all("pressure" not in p.name for p in tmp_path.iterdir())
    free = iter([1, 5, 10, 20])
    waited, have = pressure.wait_for_free(10, lambda: next(free), timeout=5, poll=0.01)
    assert have == 10 and waited < 1
    t0 = time.monotonic()
    waited, have = pressure.wait_for_free(10, lambda: 3, timeout=0.3, poll=0.05)
    assert have == 3 and 0.3 <= waited < 1.5 and time.monotonic() - t0 < 1.5
