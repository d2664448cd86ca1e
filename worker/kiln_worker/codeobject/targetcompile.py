"""Cross-compiling a template's compile_spec for a job's target, and the artifact.

``triton.compile(ASTSource(...), target=GPUTarget(...), options=...)`` needs no
GPU: hip targets give an .hsaco, cuda targets a cubin. The code object is written
to ``<artifact_dir>/<sha256>.<kind>`` and described (kernel name, grid, block,
shared memory, argument layout, registers, spills, occupancy, Triton's metadata).
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from typing import Any

from . import resources
from ..service.jsonsafe import json_safe

MAX_MESSAGE = 4000


class CompileFailure(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def default_warp_size(backend: str, arch: str) -> int:
    if backend == "hip":
        # RDNA (gfx10/11/12) runs wave32 in Triton; CDNA/GCN (gfx9) wave64
        return 32 if re.match(r"gfx1\d", arch) else 64
    return 32


def cuda_capability(arch: Any) -> int:
    s = str(arch).strip().lower()
    m = re.fullmatch(r"(?:sm_?|compute_)?(\d+)[a-z]?", s)
    if not m:
        raise ValueError(f"cannot read a CUDA compute capability from arch {arch!r}")
    return int(m.group(1))


def gpu_target(target: dict):
    from triton.backends.compiler import GPUTarget
    backend = str(target.get("backend") or "").lower()
    arch = target.get("arch")
    if backend not in ("hip", "cuda"):
        vendor = str(target.get("vendor") or "").lower()
        backend = {"amd": "hip", "nvidia": "cuda"}.get(vendor, backend)
    if backend not in ("hip", "cuda") or not arch:
        raise ValueError(f"target {target.get('name')!r} needs backend hip|cuda and an arch "
                         f"(got backend={target.get('backend')!r}, arch={arch!r})")
    ws = target.get("warp_size") or default_warp_size(backend, str(arch))
    if backend == "cuda":
        return GPUTarget("cuda", cuda_capability(arch), int(ws))
    return GPUTarget("hip", str(arch), int(ws))


def normalise_grid(grid: Any) -> list[int]:
    if grid is None:
        return [1, 1, 1]
    if isinstance(grid, int):
        grid = [grid]
    g = [int(x) for x in list(grid)[:3]]
    while len(g) < 3:
        g.append(1)
    return g


def trim_message(msg: str, limit: int = MAX_MESSAGE) -> str:
    msg = msg.strip()
    if len(msg) <= limit:
        return msg
    head = limit // 3
    tail = limit - head - 40
    return msg[:head] + f"\n... [{len(msg) - head - tail} characters trimmed] ...\n" + msg[-tail:]


def describe_exception(exc: BaseException) -> str:
    """Triton's message, with the chained causes that carry the real reason."""
    parts = []
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(parts) < 4:
        seen.add(id(e))
        text = str(e).strip()
        name = type(e).__name__
        if not (parts and text and text in parts[-1]):  # a cause that only repeats its effect
            parts.append(f"{name}: {text}" if text else name)
        e = e.__cause__ or (e.__context__ if not e.__suppress_context__ else None)
    return trim_message("\n\nCaused by: ".join(parts))


def is_resource_error(exc: BaseException) -> bool:
    try:
        from triton.runtime.errors import OutOfResources
        if isinstance(exc, OutOfResources):
            return True
    except Exception:
        pass
    text = str(exc).lower()
    return ("out of resource" in text or "too many resources requested" in text
            or "exceeds the maximum" in text and "shared" in text)


def compile_for_target(spec: dict, target: dict):
    """triton.compile for the target; raises CompileFailure."""
    import triton
    from triton.compiler import ASTSource
    try:
        tgt = gpu_target(target)
    except ValueError as exc:
        raise CompileFailure("compile_error", str(exc)) from None
    source = ASTSource
    if getattr(spec["fn"], "is_gluon", lambda: False)():
        # a @gluon.jit kernel (attention's `ws` tiles) is lowered from its own layouts
        from triton.experimental.gluon._runtime import GluonASTSource as source
    try:
        src = source(spec["fn"], dict(spec["signature"]), dict(spec.get("constexprs") or {}), spec.get("attrs"))
        return triton.compile(src, target=tgt, options=dict(spec.get("options") or {}))
    except Exception as exc:
        status = "resource_error" if is_resource_error(exc) else "compile_error"
        raise CompileFailure(status, describe_exception(exc)) from exc


