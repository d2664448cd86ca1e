#!/usr/bin/env python3
"""Does a power-limited kernel's latency depend on its input values? The same
JIT-compiled kernels timed on inputs drawn from different distributions, in
one process, interleaved: Kiln's confirmation draws normal inputs
(kernels/*.make_inputs); kiln-rt bench timed on the package's verification
inputs (uniform in the ranges of worker/kiln_worker/packaging/verify_data.py)
until packages recorded the confirmation's distribution (verify `timing`).

Kernels: the catalog's best configs of matmul 8192^3 bf16 and attention
4x32x2048x128 bf16 on an H200 (results: bench/results/h200-2026-12-03-trust-flush/input_power.txt),
and cuBLAS (torch.matmul) on the same matmul inputs. Inputs per kernel:
  normal      torch.randn (what the confirmation times)
  uniform     uniform in the verification range ([-1, 1) for matmul; q, k in
              [-2, 2), v in [-1, 1) for attention: what kiln-rt bench timed)
  uniform-sd1 uniform with the normal's standard deviation ([-sqrt 3, sqrt 3))
  zeros       all zero (the bound: no bits toggle)
Timing: triton.testing.do_bench (L2 flush, median of 300 ms), the variants in
rotating order, 4 rounds; the median per variant and its ratio to normal.

Needs a CUDA GPU.   python3 bench/trust/input_power.py
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-input-power-"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from kernels import attention, matmul  # noqa: E402

MATMUL = {"BLOCK_K": 64, "BLOCK_M": 128, "BLOCK_N": 256, "GROUP_M": 8, "num_stages": 4, "num_warps": 8,
          "persistent": 1}
ATTENTION = {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_H": 8, "num_stages": 2, "num_warps": 12, "pair": 1, "ws": 1}


def draw(kind: str, shape, lo: float, hi: float) -> torch.Tensor:
    if kind == "normal":
        t = torch.randn(shape, device="cuda")
    elif kind == "uniform":
        t = torch.rand(shape, device="cuda") * (hi - lo) + lo
    elif kind == "uniform-sd1":
        t = (torch.rand(shape, device="cuda") * 2 - 1) * math.sqrt(3)
    else:
        t = torch.zeros(shape, device="cuda")
    return t.to(torch.bfloat16)


KINDS = ("normal", "uniform", "uniform-sd1", "zeros")


def cases():
    n = 8192
    for kind in KINDS:
        ins = {"a": draw(kind, (n, n), -1, 1), "b": draw(kind, (n, n), -1, 1)}
        out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        yield "matmul 8192^3 (Kiln)", kind, (lambda i=ins, o=out: matmul.launch("matmul", i, o, MATMUL, {}))
        yield "matmul 8192^3 (cuBLAS)", kind, (lambda i=ins, o=out: torch.matmul(i["a"], i["b"], out=o))
    s = (4, 32, 2048, 128)
    for kind in KINDS:
        ins = {"q": draw(kind, s, -2, 2), "k": draw(kind, s, -2, 2), "v": draw(kind, s, -1, 1)}
        out = torch.empty(s, device="cuda", dtype=torch.bfloat16)
        yield "attention 4x32x2048x128", kind, (lambda i=ins, o=out: attention.launch("attention", i, o, ATTENTION, {}))


def main() -> int:
    entries = list(cases())
    for _, _, f in entries:
        f()
    torch.cuda.synchronize()
    times: dict = {(k, d): [] for k, d, _ in entries}
    for r in range(4):
        order = entries[r % len(entries):] + entries[:r % len(entries)]
        for k, d, f in order:
            times[(k, d)].append(triton.testing.do_bench(f, warmup=100, rep=300, return_mode="median"))
    print(f"{'kernel':26} {'inputs':12} {'ms':>8} {'/ normal':>9}   rounds")
    for k in dict.fromkeys(k for k, _, _ in entries):
        base = statistics.median(times[(k, "normal")])
        for d in KINDS:
            m = statistics.median(times[(k, d)])
            print(f"{k:26} {d:12} {m:8.4f} {m / base:9.3f}   {' '.join(f'{x:.4f}' for x in times[(k, d)])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
