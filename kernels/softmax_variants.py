"""Softmax with a folded scale (a temperature) and log-softmax, over the last
dim of a [rows, cols] tensor, any number of columns.

    scaled_softmax: out = softmax(x * scale)       (scale = 1 / temperature)
    log_softmax:    out = log_softmax(x * scale)   (scale 1: plain log-softmax)

The kernels are softmax.py's two, with the scale applied to each loaded value
and, for log-softmax, `(x - max) - log(sum)` written instead of the ratio
(LOG constexpr):

* one pass (BLOCK_N >= cols): whole rows in registers, BLOCK_M rows per
  program, the row knobs (`stream`, `programs`: common.ROW_KNOBS);
* online (BLOCK_N < cols): a running max and rescaled sum in pass 1, the
  output in pass 2 (`l2hint`: common.two_pass_policies).

A negative scale is fine (the max is taken after scaling). The math is fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, rowwise, softmax

OPERATORS = ("scaled_softmax", "log_softmax")


@common.jit_helper
def _rows(x_ptr, out_ptr, rb, n_rows, n_cols, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          LOG: tl.constexpr, LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    rows, row_mask, rows_in = rowwise.row_block(rb, n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    x = tl.load(x_ptr + rows_in[:, None] * n_cols + cols[None, :], mask=col_mask[None, :],
                other=0.0, eviction_policy=LOAD_POLICY).to(tl.float32) * scale
    x = tl.where(col_mask[None, :], x, -float("inf"))
    row_max = tl.max(x, axis=1)
    z = x - row_max[:, None]
    e = tl.exp(z)
    denom = tl.sum(e, axis=1)
    if LOG:
        out = z - tl.log(denom)[:, None]
    else:
        out = e / denom[:, None]
    out_offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & col_mask[None, :], cache_modifier=STORE_CACHE)


@triton.jit
def scaled_softmax_kernel(x_ptr, out_ptr, n_rows, n_cols, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          LOG: tl.constexpr, PERSISTENT: tl.constexpr, STAGES: tl.constexpr,
                          LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    if PERSISTENT:
        for rb in tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
            _rows(x_ptr, out_ptr, rb, n_rows, n_cols, scale, BLOCK_M, BLOCK_N, LOG, LOAD_POLICY, STORE_CACHE)
    else:
        _rows(x_ptr, out_ptr, tl.program_id(0), n_rows, n_cols, scale, BLOCK_M, BLOCK_N, LOG,
              LOAD_POLICY, STORE_CACHE)


@triton.jit
def scaled_softmax_online_kernel(x_ptr, out_ptr, n_rows, n_cols, scale, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, LOG: tl.constexpr,
                                 FIRST_POLICY: tl.constexpr, SECOND_POLICY: tl.constexpr):
    x_row, out_row, row_mask = rowwise.looped_rows(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M)
    m, l = rowwise.online_softmax_start(BLOCK_M)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        cm = cols < n_cols
        x = tl.load(x_row + cols[None, :], mask=cm[None, :], other=0.0,
                    eviction_policy=FIRST_POLICY).to(tl.float32) * scale
        m, l = rowwise.online_softmax_step(m, l, tl.where(cm[None, :], x, -float("inf")))
    log_l = tl.log(l)
    inv_l = 1.0 / l
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        x = tl.load(x_row + cols[None, :], mask=col_mask[None, :], other=0.0,
                    eviction_policy=SECOND_POLICY).to(tl.float32) * scale
        z = x - m[:, None]
        if LOG:
            out = z - log_l[:, None]
        else:
            out = tl.exp(z) * inv_l[:, None]
        tl.store(out_row + cols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


_KERNELS = (scaled_softmax_kernel, scaled_softmax_online_kernel)
_check = checks.operators("softmax_variants", OPERATORS)


def _scale(params) -> float:
    return float((params or {}).get("scale", 1.0))


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return rowwise.inputs(shape, dtype, seed, device)


def reference(op, inputs, params):
    _check(op)
    x = inputs["x"] * _scale(params)
    return torch.log_softmax(x, dim=-1) if op == "log_softmax" else torch.softmax(x, dim=-1)


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


def config_space(op, shape, dtype, params, target):
    """softmax.py's space (softmax.row_space): one-pass tiles with the row
    knobs first, then looped ones; the AMD knobs on hip targets."""
    _check(op)
    return softmax.row_space(shape, dtype, target)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    rowwise.launch(_KERNELS, config, x.shape, out, x, out, *x.shape, _scale(params), LOG=op == "log_softmax")
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    n = common.numel(shape)
    args = rowwise.args(dtype, shape, [("x_ptr", n), ("out_ptr", n)], ("scale", "fp32", _scale(params)))
    return rowwise.spec(_KERNELS, config, shape, args, target, LOG=op == "log_softmax")


def traffic(op, shape, dtype, params):
    _check(op)
    n = common.numel(shape)
    return {"bytes": 2 * n * common.element_bytes(dtype), "flops": 6 * n}


def hints(op, shape, dtype, params, config, target) -> dict:
    _check(op)
    return common.row_hints(config, shape, dtype)
