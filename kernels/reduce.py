"""Row reductions over the last dim of a [rows, cols] tensor: out[r] = op(x[r, :]).

Operators:

* `row_sum`:  sum of the row.
* `row_mean`: sum / cols.
* `row_max`:  largest element (exact in any dtype).

Accumulation is in fp32 whatever the storage dtype. Output dtypes: `row_mean`
and `row_max` return the input dtype. `row_sum` returns fp32 for fp16 / bf16
inputs (and fp32 for fp32): the sum of a row grows with cols (~sqrt(cols) for
random data, ~cols for same-signed data), so in fp16 it overflows at 65504 and
in bf16 it keeps only ~3 significant digits -- like ``x.sum(-1, dtype=torch.float32)``.
The extra output bytes (4 per row) do not matter next to the row itself.

One kernel: each program owns BLOCK_M rows and walks them in BLOCK_N chunks,
combining each chunk elementwise into a [BLOCK_M, BLOCK_N] fp32 accumulator (many
independent loads in flight, pairwise-like accuracy for the sum) and reducing it
across the columns once at the end. When BLOCK_N >= cols (ONE_PASS) there is no
loop: the row is loaded once into registers. EVEN_N (cols % BLOCK_N == 0) drops
the column mask so the loads are full 16-byte vectors. Config knobs
(common.ROW_KNOBS, absent = off): `stream` (evict-first loads of x, any tile)
and, for one-pass tiles, `programs` (a persistent grid walking the row blocks,
the next block's load software-pipelined num_stages deep).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, rowwise

OPERATORS = ("row_sum", "row_mean", "row_max")
_OP_CODE = {"row_sum": 0, "row_mean": 1, "row_max": 2}
# Space cap (before the AMD knobs); the order puts the likely-best first.
MAX_CONFIGS = 48
# One-pass (BLOCK_M, num_warps) in the order tried first.
_PREFERRED = [(1, 8), (1, 16), (1, 4), (2, 16)]


@common.jit_helper
def _load_chunk(x_row, cols, n_cols, OP: tl.constexpr, EVEN_N: tl.constexpr, LOAD_POLICY: tl.constexpr):
    """Columns `cols` of the rows at x_row, in fp32; past n_cols (unless
    EVEN_N) the reduction's identity: -inf for row_max, else 0."""
    if EVEN_N:
        x = tl.load(x_row + cols[None, :], eviction_policy=LOAD_POLICY)
    elif OP == 2:
        x = tl.load(x_row + cols[None, :], mask=(cols < n_cols)[None, :], other=-float("inf"),
                    eviction_policy=LOAD_POLICY)
    else:
        x = tl.load(x_row + cols[None, :], mask=(cols < n_cols)[None, :], other=0.0, eviction_policy=LOAD_POLICY)
    return x.to(tl.float32)


@common.jit_helper
def _reduce_rows(x_ptr, out_ptr, rb, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 OP: tl.constexpr, EVEN_N: tl.constexpr, ONE_PASS: tl.constexpr, LOAD_POLICY: tl.constexpr):
    """Row block `rb` (BLOCK_M rows): chunk loop, or a single load when ONE_PASS."""
    # Rows past the end re-read the last row (keeps the loads unmasked); not stored.
    rows, row_mask, rows_in = rowwise.row_block(rb, n_rows, BLOCK_M)
    x_row = x_ptr + rows_in[:, None] * n_cols

    if ONE_PASS:
        # BLOCK_N >= cols: the row in registers, no loop (and nothing for a
        # software pipeline of a persistent row loop to mistake for its target)
        acc = _load_chunk(x_row, tl.arange(0, BLOCK_N), n_cols, OP, EVEN_N, LOAD_POLICY)
    else:
        if OP == 2:
            acc = tl.full([BLOCK_M, BLOCK_N], -float("inf"), tl.float32)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            x = _load_chunk(x_row, start + tl.arange(0, BLOCK_N), n_cols, OP, EVEN_N, LOAD_POLICY)
            if OP == 2:
                acc = tl.maximum(acc, x)
            else:
                acc += x

    if OP == 2:
        r = tl.max(acc, axis=1)
    else:
        r = tl.sum(acc, axis=1)
        if OP == 1:
            r = r / n_cols
    tl.store(out_ptr + rows, r.to(out_ptr.dtype.element_ty), mask=row_mask)


@triton.jit
def row_reduce_kernel(x_ptr, out_ptr, n_rows, n_cols,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, OP: tl.constexpr, EVEN_N: tl.constexpr,
                      ONE_PASS: tl.constexpr,
                      # the row knobs (common.row_options); STORE_CACHE is unused: the
                      # output (one value per row) is too small to matter
                      PERSISTENT: tl.constexpr, STAGES: tl.constexpr, LOAD_POLICY: tl.constexpr,
                      STORE_CACHE: tl.constexpr):
    if PERSISTENT:
        # grid < row blocks (ONE_PASS only): walk them with a stride, the next
        # block's load software-pipelined STAGES deep.
        for rb in tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
            _reduce_rows(x_ptr, out_ptr, rb, n_rows, n_cols, BLOCK_M, BLOCK_N, OP, EVEN_N, ONE_PASS, LOAD_POLICY)
    else:
        _reduce_rows(x_ptr, out_ptr, tl.program_id(0), n_rows, n_cols, BLOCK_M, BLOCK_N, OP, EVEN_N, ONE_PASS,
                     LOAD_POLICY)


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_check = checks.operators("reduce", OPERATORS)


