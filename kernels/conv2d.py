"""2-D convolution, NCHW, no bias, square kernel (1x1 or 3x3), as an implicit GEMM.

    out[n, oc, oh, ow] = sum_{c, r, s} x[n, c, oh*stride - pad + r, ow*stride - pad + s] * w[oc, c, r, s]

Viewed as a GEMM: M = N*OH*OW output pixels, N = out_channels, K = C*k*k. Each
program computes a BLOCK_M x BLOCK_N tile of that GEMM; the A tile is gathered
from x on the fly (im2col without materialising it: padding is a load mask), the
B tile is the weight seen as a [out_channels, K] matrix. For the small-C case
(e.g. 3 input channels, 3x3: K = 27) one BLOCK_K = 32 step covers all of K, so
each output tile is a single `tl.dot`.

fp32 uses `input_precision="ieee"` in `tl.dot` (TF32 would miss the fp32
tolerance); fp16 / bf16 accumulate in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import common

OPERATORS = ("conv2d",)


@triton.jit
def conv2d_kernel(x_ptr, w_ptr, out_ptr, N, C, H, W, OC, OH, OW,
                  STRIDE: tl.constexpr, PAD: tl.constexpr, KS: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    K = C * KS * KS

    # Output pixels of this tile: m -> (n, oh, ow).
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < N * OH * OW
    ow = offs_m % OW
    oh = (offs_m // OW) % OH
    n = offs_m // (OW * OH)
    ih0 = oh * STRIDE - PAD
    iw0 = ow * STRIDE - PAD
    x_base = n.to(tl.int64) * C * H * W

    # Output channels of this tile.
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < OC

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # Reduction index k -> (c, r, s); KS is a constexpr so these are cheap.
        kk = k0 + tl.arange(0, BLOCK_K)
        k_mask = kk < K
        c = kk // (KS * KS)
        r = (kk % (KS * KS)) // KS
        s = kk % KS
        ih = ih0[:, None] + r[None, :]
        iw = iw0[:, None] + s[None, :]
        a_mask = (m_mask[:, None] & k_mask[None, :]
                  & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W))
        a = tl.load(x_ptr + x_base[:, None] + c[None, :] * (H * W) + ih * W + iw, mask=a_mask, other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * K + kk[:, None],
                    mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")

    # out[n, oc, oh, ow]
    pix = oh * OW + ow
    out_offs = (n.to(tl.int64) * OC * OH * OW + pix)[:, None] + offs_n[None, :] * (OH * OW)
    tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

def _check(op):
    if op not in OPERATORS:
        raise ValueError(f"conv2d: unknown operator {op!r}")


def _params(params):
    """(out_channels, kernel_size, stride, padding) with the registry's defaults."""
    p = params or {}
    oc = int(p.get("out_channels", 64))
    ks = int(p.get("kernel_size", 3))
    stride = int(p.get("stride", 1))
    pad = int(p.get("padding", 0))
    if ks not in (1, 3):
        raise ValueError(f"conv2d: kernel_size must be 1 or 3, not {ks}")
    if oc < 1 or stride < 1 or pad < 0:
        raise ValueError("conv2d: need out_channels >= 1, stride >= 1, padding >= 0")
    return oc, ks, stride, pad


def out_shape(shape, params):
    N, C, H, W = shape
    oc, ks, stride, pad = _params(params)
    OH = (H + 2 * pad - ks) // stride + 1
    OW = (W + 2 * pad - ks) // stride + 1
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d: empty output for input {list(shape)} and params {params}")
    return [N, oc, OH, OW]


def _gemm_dims(shape, params):
    N, C, H, W = shape
    _, oc, OH, OW = out_shape(shape, params)
    ks = _params(params)[1]
    return N * OH * OW, oc, C * ks * ks


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    N, C, H, W = shape
    oc, ks, _, _ = _params(params)
    g = common.generator(seed)
    # Weights scaled by 1/sqrt(fan_in) (as in common initialisations) keep the
    # outputs O(1) whatever C is.
    return {"x": common.randn([N, C, H, W], dtype, seed, device, generator=g),
            "weight": common.randn([oc, C, ks, ks], dtype, seed, device, generator=g,
                                   scale=(C * ks * ks) ** -0.5)}


