"""Unit tests of the worker's correctness comparison, statistics and helpers."""
from __future__ import annotations

import json
import math
import statistics
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

HOME = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(HOME / "worker"))

from fake_device import FakeDeviceApi  # noqa: E402
from kiln_worker.evaluation import timing, check  # noqa: E402
from kiln_worker.processes import gpulock  # noqa: E402
from kiln_worker.codeobject import resources, targetcompile  # noqa: E402
from kiln_worker.service.jsonsafe import json_safe  # noqa: E402


def _ref(shape=(8, 16), scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


# -- compare ------------------------------------------------------------------------

def test_compare_identical_passes():
    ref = _ref()
    s = check.compare(ref.float(), ref, 1e-4, 1e-4, 0)
    assert s["max_abs_err"] < 1e-6 and s["worst_ratio"] < 1


def test_compare_reports_worst_element_and_errors():
    ref = _ref()
    out = ref.clone().float()
    out[3, 7] += 0.25
    out[5, 1] += 0.01
    with pytest.raises(check.Incorrect) as e:
        check.compare(out, ref, 1e-4, 1e-4, 4)
    msg = e.value.message
    assert "worst at index [3, 7]" in msg and "seed 4" in msg and "2 of 128 elements" in msg
    assert abs(e.value.stats["max_abs_err"] - 0.25) < 1e-6
    expected_rel = 0.25 / max(abs(ref[3, 7].item()), 1e-4)
    assert math.isclose(e.value.stats["max_rel_err"], expected_rel, rel_tol=1e-4) or \
        e.value.stats["max_rel_err"] >= expected_rel


def test_compare_in_chunks_matches_the_whole(monkeypatch):
    """compare() works through COMPARE_CHUNK elements at a time (memory: a dozen
    workers share one GPU); statistics, the worst element and the counts are
    those of the whole tensors."""
    ref = _ref((9, 13), seed=3)
    out = ref.float() + 1e-6
    out[4, 11] += 0.3
    out[0, 2] += 0.3           # the same error earlier: the first worst element wins
    out[7, 5] += 0.05
    results = []
    for chunk in (1 << 24, 7, 1):
        monkeypatch.setattr(check, "COMPARE_CHUNK", chunk)
        with pytest.raises(check.Incorrect) as e:
            check.compare(out, ref, 1e-4, 1e-4, 2)
        results.append((e.value.message, e.value.stats))
        ok = check.compare(ref.float(), ref, 1e-4, 1e-4, 2)
        results.append((None, {k: round(v, 12) for k, v in ok.items()}))
        bad = out.clone()
        bad[8, 12] = float("nan")
        bad[6, 0] = float("inf")
        with pytest.raises(check.Incorrect) as e:
            check.compare(bad, ref, 1e-4, 1e-4, 2)
        results.append((e.value.message, e.value.stats))
    whole = results[:3]
    assert "worst at index [0, 2]" in whole[0][0] and "3 of 117 elements" in whole[0][0]
    assert "2 of 117 elements NaN/inf" in whole[2][0] and "first at index [6, 0]" in whole[2][0]
    for i in (3, 6):
        assert results[i:i + 3] == whole


@pytest.mark.parametrize("chunk", [1 << 24, 7])
def test_passing_compare_matches_the_detailed_pass(monkeypatch, chunk):
    # the one-read pass and the detailed pass give the same statistics for a
    # passing output, whatever the chunking; a failing one gets the detailed
    # pass's message and statistics
    monkeypatch.setattr(check, "COMPARE_CHUNK", chunk)
    ref = _ref((9, 13), scale=3.0, seed=5)
    out = (ref + 1e-5 * _ref((9, 13), seed=6)).float()
    fast = check.compare(out, ref, 1e-4, 1e-4, 1)
    # equal to the last bits or so: the two passes reduce the same chunks with
    # different torch calls, and torch's CPU reductions may vectorise them
    # differently (seen with torch 2.11)
    assert fast == pytest.approx(check._compare_detailed(out, ref, 1e-4, 1e-4, 1), rel=1e-12)
    memo = {}
    assert check.compare(out, ref, 1e-4, 1e-4, 1, memo=memo) == fast
    assert memo["bad_ref"] == 0
    assert check.compare(out, ref, 1e-4, 1e-4, 1, memo=memo) == fast  # from the memo
    out[2, 3] += 1.0
    with pytest.raises(check.Incorrect) as fast_e:
        check.compare(out, ref, 1e-4, 1e-4, 1, memo=memo)
    with pytest.raises(check.Incorrect) as slow_e:
        check._compare_detailed(out, ref, 1e-4, 1e-4, 1)
    assert (fast_e.value.message, fast_e.value.stats) == (slow_e.value.message, slow_e.value.stats)


def test_passing_compare_reads_the_device_once(monkeypatch):
    # every read of a device value is a synchronisation on a GPU: a passing
    # output is read back in one transfer (two the first time a reference is
    # seen: its own facts), never element by element
    reads = []
    real_tolist, real_item = torch.Tensor.tolist, torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: reads.append("tolist") or real_tolist(t))
    monkeypatch.setattr(torch.Tensor, "item", lambda t: reads.append("item") or real_item(t))
    monkeypatch.setattr(check, "COMPARE_CHUNK", 16)  # 8 chunks
    ref = _ref((8, 16))
    memo = {}
    check.compare(ref.float(), ref, 1e-4, 1e-4, 0, memo=memo)
    assert reads == ["tolist", "tolist"]
    reads.clear()
    check.compare(ref.float(), ref, 1e-4, 1e-4, 0, memo=memo)
    assert reads == ["tolist"]
    reads.clear()
    assert check.modified_inputs({"a": ref, "b": ref.float()}, {"a": ref, "b": ref.float()}) == []
    assert reads == ["tolist"]


