"""The GPU lock (benchmarks exclusive, checks shared, benchmarks preferred), its
spans for the engine's GPU busy fraction, and the space answer's hints."""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

from kiln_worker.evaluation import timing  # noqa: E402
from kiln_worker.processes import gpulock  # noqa: E402


@pytest.fixture(autouse=True)
def lock_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_GPU_LOCK", str(tmp_path / "gpu.lock"))
    gpulock.take_spans()
    gpulock.take_lock_waits()
    yield


def _hold(shared: bool, seconds: float, q) -> None:
    with gpulock.gpu_lock(shared=shared):
        q.put(("in", shared, time.time()))
        time.sleep(seconds)
        q.put(("out", shared, time.time()))


def _events(procs, q):
    for p in procs:
        p.join(20)
    out = []
    while not q.empty():
        out.append(q.get())
    return sorted(out, key=lambda e: e[2])


def test_spans_record_what_held_the_lock():
    with gpulock.gpu_lock(shared=True):
        time.sleep(0.01)
    with gpulock.gpu_lock():
        time.sleep(0.01)
    with gpulock.gpu_lock(shared=True, kind="setup"):
        time.sleep(0.01)
    spans = gpulock.take_spans()
    assert [k for _, _, k in spans] == ["check", "bench", "setup"]
    assert all(b - a >= 0.009 for a, b, _ in spans)
    assert gpulock.take_spans() == []
    assert set(gpulock.take_lock_waits()) == {"check", "bench", "setup"}


def test_lock_waits_count_the_queueing_per_kind():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    holder = ctx.Process(target=_hold, args=(False, 0.5, q))
    holder.start()
    assert q.get(timeout=10)[0] == "in"
    with gpulock.gpu_lock(shared=True):  # waits for the holder's benchmark
        pass
    with gpulock.gpu_lock():             # free by now
        pass
    holder.join(10)
    waits = gpulock.take_lock_waits()
    assert 0.3 <= waits["check"] < 5
    assert 0 <= waits["bench"] < 0.2
    assert gpulock.take_lock_waits() == {}


def test_checks_share_the_gpu_and_benchmarks_exclude_them():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    checks = [ctx.Process(target=_hold, args=(True, 0.4, q)) for _ in range(2)]
    for p in checks:
        p.start()
    time.sleep(0.1)
    bench_p = ctx.Process(target=_hold, args=(False, 0.1, q))
    bench_p.start()
    ev = _events(checks + [bench_p], q)
    ins = [e for e in ev if e[0] == "in" and e[1]]
    outs = [e for e in ev if e[0] == "out" and e[1]]
    assert len(ins) == 2 and max(e[2] for e in ins) < min(e[2] for e in outs), "checks overlap"
    b_in = next(e[2] for e in ev if e[0] == "in" and not e[1])
    assert b_in >= max(e[2] for e in outs), "the benchmark waited for the checks"


def test_a_waiting_benchmark_goes_before_later_checks():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    first = ctx.Process(target=_hold, args=(True, 0.4, q))
    first.start()
    time.sleep(0.1)
    bench_p = ctx.Process(target=_hold, args=(False, 0.2, q))
    bench_p.start()
    time.sleep(0.1)
    late = ctx.Process(target=_hold, args=(True, 0.1, q))  # arrives while the benchmark waits
    late.start()
    ev = _events([first, bench_p, late], q)
    b_out = next(e[2] for e in ev if e[0] == "out" and not e[1])
    late_in = [e[2] for e in ev if e[0] == "in" and e[1]][-1]
    assert late_in >= b_out, "a check that came later did not overtake the waiting benchmark"


def test_the_holder_runs_at_the_lock_niceness_and_gets_its_own_back(monkeypatch):
    calls = []
    monkeypatch.setattr(gpulock.os, "getpriority", lambda which, who: 3)
    monkeypatch.setattr(gpulock.os, "setpriority", lambda which, who, prio: calls.append(prio))
    monkeypatch.setenv("KILN_GPU_LOCK_NICE", "-5")
    with gpulock.gpu_lock():
        assert calls == [-5]
    assert calls == [-5, 3]
    # Unset: the priority is left alone.
    monkeypatch.delenv("KILN_GPU_LOCK_NICE")
    with gpulock.gpu_lock(shared=True):
        pass
    assert calls == [-5, 3]


