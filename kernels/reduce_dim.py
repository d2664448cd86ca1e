"""Reductions and arg-reductions over any one dim, the tensor seen as
[outer, R, inner] (R the reduced dim, outer and inner the products of the dims
before and after it):

    reduce_dim: out[o, i] = KIND(x[o, :, i])   -> [outer, inner]

KIND (param `kind`): sum, mean, amax, amin (output in the input dtype, fp32
accumulation) or argmax, argmin (int64 output; the first index on ties, as
torch). One kernel: a program owns BLOCK_I consecutive inner positions of one
outer index and walks R in BLOCK_R chunks, loading [BLOCK_R, BLOCK_I] tiles --
coalesced along inner when inner > 1, along R when inner = 1 (a last-dim
reduction, where BLOCK_I is 1). The arg-reductions keep, per column, the best
value and its index, replacing them only on a strictly better chunk maximum.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, dim_tiles

OPERATORS = ("reduce_dim",)
KINDS = ("sum", "mean", "amax", "amin", "argmax", "argmin")
_CODE = {k: i for i, k in enumerate(KINDS)}
# The reference: torch's reduction of each kind.
_TORCH = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin,
          "argmax": torch.argmax, "argmin": torch.argmin}


@triton.jit
def reduce_dim_kernel(x_ptr, out_ptr, n_outer, n_red, n_inner, KIND: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o, inner, imask = dim_tiles.program_tile(n_inner, BLOCK_I)
    base = x_ptr + o * n_red * n_inner
    # KIND: 0 sum, 1 mean, 2 amax, 3 amin, 4 argmax, 5 argmin
    if KIND <= 1:
        acc = tl.zeros([BLOCK_I], tl.float32)
    elif KIND == 2 or KIND == 4:
        acc = tl.full([BLOCK_I], -float("inf"), tl.float32)
    else:
        acc = tl.full([BLOCK_I], float("inf"), tl.float32)
    best = tl.zeros([BLOCK_I], tl.int64)
    for start in range(0, n_red, BLOCK_R):
        r = start + tl.arange(0, BLOCK_R)
        m = (r < n_red)[:, None] & imask[None, :]
        offs = r.to(tl.int64)[:, None] * n_inner + inner[None, :]
        if KIND <= 1:
            x = tl.load(base + offs, mask=m, other=0.0).to(tl.float32)
            acc += tl.sum(x, axis=0)
        elif KIND == 2:
            x = tl.load(base + offs, mask=m, other=-float("inf")).to(tl.float32)
            acc = tl.maximum(acc, tl.max(x, axis=0))
        elif KIND == 3:
            x = tl.load(base + offs, mask=m, other=float("inf")).to(tl.float32)
            acc = tl.minimum(acc, tl.min(x, axis=0))
        elif KIND == 4:
            x = tl.load(base + offs, mask=m, other=-float("inf")).to(tl.float32)
            v, idx = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
            better = v > acc
            best = tl.where(better, idx.to(tl.int64) + start, best)
            acc = tl.where(better, v, acc)
        else:
            x = tl.load(base + offs, mask=m, other=float("inf")).to(tl.float32)
            v, idx = tl.min(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
            better = v < acc
            best = tl.where(better, idx.to(tl.int64) + start, best)
            acc = tl.where(better, v, acc)
    out_offs = o * n_inner + inner
    if KIND >= 4:
        tl.store(out_ptr + out_offs, best, mask=imask)
    else:
        if KIND == 1:
            acc = acc / n_red
        tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=imask)


_check = checks.operators("reduce_dim", OPERATORS)
_kind = checks.choice("reduce_dim", "kind", "sum", KINDS)


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return {"x": common.randn(list(shape), dtype, seed, device)}


def reference(op, inputs, params):
    _check(op)
    return _TORCH[_kind(params)](inputs["x"], dim=1)


def output_like(op, inputs, params):
    _check(op)
    x = inputs["x"]
    dt = torch.int64 if _kind(params).startswith("arg") else x.dtype
    return torch.empty((x.shape[0], x.shape[2]), dtype=dt, device=x.device)


# config_space's axes (dim_tiles.config_space).
_SPACE = dict(last_dim_blocks=(256, 1024, 4096), inner_blocks=(16, 32, 64, 128), red_blocks=(8, 16, 32, 64),
             warps=(1, 2, 4, 8), max_per_thread=64)


def config_space(op, shape, dtype, params, target):
    """BLOCK_I 1 when inner is 1 (a last-dim reduction: BLOCK_R 256..4096),
    else 16..128 inner columns with BLOCK_R 8..64; per tile the warp counts
    giving each thread 1..64 values; the AMD knobs on hip targets."""
    _check(op)
    return dim_tiles.config_space(shape, target, **_SPACE)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    dim_tiles.launch(reduce_dim_kernel, config, x.shape, out, x, out, *x.shape, KIND=_CODE[_kind(params)])
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    outer, red, inner = shape
    ptr = common.pointer_type(dtype)
    arg = _kind(params).startswith("arg")
    out_bytes = outer * inner * (8 if arg else common.element_bytes(dtype))
    args = [("x_ptr", ptr, outer * red * inner * common.element_bytes(dtype)),
            ("out_ptr", "*i64" if arg else ptr, out_bytes),
            ("n_outer", "i32", outer), ("n_red", "i32", red), ("n_inner", "i32", inner)]
    return dim_tiles.spec(reduce_dim_kernel, config, shape, args, target, KIND=_CODE[_kind(params)])


def traffic(op, shape, dtype, params):
    _check(op)
    outer, red, inner = shape
    e = common.element_bytes(dtype)
    out_e = 8 if _kind(params).startswith("arg") else e
    return {"bytes": outer * red * inner * e + outer * inner * out_e, "flops": outer * red * inner}
