"""Tests for the newer template modules: rmsnorm, reduce (row_sum / row_mean /
row_max), gemm_epilogue (gemm_bias_act), attention, and the reworked conv2d.

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_kernels_more.py -q

As in test_kernels.py: correctness under the Triton interpreter on tiny, odd
shapes (masking) with outputs NaN-poisoned first, against the torch reference in
float64 (fp32) or float32 (fp16 / bf16); cross-compilation to hsaco (gfx90a,
gfx942, gfx950, gfx1100) and cubin (sm_90) in the same process, ELF headers
checked. The last test drives the real worker (python -m kiln_worker) as a
subprocess, end to end, for each new operator.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402
import torch  # noqa: E402

from kernels import common  # noqa: E402
from kernel_testing import (AMD_KNOBS, GFX_MACH, REGISTRY, TARGETS, checked_space, defaults,  # noqa: E402
                            elf_header, module_for, run_case, upcast)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="kernel tests run under TRITON_INTERPRET=1")

NEW_OPS = ["rmsnorm", "row_sum", "row_mean", "row_max", "gemm_bias_act", "attention"]


# Anchor shapes (the H200 anchor cases, jobs/examples/anchors_h200.yaml): spaces and compiles only, never run here.
ANCHORS = {
    "rmsnorm": ([16384, 4096], "bf16", {}),
    "row_sum": ([16384, 4096], "fp32", {}),
    "row_mean": ([16384, 4096], "bf16", {}),
    "row_max": ([16384, 4096], "fp16", {}),
    "gemm_bias_act": ([8192, 4096, 4096], "bf16", {"activation": "gelu"}),
    "attention": ([4, 32, 2048, 128], "bf16", {"causal": True}),
}





def check_close(op, out, ref, dtype):
    tol = common.tolerance(dtype)
    assert out.shape == ref.shape, (op, out.shape, ref.shape)
    assert not torch.isnan(out).any(), f"{op}: NaN in output (unwritten elements?)"
    # the worker scales atol by the output's rms once it exceeds 1 (sums of many terms)
    atol = tol["atol"] * max(1.0, float(ref.double().pow(2).mean().sqrt()))
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=atol, rtol=tol["rtol"])



def pick(configs, pred=None):
    """First, middle and last config (of those matching pred)."""
    if pred is not None:
        configs = [c for c in configs if pred(c)]
    assert configs, "no config of the requested kind"
    idx = sorted({0, len(configs) // 2, len(configs) - 1})
    return [configs[i] for i in idx]


# ---------------------------------------------------------------------------
# correctness under the interpreter
# ---------------------------------------------------------------------------

def _onepass(shape):
    return lambda c: c["BLOCK_N"] >= shape[-1]


def _looped(shape):
    return lambda c: c["BLOCK_N"] < shape[-1]


# (op, shape, params, config filter or None, dtypes or None = all the registry's)
CASES = [
    ("rmsnorm", [7, 33], {}, _onepass([7, 33]), None),
    ("rmsnorm", [3, 1100], {"eps": 1e-3}, _onepass([3, 1100]), None),
    ("rmsnorm", [3, 1100], {}, _looped([3, 1100]), None),
    ("row_sum", [7, 33], {}, None, None),
    ("row_sum", [5, 1100], {}, _looped([5, 1100]), None),
    ("row_mean", [7, 33], {}, None, None),
    ("row_mean", [5, 1100], {}, None, None),
    ("row_max", [7, 33], {}, None, None),
    ("row_max", [5, 1100], {}, _looped([5, 1100]), None),
    ("gemm_bias_act", [37, 45, 50], {"activation": "none"}, None, None),   # K % BLOCK_K != 0
    ("gemm_bias_act", [37, 45, 50], {"activation": "relu"}, None, None),
    ("gemm_bias_act", [37, 45, 50], {"activation": "gelu"}, None, None),
    ("gemm_bias_act", [40, 24, 64], {"activation": "silu"}, None, None),   # EVEN_K
    ("attention", [1, 2, 37, 16], {"causal": True}, None, None),           # S % BLOCK != 0
    ("attention", [1, 2, 37, 16], {"causal": False}, None, None),
    ("attention", [2, 1, 64, 32], {"causal": True}, None, ["bf16"]),
    ("attention", [1, 2, 50, 16], {"causal": False, "sm_scale": 0.3}, None, ["fp16"]),
]


def _correctness_params():
    for op, shape, params, pred, dtypes in CASES:
        for dtype in dtypes or REGISTRY[op]["dtypes"]:
            yield pytest.param(op, shape, params, pred, dtype,
                               id=f"{op}-{'x'.join(map(str, shape))}-{dtype}-"
                                  + "-".join(f"{k}={v}" for k, v in params.items()))


@pytest.mark.parametrize("op,shape,params,pred,dtype", list(_correctness_params()))
def test_matches_reference(op, shape, params, pred, dtype):
    params = defaults(op, params)
    mod = module_for(op)
    # configs from a hip space (AMD knobs dropped on the CPU) and a cuda space
    configs = pick(mod.config_space(op, shape, dtype, params, TARGETS["gfx942"]), pred)
    configs += pick(mod.config_space(op, shape, dtype, params, TARGETS["sm_90"]), pred)[1:2]
    for i, config in enumerate(configs):
        out, ref = run_case(op, shape, dtype, params, config, seed=i)
        check_close(op, out, ref, dtype)


# conv2d: the chunked program (BLOCK_P > BLOCK_M), uneven pixel counts, several K
# steps, stride and padding; test_kernels.py runs configs picked from the spaces.
CONV_CASES = [
    ([2, 3, 9, 11], {"out_channels": 5, "kernel_size": 3, "padding": 1},
     {"BLOCK_M": 16, "BLOCK_P": 64, "BLOCK_N": 16, "BLOCK_K": 32, "num_warps": 2, "num_stages": 1}),
    ([2, 3, 10, 12], {"out_channels": 64, "kernel_size": 3, "padding": 1},
     {"BLOCK_M": 32, "BLOCK_P": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}),
    ([1, 40, 9, 9], {"out_channels": 7, "kernel_size": 3, "padding": 2, "stride": 2},
     {"BLOCK_M": 16, "BLOCK_P": 16, "BLOCK_N": 16, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2}),
    ([1, 5, 7, 6], {"out_channels": 20, "kernel_size": 1},
     {"BLOCK_M": 16, "BLOCK_P": 32, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 2, "num_stages": 1}),
]


@pytest.mark.parametrize("shape,params,config", CONV_CASES, ids=lambda v: str(v) if isinstance(v, list) else None)
def test_conv2d_chunked_and_multi_k(shape, params, config):
    params = defaults("conv2d", params)
    for i, dtype in enumerate(("fp16", "fp32")):
        out, ref = run_case("conv2d", shape, dtype, params, config, seed=i)
        check_close("conv2d", out, ref, dtype)


def test_conv2d_seed_space_has_chunked_programs():
    shape, params = [64, 3, 224, 224], defaults("conv2d", {"out_channels": 64, "kernel_size": 3, "padding": 1})
    mod = module_for("conv2d")
    for tg in TARGETS.values():
        space = mod.config_space("conv2d", shape, "fp16", params, tg)
        first = space[0]
        # the H200's best shape of program comes first: all 64 channels, 128-pixel
        # chunks, 4 chunks per program
        assert (first["BLOCK_M"], first["BLOCK_N"], first["BLOCK_K"], first["BLOCK_P"]) == (128, 64, 32, 512), first
        spec = mod.compile_spec("conv2d", shape, "fp16", params, first, tg)
        assert spec["constexprs"]["ONE_K"] and spec["constexprs"]["EVEN_P"] and spec["constexprs"]["EVEN_N"]
        assert spec["grid"] == (224 * 224 // 512, 1, 64)


def test_row_sum_output_is_fp32_for_half_inputs():
    mod = module_for("row_sum")
    for dtype in ("fp16", "bf16", "fp32"):
        inputs = mod.make_inputs("row_sum", [3, 5], dtype, {}, 0, "cpu")
        assert mod.output_like("row_sum", inputs, {}).dtype == torch.float32
        assert mod.output_like("row_mean", inputs, {}).dtype == common.torch_dtype(dtype)
        assert mod.output_like("row_max", inputs, {}).dtype == common.torch_dtype(dtype)
    # a long fp16 row whose sum overflows fp16 (65504) is still right in fp32
    inputs = {"x": torch.full((2, 5000), 20.0, dtype=torch.float16)}
    out = mod.output_like("row_sum", inputs, {}).fill_(float("nan"))
    cfg = mod.config_space("row_sum", [2, 5000], "fp16", {}, TARGETS["sm_90"])[0]
    mod.launch("row_sum", inputs, out, cfg, {})
    assert torch.equal(out, torch.full((2,), 100000.0))


def test_row_max_all_negative_and_masked_tail():
    # masked columns must not win the max (other=-inf), nor zeros from padding
    mod = module_for("row_max")
    x = -1.0 - torch.rand(4, 37)
    cfg = {"BLOCK_M": 2, "BLOCK_N": 16, "num_warps": 2, "num_stages": 1}
    out = torch.full((4,), float("nan"))
    mod.launch("row_max", {"x": x}, out, cfg, {})
    assert torch.equal(out, x.amax(-1))


def test_gelu_kernel_form_vs_exact():
    # The kernel's gelu (tanh form) is within 4.8e-4 of the exact erf form that the
    # reference uses (plus the fp16 rounding of the output); the exact form is one
    # switch away (GELU_EXACT) and then only the rounding remains.
    mod = module_for("gemm_bias_act")
    shape, params = [64, 32, 16], {"activation": "gelu"}
    cfg = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 16, "num_warps": 4, "num_stages": 1}
    inputs = mod.make_inputs("gemm_bias_act", shape, "fp16", params, 3, "cpu")
    ref = mod.reference("gemm_bias_act", upcast(inputs, "fp32"), params).double()
    rounding = 2.0 ** -11 * ref.abs() + 1e-5
    assert mod._act_code(params) == 4 and not mod.GELU_EXACT
    out = mod.output_like("gemm_bias_act", inputs, params).fill_(float("nan"))
    mod.launch("gemm_bias_act", inputs, out, cfg, params)
    assert ((out.double() - ref).abs() <= 4.8e-4 + rounding).all()
    try:
        mod.GELU_EXACT = True
        assert mod._act_code(params) == 2
        out2 = mod.output_like("gemm_bias_act", inputs, params).fill_(float("nan"))
        mod.launch("gemm_bias_act", inputs, out2, cfg, params)
        assert ((out2.double() - ref).abs() <= rounding).all()
    finally:
        mod.GELU_EXACT = False
    x = torch.linspace(-10, 10, 200001, dtype=torch.float64)
    z = x * (1.5957691216057308 + 0.0713548162726008 * x * x)
    assert (x / (1 + torch.exp2(-1.4426950408889634 * z)) - torch.nn.functional.gelu(x)).abs().max() < 4.8e-4


def test_attention_validation():
    mod = module_for("attention")
    p = defaults("attention", {})
    for bad_d in (8, 48, 512):
        with pytest.raises(ValueError, match="power of two"):
            mod.config_space("attention", [1, 1, 64, bad_d], "fp16", p, TARGETS["sm_90"])
    with pytest.raises(ValueError, match="fp16 or bf16"):
        mod.config_space("attention", [1, 1, 64, 64], "fp32", p, TARGETS["sm_90"])
    cfg = {"BLOCK_M": 64, "BLOCK_N": 128, "GROUP_H": 8, "num_warps": 4, "num_stages": 2}
    with pytest.raises(ValueError, match="multiple of BLOCK_N"):
        mod.compile_spec("attention", [1, 1, 256, 64], "fp16", p, cfg, TARGETS["sm_90"])
    inputs = mod.make_inputs("attention", [1, 1, 16, 16], "fp16", p, 0, "cpu")
    with pytest.raises(ValueError, match="multiple of BLOCK_N"):
        mod.launch("attention", inputs, mod.output_like("attention", inputs, p), cfg, p)
    # sm_scale 0 means 1/sqrt(D)
    assert mod._sm_scale({"sm_scale": 0.0}, 64) == 0.125 and mod._sm_scale({"sm_scale": 0.5}, 64) == 0.5


def test_attention_head_groups_cover_every_block():
    # GROUP_H heads x query blocks, heaviest block first: every (head, block)
    # exactly once, also when B*H is not a multiple of GROUP_H.
    p = defaults("attention", {"causal": True})
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_H": 8, "num_warps": 4, "num_stages": 1}
    out, ref = run_case("attention", [1, 11, 40, 16], "fp16", p, cfg)
    check_close("attention", out, ref, "fp16")


# ---------------------------------------------------------------------------
# inputs, traffic, config spaces
# ---------------------------------------------------------------------------

TINY = {"rmsnorm": [3, 5], "row_sum": [3, 5], "row_mean": [3, 5], "row_max": [3, 5],
        "gemm_bias_act": [3, 5, 4], "attention": [1, 2, 3, 16]}


@pytest.mark.parametrize("op", NEW_OPS)
def test_make_inputs_seeded_and_nonzero(op):
    shape, params = TINY[op], defaults(op, {})
    dtype = REGISTRY[op]["dtypes"][-1]
    mod = module_for(op)
    a = mod.make_inputs(op, shape, dtype, params, 7, "cpu")
    b = mod.make_inputs(op, shape, dtype, params, 7, "cpu")
    c = mod.make_inputs(op, shape, dtype, params, 8, "cpu")
    assert a.keys() == b.keys() == c.keys()
    for k in a:
        assert a[k].dtype == common.torch_dtype(dtype)
        assert a[k].is_contiguous()
        assert torch.equal(a[k], b[k])
        assert not torch.equal(a[k], c[k])
        assert (a[k] != 0).all() or ((a[k] != 0).any() and a[k].float().std() > 0)
    out = mod.output_like(op, a, params)
    expected = torch.float32 if op == "row_sum" else common.torch_dtype(dtype)
    assert out.dtype == expected


def test_registry_entries():
    for op in NEW_OPS:
        entry = REGISTRY[op]
        assert set(entry) >= {"module", "description", "shape", "dtypes", "params"}
        for name, p in entry["params"].items():
            assert "default" in p and p["type"] in ("int", "float", "bool", "string"), (op, name)
    assert REGISTRY["attention"]["params"]["causal"] == {"type": "bool", "default": True}
    assert REGISTRY["gemm_bias_act"]["params"]["activation"]["enum"] == ["none", "relu", "gelu", "silu"]
    assert REGISTRY["rmsnorm"]["params"]["eps"]["default"] == 1e-6


def test_traffic():
    t = module_for("rmsnorm").traffic("rmsnorm", [16384, 4096], "bf16", {})
    assert t["bytes"] == (2 * 16384 * 4096 + 4096) * 2
    t = module_for("row_sum").traffic("row_sum", [16384, 4096], "fp32", {})
    assert t == {"bytes": 16384 * 4096 * 4 + 16384 * 4, "flops": 16384 * 4096}
    t = module_for("row_sum").traffic("row_sum", [10, 100], "bf16", {})
    assert t["bytes"] == 1000 * 2 + 10 * 4  # fp32 output
    t = module_for("row_max").traffic("row_max", [10, 100], "bf16", {})
    assert t["bytes"] == 1000 * 2 + 10 * 2
    t = module_for("gemm_bias_act").traffic("gemm_bias_act", [8192, 4096, 4096], "bf16", {"activation": "gelu"})
    assert t["bytes"] == (8192 * 4096 + 4096 * 4096 + 4096 + 8192 * 4096) * 2
    assert t["flops"] >= 2 * 8192 * 4096 * 4096
    t = module_for("attention").traffic("attention", [4, 32, 2048, 128], "bf16", {"causal": True})
    assert t["bytes"] == 4 * 4 * 32 * 2048 * 128 * 2
    assert t["flops"] == 4 * 4 * 32 * (2048 * 2049 // 2) * 128
    t2 = module_for("attention").traffic("attention", [4, 32, 2048, 128], "bf16", {"causal": False})
    assert t2["flops"] == 4 * 4 * 32 * 2048 * 2048 * 128


@pytest.mark.parametrize("op", NEW_OPS + ["conv2d"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_config_space_rules(op, target):
    tg = TARGETS[target]
    if op == "conv2d":
        shape, dtypes, params = [64, 3, 224, 224], REGISTRY[op]["dtypes"], \
            {"out_channels": 64, "kernel_size": 3, "padding": 1}
    else:
        shape, _, params = ANCHORS[op]
        dtypes = REGISTRY[op]["dtypes"]
    params = defaults(op, params)
    mod = module_for(op)
    for dtype in dtypes:
        space = checked_space(mod, op, shape, dtype, params, tg, target)
        for c in space:
            if op in ("gemm_bias_act", "conv2d"):
                assert mod.shared_bytes(c, dtype, tg) <= common.shared_limit(tg)
            if op == "attention":
                assert c["BLOCK_M"] % c["BLOCK_N"] == 0
                assert mod.shared_estimate(c, dtype, shape[-1], tg) <= common.shared_limit(tg)
            mod.compile_spec(op, shape, dtype, params, c, tg)  # accepted, grid computable


def test_tiny_shapes_have_configs():
    for op, shape in [("rmsnorm", [1, 1]), ("row_sum", [1, 1]), ("row_max", [1, 1]),
                      ("gemm_bias_act", [1, 1, 1]), ("attention", [1, 1, 1, 16])]:
        params = defaults(op, {})
        for tg in TARGETS.values():
            space = module_for(op).config_space(op, shape, REGISTRY[op]["dtypes"][0], params, tg)
            assert space, (op, tg)
    out, ref = run_case("attention", [1, 1, 1, 16], "fp16", defaults("attention", {}),
                        module_for("attention").config_space("attention", [1, 1, 1, 16], "fp16", {},
                                                             TARGETS["sm_90"])[0])
    check_close("attention", out, ref, "fp16")


def test_anchor_space_sizes():
    # real choices on the anchor shapes, small enough for an exhaustive walk of 64
    sizes = {}
    for op in NEW_OPS:
        shape, dtype, params = ANCHORS[op]
        for target in ("sm_90", "gfx942"):
            n = len(module_for(op).config_space(op, shape, dtype, defaults(op, params), TARGETS[target]))
            sizes[(op, target)] = n
            assert n >= 8, (op, target, n)
    assert sizes[("gemm_bias_act", "sm_90")] >= 24 and sizes[("attention", "sm_90")] >= 12
    assert sizes[("rmsnorm", "sm_90")] <= 64 and sizes[("row_sum", "sm_90")] <= 64
    assert sizes[("attention", "sm_90")] <= 64
    # the tiles that measured best on an H200 come first
    first = module_for("gemm_bias_act").config_space("gemm_bias_act", [8192, 4096, 4096], "bf16",
                                                     {"activation": "gelu"}, TARGETS["sm_90"])[0]
    assert (first["BLOCK_M"], first["BLOCK_N"], first["BLOCK_K"], first["GROUP_M"]) == (128, 256, 64, 16)


# ---------------------------------------------------------------------------
# cross-compilation (in the same process as the interpreter runs above)
# ---------------------------------------------------------------------------


# (op, shape, dtype, params, kernel name, config filter)
COMPILE_CASES = [
    ("rmsnorm", [16384, 4096], "bf16", {}, "rmsnorm_kernel", _onepass([16384, 4096])),
    ("rmsnorm", [64, 50000], "fp32", {}, "rmsnorm_looped_kernel", None),
    ("row_sum", [16384, 4096], "fp32", {}, "row_reduce_kernel", None),
    ("row_max", [1000, 3000], "bf16", {}, "row_reduce_kernel", None),
    ("gemm_bias_act", [8192, 4096, 4096], "bf16", {"activation": "gelu"}, "gemm_bias_act_kernel", None),
    ("gemm_bias_act", [100, 300, 200], "fp16", {"activation": "silu"}, "gemm_bias_act_kernel", None),
    ("attention", [4, 32, 2048, 128], "bf16", {"causal": True}, "attention_fwd_kernel", None),
    ("attention", [2, 8, 1000, 64], "fp16", {"causal": False}, "attention_fwd_kernel", None),
]


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}")
def test_cross_compile(case):
    op, shape, dtype, params, name, pred = case
    params = defaults(op, params)
    mod = module_for(op)
    for t_index, (target, tg) in enumerate(sorted(TARGETS.items())):
        space = mod.config_space(op, shape, dtype, params, tg)
        if pred is not None:
            space = [c for c in space if pred(c)]
        # rotate through first / middle / last config across the targets
        config = space[[0, len(space) // 2, len(space) - 1][(t_index + len(shape)) % 3]]
        spec = mod.compile_spec(op, shape, dtype, params, config, tg)
        assert spec["fn"].__name__ == name
        assert list(spec["signature"]) == spec["fn"].arg_names
        assert len(spec["grid"]) == 3 and all(g >= 1 for g in spec["grid"])
        assert spec["attrs"], "alignment hints missing"
        compiled = common.cross_compile(spec, tg)
        assert compiled.metadata.name == name
        assert compiled.metadata.num_warps == config["num_warps"]
        assert compiled.metadata.shared <= common.shared_limit(tg)
        if op == "gemm_bias_act":
            assert compiled.metadata.shared <= max(mod.shared_bytes(config, dtype, tg), 1)
        if op == "attention":
            assert compiled.metadata.shared <= mod.shared_estimate(config, dtype, shape[-1], tg)
        if tg["backend"] == "hip":
            osabi, machine, flags = elf_header(compiled.asm["hsaco"])
            assert machine == 224 and osabi == 64  # EM_AMDGPU, ELFOSABI_AMDGPU_HSA
            assert flags & 0xFF == GFX_MACH[target], (target, hex(flags))
            assert compiled.metadata.warp_size == tg["warp_size"]
            for knob in AMD_KNOBS & config.keys():
                assert getattr(compiled.metadata, knob) == config[knob]
        else:
            _, machine, _ = elf_header(compiled.asm["cubin"])
            assert machine == 190  # EM_CUDA
            assert "sm_90" in compiled.asm["ptx"]


def test_conv2d_seed_compiles_lean():
    # The seed conv's first config: vector stores, the weight tile hoisted out of
    # the chunk loop, ~5-6 instructions per output element in the loop (was ~34).
    import re
    shape, params = [64, 3, 224, 224], defaults("conv2d", {"out_channels": 64, "kernel_size": 3, "padding": 1})
    mod = module_for("conv2d")
    tg = TARGETS["sm_90"]
    config = mod.config_space("conv2d", shape, "fp16", params, tg)[0]
    compiled = common.cross_compile(mod.compile_spec("conv2d", shape, "fp16", params, config, tg), tg)
    ptx = compiled.asm["ptx"]
    assert "st.global.v4.b32" in ptx
    lines = ptx.splitlines()
    header = next(i for i, l in enumerate(lines) if "Loop Header" in l)
    back = max(i for i, l in enumerate(lines) if re.search(r"bra(\.uni)?\s+\$L__BB0_\d+;", l))
    body = [l for l in lines[header:back + 1] if re.match(r"^\s+(@%p\d+\s+)?[a-z]", l)]
    outputs_per_thread = config["BLOCK_M"] * config["BLOCK_N"] / (config["num_warps"] * 32)
    assert len(body) / outputs_per_thread < 8, len(body)
    # only the input gather is loaded in the loop (the weight tile is hoisted)
    threads = config["num_warps"] * 32
    assert sum("ld.global" in l for l in body) <= config["BLOCK_M"] * config["BLOCK_K"] // threads


def test_interpreter_and_compiler_interleave_with_helper():
    # attention's inner loop is a @jit helper (wrapped for the compiler under the
    # interpreter): run, compile, run again in one process.
    op, shape = "attention", [1, 1, 20, 16]
    params = defaults(op, {"causal": True})
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_H": 8, "num_warps": 4, "num_stages": 1}
    mod = module_for(op)
    for _ in range(2):
        out, ref = run_case(op, shape, "fp16", params, cfg)
        check_close(op, out, ref, "fp16")
        for tg in (TARGETS["gfx942"], TARGETS["sm_90"]):
            common.cross_compile(mod.compile_spec(op, shape, "fp16", params, cfg, tg), tg)


# ---------------------------------------------------------------------------
# the worker, end to end (subprocess, CPU / interpreter), real template library
# ---------------------------------------------------------------------------

def test_worker_end_to_end_new_ops(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python", "fixtures"))
    from worker_client import TARGET_H200, TARGET_MI300X, Worker, worker_env

    jobs = [("rmsnorm", [5, 300], "bf16", {}, TARGET_MI300X),
            ("row_sum", [6, 700], "fp16", {}, TARGET_H200),
            ("row_max", [6, 70], "fp32", {}, TARGET_MI300X),
            ("gemm_bias_act", [33, 40, 24], "fp16", {"activation": "gelu"}, TARGET_H200),
            ("attention", [1, 2, 24, 16], "bf16", {"causal": True}, TARGET_MI300X),
            ("conv2d", [1, 3, 9, 10], "fp16", {"out_channels": 8, "kernel_size": 3, "padding": 1}, TARGET_H200)]
    w = Worker(env=worker_env(kernels_dir=None))
    try:
        h = w.call("hello", timeout=300)
        assert h["ok"], h
        for op in NEW_OPS:
            assert op in h["result"]["operators"]
        for mod in ("rmsnorm", "reduce", "gemm_epilogue", "attention"):
            assert mod in h["result"]["templates"]
        for op, shape, dtype, params, target in jobs:
            job = {"op": op, "shape": shape, "dtype": dtype, "params": params, "target": target,
                   "constraints": [], "validation": {"seeds": 1, "atol": None, "rtol": None},
                   "benchmark": {"warmup": 1, "runs": 2}}
            sp = w.call("space", job=job, timeout=300)
            assert sp["ok"], sp
            configs = sp["result"]["configs"]
            assert configs and sp["result"]["traffic"]["bytes"] > 0
            assert all(("waves_per_eu" in c) == (target["backend"] == "hip") for c in configs)
            ans = w.call("evaluate", job=job, config=configs[0], artifact_dir=str(tmp_path / op), timeout=300)
            assert ans["ok"], ans
            r = ans["result"]
            assert r["status"] == "ok", (op, r["message"])
            assert r["correctness"]["passed"] is True
            a = r["artifact"]
            data = open(a["path"], "rb").read()
            _, machine, flags = elf_header(data)
            if target["backend"] == "hip":
                assert a["kind"] == "hsaco" and machine == 224 and flags & 0xFF == 0x4C
            else:
                assert a["kind"] == "cubin" and machine == 190
            assert a["grid"] == list(module_for(op).compile_spec(op, shape, dtype, defaults(op, params),
                                                                 configs[0], target)["grid"])
    finally:
        assert w.close() == 0, w.stderr[-3000:]


# conv2d variants (one K step only): shape baked in (spec), [oc, pixels] product
# (transpose), next chunk's gather before the store (prefetch), persistent grid
# (programs), streaming stores (stream); uneven pixel / channel counts, stride 2,
# 1x1 with K == BLOCK_K (no K mask).
_CONV_VARIANTS = [
    {"spec": 1},
    {"transpose": 1, "prefetch": 1},
    {"spec": 1, "transpose": 1, "prefetch": 1, "stream": 1},
    {"spec": 1, "programs": 5},
    {"spec": 1, "transpose": 1, "programs": 3},
]
_CONV_VARIANT_SHAPES = [
    ([2, 3, 9, 11], {"out_channels": 5, "kernel_size": 3, "padding": 1}),
    ([1, 3, 8, 9], {"out_channels": 20, "kernel_size": 3, "padding": 1, "stride": 2}),
    ([2, 32, 5, 6], {"out_channels": 16, "kernel_size": 1}),
]


@pytest.mark.parametrize("knobs", _CONV_VARIANTS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_conv2d_variants_interpreted(knobs):
    for i, (shape, params) in enumerate(_CONV_VARIANT_SHAPES):
        params = defaults("conv2d", params)
        config = dict({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "BLOCK_P": 32,
                       "num_warps": 4, "num_stages": 2}, **knobs)
        out, ref = run_case("conv2d", shape, "fp16" if i % 2 == 0 else "fp32", params, config, seed=i)
        check_close("conv2d", out, ref, "fp16" if i % 2 == 0 else "fp32")


def test_conv2d_variant_knobs_need_one_k_step():
    mod = module_for("conv2d")
    params = defaults("conv2d", {"out_channels": 8, "kernel_size": 3})
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "BLOCK_P": 16, "num_warps": 4, "num_stages": 2, "spec": 1}
    with pytest.raises(ValueError):
        mod.compile_spec("conv2d", [1, 40, 9, 9], "fp16", params, cfg, TARGETS["sm_90"])


def test_conv2d_register_hint_is_not_capped():
    # 64 input channels (K = 576, several K steps): a 256-pixel tile on 4 warps
    # needs more than 255 registers (measured on the H200: 255 + 75 words
    # spilled); the hint says so, and the engine's config model counts the spill.
    shape, params = [32, 64, 56, 56], defaults("conv2d", {"out_channels": 64, "kernel_size": 3, "padding": 1})
    mod = module_for("conv2d")
    tg = dict(TARGETS["sm_90"], compute_units=132)
    big = {"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 32, "BLOCK_P": 256, "num_warps": 4, "num_stages": 2}
    small = dict(big, BLOCK_M=64, BLOCK_P=64)
    assert mod.hints("conv2d", shape, "fp16", params, big, tg)["registers"] > 255
    assert mod.hints("conv2d", shape, "fp16", params, small, tg)["registers"] < 255


def test_conv2d_seed_space_variants_and_hints():
    shape, params = [64, 3, 224, 224], defaults("conv2d", {"out_channels": 64, "kernel_size": 3, "padding": 1})
    mod = module_for("conv2d")
    tg = dict(TARGETS["sm_90"], compute_units=132)
    space = mod.config_space("conv2d", shape, "fp16", params, tg)
    assert len(space) <= 48
    # the best measured config so far stays in the space
    assert {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "BLOCK_P": 512, "num_warps": 4, "num_stages": 2} in space
    assert space[0].get("spec") and space[0].get("transpose") and space[0].get("prefetch")
    persistent = [c for c in space if c.get("programs")]
    assert persistent and persistent[0]["programs"] == 4 * 132
    assert mod.compile_spec("conv2d", shape, "fp16", params, persistent[0], tg)["grid"] == (528, 1, 1)
    # AMD spaces have no variant knobs
    for name in ("gfx942", "gfx1100"):
        assert not any(set(mod.KNOBS) & c.keys() for c in mod.config_space("conv2d", shape, "fp16", params,
                                                                            TARGETS[name]))
    h = [mod.hints("conv2d", shape, "fp16", params, c, tg) for c in space]
    assert all({"instr_per_output", "registers", "store_run_bytes", "programs_per_sm"} <= x.keys() for x in h)
    plain = space.index({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "BLOCK_P": 512,
                         "num_warps": 4, "num_stages": 2})
    assert h[0]["instr_per_output"] < 0.8 * h[plain]["instr_per_output"]
    # the kernel's thread instructions in all (the engine's issue-time term)
    outputs = 64 * 64 * 224 * 224
    for x in h:
        assert x["instructions"] == pytest.approx(x["instr_per_output"] * outputs, rel=0.01)


def test_conv2d_variants_cross_compile_sm90():
    # the seed shape's first variants: fewer SASS instructions per output than
    # the plain config (6.4 measured), vector stores, streaming stores marked .cs
    shape, params = [64, 3, 224, 224], defaults("conv2d", {"out_channels": 64, "kernel_size": 3, "padding": 1})
    mod = module_for("conv2d")
    tg = dict(TARGETS["sm_90"], compute_units=132)
    space = mod.config_space("conv2d", shape, "fp16", params, tg)
    for config in space[:4]:
        compiled = common.cross_compile(mod.compile_spec("conv2d", shape, "fp16", params, config, tg), tg)
        ptx = compiled.asm["ptx"]
        assert ("st.global.cs.v4.b32" if config.get("stream") else "st.global.v4.b32") in ptx
        # K = 27 baked in: the 5 padding k of the gather are never loaded (27 per
        # chunk, twice with the prefetch's prologue), plus the weight tile once
        threads = config["num_warps"] * 32
        loads = 27 * (2 if config.get("prefetch") or config.get("programs") else 1) \
            + 2 * config["BLOCK_N"] * config["BLOCK_K"] // threads
        assert ptx.count("ld.global.b16") + ptx.count("ld.global.u16") <= loads


# ---------------------------------------------------------------------------
# row kernels: the `stream` and `programs` (persistent grid) knobs
# ---------------------------------------------------------------------------

ROW_OPS = {"softmax": "bf16", "layernorm": "bf16", "rmsnorm": "bf16", "row_sum": "fp32"}
# An H200 target with the specs of configs/targets/H200.yaml that the row,
# matmul and GEMM spaces read (TARGETS["sm_90"] has only the arch).
H200_FULL = dict(TARGETS["sm_90"], compute_units=132, simds_per_cu=4, max_waves_per_simd=16,
                 lds_bytes_per_cu=233472, max_shared_per_block=232448, registers_per_cu=65536)


def _knobbed(config):
    return "programs" in config or "stream" in config


@pytest.mark.parametrize("op,shape,config", [
    # 3 programs walking 7 blocks of 2 rows (the last block half empty), pipelined
    ("softmax", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 2, "programs": 3, "stream": 1}),
    ("softmax", [5, 40], {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 2, "num_stages": 1, "stream": 1}),
    ("layernorm", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 2, "num_stages": 3, "programs": 4, "stream": 1}),
    ("rmsnorm", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 2, "programs": 3, "stream": 1}),
    ("rmsnorm", [9, 64], {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 2, "num_stages": 1, "programs": 4}),  # EVEN_N
    ("row_sum", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2, "programs": 3, "stream": 1}),
    ("row_sum", [5, 1100], {"BLOCK_M": 1, "BLOCK_N": 512, "num_warps": 2, "num_stages": 1, "stream": 1}),  # looped
    ("row_max", [13, 64], {"BLOCK_M": 4, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2, "programs": 2, "stream": 1}),
    ("row_mean", [7, 33], {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1, "programs": 5}),
])
def test_row_knobs_match_reference(op, shape, config):
    params = defaults(op, {})
    dtype = "fp16" if op == "row_max" else ROW_OPS.get(op, "bf16")
    out, ref = run_case(op, shape, dtype, params, config)
    check_close(op, out, ref, dtype)
    spec = module_for(op).compile_spec(op, shape, dtype, params, config, TARGETS["sm_90"])
    assert spec["grid"][0] == min(config.get("programs", shape[0]), -(-shape[0] // config["BLOCK_M"]))
    assert spec["constexprs"]["PERSISTENT"] == ("programs" in config)
    assert spec["constexprs"]["LOAD_POLICY"] == ("evict_first" if config.get("stream") else "")


def test_row_knobs_refused_on_looped_kernels():
    cfg = {"BLOCK_M": 1, "BLOCK_N": 512, "num_warps": 4, "num_stages": 2, "programs": 8}
    for op in ("softmax", "layernorm", "rmsnorm", "row_sum"):
        with pytest.raises(ValueError):
            module_for(op).compile_spec(op, [64, 1100], "fp16", defaults(op, {}), cfg, TARGETS["sm_90"])


def test_row_anchor_spaces():
    best = {"softmax": (1, 4096, 4), "layernorm": (2, 4096, 8), "rmsnorm": (1, 4096, 8), "row_sum": (1, 1024, 8)}
    for op, dtype in ROW_OPS.items():
        mod, params = module_for(op), defaults(op, {})
        for tg in (TARGETS["sm_90"], H200_FULL):  # compute_units from the target, or by arch
            space = mod.config_space(op, [16384, 4096], dtype, params, tg)
            assert 24 <= len(space) <= 48, (op, len(space))
            # rmsnorm: three two-pass tiles with the l2hint knob lead (the measured best:
            # one row in 2048-chunks on 8 warps); the others start with their one-pass best
            lead = 3 if op == "rmsnorm" else 0
            if lead:
                assert space[0] == {"BLOCK_M": 1, "BLOCK_N": 2048, "num_warps": 8, "num_stages": 1,
                                    "l2hint": 1}
                assert all(c.get("l2hint") == 1 and c["BLOCK_N"] < 4096 for c in space[:lead])
            # the one-pass best next, exactly as before (no knobs), its streaming twin next
            assert space[lead] == dict(zip(("BLOCK_M", "BLOCK_N", "num_warps"), best[op]), num_stages=1)
            assert space[lead + 1] == dict(space[lead], stream=1)
            persistent = [c for c in space if "programs" in c]
            assert len(persistent) >= 6 and persistent[0]["num_stages"] == 2 and persistent[0] in space[:lead + 6]
            assert all(c["BLOCK_N"] >= 4096 and c["programs"] <= 132 * 16 for c in persistent)
    # no SM count known: no persistent configs, the rest unchanged
    unknown = {"backend": "cuda", "arch": "sm_100", "warp_size": 32}
    space = module_for("rmsnorm").config_space("rmsnorm", [16384, 4096], "bf16", {}, unknown)
    assert space and not any("programs" in c for c in space)
    # the grid of a persistent config splits the row blocks evenly
    c = next(c for c in module_for("rmsnorm").config_space("rmsnorm", [16384, 4096], "bf16", {}, H200_FULL)
             if "programs" in c)
    assert 16384 % c["programs"] == 0 and c["programs"] <= 132 * 4


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_row_knobs_cross_compile(target):
    # one persistent + streaming config per op on sm_90 (cp.async row pipeline,
    # streaming stores); one op per AMD target
    tg = TARGETS[target]
    ops = list(ROW_OPS) if target == "sm_90" else \
        [{"gfx90a": "softmax", "gfx942": "layernorm", "gfx950": "rmsnorm", "gfx1100": "row_sum"}[target]]
    for op in ops:
        dtype, mod, params = ROW_OPS[op], module_for(op), defaults(op, {})
        config = next(c for c in mod.config_space(op, [16384, 4096], dtype, params, tg)
                      if "programs" in c and c["num_stages"] == 2)
        spec = mod.compile_spec(op, [16384, 4096], dtype, params, config, tg)
        assert spec["grid"][0] == config["programs"] < 16384
        compiled = common.cross_compile(spec, tg)
        assert compiled.metadata.num_warps == config["num_warps"]
        assert compiled.metadata.shared <= common.shared_limit(tg)
        if tg["backend"] == "hip":
            _, machine, flags = elf_header(compiled.asm["hsaco"])
            assert machine == 224 and flags & 0xFF == GFX_MACH[target]
        else:
            ptx = compiled.asm["ptx"]
            assert "cp.async" in ptx, "row loop not software-pipelined"
            if op != "row_sum":
                assert "st.global.cs" in ptx
    if target == "sm_90":  # streaming, not persistent: evict-first loads
        cfg = {"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 8, "num_stages": 1, "stream": 1}
        spec = module_for("rmsnorm").compile_spec("rmsnorm", [16384, 4096], "bf16", {}, cfg, tg)
        assert "evict_first" in common.cross_compile(spec, tg).asm["ptx"]


# ---------------------------------------------------------------------------
# matmul / gemm_bias_act: the persistent variant (config knob `persistent`,
# programs per SM; proposed on sm_90 only)
# ---------------------------------------------------------------------------

_GEMM_ANCHORS = {"matmul": [([4096, 4096, 4096], {}), ([8192, 8192, 8192], {})],
                 "gemm_bias_act": [([8192, 4096, 4096], {"activation": "gelu"})]}


# (op, shape, dtype, params): K % BLOCK_K != 0 and EVEN_K, several tile-row
# groups (GROUP_M 2), more tiles than programs (the interpreter launches 2 x
# `persistent` programs), so every program walks several tiles.
_PERSISTENT_CASES = [
    ("matmul", [37, 45, 50], "bf16", {}),
    ("matmul", [40, 24, 64], "fp16", {}),
    ("gemm_bias_act", [37, 45, 50], "bf16", {"activation": "gelu"}),
    ("gemm_bias_act", [33, 70, 32], "fp16", {"activation": "silu"}),
]


@pytest.mark.parametrize("op,shape,dtype,params", _PERSISTENT_CASES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, list) else str(v))
def test_gemm_persistent_interpreted(op, shape, dtype, params):
    params = defaults(op, params)
    for i, per_sm in enumerate((1, 2)):
        config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 4,
                  "num_stages": 3, "persistent": per_sm}
        out, ref = run_case(op, shape, dtype, params, config, seed=i)
        check_close(op, out, ref, dtype)
    # the same numbers as the classic kernel (same tiles, same K order)
    mod = module_for(op)
    inputs = mod.make_inputs(op, shape, dtype, params, 0, "cpu")
    outs = []
    for extra in ({}, {"persistent": 1}):
        out = mod.output_like(op, inputs, params).fill_(float("nan"))
        mod.launch(op, inputs, out, dict({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2,
                                          "num_warps": 4, "num_stages": 3}, **extra), params)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])


def test_gemm_persistent_only_on_sm90_and_spaces():
    for op, cases in _GEMM_ANCHORS.items():
        mod = module_for(op)
        for shape, params in cases:
            params = defaults(op, params)
            for name, tg in TARGETS.items():
                space = mod.config_space(op, shape, "bf16", params, tg)
                persistent = [c for c in space if c.get("persistent")]
                if name != "sm_90":
                    assert not persistent, (op, name)
                    continue
                for t in (tg, H200_FULL):
                    space = mod.config_space(op, shape, "bf16", params, t)
                    assert len(space) <= 64, (op, len(space))
                    persistent = [c for c in space if c.get("persistent")]
                    assert len(persistent) >= 8, (op, len(persistent))
                    # the measured best leads; its persistent twin right after
                    group = 16 if op == "gemm_bias_act" else 8
                    best = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": group,
                            "num_warps": 8, "num_stages": 3}
                    assert space[0] == best and dict(best, num_stages=4) in space[:2]
                    assert dict(best, persistent=1) in space[2:4]
                    for c in persistent:
                        assert mod.shared_bytes(c, "bf16", t) <= common.shared_limit(t)
                        spec = mod.compile_spec(op, shape, "bf16", params, c, t)
                        assert spec["fn"].__name__.endswith("_persistent_kernel")
                        assert spec["grid"] == (132 * c["persistent"], 1, 1)
                        assert "persistent" not in spec["constexprs"]
    # no persistent configs where every program would get a single tile
    space = module_for("matmul").config_space("matmul", [512, 512, 512], "fp16", {}, H200_FULL)
    assert space and not any(c.get("persistent") for c in space)
    # nor where K or N lacks 16-element alignment (no async copies: unpipelined)
    for shape in ([4096, 4096, 4000 + 8], [4096, 4096 + 8, 4096]):
        space = module_for("gemm_bias_act").config_space("gemm_bias_act", shape, "fp16", {}, H200_FULL)
        assert space and not any(c.get("persistent") for c in space)
    # the grid follows the target's SM count
    c = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
         "persistent": 1}
    spec = module_for("matmul").compile_spec("matmul", [4096] * 3, "bf16", {}, c, dict(H200_FULL, compute_units=114))
    assert spec["grid"] == (114, 1, 1)


def test_gemm_persistent_cross_compile_sm90():
    # the first persistent config of each anchor space, and an odd shape (K
    # masked): a cubin, the classic kernel's arguments and no hidden scratch
    # (so the package launch ABI is unchanged), shared memory within the
    # estimate, A and B both pipelined num_stages deep across the flattened loop.
    cases = [(op, shape, params) for op, c in _GEMM_ANCHORS.items() for shape, params in c[:1]]
    cases.append(("gemm_bias_act", [2000, 3072, 1008], {"activation": "relu"}))
    for op, shape, params in cases:
        mod = module_for(op)
        params = defaults(op, params)
        dtype = "bf16" if shape[0] > 2000 else "fp16"
        space = mod.config_space(op, shape, dtype, params, H200_FULL)
        config = next(c for c in space if c.get("persistent"))
        spec = mod.compile_spec(op, shape, dtype, params, config, H200_FULL)
        classic = mod.compile_spec(op, shape, dtype, params,
                                   {k: v for k, v in config.items() if k != "persistent"}, H200_FULL)
        assert [t for t in spec["signature"].values() if t != "constexpr"] == \
            [t for t in classic["signature"].values() if t != "constexpr"]
        compiled = common.cross_compile(spec, H200_FULL)
        assert compiled.metadata.name == spec["fn"].__name__
        _, machine, _ = elf_header(compiled.asm["cubin"])
        assert machine == 190
        assert compiled.metadata.global_scratch_size == 0 and compiled.metadata.profile_scratch_size == 0
        assert compiled.metadata.shared <= mod.shared_bytes(config, dtype, H200_FULL)
        stages = config["num_stages"]
        assert compiled.asm["ttgir"].count(f"memdesc<{stages}x") >= 2, "A and B not both pipelined"


# ---------------------------------------------------------------------------
# attention: the sm_90 knobs q_regs (Q kept in registers) and maxnreg
# ---------------------------------------------------------------------------

def _attention_run(shape, dtype, params, config, seed=0):
    mod = module_for("attention")
    inputs = mod.make_inputs("attention", shape, dtype, params, seed, "cpu")
    out = mod.output_like("attention", inputs, params).fill_(float("nan"))
    mod.launch("attention", inputs, out, config, params)
    return out, mod.reference("attention", upcast(inputs, dtype), params)


@pytest.mark.parametrize("shape,causal,dtype", [([1, 2, 37, 16], True, "bf16"), ([1, 2, 37, 16], False, "fp16"),
                                                ([2, 1, 50, 32], True, "fp16"), ([2, 1, 50, 32], False, "bf16")])
def test_attention_nv_knobs_match_plain(shape, causal, dtype):
    # q_regs is an exact no-op on Q (bit-identical output); maxnreg is a compile
    # option the interpreter never sees. Odd S: masked rows / keys in both stages.
    params = defaults("attention", {"causal": causal})
    plain = {"BLOCK_M": 32, "BLOCK_N": 16, "GROUP_H": 8, "num_warps": 4, "num_stages": 2}
    out0, ref = _attention_run(shape, dtype, params, plain)
    out1, _ = _attention_run(shape, dtype, params, dict(plain, q_regs=1, maxnreg=128))
    check_close("attention", out1, ref, dtype)
    assert torch.equal(out0, out1)


def test_attention_anchor_spaces_with_knobs():
    mod = module_for("attention")
    shape, dtype, params = ANCHORS["attention"]
    params = defaults("attention", params)
    h200 = mod.config_space("attention", shape, dtype, params, TARGETS["sm_90"])
    assert 12 <= len(h200) <= 32
    tile = lambda c: (c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"])  # noqa: E731
    # the measured best (64 x 64 / 4 warps / 3 stages) right after its Q-in-registers variant
    assert tile(h200[0]) == tile(h200[1]) == (64, 64, 4, 3)
    assert h200[0].get("q_regs") == 1 and set(h200[1]) == {"BLOCK_M", "BLOCK_N", "GROUP_H", "num_warps",
                                                            "num_stages"}
    knobbed = [c for c in h200 if {"q_regs", "maxnreg", "tma"} & c.keys()]
    assert 5 <= len(knobbed) <= 10 and all(h200.index(c) < 10 for c in knobbed)
    # the TMA variants of the two best measured tiles, right behind them
    assert h200[2] == dict(h200[1], tma=1)
    assert sorted(tile(c) for c in h200 if c.get("tma")) == [(64, 64, 4, 3), (128, 64, 8, 3)]
    assert not any(c.get("q_regs") and c.get("maxnreg") for c in h200)  # that pair spills
    for target in ("gfx942", "gfx90a", "gfx1100"):
        for c in mod.config_space("attention", shape, dtype, params, TARGETS[target]):
            assert not {"q_regs", "maxnreg", "tma"} & c.keys()
    assert len(mod.config_space("attention", shape, dtype, params, TARGETS["gfx942"])) == 128
    # other NVIDIA archs / D = 256: no knobs
    sm80 = dict(TARGETS["sm_90"], arch="sm_80")
    for tg, shp in ((sm80, shape), (TARGETS["sm_90"], [1, 4, 2048, 256])):
        assert not any({"q_regs", "maxnreg", "tma"} & c.keys()
                       for c in mod.config_space("attention", shp, dtype, params, tg))
    # options / constexprs: maxnreg only on cuda, q_regs -> Q_REGS
    cfg = dict(h200[0], maxnreg=128)
    spec_nv = mod.compile_spec("attention", shape, dtype, params, cfg, TARGETS["sm_90"])
    assert spec_nv["options"]["maxnreg"] == 128 and spec_nv["constexprs"]["Q_REGS"] is True
    assert "q_regs" not in spec_nv["constexprs"] and "maxnreg" not in spec_nv["constexprs"]
    spec_amd = mod.compile_spec("attention", shape, dtype, params, cfg, TARGETS["gfx942"])
    assert "maxnreg" not in spec_amd["options"]
    assert mod.compile_spec("attention", shape, dtype, params, h200[1], TARGETS["sm_90"])["constexprs"]["Q_REGS"] is False


def test_attention_nv_knobs_cross_compile_sm90():
    # Q in registers: q @ k^T is a register-A wgmma (m64n64k16 with {a0..a3});
    # maxnreg reaches ptxas (.maxnreg); no global scratch (the packaged launch
    # passes 0); shared memory as estimated. ptxas -v (the worker's resource
    # report): no spills.
    import re
    sys.path.insert(0, os.path.join(ROOT, "worker"))
    from kiln_worker import resources
    mod = module_for("attention")
    shape, dtype, params = ANCHORS["attention"]
    params = defaults("attention", params)
    tg = TARGETS["sm_90"]
    space = mod.config_space("attention", shape, dtype, params, tg)
    q_regs = next(c for c in space if c.get("q_regs") and c["BLOCK_N"] == 64)
    capped = next(c for c in space if c.get("maxnreg"))
    for config in (q_regs, capped):
        compiled = common.cross_compile(mod.compile_spec("attention", shape, dtype, params, config, tg), tg)
        md, ptx = compiled.metadata, compiled.asm["ptx"]
        assert md.global_scratch_size == 0 and md.profile_scratch_size == 0
        assert md.shared <= mod.shared_estimate(config, dtype, shape[-1], tg)
        qk = [l for l in ptx.splitlines() if f"wgmma.mma_async.sync.aligned.m64n{config['BLOCK_N']}k16" in l]
        assert qk
        a_in_regs = [re.search(r"\}, \{%r", l) is not None for l in qk]
        assert all(a_in_regs) == bool(config.get("q_regs")) and any(a_in_regs) == bool(config.get("q_regs"))
        assert (f".maxnreg {config.get('maxnreg')}\n" in ptx) == bool(config.get("maxnreg"))
        rep = resources.cubin_report(compiled.asm["cubin"], md.name, ptx=ptx, arch="sm_90")
        if rep.get("spills") is not None:
            assert rep["spills"] == 0, (config, rep)
            assert rep["registers"] <= config.get("maxnreg", 255)


@pytest.mark.parametrize("shape,causal,dtype", [([1, 2, 37, 16], True, "bf16"), ([2, 1, 50, 32], False, "fp16"),
                                                ([1, 3, 64, 32], True, "fp16")])
def test_attention_tma_matches_plain(shape, causal, dtype):
    """`tma`: tensor-descriptor loads and store, one box per head; rows past S
    (odd S: the last query block and the last key block are partial) load as
    zeros and are not stored -- the same output as the pointer kernel."""
    params = defaults("attention", {"causal": causal})
    plain = {"BLOCK_M": 32, "BLOCK_N": 16, "GROUP_H": 8, "num_warps": 4, "num_stages": 2}
    out0, ref = _attention_run(shape, dtype, params, plain, seed=2)
    out1, _ = _attention_run(shape, dtype, params, dict(plain, tma=1), seed=2)
    check_close("attention", out1, ref, dtype)
    assert torch.equal(out0, out1)


def test_attention_tma_cross_compiles_sm90():
    """On sm_90 `tma` compiles to TMA loads / stores (cp.async.bulk.tensor) with
    global scratch for the descriptors, fewer registers than the pointer
    kernel, and shared memory as estimated."""
    sys.path.insert(0, os.path.join(ROOT, "worker"))
    from kiln_worker import resources
    mod = module_for("attention")
    shape, dtype, params = ANCHORS["attention"]
    params = defaults("attention", params)
    tg = TARGETS["sm_90"]
    base = {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_H": 8, "num_warps": 4, "num_stages": 3}
    regs = {}
    for tma in (0, 1):
        config = dict(base, tma=1) if tma else base
        compiled = common.cross_compile(mod.compile_spec("attention", shape, dtype, params, config, tg), tg)
        md, ptx = compiled.metadata, compiled.asm["ptx"]
        assert ("cp.async.bulk.tensor" in ptx) == bool(tma)
        assert (md.global_scratch_size > 0) == bool(tma)
        assert md.shared == mod.shared_estimate(config, dtype, shape[-1], tg)
        regs[tma] = resources.cubin_report(compiled.asm["cubin"], md.name, ptx=ptx, arch="sm_90")["registers"]
    assert regs[1] < regs[0] - 20


class _Stand:
    """A tensor as Triton's specialisation sees it: dtype, address, extent."""

    def __init__(self, dtype, nbytes):
        self.dtype, self.nbytes = dtype, nbytes

    def data_ptr(self):
        return 0

    def ptr_range(self):
        return self.nbytes


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_spec_attrs_are_the_jits(backend):
    """common.spec builds the signature, constexprs and attrs Triton's JIT
    builds at launch (JITFunction._pack_args over its native specialisation),
    in the same order: Triton's cache key contains str(attrs), so a difference
    makes the worker's first launch compile the kernel a second time, and for
    an AMD target the code object would not be the one the JIT builds there
    (tt.pointer_range 32 on tensors within 2 GiB: buffer loads and stores).
    An int equal to 1 becomes the constexpr 1, as in the JIT."""
    import triton
    import triton.language as tl
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    @triton.jit
    def k(x_ptr, out_ptr, n_aligned, n_odd, scale, BLOCK: tl.constexpr, POLICY: tl.constexpr,
          n_big, y_ptr, n_one, big_ptr):
        pass

    runtime = [("x_ptr", "*bf16", 4096), ("out_ptr", "*fp32", 2 ** 31 - 1), ("n_aligned", "i32", 4096),
               ("n_odd", "i32", 300), ("scale", "fp32", 0.5), ("n_big", "i32", 2 ** 40),
               ("y_ptr", "*fp16", None), ("n_one", "i32", 1), ("big_ptr", "*fp16", 2 ** 31)]
    constexprs = {"BLOCK": 128, "POLICY": "evict_first"}
    target = TARGETS["gfx942"] if backend == "hip" else TARGETS["sm_90"]
    spec = common.spec(k, runtime, constexprs, {"num_warps": 4}, (1,), target)

    jit = HIPBackend if backend == "hip" else BaseBackend
    dtypes = {"*bf16": torch.bfloat16, "*fp32": torch.float32, "*fp16": torch.float16}
    # a pointer of unknown size (None) is specialised as one past 2 GiB would be
    values = {n: (_Stand(dtypes[t], 2 ** 33 if v is None else v) if t.startswith("*") else v)
              for n, t, v in runtime}
    jit_attrs, jit_sig, jit_consts = {}, {}, dict(constexprs)
    for i, name in enumerate(spec["fn"].arg_names):
        if name in constexprs:
            ty, desc = "constexpr", constexprs[name]
        else:
            ty, desc = native_specialize_impl(jit, values[name], False, True, True)
            if ty == "constexpr":
                jit_consts[name] = desc
        jit_sig[name] = ty
        if isinstance(desc, str):
            jit_attrs[(i,)] = jit.parse_attr(desc)
    assert str(spec["attrs"]) == str(jit_attrs)
    assert spec["signature"] == jit_sig
    assert spec["constexprs"] == jit_consts
    ranged = [spec["fn"].arg_names[i] for (i,), a in spec["attrs"].items() if ["tt.pointer_range", 32] in a]
    assert ranged == (["x_ptr", "out_ptr"] if backend == "hip" else [])


