"""What the template tests (test_kernels.py, test_template_contract.py and the
per-family files) share: the operator registry, the test targets, running a case
under the interpreter, comparing with the reference, ELF headers, and the rules
every template's config space keeps whatever the operator (each file adds its
operators' own). Imported after the test module has chosen the interpreter
(TRITON_INTERPRET=1) and put the repository on sys.path."""

import importlib
import os
import struct

import pytest
import torch
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTRY = yaml.safe_load(open(os.path.join(ROOT, "kernels", "operators.yaml")))["operators"]
TARGETS = {
    "gfx90a": {"name": "MI250X", "backend": "hip", "arch": "gfx90a", "warp_size": 64},
    "gfx942": {"name": "MI300X", "backend": "hip", "arch": "gfx942", "warp_size": 64},
    "gfx950": {"name": "MI355X", "backend": "hip", "arch": "gfx950", "warp_size": 64},
    "gfx1100": {"name": "RX7900XTX", "backend": "hip", "arch": "gfx1100", "warp_size": 32},
    "sm_90": {"name": "H200", "backend": "cuda", "arch": "sm_90", "warp_size": 32},
}
# e_flags low byte (EF_AMDGPU_MACH) of the hsaco per gfx.
GFX_MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx950": 0x4F, "gfx1100": 0x41}
AMD_KNOBS = {"waves_per_eu", "matrix_instr_nonkdim", "kpack"}
# The template tests' module mark: they run under the interpreter only.
INTERPRETED = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="kernel tests run under TRITON_INTERPRET=1")


def module_for(op):
    return importlib.import_module("kernels." + REGISTRY[op]["module"])


def defaults(op, params):
    """Registry defaults filled in, as the engine does for a job."""
    out = {k: v["default"] for k, v in REGISTRY[op]["params"].items() if "default" in v}
    out.update(params)
    return out


def upcast(inputs, dtype):
    wide = torch.float64 if dtype == "fp32" else torch.float32
    return {k: v.to(wide) for k, v in inputs.items()}


def run_case(op, shape, dtype, params, config, seed=0):
    """The kernel's output (NaN-filled before the launch) and the reference,
    on the CPU; fails if the kernel changed an input."""
    mod = module_for(op)
    inputs = mod.make_inputs(op, shape, dtype, params, seed, "cpu")
    before = {k: v.clone() for k, v in inputs.items()}
    out = mod.output_like(op, inputs, params)
    out.fill_(float("nan"))
    mod.launch(op, inputs, out, config, params)
    for k in inputs:
        assert torch.equal(inputs[k], before[k]), f"{op} modified its input {k}"
    ref = mod.reference(op, upcast(inputs, dtype), params)
    return out, ref


def elf_header(blob):
    """(EI_OSABI, e_machine, e_flags) of an ELF64 code object."""
    assert blob[:4] == b"\x7fELF", "not an ELF"
    assert blob[4] == 2, "not ELF64"
    e_machine = struct.unpack_from("<H", blob, 18)[0]
    e_flags = struct.unpack_from("<I", blob, 48)[0]
    return blob[7], e_machine, e_flags


def is_pow2(x):
    return x > 0 and (x & (x - 1)) == 0


def checked_space(mod, op, shape, dtype, params, tg, target):
    """The template's space for (op, shape, dtype) on target `tg` (named
    `target`), after checking the rules all templates keep: not empty,
    deterministic, no repeats; num_warps and num_stages in every config, warps a
    power of two within 1024 threads; BLOCK_* / GROUP_* / SPLIT_* knobs powers
    of two;
    the AMD knobs only on hip targets, waves_per_eu always there, only it on
    gfx1100 (no matrix-core knobs on RDNA), no kpack but 1 on gfx950."""
    space = mod.config_space(op, shape, dtype, params, tg)
    assert space, f"empty space for {op} {dtype} on {target}"
    assert space == mod.config_space(op, shape, dtype, params, tg), "order must be deterministic"
    keys = [tuple(sorted(c.items())) for c in space]
    assert len(set(keys)) == len(keys), "duplicate configs"
    for c in space:
        assert {"num_warps", "num_stages"} <= c.keys()
        assert is_pow2(c["num_warps"]) and c["num_warps"] * tg["warp_size"] <= 1024
        for k, v in c.items():
            if k.isupper():
                assert k.startswith(("BLOCK", "GROUP", "SPLIT")) and is_pow2(v), (k, v)
        knobs = AMD_KNOBS & c.keys()
        if tg["backend"] != "hip":
            assert not knobs
        else:
            assert "waves_per_eu" in c
            if target == "gfx1100":
                assert knobs == {"waves_per_eu"}
            if target == "gfx950":
                assert c.get("kpack", 1) == 1
    return space


# -- shared by test_template_contract.py and the per-family files --------------

NEW_OPS = ["rmsnorm", "row_sum", "row_mean", "row_max", "gemm_bias_act", "attention"]


