"""The Gluon warp-specialised attention kernel (kernels/attention_wgmma.py),
and its tiles in the attention template's space (the `ws` configs).

Gluon kernels do not run under the Triton interpreter, so on the CPU this
cross-compiles them for sm_90 (real Triton lowering and ptxas, as the
templates' cubins) and checks what the schedule relies on: a producer warp
and two consumer warpgroups (12 warps with the padding), shared memory of
exactly Q + the K and V rings + barriers, no register spills, and that ptxas
did not serialise the wgmmas. On an sm_90 GPU the kernel is also run against
the fp32 reference on odd shapes (the same checks bench/speed/attention_wgmma.py
makes before it times anything).

    python3 -m pytest tests/python/test_attention_wgmma.py -q
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [p for p in (os.path.join(ROOT, "worker"), ROOT) if p not in sys.path]

import pytest  # noqa: E402
import torch  # noqa: E402

from kernels import attention, attention_tiles, attention_wgmma, common  # noqa: E402
from kernel_testing import TARGETS  # noqa: E402

H200 = TARGETS["sm_90"]


def _cfg(bm=128, bn=128, stages=2, pair=0):
    c = {"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_H": 8, "num_stages": stages}
    if pair:
        c["pair"] = 1
    return c


def _ptxas_report(ptx: str) -> str:
    """ptxas -v of the kernel's PTX with Triton's own ptxas (the one that
    built the cubin), for the spill and serialisation lines."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(90).path
    out = subprocess.run([ptxas, "-arch=sm_90a", "-v", "-", "-o", os.devnull], input=ptx, text=True,
                         capture_output=True, check=True)
    return out.stdout + out.stderr


@pytest.mark.parametrize("bn,stages,causal,dtype,pair", [(128, 2, True, "bf16", 0), (64, 3, True, "fp16", 0),
                                                         (128, 2, False, "bf16", 0), (128, 2, True, "bf16", 1)])
def test_cross_compiles_for_sm90(bn, stages, causal, dtype, pair):
    spec = attention_wgmma.compile_spec([4, 32, 2048, 128], dtype, causal, _cfg(bn=bn, stages=stages, pair=pair),
                                        H200)
    assert spec["grid"] == ((4 * 32 * 16) // (2 if pair else 1), 1, 1)
    compiled = common.cross_compile(spec, H200)
    assert compiled.asm["cubin"][:4] == b"\x7fELF"
    md = compiled.metadata
    assert md.num_warps == 12  # 4 + 4 consumers, 1 producer, padded to warpgroups
    e = common.element_bytes(dtype)
    tiles = 2 if pair else 1
    payload = tiles * 128 * 128 * e + 2 * stages * bn * 128 * e  # Q (each tile's), then the K and V rings
    assert payload < md.shared <= payload + 512  # + the barriers, aligned
    assert md.shared <= attention.shared_estimate(dict(_cfg(bn=bn, stages=stages, pair=pair), ws=1), dtype, 128, H200)
    # host-side TMA descriptors: none made on the device, no global scratch
    assert md.global_scratch_size == 0 and len(md.tensordesc_meta) == 3
    ptx = compiled.asm["ptx"]
    assert "tensormap.replace" not in ptx
    # the consumers grow to 240 registers, the producer shrinks to 24
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+240;", ptx)
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)
    assert ptx.count("wgmma.mma_async") > 0 and "cp.async.bulk.tensor.2d" in ptx
    report = _ptxas_report(ptx)
    assert "C7514" not in report and "serialized" not in report, report
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", report)]
    # two tiles per program keep the ring position and the second tile's indices
    # live across the first: ptxas spills 16 bytes there (measured as fast)
    assert spills and max(spills) <= (16 if pair else 0), report


def test_other_targets_and_tiles_are_refused():
    with pytest.raises(ValueError, match="sm_90"):
        attention_wgmma.compile_spec([1, 1, 128, 64], "bf16", True, _cfg(), TARGETS["gfx942"])
    with pytest.raises(ValueError, match="BLOCK_M must be 128"):
        attention_wgmma.compile_spec([1, 1, 128, 64], "bf16", True, _cfg(bm=64), H200)


