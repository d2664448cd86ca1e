"""GEMM: C[M, N] = A[M, K] @ B[K, N], fp16 / bf16 inputs, fp32 accumulation.

The classic Triton tiled GEMM (as in the Triton matmul tutorial): each program
computes a BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K steps with `tl.dot`.
Programs are ordered in GROUP_M-row super-groups so that neighbouring programs
reuse the same A rows and B columns from L2.

A, B and C are contiguous row-major, so the strides are K, N and N (not passed as
arguments: a unit stride must be known at compile time for vectorised loads, and
Kiln compiles one kernel per shape anyway). EVEN_K (K % BLOCK_K == 0) drops the
K-mask from the inner loop.

On AMD the config may also carry `matrix_instr_nonkdim` (16 / 32: MFMA tile),
`kpack` (1 / 2) and `waves_per_eu` (occupancy hint); they are compile options,
not kernel arguments.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import common

OPERATORS = ("matmul",)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    # Map the 1-D program id to a (pid_m, pid_n) tile, GROUP_M tile-rows at a time.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Out-of-range rows / columns are wrapped (modulo) rather than masked: they load
    # valid memory and their results are dropped by the store mask.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m.to(tl.int64)[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k.to(tl.int64)[:, None] * N + offs_n[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_mask = offs_k < K - k
            a = tl.load(a_ptrs, mask=k_mask[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_mask[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

def _check(op, dtype=None):
    if op not in OPERATORS:
        raise ValueError(f"matmul: unknown operator {op!r}")
    if dtype is not None and dtype not in ("fp16", "bf16"):
        raise ValueError(f"matmul: dtype must be fp16 or bf16, not {dtype!r}")


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op, dtype)
    M, N, K = shape
    g = common.generator(seed)
    return {"a": common.randn([M, K], dtype, seed, device, generator=g),
            "b": common.randn([K, N], dtype, seed, device, generator=g)}


def reference(op, inputs, params):
    _check(op)
    return inputs["a"] @ inputs["b"]


def output_like(op, inputs, params):
    _check(op)
    a, b = inputs["a"], inputs["b"]
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def _tile_sizes(dim, large):
    """Candidate block sizes along one dim: `large`, plus the smaller 16 / 32 only
    when the dim itself is small; nothing much bigger than the dim."""
    p = triton.next_power_of_2(max(int(dim), 1))
    sizes = [s for s in large if s <= max(large[0], p)]
    if p < large[0]:
        sizes = [s for s in (16, 32) if s <= max(16, p)] + sizes[:1]
    return sizes


def shared_bytes(config, dtype, target) -> int:
    """Estimated shared memory / LDS: A and B tiles times the buffers the software
    pipeline keeps: num_stages on NVIDIA, num_stages - 1 on AMD (the stream
    pipeliner keeps one stage in registers). Matches Triton 3.6's metadata.shared
    for this kernel on gfx942 and sm_90."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    stages = config["num_stages"] - 1 if common.is_hip(target) else config["num_stages"]
    e = common.element_bytes(dtype)
    # The epilogue may also stage the BLOCK_M x BLOCK_N result through shared
    # memory to change layout for the store (seen for fp32 on sm_90 / gfx1100).
    return max((bm * bk + bk * bn) * e * max(1, stages), bm * bn * e)


def config_space(op, shape, dtype, params, target):
    """Tiles x warps x stages, then the AMD knobs (slowest varying), pruned by
    the target's shared-memory limit."""
    _check(op, dtype)
    M, N, K = shape
    hip = common.is_hip(target)
    limit = common.shared_limit(target)

    base = []
    for bm in _tile_sizes(M, [64, 128, 256]):
        for bn in _tile_sizes(N, [64, 128, 256]):
            if bm * bn > 256 * 128:
                continue
            for bk in _tile_sizes(K, [32, 64]):
                # 8 warps only pay off on large tiles; tiny tiles get 2 or 4.
                if bm * bn >= 128 * 128:
                    warps_list = [4, 8]
                elif bm * bn >= 64 * 64:
                    warps_list = [4]
                else:
                    warps_list = [2, 4]
                for warps in warps_list:
                    for stages in ([2] if hip else [3, 4]):
                        base.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                                     "num_warps": warps, "num_stages": stages})

    def keep(c):
        if shared_bytes(c, dtype, target) > limit:
            return False
        # a 32x32 MFMA needs at least 32 rows and columns per tile
        if c.get("matrix_instr_nonkdim") == 32 and min(c["BLOCK_M"], c["BLOCK_N"]) < 32:
            return False
        # kpack=2 packs two K-steps into one MFMA operand: wants BLOCK_K >= 64
        if c.get("kpack") == 2 and c["BLOCK_K"] < 64:
            return False
        return True

    return common.expand(base, common.amd_knobs(target, dot=True), keep)


def _grid(shape, config):
    M, N, _ = shape
    return (common.cdiv(M, config["BLOCK_M"]) * common.cdiv(N, config["BLOCK_N"]), 1, 1)


def _constexprs(consts, K):
    consts = dict(consts)
    consts["EVEN_K"] = K % consts["BLOCK_K"] == 0
    return consts


def launch(op, inputs, out, config, params):
    _check(op)
    a, b = inputs["a"], inputs["b"]
    assert a.is_contiguous() and b.is_contiguous() and out.is_contiguous(), "matmul: row-major inputs"
    M, K = a.shape
    N = b.shape[1]
    opts, consts = common.runtime_options(config, common.device_backend(out))
    matmul_kernel[_grid((M, N, K), config)](a, b, out, M, N, K, **_constexprs(consts, K), **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op, dtype)
    M, N, K = shape
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    args = [("a_ptr", ptr, None), ("b_ptr", ptr, None), ("c_ptr", ptr, None),
            ("M", "i32", M), ("N", "i32", N), ("K", "i32", K)]
    return common.spec(matmul_kernel, args, _constexprs(consts, K), opts, _grid(shape, config))


def traffic(op, shape, dtype, params):
    _check(op, dtype)
    M, N, K = shape
    return {"bytes": (M * K + K * N + M * N) * common.element_bytes(dtype), "flops": 2 * M * N * K}
