"""GEMM with a fused epilogue: C[M, N] = act(A[M, K] @ B[K, N] + bias[N]).

fp16 / bf16 inputs, fp32 accumulation; the bias add and the activation run in
fp32 on the accumulator in registers, and C is written once in the input dtype
(one kernel instead of GEMM + a separate bias/activation pass over C).

Activations (param `activation`, default gelu -- the anchor's epilogue; a
constexpr ACT in the kernel):

* `none`: identity (GEMM + bias).
* `relu`: max(x, 0).
* `gelu`: the reference is torch.nn.functional.gelu's default, the exact erf
  form 0.5 * x * (1 + erf(x / sqrt(2))). The kernel evaluates the tanh form
  x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)) with one exp2 (ACT 4), which
  differs from the erf form by at most 4.7e-4 in absolute value (at x = +-2.7;
  checked on a dense grid in float64) -- under 5% of the fp16 / bf16 tolerance
  (1e-2), about two bf16 ulps at |y| ~ 0.06 and a quarter of one at |y| > 0.25. Measured on an H200 (8192 x 4096 x
  4096 bf16), the erf epilogue (libdevice erff: ACT 2, set GELU_EXACT = True)
  cost ~0.02 ms more than the tanh form on a ~0.41 ms GEMM, because the epilogue
  of the classic (non-persistent) kernel does not overlap the main loop.
* `silu`: x * sigmoid(x) (torch.nn.functional.silu).

The main loop is matmul.py's (the Triton matmul tutorial): BLOCK_M x BLOCK_N
tiles, K in BLOCK_K steps with `tl.dot`, GROUP_M super-grouping of programs for
L2 reuse, wrapped (modulo) rows / columns instead of masks in the loop, EVEN_K
to drop the K mask. A, B and C are contiguous row-major (B is [K, N], as for
matmul), so the strides K, N, N are known at compile time. On AMD the config
may also carry `matrix_instr_nonkdim`, `kpack` and `waves_per_eu` (compile
options).

Persistent variant (NVIDIA sm_90 spaces only; not measured on a GPU yet): a
config with `persistent: P` runs `gemm_bias_act_persistent_kernel`, matmul.py's
persistent kernel (min(tiles, SMs x P) programs walking the tiles in GROUP_M
order, the tile loop flattened with the K loop so Triton 3.6 pipelines across
tiles) with this epilogue: the bias + activation of one tile can then run while
the next tile's loads are in flight, the cost the classic kernel pays in full.
Plain pointers and the classic kernel's launch ABI; see matmul.py for what was
tried and left out (warp specialization, tensor descriptors).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common
from . import matmul as _matmul

OPERATORS = ("gemm_bias_act",)
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "silu": 3}
# gelu in the kernel: False = the tanh form (ACT 4, see above), True = erf (ACT 2).
GELU_EXACT = False


@common.jit_helper
def bias_act(acc, bias_ptr, pid_n, N, BLOCK_N: tl.constexpr, ACT: tl.constexpr):
    """The epilogue, in fp32 registers: + bias[cols], then the activation. The
    columns are wrapped like tile_product's, so the bias load needs no mask."""
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    acc += tl.load(bias_ptr + offs_n).to(tl.float32)[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACT == 3:
        acc = acc / (1.0 + tl.exp(-acc))
    elif ACT == 4:
        # gelu, tanh form: x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)), with exp2
        z = acc * (1.5957691216057308 + 0.0713548162726008 * acc * acc)
        acc = acc / (1.0 + tl.exp2(-1.4426950408889634 * z))
    return acc


@triton.jit
def gemm_bias_act_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, ACT: tl.constexpr):
    # matmul_kernel with the bias + activation epilogue.
    pid_m, pid_n = _matmul.tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = _matmul.tile_product(a_ptr, b_ptr, pid_m, pid_n, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
    acc = bias_act(acc, bias_ptr, pid_n, N, BLOCK_N, ACT)
    _matmul.store_tile(c_ptr, acc, pid_m, pid_n, M, N, BLOCK_M, BLOCK_N)


@triton.jit
def gemm_bias_act_persistent_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                                    EVEN_K: tl.constexpr, ACT: tl.constexpr):
    # matmul_persistent_kernel with the bias + activation epilogue (flatten=True:
    # the pipeliner overlaps one tile's epilogue with the next tile's loads).
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = _matmul.tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _matmul.tile_product(a_ptr, b_ptr, pid_m, pid_n, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
        acc = bias_act(acc, bias_ptr, pid_n, N, BLOCK_N, ACT)
        _matmul.store_tile(c_ptr, acc, pid_m, pid_n, M, N, BLOCK_M, BLOCK_N)


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_check = checks.operators("gemm_epilogue", OPERATORS, checks.HALF)


def _act(params) -> str:
    act = str((params or {}).get("activation", "gelu"))
    if act not in ACTIVATIONS:
        raise ValueError(f"gemm_bias_act: activation must be one of {list(ACTIVATIONS)}, not {act!r}")
    return act


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op, dtype)
    M, N, K = shape
    g = common.generator(seed, device)
    # A ~ N(0, 1), B ~ N(0, 1/K): pre-activation values are O(1), where the
    # activations are far from linear and a wrong one shows.
    return {"a": common.randn([M, K], dtype, seed, device, generator=g),
            "b": common.randn([K, N], dtype, seed, device, generator=g, scale=K ** -0.5),
            "bias": common.randn([N], dtype, seed, device, generator=g)}


