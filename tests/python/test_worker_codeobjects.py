"""Parsing real cross-compiled code objects: ELF, AMDGPU metadata note, .nv.info.

The code objects are built once per module by tests/python/fixtures/
make_code_objects.py in a fresh process (Triton interpreter off, whatever this
pytest process has imported), for gfx90a / gfx942 / gfx950 / gfx1100 and sm_90.
Every check compares the worker's parse with a second, independent source: the
raw ELF bytes, the amdgcn assembly's comments, ptxas / cuobjdump output, or the
msgpack package.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOME = HERE.parent.parent
sys.path.insert(0, str(HOME / "worker"))

from kiln_worker.codeobject import msgpack_lite, resources  # noqa: E402
from kiln_worker.codeobject.elf import Elf, ElfError  # noqa: E402

GFX_MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx950": 0x4F, "gfx1100": 0x41}


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    out = tmp_path_factory.mktemp("code_objects")
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, str(HERE / "fixtures" / "make_code_objects.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())

    class Objs:
        def case(self, name):
            m = manifest[name]
            return m, (out / m["file"]).read_bytes(), (out / m["asm"]).read_text()
    return Objs()


def asm_value(asm: str, key: str):
    """The test's own reading of a '; Key: N' comment in amdgcn text."""
    m = re.search(r"^; " + re.escape(key) + r": (\d+)", asm, re.M)
    return int(m.group(1)) if m else None


