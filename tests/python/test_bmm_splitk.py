"""bmm's split-K and matrix-vector kernels (kernels/bmm.py).

    TRITON_INTERPRET=1 python3 -m pytest -q tests/python/test_bmm_splitk.py

* correctness in the Triton interpreter against torch in float64, the output
  filled with NaN first (launch must clear it for split-K): split-K configs of
  the tiled kernel and matrix-vector configs (N == 1 and M == 1), every
  trans_a / trans_b combination, batch > 1, K not a multiple of BLOCK_K, and
  splits with empty runs (more runs than K steps);
* what compile_spec declares: the kernel, the grid (blocks x SPLIT_K), and
  zero_before_launch ["c_ptr"] exactly for split-K configs; split-K with half
  dtypes and matrix-vector configs off N == 1 / M == 1 refused;
* config_space: split-K configs first where tiles are few and K long, GEMV
  configs first for N == 1 / M == 1, neither for ordinary GEMMs; the splits
  bring the programs to a few per SM.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from kernels import bmm, common
from kernel_testing import H200_FULL, INTERPRETED, TARGETS

pytestmark = INTERPRETED

H200 = H200_FULL  # with its 132 SMs
FLAGS = [{"trans_a": a, "trans_b": b} for a, b in itertools.product([False, True], repeat=2)]


def _run(shape, dtype, params, config, seed=0):
    """The config's launch on NaN-poisoned output, against torch in float64."""
    inputs = bmm.make_inputs("bmm", shape, dtype, params, seed, "cpu")
    out = bmm.output_like("bmm", inputs, params).fill_(float("nan"))
    assert list(out.shape) == shape[:3]
    bmm.launch("bmm", inputs, out, config, params)
    ref = bmm.reference("bmm", {k: v.double() for k, v in inputs.items()}, params)
    tol = common.tolerance(dtype)
    assert not torch.isnan(out).any(), (shape, params, config)
    torch.testing.assert_close(out.double(), ref, **tol, msg=lambda m: f"{shape} {params} {config}: {m}")


def _tile(bm, bn, bk, split, warps=2, stages=2):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages}


def _gemv(bm, bk, split, warps=2):
    return {"gemv": 1, "BLOCK_M": bm, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps, "num_stages": 2}


@pytest.mark.parametrize("params", FLAGS, ids=lambda p: f"ta{int(p['trans_a'])}tb{int(p['trans_b'])}")
def test_split_k_tiles(params):
    # K = 300: 10 steps of 32 in 4 runs of 3 (the last one 1 step, masked);
    # K = 70 in 8 runs: 3 steps, 5 runs empty; batch 3, rows and columns
    # not multiples of the tile
    _run([3, 40, 24, 300], "fp32", params, _tile(16, 16, 32, 4))
    _run([1, 20, 33, 70], "fp32", params, _tile(16, 32, 32, 8))
    _run([2, 16, 16, 512], "fp32", params, _tile(16, 16, 16, 16))


@pytest.mark.parametrize("params", FLAGS, ids=lambda p: f"ta{int(p['trans_a'])}tb{int(p['trans_b'])}")
def test_matrix_vector(params):
    # N == 1: A is the matrix; M == 1: B^T is. K not a multiple of BLOCK_K,
    # rows not a multiple of BLOCK_M, batch 2, split and not
    for split in (1, 3):
        _run([2, 33, 1, 300], "fp32", params, _gemv(8, 64, split))
        _run([2, 1, 37, 300], "fp32", params, _gemv(16, 32, split))
    _run([1, 1, 1, 100], "fp32", params, _gemv(1, 32, 2, warps=1))  # a dot product
    _run([3, 20, 1, 256], "fp16", params, _gemv(32, 64, 1))
    _run([2, 1, 50, 96], "bf16", params, _gemv(16, 32, 1))


def test_every_space_config_of_small_shapes_is_correct():
    """The spaces' own split-K and GEMV configs (sized for an H200), launched
    in full on shapes small enough for the interpreter."""
    seen = set()
    for shape, params in (([1, 16, 16, 512], {}), ([2, 24, 1, 2100], {"trans_a": True}),
                          ([1, 1, 33, 1000], {"trans_b": True}), ([1, 1, 33, 1000], {})):
        for c in bmm.config_space("bmm", shape, "fp32", params, H200):
            if c.get("gemv") or c.get("SPLIT_K", 1) > 1:
                _run(shape, "fp32", params, c)
                seen.add(("gemv" if c.get("gemv") else "tile", c["SPLIT_K"] > 1))
    assert seen == {("gemv", True), ("gemv", False), ("tile", True)}, seen


