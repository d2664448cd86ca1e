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

Variants (config knobs, NVIDIA spaces only, one K step only; NOT yet measured on
a GPU -- everything below comes from Triton 3.6 sm_90 cubins cross-compiled on a
CPU, SASS counted with nvdisasm, for the seed case, 128-pixel chunks, 4 warps,
i.e. 64 outputs per thread per chunk). Instructions per output element in the
chunk loop, and registers:

  plain (the 0.1445 ms config above) ........................ 6.36, 115 regs
  spec: the shape (C, H, W, OH, OW) baked in as constants ... 4.69,  96
    (the div / mod by OW becomes a multiply, the 5 padding k of K = 27 -> 32 are
    never loaded, the k bounds / offsets fold into immediates: 27 gather loads
    per chunk instead of 32, the per-element compares shrink to 3 + 3 per pixel)
  spec + transpose: [oc, pixels] = w @ x^T ................... 4.70, 118
    (one 64x128 wgmma per chunk with the weights in registers; the epilogue's
    layout change through shared memory takes 4 barriers instead of 16)
  spec + prefetch: next chunk's gather before this store ..... 4.86, 124
  spec + transpose + prefetch ................................ 4.64, 128
  spec + persistent (programs = 4 x SMs walking all chunks,
    always prefetching) ...................................... 4.52, 106
  spec + transpose + persistent .............................. 4.33, 112
  stream: `.cs` stores (STG.E.EF, evict-first; no extra instructions). An
    `evict_last` policy on the gather costs ~80 uniform instructions per chunk
    (a policy register per load) and is not used.

Issue time is not the bound any more at ~6 instructions per output (about 40 us
of the 145 on an H200 by a 4-issue-per-cycle count), so the gain, if any, has to
come from latency: fewer barriers, the gather's latency hidden behind the
previous chunk's store (prefetch / persistent), fewer registers (spec: 5 blocks
per SM instead of 4). Which of them pays is for the explorer to measure;
`hints()` gives the config model the instruction and register estimates.

Not done: an FMA (CUDA-core) product for K = 27: 27 FFMA per output element
plus the operand shuffles, against ~4.7 instructions per output in total with
the wgmma (which needs 2-4 HGMMA per chunk): several times the instructions.
Loading each input row band once and reusing it across the 3 kernel rows / 3
taps needs register shifts across lanes or sub-tile views of shared memory at
2-byte offsets that tl.dot operands cannot take; Triton 3.6 has neither.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common, dot_tiles

OPERATORS = ("conv2d",)


