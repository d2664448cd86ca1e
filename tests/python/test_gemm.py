"""matmul and gemm_bias_act (kernels/matmul.py, gemm_epilogue.py): the GELU
forms and the persistent variant (interpreted, its spaces, cross-compiled for
sm_90).

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_gemm.py -q
"""

import pytest
import torch

from kernels import common
from kernel_testing import (H200_FULL, INTERPRETED, TARGETS, check_close, defaults, elf_header,
                            module_for, run_case, upcast)

pytestmark = INTERPRETED


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