def out_dtype(op, dtype: str) -> str:
    """Output dtype name: fp32 for row_sum, else the input dtype."""
    _check(op)
    return "fp32" if op == "row_sum" else dtype


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return rowwise.inputs(shape, dtype, seed, device)


def reference(op, inputs, params):
    _check(op)
    x = inputs["x"]
    if op == "row_sum":
        return x.sum(dim=-1)
    if op == "row_mean":
        return x.mean(dim=-1)
    return x.amax(dim=-1)


def output_like(op, inputs, params):
    _check(op)
    x = inputs["x"]
    dt = common.torch_dtype(out_dtype(op, common.dtype_name(x.dtype)))
    return torch.empty(x.shape[:-1], dtype=dt, device=x.device)


def config_space(op, shape, dtype, params, target):
    """(BLOCK_M, BLOCK_N) tiles of up to 8192 elements (16384 for 2-byte types),
    BLOCK_N from 512 up to the row padded to pow2, one-row tiles first; every
    warp count that gives each thread 4..64 elements (one or more 16-byte
    loads); then the AMD knobs.

    Leading: the tile that measured best on an H200 for row_sum [16384, 4096]
    fp32 (one row in 1024-wide chunks, 8 warps: 0.0706 ms), plain and with
    evict-first loads, then the one-pass (BLOCK_N = row) tiles with their knob
    variants (common.row_variants: evict-first loads, a persistent
    software-pipelined grid; not yet measured on a GPU). At most MAX_CONFIGS
    configs before the AMD knobs."""
    _check(op)
    rows, cols = shape
    ws = common.warp_size(target)
    row_block = triton.next_power_of_2(cols)
    max_bm = triton.next_power_of_2(rows)
    max_tile = 8192 if common.element_bytes(dtype) == 4 else 16384
    per_thread_max = 64

    bns = sorted({min(row_block, bn) for bn in (512, 1024, 2048, 4096, 8192, 16384)}, reverse=True)
    shapes = []
    for bm in [1, 2, 4, 8, 16, 32]:
        if bm > 1 and bm > max_bm:
            continue
        for bn in bns:
            if bm * bn <= max_tile and (bm == 1 or bm * bn >= 2048):
                shapes.append((bm, bn))

    base = []
    for bm, bn in shapes:
        tile = bm * bn
        for warps in [2, 4, 8, 16]:
            threads = warps * ws
            if (warps == 2 or threads * 4 <= tile) and tile <= threads * per_thread_max:
                base.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": 1})
    if not base:  # tiny rows: one small tile
        base.append({"BLOCK_M": 1, "BLOCK_N": row_block, "num_warps": 1, "num_stages": 1})
    front = []
    if row_block > 1024:  # the measured best: 1024-wide chunks on 8 warps
        best = {"BLOCK_M": 1, "BLOCK_N": 1024, "num_warps": 8, "num_stages": 1}
        if best in base:
            front = [best, dict(best, stream=1)]
    one_pass = [(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]) for c in base if c["BLOCK_N"] >= cols]
    tiles = common.prefer(one_pass, _PREFERRED)
    space = front + common.row_variants(tiles, target, rows, common.element_bytes(dtype)) + base
    return common.expand(common.dedupe(space, MAX_CONFIGS), common.amd_knobs(target))


def _options(op, config, backend, shape):
    """Options, constexprs, grid. Evict-first loads (`stream`) apply to every
    tile (x is read once either way); the persistent grid to one-pass tiles."""
    rows, cols = shape
    one_pass = config["BLOCK_N"] >= cols
    if config.get("programs") and not one_pass:
        raise ValueError("reduce: a persistent grid (programs) needs BLOCK_N >= cols")
    opts, consts, grid = common.row_options(config, backend, rows)
    return opts, dict(consts, OP=_OP_CODE[op], EVEN_N=cols % consts["BLOCK_N"] == 0, ONE_PASS=one_pass), grid


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    assert x.is_contiguous() and out.is_contiguous(), "reduce: contiguous rows"
    rows, cols = x.shape
    opts, consts, grid = _options(op, config, common.device_backend(out), x.shape)
    row_reduce_kernel[grid](x, out, rows, cols, **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    rows, cols = shape
    opts, consts, grid = _options(op, config, common.backend(target), shape)
    args = [("x_ptr", common.pointer_type(dtype), rows * cols * common.element_bytes(dtype)),
            ("out_ptr", common.pointer_type(out_dtype(op, dtype)), rows * common.element_bytes(out_dtype(op, dtype))),
            ("n_rows", "i32", rows), ("n_cols", "i32", cols)]
    return common.spec(row_reduce_kernel, args, consts, opts, grid, target)


def traffic(op, shape, dtype, params):
    _check(op)
    rows, cols = shape
    return {"bytes": rows * cols * common.element_bytes(dtype) + rows * common.element_bytes(out_dtype(op, dtype)),
            "flops": rows * cols}


def hints(op, shape, dtype, params, config, target) -> dict:
    """Per config, for the engine's config model: the bytes one program has
    in flight (common.row_hints)."""
    _check(op)
    return common.row_hints(config, shape, dtype)


def validation_tolerance(op, shape, dtype, params):
    """row_sum's outputs are sums of N unit-variance inputs: the default atol
    scales by sqrt(N) (worker/kiln_worker/check.py); row_mean / row_max are O(1)."""
    return {"reduction": int(shape[-1])} if op == "row_sum" else {}