@common.jit_helper
def _pixels(p0, OW, STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    # Pixels of a chunk and the input row / column of their tap (0, 0): the div /
    # mod by OW runs once per pixel, not per (pixel, k) element.
    offs_p = p0 + tl.arange(0, BLOCK_M)
    oh = offs_p // OW
    ow = offs_p % OW
    return offs_p, oh * STRIDE - PAD, ow * STRIDE - PAD


@common.jit_helper
def _gather(x_img, offs_p, ih0, iw0, r, s, k_off, k_mask, H, W, OHW,
            EVEN_P: tl.constexpr, KMASK: tl.constexpr, TRANSPOSE: tl.constexpr):
    # The A tile of one chunk and K step, [pixels, k] ([k, pixels] when TRANSPOSE).
    # Per (pixel, k) element: an add for the address and the bounds test as one
    # unsigned compare per axis (a negative index wraps to a huge value).
    Hu = tl.cast(H, tl.uint32)
    Wu = tl.cast(W, tl.uint32)
    m_off = ih0 * W + iw0  # input offset of tap (0, 0) of channel 0, per pixel
    if TRANSPOSE:
        ih = (ih0[None, :] + r[:, None]).to(tl.uint32, bitcast=True)
        iw = (iw0[None, :] + s[:, None]).to(tl.uint32, bitcast=True)
        a_mask = (ih < Hu) & (iw < Wu)
        if KMASK:
            a_mask = a_mask & k_mask[:, None]
        if not EVEN_P:
            a_mask = a_mask & (offs_p < OHW)[None, :]
        a = tl.load(x_img + (m_off[None, :] + k_off[:, None]), mask=a_mask, other=0.0)
    else:
        ih = (ih0[:, None] + r[None, :]).to(tl.uint32, bitcast=True)
        iw = (iw0[:, None] + s[None, :]).to(tl.uint32, bitcast=True)
        a_mask = (ih < Hu) & (iw < Wu)
        if KMASK:
            a_mask = a_mask & k_mask[None, :]
        if not EVEN_P:
            a_mask = a_mask & (offs_p < OHW)[:, None]
        a = tl.load(x_img + (m_off[:, None] + k_off[None, :]), mask=a_mask, other=0.0)
    return a


@common.jit_helper
def _mma(a, b, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TRANSPOSE: tl.constexpr):
    # [pixels, oc] = a @ b, or [oc, pixels] = b @ a when TRANSPOSE.
    if TRANSPOSE:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        acc = tl.dot(b, a, acc, input_precision="ieee")
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    return acc


@common.jit_helper
def _store(out_img, oc_off, oc_mask, offs_p, acc, OHW,
           EVEN_P: tl.constexpr, EVEN_N: tl.constexpr, TRANSPOSE: tl.constexpr, CACHE: tl.constexpr):
    # out[n, oc, p]: contiguous along the chunk (BLOCK_M pixels, and BLOCK_P per
    # program), OH*OW apart along oc: full 16-byte vector stores.
    val = acc.to(out_img.dtype.element_ty)
    if TRANSPOSE:
        ptrs = out_img + oc_off[:, None] + offs_p[None, :]
        if EVEN_P and EVEN_N:
            tl.store(ptrs, val, cache_modifier=CACHE)
        elif EVEN_P:
            tl.store(ptrs, val, mask=oc_mask[:, None], cache_modifier=CACHE)
        else:
            tl.store(ptrs, val, mask=oc_mask[:, None] & (offs_p < OHW)[None, :], cache_modifier=CACHE)
    else:
        ptrs = out_img + oc_off[None, :] + offs_p[:, None]
        if EVEN_P and EVEN_N:
            tl.store(ptrs, val, cache_modifier=CACHE)
        elif EVEN_P:
            tl.store(ptrs, val, mask=oc_mask[None, :], cache_modifier=CACHE)
        else:
            tl.store(ptrs, val, mask=(offs_p < OHW)[:, None] & oc_mask[None, :], cache_modifier=CACHE)


@triton.jit
def conv2d_kernel(x_ptr, w_ptr, out_ptr, C, H, W, OC, OH, OW,
                  STRIDE: tl.constexpr, PAD: tl.constexpr, KS: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  BLOCK_P: tl.constexpr, ONE_K: tl.constexpr, EVEN_P: tl.constexpr, EVEN_N: tl.constexpr,
                  SPEC: tl.constexpr = False, C_: tl.constexpr = 0, H_: tl.constexpr = 0, W_: tl.constexpr = 0,
                  OH_: tl.constexpr = 0, OW_: tl.constexpr = 0, KMASK: tl.constexpr = True,
                  TRANSPOSE: tl.constexpr = False, PREFETCH: tl.constexpr = False,
                  PROGRAMS: tl.constexpr = 0, CHUNKS: tl.constexpr = 0,
                  CACHE: tl.constexpr = ""):
    # Grid: (pixel blocks of one image, out-channel blocks, images). A program owns
    # BLOCK_P consecutive output pixels p = oh * OW + ow of one image and walks
    # them in chunks of BLOCK_M (one tl.dot per chunk and K step).
    # Variants (ONE_K only; see config_space): SPEC bakes the shape in (C_ .. OW_);
    # TRANSPOSE computes [oc, pixels] = w @ x^T; PREFETCH issues the next chunk's
    # gather before this chunk's dot and store; PROGRAMS > 0 is a persistent grid
    # (PROGRAMS, out-channel blocks, 1) whose program i walks the chunks i,
    # i + PROGRAMS, ... of all CHUNKS = N * cdiv(OH*OW, BLOCK_M) (prefetching);
    # CACHE is the store cache modifier (".cs": streaming).
    if SPEC:
        C = C_
        H = H_
        W = W_
        OH = OH_
        OW = OW_
    pid_p = tl.program_id(0)
    pid_oc = tl.program_id(1)
    OHW = OH * OW
    K = C * KS * KS

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
        if TRANSPOSE:
            if EVEN_N:
                b = tl.load(w_ptr + offs_oc[:, None] * K + kk[None, :], mask=k_mask[None, :], other=0.0)
            else:
                b = tl.load(w_ptr + offs_oc[:, None] * K + kk[None, :],
                            mask=k_mask[None, :] & oc_mask[:, None], other=0.0)
        else:
            if EVEN_N:
                b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None], mask=k_mask[:, None], other=0.0)
            else:
                b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None],
                            mask=k_mask[:, None] & oc_mask[None, :], other=0.0)

        if PROGRAMS > 0:
            cpi = tl.cdiv(OHW, BLOCK_M)  # chunks per image
            n = pid_p // cpi
            offs_p, ih0, iw0 = _pixels((pid_p - n * cpi) * BLOCK_M, OW, STRIDE, PAD, BLOCK_M)
            a = _gather(x_ptr + n.to(tl.int64) * C * H * W, offs_p, ih0, iw0, r, s, k_off, k_mask,
                        H, W, OHW, EVEN_P, KMASK, TRANSPOSE)
            for t in range(pid_p, CHUNKS, PROGRAMS):
                # the next chunk of this program (this one again after the last)
                tn = tl.minimum(t + PROGRAMS, CHUNKS - 1)
                nn = tn // cpi
                offs_pn, ih0n, iw0n = _pixels((tn - nn * cpi) * BLOCK_M, OW, STRIDE, PAD, BLOCK_M)
                a_next = _gather(x_ptr + nn.to(tl.int64) * C * H * W, offs_pn, ih0n, iw0n, r, s, k_off,
                                 k_mask, H, W, OHW, EVEN_P, KMASK, TRANSPOSE)
                acc = _mma(a, b, BLOCK_M, BLOCK_N, TRANSPOSE)
                _store(out_ptr + n.to(tl.int64) * OC * OHW, oc_off, oc_mask, offs_p, acc, OHW,
                       EVEN_P, EVEN_N, TRANSPOSE, CACHE)
                a = a_next
                offs_p = offs_pn
                n = nn
        else:
            n = tl.program_id(2)
            x_img = x_ptr + n.to(tl.int64) * C * H * W
            out_img = out_ptr + n.to(tl.int64) * OC * OHW
            first = pid_p * BLOCK_P
            if PREFETCH:
                offs_p, ih0, iw0 = _pixels(first, OW, STRIDE, PAD, BLOCK_M)
                a = _gather(x_img, offs_p, ih0, iw0, r, s, k_off, k_mask, H, W, OHW,
                            EVEN_P, KMASK, TRANSPOSE)
                for p0 in range(first, first + BLOCK_P, BLOCK_M):
                    # the next chunk (this one again after the last)
                    pn = tl.minimum(p0 + BLOCK_M, first + BLOCK_P - BLOCK_M)
                    offs_pn, ih0n, iw0n = _pixels(pn, OW, STRIDE, PAD, BLOCK_M)
                    a_next = _gather(x_img, offs_pn, ih0n, iw0n, r, s, k_off, k_mask, H, W, OHW,
                                     EVEN_P, KMASK, TRANSPOSE)
                    acc = _mma(a, b, BLOCK_M, BLOCK_N, TRANSPOSE)
                    _store(out_img, oc_off, oc_mask, offs_p, acc, OHW, EVEN_P, EVEN_N, TRANSPOSE, CACHE)
                    a = a_next
                    offs_p = offs_pn
            else:
                for p0 in range(first, first + BLOCK_P, BLOCK_M):
                    offs_p, ih0, iw0 = _pixels(p0, OW, STRIDE, PAD, BLOCK_M)
                    a = _gather(x_img, offs_p, ih0, iw0, r, s, k_off, k_mask, H, W, OHW,
                                EVEN_P, KMASK, TRANSPOSE)
                    acc = _mma(a, b, BLOCK_M, BLOCK_N, TRANSPOSE)
                    _store(out_img, oc_off, oc_mask, offs_p, acc, OHW, EVEN_P, EVEN_N, TRANSPOSE, CACHE)
    else:
        # Several K steps: a plain implicit GEMM, the K loop inside each chunk.
        n = tl.program_id(2)
        x_img = x_ptr + n.to(tl.int64) * C * H * W
        out_img = out_ptr + n.to(tl.int64) * OC * OHW
        for p0 in range(pid_p * BLOCK_P, pid_p * BLOCK_P + BLOCK_P, BLOCK_M):
            offs_p, ih0, iw0 = _pixels(p0, OW, STRIDE, PAD, BLOCK_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + tl.arange(0, BLOCK_K)
                k_mask = kk < K
                c = kk // (KS * KS)
                r = (kk % (KS * KS)) // KS
                s = kk % KS
                k_off = c * (H * W) + r * W + s
                a = _gather(x_img, offs_p, ih0, iw0, r, s, k_off, k_mask, H, W, OHW,
                            EVEN_P, True, False)
                if EVEN_N:
                    b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None], mask=k_mask[:, None], other=0.0)
                else:
                    b = tl.load(w_ptr + offs_oc[None, :] * K + kk[:, None],
                                mask=k_mask[:, None] & oc_mask[None, :], other=0.0)
                acc = tl.dot(a, b, acc, input_precision="ieee")
            _store(out_img, oc_off, oc_mask, offs_p, acc, OHW, EVEN_P, EVEN_N, False, CACHE)


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_check = checks.operators("conv2d", OPERATORS)


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


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    N, C, H, W = shape
    oc, ks, _, _ = _params(params)
    g = common.generator(seed, device)
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
    BLOCK_M 128 / 256 / 64, multi-chunk programs first.

    On NVIDIA, for K <= 32 (one BLOCK_K = 32 step), the variant configs
    (_variants: spec / transpose / prefetch / programs / stream, see the module
    docstring; not measured on a GPU yet) come first, then the plain tiles, less
    the num_stages = 1 twins of multi-chunk programs (same sm_90 code as
    num_stages = 2). The seed case: 14 variants + 28 plain = 42 configs (was 42,
    all plain). AMD spaces are unchanged."""
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    OHW = OH * OW
    K = C * _params(params)[1] ** 2
    hip = common.is_hip(target)

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

    keep = dot_tiles.keep(shared_bytes, dtype, target)

    if not hip and K <= 32:
        # NVIDIA, all of K in one BLOCK_K = 32 step (the store-bound small-C case):
        # the variants first, then the plain tiles. num_stages has nothing to
        # pipeline in a one-step program (stages 1 and 2 compile to the same sm_90
        # code), so only one of each pair is kept.
        plain = [c for c in base
                 if not (c["BLOCK_P"] > c["BLOCK_M"] and c["num_stages"] == 1 and c["BLOCK_K"] == 32)]
        base = _variants(OHW, OC, K, N, target) + plain
    return common.expand(base, common.amd_knobs(target, dot=True), keep)


def _sms(target) -> int:
    """SMs / CUs of the target (common.compute_units), else 132 (an H100 / H200)."""
    return common.compute_units(target) or 132


def _variants(OHW, OC, K, N, target):
    """The variant configs for a one-K-step problem on NVIDIA, most promising
    first (see the module docstring): the shape baked in (spec), the [oc, pixels]
    product (transpose), the next chunk's gather issued before the store
    (prefetch), a persistent grid of `programs` = SMs x 4 (x 2 for 8 warps),
    streaming stores (stream). Only tiles with BLOCK_N = all the out channels
    (<= 64) and 128- or 256-pixel chunks that the image holds several of."""
    bn = min(64, triton.next_power_of_2(OC))
    p2 = triton.next_power_of_2(OHW)
    sms = _sms(target)
    out = []

    def add(bm, bp, warps, **knobs):
        if bp > p2 or bm > p2:
            return
        c = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 32, "BLOCK_P": bp, "num_warps": warps, "num_stages": 2}
        knobs = dict({"spec": 1}, **knobs)
        c.update({k: v for k, v in knobs.items() if v})
        out.append(c)

    add(128, 512, 4, transpose=1, prefetch=1)
    add(128, 128, 4, transpose=1, programs=4 * sms)
    add(128, 512, 4, transpose=1, prefetch=1, stream=1)
    add(128, 128, 4, transpose=1, programs=4 * sms, stream=1)
    add(128, 512, 4, transpose=1)
    add(128, 512, 4, prefetch=1)
    add(128, 512, 4)
    add(128, 128, 4, programs=4 * sms)
    add(128, 1024, 4, transpose=1, prefetch=1)
    add(256, 1024, 8, transpose=1, prefetch=1)
    add(256, 256, 8, transpose=1, programs=2 * sms)
    add(64, 256, 4, transpose=1, prefetch=1)
    add(128, 512, 4, stream=1)
    add(128, 512, 4, spec=0, transpose=1, prefetch=1)
    return out


# Lower-case config knobs of the variants (absent = off); _constexprs turns them
# into the kernel's constexprs.
KNOBS = ("spec", "transpose", "prefetch", "programs", "stream")


def _block_p(config):
    """Pixels per program: BLOCK_P (a multiple of BLOCK_M), default one chunk."""
    return max(config.get("BLOCK_P", config["BLOCK_M"]), config["BLOCK_M"])


def _chunks(shape, params, config):
    N = shape[0]
    _, _, OH, OW = out_shape(shape, params)
    return N * common.cdiv(OH * OW, config["BLOCK_M"])


def _grid(shape, params, config):
    N, oc, OH, OW = out_shape(shape, params)
    programs = int(config.get("programs", 0))
    if programs > 0:
        return (min(programs, _chunks(shape, params, config)), common.cdiv(oc, config["BLOCK_N"]), 1)
    return (common.cdiv(OH * OW, _block_p(config)), common.cdiv(oc, config["BLOCK_N"]), N)


def _constexprs(config, consts, shape, params):
    """The kernel's constexprs: the config's (runtime_options) and its KNOBS."""
    C = shape[1]
    _, oc, OH, OW = out_shape(shape, params)
    _, ks, stride, pad = _params(params)
    knobs = {k: int(config.get(k, 0)) for k in KNOBS}
    one_k = C * ks * ks <= consts["BLOCK_K"]
    if not one_k and any(knobs.values()):
        raise ValueError(f"conv2d: the variant knobs {KNOBS} need all of K in one BLOCK_K step")
    bp = consts["BLOCK_M"] if knobs["programs"] else _block_p(consts)
    out = dict(consts, BLOCK_P=bp, STRIDE=stride, PAD=pad, KS=ks, ONE_K=one_k,
               EVEN_P=(OH * OW) % bp == 0, EVEN_N=oc % consts["BLOCK_N"] == 0)
    spec = bool(knobs["spec"])
    out.update(SPEC=spec, C_=C if spec else 0, H_=shape[2] if spec else 0, W_=shape[3] if spec else 0,
               OH_=OH if spec else 0, OW_=OW if spec else 0,
               KMASK=not (spec and C * ks * ks == consts["BLOCK_K"]),
               TRANSPOSE=bool(knobs["transpose"]), PREFETCH=bool(knobs["prefetch"]),
               PROGRAMS=min(knobs["programs"], _chunks(shape, params, consts)) if knobs["programs"] else 0,
               CHUNKS=_chunks(shape, params, consts) if knobs["programs"] else 0,
               CACHE=".cs" if knobs["stream"] else "")
    return out


def launch(op, inputs, out, config, params):
    _check(op)
    x, w = inputs["x"], inputs["weight"]
    assert x.is_contiguous() and w.is_contiguous() and out.is_contiguous(), "conv2d: contiguous NCHW"
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    opts, consts = common.runtime_options(config, common.device_backend(out))
    conv2d_kernel[_grid(list(x.shape), params, config)](
        x, w, out, C, H, W, OC, OH, OW, **_constexprs(config, consts, list(x.shape), params), **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    eb = common.element_bytes(dtype)
    k = _params(params)[1]
    args = [("x_ptr", ptr, N * C * H * W * eb), ("w_ptr", ptr, OC * C * k * k * eb),
            ("out_ptr", ptr, N * OC * OH * OW * eb),
            ("C", "i32", C), ("H", "i32", H), ("W", "i32", W),
            ("OC", "i32", OC), ("OH", "i32", OH), ("OW", "i32", OW)]
    return common.spec(conv2d_kernel, args, _constexprs(config, consts, shape, params), opts,
                       _grid(shape, params, config), target)


def traffic(op, shape, dtype, params):
    _check(op)
    N, C, H, W = shape
    _, OC, OH, OW = out_shape(shape, params)
    ks = _params(params)[1]
    e = common.element_bytes(dtype)
    return {"bytes": (N * C * H * W + OC * C * ks * ks + N * OC * OH * OW) * e,
            "flops": 2 * N * OH * OW * OC * C * ks * ks}


# ---------------------------------------------------------------------------
# per-config hints for the engine's config model
# ---------------------------------------------------------------------------

def hints(op, shape, dtype, params, config, target) -> dict:
    """What tells this template's configs apart before any compile (an extra to
    the worker's per-config space hints: grid, shared_bytes).

    instr_per_output: estimated instructions a thread issues in the steady-state
      chunk loop per output element it writes (SASS for sm_90; the dominant cost
      of this store-bound kernel besides the stores themselves). Per chunk and
      thread: g per gathered A element (G = BLOCK_M*BLOCK_K/threads of them per K
      step; g = 2.9 with the shape baked in, 6.2 without: the div / mod, the K
      mask and the runtime strides), 1.0 per output (O = BLOCK_M*BLOCK_N/threads:
      convert, shared-memory round trip, 16-byte stores) and ~143 fixed (barriers,
      wgmma issue, pixel coordinates). Calibrated on Triton 3.6 sm_90 cubins of
      the seed case (128-pixel chunks: 6.36 plain, 4.3-4.9 for the variants;
      O = 32: 6.8-6.9), not on a GPU.
    registers: estimated registers per thread (same cubins, +-10%), for
      occupancy: the engine's generic estimate multiplies every BLOCK_* but
      BLOCK_K, which for BLOCK_P (pixels per program, walked in BLOCK_M chunks,
      not held at once) is wrong. Not capped at 255: above that the config
      spills, and the model counts it (the seed-shape calibration under-counts
      configs whose K takes several steps by 30-100%, docs/performance-journal.md).
    store_run_bytes: contiguous output bytes one program writes per out channel
      before it moves on (BLOCK_P, or BLOCK_M for a persistent program).
    programs_per_sm: for a persistent grid, the resident programs per SM it
      assumes (0 otherwise).
    instructions: the kernel's estimated thread instructions in all,
      instr_per_output x output elements; the engine's config model turns them
      into issue time (src/explore/strategy.cpp)."""
    _check(op)
    N, C, H, W = shape
    ks = _params(params)[1]
    K = C * ks * ks
    threads = config["num_warps"] * common.warp_size(target)
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    steps = common.cdiv(K, bk)
    spec = bool(config.get("spec")) and steps == 1
    g = 2.9 if spec else 6.2
    G = bm * bk / threads
    O = bm * bn / threads
    # several K steps: the weight tile is loaded in each (~1.5 per element)
    per_chunk = steps * G * g + (steps - 1) * (bk * bn / threads) * 1.5 + O + 143
    if config.get("programs"):
        per_chunk -= 10  # measured: the persistent loop is a little leaner
    regs = O + 32 + (0 if spec else 19)
    if steps == 1:
        if config.get("transpose") or config.get("prefetch") or config.get("programs"):
            regs += 16
        if config.get("transpose") and config.get("prefetch"):
            regs += 8
    else:
        regs += 2 * G
    programs = int(config.get("programs", 0))
    e = common.element_bytes(dtype)
    run = (bm if programs else _block_p(config)) * e
    sms = _sms(target)
    outputs = common.numel(out_shape(shape, params))
    return {"instr_per_output": round(per_chunk / O, 2),
            "instructions": float(outputs * per_chunk / O),
            "registers": int(round(regs)),  # past the 255 cap: the model counts the spill
            "store_run_bytes": int(run),
            "programs_per_sm": round(programs / sms, 2) if programs else 0}