def reference(op, inputs, params):
    _check(op)
    _, _, stride, pad = _params(params)
    return torch.nn.functional.conv2d(inputs["x"], inputs["weight"], stride=stride, padding=pad)


def output_like(op, inputs, params):
    _check(op)
    x = inputs["x"]
    return torch.empty(out_shape(list(x.shape), params), dtype=x.dtype, device=x.device)


def _sizes(dim, large, small=(16, 32)):
    """Block sizes along one GEMM dim: `large`, capped near the dim; for a small
    dim, the small sizes that fit plus the first large one."""
    p = triton.next_power_of_2(max(int(dim), 1))
    if p < large[0]:
        return [s for s in small if s <= max(small[0], p)] + [large[0]]
    return [s for s in large if s <= p]


def shared_bytes(config, dtype, target) -> int:
    """Estimated shared memory / LDS for the A and B tiles (see matmul.shared_bytes)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    stages = config["num_stages"] - 1 if common.is_hip(target) else config["num_stages"]
    e = common.element_bytes(dtype)
    # The epilogue may also stage the BLOCK_M x BLOCK_N result through shared
    # memory to change layout for the store (seen for fp32 on sm_90 / gfx1100).
    return max((bm * bk + bk * bn) * e * max(1, stages), bm * bn * e)


def config_space(op, shape, dtype, params, target):
    """Tiles over (pixels, out_channels, C*k*k) x warps x stages, then the AMD
    knobs, pruned by the shared-memory limit."""
    _check(op)
    M, OC, K = _gemm_dims(shape, params)
    hip = common.is_hip(target)
    limit = common.shared_limit(target)

    base = []
    for bm in _sizes(M, [64, 128, 256, 512]):
        for bn in _sizes(OC, [32, 64, 128], small=(16,)):
            if bm * bn > 256 * 64:
                continue
            for bk in _sizes(K, [32, 64], small=(16,)):
                tile = bm * bn
                warps_list = [2, 4] if tile <= 2048 else [4, 8]
                # Pipelining needs more than one K step (the small-C case has one).
                stages_list = [1] if K <= bk else [2] if hip else [2, 3]
                for warps in warps_list:
                    for stages in stages_list:
                        base.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                                     "num_warps": warps, "num_stages": stages})

    def keep(c):
        if shared_bytes(c, dtype, target) > limit:
            return False
        if c.get("matrix_instr_nonkdim") == 32 and min(c["BLOCK_M"], c["BLOCK_N"]) < 32:
            return False
        if c.get("kpack") == 2 and c["BLOCK_K"] < 64:
            return False
        return True

    return common.expand(base, common.amd_knobs(target, dot=True), keep)


def _grid(shape, params, config):
    M, OC, _ = _gemm_dims(shape, params)
    return (common.cdiv(M, config["BLOCK_M"]), common.cdiv(OC, config["BLOCK_N"]), 1)


def _constexprs(consts, params):
    _, ks, stride, pad = _params(params)
    return dict(consts, STRIDE=stride, PAD=pad, KS=ks)


def launch(op, inputs, out, config, params):
    _check(op)
    x, w = inputs["x"], inputs["weight"]
    assert x.is_contiguous() and w.is_contiguous() and out.is_contiguous(), "conv2d: contiguous NCHW"
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    opts, consts = common.runtime_options(config, common.device_backend(out))
    conv2d_kernel[_grid(list(x.shape), params, config)](
        x, w, out, N, C, H, W, OC, OH, OW, **_constexprs(consts, params), **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    args = [("x_ptr", ptr, None), ("w_ptr", ptr, None), ("out_ptr", ptr, None),
            ("N", "i32", N), ("C", "i32", C), ("H", "i32", H), ("W", "i32", W),
            ("OC", "i32", OC), ("OH", "i32", OH), ("OW", "i32", OW)]
    return common.spec(conv2d_kernel, args, _constexprs(consts, params), opts, _grid(shape, params, config))


def traffic(op, shape, dtype, params):
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    ks = _params(params)[1]
    e = common.element_bytes(dtype)
    return {"bytes": (N * C * H * W + OC * C * ks * ks + N * OC * OH * OW) * e,
            "flops": 2 * N * OH * OW * OC * C * ks * ks}
