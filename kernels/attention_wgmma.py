"""Causal / full flash-attention forward for sm_90 in Gluon, warp-specialised
as FlashAttention-3: a producer warp and two consumer warpgroups.

The attention template (kernels/attention.py) owns the contract, the
reference, the inputs and the space; this module is the kernel, its launch and
its compile spec, used through the template's `ws` configs (sm_90, D = 128,
where the worker has an sm_90 GPU). `bench/speed/attention_wgmma.py` checks and
times it alone.

Same contract as kernels/attention.py: contiguous [B, H, S, D] q, k, v, out,
fp16 / bf16, causal or not, exp2 with the scale folded in. Why Gluon: Triton
3.6 waits for each wgmma right after issuing it inside the attention loop and
gives no warp specialisation on sm_90 (kernels/attention.py's docstring);
Gluon exposes async `warpgroup_mma` / `warpgroup_mma_wait`, TMA, mbarriers and
`warp_specialize`, so the schedule below is written by hand.

One program = one tile of BLOCK_M = 128 query rows of one (batch, head), or
with `pair` two (query blocks num_m - 1 - i and i of one head: the same causal
work in every program, the second tile's Q loaded while the first is
computed):

* the producer (1 warp, 24 registers) loads both halves of Q and streams K and
  V through STAGES-deep rings in shared memory with TMA (host-side descriptors
  over the [B*H*S, D] views, made by launch_ws; rows past the end load as
  zeros, and rows of another head that a block reaches past S are masked out
  as keys and never stored as queries). Each slot has a "ready" barrier (TMA
  bytes) and an "empty" one that both consumers arrive on;
* each consumer warpgroup (240 registers) owns 64 query rows and, per key
  block j, issues S[j+1] = Q @ K[j+1]^T and acc = acc * alpha[j] + P[j] @ V[j]
  (async wgmma), waits for S[j+1] only, releases K[j+1]'s slot, runs the
  online softmax of S[j+1] while the tensor cores work on P[j] @ V[j], then
  waits for that and releases V[j]'s slot (FA3's intra-warpgroup overlap).
  Nothing stays in flight across iterations: with S[j+1] in flight over the
  loop's back edge, ptxas serialises every wgmma (C7514). The other
  warpgroup's work fills the tensor cores' gaps;
* keys past the diagonal (causal) or past S are masked to -inf only in the
  blocks that reach them; the output is stored from registers, rows < S.

The descriptors are made on the host (Triton's launcher encodes each
CUtensorMap and passes it by value; `kiln package` lists them as nvTmaDesc
arguments with the compiler's tensordesc_meta). Made on the device, per
program, as this kernel first did, they cost 11% at the anchor shape: one
program per SM (384 threads, 160 KiB of shared memory) and 2048 short
programs, so every program's prologue is exposed.

Measured on one H200 (2026-12-01; bench/speed/attention_wgmma.py and `kiln run` of
jobs/examples/anchors_h200.yaml + attention_h200.yaml,
bench/results/h200-2026-12-01-hostdesc/):

| causal 4x32x2048x128 bf16 | ms |
| --- | ---: |
| SDPA (cuDNN) | 0.2727 (bench) / 0.2765-0.2782 (torch eager in the run) |
| this kernel, device-side descriptors (before) | 0.3316-0.3332 |
| host-side, 128 x 128 / 2 stages | 0.2965-0.2987 |
| host-side, 128 x 128 / 2 stages, pair | 0.2944-0.2961; `kiln run`'s best 0.2914 / 0.2921 |
| the plain Triton kernel's best (64 x 64 / 4 warps / 3 stages) | 0.3269-0.3272 |

So 1.05-1.08x SDPA (the issue's goal: within 10%). Elsewhere, `kiln run`'s
best against torch's SDPA in the same run: 2k non-causal 0.4651 ms (1.09x),
8k causal 0.8753 (0.90x: faster), 16k causal 1.7566 (0.92x).

Tried and measured, not kept (all with device-side descriptors): a
one-warpgroup version with the same overlap and 2 programs per SM (64 x 64:
0.347-0.353 ms; with S[j+1] in flight over the back edge, serialised: 0.43);
ping-pong between the two consumers (each issues its round of wgmma in turn,
mbarrier-ordered): no change; a persistent grid (one program per SM, Q
double-buffered, tiles dealt heaviest first in a snake order): slower
(0.377-0.380); releasing K and V together: slower at 2 stages (0.438).
Nsight Compute (bench/speed/attention_profile.py) against cuDNN's kernel, which is
the same design (132 persistent programs of 384 threads, 168 registers), with
device-side descriptors: tensor pipe active 47% against 64%, and 4.9 cycles
per issued instruction stalled at barriers against 1.8 -- Gluon puts a
`bar.sync` of the warpgroup before each mbarrier wait in a loop and each
arrive; one fewer (K and V released together) was not faster.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

from . import attention_tiles, common


@gluon.jit
def _softmax_block(s, m_i, l_i, start_n, q_lo, S, qk_scale,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                   s_layout: gl.constexpr):
    # Mask only the blocks that reach the diagonal (causal) or the end of the keys.
    reaches = start_n + BLOCK_N > S
    if CAUSAL:
        reaches = reaches | (start_n + BLOCK_N > q_lo + 1)
    if reaches:
        cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols < S, 0)
        if CAUSAL:
            rows = q_lo + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            keep = keep & (gl.expand_dims(rows, 1) >= gl.expand_dims(cols, 0))
        s = gl.where(keep, s, -float("inf"))
    # Block 0 always holds key 0, which every row sees: m_i is finite from then on.
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _pv(acc, alpha, p, v_ring, v_bars, g, dtype: gl.constexpr, STAGES: gl.constexpr,
        o_layout: gl.constexpr, p_layout: gl.constexpr):
    # issue acc = acc * alpha + P @ V[g] (async)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    mbarrier.wait(v_bars.index(g % STAGES), (g // STAGES) & 1)
    return warpgroup_mma(p_op, v_ring.index(g % STAGES), acc, is_async=True)


@gluon.jit
def _tile(t, BH, S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr, CAUSAL: gl.constexpr,
          PAIR: gl.constexpr):
    # Tile t of this program: the first row of its head in the [B*H*S, D] view,
    # its first query row and its number of key blocks. One tile per program in
    # kernels/attention.py's order, or with PAIR two: query blocks
    # num_m - 1 - i and i of one head (the same causal work in every program;
    # the head groups of GROUP_H as tile_order's).
    if PAIR:
        num_m = gl.cdiv(S, BLOCK_M)
        per_group = GROUP_H * (num_m // 2)
        pid = gl.program_id(0)
        group = pid // per_group
        first_bh = group * GROUP_H
        group_size = gl.minimum(BH - first_bh, GROUP_H)
        r = pid - group * per_group
        bh = first_bh + r % group_size
        if t == 0:
            start_m = num_m - 1 - r // group_size
        else:
            start_m = r // group_size
    else:
        start_m, bh = attention_tiles.tile_order(gl.program_id(0), BH, S, BLOCK_M, GROUP_H)
    q_lo = start_m * BLOCK_M
    if CAUSAL:
        n = gl.cdiv(gl.minimum(q_lo + BLOCK_M, S), BLOCK_N)
    else:
        n = gl.cdiv(S, BLOCK_N)
    return bh * S, q_lo, n


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
              BH, S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
              CAUSAL: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr):
    HALF: gl.constexpr = BLOCK_M // 2
    g = 0  # key blocks streamed so far: the rings' position
    for t in range(TILES):
        head_row, q_lo, n = _tile(t, BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, TILES == 2)
        # both halves of the tile's Q (a second tile's while the first is computed)
        for i in gl.static_range(2):
            mbarrier.expect(q_bars.index(t * 2 + i), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [head_row + q_lo + i * HALF, 0], q_bars.index(t * 2 + i),
                                            q_smem.index(t * 2 + i))
        for j in range(n):
            slot = (g + j) % STAGES
            phase = ((g + j) // STAGES) & 1
            # a slot is free when both consumers released it (a fresh barrier's
            # "previous phase" counts as complete: the first pass does not wait)
            mbarrier.wait(k_empty.index(slot), phase ^ 1)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [head_row + j * BLOCK_N, 0], k_ready.index(slot),
                                            k_ring.index(slot))
            mbarrier.wait(v_empty.index(slot), phase ^ 1)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [head_row + j * BLOCK_N, 0], v_ready.index(slot),
                                            v_ring.index(slot))
        g += n


@gluon.jit
def _consumer(WG: gl.constexpr, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
              out_ptr, BH, S, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
              HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr):
    # One warpgroup, query rows WG * BLOCK_M / 2 .. of each tile (module docstring).
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    qk_scale = sm_scale * 1.4426950408889634
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    g = 0  # the rings' position, as the producer's
    for t in range(TILES):
        head_row, q_lo, n = _tile(t, BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, TILES == 2)
        my_lo = q_lo + WG * HALF
        q = q_smem.index(t * 2 + WG)
        m_i = gl.full([HALF], -float("inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.full([HALF], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=o_layout)

        mbarrier.wait(q_bars.index(t * 2 + WG), 0)
        first = g % STAGES
        mbarrier.wait(k_ready.index(first), (g // STAGES) & 1)
        s_tok = warpgroup_mma(q, k_ring.index(first).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s_tok])
        mbarrier.arrive(k_empty.index(first), count=1)
        p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, my_lo, S, qk_scale, HALF, BLOCK_N, CAUSAL, s_layout)
        for j in range(0, n - 1):
            nxt = g + j + 1
            mbarrier.wait(k_ready.index(nxt % STAGES), (nxt // STAGES) & 1)
            s_tok = warpgroup_mma(q, k_ring.index(nxt % STAGES).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            acc_tok = _pv(acc, alpha, p, v_ring, v_ready, g + j, dtype, STAGES, o_layout, p_layout)
            s = warpgroup_mma_wait(1, deps=[s_tok])
            mbarrier.arrive(k_empty.index(nxt % STAGES), count=1)
            p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, (j + 1) * BLOCK_N, my_lo, S, qk_scale,
                                                HALF, BLOCK_N, CAUSAL, s_layout)
            acc = warpgroup_mma_wait(0, deps=[acc_tok])
            mbarrier.arrive(v_empty.index((g + j) % STAGES), count=1)
        acc_tok = _pv(acc, alpha, p, v_ring, v_ready, g + n - 1, dtype, STAGES, o_layout, p_layout)
        acc = warpgroup_mma_wait(0, deps=[acc_tok])
        mbarrier.arrive(v_empty.index((g + n - 1) % STAGES), count=1)

        o = (acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)).to(dtype)
        rows = my_lo + gl.arange(0, HALF, layout=gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        offs = (head_row + gl.expand_dims(rows, 1)).to(gl.int64) * HEAD_DIM + gl.expand_dims(cols, 0)
        gl.store(out_ptr + offs, o, mask=gl.expand_dims(rows < S, 1))
        g += n


@gluon.jit
def attention_fwd_ws_kernel(q_desc, k_desc, v_desc, out_ptr, BH, S, sm_scale,
                            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
                            HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                            TILES: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    q_smem = gl.allocate_shared_memory(dtype, [2 * TILES, HALF, HEAD_DIM], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2 * TILES, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * TILES):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # both consumers release a slot
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize([
        (_consumer, (0, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty, out_ptr,
                     BH, S, sm_scale, BLOCK_M, BLOCK_N, GROUP_H, HEAD_DIM, CAUSAL, STAGES, TILES)),
        (_consumer, (1, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty, out_ptr,
                     BH, S, sm_scale, BLOCK_M, BLOCK_N, GROUP_H, HEAD_DIM, CAUSAL, STAGES, TILES)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
                     BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, STAGES, TILES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def _constexprs(D: int, causal: bool, config: dict) -> dict:
    """The kernel's constexprs for a config: BLOCK_M 128 (two warpgroups of 64
    rows, the least a wgmma takes), BLOCK_N, GROUP_H, num_stages, TILES 2 with
    `pair` (else 1); optional producer_regs / consumer_regs (setmaxnreg; 24 /
    240 by default: 240 keeps the consumers free of spills at 128 x 128,
    D = 128)."""
    if config["BLOCK_M"] != 128:
        raise ValueError("attention_wgmma: BLOCK_M must be 128 (two warpgroups of 64 query rows)")
    return dict(BLOCK_M=128, BLOCK_N=config["BLOCK_N"], GROUP_H=config["GROUP_H"], HEAD_DIM=D, CAUSAL=causal,
                STAGES=config["num_stages"], TILES=2 if config.get("pair") else 1,
                PRODUCER_REGS=config.get("producer_regs", 24), CONSUMER_REGS=config.get("consumer_regs", 240))


def _grid(shape, config) -> tuple:
    B, H, S, _ = shape
    tiles = B * H * triton.cdiv(S, 128)
    if config.get("pair"):
        if not attention_tiles.ws_pairs_fit(S):
            raise ValueError(f"attention_wgmma: `pair` needs an even number of 128-row query blocks (S = {S})")
        return (tiles // 2, )
    return (tiles, )


def _layouts(dtype: str, D: int, config: dict):
    """The shared-memory layouts of the Q box (64 rows: one warpgroup's half)
    and the K / V boxes (BLOCK_N rows) -- the TMA descriptors' and the rings'."""
    el = {"fp16": gl.float16, "bf16": gl.bfloat16}[dtype]
    return (gl.NVMMASharedLayout.get_default_for([64, D], el),
            gl.NVMMASharedLayout.get_default_for([config["BLOCK_N"], D], el))


def _descriptors(q, k, v, dtype: str, config: dict):
    """Host-side TMA descriptors over the [B*H*S, D] views of q, k and v (rows
    past the end load as zeros)."""
    D = q.shape[-1]
    ql, kl = _layouts(dtype, D, config)
    bn = config["BLOCK_N"]
    return (TensorDescriptor.from_tensor(q.view(-1, D), [64, D], ql),
            TensorDescriptor.from_tensor(k.view(-1, D), [bn, D], kl),
            TensorDescriptor.from_tensor(v.view(-1, D), [bn, D], kl))


def launch_ws(q, k, v, out, sm_scale: float, causal: bool, config: dict):
    """out = attention(q, k, v) on an sm_90 GPU."""
    B, H, S, D = q.shape
    dtype = common.dtype_name(q.dtype)
    attention_fwd_ws_kernel[_grid(q.shape, config)](*_descriptors(q, k, v, dtype, config), out, B * H, S, sm_scale,
                                                    **_constexprs(D, causal, config), num_warps=4)
    return out


def compile_spec(shape, dtype: str, causal: bool, config: dict, target: dict) -> dict:
    """The `common.spec` of one config (for cross-compiling, as the templates'
    compile_spec): sm_90 targets only. The descriptors' argument types are the
    JIT's for the descriptors launch_ws makes (over a meta tensor: no memory)."""
    if common.is_hip(target) or common.arch(target) != "sm_90":
        raise ValueError("attention_wgmma: sm_90 (wgmma, TMA, setmaxnreg) only")
    B, H, S, D = shape
    rows = torch.empty(B * H * S, D, dtype=common.torch_dtype(dtype), device="meta")
    descs = _descriptors(rows, rows, rows, dtype, config)
    args = [(name, mangle_type(d), None) for name, d in zip(("q_desc", "k_desc", "v_desc"), descs)]
    args += attention_tiles.kernel_args(shape, dtype, {"causal": causal})[3:]  # out_ptr, BH, S, sm_scale
    return common.spec(attention_fwd_ws_kernel, args, _constexprs(D, causal, config), {"num_warps": 4},
                       _grid(shape, config), target)
