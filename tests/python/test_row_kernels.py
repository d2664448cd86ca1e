"""The row kernels (kernels/softmax.py, layernorm.py, rmsnorm.py, reduce.py):
half-precision sums, masked tails, the `stream` and `programs` knobs, the
two-pass kernels over several rows, their anchor spaces and hints.

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_row_kernels.py -q
"""

import pytest
import torch

from kernels import common
from kernel_testing import (GFX_MACH, H200_FULL, INTERPRETED, TARGETS, check_close, defaults,
                            elf_header, module_for, run_case)

pytestmark = INTERPRETED


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


ROW_OPS = {"softmax": "bf16", "layernorm": "bf16", "rmsnorm": "bf16", "row_sum": "fp32"}


def _knobbed(config):
    return "programs" in config or "stream" in config


@pytest.mark.parametrize("op,shape,config", [
    # 3 programs walking 7 blocks of 2 rows (the last block half empty), pipelined
    ("softmax", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 2, "programs": 3, "stream": 1}),
    ("softmax", [5, 40], {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 2, "num_stages": 1, "stream": 1}),
    ("layernorm", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 2, "num_stages": 3, "programs": 4, "stream": 1}),
    ("rmsnorm", [13, 33], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 2, "programs": 3, "stream": 1}),
    ("rmsnorm", [9, 64], {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 2, "num_stages": 1, "programs": 4}),  # EVEN_N
    ("layernorm", [9, 64], {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2, "programs": 3}),  # EVEN_N
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


@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("knobs", [{}, {"l2hint": 1}], ids=["plain", "l2hint"])
@pytest.mark.parametrize("cols", [1100, 1024], ids=["tail", "even"])
def test_two_pass_row_kernels_several_rows(op, knobs, cols):
    """The looped (two-pass) row kernels with several rows per program and the
    l2hint knob (evict_last on the first read, evict_first on the second):
    the same result as the reference, the last row block partly past the end,
    with a column tail and without one (EVEN_N where the template has it)."""
    shape = [5, cols]
    params = defaults(op, {})
    for dtype in ("fp32", "bf16"):
        config = {"BLOCK_M": 2, "BLOCK_N": 256, "num_warps": 2, "num_stages": 1, **knobs}
        out, ref = run_case(op, shape, dtype, params, config, seed=3)
        check_close(op, out, ref, dtype)
        spec = module_for(op).compile_spec(op, shape, dtype, params, config, TARGETS["sm_90"])
        want = ("evict_last", "evict_first") if knobs else ("", "")
        assert (spec["constexprs"]["FIRST_POLICY"], spec["constexprs"]["SECOND_POLICY"]) == want
        if op != "softmax":
            assert spec["constexprs"]["EVEN_N"] == (cols % 256 == 0)


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