def test_compile_spec_declares_the_zeroing_and_the_grid():
    shape = [2, 40, 24, 300]
    spec = bmm.compile_spec("bmm", shape, "fp32", {}, _tile(16, 16, 32, 4), H200)
    assert spec["fn"].__name__ == "bmm_kernel" and spec["zero_before_launch"] == ["c_ptr"]
    assert spec["grid"] == (3 * 2 * 4, 2, 1) and spec["constexprs"]["SPLIT_K"] == 4
    plain = dict(_tile(16, 16, 32, 4))
    del plain["SPLIT_K"]  # the configs of spaces before split-K: the plain kernel
    spec = bmm.compile_spec("bmm", shape, "fp32", {}, plain, H200)
    assert "zero_before_launch" not in spec and spec["grid"] == (6, 2, 1) and spec["constexprs"]["SPLIT_K"] == 1
    spec = bmm.compile_spec("bmm", [2, 1, 37, 300], "fp32", {"trans_b": True}, _gemv(16, 32, 3), H200)
    assert spec["fn"].__name__ == "bmv_kernel" and spec["zero_before_launch"] == ["c_ptr"]
    assert spec["grid"] == (3 * 3, 2, 1)
    assert spec["constexprs"]["MAT_A"] is False and spec["constexprs"]["MAT_T"] is False  # B stored [N, K]
    spec = bmm.compile_spec("bmm", [2, 33, 1, 300], "fp16", {"trans_a": True}, _gemv(8, 64, 1), H200)
    assert "zero_before_launch" not in spec and spec["grid"] == (5, 2, 1)
    assert spec["constexprs"]["MAT_A"] is True and spec["constexprs"]["MAT_T"] is True  # A stored [K, M]


def test_refusals():
    with pytest.raises(ValueError, match="fp32 only"):
        bmm.compile_spec("bmm", [1, 16, 16, 512], "bf16", {}, _tile(16, 16, 32, 4), H200)
    inputs = bmm.make_inputs("bmm", [1, 16, 16, 512], "fp16", {}, 0, "cpu")
    with pytest.raises(ValueError, match="fp32 only"):
        bmm.launch("bmm", inputs, bmm.output_like("bmm", inputs, {}), _tile(16, 16, 32, 4), {})
    with pytest.raises(ValueError, match="N == 1 or M == 1"):
        bmm.compile_spec("bmm", [1, 16, 2, 512], "fp32", {}, _gemv(16, 32, 1), H200)


def _programs(shape, c, params=None):
    return math.prod(bmm.compile_spec("bmm", shape, "fp32", params or {}, c, H200)["grid"])


def test_space_leads_with_split_k_and_gemv_where_they_pay():
    sms = H200["compute_units"]
    # few tiles, long K (KernelBench's large-K matmul): split-K first, every
    # split config of fp32 only, about 8 programs per SM
    shape = [1, 256, 256, 524288]
    space = bmm.config_space("bmm", shape, "fp32", {}, H200)
    assert space[0].get("SPLIT_K", 1) > 1 and (space[0]["BLOCK_M"], space[0]["BLOCK_N"]) == (128, 64)
    split = [c for c in space if c.get("SPLIT_K", 1) > 1]
    assert len(split) >= 4 and space[:len(split)] == split
    for c in split:
        assert 4 * sms <= _programs(shape, c) <= 16 * sms, c
        assert c["BLOCK_M"] * c["BLOCK_N"] >= 64 * 64, c  # small tiles: no split
    # a shape too small for 64 x 64 tiles: its largest tile splits
    small = [c for c in bmm.config_space("bmm", [1, 32, 32, 1048576], "fp32", {}, H200) if c.get("SPLIT_K", 1) > 1]
    assert small and {(c["BLOCK_M"], c["BLOCK_N"]) for c in small} == {(32, 32)}
    assert len(space) <= 2 * len([c for c in space if "SPLIT_K" not in c])
    assert not [c for c in bmm.config_space("bmm", shape, "fp16", {}, H200) if c.get("SPLIT_K", 1) > 1]
    # matrix-vector (KernelBench's 2048 x 1048576): GEMV configs first, both layouts
    for shape in ([1, 2048, 1, 1048576], [1, 1, 2048, 1048576]):
        for params in FLAGS:
            space = bmm.config_space("bmm", shape, "fp32", params, H200)
            gemv = [c for c in space if c.get("gemv")]
            assert len(gemv) >= 4 and space[:len(gemv)] == gemv, (shape, params)
            assert all(_programs(shape, c, params) >= 2 * sms for c in gemv), (shape, params)
            assert gemv[0]["SPLIT_K"] > 1, (shape, params)
            assert not [c for c in space if not c.get("gemv") and c.get("SPLIT_K", 1) > 1]
            assert {bmm.compile_spec("bmm", shape, "fp32", params, c, H200)["fn"].__name__
                    for c in gemv} == {"bmv_kernel"}
    half = bmm.config_space("bmm", [1, 2048, 1, 1048576], "bf16", {}, H200)
    assert half[0].get("gemv") and all(c.get("SPLIT_K", 1) == 1 for c in half)
    # ordinary GEMMs: as before (no split, no GEMV)
    for shape in ([1, 4096, 4096, 4096], [16, 512, 1024, 64], [1, 8205, 5921, 2949], [1, 256, 256, 64]):
        for t in TARGETS.values():
            space = bmm.config_space("bmm", shape, "fp32", {}, t)
            assert not [c for c in space if "SPLIT_K" in c or "gemv" in c], (shape, t["arch"])
