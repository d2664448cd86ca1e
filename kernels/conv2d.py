"""2-D convolution, NCHW, no bias, square kernel (1x1 or 3x3), as an implicit GEMM.

    out[n, oc, oh, ow] = sum_{c, r, s} x[n, c, oh*stride - pad + r, ow*stride - pad + s] * w[oc, c, r, s]

Viewed as a GEMM: M = N*OH*OW output pixels, N = out_channels, K = C*k*k. Each
program computes a BLOCK_M x BLOCK_N tile of that GEMM; the A tile is gathered
from x on the fly (im2col without materialising it: padding is a load mask), the
B tile is the weight seen as a [out_channels, K] matrix. For the small-C case
(e.g. 3 input channels, 3x3: K = 27, padded to 32 by the K mask) one BLOCK_K = 32
step covers all of K, so each output tile is a single `tl.dot` and the weight
tile is loaded once.

What makes it fast (the seed case 64x3x224x224 -> 64, 3x3, pad 1, fp16, on an
H200: 0.282 ms before, 0.140 ms now; floor 0.101 ms, a store-only kernel with the
same output pattern 0.094 ms). The old kernel was instruction-bound (Nsight
Compute: SM throughput ~75%, DRAM ~30%), ~34 instructions per output element:

* grid (pixel blocks, out-channel blocks, images): a program owns BLOCK_P
  consecutive pixels p = oh*OW + ow of one image, walked in chunks of BLOCK_M.
  out[n, oc, p] is contiguous along p for every channel and the compiler can see
  it (p comes from tl.arange): full 16-byte vector stores, with the out-channel
  dim the strided one; EVEN_P / EVEN_N drop the masks;
* the div / mod that turns p into (oh, ow) runs once per pixel, and the k ->
  (c, r, s) decomposition once per program (ONE_K: all of K in one BLOCK_K step,
  e.g. 27 -> 32), together with the weight tile load -- each thread holds one
  pixel and all 32 k of a chunk, so per-k work done per chunk used to dominate;
* per (pixel, k) element only an address add and the bounds test, one unsigned
  compare per axis: ~5.6 instructions per output element in the loop;
* BLOCK_N = all the output channels (up to 64): each input window is gathered
  once.

With more than one K step (C*k*k > BLOCK_K) the K loop runs inside each chunk,
as a plain implicit GEMM.

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
def conv2d_kernel(x_ptr, w_ptr, out_ptr, C, H, W, OC, OH, OW,
                  STRIDE: tl.constexpr, PAD: tl.constexpr, KS: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  BLOCK_P: tl.constexpr, ONE_K: tl.constexpr, EVEN_P: tl.constexpr, EVEN_N: tl.constexpr):
    # Grid: (pixel blocks of one image, out-channel blocks, images). A program owns
    # BLOCK_P consecutive output pixels p = oh * OW + ow of one image and walks
    # them in chunks of BLOCK_M (one tl.dot per chunk and K step).
    pid_p = tl.program_id(0)
    pid_oc = tl.program_id(1)
    n = tl.program_id(2)
    OHW = OH * OW
    K = C * KS * KS
    x_img = x_ptr + n.to(tl.int64) * C * H * W
    out_img = out_ptr + n.to(tl.int64) * OC * OHW

    offs_oc = pid_oc * BLOCK_N + tl.arange(0, BLOCK_N)
    oc_mask = offs_oc < OC
    oc_off = offs_oc * OHW

    if ONE_K:
        # K <= BLOCK_K (e.g. 3 channels x 3 x 3 = 27, padded to 32 by the mask): the
        # reduction index k -> (c, r, s), its input offset and the weight tile are
        # the same for every chunk, so they are computed / loaded once per program.
        kk = tl.arange(0, BLOCK_K)
        k_mask = kk < K
        c = kk // (KS * KS)
        r = (kk % (KS * KS)) // KS
        s = kk % KS
        k_off = c * (H * W) + r * W + s
        if EVEN_N:
            b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None], mask=k_mask[:, None], other=0.0)
        else:
            b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None],
                        mask=k_mask[:, None] & oc_mask[None, :], other=0.0)

    for p0 in range(pid_p * BLOCK_P, pid_p * BLOCK_P + BLOCK_P, BLOCK_M):
        # Pixels of this chunk: the div / mod by OW runs once per pixel, not per
        # (pixel, k) element.
        offs_p = p0 + tl.arange(0, BLOCK_M)
        oh = offs_p // OW
        ow = offs_p % OW
        ih0 = oh * STRIDE - PAD
        iw0 = ow * STRIDE - PAD
        m_off = ih0 * W + iw0  # input offset of tap (0, 0) of channel 0, per pixel
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if ONE_K:
            # Per (pixel, k) element: an add for the address and the bounds test as
            # one unsigned compare per axis (a negative index wraps to a huge value).
            ih = (ih0[:, None] + r[None, :]).to(tl.uint32, bitcast=True)
            iw = (iw0[:, None] + s[None, :]).to(tl.uint32, bitcast=True)
            a_mask = (ih < H.to(tl.uint32)) & (iw < W.to(tl.uint32)) & k_mask[None, :]
            if not EVEN_P:
                a_mask = a_mask & (offs_p < OHW)[:, None]
            a = tl.load(x_img + (m_off[:, None] + k_off[None, :]), mask=a_mask, other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + tl.arange(0, BLOCK_K)
                k_mask = kk < K
                c = kk // (KS * KS)
                r = (kk % (KS * KS)) // KS
                s = kk % KS
                k_off = c * (H * W) + r * W + s
                ih = (ih0[:, None] + r[None, :]).to(tl.uint32, bitcast=True)
                iw = (iw0[:, None] + s[None, :]).to(tl.uint32, bitcast=True)
                a_mask = (ih < H.to(tl.uint32)) & (iw < W.to(tl.uint32)) & k_mask[None, :]
                if not EVEN_P:
                    a_mask = a_mask & (offs_p < OHW)[:, None]
                a = tl.load(x_img + (m_off[:, None] + k_off[None, :]), mask=a_mask, other=0.0)
                if EVEN_N:
                    b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None], mask=k_mask[:, None], other=0.0)
                else:
                    b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None],
                                mask=k_mask[:, None] & oc_mask[None, :], other=0.0)
                acc = tl.dot(a, b, acc, input_precision="ieee")

        # out[n, oc, p]: contiguous along the chunk (BLOCK_M pixels, and BLOCK_P per
        # program), OH*OW apart along oc: full 16-byte vector stores.
        out_ptrs = out_img + oc_off[None, :] + offs_p[:, None]
        if EVEN_P and EVEN_N:
            tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty))
        elif EVEN_P:
            tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=oc_mask[None, :])
        else:
            tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty),
                     mask=(offs_p < OHW)[:, None] & oc_mask[None, :])


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
    knobs, pruned by the shared-memory limit. When all of K fits one BLOCK_K step
    a program may also walk BLOCK_P = 4 x BLOCK_M pixels (the k decomposition and
    the weight tile are reused; longer contiguous output runs: on an H200 the
    seed case ran 0.140 ms with 4 chunks, 0.146 with 8, 0.148 with 1), besides
    the plain one-chunk programs. Ordered so that the tiles that suit the store-bound
    small-C case come first: BLOCK_N = all the output channels (up to 64),
    BLOCK_M 128 / 256 / 64, multi-chunk programs first."""
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    OHW = OH * OW
    K = C * _params(params)[1] ** 2
    hip = common.is_hip(target)
    limit = common.shared_limit(target)

    base = []
    for bm in _sizes(OHW, [64, 128, 256, 512]):
        for bn in _sizes(OC, [32, 64, 128], small=(16,)):
            if bm * bn > 256 * 64:
                continue
            for bk in _sizes(K, [32, 64], small=(16,)):
                one_k = K <= bk
                tile = bm * bn
                warps_list = [2, 4] if tile <= 2048 else [4, 8]
                # Pipelining needs more than one K step, or several chunks.
                bps = [bm]
                if one_k and 4 * bm <= triton.next_power_of_2(OHW):
                    bps.insert(0, 4 * bm)
                for bp in bps:
                    if not one_k:
                        stages_list = [2] if hip else [2, 3]
                    else:
                        stages_list = [1] if bp == bm else [2] if hip else [1, 2]
                    for warps in warps_list:
                        for stages in stages_list:
                            base.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "BLOCK_P": bp,
                                         "num_warps": warps, "num_stages": stages})

    best_bn = min(64, triton.next_power_of_2(OC))
    bm_rank = {128: 0, 256: 1, 64: 2}
    base.sort(key=lambda c: (c["BLOCK_N"] != best_bn, bm_rank.get(c["BLOCK_M"], 3), c["BLOCK_P"] == c["BLOCK_M"]))

    def keep(c):
        if shared_bytes(c, dtype, target) > limit:
            return False
        if c.get("matrix_instr_nonkdim") == 32 and min(c["BLOCK_M"], c["BLOCK_N"]) < 32:
            return False
        if c.get("kpack") == 2 and c["BLOCK_K"] < 64:
            return False
        return True

    return common.expand(base, common.amd_knobs(target, dot=True), keep)


