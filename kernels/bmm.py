"""Batched and transposed matmul, read through strides, fp32 / fp16 / bf16:

    bmm: C[b] = opA(A[b]) @ opB(B[b]),  C [batch, M, N]

with opA(A) = A ([M, K] stored) or A^T (`trans_a`: A stored [K, M]) and likewise
opB(B) = B ([K, N]) or B^T (`trans_b`: B stored [N, K]). A transposed operand
is read in place through its strides (the stored tensor is the caller's: no
copy), with the unit stride a compile-time fact (TRANS_A / TRANS_B
constexprs), so loads stay vectorised along whichever dim is contiguous.
batch 1 is a plain matmul (an fp32 one, or `a @ b.t()`); N = 1 a
matrix-vector product.

Each program computes a BLOCK_M x BLOCK_N tile of one batch's C (grid: tiles
x batch), walking K in BLOCK_K steps with `tl.dot`, tiles ordered in GROUP_M
super-rows and K steps loaded by matmul.py's helpers (tile_coords,
load_k_step). fp32 inputs multiply in IEEE fp32 (`tl.dot(...,
input_precision="ieee")`), so results meet fp32 tolerances (no TF32); half
inputs use the tensor cores as usual; accumulation is fp32 either way.
AMD knobs: waves_per_eu; for half inputs also matrix_instr_nonkdim and kpack.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common
from . import matmul as _matmul

OPERATORS = ("bmm",)


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    tile = tl.program_id(0)
    bat = tl.program_id(1).to(tl.int64)
    pid_m, pid_n = _matmul.tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    a_base = a_ptr + bat * M * K
    b_base = b_ptr + bat * K * N
    offs_m = ((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    offs_n = ((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    if TRANS_A:
        a_ptrs = a_base + offs_k[None, :] * M + offs_m[:, None]
    else:
        a_ptrs = a_base + offs_m[:, None] * K + offs_k[None, :]
    if TRANS_B:
        b_ptrs = b_base + offs_n[None, :] * K + offs_k[:, None]
    else:
        b_ptrs = b_base + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a, b = _matmul.load_k_step(a_ptrs, b_ptrs, offs_k, k, K, EVEN_K)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        if TRANS_A:
            a_ptrs += BLOCK_K * M
        else:
            a_ptrs += BLOCK_K
        if TRANS_B:
            b_ptrs += BLOCK_K
        else:
            b_ptrs += BLOCK_K * N
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + bat * M * N + rows.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


_check = checks.operators("bmm", OPERATORS)


def _flags(params):
    p = params or {}
    return bool(p.get("trans_a", False)), bool(p.get("trans_b", False))


def _a_shape(shape, params):
    bt, M, N, K = shape
    return [bt, K, M] if _flags(params)[0] else [bt, M, K]


def _b_shape(shape, params):
    bt, M, N, K = shape
    return [bt, N, K] if _flags(params)[1] else [bt, K, N]


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    g = common.generator(seed, device)
    K = shape[3]
    return {"a": common.randn(_a_shape(shape, params), dtype, seed, device, generator=g),
            "b": common.randn(_b_shape(shape, params), dtype, seed, device, generator=g, scale=K ** -0.5)}


def reference(op, inputs, params):
    _check(op)
    ta, tb = _flags(params)
    a = inputs["a"].transpose(-1, -2) if ta else inputs["a"]
    b = inputs["b"].transpose(-1, -2) if tb else inputs["b"]
    return torch.bmm(a, b)


def output_like(op, inputs, params):
    _check(op)
    ta, tb = _flags(params)
    a, b = inputs["a"], inputs["b"]
    M = a.shape[2] if ta else a.shape[1]
    N = b.shape[1] if tb else b.shape[2]
    return torch.empty((a.shape[0], M, N), dtype=a.dtype, device=a.device)


_TILES = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 128, 32, 4, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (64, 64, 32, 4, 4),
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3), (64, 64, 64, 4, 3),
    (32, 64, 32, 4, 4), (64, 32, 32, 4, 4), (32, 32, 32, 2, 3), (16, 64, 64, 2, 3), (64, 16, 64, 2, 3),
]


def config_space(op, shape, dtype, params, target):
    """The tiles of _TILES shrunk to the problem (each block at most the dim
    padded to a power of two, at least 16), fp32 with BLOCK_K <= 32 (twice
    the bytes per element), dropped when the pipeline's buffers
    ((BLOCK_M + BLOCK_N) x BLOCK_K x stages) exceed the target's shared
    memory; GROUP_M 8; then the AMD knobs (matrix-core knobs for half inputs)."""
    _check(op)
    bt, M, N, K = shape
    e = common.element_bytes(dtype)
    cap = lambda v: max(16, triton.next_power_of_2(v))  # noqa: E731
    base = []
    for bm, bn, bk, w, s in _TILES:
        if dtype == "fp32" and bk > 32:
            bk = 32
        bm, bn, bk = min(bm, cap(M)), min(bn, cap(N)), min(bk, cap(K))
        if (bm + bn) * bk * e * s > common.shared_limit(target):
            continue
        w = max(1, min(w, bm * bn // 256))
        w = 1 << (w.bit_length() - 1)
        base.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w, "num_stages": s})
    return common.expand(common.dedupe(base), common.amd_knobs(target, dot=dtype != "fp32"))


def _consts(shape, dtype, params, config, backend):
    opts, consts = common.runtime_options(config, backend)
    ta, tb = _flags(params)
    consts.update(TRANS_A=ta, TRANS_B=tb, EVEN_K=shape[3] % config["BLOCK_K"] == 0, IEEE=dtype == "fp32")
    return opts, consts


def _grid(shape, config):
    bt, M, N, K = shape
    return (common.cdiv(M, config["BLOCK_M"]) * common.cdiv(N, config["BLOCK_N"]), bt, 1)


def launch(op, inputs, out, config, params):
    _check(op)
    a, b = inputs["a"], inputs["b"]
    bt, M, N = out.shape
    K = a.shape[1] if _flags(params)[0] else a.shape[2]
    shape = [bt, M, N, K]
    opts, consts = _consts(shape, common.dtype_name(a.dtype), params, config, common.device_backend(out))
    bmm_kernel[_grid(shape, config)](a, b, out, M, N, K, **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    bt, M, N, K = shape
    opts, consts = _consts(shape, dtype, params, config, common.backend(target))
    ptr = common.pointer_type(dtype)
    e = common.element_bytes(dtype)
    args = [("a_ptr", ptr, bt * M * K * e), ("b_ptr", ptr, bt * K * N * e), ("c_ptr", ptr, bt * M * N * e),
            ("M", "i32", M), ("N", "i32", N), ("K", "i32", K)]
    return common.spec(bmm_kernel, args, consts, opts, _grid(shape, config), target)


def traffic(op, shape, dtype, params):
    _check(op)
    bt, M, N, K = shape
    e = common.element_bytes(dtype)
    return {"bytes": bt * (M * K + K * N + M * N) * e, "flops": 2 * bt * M * N * K}
