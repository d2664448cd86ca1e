"""Resource reports from compiled code objects, without a GPU.

AMD (.hsaco): the ELF's NT_AMDGPU_METADATA note (MessagePack: ``amdhsa.target``,
``amdhsa.kernels[]`` with ``.sgpr_count .vgpr_count .agpr_count
.group_segment_fixed_size .private_segment_fixed_size .kernarg_segment_size
.wavefront_size .vgpr_spill_count .sgpr_spill_count .args``) plus the ``amdgcn``
assembly text's ``; Kernel info:`` block (``; Occupancy: N`` waves per SIMD as
LLVM computes it, ``; ScratchSize: N``, ``; TotalNumSgprs``, ``; NumVgprs``...).

NVIDIA (.cubin): the ELF's ``.nv.info`` / ``.nv.info.<kernel>`` attribute records
(``EIATTR_REGCOUNT``, ``EIATTR_FRAME_SIZE``, ``EIATTR_KPARAM_INFO``...), spill
bytes from ``ptxas -v`` re-run on the PTX (Triton's own ptxas log is discarded),
and an occupancy (resident warps per SM) computed from registers, shared memory
and num_warps with the target's numbers.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from typing import Any

from . import msgpack_lite
from .elf import (AMDGPU_MACH, EM_AMDGPU, EM_CUDA, NT_AMDGPU_METADATA, Elf, ElfError)

# -- AMD ---------------------------------------------------------------------


def amdgpu_metadata(elf: Elf) -> dict:
    """The decoded NT_AMDGPU_METADATA note of an .hsaco."""
    for note in elf.notes():
        if note.type == NT_AMDGPU_METADATA and note.name.startswith("AMDGPU"):
            md = msgpack_lite.unpackb(note.desc)
            if not isinstance(md, dict):
                raise ElfError("NT_AMDGPU_METADATA is not a MessagePack map")
            return md
    raise ElfError("no NT_AMDGPU_METADATA note in the code object")


_INFO_RE = re.compile(r"^\s*;\s*([A-Za-z][A-Za-z0-9_ :]*?)\s*:\s*(-?\d+)\b")


def parse_amdgcn_info(asm: str, kernel: str | None = None) -> dict[str, int]:
    """The ``; Key: N`` lines of a kernel's ``; Kernel info:`` block.

    Triton 3.6's LLVM prints, after each kernel: codeLenInByte, TotalNumSgprs,
    NumVgprs, NumAgprs, TotalNumVgprs, ScratchSize, MemoryBound, FloatMode,
    IeeeMode, LDSByteSize, SGPRBlocks, VGPRBlocks, NumSGPRsForWavesPerEU,
    NumVGPRsForWavesPerEU, AccumOffset, Occupancy, WaveLimiterHint, COMPUTE_PGM_*.
    Spill counts are not in this block (they are ``.vgpr_spill_count`` /
    ``.sgpr_spill_count`` in the metadata).
    """
    lines = asm.splitlines()
    start = None
    if kernel is not None:
        # the block follows the kernel's ".size <kernel>, ..." line
        for i, line in enumerate(lines):
            if re.match(r"^\s*\.size\s+" + re.escape(kernel) + r"\s*,", line):
                start = i
                break
    begin = None
    for i in range(start or 0, len(lines)):
        if lines[i].strip().startswith("; Kernel info:"):
            begin = i + 1
            break
    if begin is None:
        return {}
    out: dict[str, int] = {}
    for line in lines[begin:]:
        s = line.strip()
        if not s.startswith(";"):
            if s == "" or s.startswith(".set"):
                continue
            break
        m = _INFO_RE.match(s)
        if m:
            key = m.group(1).strip()
            out.setdefault(key, int(m.group(2)))
    return out


def hsaco_report(hsaco: bytes, amdgcn: str | None = None, kernel_name: str | None = None) -> dict:
    """Registers, spills, LDS, scratch, occupancy of the kernel in an .hsaco."""
    elf = Elf(hsaco)
    if elf.machine != EM_AMDGPU:
        raise ElfError(f"not an AMDGPU code object (e_machine {elf.machine}, expected {EM_AMDGPU})")
    md = amdgpu_metadata(elf)
    kernels = md.get("amdhsa.kernels") or []
    if not kernels:
        raise ElfError("amdhsa.kernels is empty")
    k = kernels[0]
    if kernel_name is not None:
        for cand in kernels:
            if cand.get(".name") == kernel_name:
                k = cand
                break
    info = parse_amdgcn_info(amdgcn, k.get(".name")) if amdgcn else {}
    vgpr_spills = k.get(".vgpr_spill_count")
    sgpr_spills = k.get(".sgpr_spill_count")
    scratch = info.get("ScratchSize", k.get(".private_segment_fixed_size"))
    return {
        "elf_machine": elf.machine,
        "elf_arch": AMDGPU_MACH.get(elf.flags & 0xFF, f"unknown(0x{elf.flags & 0xFF:02x})"),
        "amdhsa_target": md.get("amdhsa.target"),
        "kernel_name": k.get(".name"),
        "symbol": k.get(".symbol"),
        "registers": k.get(".vgpr_count"),
        "agprs": k.get(".agpr_count"),
        "sgprs": k.get(".sgpr_count"),
        "spills": vgpr_spills,
        "vgpr_spills": vgpr_spills,
        "sgpr_spills": sgpr_spills,
        "scratch_bytes": scratch,
        "lds_bytes": k.get(".group_segment_fixed_size"),  # static LDS; Triton's is dynamic
        "kernarg_bytes": k.get(".kernarg_segment_size"),
        "wavefront_size": k.get(".wavefront_size"),
        "max_flat_workgroup_size": k.get(".max_flat_workgroup_size"),
        "occupancy": info.get("Occupancy"),
        "occupancy_source": "compiler" if "Occupancy" in info else None,
        "num_kernel_args": len(k.get(".args") or []),
        "kernel_args": k.get(".args") or [],
        "asm_info": info,
    }


# -- NVIDIA ------------------------------------------------------------------

EIATTR = {
    0x04: "CTAIDZ_USED", 0x05: "MAX_THREADS", 0x0A: "PARAM_CBANK", 0x0F: "EXTERNS",
    0x10: "REQNTID", 0x11: "FRAME_SIZE", 0x12: "MIN_STACK_SIZE", 0x17: "KPARAM_INFO",
    0x19: "CBANK_PARAM_SIZE", 0x1B: "MAXREG_COUNT", 0x1C: "EXIT_INSTR_OFFSETS",
    0x1E: "CRS_STACK_SIZE", 0x23: "MAX_STACK_SIZE", 0x2F: "REGCOUNT", 0x37: "CUDA_API_VERSION",
}
# attributes whose payload is (symbol index u32, value u32)
_PER_SYMBOL = {"REGCOUNT", "FRAME_SIZE", "MIN_STACK_SIZE", "MAX_STACK_SIZE", "CRS_STACK_SIZE"}


def parse_nv_info(data: bytes) -> list[tuple[int, int, Any]]:
    """Records of an .nv.info section: (format, attribute, value-or-payload).

    Each record is: format u8, attribute u8, u16 (the value for EIFMT_HVAL, the
    payload size for EIFMT_SVAL), then for EIFMT_SVAL (4) the payload.
    """
    out = []
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr, val = struct.unpack_from("<BBH", data, pos)
        pos += 4
        if fmt == 0x04:
            payload = data[pos:pos + val]
            if len(payload) != val:
                raise ElfError("truncated .nv.info record")
            pos += val
            out.append((fmt, attr, payload))
        elif fmt in (0x01, 0x02, 0x03):
            out.append((fmt, attr, val))
        else:
            raise ElfError(f"unknown .nv.info record format {fmt:#x} at offset {pos - 4}")
    return out


def cubin_report(cubin: bytes, kernel_name: str | None = None, ptx: str | None = None,
                 arch: str | None = None, run_ptxas: bool = True) -> dict:
    elf = Elf(cubin)
    if elf.machine != EM_CUDA:
        raise ElfError(f"not a CUDA cubin (e_machine {elf.machine}, expected {EM_CUDA})")
    funcs = [s for s in elf.symbols if s.type == 2 and s.name]  # STT_FUNC
    if kernel_name is None and funcs:
        kernel_name = funcs[0].name
    sym_index = {s.name: s.index for s in elf.symbols}.get(kernel_name)
    attrs: dict[str, Any] = {}
    kparams = 0
    for sec in elf.sections:
        if sec.name != ".nv.info" and sec.name != f".nv.info.{kernel_name}":
            continue
        for fmt, attr, val in parse_nv_info(sec.data):
            name = EIATTR.get(attr, f"0x{attr:02x}")
            if name == "KPARAM_INFO":
                kparams += 1
                continue
            if name in _PER_SYMBOL and fmt == 0x04 and len(val) >= 8:
                sym, value = struct.unpack_from("<II", val, 0)
                if sec.name == ".nv.info" and sym != sym_index:
                    continue
                attrs[name] = value
            elif fmt != 0x04:
                attrs.setdefault(name, val)
    shared_sec = elf.section(f".nv.shared.{kernel_name}")
    rep = {
        "elf_machine": elf.machine,
        "elf_arch": f"sm_{elf.flags & 0xFF}" if elf.flags & 0xFF else None,
        "kernel_name": kernel_name,
        "registers": attrs.get("REGCOUNT"),
        "registers_source": "nv.info" if "REGCOUNT" in attrs else None,
        "sgprs": None,
        "stack_frame_bytes": attrs.get("FRAME_SIZE"),
        "scratch_bytes": attrs.get("FRAME_SIZE"),
        "static_shared_bytes": shared_sec.size if shared_sec else 0,
        "max_reg_count": attrs.get("MAXREG_COUNT"),
        "num_kernel_args": kparams,
        "spills": None,
        "spill_store_bytes": None,
        "spill_load_bytes": None,
        "nv_info": {k: v for k, v in attrs.items() if not isinstance(v, bytes)},
    }
    if run_ptxas and rep["stack_frame_bytes"] == 0:
        # Spills go to local memory, which is the stack frame: a kernel whose
        # nv.info frame size is 0 spills nothing, and a second ptxas run (about
        # a third of the compile's CPU time) would only say so.
        rep.update(spills=0, spill_store_bytes=0, spill_load_bytes=0, spills_source="frame size 0")
    elif ptx and run_ptxas:
        px = ptxas_verbose(ptx, arch or rep["elf_arch"] or "sm_90")
        if px:
            rep["ptxas"] = px
            if rep["registers"] is None and px.get("registers") is not None:
                rep["registers"] = px["registers"]
                rep["registers_source"] = "ptxas"
            if px.get("spill_store_bytes") is not None:
                rep["spill_store_bytes"] = px["spill_store_bytes"]
                rep["spill_load_bytes"] = px.get("spill_load_bytes")
                rep["spills"] = (px["spill_store_bytes"] + 3) // 4
                rep["spills_source"] = "ptxas"
    return rep


def find_ptxas() -> str | None:
    """Triton's bundled ptxas (what it compiled with), else TRITON_PTXAS_PATH, else PATH."""
    env = os.environ.get("TRITON_PTXAS_PATH")
    if env and os.access(env, os.X_OK):
        return env
    try:
        import triton  # noqa: F401
        p = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
        if os.access(p, os.X_OK):
            return p
    except Exception:
        pass
    return shutil.which("ptxas")


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict:
    out: dict[str, Any] = {}
    m = _PTXAS_REGS.search(log)
    if m:
        out["registers"] = int(m.group(1))
    m = _PTXAS_SPILL.search(log)
    if m:
        out["stack_frame_bytes"] = int(m.group(1))
        out["spill_store_bytes"] = int(m.group(2))
        out["spill_load_bytes"] = int(m.group(3))
    m = _PTXAS_SMEM.search(log)
    if m:
        out["static_smem_bytes"] = int(m.group(1))
    return out


