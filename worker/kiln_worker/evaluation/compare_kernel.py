"""The comparison of an output with its reference in one pass over both, on the GPU.

check.compare's statistics -- the output's non-finite elements, the elements
out of tolerance, the largest absolute and relative errors and the largest
error over its allowance -- computed by one Triton kernel that reads the output
and the reference once, instead of a dozen elementwise torch operations, each
reading and writing a tensor as large as the output (about 2 GB of traffic per
16 M elements). On an H200 that was about half of a softmax check's GPU time,
all of it holding the GPU lock.

Same arithmetic as the torch pass, in the reference's dtype (float32 for fp16 /
bf16 jobs, float64 for fp32): the output upcast, |out - ref|, the allowance
atol + rtol * |ref|, divisions rounded to nearest (as torch's),
the tolerances converted to the reference's dtype once, as torch converts a
Python scalar, and no fused multiply-adds (torch rounds the product and the
sum separately). Counts are exact and maxima order-independent, so the results
are the torch pass's exactly; tests/python/test_compare_kernel.py checks that
under the interpreter. The kernel writes one row of partial results per
program; torch reduces them and reads them back in one transfer.

Used for CUDA / HIP tensors when the effective atol is positive (so every
allowance is too and no ratio is 0 / 0); check.compare keeps the torch pass
otherwise and on the CPU, where the interpreter would be slower.
"""
from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 4096

# Why the kernel cannot run in this process (its compile or launch raised once,
# e.g. a backend without tl.math.div_rn); empty while it can. check.compare then
# keeps the torch pass instead of failing every check. A per-process memo, like
# Triton's own kernel cache.
_unavailable: list[str] = []


def available() -> bool:
    return not _unavailable


@triton.jit
def _div(a, b, F64: tl.constexpr):
    # rounded to nearest, as torch's division: float64's `/` is; float32's is
    # an approximation unless asked (div_rn, which takes float32 only)
    if F64:
        return a / b
    else:
        return tl.math.div_rn(a, b)


@triton.jit
def compare_kernel(out_ptr, ref_ptr, tol_ptr, part_ptr, n, BLOCK: tl.constexpr, F64: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    r = tl.load(ref_ptr + offs, mask=inside, other=0)
    o = tl.load(out_ptr + offs, mask=inside, other=0).to(r.dtype)
    atol = tl.load(tol_ptr)
    rtol = tl.load(tol_ptr + 1)
    floor = tl.load(tol_ptr + 2)  # the relative error's divisor at least max(atol, 1e-30)
    nonfinite = tl.sum((inside & ((o != o) | (tl.abs(o) == float("inf")))).to(tl.int32), axis=0)
    diff = tl.abs(o - r)
    aref = tl.abs(r)
    allowed = atol + rtol * aref
    bad = tl.sum((inside & (diff > allowed)).to(tl.int32), axis=0)
    zero = tl.zeros_like(diff)
    max_abs = tl.max(tl.where(inside, diff, zero), axis=0)
    max_rel = tl.max(tl.where(inside, _div(diff, tl.maximum(aref, floor), F64), zero), axis=0)
    worst = tl.max(tl.where(inside, _div(diff, allowed, F64), zero), axis=0)
    row = part_ptr + pid * 5
    tl.store(row, nonfinite.to(r.dtype))
    tl.store(row + 1, bad.to(r.dtype))
    tl.store(row + 2, max_abs)
    tl.store(row + 3, max_rel)
    tl.store(row + 4, worst)


def _launch(out_flat, ref_flat, atol_eff: float, rtol: float):
    """The grid, arguments and options of one comparison (compare_stats runs
    them, precompile compiles them: the same options, so the same cache
    entry), and the partial-results buffer."""
    import torch
    grid = triton.cdiv(ref_flat.numel(), BLOCK)
    tol = torch.tensor([atol_eff, rtol, max(atol_eff, 1e-30)], dtype=ref_flat.dtype, device=ref_flat.device)
    part = torch.empty((grid, 5), dtype=ref_flat.dtype, device=ref_flat.device)
    # no fused multiply-add: torch computes rtol * |ref| and the sum with atol
    # as two roundings, and so must this
    options = {"BLOCK": BLOCK, "F64": ref_flat.dtype == torch.float64, "enable_fp_fusion": False}
    return (grid,), (out_flat, ref_flat, tol, part, ref_flat.numel()), options, part


def compare_stats(out_flat, ref_flat, atol_eff: float, rtol: float) -> tuple[int, int, float, float, float]:
    """(non-finite outputs, elements out of tolerance, max abs error, max rel
    error, max error / allowance) of two flat tensors of one length on one
    device, the reference in float32 or float64, atol_eff > 0; either may be
    a strided view (read in its logical order)."""
    import torch
    # the kernel reads raw pointers: a strided view is copied first (its
    # logical order, never its storage's prefix)
    out_flat, ref_flat = out_flat.reshape(-1).contiguous(), ref_flat.reshape(-1).contiguous()
    grid, args, options, part = _launch(out_flat, ref_flat, atol_eff, rtol)
    try:
        compare_kernel[grid](*args, **options)
    except Exception as exc:
        _unavailable.append(f"{type(exc).__name__}: {exc}")
        raise
    summary = torch.cat([part[:, :2].double().sum(0), part[:, 2:].max(0).values.double()]).tolist()
    return int(summary[0]), int(summary[1]), summary[2], summary[3], summary[4]


PAIRS = (("bfloat16", "float32"), ("float16", "float32"), ("float32", "float64"))  # (output, reference)


def _tiny(torch_device: str):
    """For each dtype pair a check meets: (output, reference), 8 zeros each."""
    import torch
    for out_dt, ref_dt in PAIRS:
        ref = torch.zeros(8, dtype=getattr(torch, ref_dt), device=torch_device)
        yield ref.to(getattr(torch, out_dt)), ref


def precompile(torch_device: str) -> None:
    """Compiles the kernel for each dtype pair (Triton's warmup: no launch, so
    no GPU lock needed; CPU work and the on-disk cache)."""
    for out, ref in _tiny(torch_device):
        grid, args, options, _ = _launch(out, ref, 1e-2, 1e-2)
        compare_kernel.warmup(*args, grid=grid, **options)


def warm(torch_device: str) -> None:
    """Runs the kernel once per dtype pair, which loads it: the first check of
    a worker then finds it loaded. The caller holds the GPU lock
    (device.warm_up)."""
    for out, ref in _tiny(torch_device):
        compare_stats(out, ref, 1e-2, 1e-2)
