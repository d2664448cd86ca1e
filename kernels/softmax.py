"""Row softmax over the last dim of a [rows, cols] tensor, any number of columns.

Two kernels, picked by the config's BLOCK_N:

* `softmax_kernel` (BLOCK_N >= cols): the whole row sits in registers; one read,
  one write. BLOCK_M rows per program, which helps short rows. Two config knobs
  (common.ROW_KNOBS, absent = off): `stream` (evict-first loads, streaming
  stores) and `programs` (a persistent grid walking the row blocks, the next
  block's load software-pipelined num_stages deep).
* `softmax_online_kernel` (BLOCK_N < cols): the row is walked in BLOCK_N chunks.
  Pass 1 keeps a running max and a running sum of exp rescaled to that max
  ("online softmax", Milakov & Gimelshein 2018); pass 2 re-reads the row and
  writes exp(x - max) / sum. Two reads, one write.

The math is in fp32 whatever the storage dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, rowwise

OPERATORS = ("softmax",)

# Largest row held in registers by the one-pass kernel (elements, padded to pow2).
MAX_ONE_PASS = 32768
# Space cap (before the AMD knobs); the order puts the likely-best first.
MAX_CONFIGS = 48
# One-pass (BLOCK_M, num_warps) in the order tried first: one row on 4 warps
# measured best on an H200 ([16384, 4096] bf16), then 8 and 16 warps.
_PREFERRED = [(1, 4), (1, 8), (1, 16), (2, 8)]


@common.jit_helper
def _softmax_rows(x_ptr, out_ptr, rb, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    """Row block `rb` (BLOCK_M whole rows) of the one-pass kernel."""
    # Rows past the end re-read the last row (keeps them finite); they are not stored.
    rows, row_mask, rows_in = rowwise.row_block(rb, n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols

    x = tl.load(x_ptr + rows_in[:, None] * n_cols + cols[None, :], mask=col_mask[None, :],
                other=-float("inf"), eviction_policy=LOAD_POLICY).to(tl.float32)
    row_max = tl.max(x, axis=1)
    e = tl.exp(x - row_max[:, None])  # masked columns: exp(-inf) = 0
    denom = tl.sum(e, axis=1)
    out = e / denom[:, None]
    out_offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & col_mask[None, :], cache_modifier=STORE_CACHE)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   PERSISTENT: tl.constexpr, STAGES: tl.constexpr,
                   LOAD_POLICY: tl.constexpr, STORE_CACHE: tl.constexpr):
    if PERSISTENT:
        # grid < row blocks: walk them with a stride, the next block's load
        # software-pipelined STAGES deep.
        for rb in tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
            _softmax_rows(x_ptr, out_ptr, rb, n_rows, n_cols, BLOCK_M, BLOCK_N, LOAD_POLICY, STORE_CACHE)
    else:
        _softmax_rows(x_ptr, out_ptr, tl.program_id(0), n_rows, n_cols, BLOCK_M, BLOCK_N,
                      LOAD_POLICY, STORE_CACHE)


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          FIRST_POLICY: tl.constexpr, SECOND_POLICY: tl.constexpr):
    x_row, out_row, row_mask = rowwise.looped_rows(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M)

    # Pass 1: running max m and running sum l of exp(x - m).
    m, l = rowwise.online_softmax_start(BLOCK_M)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols[None, :], mask=(cols < n_cols)[None, :],
                    other=-float("inf"), eviction_policy=FIRST_POLICY).to(tl.float32)
        m, l = rowwise.online_softmax_step(m, l, x)

    # Pass 2: normalise.
    inv_l = 1.0 / l
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        x = tl.load(x_row + cols[None, :], mask=col_mask[None, :], other=-float("inf"),
                    eviction_policy=SECOND_POLICY).to(tl.float32)
        out = tl.exp(x - m[:, None]) * inv_l[:, None]
        tl.store(out_row + cols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_KERNELS = (softmax_kernel, softmax_online_kernel)
_check = checks.operators("softmax", OPERATORS)


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return rowwise.inputs(shape, dtype, seed, device)


def reference(op, inputs, params):
    _check(op)
    return torch.softmax(inputs["x"], dim=-1)


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


def config_space(op, shape, dtype, params, target):
    """One-pass configs when the padded row fits MAX_ONE_PASS, then chunked
    (online) configs with BLOCK_N in 512..8192 smaller than the row.

    One-pass tiles: BLOCK_M rows of up to 8192 elements, every warp count giving
    each thread 1..64 fp32 values. They come first, the one that measured best on
    an H200 for [16384, 4096] bf16 (one row, 4 warps: 0.0693 ms) leading, each
    with its knob variants (common.row_variants: streaming cache hints, a
    persistent software-pipelined grid; not yet measured on a GPU). At most
    MAX_CONFIGS configs before the AMD knobs."""
    _check(op)
    return row_space(shape, dtype, target)


def row_space(shape, dtype, target):
    """config_space's configs (softmax_variants.py's too)."""
    # At most 64 fp32 values per thread, so the tile stays in registers.
    return common.norm_row_space(shape, dtype, target, _PREFERRED, [512, 1024, 2048, 4096, 8192], 64,
                                 MAX_ONE_PASS, MAX_CONFIGS)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    rowwise.launch(_KERNELS, config, x.shape, out, x, out, *x.shape)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    n = common.numel(shape)
    args = rowwise.args(dtype, shape, [("x_ptr", n), ("out_ptr", n)])
    return rowwise.spec(_KERNELS, config, shape, args, target)


def traffic(op, shape, dtype, params):
    _check(op)
    n = common.numel(shape)
    # max, subtract, exp, sum, divide: ~5 flops per element.
    return {"bytes": 2 * n * common.element_bytes(dtype), "flops": 5 * n}


def hints(op, shape, dtype, params, config, target) -> dict:
    """Per config, for the engine's config model: the bytes one program has
    in flight (common.row_hints)."""
    _check(op)
    return common.row_hints(config, shape, dtype)