def _ws_space(shape, causal, monkeypatch, gpu="sm_90", target=H200):
    monkeypatch.setattr(common, "local_gpu_arch", lambda: gpu)
    return attention.config_space("attention", shape, "bf16", {"causal": causal}, target)


def test_ws_tiles_are_offered_only_where_an_sm90_gpu_can_check_them(monkeypatch):
    # no GPU here (or the interpreter): never offered, whatever the target
    if common.local_gpu_arch() is None:  # this machine (CI: no GPU)
        assert not any(c.get("ws") for c in attention.config_space("attention", [1, 32, 8192, 128], "bf16",
                                                                    {"causal": True}, H200))
    assert not any(c.get("ws") for c in _ws_space([1, 32, 8192, 128], True, monkeypatch, gpu=None))
    assert not any(c.get("ws") for c in _ws_space([1, 32, 8192, 128], True, monkeypatch, gpu="sm_80"))
    # an sm_90 GPU: D = 128 only, sm_90 targets only
    assert not any(c.get("ws") for c in _ws_space([4, 32, 2048, 64], True, monkeypatch))
    assert not any(c.get("ws") for c in _ws_space([1, 32, 8192, 128], True, monkeypatch, target=TARGETS["gfx942"]))
    long_causal = _ws_space([1, 32, 8192, 128], True, monkeypatch)
    ws = [c for c in long_causal if c.get("ws")]
    assert len(ws) == len(attention.WS_TILES)
    for c in ws:
        assert c["BLOCK_M"] == 128 and c["num_warps"] == 12
        assert attention.shared_estimate(c, "bf16", 128, H200) <= common.shared_limit(H200)
    # they lead every space; `pair` first for short sequences, second for long ones
    assert all(c.get("ws") for c in long_causal[:len(ws)])
    assert [bool(c.get("pair")) for c in ws] == [False, True, False, False]
    short_causal = _ws_space([4, 32, 2048, 128], True, monkeypatch)
    assert [i for i, c in enumerate(short_causal) if c.get("ws")] == [0, 1, 2, 3]
    assert short_causal[0].get("pair") and short_causal[0]["BLOCK_N"] == 128
    assert all(c.get("ws") for c in _ws_space([4, 32, 2048, 128], False, monkeypatch)[:len(ws)])
    assert len({tuple(sorted(c.items())) for c in short_causal}) == len(short_causal)
    # `pair` only where the 128-row query blocks pair up (9 blocks here)
    odd = [c for c in _ws_space([2, 4, 1100, 128], True, monkeypatch) if c.get("ws")]
    assert len(odd) == len(attention.WS_TILES) - 1 and not any(c.get("pair") for c in odd)