def _block_p(config):
    """Pixels per program: BLOCK_P (a multiple of BLOCK_M), default one chunk."""
    return max(config.get("BLOCK_P", config["BLOCK_M"]), config["BLOCK_M"])


def _grid(shape, params, config):
    N, oc, OH, OW = out_shape(shape, params)
    return (common.cdiv(OH * OW, _block_p(config)), common.cdiv(oc, config["BLOCK_N"]), N)


def _constexprs(consts, shape, params):
    C = shape[1]
    _, oc, OH, OW = out_shape(shape, params)
    _, ks, stride, pad = _params(params)
    bp = _block_p(consts)
    return dict(consts, BLOCK_P=bp, STRIDE=stride, PAD=pad, KS=ks,
                ONE_K=C * ks * ks <= consts["BLOCK_K"],
                EVEN_P=(OH * OW) % bp == 0, EVEN_N=oc % consts["BLOCK_N"] == 0)


def launch(op, inputs, out, config, params):
    _check(op)
    x, w = inputs["x"], inputs["weight"]
    assert x.is_contiguous() and w.is_contiguous() and out.is_contiguous(), "conv2d: contiguous NCHW"
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    opts, consts = common.runtime_options(config, common.device_backend(out))
    conv2d_kernel[_grid(list(x.shape), params, config)](
        x, w, out, C, H, W, OC, OH, OW, **_constexprs(consts, list(x.shape), params), **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    args = [("x_ptr", ptr, None), ("w_ptr", ptr, None), ("out_ptr", ptr, None),
            ("C", "i32", C), ("H", "i32", H), ("W", "i32", W),
            ("OC", "i32", OC), ("OH", "i32", OH), ("OW", "i32", OW)]
    return common.spec(conv2d_kernel, args, _constexprs(consts, shape, params), opts,
                       _grid(shape, params, config))


def traffic(op, shape, dtype, params):
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    ks = _params(params)[1]
    e = common.element_bytes(dtype)
    return {"bytes": (N * C * H * W + OC * C * ks * ks + N * OC * OH * OW) * e,
            "flops": 2 * N * OH * OW * OC * C * ks * ks}
