"""Benchmarking a launch on a GPU with device events.

Per timed run: flush L2 (and AMD's Infinity Cache) by writing a buffer of at
least 256 MiB, let the GPU spin briefly (``torch.cuda._sleep``) so the host has
queued the start event and the kernel before the GPU gets there -- this keeps the
Python launch overhead out of the measurement -- then start event, launch, end
event. All events are read after one synchronize. The same inputs are reused;
the flush makes every run start cold.

Counts are bounded by time, as `triton.testing.do_bench`'s are: the second
warm-up call is timed with events, and a kernel that long gets at most
WARMUP_BUDGET_MS of further warm-up and TIMED_BUDGET_MS of timed runs (never
fewer than MIN_RUNS): the manifest's `warmup` / `runs` are upper bounds. A
kernel under 20 ms gets them all; a 200 ms convolution of KernelBench size gets
10 timed runs instead of 100 (its median moves by far less than its noise).
The result's `runs` and `warmup` are the counts used.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from ..processes.gpulock import device_identity, gpu_lock

TIMED_BUDGET_MS = 2000.0   # timed runs of one benchmark, in kernel time (module docstring)
WARMUP_BUDGET_MS = 500.0   # warm-up after the probe call
MIN_RUNS = 10
FLUSH_MIN_BYTES = 256 * 1024 * 1024
FLUSH_MAX_BYTES = 1024 * 1024 * 1024


def flush_bytes(target: dict | None) -> int:
    target = target or {}
    cache = 0
    for k in ("l2_bytes", "infinity_cache_bytes"):
        try:
            cache += int(target.get(k) or 0)
        except (TypeError, ValueError):
            pass
    return int(min(FLUSH_MAX_BYTES, max(FLUSH_MIN_BYTES, 2 * cache)))


def stats_ms(times: list[float]) -> dict:
    xs = sorted(times)
    n = len(xs)
    mean = sum(xs) / n
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    # p99 with linear interpolation between closest ranks (numpy's default)
    pos = 0.99 * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    p99 = xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return {"mean_ms": mean, "median_ms": med, "p99_ms": p99, "min_ms": xs[0],
            "max_ms": xs[-1], "stddev_ms": math.sqrt(var)}


class _Cuda:
    """The device API the benchmark uses (torch.cuda; a fake one in the tests)."""

    def __init__(self):
        import torch
        self.torch = torch

    def buffer(self, nbytes: int):
        return self.torch.empty(nbytes // 4, dtype=self.torch.int32, device="cuda")

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def synchronize(self):
        self.torch.cuda.synchronize()

    def sleep(self, cycles: int) -> bool:
        fn = getattr(self.torch.cuda, "_sleep", None)
        if fn is None:
            return False
        fn(int(cycles))
        return True


# With a cutoff: the runs after which the median is compared with it.
CUTOFF_CHECK_RUNS = 20


def benchmark(fn: Callable[[], None], warmup: int, runs: int, device_name: str,
              target: dict | None = None, api=None, cutoff_ms: float | None = None,
              before: Callable[[], None] | None = None) -> dict:
    with gpu_lock():
        out = _benchmark(fn, warmup, runs, device_name, target, api, cutoff_ms, before)
    ident = device_identity()
    if ident:
        out["device_identity"] = ident
    return out


def _benchmark(fn: Callable[[], None], warmup: int, runs: int, device_name: str,
               target: dict | None = None, api=None, cutoff_ms: float | None = None,
               before: Callable[[], None] | None = None) -> dict:
    """`warmup` untimed runs, then `runs` timed ones (module docstring). With
    `cutoff_ms` (the engine's bench cutoff: a factor times the job's best
    median so far), the first CUTOFF_CHECK_RUNS timed runs are read
    first, and when their median is above the cutoff the benchmark stops
    there: the result has those runs and `stopped_early` (such a kernel cannot
    be the job's best; the other runs would only hold the GPU). `before`, when
    given, runs before every call (warm-up and timed), outside the timed
    region (generated code: fresh input copies per call)."""
    api = api or _Cuda()
    warmup = max(0, int(warmup))
    runs = max(1, int(runs))
    cache = api.buffer(flush_bytes(target))

    # warm-up (also JIT-compiles and loads the kernel), measuring host launch
    # time; its second call (the first when there is one) timed with events
    # bounds the counts by time (module docstring)
    api.synchronize()
    host = []
    w_total = max(1, warmup)
    probe_at = min(1, w_total - 1)
    j = 0
    while j < w_total:
        if before is not None:
            before()
        cache.zero_()
        if j == probe_at:
            e0 = api.event()
            e0.record()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        if j == probe_at:
            e1 = api.event()
            e1.record()
            api.synchronize()
            est_ms = e0.elapsed_time(e1)
            if est_ms > 0:
                w_total = min(w_total, j + 1 + math.ceil(WARMUP_BUDGET_MS / est_ms))
                runs = min(runs, max(MIN_RUNS, math.ceil(TIMED_BUDGET_MS / est_ms)))
        j += 1
    warmup = w_total if warmup > 0 else 0
    api.synchronize()
    host_s = sorted(host)[len(host) // 2]
    # GPU spin long enough to cover the host's enqueue of (start, kernel, end);
    # _sleep counts clock cycles: assume <= 2.5 GHz, double the median launch time.
    cycles = int(min(5e7, max(2e4, 2.0 * host_s * 2.5e9)))
    use_sleep = True

    starts = [api.event() for _ in range(runs)]
    ends = [api.event() for _ in range(runs)]
    check = CUTOFF_CHECK_RUNS if cutoff_ms and cutoff_ms > 0 and runs > CUTOFF_CHECK_RUNS else None
    stopped = None
    done = runs
    for i in range(runs):
        if check is not None and i == check:
            api.synchronize()
            first = stats_ms([s.elapsed_time(e) for s, e in zip(starts[:i], ends[:i])])["median_ms"]
            if first > cutoff_ms:
                stopped = {"after_runs": i, "median_ms": first, "cutoff_ms": cutoff_ms}
                done = i
                break
        if before is not None:
            before()
        cache.zero_()
        if use_sleep:
            try:
                use_sleep = api.sleep(cycles)
            except Exception:
                use_sleep = False
        starts[i].record()
        fn()
        ends[i].record()
    api.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts[:done], ends[:done])]
    del cache
    out = {"device": device_name, "runs": done, "warmup": warmup}
    out.update(stats_ms(times))
    out["host_launch_ms"] = host_s * 1e3
    if stopped:
        out["stopped_early"] = stopped
    return out