def reference(op, inputs, params):
    _check(op)
    x = inputs["a"] @ inputs["b"] + inputs["bias"]
    act = _act(params)
    if act == "relu":
        return torch.relu(x)
    if act == "gelu":
        return torch.nn.functional.gelu(x)  # exact (erf) form, torch's default
    if act == "silu":
        return torch.nn.functional.silu(x)
    return x


def output_like(op, inputs, params):
    _check(op)
    a, b = inputs["a"], inputs["b"]
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def shared_bytes(config, dtype, target) -> int:
    """Estimated shared memory / LDS (as matmul.shared_bytes: the same main loop)."""
    return _matmul.shared_bytes(config, dtype, target)


# Persistent configs of the sm_90 space (see matmul.sm90_space): matmul's list
# without the ones the epilogue pushes over the registers. With the GELU
# epilogue (bf16 8192 x 4096 x 4096), Triton 3.6 / ptxas give 172 (128x128, 8
# warps) to 255 (256x128, 8 warps; 128x128x32, 4 warps) registers per thread and
# no spills for these; the 4-warp 128x128x64 tile spilled with 3 stages and sat
# at 255 with 4, and two 8-warp 128x128 programs (172 registers) do not fit one
# SM's register file.
SM90_PERSISTENT = [((128, 256, 64, 8), 3, 1), ((128, 256, 64, 8), 4, 1),
                   ((256, 128, 64, 8), 3, 1), ((256, 128, 64, 8), 4, 1),
                   ((128, 128, 64, 8), 3, 1), ((128, 128, 64, 8), 4, 1),
                   ((128, 256, 32, 8), 4, 1), ((256, 128, 32, 8), 4, 1),
                   ((128, 128, 32, 4), 4, 2)]
# registers per thread beyond the fp32 accumulator (measured 108-127 on sm_90)
_EXTRA_REGS = 120


def config_space(op, shape, dtype, params, target):
    """matmul's space (tiles x warps x stages, then the AMD knobs, pruned by the
    shared-memory limit) with GROUP_M = 16 (measured 3-5% faster than 8 on the
    H200 for 8192 x 4096 x 4096), and the tiles that win on large GEMMs first:
    128x256 / 256x128 with BLOCK_K 64 and 8 warps (the matmul anchors' best on
    the H200), then 128x128, then the rest in matmul's order.

    On sm_90 the persistent variant comes with each tile, right after its
    classic configs (matmul.sm90_space, with this module's SM90_PERSISTENT): not
    measured yet; it is there because its flattened loop lets the bias + GELU
    epilogue of one tile overlap the next tile's loads."""
    _check(op, dtype)
    _act(params)
    space = [dict(c, GROUP_M=16) for c in _matmul.config_space("matmul", shape, dtype, {}, target)
             if _matmul.PERSISTENT not in c]
    if _matmul.persistent_target(target):
        space = _matmul.sm90_space(space, shape, dtype, target, group_m=16,
                                   persistent_configs=SM90_PERSISTENT, extra_regs=_EXTRA_REGS)

    def rank(c):
        tile = (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"])
        preferred = [(128, 256, 64, 8), (256, 128, 64, 8), (128, 128, 64, 8), (128, 128, 64, 4)]
        return preferred.index(tile) if tile in preferred else len(preferred)

    # Stable sort inside each block of equal AMD knobs (the knobs vary slowest,
    # as common.expand made them).
    blocks: dict = {}
    for c in space:
        blocks.setdefault(tuple(c.get(k) for k in common.AMD_KNOBS), len(blocks))
    return sorted(space, key=lambda c: (blocks[tuple(c.get(k) for k in common.AMD_KNOBS)], rank(c)))


def _act_code(params) -> int:
    act = _act(params)
    if act == "gelu" and not GELU_EXACT:
        return 4
    return ACTIVATIONS[act]


def _constexprs(consts, K, params):
    return dict(consts, EVEN_K=K % consts["BLOCK_K"] == 0, ACT=_act_code(params))


def launch(op, inputs, out, config, params):
    _check(op)
    a, b, bias = inputs["a"], inputs["b"], inputs["bias"]
    assert a.is_contiguous() and b.is_contiguous() and out.is_contiguous(), "gemm_bias_act: row-major inputs"
    M, K = a.shape
    N = b.shape[1]
    opts, consts, per_sm = _matmul.split_config(config, common.device_backend(out))
    kernel = gemm_bias_act_persistent_kernel if per_sm else gemm_bias_act_kernel
    grid = _matmul.grid((M, N, K), config, _matmul.device_sm_count(out) if per_sm else 0)
    kernel[grid](a, b, bias, out, M, N, K, **_constexprs(consts, K, params), **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op, dtype)
    M, N, K = shape
    opts, consts, per_sm = _matmul.split_config(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    eb = common.element_bytes(dtype)
    args = [("a_ptr", ptr, M * K * eb), ("b_ptr", ptr, K * N * eb), ("bias_ptr", ptr, N * eb),
            ("c_ptr", ptr, M * N * eb), ("M", "i32", M), ("N", "i32", N), ("K", "i32", K)]
    kernel = gemm_bias_act_persistent_kernel if per_sm else gemm_bias_act_kernel
    return common.spec(kernel, args, _constexprs(consts, K, params), opts,
                       _matmul.grid(shape, config, _matmul.sm_count(target)), target)


def traffic(op, shape, dtype, params):
    _check(op, dtype)
    M, N, K = shape
    # GEMM flops, plus the bias add and ~a dozen flops of activation per output.
    return {"bytes": (M * K + K * N + N + M * N) * common.element_bytes(dtype),
            "flops": 2 * M * N * K + (2 if _act(params) == "none" else 12) * M * N}
