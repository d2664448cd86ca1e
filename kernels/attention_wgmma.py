"""Causal / full flash-attention forward for sm_90 in Gluon, warp-specialised
as FlashAttention-3: a producer warp and two consumer warpgroups.

The attention template (kernels/attention.py) owns the contract, the
reference, the inputs and the space; this module is the kernel, its launch and
its compile spec, used through the template's `ws` configs (sm_90, D = 128,
where the worker has an sm_90 GPU). `bench/attention_wgmma.py` checks and
times it alone.

Same contract as kernels/attention.py: contiguous [B, H, S, D] q, k, v, out,
fp16 / bf16, causal or not, exp2 with the scale folded in. Why Gluon: Triton
3.6 waits for each wgmma right after issuing it inside the attention loop and
gives no warp specialisation on sm_90 (kernels/attention.py's docstring);
Gluon exposes async `warpgroup_mma` / `warpgroup_mma_wait`, TMA, mbarriers and
`warp_specialize`, so the schedule below is written by hand.

One program = one tile of BLOCK_M = 128 query rows of one (batch, head):

* the producer (1 warp, 24 registers) loads both halves of Q once and streams
  K and V through STAGES-deep rings in shared memory with TMA (device-side
  descriptors over the [B*H*S, D] views, so the kernel takes plain pointers;
  rows of another head that a block reaches past S are masked out as keys and
  never stored as queries). Each slot has a "ready" barrier (TMA bytes) and
  an "empty" one that both consumers arrive on;
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

Measured on one H200 (causal 4x32x2048x128 bf16, bench/attention_wgmma.py,
2026-12-01): 128 x 128 / 2 stages 0.328-0.334 ms in three runs, the plain
Triton kernel's best (64 x 64 / 4 warps / 3 stages) 0.325-0.326, SDPA (cuDNN)
0.270-0.272. Tried and measured, not kept: a one-warpgroup version with the
same overlap and 2 programs per SM (64 x 64: 0.347-0.353 ms; with S[j+1] in
flight over the back edge, serialised: 0.43); ping-pong between the two
consumers (each issues its round of wgmma in turn, mbarrier-ordered): no
change (0.3344 against 0.3336); a persistent grid (one program per SM, Q
double-buffered, tiles dealt heaviest first in a snake order): slower
(0.377-0.380); releasing K and V together: slower at 2 stages (0.438).
Nsight Compute (bench/attention_profile.py) against cuDNN's kernel, which is
the same design (132 persistent programs of 384 threads, 168 registers):
tensor pipe active 47% against 64%, and 4.9 cycles per issued instruction
stalled at barriers against 1.8 -- Gluon puts a `bar.sync` of the warpgroup
before each mbarrier wait in a loop and each arrive (three per key block per
warpgroup); one fewer (K and V released together) was not faster, so whether
they are the cause is not settled.

On longer sequences it wins: `kiln run` of jobs/examples/attention_h200.yaml
picked it at S 8k / 16k causal (0.899 / 1.748 ms, 0.80x the plain kernel's
best; level with SDPA at 8k, 5-7% faster at 16k) and 2k non-causal (0.91x the
plain kernel), so
kernels/attention.py offers its tiles as the sm_90 space's `ws` configs.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from . import attention, common


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
def _ws_tile(BH, S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr, CAUSAL: gl.constexpr):
    # the tile's query block and head in kernels/attention.py's order; returns
    # the first row of the head in the [B*H*S, D] view, the tile's first query
    # row and its number of key blocks
    start_m, bh = attention.tile_order(gl.program_id(0), BH, S, BLOCK_M, GROUP_H)
    q_lo = start_m * BLOCK_M
    if CAUSAL:
        n = gl.cdiv(gl.minimum(q_lo + BLOCK_M, S), BLOCK_N)
    else:
        n = gl.cdiv(S, BLOCK_N)
    return bh * S, q_lo, n


@gluon.jit
def _ws_producer(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
                 BH, S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
                 CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    head_row, q_lo, n = _ws_tile(BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL)
    HALF: gl.constexpr = BLOCK_M // 2
    for i in gl.static_range(2):
        mbarrier.expect(q_bars.index(i), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [head_row + q_lo + i * HALF, 0], q_bars.index(i), q_smem.index(i))
    for j in range(n):
        slot = j % STAGES
        phase = (j // STAGES) & 1
        # a slot is free when both consumers released it (a fresh barrier's
        # "previous phase" counts as complete: the first pass does not wait)
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [head_row + j * BLOCK_N, 0], k_ready.index(slot), k_ring.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [head_row + j * BLOCK_N, 0], v_ready.index(slot), v_ring.index(slot))


@gluon.jit
def _ws_consumer(WG: gl.constexpr, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
                 out_ptr, BH, S, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
                 HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    # One warpgroup, query rows WG * BLOCK_M / 2 .. of the tile (module docstring).
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    head_row, q_lo, n = _ws_tile(BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL)
    my_lo = q_lo + WG * HALF
    q = q_smem.index(WG)

    qk_scale = sm_scale * 1.4426950408889634
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    m_i = gl.full([HALF], -float("inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([HALF], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=o_layout)

    mbarrier.wait(q_bars.index(WG), 0)
    mbarrier.wait(k_ready.index(0), 0)
    s_tok = warpgroup_mma(q, k_ring.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=[s_tok])
    mbarrier.arrive(k_empty.index(0), count=1)
    p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, my_lo, S, qk_scale, HALF, BLOCK_N, CAUSAL, s_layout)
    for j in range(0, n - 1):
        nslot = (j + 1) % STAGES
        mbarrier.wait(k_ready.index(nslot), ((j + 1) // STAGES) & 1)
        s_tok = warpgroup_mma(q, k_ring.index(nslot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        acc_tok = _pv(acc, alpha, p, v_ring, v_ready, j, dtype, STAGES, o_layout, p_layout)
        s = warpgroup_mma_wait(1, deps=[s_tok])
        mbarrier.arrive(k_empty.index(nslot), count=1)
        p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, (j + 1) * BLOCK_N, my_lo, S, qk_scale,
                                            HALF, BLOCK_N, CAUSAL, s_layout)
        acc = warpgroup_mma_wait(0, deps=[acc_tok])
        mbarrier.arrive(v_empty.index(j % STAGES), count=1)
    acc_tok = _pv(acc, alpha, p, v_ring, v_ready, n - 1, dtype, STAGES, o_layout, p_layout)
    acc = warpgroup_mma_wait(0, deps=[acc_tok])
    mbarrier.arrive(v_empty.index((n - 1) % STAGES), count=1)

    o = (acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)).to(dtype)
    rows = my_lo + gl.arange(0, HALF, layout=gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    offs = (head_row + gl.expand_dims(rows, 1)).to(gl.int64) * HEAD_DIM + gl.expand_dims(cols, 0)
    gl.store(out_ptr + offs, o, mask=gl.expand_dims(rows < S, 1))


@gluon.jit
def attention_fwd_ws_kernel(q_ptr, k_ptr, v_ptr, out_ptr, BH, S, sm_scale,
                            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
                            HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                            PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, HEAD_DIM], dtype)
    kv_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
    rows_total = BH * S
    q_desc = tma.make_tensor_descriptor(q_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                        block_shape=[HALF, HEAD_DIM], layout=q_smem_layout)
    k_desc = tma.make_tensor_descriptor(k_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                        block_shape=[BLOCK_N, HEAD_DIM], layout=kv_smem_layout)
    v_desc = tma.make_tensor_descriptor(v_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                        block_shape=[BLOCK_N, HEAD_DIM], layout=kv_smem_layout)
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], q_smem_layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_smem_layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_smem_layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # both consumers release a slot
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize([
        (_ws_consumer, (0, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty, out_ptr,
                        BH, S, sm_scale, BLOCK_M, BLOCK_N, GROUP_H, HEAD_DIM, CAUSAL, STAGES)),
        (_ws_consumer, (1, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty, out_ptr,
                        BH, S, sm_scale, BLOCK_M, BLOCK_N, GROUP_H, HEAD_DIM, CAUSAL, STAGES)),
        (_ws_producer, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
                        BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def _constexprs(D: int, causal: bool, config: dict) -> dict:
    """The kernel's constexprs for a config: BLOCK_M 128 (two warpgroups of 64
    rows, the least a wgmma takes), BLOCK_N, GROUP_H, num_stages; optional
    producer_regs / consumer_regs (setmaxnreg; 24 / 240 by default: 240 keeps
    the consumers free of spills at 128 x 128, D = 128)."""
    if config["BLOCK_M"] != 128:
        raise ValueError("attention_wgmma: BLOCK_M must be 128 (two warpgroups of 64 query rows)")
    return dict(BLOCK_M=128, BLOCK_N=config["BLOCK_N"], GROUP_H=config["GROUP_H"], HEAD_DIM=D, CAUSAL=causal,
                STAGES=config["num_stages"], PRODUCER_REGS=config.get("producer_regs", 24),
                CONSUMER_REGS=config.get("consumer_regs", 240))


def _grid(shape) -> tuple:
    B, H, S, _ = shape
    return (B * H * triton.cdiv(S, 128), )


def launch_ws(q, k, v, out, sm_scale: float, causal: bool, config: dict):
    """out = attention(q, k, v) on an sm_90 GPU (the worker's scratch allocator,
    or another triton.set_allocator, must be installed: device-side descriptors)."""
    B, H, S, D = q.shape
    attention_fwd_ws_kernel[_grid(q.shape)](q, k, v, out, B * H, S, sm_scale, **_constexprs(D, causal, config),
                                            num_warps=4)
    return out


def compile_spec(shape, dtype: str, causal: bool, config: dict, target: dict) -> dict:
    """The `common.spec` of one config (for cross-compiling, as the templates'
    compile_spec): sm_90 targets only."""
    if common.is_hip(target) or common.arch(target) != "sm_90":
        raise ValueError("attention_wgmma: sm_90 (wgmma, TMA, setmaxnreg) only")
    args = attention.kernel_args(shape, dtype, {"causal": causal})
    return common.spec(attention_fwd_ws_kernel, args, _constexprs(shape[3], causal, config), {"num_warps": 4},
                       _grid(shape), target)