def test_amd_code_objects_use_buffer_ops_within_2gib():
    """An add cross-compiled for MI300X loads and stores through buffer
    instructions when its tensors are within 2 GiB (as the JIT would build it
    on the GPU), and through global ones past that."""
    mod = module_for("add")
    tg = TARGETS["gfx942"]
    asm = {}
    for n in (1 << 20, (1 << 29) + 1024):  # 4 MiB; just past 2 GiB of fp32
        config = mod.config_space("add", [n], "fp32", {}, tg)[0]
        asm[n] = common.cross_compile(mod.compile_spec("add", [n], "fp32", {}, config, tg), tg).asm["amdgcn"]
    small, big = asm[1 << 20], asm[(1 << 29) + 1024]
    assert "buffer_load" in small and "global_load" not in small
    assert "buffer_load" not in big and "global_load" in big


@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("knobs", [{}, {"l2hint": 1}], ids=["plain", "l2hint"])
def test_two_pass_row_kernels_several_rows(op, knobs):
    """The looped (two-pass) row kernels with several rows per program and the
    l2hint knob (evict_last on the first read, evict_first on the second):
    the same result as the reference, the last row block partly past the end."""
    shape = [5, 1100]
    params = defaults(op, {})
    for dtype in ("fp32", "bf16"):
        config = {"BLOCK_M": 2, "BLOCK_N": 256, "num_warps": 2, "num_stages": 1, **knobs}
        out, ref = run_case(op, shape, dtype, params, config, seed=3)
        check_close(op, out, ref, dtype)
        spec = module_for(op).compile_spec(op, shape, dtype, params, config, TARGETS["sm_90"])
        want = ("evict_last", "evict_first") if knobs else ("", "")
        assert (spec["constexprs"]["FIRST_POLICY"], spec["constexprs"]["SECOND_POLICY"]) == want


