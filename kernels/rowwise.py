"""What the row templates share: softmax.py, softmax_variants.py, layernorm.py
and rmsnorm.py (a one-pass kernel holding BLOCK_M whole rows of a [rows, cols]
tensor, and a looped kernel walking a row in BLOCK_N chunks, picked by the
config's BLOCK_N), and reduce.py (one kernel).

* @jit helpers for the kernels: `row_block` (a block's rows, their mask, the
  rows to read), `load_masked` (a load without its column mask where
  EVEN_N), `load_rows` / `store_rows` (a one-pass kernel's rows in and
  out), `looped_rows` (a looped kernel's
  row pointers),
  `online_softmax_start` and `online_softmax_step` (the running max and sum
  of online softmax);
* the host side of a one-pass / looped pair: `kernel` (which of the two a
  config runs), `options` (common.row_options with the pair's knobs),
  `launch` and `spec` (a launch, and the compile_spec dict, of the pair for a
  config), `args` (compile_spec's argument list) and `inputs`.

The config knobs themselves (`programs`, `stream`, `l2hint`), the config space
and the config model's hints are common.py's (row_options, norm_row_space,
row_hints).
"""

from __future__ import annotations

import triton.language as tl

from . import common


@common.jit_helper
def row_block(rb, n_rows, BLOCK_M: tl.constexpr):
    """Row block `rb`: its BLOCK_M rows, their mask (rows < n_rows), and the
    rows to read as int64 -- a row past the end reads the last row again, so
    the loads need no row mask and stay finite; it is never stored."""
    rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    rows_in = tl.minimum(rows, n_rows - 1).to(tl.int64)
    return rows, row_mask, rows_in


@common.jit_helper
def load_masked(ptrs, mask, EVEN_N: tl.constexpr, POLICY: tl.constexpr):
    """tl.load of `ptrs` in their storage dtype: without `mask` where EVEN_N
    (the row is whole BLOCK_N blocks: unpredicated, full 16-byte vectors),
    else masked, what it masks read as 0."""
    if EVEN_N:
        x = tl.load(ptrs, eviction_policy=POLICY)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0, eviction_policy=POLICY)
    return x


@common.jit_helper
def load_rows(x_ptr, rows_in, n_cols, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, LOAD_POLICY: tl.constexpr):
    """A one-pass kernel's rows `rows_in` (row_block's) of x, [BLOCK_M, BLOCK_N]
    in fp32 (load_masked: the columns past n_cols read as 0)."""
    cols = tl.arange(0, BLOCK_N)
    return load_masked(x_ptr + rows_in[:, None] * n_cols + cols[None, :], (cols < n_cols)[None, :], EVEN_N,
                       LOAD_POLICY).to(tl.float32)


@common.jit_helper
def store_rows(out_ptr, out, rows, row_mask, n_cols, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
               STORE_CACHE: tl.constexpr):
    """Stores a one-pass kernel's `out` [BLOCK_M, BLOCK_N] to rows `rows`
    (row_block's; those past the end masked) in out's dtype, with a column
    mask unless EVEN_N."""
    cols = tl.arange(0, BLOCK_N)
    out_offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    if EVEN_N:
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_mask[:, None],
                 cache_modifier=STORE_CACHE)
    else:
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & (cols < n_cols)[None, :], cache_modifier=STORE_CACHE)


@common.jit_helper
def looped_rows(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr):
    """The looped kernels' rows (program pid's row block): pointers to the
    start of the rows to read in x (row_block's rows_in) and of the rows to
    write in out, and the rows' mask for the stores."""
    rows, row_mask, rows_in = row_block(tl.program_id(0), n_rows, BLOCK_M)
    x_row = x_ptr + rows_in[:, None] * n_cols
    out_row = out_ptr + rows.to(tl.int64)[:, None] * n_cols
    return x_row, out_row, row_mask


@common.jit_helper
def online_softmax_start(BLOCK_M: tl.constexpr):
    """Online softmax's state before the first chunk: per row, the running
    max m = -inf and the running sum l = 0 (fp32)."""
    m = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    return m, l


@common.jit_helper
def online_softmax_step(m, l, x):
    """One chunk x [BLOCK_M, BLOCK_N] (fp32, masked columns -inf) of online
    softmax (Milakov & Gimelshein 2018): the running max m and the running sum
    l of exp(x - m), rescaled to the new max. Every chunk has at least one
    valid column, so m is finite after the first one."""
    m_new = tl.maximum(m, tl.max(x, axis=1))
    l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
    return m_new, l


def kernel(kernels, config, n_cols):
    """kernels = (one_pass, looped): the one-pass kernel when the config's
    BLOCK_N holds the whole row, else the looped one."""
    one_pass, looped = kernels
    return one_pass if config["BLOCK_N"] >= n_cols else looped


def options(config, backend: str, shape, even_n: bool = False):
    """(options, constexprs, grid) of a one-pass / looped pair's config over
    [rows, cols]: common.row_options with the one-pass knobs (programs, stream)
    for a one-pass tile and the two-pass ones (l2hint) for a looped tile; with
    `even_n` also EVEN_N (cols % BLOCK_N == 0: no column mask)."""
    rows, cols = shape
    one_pass = config["BLOCK_N"] >= cols
    opts, consts, grid = common.row_options(config, backend, rows, knobs=one_pass, two_pass=not one_pass)
    if even_n:
        consts["EVEN_N"] = cols % consts["BLOCK_N"] == 0
    return opts, consts, grid


def launch(kernels, config, shape, out, *args, even_n: bool = False, **constexprs):
    """Launch the pair's kernel for `config` over [rows, cols] `shape` with the
    runtime `args` (in the kernel's order) and the extra `constexprs`; `out`
    (a tensor on the device) says the backend."""
    opts, consts, grid = options(config, common.device_backend(out), shape, even_n)
    kernel(kernels, config, shape[1])[grid](*args, **consts, **constexprs, **opts)


def spec(kernels, config, shape, args, target: dict, even_n: bool = False, **constexprs) -> dict:
    """compile_spec of the pair for `config` (common.spec of the kernel it runs)."""
    opts, consts, grid = options(config, common.backend(target), shape, even_n)
    return common.spec(kernel(kernels, config, shape[1]), args, dict(consts, **constexprs), opts, grid, target)


def args(dtype: str, shape, tensors, *scalars) -> list:
    """compile_spec's runtime arguments of a row kernel: a `dtype` pointer for
    each (name, elements) of `tensors`, then n_rows and n_cols, then `scalars`
    ((name, type, value) each)."""
    rows, cols = shape
    ptr, eb = common.pointer_type(dtype), common.element_bytes(dtype)
    sizes = [("n_rows", "i32", rows), ("n_cols", "i32", cols)]
    return [(name, ptr, n * eb) for name, n in tensors] + sizes + list(scalars)


def inputs(shape, dtype: str, seed: int, device, vectors=()) -> dict:
    """{"x": a normal [rows, cols] tensor} and a normal [cols] tensor per name
    in `vectors` (a norm's weight, bias), drawn in that order from one
    generator seeded with `seed` (common.randn)."""
    g = common.generator(seed, device)
    out = {"x": common.randn(list(shape), dtype, seed, device, generator=g)}
    for name in vectors:
        out[name] = common.randn([shape[-1]], dtype, seed, device, generator=g)
    return out
