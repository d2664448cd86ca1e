"""Tests for the template families structural retrieval added: bmm, pool2d, norm_dim, scaled_softmax and
log_softmax (softmax_variants), cumsum (scan), reduce_dim, pointwise (a
generated kernel).

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_kernels_structural.py -q

Correctness under the Triton interpreter on small, odd shapes (masking, the
looped / chunked kernels) with outputs poisoned first, against the torch
reference in float64 (fp32) or float32 (half); each family's config-space rules
on every test target; cross-compilation to hsaco and cubin with ELF headers
checked.
"""

import pytest
import torch

from kernels import common
from kernel_testing import (AMD_KNOBS, GFX_MACH, INTERPRETED, REGISTRY, TARGETS, checked_space,
                            defaults, elf_header, module_for, upcast)

pytestmark = INTERPRETED

SWIGLU = {"expr": "(mul (silu x0) x1)", "inputs": "full,full"}
BIAS_TANH = {"expr": "(gelu_tanh (add x0 x1))", "inputs": "full,row"}
SELU = {"expr": "(elu x0 1.6732632423543772 1.0507009873554805 1.0)", "inputs": "full"}
ROWSCALE_SOFTPLUS = {"expr": "(add (mul (softplus x0 1.0 20.0) x1) 0.25)", "inputs": "full,col"}
SOFTSIGN = {"expr": "(mul x0 (reciprocal (add (abs x0) 1.0)))", "inputs": "full"}
CLAMPS = {"expr": "(clamp (leaky_relu x0 0.1) none 0.5)", "inputs": "full"}
HARD = {"expr": "(add (hardsigmoid x0) (hardswish x0) (tanh x0) (gelu x0))", "inputs": "full"}
LOGS = {"expr": "(log (add (sqrt x0) (pow x0 1.5)))", "inputs": "full"}

CASES = [  # op, shape, params, which configs (all: every config; else the first n)
    ("scaled_softmax", [5, 70], {"scale": 2.0}, None),
    ("scaled_softmax", [3, 1500], {"scale": -0.3}, 12),
    ("log_softmax", [7, 33], {"scale": 1.0}, None),
    ("log_softmax", [2, 9000], {"scale": 0.5}, 6),
    ("cumsum", [6, 50], {}, None),
    ("cumsum", [3, 700], {}, None),
    ("cumprod", [4, 30], {}, None),
    ("cumprod", [2, 600], {}, 4),
    ("reduce_dim", [3, 50, 1], {"kind": "sum"}, None),
    ("reduce_dim", [2, 300, 5], {"kind": "mean"}, None),
    ("reduce_dim", [4, 7, 40], {"kind": "amax"}, None),
    ("reduce_dim", [1, 129, 3], {"kind": "amin"}, None),
    ("reduce_dim", [2, 300, 5], {"kind": "argmax"}, None),
    ("reduce_dim", [5, 77, 1], {"kind": "argmin"}, None),
    ("bmm", [1, 33, 47, 70], {}, 2),
    ("bmm", [1, 33, 47, 70], {"trans_b": True}, 2),
    ("bmm", [3, 16, 20, 64], {"trans_a": True}, 2),
    ("bmm", [2, 40, 1, 50], {"trans_a": True, "trans_b": True}, 2),
    ("pool2d", [2, 3, 9, 11], {"kind": "max", "kernel_h": 3, "kernel_w": 3, "stride_h": 2, "stride_w": 2,
                               "pad_h": 1, "pad_w": 1}, 3),
    ("pool2d", [1, 4, 1, 40], {"kind": "max", "kernel_h": 1, "kernel_w": 8, "stride_h": 1, "stride_w": 1,
                               "pad_w": 4, "dilation_w": 3}, 3),
    ("pool2d", [2, 2, 12, 12], {"kind": "avg", "kernel_h": 5, "kernel_w": 5, "stride_h": 5, "stride_w": 5}, 3),
    ("norm_dim", [2, 33, 5], {"kind": "rms", "eps": 1e-5}, 3),
    ("norm_dim", [7, 300, 1], {"kind": "l2"}, 3),
    ("norm_dim", [1, 999, 1], {"kind": "l2"}, 3),
    ("norm_dim", [3, 20, 40], {"kind": "l1mean"}, 3),
    ("pointwise", [5, 77], SWIGLU, None),
    ("pointwise", [9, 40], BIAS_TANH, 3),
    ("pointwise", [4, 33], SELU, 3),
    ("pointwise", [6, 21], ROWSCALE_SOFTPLUS, 3),
    ("pointwise", [3, 50], SOFTSIGN, 3),
    ("pointwise", [3, 50], CLAMPS, 3),
    ("pointwise", [3, 50], HARD, 3),
    ("pointwise", [3, 50], LOGS, 3),
]