def test_attention_register_hints():
    """attention.hints: the per-thread register estimate the config model uses
    (ptxas on sm_90: 177 at 64 x 64 / 4 warps, D = 128; 195 with q_regs),
    capped by maxnreg, and larger for larger score tiles per thread."""
    mod = module_for("attention")
    shape, params, tg = [4, 32, 2048, 128], defaults("attention", {"causal": True}), TARGETS["sm_90"]
    base = {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_H": 8, "num_warps": 4, "num_stages": 3}
    r = mod.hints("attention", shape, "bf16", params, base, tg)["registers"]
    assert 165 <= r <= 190
    q = mod.hints("attention", shape, "bf16", params, dict(base, q_regs=1), tg)["registers"]
    assert r < q <= 200
    capped = mod.hints("attention", shape, "bf16", params, dict(base, maxnreg=128), tg)["registers"]
    assert capped == 128
    wide = mod.hints("attention", shape, "bf16", params, dict(base, BLOCK_N=128), tg)["registers"]
    assert wide > r
    # every config of the H200 space gets one, through the worker's space method
    sys.path.insert(0, os.path.join(ROOT, "worker"))
    from kiln_worker.evaluate import space_hints
    configs = mod.config_space("attention", shape, "bf16", params, tg)
    hints = space_hints(mod, "attention", shape, "bf16", params, configs, tg)
    assert hints and all(0 < h["registers"] <= 255 and "grid" in h for h in hints)


def test_row_hints_bytes_in_flight():
    """The row templates' hints() for the config model: bytes one program has
    loading at a time -- whole rows one-pass (times the pipeline depth of a
    persistent grid), one chunk looped -- for every config of the H200 spaces."""
    shape, tg = [16384, 4096], TARGETS["sm_90"]
    c = common.row_hints
    assert c({"BLOCK_M": 2, "BLOCK_N": 4096, "num_warps": 8, "num_stages": 1}, shape, "bf16") == \
        {"bytes_in_flight": 2 * 4096 * 2}
    assert c({"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 4, "num_stages": 3, "programs": 512}, shape, "bf16") == \
        {"bytes_in_flight": 4096 * 2 * 2}
    assert c({"BLOCK_M": 4, "BLOCK_N": 512, "num_warps": 4, "num_stages": 1}, shape, "fp32") == \
        {"bytes_in_flight": 4 * 512 * 4}
    # a row shorter than its padded tile: the row's bytes
    assert c({"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 4, "num_stages": 1}, [8, 3000], "fp32") == \
        {"bytes_in_flight": 3000 * 4}
    ew = module_for("add")
    assert ew.hints("add", [1 << 20], "fp32", {}, {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}, tg) == \
        {"bytes_in_flight": 2 * 1024 * 4}
    assert ew.hints("bias_gelu", [64, 256], "bf16", {}, {"BLOCK_M": 4, "BLOCK_N": 128, "num_warps": 4,
                                                        "num_stages": 1}, tg) == {"bytes_in_flight": 5 * 128 * 2}
    for op, dtype in ROW_OPS.items():
        mod, params = module_for(op), defaults(op, {})
        for config in mod.config_space(op, shape, dtype, params, tg):
            h = mod.hints(op, shape, dtype, params, config, tg)
            assert h["bytes_in_flight"] >= config["BLOCK_M"] * min(config["BLOCK_N"], 4096) * \
                common.element_bytes(dtype) > 0
