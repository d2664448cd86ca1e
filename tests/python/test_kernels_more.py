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

import importlib
import math
import os
import struct
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from kernels import common  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="kernel tests run under TRITON_INTERPRET=1")

REGISTRY = yaml.safe_load(open(os.path.join(ROOT, "kernels", "operators.yaml")))["operators"]
NEW_OPS = ["rmsnorm", "row_sum", "row_mean", "row_max", "gemm_bias_act", "attention"]

TARGETS = {
    "gfx90a": {"name": "MI250X", "backend": "hip", "arch": "gfx90a", "warp_size": 64},
    "gfx942": {"name": "MI300X", "backend": "hip", "arch": "gfx942", "warp_size": 64},
    "gfx950": {"name": "MI355X", "backend": "hip", "arch": "gfx950", "warp_size": 64},
    "gfx1100": {"name": "RX7900XTX", "backend": "hip", "arch": "gfx1100", "warp_size": 32},
    "sm_90": {"name": "H200", "backend": "cuda", "arch": "sm_90", "warp_size": 32},
}
GFX_MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx950": 0x4F, "gfx1100": 0x41}
AMD_KNOBS = {"waves_per_eu", "matrix_instr_nonkdim", "kpack"}

# Anchor shapes (shared/anchors.md): spaces and compiles only, never run here.
ANCHORS = {
    "rmsnorm": ([16384, 4096], "bf16", {}),
    "row_sum": ([16384, 4096], "fp32", {}),
    "row_mean": ([16384, 4096], "bf16", {}),
    "row_max": ([16384, 4096], "fp16", {}),
    "gemm_bias_act": ([8192, 4096, 4096], "bf16", {"activation": "gelu"}),
    "attention": ([4, 32, 2048, 128], "bf16", {"causal": True}),
}


def module_for(op):
    return importlib.import_module("kernels." + REGISTRY[op]["module"])


def defaults(op, params):
    out = {k: v["default"] for k, v in REGISTRY[op]["params"].items() if "default" in v}
    out.update(params)
    return out


def upcast(inputs, dtype):
    wide = torch.float64 if dtype == "fp32" else torch.float32
    return {k: v.to(wide) for k, v in inputs.items()}


def check_close(op, out, ref, dtype):
    tol = common.tolerance(dtype)
    assert out.shape == ref.shape, (op, out.shape, ref.shape)
    assert not torch.isnan(out).any(), f"{op}: NaN in output (unwritten elements?)"
    # the worker scales atol by the output's rms once it exceeds 1 (sums of many terms)
    atol = tol["atol"] * max(1.0, float(ref.double().pow(2).mean().sqrt()))
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=atol, rtol=tol["rtol"])


def run_case(op, shape, dtype, params, config, seed=0):
    mod = module_for(op)
    inputs = mod.make_inputs(op, shape, dtype, params, seed, "cpu")
    before = {k: v.clone() for k, v in inputs.items()}
    out = mod.output_like(op, inputs, params)
    out.fill_(float("nan"))
    mod.launch(op, inputs, out, config, params)
    for k in inputs:
        assert torch.equal(inputs[k], before[k]), f"{op} modified its input {k}"
    ref = mod.reference(op, upcast(inputs, dtype), params)
    return out, ref


def pick(configs, pred=None):
    """First, middle and last config (of those matching pred)."""
    if pred is not None:
        configs = [c for c in configs if pred(c)]
    assert configs, "no config of the requested kind"
    idx = sorted({0, len(configs) // 2, len(configs) - 1})
    return [configs[i] for i in idx]


def is_pow2(x):
    return x > 0 and x & (x - 1) == 0


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
    mod = module_for("attention")
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
        space = mod.config_space(op, shape, dtype, params, tg)
        assert space, f"empty space for {op} {dtype} on {target}"
        assert space == mod.config_space(op, shape, dtype, params, tg), "order must be deterministic"
        keys = [tuple(sorted(c.items())) for c in space]
        assert len(set(keys)) == len(keys), "duplicate configs"
        for c in space:
            assert {"num_warps", "num_stages"} <= c.keys()
            assert is_pow2(c["num_warps"]) and c["num_warps"] * tg["warp_size"] <= 1024
            for k, v in c.items():
                if k.isupper():
                    assert k.startswith(("BLOCK", "GROUP")) and is_pow2(v), (k, v)
            knobs = AMD_KNOBS & c.keys()
            if tg["backend"] != "hip":
                assert not knobs
            else:
                assert "waves_per_eu" in c
                if target == "gfx1100":
                    assert knobs == {"waves_per_eu"}
                if target == "gfx950":
                    assert c.get("kpack", 1) == 1
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

def elf_header(blob):
    assert blob[:4] == b"\x7fELF", "not an ELF"
    assert blob[4] == 2, "not ELF64"
    e_machine = struct.unpack_from("<H", blob, 18)[0]
    e_flags = struct.unpack_from("<I", blob, 48)[0]
    return blob[7], e_machine, e_flags


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