def kernel_args(spec: dict, n_code_args: int | None, tensordesc_meta: list | None = None) -> list[dict]:
    """The kernel's parameters as a launcher passes them: the runtime arguments
    in order, then Triton's hidden scratch pointers. A host-side TMA descriptor
    argument (type "tensordesc<...>", a Gluon kernel's) is several parameters,
    as Triton's own launcher passes them (backends/nvidia/driver.py): the
    CUtensorMap by value ("nvTmaDesc", 128 bytes; encode it with
    cuTensorMapEncodeTiled from `tensormap`, the compiler's tensordesc_meta:
    swizzle, element size and type, box = block_size), then the tensor's shape
    (i32 each) and strides (i64 each, in elements)."""
    constexprs = set((spec.get("constexprs") or {}).keys())
    metas = list(tensordesc_meta or [])
    args = []
    for name, ty in dict(spec["signature"]).items():
        if ty == "constexpr" or name in constexprs:
            continue
        ty = str(ty)
        if ty.startswith("tensordesc"):
            m = re.match(r"tensordesc<([^\[>]*)\[([^\]]*)\]", ty)
            rank = m.group(2).count(",") + 1 if m else 2
            desc = {"name": name, "type": "nvTmaDesc", "dtype": m.group(1) if m else None,
                    "block_shape": [int(x) for x in m.group(2).split(",")] if m else None}
            if metas:
                desc["tensormap"] = metas.pop(0)
            args.append(desc)
            args += [{"name": f"{name}.shape[{i}]", "type": "i32"} for i in range(rank)]
            args += [{"name": f"{name}.strides[{i}]", "type": "i64"} for i in range(rank)]
            continue
        args.append({"name": name, "type": ty})
    hidden = 2  # Triton 3.x: global scratch, profile scratch
    if n_code_args is not None and n_code_args >= len(args):
        hidden = n_code_args - len(args)
    names = ["global_scratch", "profile_scratch"]
    for i in range(hidden):
        args.append({"name": names[i] if i < len(names) else f"hidden_{i}", "type": "*i8",
                     "hidden": True})
    return args


def write_artifact(data: bytes, artifact_dir: str, kind: str) -> tuple[str, str]:
    digest = hashlib.sha256(data).hexdigest()
    os.makedirs(artifact_dir, exist_ok=True)
    path = os.path.join(os.path.abspath(artifact_dir), f"{digest}.{kind}")
    # Always (re)written, atomically: the engine reads and deletes the file per
    # result, and two candidates can produce byte-identical code objects.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix="." + kind)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path, digest


def build_artifact(compiled, spec: dict, target: dict, artifact_dir: str | None) -> dict:
    md = compiled.metadata
    backend = str(getattr(md.target, "backend", None) or target.get("backend"))
    kind = "hsaco" if backend == "hip" else "cubin"
    blob = compiled.asm[kind]
    if isinstance(blob, str):
        blob = blob.encode()
    num_warps = int(md.num_warps)
    warp_size = int(getattr(md, "warp_size", None) or target.get("warp_size") or 32)
    if kind == "hsaco":
        rep = resources.hsaco_report(blob, compiled.asm.get("amdgcn"), md.name)
        occ = resources.amd_occupancy(rep.get("occupancy"), int(md.shared), num_warps, target)
        rep["occupancy_compiler"] = rep.get("occupancy")
        rep["occupancy"] = occ["occupancy"]
        rep["occupancy_source"] = "compiler" if occ.get("limiter") == "compiler" else "computed"
        rep["occupancy_detail"] = occ
    else:
        rep = resources.cubin_report(blob, md.name, ptx=compiled.asm.get("ptx"),
                                     arch=f"sm_{getattr(md.target, 'arch', 90)}",
                                     run_ptxas=os.environ.get("KILN_PTXAS_SPILLS", "1") != "0")
        occ = resources.nvidia_occupancy(rep.get("registers"), int(md.shared), num_warps, target,
                                         warp_size)
        rep["occupancy"] = occ["occupancy"]
        rep["occupancy_source"] = "computed"
        rep["occupancy_detail"] = occ
    path = sha = None
    if artifact_dir:
        path, sha = write_artifact(blob, artifact_dir, kind)
    else:
        sha = hashlib.sha256(blob).hexdigest()
    meta = json_safe(md._asdict() if hasattr(md, "_asdict") else dict(md.__dict__))
    art = {
        "target": target.get("name"),
        "arch": str(target.get("arch")),
        "kind": kind,
        "path": path,
        "sha256": sha,
        "size_bytes": len(blob),
        "kernel_name": md.name,
        "num_warps": num_warps,
        "num_stages": getattr(md, "num_stages", None),
        "warp_size": warp_size,
        "shared_bytes": int(md.shared),
        "registers": rep.get("registers"),
        "sgprs": rep.get("sgprs"),
        "spills": rep.get("spills"),
        "scratch_bytes": rep.get("scratch_bytes"),
        "occupancy": rep.get("occupancy"),
        "grid": normalise_grid(spec.get("grid")),
        "block": [num_warps * warp_size, 1, 1],
        "args": kernel_args(spec, rep.get("num_kernel_args"), getattr(md, "tensordesc_meta", None)),
        "metadata": meta,
        "resources": json_safe({k: v for k, v in rep.items() if k != "kernel_args"}),
    }
    return art