def test_a_ws_config_compiles_through_the_template_and_the_worker():
    # the path of the worker's compile stage: the template's compile_spec, then
    # targetcompile (which must hand a Gluon kernel to GluonASTSource)
    from kiln_worker.codeobject import targetcompile
    c = {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_H": 8, "num_warps": 12, "num_stages": 2, "ws": 1}
    spec = attention.compile_spec("attention", [2, 4, 1000, 128], "bf16", {"causal": True}, c, H200)
    assert spec["grid"] == (2 * 4 * 8, 1, 1)
    compiled = targetcompile.compile_for_target(spec, H200)
    art = targetcompile.build_artifact(compiled, spec, H200, None)
    assert art["block"] == [384, 1, 1] and art["num_warps"] == 12  # what a launcher must start
    assert art["spills"] == 0
    assert 163840 < art["shared_bytes"] <= attention.shared_estimate(c, "bf16", 128, H200)  # the estimate bounds it
    assert art["metadata"]["global_scratch_size"] == 0  # host-side descriptors: no scratch
    # each descriptor is a CUtensorMap, then the tensor's shape and strides, as the kernel's parameters
    desc = [[f"{n}_desc", f"{n}_desc.shape[0]", f"{n}_desc.shape[1]", f"{n}_desc.strides[0]", f"{n}_desc.strides[1]"]
            for n in "qkv"]
    assert [a["name"] for a in art["args"] if not a.get("hidden")] == (
        desc[0] + desc[1] + desc[2] + ["out_ptr", "BH", "S", "sm_scale"])
    q_desc = art["args"][0]
    assert q_desc["type"] == "nvTmaDesc" and q_desc["dtype"] == "bf16" and q_desc["block_shape"] == [64, 128]
    assert q_desc["tensormap"]["block_size"] == [64, 64]  # 128-byte swizzle: the box is 64 elements wide
    assert [a["type"] for a in art["args"][1:5]] == ["i32", "i32", "i64", "i64"]
    from kiln_worker.codeobject import resources
    params = resources.cubin_report(compiled.asm["cubin"], compiled.metadata.name, run_ptxas=False)
    assert params["num_kernel_args"] == len(art["args"])  # the cubin's parameters, the hidden scratch pointers last
    assert sum(1 for a in art["args"] if a.get("hidden")) == 2
    p = {"causal": True}
    inputs = attention.make_inputs("attention", [1, 1, 128, 128], "bf16", p, 0, "cpu")
    with pytest.raises(ValueError, match="sm_90 GPU only"):
        attention.launch("attention", inputs, attention.output_like("attention", inputs, p), c, p)
    with pytest.raises(ValueError, match="BLOCK_M 128"):
        attention.compile_spec("attention", [1, 1, 128, 128], "bf16", p, dict(c, BLOCK_M=64, BLOCK_N=64), H200)
    with pytest.raises(ValueError, match="even number"):  # one query block cannot pair
        attention.compile_spec("attention", [1, 1, 128, 128], "bf16", p, dict(c, pair=1), H200)
    with pytest.raises(ValueError, match="`ws` configs only"):
        attention.compile_spec("attention", [1, 1, 128, 128], "bf16", p, {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_H": 8,
                                                                         "num_warps": 4, "num_stages": 2, "pair": 1},
                               H200)


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU (wgmma, TMA)")
@pytest.mark.parametrize("shape,dtype,causal,bn,stages,pair", [
    ([1, 3, 1000, 128], "bf16", True, 128, 2, 0),   # S % BLOCK_M != 0: rows of the next head masked out
    ([2, 2, 1000, 128], "bf16", False, 64, 3, 0),
    ([1, 2, 77, 64], "fp16", False, 128, 2, 0),
    ([1, 2, 300, 256], "bf16", True, 64, 2, 0),
    ([1, 1, 16, 64], "fp16", True, 64, 2, 0),
    ([2, 4, 512, 128], "bf16", True, 128, 3, 0),
    ([1, 3, 1000, 128], "bf16", True, 128, 2, 1),   # pairs of query blocks (8 per head), the last one partial
    ([2, 2, 1000, 128], "fp16", False, 64, 3, 1),
    ([3, 5, 512, 128], "bf16", True, 128, 2, 1),    # 15 heads: a partial group of GROUP_H
])
def test_matches_the_reference_on_gpu(shape, dtype, causal, bn, stages, pair):
    p = {"causal": causal}
    inputs = attention.make_inputs("attention", shape, dtype, p, 3, torch.device("cuda"))
    out = attention.output_like("attention", inputs, p).fill_(float("nan"))
    attention_wgmma.launch_ws(inputs["q"], inputs["k"], inputs["v"], out, attention_tiles.sm_scale(p, shape[3]), causal,
                              _cfg(bn=bn, stages=stages, pair=pair))
    ref = attention.reference("attention", {k: v.float() for k, v in inputs.items()}, p)
    torch.testing.assert_close(out.float(), ref, **common.tolerance(dtype))


@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU (wgmma, TMA)")
def test_the_templates_ws_configs_run_on_gpu():
    # on this machine the space offers them, and the template's launch runs them
    shape, p = [1, 4, 4096, 128], {"causal": True}
    space = attention.config_space("attention", shape, "bf16", p, H200)
    ws = [c for c in space if c.get("ws")]
    assert ws and all(c.get("ws") for c in space[:len(ws)])
    inputs = attention.make_inputs("attention", shape, "bf16", p, 5, torch.device("cuda"))
    ref = attention.reference("attention", {k: v.float() for k, v in inputs.items()}, p)
    for c in ws:
        out = attention.output_like("attention", inputs, p).fill_(float("nan"))
        attention.launch("attention", inputs, out, c, p)
        torch.testing.assert_close(out.float(), ref, **common.tolerance("bf16"))
