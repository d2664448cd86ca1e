"""Experiment: the ws kernel with host-side TMA descriptors, and with two query
tiles per program (block i and nblk-1-i of one head: equal causal work, the
second tile's Q prefetched during the first). Timed beside the current kernel."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "worker")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import yaml  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait  # noqa: E402

from kernels import attention, attention_wgmma as aw  # noqa: E402
from kiln_worker.bench import _benchmark  # noqa: E402
from kiln_worker.device import install_scratch_allocator  # noqa: E402


@gluon.jit
def _tile(t, BH, S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr, CAUSAL: gl.constexpr,
          PAIR: gl.constexpr):
    if PAIR:
        num_m = gl.cdiv(S, BLOCK_M)
        npairs = num_m // 2
        per_group = GROUP_H * npairs
        pid = gl.program_id(0)
        group = pid // per_group
        first_bh = group * GROUP_H
        group_size = gl.minimum(BH - first_bh, GROUP_H)
        r = pid - group * per_group
        i = r // group_size
        bh = first_bh + r % group_size
        if t == 0:
            start_m = num_m - 1 - i
        else:
            start_m = i
    else:
        start_m, bh = attention.tile_order(gl.program_id(0), BH, S, BLOCK_M, GROUP_H)
    q_lo = start_m * BLOCK_M
    if CAUSAL:
        n = gl.cdiv(gl.minimum(q_lo + BLOCK_M, S), BLOCK_N)
    else:
        n = gl.cdiv(S, BLOCK_N)
    return bh * S, q_lo, n


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
              BH, S, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
              CAUSAL: gl.constexpr, STAGES: gl.constexpr, T: gl.constexpr):
    HALF: gl.constexpr = BLOCK_M // 2
    g = 0
    for t in gl.static_range(T):
        head_row, q_lo, n = _tile(t, BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, T == 2)
        for i in gl.static_range(2):
            mbarrier.expect(q_bars.index(t * 2 + i), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [head_row + q_lo + i * HALF, 0], q_bars.index(t * 2 + i),
                                            q_smem.index(t * 2 + i))
        for j in range(n):
            gg = g + j
            slot = gg % STAGES
            phase = (gg // STAGES) & 1
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
              HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr, T: gl.constexpr):
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    qk_scale = sm_scale * 1.4426950408889634
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    g = 0
    for t in gl.static_range(T):
        head_row, q_lo, n = _tile(t, BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, T == 2)
        my_lo = q_lo + WG * HALF
        q = q_smem.index(t * 2 + WG)
        m_i = gl.full([HALF], -float("inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.full([HALF], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=o_layout)
        mbarrier.wait(q_bars.index(t * 2 + WG), 0)
        slot0 = g % STAGES
        mbarrier.wait(k_ready.index(slot0), (g // STAGES) & 1)
        s_tok = warpgroup_mma(q, k_ring.index(slot0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s_tok])
        mbarrier.arrive(k_empty.index(slot0), count=1)
        p, alpha, m_i, l_i = aw._softmax_block(s, m_i, l_i, 0, my_lo, S, qk_scale, HALF, BLOCK_N, CAUSAL, s_layout)
        for j in range(0, n - 1):
            gn = g + j + 1
            nslot = gn % STAGES
            mbarrier.wait(k_ready.index(nslot), (gn // STAGES) & 1)
            s_tok = warpgroup_mma(q, k_ring.index(nslot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            acc_tok = aw._pv(acc, alpha, p, v_ring, v_ready, g + j, dtype, STAGES, o_layout, p_layout)
            s = warpgroup_mma_wait(1, deps=[s_tok])
            mbarrier.arrive(k_empty.index(nslot), count=1)
            p, alpha, m_i, l_i = aw._softmax_block(s, m_i, l_i, (j + 1) * BLOCK_N, my_lo, S, qk_scale,
                                                   HALF, BLOCK_N, CAUSAL, s_layout)
            acc = warpgroup_mma_wait(0, deps=[acc_tok])
            mbarrier.arrive(v_empty.index((g + j) % STAGES), count=1)
        acc_tok = aw._pv(acc, alpha, p, v_ring, v_ready, g + n - 1, dtype, STAGES, o_layout, p_layout)
        acc = warpgroup_mma_wait(0, deps=[acc_tok])
        mbarrier.arrive(v_empty.index((g + n - 1) % STAGES), count=1)
        o = (acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)).to(dtype)
        rows = my_lo + gl.arange(0, HALF, layout=gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        offs = (head_row + gl.expand_dims(rows, 1)).to(gl.int64) * HEAD_DIM + gl.expand_dims(cols, 0)
        gl.store(out_ptr + offs, o, mask=gl.expand_dims(rows < S, 1))
        g += n


@gluon.jit
def kernel_hd(q_desc, k_desc, v_desc, out_ptr, BH, S, sm_scale,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_H: gl.constexpr,
              HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr, T: gl.constexpr):
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    q_smem = gl.allocate_shared_memory(dtype, [2 * T, HALF, HEAD_DIM], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2 * T, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * T):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    gl.warp_specialize([
        (_consumer, (0, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty, out_ptr,
                     BH, S, sm_scale, BLOCK_M, BLOCK_N, GROUP_H, HEAD_DIM, CAUSAL, STAGES, T)),
        (_consumer, (1, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty, out_ptr,
                     BH, S, sm_scale, BLOCK_M, BLOCK_N, GROUP_H, HEAD_DIM, CAUSAL, STAGES, T)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bars, k_ready, v_ready, k_empty, v_empty,
                     BH, S, BLOCK_M, BLOCK_N, GROUP_H, CAUSAL, STAGES, T)),
    ], [4, 1], [240, 24])


def launch_hd(q, k, v, out, causal, bn, stages, T, group_h=8):
    B, H, S, D = q.shape
    gdt = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    ql = gl.NVMMASharedLayout.get_default_for([64, D], gdt)
    kl = gl.NVMMASharedLayout.get_default_for([bn, D], gdt)
    qd = TensorDescriptor.from_tensor(q.view(-1, D), [64, D], ql)
    kd = TensorDescriptor.from_tensor(k.view(-1, D), [bn, D], kl)
    vd = TensorDescriptor.from_tensor(v.view(-1, D), [bn, D], kl)
    nblk = triton.cdiv(S, 128)
    if T == 2:
        assert nblk % 2 == 0
        grid = (B * H * nblk // 2,)
    else:
        grid = (B * H * nblk,)
    kernel_hd[grid](qd, kd, vd, out, B * H, S, D ** -0.5, BLOCK_M=128, BLOCK_N=bn, GROUP_H=group_h, HEAD_DIM=D,
                    CAUSAL=causal, STAGES=stages, T=T, num_warps=4)


def main():
    install_scratch_allocator()
    target = yaml.safe_load(open(ROOT / "configs" / "targets" / "H200.yaml"))
    rows = []
    for shape, causal in (([4, 32, 2048, 128], True), ([4, 32, 2048, 128], False), ([1, 32, 8192, 128], True),
                          ([8, 32, 1024, 128], True)):
        p = {"causal": causal}
        inputs = attention.make_inputs("attention", shape, "bf16", p, 1, torch.device("cuda"))
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        out = torch.empty_like(q)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        B, H, S, D = shape
        flops = 4 * B * H * (S * (S + 1) // 2 if causal else S * S) * D
        fns = {"sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
               "plain 64x64": lambda: attention.launch("attention", inputs, out, {"BLOCK_M": 64, "BLOCK_N": 64,
                                                       "GROUP_H": 8, "num_warps": 4, "num_stages": 3}, p),
               "ws dev 128/2": lambda: aw.launch_ws(q, k, v, out, D ** -0.5, causal,
                                                    {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_H": 8, "num_stages": 2})}
        for bn, st in ((128, 2), (128, 3)):
            for T in (1, 2):
                fns[f"hd {bn}/{st} T{T}"] = lambda bn=bn, st=st, T=T: launch_hd(q, k, v, out, causal, bn, st, T)
        for name, fn in fns.items():
            out.fill_(float("nan"))
            try:
                fn()
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001
                print(shape, causal, name, "FAILED", type(exc).__name__, str(exc)[:300], flush=True)
                continue
            err = 0.0 if name == "sdpa" else (out.float() - ref).abs().max().item()
            ms = [_benchmark(fn, 25, 50, "gpu", target)["median_ms"] for _ in range(2)]
            rows.append((shape, causal, name, err, ms, flops / min(ms) / 1e9))
            print(rows[-1], flush=True)
    print("| shape | causal | kernel | err | ms | TFLOP/s |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3g} | {r[4][0]:.4f} / {r[4][1]:.4f} | {r[5]:.0f} |")


if __name__ == "__main__":
    main()