def raw_note(data: bytes) -> bytes:
    """Independent walk of the ELF section headers to the NT_AMDGPU_METADATA note."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        off = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", data, off + 4)
        if sh_type != 7:  # SHT_NOTE
            continue
        sec_off, sec_size = struct.unpack_from("<QQ", data, off + 24)
        pos = sec_off
        while pos < sec_off + sec_size:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            pos += 12 + ((namesz + 3) & ~3)
            if ntype == 32:
                return data[pos:pos + descsz]
            pos += (descsz + 3) & ~3
    raise AssertionError("no NT_AMDGPU_METADATA note found")


# -- AMD ------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100"])
def test_hsaco_header_and_metadata(objs, arch):
    m, data, asm = objs.case(f"add_{arch}")
    # raw header bytes
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    assert data[7] == 64  # ELFOSABI_AMDGPU_HSA
    e_machine, = struct.unpack_from("<H", data, 18)
    e_flags, = struct.unpack_from("<I", data, 48)
    assert e_machine == 224 and e_flags & 0xFF == GFX_MACH[arch]

    rep = resources.hsaco_report(data, asm, "add_kernel")
    assert rep["elf_machine"] == 224
    assert rep["elf_arch"] == arch
    assert rep["amdhsa_target"] == f"amdgcn-amd-amdhsa--{arch}"
    assert rep["kernel_name"] == "add_kernel" and rep["symbol"] == "add_kernel.kd"
    assert rep["wavefront_size"] == (32 if arch == "gfx1100" else 64)
    assert rep["max_flat_workgroup_size"] == 4 * rep["wavefront_size"]
    # register counts: note vs the assembler's comments
    assert rep["sgprs"] == asm_value(asm, "TotalNumSgprs")
    total_v = asm_value(asm, "TotalNumVgprs") or asm_value(asm, "NumVgprs")
    assert rep["registers"] == total_v and rep["registers"] > 0
    assert rep["occupancy"] == asm_value(asm, "Occupancy") and rep["occupancy"] >= 1
    assert rep["scratch_bytes"] == asm_value(asm, "ScratchSize") == 0
    assert rep["spills"] == 0 and rep["sgpr_spills"] == 0
    assert rep["lds_bytes"] == m["metadata"]["shared"] == 0
    # argument layout: x, y, out (8 B), n (i32), alpha (f32), 2 hidden pointers
    args = rep["kernel_args"]
    assert [a[".size"] for a in args] == [8, 8, 8, 4, 4, 8, 8]
    assert [a[".offset"] for a in args] == [0, 8, 16, 24, 28, 32, 40]
    assert [a[".value_kind"] for a in args] == ["global_buffer"] * 3 + ["by_value"] * 2 + ["global_buffer"] * 2
    assert rep["num_kernel_args"] == 7 and rep["kernarg_bytes"] >= 48


def test_hsaco_lds_is_dynamic(objs):
    # Triton's LDS is dynamic: the code object's static LDS (and LLVM's
    # compile-time LDSByteSize) is 0 while metadata.shared is what the launch
    # must pass; the occupancy must therefore be capped by the LDS separately.
    m, data, asm = objs.case("rowsum_gfx942")
    rep = resources.hsaco_report(data, asm)
    shared = m["metadata"]["shared"]
    assert shared > 0
    assert rep["lds_bytes"] == asm_value(asm, "LDSByteSize") == 0
    assert rep["num_kernel_args"] == 3 + 2
    mi300x = {"lds_bytes_per_cu": 65536, "simds_per_cu": 4, "max_waves_per_simd": 8}
    occ = resources.amd_occupancy(rep["occupancy"], shared, 4, mi300x)
    assert occ["occupancy"] == min(rep["occupancy"], (65536 // shared) * 4 // 4)
    # a big LDS user: 40 KiB per 4-wave workgroup -> 1 workgroup per CU -> 1 wave per SIMD
    occ = resources.amd_occupancy(8, 40 * 1024, 4, mi300x)
    assert occ == {"occupancy": 1, "limiter": "lds", "limits": {"compiler": 8, "lds": 1}}
    occ = resources.amd_occupancy(8, 16 * 1024, 8, mi300x)  # 4 WGs x 8 waves / 4 SIMDs
    assert occ["occupancy"] == 8 and occ["limiter"] == "compiler"
    assert resources.amd_occupancy(None, 0, 4, {})["occupancy"] is None


def test_hsaco_spills(objs):
    m, data, asm = objs.case("spill_gfx942")
    rep = resources.hsaco_report(data, asm)
    md = msgpack_lite.decode(raw_note(data))["amdhsa.kernels"][0]
    assert rep["spills"] > 0 and rep["spills"] == md[".vgpr_spill_count"]
    assert rep["scratch_bytes"] > 0
    assert rep["scratch_bytes"] == md[".private_segment_fixed_size"] == asm_value(asm, "ScratchSize")
    assert rep["registers"] <= 64  # waves_per_eu=8 caps VGPRs at 512/8
    assert rep["occupancy"] == 8


def test_amdgcn_info_block(objs):
    _, _, asm = objs.case("add_gfx942")
    info = resources.parse_amdgcn_info(asm, "add_kernel")
    for key in ("TotalNumSgprs", "NumVgprs", "ScratchSize", "Occupancy", "LDSByteSize"):
        assert info[key] == asm_value(asm, key), key
    assert resources.parse_amdgcn_info("no kernel here") == {}


def test_metadata_note_decoders_agree(objs):
    for case in ("add_gfx90a", "add_gfx1100", "spill_gfx942"):
        _, data, _ = objs.case(case)
        note = raw_note(data)
        ours = msgpack_lite.decode(note)
        assert ours["amdhsa.version"][0] == 1
        assert isinstance(ours["amdhsa.kernels"], list) and len(ours["amdhsa.kernels"]) == 1
        try:
            import msgpack
        except ImportError:
            continue
        assert ours == msgpack.unpackb(note, raw=False, strict_map_key=False)


# -- NVIDIA -----------------------------------------------------------------------------

def _nvbin(tool):
    import importlib.util
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.origin:
        return shutil.which(tool)
    p = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / tool
    return str(p) if p.exists() else shutil.which(tool)


def _cuobjdump_usage(path):
    tool = _nvbin("cuobjdump")
    if not tool:
        pytest.skip("cuobjdump not available")
    out = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True,
                         text=True, timeout=120).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    assert m, out
    return {"reg": int(m.group(1)), "stack": int(m.group(2)), "shared": int(m.group(3)),
            "local": int(m.group(4))}


def test_cubin_registers(objs, tmp_path):
    m, data, ptx = objs.case("add_sm_90")
    e_machine, = struct.unpack_from("<H", data, 18)
    assert e_machine == 190
    rep = resources.cubin_report(data, "add_kernel", ptx=ptx, arch="sm_90")
    assert rep["elf_arch"] == "sm_90" and rep["kernel_name"] == "add_kernel"
    assert rep["registers_source"] == "nv.info"
    assert 0 < rep["registers"] <= 255
    assert rep["num_kernel_args"] == 7
    assert rep["spills"] == 0 and rep["stack_frame_bytes"] == 0
    # No stack frame, so no spills, known without a second ptxas run.
    assert rep["spills_source"] == "frame size 0" and "ptxas" not in rep
    (tmp_path / "k.cubin").write_bytes(data)
    usage = _cuobjdump_usage(tmp_path / "k.cubin")
    assert usage["reg"] == rep["registers"] and usage["stack"] == rep["stack_frame_bytes"]


def test_cubin_spills(objs, tmp_path):
    if not resources.find_ptxas():
        pytest.skip("ptxas not available")
    _, data, ptx = objs.case("spill_sm_90")
    rep = resources.cubin_report(data, ptx=ptx, arch="sm_90")
    assert rep["registers"] <= 32  # maxnreg=32
    assert rep["spill_store_bytes"] > 0 and rep["spills"] > 0
    assert rep["stack_frame_bytes"] > 0
    assert rep["stack_frame_bytes"] == rep["ptxas"]["stack_frame_bytes"]
    assert rep["spills_source"] == "ptxas"
    (tmp_path / "s.cubin").write_bytes(data)
    assert _cuobjdump_usage(tmp_path / "s.cubin")["stack"] == rep["stack_frame_bytes"]


def test_cubin_rowsum_and_occupancy(objs):
    m, data, ptx = objs.case("rowsum_sm_90")
    rep = resources.cubin_report(data, ptx=ptx, run_ptxas=False)
    assert rep["spills"] is None  # not asked for
    h200 = {"registers_per_cu": 65536, "lds_bytes_per_cu": 233472, "max_waves_per_simd": 16,
            "simds_per_cu": 4}
    occ = resources.nvidia_occupancy(rep["registers"], m["metadata"]["shared"], 4, h200)
    regs = rep["registers"]
    per_warp = -(-regs * 32 // 256) * 256
    expect_blocks = min(16, 32, (65536 // per_warp) // 4, 233472 // (m["metadata"]["shared"] + 1024))
    assert occ["occupancy"] == 4 * expect_blocks


# -- malformed input ----------------------------------------------------------------------

def test_elf_errors(objs):
    _, data, asm = objs.case("add_gfx942")
    with pytest.raises(ElfError):
        Elf(b"not an elf at all")
    with pytest.raises(ElfError):
        Elf(data[:100])
    _, cubin, _ = objs.case("add_sm_90")
    with pytest.raises(ElfError, match="AMDGPU"):
        resources.hsaco_report(cubin)
    with pytest.raises(ElfError, match="CUDA"):
        resources.cubin_report(data)


# -- MessagePack decoder ----------------------------------------------------------------

VECTORS = [
    (b"\xc0", None), (b"\xc2", False), (b"\xc3", True),
    (b"\x00", 0), (b"\x7f", 127), (b"\xff", -1), (b"\xe0", -32),
    (b"\xcc\xff", 255), (b"\xcd\x01\x00", 256), (b"\xce\x00\x01\x00\x00", 65536),
    (b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 2**64 - 1),
    (b"\xd0\x80", -128), (b"\xd1\x80\x00", -32768), (b"\xd2\x80\x00\x00\x00", -2**31),
    (b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00", -2**63),
    (b"\xca\x3f\x80\x00\x00", 1.0), (b"\xcb\x40\x09\x21\xfb\x54\x44\x2d\x18", 3.141592653589793),
    (b"\xa3abc", "abc"), (b"\xd9\x03abc", "abc"), (b"\xda\x00\x03abc", "abc"),
    (b"\xdb\x00\x00\x00\x03abc", "abc"), (b"\xa2\xc3\xa9", "é"),
    (b"\xc4\x02\x01\x02", b"\x01\x02"), (b"\xc5\x00\x01\x07", b"\x07"),
    (b"\x93\x01\xa1a\xc3", [1, "a", True]), (b"\xdc\x00\x02\xc0\xc0", [None, None]),
    (b"\xdd\x00\x00\x00\x01\x05", [5]),
    (b"\x82\xa1a\x01\xa1b\x92\x02\x03", {"a": 1, "b": [2, 3]}),
    (b"\xde\x00\x01\x01\xa1x", {1: "x"}), (b"\xdf\x00\x00\x00\x00", {}),
    (b"\xd4\x05\x41", msgpack_lite.ExtType(5, b"A")),
    (b"\xc7\x02\xfe\x01\x02", msgpack_lite.ExtType(-2, b"\x01\x02")),
]


@pytest.mark.parametrize("data,expected", VECTORS)
def test_msgpack_vectors(data, expected):
    got = msgpack_lite.decode(data)
    assert got == expected and type(got) is type(expected)


def test_msgpack_errors():
    with pytest.raises(msgpack_lite.MsgPackError):
        msgpack_lite.decode(b"\x93\x01\x02")  # truncated array
    with pytest.raises(msgpack_lite.MsgPackError):
        msgpack_lite.decode(b"\x01\x02")  # trailing bytes
    with pytest.raises(msgpack_lite.MsgPackError):
        msgpack_lite.decode(b"\xc1")  # never used
    assert msgpack_lite.decode_prefix(b"\x01\x02") == (1, 1)


def _random_objects(rng, depth=0):
    kind = rng.randrange(10 if depth < 4 else 7)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-2**63, 2**64 - 1) if rng.random() < 0.3 else rng.randint(-70000, 70000)
    if kind == 2:
        return rng.uniform(-1e30, 1e30)
    if kind == 3:
        return "".join(rng.choice("abcxyz_.é漢") for _ in range(rng.choice([0, 5, 31, 32, 300])))
    if kind == 4:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 300])))
    if kind == 5:
        return rng.randint(-32, 127)
    if kind == 6:
        return float(rng.randint(-5, 5))
    if kind == 7:
        return [_random_objects(rng, depth + 1) for _ in range(rng.choice([0, 3, 16, 20]))]
    return {f"k{i}.{rng.randrange(99)}": _random_objects(rng, depth + 1)
            for i in range(rng.choice([0, 2, 15, 17]))}


def test_msgpack_against_package():
    msgpack = pytest.importorskip("msgpack")
    import random
    rng = random.Random(1234)
    for i in range(300):
        obj = _random_objects(rng)
        packed = msgpack.packb(obj, use_bin_type=True, use_single_float=(i % 3 == 0))
        assert msgpack_lite.decode(packed) == msgpack.unpackb(packed, raw=False, strict_map_key=False)
    assert msgpack_lite.decode(msgpack.packb(msgpack.ExtType(3, b"xy"))) == msgpack_lite.ExtType(3, b"xy")


def test_unpackb_without_package(monkeypatch, objs):
    _, data, _ = objs.case("add_gfx942")
    note = raw_note(data)
    with_pkg = msgpack_lite.unpackb(note)
    monkeypatch.setitem(sys.modules, "msgpack", None)  # import msgpack -> ImportError
    without = msgpack_lite.unpackb(note)
    assert without == with_pkg
    assert without["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx942"


def test_scratch_allocator_serves_triton_requests():
    """install_scratch_allocator: what Triton calls at a launch that needs global
    scratch (device-side tensor descriptors) returns a buffer of at least the
    size asked for on the given device; before, Triton's null allocator raises."""
    import torch
    from triton.runtime import _allocation
    from kiln_worker.processes.device import install_scratch_allocator

    token = _allocation._allocator.set(_allocation._NULL_ALLOCATOR)
    try:
        with pytest.raises(RuntimeError, match="no allocator was set"):
            _allocation._allocator.get()(512, 128, None)
        install_scratch_allocator("cpu")
        buf = _allocation._allocator.get()(512, 128, None)
        assert isinstance(buf, torch.Tensor) and buf.numel() >= 512 and buf.device.type == "cpu"
        assert buf.data_ptr() % 128 == 0
    finally:
        _allocation._allocator.reset(token)
