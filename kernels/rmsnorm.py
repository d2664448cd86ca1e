"""RMS norm over the last dim of [rows, cols], with a weight [cols]:

    out = x / sqrt(mean(x^2) + eps) * weight

(as in LLaMA / T5 and torch.nn.functional.rms_norm; no bias, no mean subtraction).

Two kernels, picked by the config's BLOCK_N:

* `rmsnorm_kernel` (BLOCK_N >= cols): BLOCK_M whole rows in registers; one read
  of x, one write of out: sum of squares, then the scaled output from the same
  registers (as Liger-Kernel's rmsnorm). The weight is loaded once per program
  and broadcast over its rows. EVEN_N (cols == BLOCK_N) drops the column mask,
  so the loads and stores are full 16-byte vectors.
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

from . import common

OPERATORS = ("rmsnorm",)

MAX_ONE_PASS = 32768


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, eps,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    # Rows past the end re-read the last row (no row mask on the loads, so they stay
    # vectorised); they are not stored.
    rows_in = tl.minimum(rows, n_rows - 1).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols

    if EVEN_N:
        x = tl.load(x_ptr + rows_in[:, None] * n_cols + cols[None, :]).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)
    else:
        x = tl.load(x_ptr + rows_in[:, None] * n_cols + cols[None, :], mask=col_mask[None, :],
                    other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    out = x * rstd[:, None] * w[None, :]
    out_offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    if EVEN_N:
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_mask[:, None])
    else:
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


@triton.jit
def rmsnorm_looped_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, eps,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    rows_in = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x_row = x_ptr + rows_in[:, None] * n_cols
    out_row = out_ptr + rows.to(tl.int64)[:, None] * n_cols

    # Pass 1: per-lane sums of squares, reduced once at the end.
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        if EVEN_N:
            x = tl.load(x_row + cols[None, :]).to(tl.float32)
        else:
            x = tl.load(x_row + cols[None, :], mask=(cols < n_cols)[None, :], other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / n_cols + eps)

    # Pass 2: scale.
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        if EVEN_N:
            x = tl.load(x_row + cols[None, :]).to(tl.float32)
            w = tl.load(w_ptr + cols).to(tl.float32)
        else:
            x = tl.load(x_row + cols[None, :], mask=col_mask[None, :], other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        out = x * rstd[:, None] * w[None, :]
        tl.store(out_row + cols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

def _check(op):
    if op not in OPERATORS:
        raise ValueError(f"rmsnorm: unknown operator {op!r}")


def _eps(params) -> float:
    eps = float((params or {}).get("eps", 1e-6))
    if eps < 0:
        raise ValueError("rmsnorm: eps must be >= 0")
    return eps


def _kernel(n_cols, config):
    return rmsnorm_kernel if config["BLOCK_N"] >= n_cols else rmsnorm_looped_kernel


def _constexprs(consts, n_cols):
    return dict(consts, EVEN_N=n_cols % consts["BLOCK_N"] == 0)


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    rows, cols = shape
    g = common.generator(seed)
    x = common.randn([rows, cols], dtype, seed, device, generator=g)
    # Weights around 1 (as trained norms have), never zero.
    w = (1.0 + 0.5 * torch.randn(cols, generator=g)).to(common.torch_dtype(dtype)).to(device)
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
    warp count that gives each thread 1..64 fp32 values. One row per program
    comes first (on wide rows, the fastest: Liger-Kernel's choice)."""
    _check(op)
    rows, cols = shape
    ws = common.warp_size(target)
    row_block = triton.next_power_of_2(cols)
    max_bm = triton.next_power_of_2(rows)

    shapes = []  # (BLOCK_M, BLOCK_N)
    if row_block <= MAX_ONE_PASS:
        for bm in [1, 2, 4, 8, 16]:
            if bm == 1 or (bm <= max_bm and bm * row_block <= 8192):
                shapes.append((bm, row_block))
    for bn in [512, 1024, 2048, 4096]:
        if bn < cols:
            shapes.append((1, bn))

    base = []
    for bm, bn in shapes:
        tile = bm * bn
        for warps in [1, 2, 4, 8, 16]:
            # >= 1 element per thread; <= 64 fp32 values per thread (a 4096-wide
            # row on 2 warps was the fastest rmsnorm on an H200).
            if (warps == 1 or warps * ws <= tile) and tile <= warps * ws * 64:
                base.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": 1})
    return common.expand(base, common.amd_knobs(target))


def _grid(shape, config):
    rows, _ = shape
    return (common.cdiv(rows, config["BLOCK_M"]), 1, 1)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    assert x.is_contiguous() and out.is_contiguous(), "rmsnorm: contiguous rows"
    rows, cols = x.shape
    opts, consts = common.runtime_options(config, common.device_backend(out))
    _kernel(cols, config)[_grid(x.shape, config)](
        x, inputs["weight"], out, rows, cols, _eps(params), **_constexprs(consts, cols), **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    rows, cols = shape
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    args = [("x_ptr", ptr, None), ("w_ptr", ptr, None), ("out_ptr", ptr, None),
            ("n_rows", "i32", rows), ("n_cols", "i32", cols), ("eps", "fp32", _eps(params))]
    return common.spec(_kernel(cols, config), args, _constexprs(consts, cols), opts, _grid(shape, config))


def traffic(op, shape, dtype, params):
    _check(op)
    rows, cols = shape
    n = rows * cols
    e = common.element_bytes(dtype)
    # square, sum, scale, weight: ~4 flops per element.
    return {"bytes": (2 * n + cols) * e, "flops": 4 * n}
