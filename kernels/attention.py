"""Flash-attention forward: out = softmax(q @ k^T * sm_scale [+ causal mask]) @ v.

q, k, v and out are contiguous [B, H, S, D] tensors (fp16 / bf16), D a power of
two from 16 to 256. Params: `causal` (bool, default true: query i sees keys
0..i) and `sm_scale` (float; 0, the default, means 1/sqrt(D), as
torch.nn.functional.scaled_dot_product_attention).

The structure of the Triton fused-attention tutorial (forward pass):

* each program owns BLOCK_M query rows of one (batch, head) and keeps them in
  registers; it walks the keys / values in BLOCK_N blocks with an online softmax
  (running row max m_i, running sum l_i, fp32 accumulator acc rescaled by
  alpha = 2^(m_old - m_new) when the max grows), so the S x S score matrix never
  exists; one write of the output at the end (acc / l_i);
* the scores are scaled by sm_scale * log2(e) once and exponentiated with exp2;
* causal: the key blocks left of the diagonal band (keys < start of the query
  block) need no mask and run in a plain loop (STAGE 1); the band itself
  (BLOCK_M keys, in BLOCK_N steps) adds the causal mask (STAGE 2). Non-causal:
  every full key block unmasked (STAGE 3), then, when S % BLOCK_N != 0, the last
  partial block with a key mask (STAGE 4). Query rows past S are loaded as zeros
  and not stored; keys past S are masked out (-1e6 before exp2 gives exactly 0).

Program order: a 1-D grid; GROUP_H heads at a time share the L2 (their K / V are
re-read by every query block of the head), and inside a group the query blocks
go heaviest first (for causal attention the last query block has the most keys),
so the short ones fill the tail of the wave (longest-processing-time-first).

On AMD the config may also carry `waves_per_eu`, `matrix_instr_nonkdim` and
`kpack` (compile options).

On sm_90 five lower-case knobs (absent = off; never in AMD spaces):

* `q_regs` 1: Q goes through an exact no-op after its load, so Triton keeps it in
  registers and q @ k^T is a register-A wgmma that reads only K from shared
  memory (with Q loaded, every wgmma re-reads its Q slice from shared memory: at
  BLOCK_N = 64 as many bytes as K -- by estimate, 4 KiB per 32 tensor-core
  cycles, near the shared-memory bandwidth). Costs ~20 registers (177 -> 195 at
  64 x 64 / 4 warps, D = 128); output bit-identical to the plain kernel (only
  -0 in Q becomes +0).
* `maxnreg`: Triton's register cap per thread (compile option), to fit more
  programs per SM (64 x 32 / 4 warps / 2 stages at 128: 4 per SM instead of 3).
* `tma` 1: Q, K, V and the output go through device-side tensor descriptors
  (tl.make_tensor_descriptor over [B*H, S, D], one box per head, so rows past S
  load as zeros and are not stored): TMA loads and store, no per-thread address
  arithmetic: 142 registers instead of 177 at 64 x 64 / 4 warps (146 / 190 at
  128 x 64 / 8 warps), 1 KiB more shared memory, and 512 bytes of global scratch
  per program for the descriptors (metadata.global_scratch_size), which the
  launch allocates through triton.set_allocator (the worker installs one;
  `kiln package` records the size for other launchers). Same results as the
  plain kernel under the interpreter; not yet timed on a GPU.
* `ws` 1: not this kernel but kernels/attention_wgmma.py's, FlashAttention-3's
  warp-specialised layout in Gluon (a TMA producer warp, two consumer
  warpgroups of 64 query rows, async wgmma with the softmax overlapping
  P @ V, host-side TMA descriptors), BLOCK_M 128, `num_warps` 12 (what runs);
  `pair` 1 gives each program two query tiles of one head. D = 128 only, and
  offered only where this process has an sm_90 GPU (common.local_gpu_arch):
  Gluon does not run under the interpreter, so nothing else could check it.
  On the H200 `kiln run` picked it on every D = 128 job measured (2k keys
  causal and not, 8k and 16k causal; _with_ws).

Measured on an H200 (causal 4x32x2048x128 bf16, 2026-11-30, every config of the
space): `q_regs` 1.049x the plain 64 x 64 kernel's time, `maxnreg` 128
1.15-1.27x; neither won. Tried for sm_90 with Triton 3.6 (compiles only) and not
offered: `tl.range(..., warp_specialize=True)` (with pointer loads, and with
device-side tensor descriptors at 4 warps, the NVGPUWarpSpecialization pass
aborts; with descriptors at 8 warps it compiles to an ordinary loop, no
warp-specialized partitions); issuing the next block's q @ k^T before the
current softmax (Triton waits for that wgmma right after issuing it, so nothing
overlaps; +30 registers) -- for the same reason two independent half-block
softmax chains per program were not pursued. The schedule Triton cannot
express is written by hand in Gluon in kernels/attention_wgmma.py
(FlashAttention-3's warp-specialised layout): the `ws` configs, 0.89-0.91x
this kernel's best on the anchor case and 0.76-0.82x on longer or non-causal
ones (docs/performance-journal.md, "Attention in Gluon").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common
from . import attention_tiles
from .attention_tiles import tile_order

OPERATORS = ("attention",)

LOG2E = 1.4426950408889634


@common.jit_helper
def _load_block(desc, ptrs, bh, start_n, cols, S, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                STAGE: tl.constexpr, TMA: tl.constexpr):
    """The [BLOCK_N, HEAD_DIM] key (or value) block at start_n: with TMA the
    [1, BLOCK_N, D] box of head bh through its descriptor (rows past S come
    back as zeros), else through the pointers, masked past S in the stages
    that hold a partial block (2 and 4)."""
    if TMA:
        block = desc.load([bh, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
    elif STAGE == 1 or STAGE == 3:
        block = tl.load(ptrs)
    else:
        block = tl.load(ptrs, mask=(cols < S)[:, None], other=0.0)
    return block


@common.jit_helper
def _attn_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, bh, start_m, qk_scale, S,
                offs_m, offs_n, offs_d,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, STAGE: tl.constexpr,
                TMA: tl.constexpr):
    # Key range of this stage.
    if STAGE == 1:    # causal, left of the diagonal band: no mask
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:  # causal, the diagonal band
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    elif STAGE == 3:  # non-causal, full key blocks: no mask
        lo, hi = 0, (S // BLOCK_N) * BLOCK_N
    else:             # non-causal, the last partial key block
        lo, hi = (S // BLOCK_N) * BLOCK_N, S
        lo = tl.multiple_of(lo, BLOCK_N)
    k_ptrs = k_base + (lo + offs_n).to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_base + (lo + offs_n).to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = _load_block(desc_k, k_ptrs, bh, start_n, cols, S, BLOCK_N, HEAD_DIM, STAGE, TMA)
        qk = tl.dot(q, tl.trans(k))
        if STAGE == 2:
            mask = offs_m[:, None] >= cols[None, :]
            qk = qk * qk_scale + tl.where(mask, 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        elif STAGE == 4:
            qk = qk * qk_scale + tl.where((cols < S)[None, :], 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = _load_block(desc_v, v_ptrs, bh, start_n, cols, S, BLOCK_N, HEAD_DIM, STAGE, TMA)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
        k_ptrs += BLOCK_N * HEAD_DIM
        v_ptrs += BLOCK_N * HEAD_DIM
    return acc, l_i, m_i


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, out_ptr, BH, S, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_H: tl.constexpr,
                         HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
                         Q_REGS: tl.constexpr, TMA: tl.constexpr):
    start_m, bh = tile_order(tl.program_id(0), BH, S, BLOCK_M, GROUP_H)

    base = bh.to(tl.int64) * S * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_mask = offs_m < S
    if TMA:
        # Device-side tensor descriptors over [B*H, S, D] (one box per head, so
        # rows past S read as zeros and are not written): the loads and the
        # store go through the TMA unit. They need a global scratch buffer per
        # program for the descriptors (triton.set_allocator; the worker sets one).
        desc_q = tl.make_tensor_descriptor(q_ptr, shape=[BH, S, HEAD_DIM], strides=[S * HEAD_DIM, HEAD_DIM, 1],
                                           block_shape=[1, BLOCK_M, HEAD_DIM])
        desc_k = tl.make_tensor_descriptor(k_ptr, shape=[BH, S, HEAD_DIM], strides=[S * HEAD_DIM, HEAD_DIM, 1],
                                           block_shape=[1, BLOCK_N, HEAD_DIM])
        desc_v = tl.make_tensor_descriptor(v_ptr, shape=[BH, S, HEAD_DIM], strides=[S * HEAD_DIM, HEAD_DIM, 1],
                                           block_shape=[1, BLOCK_N, HEAD_DIM])
        desc_o = tl.make_tensor_descriptor(out_ptr, shape=[BH, S, HEAD_DIM], strides=[S * HEAD_DIM, HEAD_DIM, 1],
                                           block_shape=[1, BLOCK_M, HEAD_DIM])
        q = desc_q.load([bh, start_m * BLOCK_M, 0]).reshape([BLOCK_M, HEAD_DIM])
    else:
        desc_k = k_ptr
        desc_v = v_ptr
        desc_o = out_ptr
        q = tl.load(q_ptr + base + offs_m.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=row_mask[:, None], other=0.0)
    if Q_REGS:
        # An exact no-op (only -0 becomes +0) between the load and the dot: Triton
        # keeps a dot operand that does not come straight from a load in
        # registers, so q @ k^T becomes a register-A wgmma on sm_90 and reads
        # only K from shared memory (a loaded Q is re-read from shared memory by
        # every wgmma: as many bytes as K at BLOCK_N = 64).
        q = (q.to(tl.float32) + 0.0).to(q.dtype)

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
    k_base = k_ptr + base
    v_base = v_ptr + base
    if CAUSAL:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, bh, start_m, qk_scale, S,
                                    offs_m, offs_n, offs_d, BLOCK_M, BLOCK_N, HEAD_DIM, 1, TMA)
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, bh, start_m, qk_scale, S,
                                    offs_m, offs_n, offs_d, BLOCK_M, BLOCK_N, HEAD_DIM, 2, TMA)
    else:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, bh, start_m, qk_scale, S,
                                    offs_m, offs_n, offs_d, BLOCK_M, BLOCK_N, HEAD_DIM, 3, TMA)
        if not EVEN_N:
            acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, bh, start_m, qk_scale, S,
                                        offs_m, offs_n, offs_d, BLOCK_M, BLOCK_N, HEAD_DIM, 4, TMA)
    acc = acc / l_i[:, None]
    if TMA:
        desc_o.store([bh, start_m * BLOCK_M, 0], acc.to(out_ptr.dtype.element_ty).reshape([1, BLOCK_M, HEAD_DIM]))
    else:
        tl.store(out_ptr + base + offs_m.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None])


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_check = checks.operators("attention", OPERATORS, checks.HALF)


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op, dtype)
    B, H, S, D = attention_tiles.check_shape(shape)
    g = common.generator(seed, device)
    return {name: common.randn([B, H, S, D], dtype, seed, device, generator=g) for name in ("q", "k", "v")}


def reference(op, inputs, params):
    _check(op)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    S, D = q.shape[-2], q.shape[-1]
    # The S x S scores of every head at once would take B*H*S*S*4 bytes (8 GiB
    # at 8x16x4096x64), and a dozen workers share one GPU: a few heads at a
    # time, at most ~256 MiB of scores.
    lead = q.shape[:-2]
    qf, kf, vf = (t.reshape(-1, S, D) for t in (q, k, v))
    out = torch.empty_like(qf)
    keep = torch.ones(S, S, dtype=torch.bool, device=q.device).tril() if attention_tiles.causal(params) else None
    step = max(1, (256 << 20) // (S * S * qf.element_size()))
    for i in range(0, qf.shape[0], step):
        scores = (qf[i:i + step] @ kf[i:i + step].transpose(-1, -2)) * attention_tiles.sm_scale(params, D)
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        out[i:i + step] = torch.softmax(scores, dim=-1) @ vf[i:i + step]
    return out.reshape(*lead, S, D)



def eager(op, inputs, params):
    """What a PyTorch user calls for this operator (the confirmation round's
    `eager` baseline): SDPA in the inputs' dtype. `reference` is the checker's
    oracle, chunked to bound its memory, and no baseline."""
    _check(op)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=attention_tiles.causal(params), scale=attention_tiles.sm_scale(params, q.shape[-1]))

def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["q"])


def shared_estimate(config, dtype, D, target) -> int:
    """Estimated shared memory / LDS. NVIDIA: the Q tile plus the K and V tiles
    times num_stages (the pipeline's buffers; Q is a wgmma operand in shared
    memory) -- exactly Triton 3.6's metadata.shared on sm_90. AMD: K and V times
    num_stages - 1 (at least one; Q stays in registers) plus a BLOCK_M x BLOCK_N
    tile for P's layout change -- an upper bound of what gfx942 reports.
    (tests/python/test_attention.py compares both with the compiler.) Not
    named `shared_bytes`: the worker's space hints call shared_bytes(config,
    dtype, target), and this estimate needs the head dim D too."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    e = common.element_bytes(dtype)
    if config.get("ws"):  # attention_wgmma: Q (two tiles' with `pair`), the K and V rings, barriers
        tiles = 2 if config.get("pair") else 1
        return (tiles * bm * D + 2 * bn * D * config["num_stages"]) * e + 512
    if common.is_hip(target):
        return (2 * bn * D * max(1, config["num_stages"] - 1) + bm * bn) * e
    # `tma`: 1 KiB more (the TMA loads' barriers), as Triton 3.6 reports
    return (bm * D + 2 * bn * D * config["num_stages"]) * e + (1024 if config.get("tma") else 0)


