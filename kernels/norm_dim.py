"""A tensor scaled by a statistic of itself over one dim (or a run of dims),
the tensor seen as [outer, R, inner] (R the reduced dims' product):

    norm_dim: out[o, r, i] = x[o, r, i] * s(x[o, :, i])

with s by param `kind`:
    rms     rsqrt(mean(x^2) + eps)   (RMS norm without a weight, over any dim)
    l2      1 / sqrt(sum(x^2))       (x / ||x||_2; over every dim: the Frobenius norm)
    l1mean  1 / mean(|x|)            (x / mean |x|)

One kernel, two passes: a program owns BLOCK_I inner positions of one outer
index; pass 1 walks R in BLOCK_R chunks accumulating the statistic in fp32,
pass 2 re-reads them and writes x * s. Output in the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, dim_tiles

OPERATORS = ("norm_dim",)
KINDS = ("rms", "l2", "l1mean")


@triton.jit
def norm_dim_kernel(x_ptr, out_ptr, n_red, n_inner, eps, KIND: tl.constexpr,
                    BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o, inner, imask = dim_tiles.program_tile(n_inner, BLOCK_I)
    base = o * n_red * n_inner
    acc = tl.zeros([BLOCK_I], tl.float32)
    for start in range(0, n_red, BLOCK_R):
        r = (start + tl.arange(0, BLOCK_R)).to(tl.int64)
        m = (r < n_red)[:, None] & imask[None, :]
        x = tl.load(x_ptr + base + r[:, None] * n_inner + inner[None, :], mask=m, other=0.0).to(tl.float32)
        if KIND == 2:
            acc += tl.sum(tl.abs(x), axis=0)
        else:
            acc += tl.sum(x * x, axis=0)
    if KIND == 0:
        s = 1.0 / tl.sqrt(acc / n_red + eps)
    elif KIND == 1:
        s = 1.0 / tl.sqrt(acc)
    else:
        s = n_red / acc
    for start in range(0, n_red, BLOCK_R):
        r = (start + tl.arange(0, BLOCK_R)).to(tl.int64)
        m = (r < n_red)[:, None] & imask[None, :]
        offs = base + r[:, None] * n_inner + inner[None, :]
        x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, (x * s[None, :]).to(out_ptr.dtype.element_ty), mask=m)


_check = checks.operators("norm_dim", OPERATORS)
_kind = checks.choice("norm_dim", "kind", "rms", KINDS)


def _eps(params) -> float:
    return float((params or {}).get("eps", 1e-5))


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return {"x": common.randn(list(shape), dtype, seed, device)}


def reference(op, inputs, params):
    _check(op)
    x, k = inputs["x"], _kind(params)
    if k == "rms":
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + _eps(params))
    if k == "l2":
        return x / x.pow(2).sum(dim=1, keepdim=True).sqrt()
    return x / x.abs().mean(dim=1, keepdim=True)


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


# config_space's axes (dim_tiles.config_space), the likely-best first.
_SPACE = dict(last_dim_blocks=(1024, 4096, 512), inner_blocks=(64, 128, 32, 16), red_blocks=(16, 32, 8, 64),
             warps=(4, 8, 2, 1), max_per_thread=32)


def config_space(op, shape, dtype, params, target):
    """inner 1 (a last-dim statistic): BLOCK_I 1, BLOCK_R 512..4096; else
    BLOCK_I 16..128 with BLOCK_R 8..64; the warp counts giving each thread
    1..32 values; the AMD knobs on hip targets."""
    _check(op)
    _kind(params)
    return dim_tiles.config_space(shape, target, **_SPACE)


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    outer, red, inner = x.shape
    dim_tiles.launch(norm_dim_kernel, config, x.shape, out, x, out, red, inner, _eps(params),
                     KIND=KINDS.index(_kind(params)))
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    outer, red, inner = shape
    ptr = common.pointer_type(dtype)
    size = common.numel(shape) * common.element_bytes(dtype)
    args = [("x_ptr", ptr, size), ("out_ptr", ptr, size), ("n_red", "i32", red), ("n_inner", "i32", inner),
            ("eps", "fp32", _eps(params))]
    return dim_tiles.spec(norm_dim_kernel, config, shape, args, target, KIND=KINDS.index(_kind(params)))


def traffic(op, shape, dtype, params):
    _check(op)
    n = common.numel(shape)
    return {"bytes": 2 * n * common.element_bytes(dtype), "flops": 3 * n}