def check_target_limits(art: dict, target: dict) -> str | None:
    """A resource_error message when the kernel cannot launch on the target.

    Triton only checks shared memory and threads when it loads a kernel on a
    device, so for a cross-compiled target we check: shared memory against
    ``max_shared_per_block`` (else ``lds_bytes_per_cu``); threads against
    ``max_threads_per_block`` (default 1024); on NVIDIA, registers x threads
    against ``registers_per_cu`` (a block must fit on one SM); and a compiler
    occupancy of 0 on AMD.
    """
    name = target.get("name") or target.get("arch")
    shared = int(art.get("shared_bytes") or 0)
    limit = target.get("max_shared_per_block") or target.get("lds_bytes_per_cu")
    try:
        limit = int(limit) if limit else None
    except (TypeError, ValueError):
        limit = None
    if limit and shared > limit:
        return (f"out of resource: shared memory, Required: {shared}, Hardware limit: {limit} "
                f"(target {name}). Reducing block sizes or `num_stages` may help.")
    threads = art["block"][0]
    tmax = int(target.get("max_threads_per_block") or 1024)
    if threads > tmax:
        return f"out of resource: threads, Required: {threads}, Hardware limit: {tmax} (target {name})"
    regs = art.get("registers")
    if art["kind"] == "cubin" and regs:
        rf = int(target.get("registers_per_cu") or 65536)
        per_warp = -(-int(regs) * 32 // 256) * 256
        need = per_warp * (threads // 32)
        if need > rf:
            return (f"out of resource: registers, Required: {need} ({regs} per thread x {threads} "
                    f"threads), Hardware limit: {rf} (target {name})")
    if art["kind"] == "hsaco" and art.get("occupancy") == 0:
        return f"out of resource: the compiler reports occupancy 0 on {name}"
    return None


def compile_stage(lib, op: str, shape: list, dtype: str, params: dict, config: dict, target: dict,
                  artifact_dir: str | None) -> dict:
    """Step (1) of evaluate: {"status", "message", "artifact"} for the job's target.

    Runs in the worker on a GPU, and in the compile child (compile_child.py) when
    the worker runs kernels in the Triton interpreter.
    """
    from .elf import ElfError
    art = None
    try:
        mod = lib.launch_module(op)
        try:
            spec = mod.compile_spec(op, shape, dtype, params, config, target)
        except Exception as exc:
            raise CompileFailure("compile_error",
                                 "compile_spec rejected the config: " + describe_exception(exc))
        compiled = compile_for_target(spec, target)
        try:
            art = build_artifact(compiled, spec, target, artifact_dir)
        except (ElfError, KeyError, ValueError) as exc:
            raise CompileFailure("compile_error",
                                 f"the code object could not be read: {describe_exception(exc)}")
        limit = check_target_limits(art, target)
        if limit:
            raise CompileFailure("resource_error", limit)
    except CompileFailure as f:
        return {"status": f.status, "message": f.message, "artifact": art}
    return {"status": "ok", "message": "", "artifact": art}
