#!/usr/bin/env python3
"""Regenerates the code-object seeds of fuzz/corpus/{rt,pkg}_code_object:
a small Triton kernel compiled for gfx942 (.hsaco, with its AMDGPU metadata
note) and for sm_90 (.cubin), on a machine without a GPU. The offload bundle
seed (add.bundle) wraps the hsaco. Usage: python3 fuzz/make_code_object_seeds.py
"""
import os
import struct

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

HERE = os.path.dirname(os.path.abspath(__file__))


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def bundle(entries):
    """A clang offload bundle (__CLANG_OFFLOAD_BUNDLE__, version 1 layout)."""
    hdr = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries))
    off = len(hdr) + sum(24 + len(i) for i, _ in entries)
    table, body = b"", b""
    for ident, b in entries:
        table += struct.pack("<QQQ", off, len(b), len(ident)) + ident.encode()
        off += len(b)
        body += b
    return hdr + table + body


def main():
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    out = {}
    for tgt, key, name in [(GPUTarget("hip", "gfx942", 64), "hsaco", "add.gfx942.hsaco"),
                           (GPUTarget("cuda", 90, 32), "cubin", "add.sm90.cubin")]:
        src = triton.compiler.ASTSource(fn=add_kernel, signature=sig, constexprs={"BLOCK": 64})
        out[name] = triton.compile(src, target=tgt, options={"num_warps": 1}).asm[key]
    tiny = b"\x7fELF\x02\x01\x01" + b"\0" * 57
    for d in ("rt_code_object", "pkg_code_object"):
        for name, b in list(out.items()) + [("tiny.elf", tiny)]:
            with open(os.path.join(HERE, "corpus", d, name), "wb") as f:
                f.write(b)
    with open(os.path.join(HERE, "corpus", "rt_code_object", "add.bundle"), "wb") as f:
        f.write(bundle([("host-x86_64-unknown-linux-gnu", b""),
                        ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", out["add.gfx942.hsaco"])]))


if __name__ == "__main__":
    main()
