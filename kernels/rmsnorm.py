"""RMS norm over the last dim of [rows, cols], with a weight [cols]:

    out = x / sqrt(mean(x^2) + eps) * weight

(as in LLaMA / T5 and torch.nn.functional.rms_norm; no bias, no mean subtraction).

Two kernels, picked by the config's BLOCK_N:

* `rmsnorm_kernel` (BLOCK_N >= cols): BLOCK_M whole rows in registers; one read
  of x, one write of out: sum of squares, then the scaled output from the same
  registers (as Liger-Kernel's rmsnorm). The weight is loaded once per program
  and broadcast over its rows. EVEN_N (cols == BLOCK_N) drops the column mask,
  so the loads and stores are full 16-byte vectors. Config knobs
  (common.ROW_KNOBS, absent = off): `stream` (evict-first loads, streaming
  stores) and `programs` (a persistent grid walking the row blocks, the next
  block's load software-pipelined num_stages deep).
* `rmsnorm_looped_kernel` (BLOCK_N < cols, rows too long for registers): pass 1
  walks the row in BLOCK_N chunks accumulating per-lane sums of squares, pass 2
  re-reads it (mostly from L2) and writes the output. Two reads.

The math is in fp32 whatever the storage dtype; the output is cast back to the
input dtype after the multiplication by the weight (the reference multiplies in
fp32 too, so the only rounding is the final store).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, rowwise

OPERATORS = ("rmsnorm",)

MAX_ONE_PASS = 32768
# Space cap (before the AMD knobs); the order puts the likely-best first.
MAX_CONFIGS = 48
# One-pass (BLOCK_M, num_warps) in the order tried first: one row on 8 warps
# measured best on an H200 ([16384, 4096] bf16), then 16 and 4 warps.
_PREFERRED = [(1, 8), (1, 16), (1, 4), (2, 8)]


@common.jit_helper
def _rmsnorm_rows(x_ptr, out_ptr, w, rb, n_rows, n_cols, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  EVEN_N: tl.constexpr, LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    """Row block `rb` (BLOCK_M whole rows) of the one-pass kernel; w: the loaded
    weight row (storage dtype)."""
    # Rows past the end re-read the last row (no row mask on the loads, so they stay
    # vectorised); they are not stored.
    rows, row_mask, rows_in = rowwise.row_block(rb, n_rows, BLOCK_M)
    x = rowwise.load_rows(x_ptr, rows_in, n_cols, BLOCK_N, EVEN_N, LOAD_POLICY)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    out = x * rstd[:, None] * w.to(tl.float32)[None, :]
    rowwise.store_rows(out_ptr, out, rows, row_mask, n_cols, BLOCK_N, EVEN_N, STORE_CACHE)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, eps,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
                   PERSISTENT: tl.constexpr, STAGES: tl.constexpr,
                   LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    # the weight: loaded once per program, broadcast over its rows
    cols = tl.arange(0, BLOCK_N)
    w = rowwise.load_masked(w_ptr + cols, cols < n_cols, EVEN_N, "")
    if PERSISTENT:
        # grid < row blocks: walk them with a stride, the next block's load
        # software-pipelined STAGES deep.
        for rb in tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
            _rmsnorm_rows(x_ptr, out_ptr, w, rb, n_rows, n_cols, eps, BLOCK_M, BLOCK_N, EVEN_N,
                          LOAD_POLICY, STORE_CACHE)
    else:
        _rmsnorm_rows(x_ptr, out_ptr, w, tl.program_id(0), n_rows, n_cols, eps, BLOCK_M, BLOCK_N, EVEN_N,
                      LOAD_POLICY, STORE_CACHE)


@triton.jit
def rmsnorm_looped_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, eps,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
                          FIRST_POLICY: tl.constexpr, SECOND_POLICY: tl.constexpr):
    x_row, out_row, row_mask = rowwise.looped_rows(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M)

    # Pass 1: per-lane sums of squares, reduced once at the end.
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = rowwise.load_masked(x_row + cols[None, :], (cols < n_cols)[None, :], EVEN_N, FIRST_POLICY).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / n_cols + eps)

    # Pass 2: scale.
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        x = rowwise.load_masked(x_row + cols[None, :], col_mask[None, :], EVEN_N, SECOND_POLICY).to(tl.float32)
        w = rowwise.load_masked(w_ptr + cols, col_mask, EVEN_N, FIRST_POLICY).to(tl.float32)
        out = x * rstd[:, None] * w[None, :]
        tl.store(out_row + cols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_KERNELS = (rmsnorm_kernel, rmsnorm_looped_kernel)
_check = checks.operators("rmsnorm", OPERATORS)
_eps = checks.eps("rmsnorm", 1e-6)


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    g = common.generator(seed, device)
    x = common.randn(list(shape), dtype, seed, device, generator=g)
    # Weights around 1 (as trained norms have), never zero.
    w = (1.0 + 0.5 * torch.randn(shape[-1], generator=g, device=g.device)).to(common.torch_dtype(dtype)).to(device)
    return {"x": x, "weight": w}


def reference(op, inputs, params):
    _check(op)
    x = inputs["x"]
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + _eps(params))
    return x * rstd * inputs["weight"]


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


def config_space(op, shape, dtype, params, target):
    """One-pass configs (BLOCK_N = row padded to pow2) when it fits, then looped
    configs with BLOCK_N in 512..4096 smaller than the row. Per tile, every
    warp count that gives each thread 1..64 fp32 values.

    On NVIDIA a few looped tiles with the `l2hint` knob lead: on an H200 for
    [16384, 4096] bf16, one row in 2048-element chunks on 8 warps, the first
    read evict_last and the second (from L2) evict_first, measured 0.0676 ms
    against 0.0698 for the best one-pass tile (one row, 8 warps) -- the
    smaller tile keeps more rows in flight per SM (bench/row_sweep.py,
    2026-11-30). Then the one-pass tiles, each with its knob variants
    (common.row_variants: streaming cache hints, a persistent software-
    pipelined grid; neither won). At most MAX_CONFIGS configs before the AMD
    knobs."""
    _check(op)
    return common.norm_row_space(shape, dtype, target, _PREFERRED, [512, 1024, 2048, 4096], 64,
                                 MAX_ONE_PASS, MAX_CONFIGS, looped_lead=True)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    assert x.is_contiguous() and out.is_contiguous(), "rmsnorm: contiguous rows"
    rowwise.launch(_KERNELS, config, x.shape, out, x, inputs["weight"], out, *x.shape, _eps(params), even_n=True)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    rows, cols = shape
    args = rowwise.args(dtype, shape, [("x_ptr", rows * cols), ("w_ptr", cols), ("out_ptr", rows * cols)],
                        ("eps", "fp32", _eps(params)))
    return rowwise.spec(_KERNELS, config, shape, args, target, even_n=True)


def traffic(op, shape, dtype, params):
    _check(op)
    rows, cols = shape
    n = rows * cols
    e = common.element_bytes(dtype)
    # square, sum, scale, weight: ~4 flops per element.
    return {"bytes": (2 * n + cols) * e, "flops": 4 * n}


def hints(op, shape, dtype, params, config, target) -> dict:
    """Per config, for the engine's config model: the bytes one program has
    in flight (common.row_hints)."""
    _check(op)
    return common.row_hints(config, shape, dtype)
