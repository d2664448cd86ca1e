"""Layer norm over the last dim of [rows, cols], with weight and bias [cols]:

    out = (x - mean) / sqrt(var + eps) * weight + bias      (biased variance)

Two kernels, picked by the config's BLOCK_N:

* `layernorm_kernel` (BLOCK_N >= cols): BLOCK_M whole rows in registers; mean,
  then variance of (x - mean), then the output. One read of x; weight and bias
  loaded once per program. EVEN_N (cols == BLOCK_N) drops the column mask, so
  the loads and stores are full 16-byte vectors. Config knobs
  (common.ROW_KNOBS, absent = off):
  `stream` (evict-first loads, streaming stores) and `programs` (a persistent
  grid walking the row blocks, the next block's load software-pipelined
  num_stages deep).
* `layernorm_looped_kernel` (BLOCK_N < cols): pass 1 walks the row in chunks
  accumulating per-lane sums of (x - s) and (x - s)^2, shifted by the row's first
  element s so the E[x^2] - E[x]^2 form does not cancel catastrophically when the
  mean is large; pass 2 re-reads the row (mostly from L2, with the `l2hint`
  knob) and writes the output. Two reads. EVEN_N (cols % BLOCK_N == 0) drops
  the column mask, as in the one-pass kernel.

The math is in fp32 whatever the storage dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, rowwise

OPERATORS = ("layernorm",)

MAX_ONE_PASS = 32768
# Space cap (before the AMD knobs); the order puts the likely-best first.
MAX_CONFIGS = 48
# One-pass (BLOCK_M, num_warps) in the order tried first: two rows on 8 warps
# measured best on an H200 ([16384, 4096] bf16), then one row on 8 / 16 warps.
_PREFERRED = [(2, 8), (1, 8), (1, 16), (2, 16), (1, 4)]


@common.jit_helper
def _layernorm_rows(x_ptr, out_ptr, w, b, rb, n_rows, n_cols, eps, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, LOAD_POLICY: tl.constexpr,
                    STORE_CACHE: tl.constexpr):
    """Row block `rb` (BLOCK_M whole rows) of the one-pass kernel; w, b: the
    loaded weight and bias rows (storage dtype)."""
    # Rows past the end re-read the last row (no row mask on the loads, so they stay
    # vectorised); they are not stored.
    rows, row_mask, rows_in = rowwise.row_block(rb, n_rows, BLOCK_M)
    x = rowwise.load_rows(x_ptr, rows_in, n_cols, BLOCK_N, EVEN_N, LOAD_POLICY)
    mean = tl.sum(x, axis=1) / n_cols
    if EVEN_N:
        xc = x - mean[:, None]
    else:
        xc = tl.where((tl.arange(0, BLOCK_N) < n_cols)[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)

    out = xc * rstd[:, None] * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
    rowwise.store_rows(out_ptr, out, rows, row_mask, n_cols, BLOCK_N, EVEN_N, STORE_CACHE)


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, n_cols, eps,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
                     PERSISTENT: tl.constexpr, STAGES: tl.constexpr,
                     LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    # weight and bias: loaded once per program, broadcast over its rows
    cols = tl.arange(0, BLOCK_N)
    w = rowwise.load_masked(w_ptr + cols, cols < n_cols, EVEN_N, "")
    b = rowwise.load_masked(b_ptr + cols, cols < n_cols, EVEN_N, "")
    if PERSISTENT:
        # grid < row blocks: walk them with a stride, the next block's load
        # software-pipelined STAGES deep.
        for rb in tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
            _layernorm_rows(x_ptr, out_ptr, w, b, rb, n_rows, n_cols, eps, BLOCK_M, BLOCK_N, EVEN_N,
                            LOAD_POLICY, STORE_CACHE)
    else:
        _layernorm_rows(x_ptr, out_ptr, w, b, tl.program_id(0), n_rows, n_cols, eps, BLOCK_M, BLOCK_N,
                        EVEN_N, LOAD_POLICY, STORE_CACHE)


@triton.jit
def layernorm_looped_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, n_cols, eps,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
                            FIRST_POLICY: tl.constexpr, SECOND_POLICY: tl.constexpr):
    x_row, out_row, row_mask = rowwise.looped_rows(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M)

    # Pass 1: shifted per-lane sums (shift = first element of the row, [BLOCK_M, 1]).
    shift = tl.load(x_row).to(tl.float32)
    s1 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    s2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = (cols < n_cols)[None, :]
        d = rowwise.load_masked(x_row + cols[None, :], col_mask, EVEN_N, FIRST_POLICY).to(tl.float32) - shift
        if not EVEN_N:
            d = tl.where(col_mask, d, 0.0)
        s1 += d
        s2 += d * d
    mean_d = tl.sum(s1, axis=1) / n_cols
    var = tl.maximum(tl.sum(s2, axis=1) / n_cols - mean_d * mean_d, 0.0)
    mean = tl.sum(shift, axis=1) + mean_d
    rstd = 1.0 / tl.sqrt(var + eps)

    # Pass 2: normalise, scale, shift.
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        x = rowwise.load_masked(x_row + cols[None, :], col_mask[None, :], EVEN_N, SECOND_POLICY).to(tl.float32)
        w = rowwise.load_masked(w_ptr + cols, col_mask, EVEN_N, FIRST_POLICY).to(tl.float32)
        b = rowwise.load_masked(b_ptr + cols, col_mask, EVEN_N, FIRST_POLICY).to(tl.float32)
        out = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(out_row + cols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_KERNELS = (layernorm_kernel, layernorm_looped_kernel)
_check = checks.operators("layernorm", OPERATORS)
_eps = checks.eps("layernorm", 1e-5)


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return rowwise.inputs(shape, dtype, seed, device, vectors=("weight", "bias"))


def reference(op, inputs, params):
    _check(op)
    x = inputs["x"]
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), inputs["weight"], inputs["bias"], _eps(params))


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


def config_space(op, shape, dtype, params, target):
    """One-pass configs (BLOCK_N = row padded to pow2) when it fits, then looped
    configs with BLOCK_N in 512..4096 smaller than the row.

    One-pass tiles come first, the one that measured best on an H200 for
    [16384, 4096] bf16 (two rows, 8 warps: 0.0703 ms) leading, each with its knob
    variants (common.row_variants: streaming cache hints, a persistent
    software-pipelined grid). At most MAX_CONFIGS configs before the AMD knobs.

    Unlike rmsnorm's, no looped tile leads: on an H200 ([16384, 4096] bf16)
    the best hinted looped tile read 0.0760 ms against 0.0703 for the one-pass
    lead, with EVEN_N in both (bench/results/h200-2026-12-03-trust-clock)."""
    _check(op)
    # At most 32 values per thread: the looped kernel keeps two fp32 accumulators
    # per element.
    return common.norm_row_space(shape, dtype, target, _PREFERRED, [512, 1024, 2048, 4096], 32,
                                 MAX_ONE_PASS, MAX_CONFIGS)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    assert x.is_contiguous() and out.is_contiguous(), "layernorm: contiguous rows"
    rowwise.launch(_KERNELS, config, x.shape, out, x, inputs["weight"], inputs["bias"], out, *x.shape, _eps(params),
                   even_n=True)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    rows, cols = shape
    args = rowwise.args(dtype, shape, [("x_ptr", rows * cols), ("w_ptr", cols), ("b_ptr", cols),
                                       ("out_ptr", rows * cols)], ("eps", "fp32", _eps(params)))
    return rowwise.spec(_KERNELS, config, shape, args, target, even_n=True)


def traffic(op, shape, dtype, params):
    _check(op)
    rows, cols = shape
    n = rows * cols
    e = common.element_bytes(dtype)
    # mean, centre, square, sum, scale, weight, bias: ~8 flops per element.
    return {"bytes": (2 * n + 2 * cols) * e, "flops": 8 * n}


def hints(op, shape, dtype, params, config, target) -> dict:
    """Per config, for the engine's config model: the bytes one program has
    in flight (common.row_hints)."""
    _check(op)
    return common.row_hints(config, shape, dtype)