def test_a_lock_niceness_that_is_not_permitted_changes_nothing(monkeypatch):
    real = os.setpriority

    def refuse(which, who, prio):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(gpulock.os, "setpriority", refuse)
    monkeypatch.setenv("KILN_GPU_LOCK_NICE", "-20")
    with gpulock.gpu_lock():
        held = True
    assert held
    # For real, at this thread's own niceness (always permitted): it has it
    # inside and after.
    monkeypatch.setattr(gpulock.os, "setpriority", real)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.setenv("KILN_GPU_LOCK_NICE", str(before))
    with gpulock.gpu_lock():
        assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_space_answer_has_grid_hints():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from kiln_worker.evaluation.evaluate import space
    from kiln_worker.evaluation.templates import Library
    target = {"name": "H200", "backend": "cuda", "arch": "sm_90", "warp_size": 32,
              "max_shared_per_block": 232448}
    r = space(Library(), {"op": "matmul", "shape": [256, 256, 256], "dtype": "fp16", "target": target})
    assert len(r["hints"]) == len(r["configs"])
    for c, h in zip(r["configs"], r["hints"]):
        assert h["grid"] == [(256 // c["BLOCK_M"]) * (256 // c["BLOCK_N"]), 1, 1]
        assert h["shared_bytes"] > 0


def test_a_lock_nested_in_an_exclusive_one_is_a_no_op():
    with gpulock.gpu_lock():
        assert gpulock.held() == "exclusive"
        with gpulock.gpu_lock(shared=True):   # would deadlock on a second flock
            with gpulock.gpu_lock():
                pass
    assert gpulock.held() is None
    kinds = [k for _, _, k in gpulock.take_spans()]
    assert kinds == ["bench"]               # one span: the outer lock's


def test_out_of_memory_is_retried_alone_with_memory_freed(monkeypatch):
    """An OOM in a check or benchmark is the shared GPU's, not the kernel's:
    the evaluation frees the worker's inputs and runs again holding the GPU
    lock exclusively; a second OOM is reported as such, not as a bad kernel."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    from kiln_worker.evaluation import evaluate
    from kiln_worker.processes.device import select_device
    from kiln_worker.evaluation.templates import Library
    ev = evaluate.Evaluation(Library(), select_device())
    ev.inputs.entries[("x", 0)] = {"pristine": None, "ref": None}
    ev.inputs.jobs.append(("x",))
    seen = []

    def flaky(job, config, artifact_dir):
        seen.append(gpulock.held())
        if len(seen) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {"status": "ok", "timings": {}}

    monkeypatch.setattr(ev, "_run", flaky)
    assert ev.run({}, {}, None)["status"] == "ok"
    assert seen == [None, "exclusive"] and not ev.inputs.entries

    def always(job, config, artifact_dir):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(ev, "_run", always)
    r = ev.run({}, {}, None)
    assert r["status"] == "crash" and "out of GPU memory twice" in r["message"]


def test_space_answer_carries_a_templates_own_hints():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from kiln_worker.evaluation.evaluate import space
    from kiln_worker.evaluation.templates import Library
    target = {"name": "H200", "backend": "cuda", "arch": "sm_90", "warp_size": 32, "compute_units": 132,
              "max_shared_per_block": 232448}
    r = space(Library(), {"op": "conv2d", "shape": [2, 3, 16, 16], "dtype": "fp16",
                          "params": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "target": target})
    assert len(r["hints"]) == len(r["configs"])
    assert all(h["registers"] > 0 and h["instr_per_output"] > 0 for h in r["hints"])


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_every_kernel_of_an_evaluation_runs_holding_the_lock():
    # the job's input draws (set-up), the checks and the benchmark each hold
    # the lock; the kernel is loaded before the checks take it (preload.py)
    import yaml
    from kiln_worker.processes.device import select_device
    from kiln_worker.evaluation.evaluate import Evaluation
    from kiln_worker.evaluation.templates import Library

    ev = Evaluation(Library(), select_device())
    target = yaml.safe_load(open(ROOT / "configs" / "targets" / "H200.yaml"))
    job = {"op": "add", "shape": [1 << 20], "dtype": "fp32", "params": {}, "target": target,
           "validation": {"seeds": 2}, "benchmark": {"warmup": 2, "runs": 5}}
    first = ev.run(job, {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}, None)
    second = ev.run(job, {"BLOCK": 512, "num_warps": 4, "num_stages": 1}, None)
    assert first["status"] == second["status"] == "ok", (first["message"], second["message"])
    kinds = [k for _, _, k in first["timings"]["gpu_spans"]]
    # the set-up (two draws, two references: the job's seed and the candidate's
    # own) beside the compile, then the checks, the output poisoned, the
    # benchmark, and the output the timed runs left compared
    after = ["check", "check", "check", "bench", "check"]
    assert kinds == ["setup"] * 4 + after
    # the second candidate sets up its own seed only
    assert [k for _, _, k in second["timings"]["gpu_spans"]] == ["setup"] * 2 + after
    assert first["timings"]["setup_s"] > 0 and second["timings"]["setup_s"] > 0
    # the binary timed is the code object shipped (the target is this device),
    # and the measurement names the physical GPU
    for r in (first, second):
        assert r["latency"]["binary_sha256"] == r["artifact"]["sha256"], r["latency"].get("binaries")
        assert r["artifact"]["timed_match"] is True
        assert r["latency"]["device_identity"]["uuid"] or r["latency"]["device_identity"]["pci_bus_id"]
    assert first["timings"]["preload_s"] >= 0 and second["timings"]["preload_s"] >= 0
    assert set(first["timings"]["lock_wait_s"]) == {"setup", "check", "bench"}


def test_warm_up_off_a_gpu_does_nothing():
    from kiln_worker.processes.device import Device, warm_up
    assert warm_up(Device("cpu", "cpu", "cpu", None)) == {}
    assert gpulock.take_spans() == []  # no lock taken


def test_warm_up_waits_for_a_benchmark_and_holds_the_lock_shared(monkeypatch, tmp_path):
    # The warm-up's kernels run holding the lock shared (kind "warmup"): a
    # benchmark holding it excludes them. Stand-ins for torch record what runs
    # when, so this runs without a GPU.
    from kiln_worker.processes import device
    order = []

    class FakeCuda:
        @staticmethod
        def synchronize():
            order.append(("sync", gpulock.held()))

        @staticmethod
        def _sleep(cycles):
            order.append(("sleep", gpulock.held()))

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                order.append(("event", gpulock.held()))

    class FakeTensor:
        def __matmul__(self, other):
            order.append(("matmul", gpulock.held()))
            return self

        def float(self):
            return self

        def __sub__(self, other):
            return self

        def abs(self):
            return self

        def max(self):
            return self

        def all(self):
            return self

        def zero_(self):
            return self

    class FakeTorch:
        float32, bfloat16, float16 = "fp32", "bf16", "fp16"
        cuda = FakeCuda

        @staticmethod
        def empty(*a, **k):
            order.append(("context", gpulock.held()))
            return FakeTensor()

        @staticmethod
        def randn(*a, **k):
            return FakeTensor()

        zeros = randn

        @staticmethod
        def isfinite(t):
            return t

    from kiln_worker.evaluation import compare_kernel
    monkeypatch.setattr(compare_kernel, "precompile", lambda d: order.append(("compile", gpulock.held())))
    monkeypatch.setattr(compare_kernel, "warm", lambda d: order.append(("compare", gpulock.held())))
    monkeypatch.setitem(sys.modules, "torch", FakeTorch)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compile_once's lock file goes there
    dev = device.Device("cuda", "stand-in GPU", "cuda", "sm_90")
    q = mp.get_context("fork").Queue()
    holder = mp.get_context("fork").Process(target=_hold, args=(False, 0.6, q))
    holder.start()
    assert q.get(timeout=10)[0] == "in"  # a benchmark holds the lock
    t0 = time.time()
    phases = device.warm_up(dev)
    waited = time.time() - t0
    holder.join(10)
    assert set(phases) == {"context_s", "compile_wait_s", "compile_s", "kernels_s"}
    assert phases["compile_wait_s"] < 0.1 and (tmp_path / "kiln-compare-kernel.lock").exists()
    assert waited >= 0.4 and phases["kernels_s"] >= 0.4  # the kernels waited for the benchmark
    assert phases["context_s"] < 0.4 and phases["compile_s"] < 0.4
    # the context and the comparison kernel's compile outside the lock, kernels inside
    assert order[:2] == [("context", None), ("compile", None)]
    assert {held for what, held in order[2:]} == {"shared"} and ("compare", "shared") in order
    assert [what for what, _ in order].count("matmul") == 3  # fp32, bf16, fp16
    assert [k for _, _, k in gpulock.take_spans()] == ["warmup"]


def test_warm_up_in_its_own_thread_is_waited_for_once(monkeypatch):
    # device.WarmUp runs warm_up beside the worker's first requests; wait()
    # blocks until it is done, reports its phases and the wait once, and drops
    # its lock span and wait, which belong to no evaluation.
    import threading
    from kiln_worker.processes import device
    release = threading.Event()
    logged = []

    def fake_warm_up(dev):
        with gpulock.gpu_lock(shared=True, kind="warmup"):
            release.wait(10)
        return {"context_s": 0.1, "compile_s": 0.2, "kernels_s": 0.3}

    monkeypatch.setattr(device, "warm_up", fake_warm_up)
    with gpulock.gpu_lock(shared=True, kind="check"):  # (an evaluation's span, kept)
        pass
    t0 = time.perf_counter()
    w = device.WarmUp(device.Device("cuda", "stand-in GPU", "cuda", "sm_90"), logged.append)
    assert time.perf_counter() - t0 < 0.5 and not w.done()  # started, not waited for
    threading.Timer(0.3, release.set).start()
    got = w.wait()
    assert w.done() and got["wait_s"] >= 0.2
    assert {k: got[k] for k in ("context_s", "compile_s", "kernels_s")} == w.phases
    assert w.wait() is None  # reported once
    assert [k for _, _, k in gpulock.take_spans()] == ["check"]
    assert "warmup" not in gpulock.take_lock_waits()
    assert logged and logged[0].startswith("warmed up: context 0.10 s")


def test_warm_up_off_a_gpu_or_failing_is_not_waited_for(monkeypatch):
    from kiln_worker.processes import device
    w = device.WarmUp(device.Device("cpu", "cpu", "cpu", None))
    assert w.done() and w.wait() is None

    def broken(dev):
        raise RuntimeError("no context")

    monkeypatch.setattr(device, "warm_up", broken)
    logged = []
    w = device.WarmUp(device.Device("cuda", "stand-in GPU", "cuda", "sm_90"), logged.append)
    got = w.wait()  # returns: the first evaluation meets the error itself
    assert w.error == "RuntimeError: no context" and got["wait_s"] >= 0
    assert logged == ["warm-up failed: RuntimeError: no context"]


def test_two_threads_of_one_process_exclude_each_other():
    # the lock is held per thread (the warm-up and the set-up have threads of
    # their own): a thread's benchmark waits for another thread's check
    import threading
    events = []
    inside = threading.Event()

    def checker():
        with gpulock.gpu_lock(shared=True):
            events.append(("check in", gpulock.held()))
            inside.set()
            time.sleep(0.3)
            events.append(("check out", gpulock.held()))

    t = threading.Thread(target=checker)
    t.start()
    assert inside.wait(10)
    assert gpulock.held() is None  # the other thread's hold is not this one's
    with gpulock.gpu_lock():
        events.append(("bench in", gpulock.held()))
    t.join()
    assert events == [("check in", "shared"), ("check out", "shared"), ("bench in", "exclusive")]


def _stand_in_gpu_evaluation():
    # An Evaluation that takes a CPU for a GPU: its set-up path runs (threads,
    # lock, input cache), its tensors stay on the CPU.
    from kiln_worker.processes.device import Device
    from kiln_worker.evaluation.evaluate import Evaluation
    from kiln_worker.evaluation.templates import Library
    lib = Library()
    ev = Evaluation(lib, Device("cpu", "cpu", "cpu", None))
    ev.dev = Device("cuda", "stand-in GPU", "cpu", "sm_90")
    ev._sync = lambda: None
    return ev, lib.launch_module("add")


def test_a_jobs_set_up_runs_in_a_thread_and_the_check_finds_it_done():
    ev, mod = _stand_in_gpu_evaluation()
    job = {"validation": {"seeds": 2}}
    gpulock.take_spans()
    setup = ev._start_setup(mod, "add", [64], "fp32", {}, job)
    assert setup is not None
    setup.join()
    assert [k for _, _, k in gpulock.take_spans()] == ["setup"] * 4  # two draws, two references
    entries = list(ev.inputs.entries.values())
    assert len(entries) == 2 and all(e["ref"] is not None for e in entries)
    assert ev._setup_s > 0
    # set up already: nothing to start; the check's own draw finds the entry
    assert ev._start_setup(mod, "add", [64], "fp32", {}, job) is None
    from kiln_worker.evaluation import check
    assert ev._entry(mod, "add", [64], "fp32", {}, check.seed_list(job)[0], "cpu") is entries[0]
    # another job: another set-up; holding the lock (the out-of-memory retry): none
    with gpulock.gpu_lock():
        assert ev._start_setup(mod, "add", [128], "fp32", {}, job) is None


def test_a_set_up_error_is_the_checks_or_forgotten():
    ev, mod = _stand_in_gpu_evaluation()

    def broken(*a, **k):
        raise MemoryError("no room for the reference")

    mod_reference = mod.reference
    try:
        mod.reference = broken
        setup = ev._start_setup(mod, "add", [64], "fp32", {}, {"validation": {"seeds": 1}})
        with pytest.raises(MemoryError):
            setup.join()
        setup.join(reraise=False)  # after a failed compile: forgotten
    finally:
        mod.reference = mod_reference
    # what it left undone (the reference) is still to do: a new set-up starts
    again = ev._start_setup(mod, "add", [64], "fp32", {}, {"validation": {"seeds": 1}})
    assert again is not None
    again.join()
    assert all(e["ref"] is not None for e in ev.inputs.entries.values())


def test_the_lock_is_keyed_by_the_physical_gpu(monkeypatch):
    # issue 17: "unset", "0" and a UUID spelling of CUDA_VISIBLE_DEVICES were
    # three locks for one GPU; on AMD every worker got "0"
    monkeypatch.delenv("KILN_GPU_LOCK", raising=False)
    ident = {"uuid": "GPU-8d2c5b1e-0000-4a4a-9e9e-123456789abc", "pci_bus_id": "0000:1b:00.0",
             "name": "NVIDIA H200", "driver": "570.1"}
    monkeypatch.setitem(gpulock._IDENTITY, 0, ident)
    paths = set()
    for vis in (None, "0", "GPU-8d2c5b1e-0000-4a4a-9e9e-123456789abc", "3"):
        if vis is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", vis)
        monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
        paths.add(gpulock.lock_path())
    assert paths == {"/tmp/kiln-gpu-GPU-8d2c5b1e-0000-4a4a-9e9e-123456789abc.lock"}
    # no UUID (an older driver): the PCI bus id; neither: the visible devices
    assert gpulock.lock_key({"uuid": None, "pci_bus_id": "0000:1b:00.0"}) == "0000_1b_00.0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert gpulock.lock_key({}) == "1_2"
    monkeypatch.setenv("KILN_GPU_LOCK", "/tmp/explicit.lock")
    assert gpulock.lock_path() == "/tmp/explicit.lock"


def test_device_identity_off_a_gpu_is_empty(monkeypatch):
    monkeypatch.delitem(gpulock._IDENTITY, 0, raising=False)
    if torch.cuda.is_available():
        ident = gpulock.device_identity()
        assert ident["uuid"] or ident["pci_bus_id"]
    else:
        assert gpulock.device_identity() == {}


def _compile_under_lock(directory, hold_s, q):
    from kiln_worker.processes.compile_once import compile_once
    t0 = time.monotonic()
    with compile_once("k", directory=directory) as state:
        q.put(("in", state, time.monotonic() - t0, time.monotonic()))
        time.sleep(hold_s)
    q.put(("out", state, time.monotonic() - t0, time.monotonic()))


def test_compile_once_lets_one_process_compile_while_the_others_wait(tmp_path):
    """The first process through compile_once holds the node's lock while it
    compiles; the others wait for it and then run side by side (not in
    turn); a wait past wait_s goes on unlocked; a lock file that cannot be
    made is no lock."""
    from kiln_worker.processes.compile_once import compile_once, triton_cache_dir
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    first = ctx.Process(target=_compile_under_lock, args=(str(tmp_path), 0.6, q))
    first.start()
    assert q.get(timeout=10)[:2] == ("in", "compiled")
    waiters = [ctx.Process(target=_compile_under_lock, args=(str(tmp_path), 0.5, q)) for _ in range(2)]
    for w in waiters:
        w.start()
    events = [q.get(timeout=10) for _ in range(5)]
    for p in [first, *waiters]:
        p.join(10)
    first_out = [e for e in events if e[0] == "out" and e[1] == "compiled"][0]
    ins = [e for e in events if e[0] == "in"]
    outs = [e for e in events if e[0] == "out" and e[1] == "waited"]
    assert [e[1] for e in ins] == ["waited", "waited"] and len(outs) == 2
    assert all(e[3] >= first_out[3] - 0.05 for e in ins)  # after the compiler was done
    assert all(e[2] >= 0.3 for e in ins)                   # they waited for it
    # side by side: the second waiter was in before the first waiter was out
    assert max(e[3] for e in ins) < min(e[3] for e in outs)
    # a compile that is not done in time: the body runs unlocked after wait_s
    holder = ctx.Process(target=_compile_under_lock, args=(str(tmp_path), 1.0, q))
    holder.start()
    assert q.get(timeout=10)[:2] == ("in", "compiled")
    t0 = time.monotonic()
    with compile_once("k", wait_s=0.2, directory=str(tmp_path)) as state:
        assert state == "unlocked" and 0.2 <= time.monotonic() - t0 < 0.8
    holder.join(10)
    # nobody compiling: this one is the compiler
    with compile_once("k", directory=str(tmp_path)) as state:
        assert state == "compiled"
    # an unwritable place: unlocked at once, no error
    blocked = tmp_path / "file"
    blocked.write_text("")
    with compile_once("k", directory=str(blocked / "sub")) as state:
        assert state == "unlocked"
    # the default directory is Triton's cache
    assert triton_cache_dir() == os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))


def test_the_context_is_created_in_a_thread_of_its_own_and_its_failure_dropped():
    """create_context_early: the first allocation runs in another thread than
    the caller's (which goes on importing Triton), on the device asked for;
    an allocation that raises (no usable GPU) ends the thread quietly."""
    import threading
    from kiln_worker.processes.device import create_context_early

    calls = []

    class FakeTorch:
        @staticmethod
        def empty(n, device):
            calls.append((n, device, threading.current_thread().name))

    t = create_context_early(FakeTorch, "cuda")
    t.join(5)
    assert not t.is_alive()
    assert calls == [(1, "cuda", "kiln-context")] and threading.current_thread().name != "kiln-context"

    class Broken:
        @staticmethod
        def empty(n, device):
            raise RuntimeError("CUDA error: no CUDA-capable device is detected")

    seen = []
    old = threading.excepthook
    threading.excepthook = lambda args: seen.append(args)
    try:
        t = create_context_early(Broken, "cuda")
        t.join(5)
    finally:
        threading.excepthook = old
    assert not t.is_alive() and seen == []
