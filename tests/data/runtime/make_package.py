"""Builds small real kiln-package/2 directories (docs/package-format.md) for the
runtime's tests and for trying libkilnrt by hand.

    python3 make_package.py build OUT [--targets MI300X,MI250X,RX7900,H200]
                                      [--bundle] [--sign KEY.pem]
    python3 make_package.py resum PKG [--sign KEY.pem]   # rewrite SHA256SUMS (+ signature)
    python3 make_package.py keygen DIR                   # DIR/key.pem, DIR/key.pub (Ed25519)

Kernels are real Triton kernels cross-compiled with ``triton.compile(ASTSource(...),
target=GPUTarget(...))`` (no GPU needed): a row softmax (fp32, two ranks per
target) and an elementwise add (fp16). Verification data follow the format's
SplitMix64 rule, with expected values computed in float64 by numpy.

Beside the package it writes OUT.facts.json: what Triton itself says about each
code object (its metadata, and the AMDGPU metadata as printed in the amdgcn
assembly), and the first input values, so tests compare the runtime with
Triton rather than with constants.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"

import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=m, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * n_cols + offs, y.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


TARGETS = {
    "MI300X": {"arch": "gfx942", "backend": "hip", "vendor": "amd", "target_id": "amdgcn-amd-amdhsa--gfx942",
               "warp_size": 64, "compute_units": 304, "max_shared_per_block": 65536},
    "MI250X": {"arch": "gfx90a", "backend": "hip", "vendor": "amd", "target_id": "amdgcn-amd-amdhsa--gfx90a",
               "warp_size": 64, "compute_units": 110, "max_shared_per_block": 65536},
    "RX7900": {"arch": "gfx1100", "backend": "hip", "vendor": "amd", "target_id": "amdgcn-amd-amdhsa--gfx1100",
               "warp_size": 32, "compute_units": 96, "max_shared_per_block": 65536},
    "H200": {"arch": "sm_90", "backend": "cuda", "vendor": "nvidia", "target_id": "sm_90a",
             "warp_size": 32, "compute_units": 132, "max_shared_per_block": 232448},
}

G = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1


def splitmix_u64(seed, stream, n):
    """z for k = 0..n-1 of docs/package-format.md's SplitMix64 (numpy, wrapping)."""
    with np.errstate(over="ignore"):
        k = np.arange(1, n + 1, dtype=np.uint64)
        state = np.uint64((seed + stream * G) & M64) + k * np.uint64(G)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def splitmix_uniform(seed, stream, n):
    return (splitmix_u64(seed, stream, n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


NP = {"fp32": np.float32, "fp16": np.float16, "fp64": np.float64}


def make_inputs(seed, tensor, lo, hi, dtype, n):
    return (lo + (hi - lo) * splitmix_uniform(seed, tensor, n)).astype(NP[dtype])


def sample_indices(seed, tensor, count):
    if count <= 4096:
        return list(range(count))
    return [int(z % np.uint64(count)) for z in splitmix_u64(seed ^ 0x5A5A5A5A, tensor, 4096)]


def gpu_target(name):
    t = TARGETS[name]
    if t["backend"] == "cuda":
        return GPUTarget("cuda", int(t["arch"][3:]), 32)
    return GPUTarget("hip", t["arch"], t["warp_size"])


def asm_facts(amdgcn):
    """The AMDGPU metadata as the compiler printed it in the assembly."""
    def one(key):
        m = re.search(r"^\s*\.?" + re.escape(key) + r":\s+(\S+)", amdgcn, re.M)
        return m.group(1) if m else None
    ver = re.search(r"amdhsa\.version:\s*\n\s*-\s*(\d+)\s*\n\s*-\s*(\d+)", amdgcn)
    facts = {"target": one("amdhsa.target"), "version": [int(ver.group(1)), int(ver.group(2))] if ver else None}
    for key in ("kernarg_segment_size", "group_segment_fixed_size", "private_segment_fixed_size",
                "sgpr_count", "vgpr_count", "wavefront_size", "name"):
        v = one("." + key)
        facts[key] = v if key == "name" else (int(v) if v is not None else None)
    return facts


def kernels():
    """(op, shape, dtype, fn, signature, constexprs, variants: [(rank, options)], launch)"""
    return [
        dict(op="softmax", shape=[64, 1000], dtype="fp32", fn=softmax_kernel,
             signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"},
             constexprs={"BLOCK": 1024}, ranks=[{"num_warps": 4}, {"num_warps": 8}],
             tensors=[{"name": "x", "role": "input", "dtype": "fp32", "shape": ["s0", "s1"]},
                      {"name": "out", "role": "output", "dtype": "fp32", "shape": ["s0", "s1"]}],
             grid=["s0", "1", "1"],
             args=[{"name": "x_ptr", "type": "*fp32", "bind": {"tensor": 0}},
                   {"name": "out_ptr", "type": "*fp32", "bind": {"tensor": 1}},
                   {"name": "n_cols", "type": "i32", "bind": {"expr": "s1"}}],
             range={"dims": [{"min": 1, "max": 65536, "multiple_of": 1}, {"min": 1, "max": 1024, "multiple_of": 1}],
                    "verified_shapes": [[1, 1], [63, 1000], [64, 1024]]},
             inputs=[{"tensor": 0, "lo": -4.0, "hi": 4.0}],
             reference=lambda xs: [np.exp(xs[0] - xs[0].max(axis=1, keepdims=True)) /
                                   np.exp(xs[0] - xs[0].max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)],
             outputs=[1], tol=(1e-5, 1e-4)),
        dict(op="add", shape=[5000], dtype="fp16", fn=add_kernel,
             signature={"x_ptr": "*fp16", "y_ptr": "*fp16", "out_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"},
             constexprs={"BLOCK": 1024}, ranks=[{"num_warps": 4}],
             tensors=[{"name": "x", "role": "input", "dtype": "fp16", "shape": ["s0"]},
                      {"name": "y", "role": "input", "dtype": "fp16", "shape": ["s0"]},
                      {"name": "out", "role": "output", "dtype": "fp16", "shape": ["s0"]}],
             grid=["cdiv(s0, 1024)", "1", "1"],
             args=[{"name": "x_ptr", "type": "*fp16", "bind": {"tensor": 0}},
                   {"name": "y_ptr", "type": "*fp16", "bind": {"tensor": 1}},
                   {"name": "out_ptr", "type": "*fp16", "bind": {"tensor": 2}},
                   {"name": "n", "type": "i32", "bind": {"expr": "s0"}}],
             range={"exact": True},
             inputs=[{"tensor": 0, "lo": -1.0, "hi": 1.0}, {"tensor": 1, "lo": -1.0, "hi": 1.0}],
             reference=lambda xs: [xs[0] + xs[1]],
             outputs=[2], tol=(2e-3, 2e-3)),
    ]


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def resum(pkg, sign=None):
    pkg = Path(pkg)
    files = sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*")
                   if p.is_file() and p.name not in ("SHA256SUMS", "SHA256SUMS.sig"))
    text = "".join(f"{sha256((pkg / f).read_bytes())}  {f}\n" for f in files)
    (pkg / "SHA256SUMS").write_text(text)
    sig = pkg / "SHA256SUMS.sig"
    if sig.exists():
        sig.unlink()
    if sign:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "sig"
            subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", str(sign),
                            "-in", str(pkg / "SHA256SUMS"), "-out", str(out)], check=True)
            sig.write_text(out.read_bytes().hex() + "\n")


