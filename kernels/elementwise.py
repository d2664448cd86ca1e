"""Elementwise operators: `add` and `bias_gelu`.

add        out = x + y, same shape, rank 1-4 (contiguous, so treated as flat).
bias_gelu  out = gelu(x + bias), x [M, N], bias [N] broadcast over rows;
           params["approximate"]: "none" (exact, erf) or "tanh".

Both are memory-bound: one read of each input, one write of the output. The
math is done in fp32 whatever the storage dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks, common

OPERATORS = ("add", "bias_gelu")


# ---------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    # Each program handles one BLOCK of the flattened tensors.
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    out = x.to(tl.float32) + y.to(tl.float32)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, M, N,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, APPROX_TANH: tl.constexpr):
    # A BLOCK_M x BLOCK_N tile of rows-major x; the bias slice is loaded once per tile.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows[:, None] < M) & col_mask[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]

    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=col_mask).to(tl.float32)
    v = x + b[None, :]
    if APPROX_TANH:
        # 0.5 * v * (1 + tanh(u)) == v * sigmoid(2u), u = sqrt(2/pi) * (v + 0.044715 v^3);
        # sigmoid avoids a backend-specific tanh and saturates cleanly.
        u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
        out = v * tl.sigmoid(2.0 * u)
    else:
        out = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------
# template interface
# ---------------------------------------------------------------------------

_check = checks.operators("elementwise", OPERATORS)
_approximate = checks.choice("bias_gelu", "approximate", "none", ("none", "tanh"))


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    g = common.generator(seed, device)
    if op == "add":
        return {"x": common.randn(shape, dtype, seed, device, generator=g),
                "y": common.randn(shape, dtype, seed, device, generator=g)}
    M, N = shape
    return {"x": common.randn([M, N], dtype, seed, device, generator=g),
            "bias": common.randn([N], dtype, seed, device, generator=g)}


def reference(op, inputs, params):
    _check(op)
    if op == "add":
        return inputs["x"] + inputs["y"]
    approx = _approximate(params)
    return torch.nn.functional.gelu(inputs["x"] + inputs["bias"], approximate=approx)


def output_like(op, inputs, params):
    _check(op)
    return torch.empty_like(inputs["x"])


def config_space(op, shape, dtype, params, target):
    _check(op)
    ws = common.warp_size(target)
    base = []
    if op == "add":
        n = common.numel(shape)
        # Blocks larger than the whole tensor only add masked-off lanes.
        max_block = max(512, triton.next_power_of_2(n))
        for block in [512, 1024, 2048, 4096, 8192]:
            for warps in [2, 4, 8, 16]:
                if block <= max_block and block >= warps * ws:
                    base.append({"BLOCK": block, "num_warps": warps, "num_stages": 1})
        return common.expand(base, common.amd_knobs(target))

    M, N = shape
    max_bn = max(128, triton.next_power_of_2(N))
    max_bm = max(1, triton.next_power_of_2(M))
    for bm in [1, 4, 16]:
        for bn in [128, 256, 512, 1024, 2048]:
            if bn > max_bn or bm > max_bm or bm * bn > 16384:
                continue
            for warps in [2, 4, 8]:
                # at least one element per thread (2 warps always allowed: tiny tensors)
                if warps == 2 or bm * bn >= warps * ws:
                    base.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": 1})
    return common.expand(base, common.amd_knobs(target))


def _grid(op, shape, config):
    if op == "add":
        return (common.cdiv(common.numel(shape), config["BLOCK"]), 1, 1)
    M, N = shape
    return (common.cdiv(M, config["BLOCK_M"]), common.cdiv(N, config["BLOCK_N"]), 1)


def launch(op, inputs, out, config, params):
    _check(op)
    opts, consts = common.runtime_options(config, common.device_backend(out))
    x = inputs["x"]
    grid = _grid(op, list(x.shape), config)
    if op == "add":
        add_kernel[grid](x, inputs["y"], out, x.numel(), **consts, **opts)
    else:
        M, N = x.shape
        bias_gelu_kernel[grid](x, inputs["bias"], out, M, N,
                               APPROX_TANH=_approximate(params) == "tanh", **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    grid = _grid(op, shape, config)
    eb = common.element_bytes(dtype)
    if op == "add":
        size = common.numel(shape) * eb
        args = [("x_ptr", ptr, size), ("y_ptr", ptr, size), ("out_ptr", ptr, size),
                ("n_elements", "i32", common.numel(shape))]
        return common.spec(add_kernel, args, consts, opts, grid, target)
    M, N = shape
    args = [("x_ptr", ptr, M * N * eb), ("bias_ptr", ptr, N * eb), ("out_ptr", ptr, M * N * eb),
            ("M", "i32", M), ("N", "i32", N)]
    consts["APPROX_TANH"] = _approximate(params) == "tanh"
    return common.spec(bias_gelu_kernel, args, consts, opts, grid, target)


def traffic(op, shape, dtype, params):
    _check(op)
    e = common.element_bytes(dtype)
    n = common.numel(shape)
    if op == "add":
        return {"bytes": 3 * n * e, "flops": n}
    M, N = shape
    # bias add + gelu; gelu counted as ~8 flops (erf / tanh polynomial not expanded).
    return {"bytes": (2 * n + N) * e, "flops": 9 * n}


def hints(op, shape, dtype, params, config, target) -> dict:
    """Per config, for the engine's config model: `bytes_in_flight`, the bytes
    one program loads at once (its tile of every input; add: x and y, bias_gelu:
    x and the bias slice)."""
    _check(op)
    e = common.element_bytes(dtype)
    if op == "add":
        return {"bytes_in_flight": 2 * config["BLOCK"] * e}
    return {"bytes_in_flight": (config["BLOCK_M"] + 1) * config["BLOCK_N"] * e}
