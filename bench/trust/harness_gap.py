#!/usr/bin/env python3
"""The same JIT-compiled kernel timed by `triton.testing.do_bench` and back to
back as Kiln's confirmation times a spin-free job, in one process.

Two RMS norm configs of [16384, 4096] bf16 (kernels/rmsnorm.py, launched by
the template's `launch`, Triton's JIT): the one-pass BLOCK_N 4096 config,
whose confirmed median the outside harnesses read 2.6-4.4% slower in
bench/results/h200-2026-12-03-trust-steady (run A) and -trust-alike (run A),
and the two-pass BLOCK_N 2048 L2-hint config, which they reproduce within 1%.

- do_bench: warm-up 50 ms, 300 ms of calls, median; three times, median;
- back to back, interleaved: per round a 20 ms lead-in (each call after the
  L2 flush), then 20 calls of each config (flush, events around the call, no
  wait in between), the order alternating; 10 rounds, median per config;
- back to back, alone: the same with one config at a time.

Twice. With --series instead: per config, do_bench with 3 ms of calls
(median of 9) against 300 ms (median of 3), and 2300 calls back to back
(flush, events, no wait) read in fifths (the median of each, µs) beside a
20-call series: whether the gap grows with the length of the run.

Needs a CUDA GPU.

    python3 bench/trust/harness_gap.py [--series]
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-harness-gap-"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from kernels import rmsnorm  # noqa: E402

CONFIGS = {"one4096": {"BLOCK_M": 1, "BLOCK_N": 4096, "num_stages": 1, "num_warps": 8},
           "l2h2048": {"BLOCK_M": 1, "BLOCK_N": 2048, "l2hint": 1, "num_stages": 1, "num_warps": 8}}


def back_to_back(fns, rounds: int, reps: int = 20) -> list[float]:
    """Per fn the median of its calls: each after the L2 flush, between two
    events, each round's calls enqueued behind a 20 ms lead-in with no wait."""
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    fns[0]()
    t1.record()
    torch.cuda.synchronize()
    per = max(t0.elapsed_time(t1), 1e-3)
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for _ in range(max(1, int(20.0 / (per + 0.06)))):  # the lead-in: the host a chunk ahead
            cache.zero_()
            fns[r % len(fns)]()
        marks = []
        for k in [(r + i) % len(fns) for i in range(len(fns))]:
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                cache.zero_()
                a.record()
                fns[k]()
                b.record()
                marks.append((k, a, b))
        torch.cuda.synchronize()
        for k, a, b in marks:
            samples[k].append(a.elapsed_time(b))
    return [statistics.median(s) for s in samples]


def series(cache, f, n: int) -> list[float]:
    """n calls back to back (flush, events, no wait); the median of each
    fifth, in µs (of the whole where n < 5)."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        cache.zero_()
        a.record()
        f()
        b.record()
    torch.cuda.synchronize()
    t = [a.elapsed_time(b) for a, b in ev]
    q = max(1, n // 5)
    return [round(statistics.median(t[i * q:(i + 1) * q]) * 1000, 1) for i in range(min(5, n // q))]


def main() -> int:
    long_runs = "--series" in sys.argv[1:]
    x = torch.randn(16384, 4096, device="cuda").to(torch.bfloat16)
    w = torch.randn(4096, device="cuda").to(torch.bfloat16)
    ins = {"x": x, "weight": w}
    fns = {}
    for name, cfg in CONFIGS.items():
        out = torch.empty_like(x)
        fns[name] = (lambda cfg=cfg, out=out: rmsnorm.launch("rmsnorm", ins, out, cfg, {}))
        fns[name]()
        torch.cuda.synchronize()
    if long_runs:
        cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
        for rep in range(2):
            for k, f in fns.items():
                short = statistics.median([triton.testing.do_bench(f, warmup=5, rep=3, return_mode="median")
                                           for _ in range(9)])
                long = statistics.median([triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median")
                                          for _ in range(3)])
                print(rep, k, "do_bench rep=3ms", round(short * 1000, 1), "rep=300ms", round(long * 1000, 1),
                      "2300-call series by fifths (us)", series(cache, f, 2300), "20-call", series(cache, f, 20))
        return 0
    for rep in range(2):
        db = {k: statistics.median([triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median")
                                    for _ in range(3)]) for k, f in fns.items()}
        bb = back_to_back(list(fns.values()), 10)
        bb1 = [back_to_back([f], 10)[0] for f in fns.values()]
        print(rep, "do_bench", {k: round(v, 5) for k, v in db.items()},
              "b2b-interleaved", [round(v, 5) for v in bb], "b2b-alone", [round(v, 5) for v in bb1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