def keygen(d):
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(d / "key.pem")], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(d / "key.pem"), "-pubout", "-out", str(d / "key.pub")], check=True)


def build(out, targets, bundle=False, sign=None):
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "objects").mkdir(parents=True)
    (out / "verify").mkdir()
    facts = {"objects": {}, "verify": {}}
    manifest = {"format": "kiln-package/2", "created_at": 1764633600,
                "toolchain": {"kiln": "test", "triton": triton.__version__},
                "targets": [dict(name=n, **TARGETS[n], measured_on=None) for n in targets], "kernels": []}
    for spec in kernels():
        tag = f"{spec['op']}-{'x'.join(map(str, spec['shape']))}-{spec['dtype']}"
        # verification data, one per kernel (the same inputs for every variant)
        seed = 12345
        xs, vin = [], []
        for inp in spec["inputs"]:
            t = spec["tensors"][inp["tensor"]]
            n = int(np.prod(spec["shape"]))
            x = make_inputs(seed, inp["tensor"], inp["lo"], inp["hi"], t["dtype"], n)
            xs.append(x.astype(np.float64).reshape(spec["shape"]))
            vin.append(dict(inp))
            facts["verify"].setdefault(tag, {})[str(inp["tensor"])] = [float(v) for v in x[:64]]
        refs = spec["reference"](xs)
        vout = []
        atol, rtol = spec["tol"]
        for ti, ref in zip(spec["outputs"], refs):
            flat = ref.reshape(-1)
            idx = sample_indices(seed, ti, flat.size)
            vout.append({"tensor": ti, "atol": atol, "rtol": rtol,
                         "samples": [[i, float(flat[i])] for i in idx],
                         "sum": float(flat.sum()), "abs_sum": float(np.abs(flat).sum()), "count": int(flat.size)})
        vfile = f"verify/{tag}.json"
        (out / vfile).write_text(json.dumps({"format": "kiln-verify/1", "seed": seed, "shape": spec["shape"],
                                             "inputs": vin, "outputs": vout}))
        kern = {"operator": spec["op"], "shape": spec["shape"], "dtype": spec["dtype"], "params": {},
                "job_key": "test-" + tag, "tensors": spec["tensors"], "variants": []}
        for rank, options in enumerate(spec["ranks"]):
            amd_objects = {}
            for tname in targets:
                t = TARGETS[tname]
                c = triton.compile(ASTSource(fn=spec["fn"], signature=spec["signature"],
                                             constexprs=spec["constexprs"]),
                                   target=gpu_target(tname), options=dict(options))
                md = c.metadata._asdict()
                kind = "cubin" if t["backend"] == "cuda" else "hsaco"
                image = c.asm[kind]
                fname = f"objects/{tag}-r{rank}-{t['arch']}.{kind}"
                (out / fname).write_bytes(image)
                fact = {"kind": kind, "name": md["name"], "shared": md["shared"], "num_warps": md["num_warps"],
                        "warp_size": md["warp_size"], "arch": str(md["arch"])}
                if kind == "hsaco":
                    fact["asm"] = asm_facts(c.asm["amdgcn"])
                    amd_objects[tname] = (fname, image)
                else:
                    fact["ptx_target"] = re.search(r"^\.target\s+(\w+)", c.asm["ptx"], re.M).group(1)
                facts["objects"][fname] = fact
                args = list(spec["args"]) + [
                    {"name": "global_scratch", "type": "*i8", "hidden": True, "bind": {"scratch": "global"}},
                    {"name": "profile_scratch", "type": "*i8", "hidden": True, "bind": {"scratch": "profile"}}]
                kern["variants"].append({
                    "target": tname, "rank": rank, "file": fname, "sha256": sha256(image), "size": len(image),
                    "kernel_name": md["name"], "code_object_version": 5 if kind == "hsaco" else 0,
                    "num_warps": md["num_warps"], "num_stages": md["num_stages"], "warp_size": md["warp_size"],
                    "block": [md["num_warps"] * md["warp_size"], 1, 1], "shared_bytes": md["shared"],
                    "registers": 0, "sgprs": 0, "spills": 0, "scratch_bytes": 0,
                    "global_scratch_size": md.get("global_scratch_size", 0),
                    "global_scratch_align": md.get("global_scratch_align", 1),
                    "profile_scratch_size": md.get("profile_scratch_size", 0),
                    "profile_scratch_align": md.get("profile_scratch_align", 1),
                    "grid": spec["grid"], "args": args, "assume": [], "range": spec["range"],
                    "config": dict(options, **spec["constexprs"]), "candidate_id": 100 + rank,
                    "basis": "estimated", "value_ms": 0, "device": None, "driver": None, "verify": vfile})
            if bundle and len(amd_objects) > 1:
                co = f"objects/{tag}-r{rank}.co"
                names = list(amd_objects)
                # the binary bundle format (what hipModuleLoadData reads), device entries
                # only: clang-offload-bundler-15 needs a host entry for -type=o, not for
                # the binary handler (-type=bc), and --list then shows just the three
                ids = ["hipv4-amdgcn-amd-amdhsa--" + TARGETS[n]["arch"] for n in names]
                subprocess.run(["clang-offload-bundler-15", "-type=bc", "-targets=" + ",".join(ids)]
                               + [f"-input={out / amd_objects[n][0]}" for n in names]
                               + [f"-output={out / co}"], check=True)
                for v in kern["variants"]:
                    if v["rank"] == rank and v["target"] in amd_objects:
                        (out / v["file"]).unlink()
                        facts["objects"][co + "#" + TARGETS[v["target"]]["arch"]] = facts["objects"].pop(v["file"])
                        v["bundle_entry"] = "hipv4-amdgcn-amd-amdhsa--" + TARGETS[v["target"]]["arch"]
                        v["file"] = co
                        v.pop("size")
        manifest["kernels"].append(kern)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    resum(out, sign)
    Path(str(out) + ".facts.json").write_text(json.dumps(facts, indent=1))


def main(argv):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    b.add_argument("--targets", default="MI300X,MI250X,RX7900,H200")
    b.add_argument("--bundle", action="store_true")
    b.add_argument("--sign")
    r = sub.add_parser("resum")
    r.add_argument("pkg")
    r.add_argument("--sign")
    k = sub.add_parser("keygen")
    k.add_argument("dir")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        build(a.out, [t for t in a.targets.split(",") if t], a.bundle, a.sign)
    elif a.cmd == "resum":
        resum(a.pkg, a.sign)
    else:
        keygen(a.dir)


if __name__ == "__main__":
    main(sys.argv[1:])
