"""Batched and transposed matmul, read through strides, fp32 / fp16 / bf16:

    bmm: C[b] = opA(A[b]) @ opB(B[b]),  C [batch, M, N]

with opA(A) = A ([M, K] stored) or A^T (`trans_a`: A stored [K, M]) and likewise
opB(B) = B ([K, N]) or B^T (`trans_b`: B stored [N, K]). A transposed operand
is read in place through its strides (the stored tensor is the caller's: no
copy), with the unit stride a compile-time fact (TRANS_A / TRANS_B
constexprs), so loads stay vectorised along whichever dim is contiguous.
batch 1 is a plain matmul (an fp32 one, or `a @ b.t()`); N = 1 a
matrix-vector product.

Two kernels, picked by the config:

* `bmm_kernel` (configs with BLOCK_N): each program computes a BLOCK_M x
  BLOCK_N tile of one batch's C (grid: tiles x SPLIT_K, batch), walking K in
  BLOCK_K steps with `tl.dot`, tiles ordered in GROUP_M super-rows and K steps
  loaded by matmul.py's helpers (tile_coords, load_k_step). fp32 inputs
  multiply in IEEE fp32 (`tl.dot(..., input_precision="ieee")`), so results
  meet fp32 tolerances (no TF32); half inputs use the tensor cores as usual;
  accumulation is fp32 either way.
* `bmv_kernel` (configs with `gemv: 1`; only where N == 1 or M == 1): a
  matrix-vector product without tl.dot, so nothing is padded to tl.dot's 16
  columns. The output of one batch is R = M * N values (the other dim is 1);
  the matrix is A when N == 1 (MAT_A) and B^T when M == 1, stored [R, K] (K
  contiguous) or [K, R] (R contiguous: MAT_T, for trans_a resp. not trans_b);
  the vector, B resp. A, is K contiguous values whatever the flags say. Each
  program takes BLOCK_M outputs, multiplies BLOCK_M x BLOCK_K chunks of the
  matrix (loaded along its contiguous dim) by the vector's chunk into an fp32
  BLOCK_M x BLOCK_K accumulator and reduces it with tl.sum once at the end.
  Grid: cdiv(R, BLOCK_M) x SPLIT_K, batch.

Split-K (config key SPLIT_K > 1, fp32 only, both kernels): the K steps are
shared out in SPLIT_K contiguous runs of whole BLOCK_K steps; program p takes
the output block p % blocks and the run p // blocks (neighbouring programs
read the same K run of the operands, which the L2 then serves), and
`tl.atomic_add`s its fp32 partial into C. C must hold zeros before the
kernel: `launch` zeroes `out` itself (a memset, part of what a benchmark
times), and compile_spec declares it (spec["zero_before_launch"] = ["c_ptr"]:
a package's variant carries it and libkilnrt clears the tensor before every
launch, docs/package-format.md). The sum's order, so its last bits, varies
from run to run. Half outputs are refused with SPLIT_K > 1: atomics would add
partials rounded to 8 / 11 bits. SPLIT_K absent or 1 is the plain kernel with
a plain store (the configs of spaces before split-K existed have no SPLIT_K
key and compile to the same code).

config_space: for N == 1 or M == 1 the GEMV configs first; else, for fp32
where the output tiles are few (tiles x batch under two per SM) and K long,
each tile of at least 64 x 64 (or the largest the shape takes) with the
SPLIT_K that brings the programs to about eight per SM; then the plain tiles
(the spaces of other shapes are as before).
AMD knobs: waves_per_eu; for half inputs also matrix_instr_nonkdim and kpack.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common
from . import matmul as _matmul

OPERATORS = ("bmm",)

# Lower-case config knob of the matrix-vector kernel (bmv_kernel): 1 picks it.
GEMV = "gemv"


@common.jit_helper
def k_run(split, K, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """[k_start, k_end) of run `split` of SPLIT_K: whole BLOCK_K steps, the
    runs as even as the step count allows (the last ones may be shorter or
    empty)."""
    per = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_start = split * per
    return k_start, tl.minimum(K, k_start + per)


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
               SPLIT_K: tl.constexpr):
    if SPLIT_K == 1:
        tile = tl.program_id(0)
        k_start = 0
        k_end = K
    else:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        tile = tl.program_id(0) % tiles
        k_start, k_end = k_run(tl.program_id(0) // tiles, K, BLOCK_K, SPLIT_K)
    bat = tl.program_id(1).to(tl.int64)
    pid_m, pid_n = _matmul.tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    a_base = a_ptr + bat * M * K
    b_base = b_ptr + bat * K * N
    offs_m = ((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    offs_n = ((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    if SPLIT_K > 1:
        offs_k0 = k_start.to(tl.int64) + offs_k
    else:
        offs_k0 = offs_k
    if TRANS_A:
        a_ptrs = a_base + offs_k0[None, :] * M + offs_m[:, None]
    else:
        a_ptrs = a_base + offs_m[:, None] * K + offs_k0[None, :]
    if TRANS_B:
        b_ptrs = b_base + offs_n[None, :] * K + offs_k0[:, None]
    else:
        b_ptrs = b_base + offs_k0[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):
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
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(c_ptrs, acc, mask=mask, sem="relaxed")


@triton.jit
def bmv_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
               MAT_A: tl.constexpr, MAT_T: tl.constexpr, EVEN_K: tl.constexpr):
    # R = M * N outputs per batch (one of M, N is 1); the matrix is A (MAT_A:
    # N == 1) or B, stored [R, K] or, MAT_T, [K, R]; the vector K values.
    R = M * N
    blocks = tl.cdiv(R, BLOCK_M)
    rb = tl.program_id(0) % blocks
    if SPLIT_K == 1:
        k_start = 0
        k_end = K
    else:
        k_start, k_end = k_run(tl.program_id(0) // blocks, K, BLOCK_K, SPLIT_K)
    bat = tl.program_id(1).to(tl.int64)
    if MAT_A:
        mat = a_ptr + bat * R * K
        vec = b_ptr + bat * K
    else:
        mat = b_ptr + bat * R * K
        vec = a_ptr + bat * K
    rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = (rows % R).to(tl.int64)  # wrapped: valid loads, not stored
    offs_k = tl.arange(0, BLOCK_K)
    if SPLIT_K > 1:
        offs_k0 = k_start.to(tl.int64) + offs_k
    else:
        offs_k0 = offs_k
    v_ptrs = vec + offs_k0
    if MAT_T:
        m_ptrs = mat + offs_k0[:, None] * R + offs_r[None, :]
        acc = tl.zeros((BLOCK_K, BLOCK_M), dtype=tl.float32)
    else:
        m_ptrs = mat + offs_r[:, None] * K + offs_k0[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):
        if EVEN_K:
            x = tl.load(v_ptrs).to(tl.float32)
            m = tl.load(m_ptrs)
        else:
            k_mask = offs_k < K - k
            x = tl.load(v_ptrs, mask=k_mask, other=0.0).to(tl.float32)
            if MAT_T:
                m = tl.load(m_ptrs, mask=k_mask[:, None], other=0.0)
            else:
                m = tl.load(m_ptrs, mask=k_mask[None, :], other=0.0)
        if MAT_T:
            acc += m.to(tl.float32) * x[:, None]
            m_ptrs += BLOCK_K * R
        else:
            acc += m.to(tl.float32) * x[None, :]
            m_ptrs += BLOCK_K
        v_ptrs += BLOCK_K
    if MAT_T:
        out = tl.sum(acc, axis=0)
    else:
        out = tl.sum(acc, axis=1)
    c_ptrs = c_ptr + bat * R + rows
    if SPLIT_K == 1:
        tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=rows < R)
    else:
        tl.atomic_add(c_ptrs, out, mask=rows < R, sem="relaxed")


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

# Matrix-vector tiles (BLOCK_M outputs, BLOCK_K, num_warps): 4096 elements of
# the matrix per step, 32 per thread on 4 warps (as many fp32 accumulators).
# The matrix stored [R, K] (K contiguous): few rows, a long K chunk; stored
# [K, R] (R contiguous): the transpose, rows of 2-4 KiB. On an H200 (fp32,
# 2048 x 1048576, 8.6 GB read) every _GEMV_ROWS tile ran in 1.90-1.93 ms
# (4.5 TB/s; torch 2.31 ms); of the [K, R] tiles 512 x 8 and 1024 x 8 ran in
# 1.91 ms with 1024-2048 programs, 1024 x 4 in 1.97 (torch 2.06 ms); 256 x 16
# (1.98-2.56 ms) and 128 x 32 (2.3-2.6) are left out: the config model cannot
# tell them from the others.
_GEMV_ROWS = [(8, 512, 4), (16, 512, 8), (16, 256, 4), (4, 1024, 4), (32, 128, 4)]
_GEMV_COLS = [(512, 8, 4), (1024, 8, 8), (1024, 4, 4)]

# Split-K applies where the output blocks x batch are fewer than
# _SPLIT_BELOW_PER_SM per SM, and splits to about _PROGRAMS_PER_SM programs per
# SM. On an H200, 256 x 256 x 524288 fp32: 128 x 64 tiles split 128 ways
# (1024 programs) 1.55 ms, 32 ways 1.60, 16 ways (256 programs) 2.65; 64 x 64
# split 64 ways 1.60 (torch 1.30 ms, the unsplit kernel 97 ms); the GEMV
# [K, R] tiles wanted 1024 programs or more (512: 2.27 ms against 1.91).
_SPLIT_BELOW_PER_SM = 2
_PROGRAMS_PER_SM = 8
# The split-K tiles that measured best there, first (128 x 128 on 4 warps,
# 128 accumulators a thread, 1.95 ms at best). Tiles under 64 x 64 (or the
# largest the shape takes) get no split: they re-read the operands more and
# feed fewer FMAs per loaded value, yet the config model ranks them first.
_SPLIT_PREFERRED = [(128, 64), (64, 128), (64, 64)]
_SPLIT_MIN_TILE = 64 * 64
# Fewest K steps one split-K run takes (a run shorter than this spends more on
# its prologue, epilogue and atomics than it saves).
_MIN_STEPS_PER_RUN = 8


def _gemv_side(shape) -> bool:
    """Whether the matrix-vector kernel takes the shape: N == 1 or M == 1."""
    bt, M, N, K = shape
    return N == 1 or M == 1


def _mat_flags(shape, params):
    """(MAT_A, MAT_T) for a matrix-vector shape: the matrix is A when N == 1
    (stored [K, M] with trans_a), else B^T (stored [K, N] unless trans_b)."""
    ta, tb = _flags(params)
    mat_a = shape[2] == 1
    return mat_a, (ta if mat_a else not tb)


def _pow2_near(x: float) -> int:
    """The power of two nearest x (geometrically), at least 1."""
    if x <= 1:
        return 1
    lo = 1 << (int(x).bit_length() - 1)
    return lo * 2 if x * x > lo * lo * 2 else lo


def split_k_for(programs: int, steps: int, sms: int) -> int:
    """SPLIT_K for `programs` output blocks (x batch) over `steps` K steps: 1
    when they are _SPLIT_BELOW_PER_SM per SM or more, else the power of two
    bringing them nearest _PROGRAMS_PER_SM per SM, each run at least
    _MIN_STEPS_PER_RUN steps (1 when K is too short for two such runs)."""
    if programs >= _SPLIT_BELOW_PER_SM * sms:
        return 1
    split = min(_pow2_near(_PROGRAMS_PER_SM * sms / programs), max(1, steps // _MIN_STEPS_PER_RUN))
    return 1 << (split.bit_length() - 1)


def _gemv_space(shape, dtype, params, target):
    """The matrix-vector configs: each tile of the matrix's layout shrunk to
    the problem; fp32 with its split_k_for (and twice that split), half
    dtypes without split."""
    bt, M, N, K = shape
    R = M * N
    _, mat_t = _mat_flags(shape, params)
    sms = _matmul.sm_count(target)
    out = []
    for bm, bk, w in (_GEMV_COLS if mat_t else _GEMV_ROWS):
        elems = bm * bk
        bm = min(bm, triton.next_power_of_2(R))
        bk = min(max(bk, elems // bm), triton.next_power_of_2(K))
        w = max(1, min(w, bm * bk // (4 * 32)))
        w = 1 << (w.bit_length() - 1)
        split = 1
        if dtype == "fp32":
            split = split_k_for(common.cdiv(R, bm) * bt, common.cdiv(K, bk), sms)
        splits = [split] + ([split * 2] if split > 1 and common.cdiv(K, bk) // (split * 2) >= _MIN_STEPS_PER_RUN
                            else [])
        for s in splits:
            out.append({GEMV: 1, "BLOCK_M": bm, "BLOCK_K": bk, "SPLIT_K": s, "num_warps": w, "num_stages": 2})
    return out


def config_space(op, shape, dtype, params, target):
    """The tiles of _TILES shrunk to the problem (each block at most the dim
    padded to a power of two, at least 16), fp32 with BLOCK_K <= 32 (twice
    the bytes per element), dropped when the pipeline's buffers
    ((BLOCK_M + BLOCK_N) x BLOCK_K x stages) exceed the target's shared
    memory; GROUP_M 8. In front of them: for N == 1 or M == 1 the
    matrix-vector configs (_gemv_space); else, for fp32 with fewer output
    tiles x batch than _SPLIT_BELOW_PER_SM per SM, each tile of at least
    _SPLIT_MIN_TILE outputs (or the largest the shape takes) with its
    split-K (split_k_for; only where K has at least 2 x _MIN_STEPS_PER_RUN
    steps), _SPLIT_PREFERRED's tiles first.
    Then the AMD knobs (matrix-core knobs for half inputs)."""
    _check(op)
    bt, M, N, K = shape
    e = common.element_bytes(dtype)
    cap = lambda v: max(16, triton.next_power_of_2(v))  # noqa: E731
    sms = _matmul.sm_count(target)
    base, split = [], []
    for bm, bn, bk, w, s in _TILES:
        if dtype == "fp32" and bk > 32:
            bk = 32
        bm, bn, bk = min(bm, cap(M)), min(bn, cap(N)), min(bk, cap(K))
        if (bm + bn) * bk * e * s > common.shared_limit(target):
            continue
        w = max(1, min(w, bm * bn // 256))
        w = 1 << (w.bit_length() - 1)
        c = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w, "num_stages": s}
        base.append(c)
        if dtype == "fp32" and not _gemv_side(shape) and bm * bn >= min(_SPLIT_MIN_TILE, cap(M) * cap(N)):
            tiles = common.cdiv(M, bm) * common.cdiv(N, bn) * bt
            sk = split_k_for(tiles, common.cdiv(K, bk), sms)
            if sk > 1:
                split.append(dict(c, SPLIT_K=sk))
    rank = {t: i for i, t in enumerate(_SPLIT_PREFERRED)}
    split.sort(key=lambda c: rank.get((c["BLOCK_M"], c["BLOCK_N"]), len(rank)))
    lead = _gemv_space(shape, dtype, params, target) if _gemv_side(shape) else []
    return common.expand(common.dedupe(lead + split + base), common.amd_knobs(target, dot=dtype != "fp32"))


def _split(config, dtype) -> int:
    sk = int(config.get("SPLIT_K", 1))
    if sk < 1:
        raise ValueError(f"bmm: SPLIT_K must be >= 1, not {sk}")
    if sk > 1 and dtype != "fp32":
        raise ValueError(f"bmm: SPLIT_K > 1 takes fp32 only (its atomics add fp32 partials), not {dtype}")
    return sk


def _consts(shape, dtype, params, config, backend):
    opts, consts = common.runtime_options(config, backend)
    ta, tb = _flags(params)
    bt, M, N, K = shape
    sk = _split(config, dtype)
    consts["SPLIT_K"] = sk
    if config.get(GEMV):
        if not _gemv_side(shape):
            raise ValueError(f"bmm: a gemv config takes N == 1 or M == 1, not {M}x{N}")
        mat_a, mat_t = _mat_flags(shape, params)
        consts.update(MAT_A=mat_a, MAT_T=mat_t, EVEN_K=K % config["BLOCK_K"] == 0)
        return bmv_kernel, opts, consts
    consts.update(TRANS_A=ta, TRANS_B=tb, EVEN_K=K % config["BLOCK_K"] == 0, IEEE=dtype == "fp32")
    return bmm_kernel, opts, consts


def _grid(shape, config):
    bt, M, N, K = shape
    sk = int(config.get("SPLIT_K", 1))
    if config.get(GEMV):
        return (common.cdiv(M * N, config["BLOCK_M"]) * sk, bt, 1)
    return (common.cdiv(M, config["BLOCK_M"]) * common.cdiv(N, config["BLOCK_N"]) * sk, bt, 1)


def launch(op, inputs, out, config, params):
    """Runs the config's kernel; with SPLIT_K > 1 it zeroes `out` first (the
    kernel adds into it)."""
    _check(op)
    a, b = inputs["a"], inputs["b"]
    bt, M, N = out.shape
    K = a.shape[1] if _flags(params)[0] else a.shape[2]
    shape = [bt, M, N, K]
    kernel, opts, consts = _consts(shape, common.dtype_name(a.dtype), params, config, common.device_backend(out))
    if consts["SPLIT_K"] > 1:
        out.zero_()
    kernel[_grid(shape, config)](a, b, out, M, N, K, **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    """common.spec of the config's kernel; a split-K config's spec also names
    the pointer arguments to clear before each launch ("zero_before_launch":
    ["c_ptr"]; package_info carries it into the package's variant)."""
    _check(op)
    bt, M, N, K = shape
    kernel, opts, consts = _consts(shape, dtype, params, config, common.backend(target))
    ptr = common.pointer_type(dtype)
    e = common.element_bytes(dtype)
    args = [("a_ptr", ptr, bt * M * K * e), ("b_ptr", ptr, bt * K * N * e), ("c_ptr", ptr, bt * M * N * e),
            ("M", "i32", M), ("N", "i32", N), ("K", "i32", K)]
    spec = common.spec(kernel, args, consts, opts, _grid(shape, config), target)
    if consts["SPLIT_K"] > 1:
        spec["zero_before_launch"] = ["c_ptr"]  # the kernel adds into C
    return spec


def traffic(op, shape, dtype, params):
    _check(op)
    bt, M, N, K = shape
    e = common.element_bytes(dtype)
    return {"bytes": bt * (M * K + K * N + M * N) * e, "flops": 2 * bt * M * N * K}