# Anchor shapes (the H200 anchor cases, jobs/examples/anchors_h200.yaml): spaces and compiles only, never run here.
ANCHORS = {
    "rmsnorm": ([16384, 4096], "bf16", {}),
    "row_sum": ([16384, 4096], "fp32", {}),
    "row_mean": ([16384, 4096], "bf16", {}),
    "row_max": ([16384, 4096], "fp16", {}),
    "gemm_bias_act": ([8192, 4096, 4096], "bf16", {"activation": "gelu"}),
    "attention": ([4, 32, 2048, 128], "bf16", {"causal": True}),
}


def check_close(op, out, ref, dtype):
    tol = _common().tolerance(dtype)
    assert out.shape == ref.shape, (op, out.shape, ref.shape)
    assert not torch.isnan(out).any(), f"{op}: NaN in output (unwritten elements?)"
    # the worker scales atol by the output's rms once it exceeds 1 (sums of many terms)
    atol = tol["atol"] * max(1.0, float(ref.double().pow(2).mean().sqrt()))
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=atol, rtol=tol["rtol"])


def pick(configs, pred=None):
    """First, middle and last config (of those matching pred)."""
    if pred is not None:
        configs = [c for c in configs if pred(c)]
    assert configs, "no config of the requested kind"
    idx = sorted({0, len(configs) // 2, len(configs) - 1})
    return [configs[i] for i in idx]


# An H200 target with the specs of configs/targets/H200.yaml that the row,
# matmul and GEMM spaces read (TARGETS["sm_90"] has only the arch).
H200_FULL = dict(TARGETS["sm_90"], compute_units=132, simds_per_cu=4, max_waves_per_simd=16,
                 lds_bytes_per_cu=233472, max_shared_per_block=232448, registers_per_cu=65536)


def _common():
    from kernels import common
    return common


def cross_compiled(op, shape, dtype, params, name, keep=None):
    """Cross-compiles one config of the op's space (those `keep` accepts) per
    test target, rotating through the first, middle and last, and checks what
    every template keeps: the kernel's name, signature and grid, num_warps,
    shared memory within the target, and the code object's ELF header for the
    target (EM_AMDGPU with the gfx in e_flags, the warp size and the AMD knobs
    of the config; or EM_CUDA with sm_90 PTX). Yields (target, tg, config, spec,
    compiled) for the caller's own checks."""
    from kernels import common
    mod = module_for(op)
    for t_index, (target, tg) in enumerate(sorted(TARGETS.items())):
        space = mod.config_space(op, shape, dtype, params, tg)
        if keep is not None:
            space = [c for c in space if keep(c)]
        config = space[[0, len(space) // 2, len(space) - 1][(t_index + len(shape)) % 3]]
        spec = mod.compile_spec(op, shape, dtype, params, config, tg)
        assert spec["fn"].__name__ == name
        assert list(spec["signature"]) == spec["fn"].arg_names
        assert len(spec["grid"]) == 3 and all(g >= 1 for g in spec["grid"])
        compiled = common.cross_compile(spec, tg)
        assert compiled.metadata.name == name
        assert compiled.metadata.num_warps == config["num_warps"]
        assert compiled.metadata.shared <= common.shared_limit(tg)
        if tg["backend"] == "hip":
            osabi, machine, flags = elf_header(compiled.asm["hsaco"])
            assert machine == 224 and osabi == 64  # EM_AMDGPU, ELFOSABI_AMDGPU_HSA
            assert flags & 0xFF == GFX_MACH[target], (target, hex(flags))
            assert compiled.metadata.warp_size == tg["warp_size"]
            for knob in AMD_KNOBS & config.keys():
                assert getattr(compiled.metadata, knob) == config[knob]
        else:
            _, machine, _ = elf_header(compiled.asm["cubin"])
            assert machine == 190  # EM_CUDA
            assert "sm_90" in compiled.asm["ptx"]
        yield target, tg, config, spec, compiled


def check_make_inputs(op, shape):
    """make_inputs on a tiny shape: seeded (the same seed, the same tensors; another
    seed, others), contiguous, of the op's widest-listed dtype, not all zero (a
    constant input is nonzero everywhere); returns (the inputs, the dtype, the
    output_like tensor) for the caller's checks of the output."""
    from kernels import common
    params = defaults(op, {})
    dtype = REGISTRY[op]["dtypes"][-1]
    mod = module_for(op)
    a = mod.make_inputs(op, shape, dtype, params, 7, "cpu")
    b = mod.make_inputs(op, shape, dtype, params, 7, "cpu")
    c = mod.make_inputs(op, shape, dtype, params, 8, "cpu")
    assert a.keys() == b.keys() == c.keys()
    for k in a:
        assert a[k].dtype == common.torch_dtype(dtype)
        assert a[k].is_contiguous()
        assert torch.equal(a[k], b[k])
        assert not torch.equal(a[k], c[k])
        assert (a[k] != 0).all() or ((a[k] != 0).any() and a[k].float().std() > 0)
    return a, dtype, mod.output_like(op, a, params)