def config_space(op, shape, dtype, params, target):
    """BLOCK_M in 64/128 (16/32 for short sequences), BLOCK_N <= BLOCK_M, warps
    4/8 (at most 64 fp32 accumulator values per thread), stages 2..4 on NVIDIA,
    1..2 on AMD; then the AMD knobs; pruned by the shared-memory limit.
    On NVIDIA the shapes that measured best on an H200 (causal, 4x32x2048x128
    bf16: 64 x 64 / 4 warps / 3 stages 0.325-0.344 ms, 128 x 64 / 8 warps 0.350,
    128 x 128 / 8 warps 0.361) come first; on sm_90 (D <= 128) interleaved with
    the q_regs / maxnreg variants (see _nvidia_order). On sm_90 with D = 128,
    where this process has an sm_90 GPU, also the Gluon kernel's `ws` tiles
    (_with_ws)."""
    _check(op, dtype)
    B, H, S, D = attention_tiles.check_shape(shape)
    hip = common.is_hip(target)
    ws = common.warp_size(target)
    limit = common.shared_limit(target)
    p = max(16, triton.next_power_of_2(S))

    # Long sequences: 128 / 64 query rows per program; short ones: what fits.
    bms = [128, 64] if p >= 128 else [p, p // 2] if p >= 32 else [16]
    base = []
    for bm in bms:
        for bn in (128, 64, 32, 16):
            # BLOCK_N divides BLOCK_M (the causal band walks it in BLOCK_N steps);
            # 16-key blocks only for short sequences.
            if bn > bm or bn > p or (bn == 16 and p > 32):
                continue
            for warps in ((8, 4) if bm >= 64 else (4,)):
                if bm * D > warps * ws * 64:  # fp32 accumulator values per thread
                    continue
                for stages in ((2, 1) if hip else (3, 2, 4)):
                    base.append({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_H": 8,
                                 "num_warps": warps, "num_stages": stages})
    if not hip:
        base = _nvidia_order(base, D, common.arch(target) == "sm_90")
        if common.arch(target) == "sm_90" and D == 128 and common.local_gpu_arch() == "sm_90":
            base = _with_ws(base, S)

    def keep(c):
        if shared_estimate(c, dtype, D, target) > limit:
            return False
        if c.get("matrix_instr_nonkdim") == 32 and min(c["BLOCK_M"], c["BLOCK_N"]) < 32:
            return False
        if c.get("kpack") == 2 and D < 64:
            return False
        return True

    return common.expand(base, common.amd_knobs(target, dot=True), keep)


# NVIDIA-only config knobs (lower case, as the row kernels' `programs` / `stream`;
# absent = off): q_regs 1 keeps Q in registers (the Q_REGS constexpr), maxnreg caps
# the registers per thread (a Triton compile option; more programs per SM), ws 1
# runs the warp-specialised Gluon kernel of kernels/attention_wgmma.py instead, and
# pair 1 gives that kernel two query tiles per program.
NV_KNOBS = ("q_regs", "maxnreg", "tma", "ws", "pair")

# The Gluon kernel's tiles (BLOCK_N, stages, pair) at BLOCK_M 128; num_warps 12
# is what runs (two consumer warpgroups and a producer warp, padded), so the
# engine's model counts the right threads. `pair` 1: two query tiles per
# program (attention_wgmma._tile), offered where the query blocks pair up.
WS_TILES = ((128, 2, 0), (128, 2, 1), (128, 3, 0), (64, 3, 0))


def _with_ws(base, S):
    """The sm_90 space with the warp-specialised Gluon kernel's tiles first
    (D = 128, offered only where this process has an sm_90 GPU: nothing else
    can run or check them). Measured on an H200 (2026-12-01, host-side TMA
    descriptors; bench/speed/attention_wgmma.py and `kiln run` over the whole space,
    bench/results/h200-2026-12-01-hostdesc/): the best `ws` tile against the
    plain kernel's best config 0.89x at 2k causal (0.2914 against 0.3270 ms),
    0.83x at 2k non-causal, 0.76x at 8k causal; `pair` won at 2k causal and
    non-causal and at 16k causal, 128 x 128 / 3 stages at 8k. So `pair` leads
    short sequences and comes second on long ones."""
    tiles = [(bn, st, pair) for bn, st, pair in WS_TILES if not pair or attention_tiles.ws_pairs_fit(S)]
    if S < 4096:
        tiles = [t for t in tiles if t[2]] + [t for t in tiles if not t[2]]
    return [ws_config(bn, st, pair) for bn, st, pair in tiles] + base


def ws_config(bn: int, stages: int, pair: int = 0) -> dict:
    """One `ws` config as the space offers it: the Gluon kernel's BLOCK_M 128
    tile with BLOCK_N `bn`, `stages` deep rings, two query tiles per program
    with `pair`."""
    c = {"BLOCK_M": 128, "BLOCK_N": bn, "GROUP_H": 8, "num_warps": 12, "num_stages": stages, "ws": 1}
    if pair:
        c["pair"] = 1
    return c


def _nvidia_order(base, D, sm90):
    """The NVIDIA base configs reordered, the likely-best on an H200 (sm_90,
    D <= 128) first, with the knob variants among them: (BLOCK_M, BLOCK_N, warps,
    stages, knobs). Reasoning, from compiles for sm_90 (causal 4x32x2048x128 bf16,
    Triton 3.6; none of the knob variants has been measured on a GPU yet): the
    measured best, 64 x 64 / 4 warps / 3 stages (177 registers, 112 KiB shared: 2
    programs per SM), first with Q in registers (195 registers, no spills, still 2
    per SM) and then as it is; 64 x 32 with Q in registers (165 registers, 64 KiB:
    3 per SM); 64 x 32 / 2 stages capped at 128 registers (no spills, 48 KiB: 4 per
    SM); 64 x 64 / 2 stages with Q in registers; 128 x 64 / 8 warps (measured 0.350
    ms; 190 registers: 1 program per SM); 128 x 32 / 8 warps / 2 stages capped at
    128 registers (no spills: 2 per SM instead of 1). Not offered: 128 x 64 / 8
    warps capped at 128 (ptxas spills 46 words), 64 x 32 with Q in registers capped
    at 128 (29 words), 128 x 32 / 3 stages capped at 128 (3 words)."""
    preferred = [
        (64, 64, 4, 3, {"q_regs": 1}),
        (64, 64, 4, 3, {}),
        (64, 64, 4, 3, {"tma": 1}),
        (64, 32, 4, 3, {"q_regs": 1}),
        (64, 32, 4, 2, {"maxnreg": 128}),
        (64, 64, 4, 2, {"q_regs": 1}),
        (128, 64, 8, 3, {}),
        (128, 64, 8, 3, {"tma": 1}),
        (128, 32, 8, 2, {"maxnreg": 128}),
        (128, 128, 8, 3, {}),
        (64, 32, 4, 3, {}),
    ]
    if not sm90 or D > 128:
        # the knobs are tuned for sm_90's wgmma (elsewhere Q is a register operand
        # anyway); with D = 256 the register budget has no room for them: the
        # order as before the knobs, the H200's three measured tiles first
        preferred = [(64, 64, 4, 3, {}), (128, 64, 8, 3, {}), (128, 128, 8, 3, {})]
    tiles = {(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"]): c for c in base}
    out = []
    for bm, bn, w, st, knobs in preferred:
        c = tiles.get((bm, bn, w, st))
        if c is not None:
            out.append(dict(c, **knobs))
    return common.dedupe(out + base)


def _grid(shape, config):
    B, H, S, _ = shape
    return (B * H * common.cdiv(S, config["BLOCK_M"]), 1, 1)


def _options(config, backend, shape, params):
    """(options, constexprs) of a config: runtime_options (which leaves the
    NV_KNOBS out), maxnreg an option on cuda only (dropped on the CPU, where the interpreter
    ignores options), q_regs the Q_REGS constexpr."""
    _, _, S, D = shape
    opts, consts = common.runtime_options(config, backend)
    maxnreg = int(config.get("maxnreg", 0) or 0)
    if maxnreg and backend == "cuda":
        opts["maxnreg"] = maxnreg
    consts = dict(consts, HEAD_DIM=D, CAUSAL=attention_tiles.causal(params), EVEN_N=S % consts["BLOCK_N"] == 0,
                  Q_REGS=bool(config.get("q_regs", 0)), TMA=bool(config.get("tma", 0)))
    return opts, consts


def launch(op, inputs, out, config, params):
    _check(op)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    assert all(t.is_contiguous() for t in (q, k, v, out)), "attention: contiguous [B, H, S, D]"
    assert q.shape == k.shape == v.shape == out.shape, "attention: q, k, v, out of one shape"
    B, H, S, D = attention_tiles.check_shape(q.shape)
    _check_config(config)
    if config.get("ws"):
        if common.device_backend(out) != "cuda":
            raise ValueError("attention: the `ws` configs (Gluon, warp-specialised) run on an sm_90 GPU only")
        from . import attention_wgmma
        return attention_wgmma.launch_ws(q, k, v, out, attention_tiles.sm_scale(params, D),
                                         attention_tiles.causal(params), config)
    opts, consts = _options(config, common.device_backend(out), q.shape, params)
    attention_fwd_kernel[_grid(q.shape, config)](q, k, v, out, B * H, S, attention_tiles.sm_scale(params, D),
                                                 **consts, **opts)
    return out


def _check_config(config):
    # The causal band walks BLOCK_M keys in BLOCK_N steps, and the unmasked part
    # ends at start_m * BLOCK_M: BLOCK_N must divide BLOCK_M (else keys past the
    # diagonal leak in; seen on an H200 with 64 x 128).
    if config["BLOCK_M"] % config["BLOCK_N"]:
        raise ValueError("attention: BLOCK_M must be a multiple of BLOCK_N")
    if config.get("ws") and config["BLOCK_M"] != 128:
        raise ValueError("attention: the `ws` configs take BLOCK_M 128 (two warpgroups of 64 query rows)")
    if config.get("pair") and not config.get("ws"):
        raise ValueError("attention: `pair` (two query tiles per program) is a knob of the `ws` configs only")


def compile_spec(op, shape, dtype, params, config, target):
    _check(op, dtype)
    attention_tiles.check_shape(shape)
    _check_config(config)
    if config.get("ws"):
        from . import attention_wgmma
        return attention_wgmma.compile_spec(shape, dtype, attention_tiles.causal(params), config, target)
    opts, consts = _options(config, common.backend(target), shape, params)
    return common.spec(attention_fwd_kernel, attention_tiles.kernel_args(shape, dtype, params), consts, opts,
                       _grid(shape, config), target)


def traffic(op, shape, dtype, params):
    _check(op, dtype)
    B, H, S, D = attention_tiles.check_shape(shape)
    # q, k, v read once, out written once; two GEMMs over the visible (query, key)
    # pairs: S * S, or S * (S + 1) / 2 when causal.
    pairs = S * (S + 1) // 2 if attention_tiles.causal(params) else S * S
    return {"bytes": 4 * B * H * S * D * common.element_bytes(dtype),
            "flops": 4 * B * H * pairs * D}


def hints(op, shape, dtype, params, config, target) -> dict:
    """Per config, for the engine's config model (beside the worker's grid and
    shared-memory hints): `registers`, an estimate per thread. The engine's
    generic formula multiplies the BLOCK_* knobs and says 56 for 64 x 64 on 4
    warps at D = 128, where ptxas reports 177: the fp32 accumulator (BLOCK_M x
    D), the scores (BLOCK_M x BLOCK_N in fp32 and again as the bf16 / fp16 P
    operand), Q when `q_regs` keeps it in registers, and ~65 for addresses,
    the running max / sum and the loop (calibrated on the sm_90 cubins: 177 at
    64 x 64 / 4 warps, 195 with q_regs). With the generic figure the model put
    every 128-row, 8-warp tile ahead of the 64-row ones on wave occupancy,
    which the H200 measured the other way round (docs/performance-journal.md)."""
    _check(op, dtype)
    B, H, S, D = attention_tiles.check_shape(shape)
    if config.get("ws"):
        return {"registers": 168}  # ptxas for the whole kernel (consumers 240, producer 24 by setmaxnreg)
    threads = config["num_warps"] * common.warp_size(target)
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    regs = bm * D / threads + 1.5 * bm * bn / threads + 65
    if config.get("tma"):
        regs -= 35  # no address arithmetic for K / V / Q / O: 142 instead of 177 (sm_90 cubins)
    if config.get("q_regs"):
        regs += bm * D / threads / 4  # bf16 / fp16 pairs: half a register per element, ~half live
    cap = int(config.get("maxnreg") or 255)
    return {"registers": int(min(cap, 255, round(regs)))}