def _tol(dtype):
    return {"fp32": (1e-5, 1e-4), "fp16": (2e-3, 1e-2), "bf16": (1e-2, 2e-2)}[dtype]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2].get('kind', c[2].get('expr', ''))[:20]}")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_matches_reference(case, dtype):
    _matches_reference(case, dtype)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("bmm", "reduce_dim", "scaled_softmax")][::2],
                         ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}")
def test_matches_reference_fp16(case):
    _matches_reference(case, "fp16")


def _matches_reference(case, dtype):
    op, shape, params, first = case
    params = defaults(op, params)
    mod = module_for(op)
    space = mod.config_space(op, shape, dtype, params, TARGETS["sm_90"])
    assert space
    configs = space if first is None else space[:first] + space[-1:]
    for seed, config in enumerate(configs):
        inputs = mod.make_inputs(op, shape, dtype, params, seed, "cpu")
        before = {k: v.clone() for k, v in inputs.items()}
        out = mod.output_like(op, inputs, params)
        out.fill_(float("nan") if out.is_floating_point() else -7)
        mod.launch(op, inputs, out, config, params)
        for k in inputs:
            assert torch.equal(inputs[k], before[k]), f"{op} modified {k}"
        ref = mod.reference(op, upcast(inputs, dtype), params)
        assert out.shape == ref.shape
        if not ref.is_floating_point():
            assert out.dtype == torch.int64
            assert torch.equal(out, ref), (config, out, ref)
            continue
        atol, rtol = _tol(dtype)
        got = out.to(ref.dtype)
        assert not torch.isnan(got).any(), config
        bad = (got - ref).abs() > atol + rtol * ref.abs()
        assert not bad.any(), (config, float((got - ref).abs().max()))


def test_reference_is_torch():
    """The references are the torch computations they claim (a check of the
    templates' own reference, independent of the kernels)."""
    x = torch.randn(4, 9, dtype=torch.float64)
    sv = module_for("scaled_softmax")
    assert torch.allclose(sv.reference("scaled_softmax", {"x": x}, {"scale": 0.5}), torch.softmax(x / 2, -1))
    assert torch.allclose(sv.reference("log_softmax", {"x": x}, {"scale": 1.0}), torch.log_softmax(x, -1))
    pw = module_for("pointwise")
    a, b = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    assert torch.allclose(pw.reference("pointwise", {"x0": a, "x1": b}, SWIGLU), torch.nn.functional.silu(a) * b)
    assert torch.allclose(pw.reference("pointwise", {"x0": a}, SELU), torch.selu(a))
    bias = torch.randn(5, dtype=torch.float64)
    assert torch.allclose(pw.reference("pointwise", {"x0": a, "x1": bias}, BIAS_TANH),
                          torch.nn.functional.gelu(a + bias, approximate="tanh"))


@pytest.mark.parametrize("bad", ["", "(mul x0", "(frobnicate x0)", "(mul x0 x9)", "(relu x0 x0)", "x0 x1"])
def test_pointwise_rejects_bad_expressions(bad):
    pw = module_for("pointwise")
    with pytest.raises(ValueError, match="pointwise"):
        pw.config_space("pointwise", [4, 4], "fp32", {"expr": bad, "inputs": "full,full"}, TARGETS["sm_90"])


