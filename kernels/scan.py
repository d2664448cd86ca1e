"""Cumulative sum and product over the last dim of a [rows, cols] tensor.

    cumsum:  out[r, c] = sum(x[r, :c + 1])    (fp32 accumulation, output in the input dtype)
    cumprod: out[r, c] = prod(x[r, :c + 1])   (likewise; PROD constexpr)

Two kernels, picked by the config's BLOCK_N:

* `cumsum_kernel` (BLOCK_N >= cols): BLOCK_M whole rows in registers, one
  `tl.cumsum` (a parallel associative scan) per row; one read, one write.
* `cumsum_chunked_kernel` (BLOCK_N < cols): the row walked in BLOCK_N chunks,
  each scanned and combined with the running total (product) of the chunks
  before it (a carry per row). One read, one write.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import common

OPERATORS = ("cumsum", "cumprod")
MAX_ONE_PASS = 8192


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  PROD: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    if PROD:
        x = tl.load(x_ptr + offs, mask=mask, other=1.0).to(tl.float32)
        y = tl.cumprod(x, axis=1)
    else:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=1)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def cumsum_chunked_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          PROD: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    base = rows.to(tl.int64)[:, None] * n_cols
    if PROD:
        carry = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        # [BLOCK_M, 1], the chunk sums kept 2-D: `carry + tl.sum(x, axis=1)` on a
        # 1-D carry fails Triton 3.6's TritonGPUOptimizeThreadLocality pass on
        # real targets (the interpreter never runs it).
        carry2 = tl.zeros([BLOCK_M, 1], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        if PROD:
            x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=1.0).to(tl.float32)
            y = tl.cumprod(x, axis=1) * carry[:, None]
            tl.store(out_ptr + base + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
            carry = tl.max(tl.where(cols[None, :] == tl.minimum(n_cols - 1, start + BLOCK_N - 1), y,
                                    -float("inf")), axis=1)
        else:
            x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            y = tl.cumsum(x, axis=1) + carry2
            tl.store(out_ptr + base + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
            carry2 = carry2 + tl.sum(x, axis=1, keep_dims=True)


def _check(op):
    if op not in OPERATORS:
        raise ValueError(f"scan: unknown operator {op!r}")


def _kernel(cols, config):
    return cumsum_kernel if config["BLOCK_N"] >= cols else cumsum_chunked_kernel


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    rows, cols = shape
    x = common.randn([rows, cols], dtype, seed, device)
    if op == "cumprod":  # near 1, so long products neither vanish nor overflow
        x = (1.0 + 0.02 * x.float()).to(x.dtype)
    return {"x": x}


def reference(op, inputs, params):
    _check(op)
    if op == "cumprod":
        return torch.cumprod(inputs["x"], dim=-1)
    return torch.cumsum(inputs["x"], dim=-1)


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


def config_space(op, shape, dtype, params, target):
    """One-pass tiles (BLOCK_N = the row padded to pow2, up to MAX_ONE_PASS;
    BLOCK_M 1..8 rows of at most 8192 elements), then chunked ones (BLOCK_N
    256..2048 below the row, 1 or 4 rows); per tile the warp counts giving
    each thread 1..32 values; the AMD knobs on hip targets."""
    _check(op)
    rows, cols = shape
    ws = common.warp_size(target)
    row_block = triton.next_power_of_2(cols)
    tiles = []
    if row_block <= MAX_ONE_PASS:
        for bm in (1, 2, 4, 8):
            if bm == 1 or (bm <= triton.next_power_of_2(rows) and bm * row_block <= 8192):
                tiles.append((bm, row_block))
    for bn in (256, 512, 1024, 2048):
        if bn < cols:
            for bm in (1, 4):
                tiles.append((bm, bn))
    base = []
    for bm, bn in tiles:
        for w in (1, 2, 4, 8):
            if (w == 1 or w * ws <= bm * bn) and bm * bn <= w * ws * 32:
                base.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": 1})
        if not any(c["BLOCK_M"] == bm and c["BLOCK_N"] == bn for c in base):
            base.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 8, "num_stages": 1})
    return common.expand(common.dedupe(base), common.amd_knobs(target))


def _grid(rows, config):
    return (common.cdiv(rows, config["BLOCK_M"]), 1, 1)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    rows, cols = x.shape
    opts, consts = common.runtime_options(config, common.device_backend(out))
    _kernel(cols, config)[_grid(rows, config)](x, out, rows, cols, PROD=op == "cumprod", **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    rows, cols = shape
    opts, consts = common.runtime_options(config, common.backend(target))
    consts["PROD"] = op == "cumprod"
    ptr = common.pointer_type(dtype)
    size = rows * cols * common.element_bytes(dtype)
    args = [("x_ptr", ptr, size), ("out_ptr", ptr, size), ("n_rows", "i32", rows), ("n_cols", "i32", cols)]
    return common.spec(_kernel(cols, config), args, consts, opts, _grid(rows, config), target)


def traffic(op, shape, dtype, params):
    _check(op)
    n = common.numel(shape)
    return {"bytes": 2 * n * common.element_bytes(dtype), "flops": n}


def validation_tolerance(op, shape, dtype, params):
    """A cumsum's c-th output is a sum of c + 1 unit-variance inputs, so its
    rounding error grows with the row's length even where the sum itself comes
    back near zero: the default atol scales by sqrt(cols), as row_sum's does
    (worker/kiln_worker/evaluation/check.py). cumprod's inputs are near 1 and
    its outputs O(1): the default tolerance."""
    _check(op)
    return {"reduction": int(shape[-1])} if op == "cumsum" else {}
