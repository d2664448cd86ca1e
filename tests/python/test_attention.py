"""The attention template's Triton kernel (kernels/attention.py,
attention_tiles.py): validation, head groups, the sm_90 knobs q_regs, maxnreg
and TMA against the plain kernel, their compiles and register hints
(the Gluon kernel: test_attention_wgmma.py).

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_attention.py -q
"""

import os
import sys

import pytest
import torch

from kernels import attention_tiles, common
from kernel_testing import (ROOT, ANCHORS, INTERPRETED, TARGETS, check_close, defaults, module_for,
                            run_case, upcast)

pytestmark = INTERPRETED


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
    assert attention_tiles.sm_scale({"sm_scale": 0.0}, 64) == 0.125
    assert attention_tiles.sm_scale({"sm_scale": 0.5}, 64) == 0.5


def test_attention_head_groups_cover_every_block():
    # GROUP_H heads x query blocks, heaviest block first: every (head, block)
    # exactly once, also when B*H is not a multiple of GROUP_H.
    p = defaults("attention", {"causal": True})
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_H": 8, "num_warps": 4, "num_stages": 1}
    out, ref = run_case("attention", [1, 11, 40, 16], "fp16", p, cfg)
    check_close("attention", out, ref, "fp16")


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
    from kiln_worker.codeobject import resources
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
    from kiln_worker.codeobject import resources
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
    from kiln_worker.evaluation.evaluate import space_hints
    configs = mod.config_space("attention", shape, "bf16", params, tg)
    hints = space_hints(mod, "attention", shape, "bf16", params, configs, tg)
    assert hints and all(0 < h["registers"] <= 255 and "grid" in h for h in hints)
