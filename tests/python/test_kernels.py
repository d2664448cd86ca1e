"""Tests for the Triton template library in kernels/.

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_kernels.py -q

Correctness runs the kernels under the Triton interpreter on the CPU, on tiny
shapes (odd sizes, so masking is exercised), against the torch reference computed
in float64 (fp32) or float32 (fp16 / bf16). Cross-compilation builds real hsaco /
cubin for the AMD and NVIDIA targets in the same process and checks the ELF
headers.
"""


# The interpreter must be chosen before Triton is imported.
import pytest
import torch

from kernels import common
from kernel_testing import (INTERPRETED, REGISTRY, TARGETS, check_make_inputs, checked_space,
                            cross_compiled, defaults, module_for, run_case, upcast)

pytestmark = INTERPRETED








def check_close(op, out, ref, dtype):
    tol = common.tolerance(dtype)
    assert out.shape == ref.shape, (op, out.shape, ref.shape)
    assert not torch.isnan(out).any(), f"{op}: NaN in output (unwritten elements?)"
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=tol["atol"], rtol=tol["rtol"])



def pick(configs, n_cols=None, looped=None):
    """First, middle and last config; with `looped`, only configs whose BLOCK_N is
    (not) smaller than the row."""
    if looped is not None:
        configs = [c for c in configs if (c["BLOCK_N"] < n_cols) == looped]
    assert configs, "no config of the requested kind"
    idx = sorted({0, len(configs) // 2, len(configs) - 1})
    return [configs[i] for i in idx]


# ---------------------------------------------------------------------------
# correctness under the interpreter
# ---------------------------------------------------------------------------

# (op, shape, params, looped) — looped: None (any), True / False (softmax, layernorm)
CASES = [
    ("add", [7, 33], {}, None),
    ("add", [1000], {}, None),
    ("add", [2, 3, 5, 7], {}, None),
    ("bias_gelu", [7, 33], {"approximate": "none"}, None),
    ("bias_gelu", [5, 300], {"approximate": "tanh"}, None),
    ("softmax", [7, 33], {}, False),
    ("softmax", [5, 1100], {}, False),
    ("softmax", [5, 1100], {}, True),
    ("layernorm", [7, 33], {}, False),
    ("layernorm", [3, 1100], {"eps": 1e-3}, True),
    ("matmul", [7, 33, 20], {}, None),   # K not a multiple of BLOCK_K: masked K loop
    ("matmul", [40, 24, 64], {}, None),  # EVEN_K path
    ("matmul", [600, 40, 32], {}, None),  # > GROUP_M tile-rows: two program groups
    ("conv2d", [2, 3, 9, 11], {"out_channels": 5, "kernel_size": 3, "padding": 1}, None),
    ("conv2d", [2, 3, 10, 12], {"out_channels": 64, "kernel_size": 3, "padding": 1}, None),  # the seed case, small
    ("conv2d", [1, 5, 7, 6], {"out_channels": 20, "kernel_size": 1}, None),
    ("conv2d", [2, 4, 9, 9], {"out_channels": 7, "kernel_size": 3, "stride": 2}, None),
]


def _correctness_params():
    for op, shape, params, looped in CASES:
        for dtype in REGISTRY[op]["dtypes"]:
            yield pytest.param(op, shape, params, looped, dtype,
                               id=f"{op}-{'x'.join(map(str, shape))}-{dtype}"
                                  + ("" if looped is None else ("-looped" if looped else "-onepass")))


@pytest.mark.parametrize("op,shape,params,looped,dtype", list(_correctness_params()))
def test_matches_reference(op, shape, params, looped, dtype):
    params = defaults(op, params)
    mod = module_for(op)
    # configs from both a hip space (AMD knobs dropped on the CPU) and a cuda space
    configs = pick(mod.config_space(op, shape, dtype, params, TARGETS["gfx942"]), shape[-1], looped)
    configs += pick(mod.config_space(op, shape, dtype, params, TARGETS["sm_90"]), shape[-1], looped)[1:2]
    for i, config in enumerate(configs):
        out, ref = run_case(op, shape, dtype, params, config, seed=i)
        check_close(op, out, ref, dtype)


def test_check_detects_a_wrong_output():
    # The comparison used above must fail on a wrong answer.
    out, ref = run_case("softmax", [4, 40], "fp32", {}, {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 1,
                                                         "num_stages": 1})
    check_close("softmax", out, ref, "fp32")
    out[2, 17] += 1e-2
    with pytest.raises(AssertionError):
        check_close("softmax", out, ref, "fp32")


def test_layernorm_large_mean_is_stable():
    # The looped kernel's shifted sums must not cancel when |mean| >> std.
    op, shape, params = "layernorm", [3, 1100], {"eps": 1e-5}
    mod = module_for(op)
    inputs = mod.make_inputs(op, shape, "fp32", params, 0, "cpu")
    inputs["x"] += 1000.0
    config = pick(mod.config_space(op, shape, "fp32", params, TARGETS["sm_90"]), shape[-1], True)[0]
    out = mod.output_like(op, inputs, params).fill_(float("nan"))
    mod.launch(op, inputs, out, config, params)
    ref = mod.reference(op, upcast(inputs, "fp32"), params)
    torch.testing.assert_close(out.double(), ref, atol=1e-3, rtol=1e-3)


# ---------------------------------------------------------------------------
# inputs, traffic, config spaces
# ---------------------------------------------------------------------------

SHAPES = {  # representative job shapes (not run, only used for spaces / compiles)
    "add": ([64, 1024, 1024], {}),
    "bias_gelu": ([8192, 4096], {"approximate": "tanh"}),
    "softmax": ([128, 1000], {}),
    "layernorm": ([4096, 8192], {}),
    "matmul": ([4096, 4096, 4096], {}),
    "conv2d": ([64, 3, 224, 224], {"out_channels": 64, "kernel_size": 3, "stride": 1, "padding": 1}),
}


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_make_inputs_seeded_and_nonzero(op):
    shape = {"add": [3, 5], "bias_gelu": [3, 5], "softmax": [3, 5], "layernorm": [3, 5],
             "matmul": [3, 5, 4], "conv2d": [1, 2, 5, 5]}[op]
    a, dtype, out = check_make_inputs(op, shape)
    assert all((x != 0).any() and x.float().std() > 0 for x in a.values())  # random, not constant
    assert out.dtype == common.torch_dtype(dtype)


def test_traffic():
    e = 2
    t = module_for("matmul").traffic("matmul", [64, 32, 16], "fp16", {})
    assert t == {"bytes": (64 * 16 + 16 * 32 + 64 * 32) * e, "flops": 2 * 64 * 32 * 16}
    t = module_for("add").traffic("add", [4, 5, 6], "fp32", {})
    assert t == {"bytes": 3 * 120 * 4, "flops": 120}
    t = module_for("softmax").traffic("softmax", [10, 100], "bf16", {})
    assert t["bytes"] == 2 * 1000 * 2
    t = module_for("layernorm").traffic("layernorm", [10, 100], "fp32", {"eps": 1e-5})
    assert t["bytes"] == (2 * 1000 + 2 * 100) * 4
    p = defaults("conv2d", {"out_channels": 64, "kernel_size": 3, "padding": 1})
    t = module_for("conv2d").traffic("conv2d", [64, 3, 224, 224], "fp16", p)
    out = 64 * 64 * 224 * 224
    assert t == {"bytes": (64 * 3 * 224 * 224 + 64 * 27 + out) * 2, "flops": 2 * out * 27}
    assert module_for("conv2d").out_shape([1, 3, 9, 9], {"out_channels": 4, "kernel_size": 3,
                                                         "stride": 2, "padding": 0}) == [1, 4, 4, 4]


def test_runtime_options():
    cfg = {"BLOCK_M": 64, "num_warps": 4, "num_stages": 2, "waves_per_eu": 2, "kpack": 2,
           "matrix_instr_nonkdim": 16}
    opts, consts = common.runtime_options(cfg, "hip")
    assert consts == {"BLOCK_M": 64}
    assert opts == {"num_warps": 4, "num_stages": 2, "waves_per_eu": 2, "kpack": 2, "matrix_instr_nonkdim": 16}
    for backend in ("cuda", "cpu"):
        opts, consts = common.runtime_options(cfg, backend)
        assert opts == {"num_warps": 4, "num_stages": 2} and consts == {"BLOCK_M": 64}


def test_target_helpers():
    assert [common.warp_size(TARGETS[t]) for t in TARGETS] == [64, 64, 64, 32, 32]
    assert common.warp_size({"backend": "hip", "arch": "gfx1100"}) == 32
    assert common.shared_limit({"backend": "hip", "arch": "gfx942"}) == 64 * 1024
    assert common.shared_limit({"backend": "hip", "arch": "gfx950"}) == 160 * 1024
    assert common.shared_limit({"backend": "cuda", "arch": "sm_90"}) == 232448
    assert common.shared_limit({"backend": "hip", "arch": "gfx942", "max_shared_per_block": 1234}) == 1234
    assert common.pointer_type("bf16") == "*bf16"
    assert common.dtype_name(torch.float16) == "fp16"


@pytest.mark.parametrize("op", sorted(SHAPES))
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_config_space_rules(op, target):
    tg = TARGETS[target]
    shape, params = SHAPES[op]
    params = defaults(op, params)
    mod = module_for(op)
    for dtype in REGISTRY[op]["dtypes"]:
        space = checked_space(mod, op, shape, dtype, params, tg, target)
        if op in ("matmul", "conv2d"):
            for c in space:
                assert mod.shared_bytes(c, dtype, tg) <= common.shared_limit(tg)


def test_tiny_shapes_have_configs():
    for op, shape in [("add", [1]), ("bias_gelu", [1, 1]), ("softmax", [1, 1]), ("layernorm", [1, 1]),
                      ("matmul", [1, 1, 1]), ("conv2d", [1, 1, 1, 1])]:
        params = defaults(op, {"padding": 1} if op == "conv2d" else {})
        for tg in TARGETS.values():
            assert module_for(op).config_space(op, shape, REGISTRY[op]["dtypes"][0], params, tg), (op, tg)


def test_space_sizes_are_real():
    # Compute-bound families explore dozens of configs, memory-bound ones fewer.
    conv = ([8, 64, 56, 56], {"out_channels": 128, "kernel_size": 3, "stride": 1, "padding": 1})
    for target in ("gfx942", "sm_90"):
        for op, (shape, params) in (("matmul", SHAPES["matmul"]), ("conv2d", conv)):
            n = len(module_for(op).config_space(op, shape, "fp16", defaults(op, params), TARGETS[target]))
            assert n >= 24, (op, target, n)
        # the seed conv (C=3: a single K step, so no pipelining variants) still has a real choice
        shape, params = SHAPES["conv2d"]
        assert len(module_for("conv2d").config_space("conv2d", shape, "fp16", params, TARGETS[target])) >= 12


# ---------------------------------------------------------------------------
# cross-compilation (in the same process as the interpreter runs above)
# ---------------------------------------------------------------------------


# (op, shape, dtype, params, kernel name, which config: looped or not)
COMPILE_CASES = [
    ("add", [64, 1024, 1024], "fp16", {}, "add_kernel", None),
    ("bias_gelu", [8192, 4096], "bf16", {"approximate": "tanh"}, "bias_gelu_kernel", None),
    ("bias_gelu", [100, 1000], "fp32", {"approximate": "none"}, "bias_gelu_kernel", None),
    ("softmax", [128, 1000], "fp16", {}, "softmax_kernel", False),
    ("softmax", [64, 100000], "fp32", {}, "softmax_online_kernel", True),
    ("layernorm", [4096, 8192], "bf16", {}, "layernorm_kernel", False),
    ("layernorm", [32, 50000], "fp32", {}, "layernorm_looped_kernel", True),
    ("matmul", [4096, 4096, 4096], "fp16", {}, "matmul_kernel", None),
    ("matmul", [100, 300, 200], "bf16", {}, "matmul_kernel", None),
    ("conv2d", [64, 3, 224, 224], "fp16", {"out_channels": 64, "kernel_size": 3, "padding": 1}, "conv2d_kernel", None),
    ("conv2d", [8, 64, 56, 56], "fp32", {"out_channels": 128, "kernel_size": 3, "stride": 2, "padding": 1},
     "conv2d_kernel", None),
    ("conv2d", [8, 256, 56, 56], "bf16", {"out_channels": 256, "kernel_size": 1}, "conv2d_kernel", None),
]


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}")
def test_cross_compile(case):
    op, shape, dtype, params, name, looped = case
    keep = None if looped is None else (lambda c: (c["BLOCK_N"] < shape[-1]) == looped)
    compiled = list(cross_compiled(op, shape, dtype, defaults(op, params), name, keep))
    assert len(compiled) == len(TARGETS)


def test_interpreter_and_compiler_interleave():
    # A kernel that calls Triton library @jit functions (tl.sigmoid, tl.max) runs in
    # the interpreter, is cross-compiled, and runs again, all in one process.
    params = {"approximate": "tanh"}
    cfg = {"BLOCK_M": 4, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1}
    for _ in range(2):
        out, ref = run_case("bias_gelu", [7, 33], "fp32", params, cfg)
        check_close("bias_gelu", out, ref, "fp32")
        out, ref = run_case("softmax", [5, 1100], "fp32", {}, {"BLOCK_M": 1, "BLOCK_N": 512,
                                                                 "num_warps": 4, "num_stages": 1})
        check_close("softmax", out, ref, "fp32")
        for tg in (TARGETS["gfx942"], TARGETS["sm_90"]):
            common.cross_compile(module_for("bias_gelu").compile_spec("bias_gelu", [7, 33], "fp32", params,
                                                                      cfg, tg), tg)
            common.cross_compile(module_for("softmax").compile_spec("softmax", [5, 1100], "fp32", {},
                                                                    {"BLOCK_M": 1, "BLOCK_N": 512,
                                                                     "num_warps": 4, "num_stages": 1}, tg), tg)