def test_compare_tolerance_edges():
    ref = torch.full((4,), 2.0, dtype=torch.float64)
    atol, rtol = 1e-3, 1e-2
    ok = ref + (atol + rtol * 2.0) * 0.99
    check.compare(ok, ref, atol, rtol, 0)
    bad = ref.clone()
    bad[2] += (atol + rtol * 2.0) * 1.01
    with pytest.raises(check.Incorrect, match=r"index \[2\]"):
        check.compare(bad, ref, atol, rtol, 0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_compare_nonfinite_fails(bad):
    ref = _ref((10,))
    out = ref.clone().half()
    out[6] = bad
    with pytest.raises(check.Incorrect, match=r"NaN/inf.*index \[6\]"):
        check.compare(out, ref.float(), 1.0, 1.0, 0)  # even with huge tolerances


def test_compare_shape_mismatch():
    with pytest.raises(check.Incorrect, match="shape"):
        check.compare(torch.zeros(3, 4), torch.zeros(4, 3, dtype=torch.float64), 1, 1, 0)


def test_a_few_large_outputs_do_not_widen_the_others():
    # issue 17: atol * max(1, rms(ref)) let 20% errors on a third of the
    # elements pass when a few outputs were large. The policy is per element.
    ref = _ref((300,), scale=1.0)
    ref[:3] = 1e4  # rms ~ 1000
    out = ref.clone()
    out[100:200] *= 1.2  # 20% off on a third
    with pytest.raises(check.Incorrect, match="out of tolerance"):
        check.compare(out, ref, 1e-4, 1e-4, 0)
    s = check.compare(ref.float(), ref, 1e-4, 1e-4, 0)
    assert s["atol"] == 1e-4  # the allowance is the policy's, whatever the data


def test_strided_views_are_compared_in_logical_order():
    base = _ref((74,))
    ref = base[::2]  # a strided view; reshape(-1) of it is a view too
    assert ref.reshape(-1).stride() == (2,)
    good = torch.empty(74, dtype=torch.float32)
    good[::2] = ref.float()
    assert check.compare(good[::2], ref, 1e-4, 1e-4, 0)["max_abs_err"] < 1e-6
    prefix = base[:37].float()  # the reference storage's unstrided prefix: wrong
    with pytest.raises(check.Incorrect):
        check.compare(prefix, ref, 1e-4, 1e-4, 0)
    flats = check._flattened(good[::2], ref, 0)
    assert flats[0].is_contiguous() and flats[1].is_contiguous()


def test_reference_nonfinite_is_reported():
    ref = _ref((5,))
    ref[0] = float("nan")
    with pytest.raises(check.Incorrect, match="reference"):
        check.compare(ref.clone(), ref, 1, 1, 0)


# -- inputs ------------------------------------------------------------------------

def test_modified_inputs_bitwise():
    x = torch.tensor([0.0, 1.0, float("nan")])
    before = check.snapshot({"x": x, "n": 3})
    assert check.modified_inputs(before, {"x": x, "n": 3}) == []  # NaN == NaN bitwise
    x[0] = -0.0  # equal as a number, different bits
    assert check.modified_inputs(before, {"x": x}) == ["x"]
    y = torch.zeros(2)
    before = check.snapshot({"x": x, "y": y, "z": y})
    y[1] = 1.0
    x[1] = 2.0
    # in the inputs' order; a missing or reshaped input counts as changed
    assert check.modified_inputs(before, {"x": x.clone(), "y": y, "z": y}) == ["x", "y", "z"]
    assert check.modified_inputs(before, {"y": torch.zeros(2), "z": torch.zeros(1, 2)}) == ["x", "z"]


def test_upcast_keeps_ints():
    d = check.upcast({"x": torch.ones(2, dtype=torch.float16), "i": torch.arange(3), "k": 5},
                     torch.float32)
    assert d["x"].dtype == torch.float32 and d["i"].dtype == torch.int64 and d["k"] == 5
    assert check.upcast_dtype("fp32") == torch.float64 and check.upcast_dtype("bf16") == torch.float32


def test_tolerance_resolution():
    assert check.resolve_tolerances({"dtype": "fp32"}) == (1e-4, 1e-4)
    assert check.resolve_tolerances({"dtype": "bf16"}) == (1e-2, 1e-2)
    job = {"dtype": "fp16", "validation": {"atol": 0.5, "rtol": None}}
    assert check.resolve_tolerances(job) == (0.5, 1e-2)

    class Hooked:
        @staticmethod
        def validation_tolerance(op, shape, dtype, params):
            assert (op, shape, dtype, params) == ("matmul", [4, 4, 4096], "fp16", {"p": 1})
            return {"atol": 0.05}
    job = {"op": "matmul", "shape": [4, 4, 4096], "dtype": "fp16", "params": {"p": 1}}
    assert check.resolve_tolerances(job, Hooked) == (0.05, 1e-2)
    job["validation"] = {"atol": 0.2, "rtol": 0.3}
    assert check.resolve_tolerances(job, Hooked) == (0.2, 0.3)

    class Reduction:  # the output scale from the shape: sqrt(K), never from the data
        @staticmethod
        def validation_tolerance(op, shape, dtype, params):
            return {"reduction": shape[2]}
    job = {"op": "matmul", "shape": [4, 4, 4096], "dtype": "fp32"}
    assert check.resolve_tolerances(job, Reduction) == (pytest.approx(64e-4), 1e-4)


def test_scan_tolerance_grows_with_the_row():
    """cumsum's outputs are running sums: on an H200 the chunked kernel on a
    32768-column fp32 row was 3.5e-4 off float64 at an element whose sum came
    back near zero (3.5x the default atol): the atol scales by sqrt(cols), as
    row_sum's; cumprod keeps the default."""
    sys.path.insert(0, str(HOME))
    from kernels import scan
    job = {"op": "cumsum", "shape": [8, 32768], "dtype": "fp32"}
    atol, rtol = check.resolve_tolerances(job, scan)
    assert atol == pytest.approx(1e-4 * math.sqrt(32768)) and rtol == 1e-4
    assert atol > 3.5e-4
    assert check.resolve_tolerances({**job, "op": "cumprod"}, scan) == (1e-4, 1e-4)
    short = {**job, "shape": [8, 1]}
    assert check.resolve_tolerances(short, scan) == (1e-4, 1e-4)


def test_seed_list():
    job = {"op": "x", "shape": [3], "dtype": "fp32"}
    job_seeds = check.seed_list(job)
    assert len(job_seeds) == 3 and len(set(job_seeds)) == 3 and job_seeds != [0, 1, 2]
    assert check.seed_list(dict(job)) == job_seeds  # deterministic
    a = check.seed_list(job, check.candidate_id({"BLOCK": 64}))
    b = check.seed_list(job, check.candidate_id({"BLOCK": 128}))
    assert a[:2] == b[:2] == job_seeds[:2] and a[2] != b[2]  # one seed of the candidate's own
    src = check.seed_list(job, check.candidate_id(source="x = 1"), per_candidate=99)
    assert len(src) == 3 and not set(src) & set(job_seeds)
    other = check.seed_list({**job, "shape": [4]})
    assert other != job_seeds  # another job, other seeds
    assert check.seed_list({**job, "key": "k1"}) != check.seed_list({**job, "key": "k2"})
    assert check.seed_list({"validation": {"seeds": 5}})[:1] != [0]
    assert len(check.seed_list({"validation": {"seeds": 5}})) == 5
    assert check.seed_list({"validation": {"seeds": [7, 11]}}) == [7, 11]
    assert all(0 <= s < 2 ** 31 for s in a + src)


# -- benchmark statistics -----------------------------------------------------------

def test_stats_ms_matches_numpy():
    np = pytest.importorskip("numpy")
    import random
    rng = random.Random(3)
    for n in (1, 2, 7, 100, 1000):
        xs = [rng.lognormvariate(0, 0.3) for _ in range(n)]
        s = timing.stats_ms(xs)
        assert math.isclose(s["mean_ms"], float(np.mean(xs)), rel_tol=1e-12)
        assert math.isclose(s["median_ms"], float(np.median(xs)), rel_tol=1e-12)
        assert math.isclose(s["p99_ms"], float(np.percentile(xs, 99)), rel_tol=1e-12)
        assert s["min_ms"] == min(xs) and s["max_ms"] == max(xs)
        sd = statistics.stdev(xs) if n > 1 else 0.0
        assert math.isclose(s["stddev_ms"], sd, rel_tol=1e-9, abs_tol=1e-15)


def test_flush_bytes():
    assert timing.flush_bytes(None) == 256 * 2**20
    assert timing.flush_bytes({"l2_bytes": 50 * 2**20}) == 256 * 2**20
    assert timing.flush_bytes({"l2_bytes": 4 * 2**20, "infinity_cache_bytes": 256 * 2**20}) == 520 * 2**20
    assert timing.flush_bytes({"infinity_cache_bytes": 10 * 2**30}) == 2**30


# -- occupancy / limits --------------------------------------------------------------

H200 = {"registers_per_cu": 65536, "lds_bytes_per_cu": 233472, "max_waves_per_simd": 16,
        "simds_per_cu": 4}


def test_nvidia_occupancy_hand_computed():
    # 32 regs, 4 warps, no smem: 64 resident warps (warp limit)
    assert resources.nvidia_occupancy(32, 0, 4, H200)["occupancy"] == 64
    # 128 regs -> 4096 regs per warp -> 16 warps by registers
    o = resources.nvidia_occupancy(128, 0, 4, H200)
    assert o["occupancy"] == 16 and o["limiter"] == "registers"
    # 100 KiB smem per block (+1 KiB reserved) -> 2 blocks of 4 warps
    o = resources.nvidia_occupancy(32, 100 * 1024, 4, H200)
    assert o["occupancy"] == 8 and o["limiter"] == "shared_memory"
    # 1 warp per block: 32 blocks per SM max
    assert resources.nvidia_occupancy(16, 0, 1, H200)["occupancy"] == 32
    # 255 regs (rounded to 8192 per warp) x 8 warps: 8 warps fit (65536 / 8192)
    assert resources.nvidia_occupancy(255, 0, 8, H200)["occupancy"] == 8
    # missing target numbers fall back to H100/H200 defaults
    assert resources.nvidia_occupancy(32, 0, 4, {})["occupancy"] == 64


def _art(kind="cubin", shared=0, threads=128, regs=32, occ=4):
    return {"kind": kind, "shared_bytes": shared, "block": [threads, 1, 1], "registers": regs,
            "occupancy": occ}


def test_target_limits():
    t = dict(H200, name="H200", max_shared_per_block=232448)
    assert targetcompile.check_target_limits(_art(), t) is None
    assert "shared memory" in targetcompile.check_target_limits(_art(shared=232449), t)
    assert "threads" in targetcompile.check_target_limits(_art(threads=2048), t)
    msg = targetcompile.check_target_limits(_art(threads=1024, regs=128), t)
    assert "registers" in msg and "H200" in msg
    mi = {"name": "MI300X", "lds_bytes_per_cu": 65536}
    assert "shared memory" in targetcompile.check_target_limits(_art("hsaco", shared=65537), mi)
    assert targetcompile.check_target_limits(_art("hsaco", shared=65536), mi) is None
    assert "occupancy 0" in targetcompile.check_target_limits(_art("hsaco", occ=0), mi)


# -- target / misc helpers --------------------------------------------------------------

def test_gpu_target_mapping():
    pytest.importorskip("triton")
    t = targetcompile.gpu_target({"backend": "cuda", "arch": "sm_90"})
    assert (t.backend, t.arch, t.warp_size) == ("cuda", 90, 32)
    t = targetcompile.gpu_target({"backend": "cuda", "arch": "sm_100a"})
    assert t.arch == 100
    t = targetcompile.gpu_target({"backend": "hip", "arch": "gfx1100"})
    assert (t.backend, t.arch, t.warp_size) == ("hip", "gfx1100", 32)
    t = targetcompile.gpu_target({"vendor": "amd", "arch": "gfx942"})
    assert (t.backend, t.warp_size) == ("hip", 64)
    with pytest.raises(ValueError):
        targetcompile.gpu_target({"backend": "metal", "arch": "m3"})
    with pytest.raises(ValueError):
        targetcompile.cuda_capability("gfx942")


def test_kernel_args_and_grid():
    spec = {"signature": {"a": "*fp16", "n": "i32", "B": "constexpr", "C": "i32"},
            "constexprs": {"B": 4, "C": 3}}
    args = targetcompile.kernel_args(spec, None)
    assert [a["name"] for a in args] == ["a", "n", "global_scratch", "profile_scratch"]
    assert [a.get("hidden", False) for a in args] == [False, False, True, True]
    assert len(targetcompile.kernel_args(spec, 3)) == 3  # what the code object says wins
    assert targetcompile.normalise_grid((5,)) == [5, 1, 1]
    assert targetcompile.normalise_grid(7) == [7, 1, 1]
    assert targetcompile.normalise_grid([2, 3, 4]) == [2, 3, 4]


def test_trim_and_describe():
    long = "x" * 10000
    t = targetcompile.trim_message(long, 1000)
    assert len(t) <= 1100 and "trimmed" in t
    try:
        try:
            raise ValueError("root cause")
        except ValueError as e:
            raise RuntimeError("outer") from e
    except RuntimeError as exc:
        d = targetcompile.describe_exception(exc)
    assert d.startswith("RuntimeError: outer") and "Caused by: ValueError: root cause" in d


def test_json_safe():
    P = namedtuple("P", "a b")
    v = json_safe({"x": float("nan"), "y": (1, 2.5, float("inf")), "p": P(1, [b"ab"]), 3: {4}})
    assert v == {"x": None, "y": [1, 2.5, None], "p": {"a": 1, "b": ["<2 bytes>"]}, "3": [4]}
    json.dumps(v, allow_nan=False)
    assert json_safe(torch.tensor(2.5)) == 2.5


def test_compile_child_death_is_reported(monkeypatch):
    import subprocess
    from kiln_worker.processes import compile_child

    client = compile_child.CompileClient()

    def fake_start():
        client.proc = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    monkeypatch.setattr(client, "_start", fake_start)
    with pytest.raises(compile_child.CompileChildDied, match="SIGSEGV"):
        client.compile({"op": "add"})
    assert client.proc is None  # restarted on the next request


def test_benchmark_control_flow_with_fake_device():
    """The event / flush / sleep sequence, with a fake device API that records calls."""
    log = []
    clock = [0.0]

    durations = iter([0.5] * 3 + [1.0, 2.0, 3.0, 4.0])

    def launch():
        clock[0] += next(durations)
        log.append("launch")

    target = {"l2_bytes": 4 * 2**20, "infinity_cache_bytes": 256 * 2**20}
    r = timing.benchmark(launch, 3, 4, "Fake GPU", target, api=FakeDeviceApi(log, clock, log_buffers=True))
    assert r["runs"] == 4 and r["warmup"] == 3 and r["device"] == "Fake GPU"
    assert r["mean_ms"] == 2.5 and r["median_ms"] == 2.5 and r["min_ms"] == 1.0 and r["max_ms"] == 4.0
    assert log[0] == ("buffer", 520 * 2**20)
    # the warm-up's second call timed with events (the probe of the time bound)
    assert log[1:9] == ["sync", "flush", "launch", "flush", "event", "launch", "event", "sync"]
    first_sleep = next(i for i, x in enumerate(log) if isinstance(x, tuple) and x[0] == "sleep")
    timed = log[first_sleep - 1:]
    assert log[first_sleep - 2] == "sync"
    # each timed run: flush, sleep, start event, launch, end event; one sync at the end
    per_run = timed[:5]
    assert per_run[0] == "flush" and per_run[1][0] == "sleep" and per_run[2:] == ["event", "launch", "event"]
    assert timed[-1] == "sync" and timed.count("launch") == 4 and timed.count("flush") == 4


@pytest.mark.parametrize("kernel_ms,cutoff,stops", [(2.0, 1.5, True), (1.0, 1.5, False), (2.0, None, False)])
def test_benchmark_cutoff_stops_a_slow_kernel_early(kernel_ms, cutoff, stops):
    """With a cutoff (the engine's: a factor times the job's best so far), a
    kernel whose first CUTOFF_CHECK_RUNS runs have a median above it stops
    there, its result saying so; one under it, or no cutoff, runs every run."""
    log, clock = [], [0.0]

    def launch():
        clock[0] += kernel_ms
        log.append("launch")

    r = timing._benchmark(launch, 5, 100, "Fake GPU", {}, api=FakeDeviceApi(log, clock), cutoff_ms=cutoff)
    assert r["median_ms"] == kernel_ms
    if stops:
        assert r["runs"] == timing.CUTOFF_CHECK_RUNS and log.count("launch") == 5 + timing.CUTOFF_CHECK_RUNS
        assert r["stopped_early"] == {"after_runs": timing.CUTOFF_CHECK_RUNS, "median_ms": kernel_ms,
                                      "cutoff_ms": cutoff}
    else:
        assert r["runs"] == 100 and log.count("launch") == 105 and "stopped_early" not in r


@pytest.mark.parametrize("kernel_ms,warmup,runs", [(1.0, 25, 100), (20.0, 25, 100), (40.0, 15, 50),
                                                  (400.0, 4, 10), (5000.0, 3, 10)])
def test_benchmark_counts_are_bounded_by_time(kernel_ms, warmup, runs):
    """The manifest's warmup 25 / runs 100 are upper bounds: the probe call
    (the second warm-up call, timed with events) bounds the further warm-up to
    WARMUP_BUDGET_MS and the timed runs to TIMED_BUDGET_MS, never under MIN_RUNS."""
    log, clock = [], [0.0]

    def launch():
        clock[0] += kernel_ms
        log.append("launch")

    r = timing._benchmark(launch, 25, 100, "Fake GPU", {}, api=FakeDeviceApi(log, clock))
    assert (r["warmup"], r["runs"]) == (warmup, runs)
    assert log.count("launch") == warmup + runs and r["median_ms"] == kernel_ms


def test_the_binary_timed_is_the_binary_shipped():
    from kiln_worker.codeobject.launches import match_timed, same_device, untimed
    h200 = {"name": "H200", "backend": "cuda", "arch": "sm_90"}
    mi300 = {"name": "MI300X", "backend": "hip", "arch": "gfx942"}
    assert same_device(h200, "sm_90") and same_device({"arch": "90"}, "sm_90")
    assert not same_device(h200, "sm_80") and not same_device(mi300, "sm_90")
    assert same_device(mi300, "gfx942") and not same_device(h200, None)
    lat = {"binaries": [{"kernel": "k", "kind": "cubin", "sha256": "aa", "launches": 100}]}
    art = {"kernel_name": "k", "sha256": "aa"}
    assert match_timed([art], lat, h200, "sm_90") is None
    assert art["timed_sha256"] == "aa" and art["timed_match"] is True
    other = {"kernel_name": "k", "sha256": "bb"}
    msg = match_timed([other], lat, h200, "sm_90")
    assert other["timed_match"] is False and "is not the binary timed" in msg
    cross = {"kernel_name": "k", "sha256": "bb"}
    assert match_timed([cross], lat, mi300, "sm_90") is None and cross["timed_match"] is None
    cpu = {"kernel_name": "k", "sha256": "bb"}
    untimed([cpu])
    assert cpu["timed_sha256"] is None and "interpreter" in cpu["timed_check"]


def test_input_cache_keeps_another_job_only_while_small(monkeypatch):
    """A worker alternating between two jobs keeps both jobs' inputs while the
    other one is small; a job of KernelBench size (GiBs per seed) is dropped as
    soon as the worker moves on, so workers sharing a GPU do not hoard it."""
    from kiln_worker.evaluation.evaluate import _InputCache
    monkeypatch.setattr(_InputCache, "OTHER_JOBS_BYTES", 1000)
    drawn = []

    def draw(n):
        def f():
            drawn.append(n)
            return {"inputs": {"x": torch.zeros(n, dtype=torch.uint8)}, "ref": torch.zeros(1)}
        return f

    c = _InputCache()
    small_a, small_b, big = ("a", 0), ("b", 0), ("big", 0)
    c.get(small_a, draw(100))
    c.get(small_b, draw(100))
    c.get(small_a, draw(100))          # a is still cached: both jobs are small
    assert drawn == [100, 100]
    c.get(big, draw(5000))
    c.get(small_a, draw(100))          # the older small job b was the third: evicted anyway
    assert c.prepared(small_a) and not c.prepared(small_b)
    assert not c.prepared(big), "a big job's inputs were kept after the worker moved on"
    c.get(big, draw(5000))
    assert drawn[-1] == 5000 and drawn.count(5000) == 2
    assert c.prepared(big) and c.prepared(small_a), "a small other job is kept beside a big one"


def test_input_cache_budget_keeps_the_seeds_that_fit(monkeypatch):
    """Under a byte budget (a GPU worker's share of the GPU's memory) a job
    whose seeds do not all fit keeps the ones that do: drawing one more seed
    first drops the job's others, which are drawn again when needed, and the
    job is marked tight (no set-up ahead of the check). Without a budget (the
    CPU) every seed stays."""
    from kiln_worker.evaluation import evaluate as ev
    monkeypatch.setattr(ev, "_release_cached_gpu_memory", lambda: None)
    drawn = []

    def draw(seed):
        def f():
            drawn.append(seed)
            return {"inputs": {"x": torch.zeros(400, dtype=torch.uint8)}, "ref": torch.zeros(100, dtype=torch.uint8)}
        return f

    job = ("softmax", "[4096, 393216]", "fp32", "{}", "cuda")
    c = ev._InputCache(budget_bytes=1200)
    for seed in (0, 1):
        c.get(job + (seed,), draw(seed))
    assert drawn == [0, 1] and not c.tight(job + (0,))       # 1000 bytes: two seeds fit
    c.get(job + (2,), draw(2))                                 # a third would not: 0 and 1 go
    assert not c.prepared(job + (0,)) and not c.prepared(job + (1,)) and c.prepared(job + (2,))
    assert c.tight(job + (0,))
    c.get(job + (0,), draw(0))
    assert drawn == [0, 1, 2, 0]
    unbounded = ev._InputCache()
    for seed in range(5):
        unbounded.get(job + (seed,), draw(seed))
    assert all(unbounded.prepared(job + (s,)) for s in range(5)) and not unbounded.tight(job + (0,))