def test_pointwise_kernel_is_generated_per_expression(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_POINTWISE_DIR", str(tmp_path))
    pw = module_for("pointwise")
    k1 = pw.kernel({"expr": "(relu x0)", "inputs": "full"})
    k2 = pw.kernel({"expr": "(sigmoid x0)", "inputs": "full"})
    assert k1 is not k2
    assert pw.kernel({"expr": "(relu x0)", "inputs": "full"}) is k1
    src = pw.kernel_source({"expr": "(mul (silu x0) x1)", "inputs": "full,row"})
    assert "v1 = tl.load(x1_ptr + col" in src and "v0 = tl.load(x0_ptr + offs" in src


SPACE_CASES = [
    ("scaled_softmax", [4096, 4096], {"scale": 0.5}),
    ("log_softmax", [128, 50000], {}),
    ("cumsum", [1024, 32768], {}),
    ("reduce_dim", [16, 4096, 256], {"kind": "argmax"}),
    ("reduce_dim", [4096, 4096, 1], {"kind": "sum"}),
    ("pointwise", [4096, 4096], SWIGLU),
    ("bmm", [1, 4096, 4096, 4096], {"trans_b": True}),
    ("bmm", [16, 512, 1024, 64], {}),
    ("bmm", [1, 2048, 1, 4096], {}),
    ("pool2d", [16, 64, 2048, 2048], {"kind": "avg", "kernel_h": 11, "kernel_w": 11, "stride_h": 11, "stride_w": 11}),
]


@pytest.mark.parametrize("case", SPACE_CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_config_space_rules(case, target):
    op, shape, params = case
    params = defaults(op, params)
    mod = module_for(op)
    for dtype in REGISTRY[op]["dtypes"]:
        checked_space(mod, op, shape, dtype, params, TARGETS[target], target)
    t = mod.traffic(op, shape, REGISTRY[op]["dtypes"][0], params)
    assert t["bytes"] > 0 and t["flops"] > 0


COMPILE_CASES = [
    ("scaled_softmax", [4096, 4096], "bf16", {"scale": 0.5}, "scaled_softmax_kernel"),
    ("log_softmax", [64, 50000], "fp32", {}, "scaled_softmax_online_kernel"),
    ("cumsum", [1024, 1000], "fp16", {}, "cumsum_kernel"),
    ("reduce_dim", [16, 1000, 64], "fp32", {"kind": "argmax"}, "reduce_dim_kernel"),
    ("reduce_dim", [4096, 4096, 1], "bf16", {"kind": "mean"}, "reduce_dim_kernel"),
    ("pointwise", [4096, 4096], "bf16", SWIGLU, "pointwise_kernel"),
    ("bmm", [1, 4096, 4096, 4096], "fp32", {"trans_b": True}, "bmm_kernel"),
    ("bmm", [8, 1000, 300, 64], "bf16", {"trans_a": True}, "bmm_kernel"),
    ("pool2d", [32, 64, 512, 512], "fp16", {"kind": "max", "kernel_h": 4, "kernel_w": 4, "stride_h": 1,
                                            "stride_w": 1, "pad_h": 1, "pad_w": 1}, "pool2d_kernel"),
    ("pointwise", [1000, 3000], "fp32", HARD, "pointwise_kernel"),
]


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}")
@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_cross_compile(case, target):
    op, shape, dtype, params, name = case
    params = defaults(op, params)
    mod = module_for(op)
    tg = TARGETS[target]
    space = mod.config_space(op, shape, dtype, params, tg)
    config = [c for c in space if name != "scaled_softmax_online_kernel" or c["BLOCK_N"] < shape[1]][0]
    spec = mod.compile_spec(op, shape, dtype, params, config, tg)
    assert spec["fn"].__name__ == name
    assert list(spec["signature"]) == spec["fn"].arg_names
    compiled = common.cross_compile(spec, tg)
    assert compiled.metadata.name == name
    assert compiled.metadata.num_warps == config["num_warps"]
    if tg["backend"] == "hip":
        osabi, machine, flags = elf_header(compiled.asm["hsaco"])
        assert machine == 224 and flags & 0xFF == GFX_MACH[target]
        for knob in AMD_KNOBS & config.keys():
            assert getattr(compiled.metadata, knob) == config[knob]
    else:
        _, machine, _ = elf_header(compiled.asm["cubin"])
        assert machine == 190 and "sm_90" in compiled.asm["ptx"]