def ptxas_verbose(ptx: str, arch: str, timeout: float = 300.0) -> dict | None:
    """Runs ``ptxas -v`` on the PTX for the spill numbers; None when impossible."""
    exe = find_ptxas()
    if not exe:
        return None
    gpu = arch if arch.startswith("sm_") else f"sm_{arch}"
    digits = re.sub(r"\D", "", gpu)
    if digits and int(digits) >= 90 and not gpu.endswith("a"):
        gpu += "a"  # Triton compiles sm_90+ for the "a" variant
    with tempfile.TemporaryDirectory(prefix="kiln-ptxas-") as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            proc = subprocess.run([exe, "-v", f"--gpu-name={gpu}", src, "-o", os.path.join(tmp, "k.o")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                                  text=True, errors="replace")
        except (OSError, subprocess.TimeoutExpired):
            return None
    if proc.returncode != 0:
        return None
    return parse_ptxas_log(proc.stdout)


def nvidia_occupancy(registers: int | None, shared_bytes: int, num_warps: int, target: dict,
                     warp_size: int = 32) -> dict:
    """Resident warps per SM, CUDA-occupancy-calculator style.

    Limits: max warps per SM (``max_waves_per_simd`` x ``simds_per_cu``, else
    ``max_warps_per_cu``, else 64), max blocks per SM (``max_blocks_per_cu``, else
    32), registers (``registers_per_cu``, else 65536; per-warp allocation rounded
    up to 256 registers) and shared memory (``lds_bytes_per_cu``, plus 1 KiB the
    driver reserves per block). Missing target numbers simply drop that limit
    to its H100/H200 default.
    """
    num_warps = max(1, int(num_warps or 1))
    simds = _int(target.get("simds_per_cu")) or 4
    mwps = _int(target.get("max_waves_per_simd"))
    max_warps = mwps * simds if mwps else (_int(target.get("max_warps_per_cu")) or 64)
    max_blocks = _int(target.get("max_blocks_per_cu")) or 32
    regs_per_sm = _int(target.get("registers_per_cu")) or 65536
    smem_per_sm = _int(target.get("lds_bytes_per_cu"))
    limits = {"warps": max_warps // num_warps, "blocks": max_blocks}
    if registers:
        per_warp = -(-registers * warp_size // 256) * 256
        limits["registers"] = (regs_per_sm // per_warp) // num_warps
    if smem_per_sm:
        per_block = int(shared_bytes or 0) + 1024
        limits["shared_memory"] = smem_per_sm // per_block
    blocks = max(0, min(limits.values()))
    limiter = min(limits, key=lambda k: limits[k])
    return {"occupancy": blocks * num_warps, "blocks_per_cu": blocks, "limiter": limiter,
            "max_warps_per_cu": max_warps}


def amd_occupancy(compiler_occupancy: int | None, shared_bytes: int, num_warps: int,
                  target: dict) -> dict:
    """Waves per SIMD on AMD: LLVM's number, capped by the LDS limit.

    Triton allocates all its LDS dynamically (``.group_segment_fixed_size`` is 0,
    the launch passes ``metadata.shared`` bytes), so LLVM's ``; Occupancy: N``
    (``LDSByteSize: 0 ... (compile time only)``) only accounts for registers and
    the workgroup size. With S = metadata.shared > 0, a CU holds
    floor(lds_bytes_per_cu / S) workgroups of num_warps waves spread over
    simds_per_cu SIMDs.
    """
    num_warps = max(1, int(num_warps or 1))
    max_waves = _int(target.get("max_waves_per_simd"))
    limits: dict[str, int] = {}
    if compiler_occupancy is not None:
        limits["compiler"] = int(compiler_occupancy)
    elif max_waves:
        limits["max_waves_per_simd"] = max_waves
    lds = _int(target.get("lds_bytes_per_cu"))
    shared = int(shared_bytes or 0)
    if shared > 0 and lds:
        wgs = lds // shared
        simds = _int(target.get("simds_per_cu")) or 4
        limits["lds"] = 0 if wgs == 0 else max(1, (wgs * num_warps) // simds)
    if not limits:
        return {"occupancy": None, "limiter": None}
    limiter = min(limits, key=lambda k: limits[k])
    return {"occupancy": limits[limiter], "limiter": limiter, "limits": limits}


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0
