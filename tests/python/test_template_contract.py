"""The template contract for rmsnorm, reduce (row_sum / row_mean / row_max),
gemm_epilogue (gemm_bias_act), attention and conv2d (test_kernels.py: the
older families): correctness under the Triton interpreter on tiny, odd shapes
(masking) with outputs NaN-poisoned first, against the torch reference in
float64 (fp32) or float32 (fp16 / bf16); inputs, traffic and config spaces;
cross-compilation to hsaco (gfx90a, gfx942, gfx950, gfx1100) and cubin (sm_90)
in the same process, ELF headers checked; common.spec's attrs against the JIT's;
and the real worker (python -m kiln_worker) end to end for each operator.

Run with:  cd <repo> && TRITON_INTERPRET=1 python3 -m pytest tests/python/test_template_contract.py -q
"""

import os
import sys

import pytest
import torch

from kernels import common
from kernel_testing import (ROOT, ANCHORS, INTERPRETED, NEW_OPS, REGISTRY, TARGETS, check_close,
                            check_make_inputs, checked_space, cross_compiled, defaults, elf_header,
                            module_for, pick, run_case)

pytestmark = INTERPRETED


def _onepass(shape):
    return lambda c: c["BLOCK_N"] >= shape[-1]


def _looped(shape):
    return lambda c: c["BLOCK_N"] < shape[-1]


# (op, shape, params, config filter or None, dtypes or None = all the registry's)
CASES = [
    ("rmsnorm", [7, 33], {}, _onepass([7, 33]), None),
    ("rmsnorm", [3, 1100], {"eps": 1e-3}, _onepass([3, 1100]), None),
    ("rmsnorm", [3, 1100], {}, _looped([3, 1100]), None),
    ("row_sum", [7, 33], {}, None, None),
    ("row_sum", [5, 1100], {}, _looped([5, 1100]), None),
    ("row_mean", [7, 33], {}, None, None),
    ("row_mean", [5, 1100], {}, None, None),
    ("row_max", [7, 33], {}, None, None),
    ("row_max", [5, 1100], {}, _looped([5, 1100]), None),
    ("gemm_bias_act", [37, 45, 50], {"activation": "none"}, None, None),   # K % BLOCK_K != 0
    ("gemm_bias_act", [37, 45, 50], {"activation": "relu"}, None, None),
    ("gemm_bias_act", [37, 45, 50], {"activation": "gelu"}, None, None),
    ("gemm_bias_act", [40, 24, 64], {"activation": "silu"}, None, None),   # EVEN_K
    ("attention", [1, 2, 37, 16], {"causal": True}, None, None),           # S % BLOCK != 0
    ("attention", [1, 2, 37, 16], {"causal": False}, None, None),
    ("attention", [2, 1, 64, 32], {"causal": True}, None, ["bf16"]),
    ("attention", [1, 2, 50, 16], {"causal": False, "sm_scale": 0.3}, None, ["fp16"]),
]


def _correctness_params():
    for op, shape, params, pred, dtypes in CASES:
        for dtype in dtypes or REGISTRY[op]["dtypes"]:
            yield pytest.param(op, shape, params, pred, dtype,
                               id=f"{op}-{'x'.join(map(str, shape))}-{dtype}-"
                                  + "-".join(f"{k}={v}" for k, v in params.items()))


@pytest.mark.parametrize("op,shape,params,pred,dtype", list(_correctness_params()))
def test_matches_reference(op, shape, params, pred, dtype):
    params = defaults(op, params)
    mod = module_for(op)
    # configs from a hip space (AMD knobs dropped on the CPU) and a cuda space
    configs = pick(mod.config_space(op, shape, dtype, params, TARGETS["gfx942"]), pred)
    configs += pick(mod.config_space(op, shape, dtype, params, TARGETS["sm_90"]), pred)[1:2]
    for i, config in enumerate(configs):
        out, ref = run_case(op, shape, dtype, params, config, seed=i)
        check_close(op, out, ref, dtype)


TINY = {"rmsnorm": [3, 5], "row_sum": [3, 5], "row_mean": [3, 5], "row_max": [3, 5],
        "gemm_bias_act": [3, 5, 4], "attention": [1, 2, 3, 16]}


@pytest.mark.parametrize("op", NEW_OPS)
def test_make_inputs_seeded_and_nonzero(op):
    _, dtype, out = check_make_inputs(op, TINY[op])
    expected = torch.float32 if op == "row_sum" else common.torch_dtype(dtype)
    assert out.dtype == expected


def test_registry_entries():
    for op in NEW_OPS:
        entry = REGISTRY[op]
        assert set(entry) >= {"module", "description", "shape", "dtypes", "params"}
        for name, p in entry["params"].items():
            assert "default" in p and p["type"] in ("int", "float", "bool", "string"), (op, name)
    assert REGISTRY["attention"]["params"]["causal"] == {"type": "bool", "default": True}
    assert REGISTRY["gemm_bias_act"]["params"]["activation"]["enum"] == ["none", "relu", "gelu", "silu"]
    assert REGISTRY["rmsnorm"]["params"]["eps"]["default"] == 1e-6


def test_traffic():
    t = module_for("rmsnorm").traffic("rmsnorm", [16384, 4096], "bf16", {})
    assert t["bytes"] == (2 * 16384 * 4096 + 4096) * 2
    t = module_for("row_sum").traffic("row_sum", [16384, 4096], "fp32", {})
    assert t == {"bytes": 16384 * 4096 * 4 + 16384 * 4, "flops": 16384 * 4096}
    t = module_for("row_sum").traffic("row_sum", [10, 100], "bf16", {})
    assert t["bytes"] == 1000 * 2 + 10 * 4  # fp32 output
    t = module_for("row_max").traffic("row_max", [10, 100], "bf16", {})
    assert t["bytes"] == 1000 * 2 + 10 * 2
    t = module_for("gemm_bias_act").traffic("gemm_bias_act", [8192, 4096, 4096], "bf16", {"activation": "gelu"})
    assert t["bytes"] == (8192 * 4096 + 4096 * 4096 + 4096 + 8192 * 4096) * 2
    assert t["flops"] >= 2 * 8192 * 4096 * 4096
    t = module_for("attention").traffic("attention", [4, 32, 2048, 128], "bf16", {"causal": True})
    assert t["bytes"] == 4 * 4 * 32 * 2048 * 128 * 2
    assert t["flops"] == 4 * 4 * 32 * (2048 * 2049 // 2) * 128
    t2 = module_for("attention").traffic("attention", [4, 32, 2048, 128], "bf16", {"causal": False})
    assert t2["flops"] == 4 * 4 * 32 * 2048 * 2048 * 128


@pytest.mark.parametrize("op", NEW_OPS + ["conv2d"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_config_space_rules(op, target):
    tg = TARGETS[target]
    if op == "conv2d":
        shape, dtypes, params = [64, 3, 224, 224], REGISTRY[op]["dtypes"], \
            {"out_channels": 64, "kernel_size": 3, "padding": 1}
    else:
        shape, _, params = ANCHORS[op]
        dtypes = REGISTRY[op]["dtypes"]
    params = defaults(op, params)
    mod = module_for(op)
    for dtype in dtypes:
        space = checked_space(mod, op, shape, dtype, params, tg, target)
        for c in space:
            if op in ("gemm_bias_act", "conv2d"):
                assert mod.shared_bytes(c, dtype, tg) <= common.shared_limit(tg)
            if op == "attention":
                assert c["BLOCK_M"] % c["BLOCK_N"] == 0
                assert mod.shared_estimate(c, dtype, shape[-1], tg) <= common.shared_limit(tg)
            mod.compile_spec(op, shape, dtype, params, c, tg)  # accepted, grid computable


def test_tiny_shapes_have_configs():
    for op, shape in [("rmsnorm", [1, 1]), ("row_sum", [1, 1]), ("row_max", [1, 1]),
                      ("gemm_bias_act", [1, 1, 1]), ("attention", [1, 1, 1, 16])]:
        params = defaults(op, {})
        for tg in TARGETS.values():
            space = module_for(op).config_space(op, shape, REGISTRY[op]["dtypes"][0], params, tg)
            assert space, (op, tg)
    out, ref = run_case("attention", [1, 1, 1, 16], "fp16", defaults("attention", {}),
                        module_for("attention").config_space("attention", [1, 1, 1, 16], "fp16", {},
                                                             TARGETS["sm_90"])[0])
    check_close("attention", out, ref, "fp16")


def test_anchor_space_sizes():
    # real choices on the anchor shapes, small enough for an exhaustive walk of 64
    sizes = {}
    for op in NEW_OPS:
        shape, dtype, params = ANCHORS[op]
        for target in ("sm_90", "gfx942"):
            n = len(module_for(op).config_space(op, shape, dtype, defaults(op, params), TARGETS[target]))
            sizes[(op, target)] = n
            assert n >= 8, (op, target, n)
    assert sizes[("gemm_bias_act", "sm_90")] >= 24 and sizes[("attention", "sm_90")] >= 12
    assert sizes[("rmsnorm", "sm_90")] <= 64 and sizes[("row_sum", "sm_90")] <= 64
    assert sizes[("attention", "sm_90")] <= 64
    # the tiles that measured best on an H200 come first
    first = module_for("gemm_bias_act").config_space("gemm_bias_act", [8192, 4096, 4096], "bf16",
                                                     {"activation": "gelu"}, TARGETS["sm_90"])[0]
    assert (first["BLOCK_M"], first["BLOCK_N"], first["BLOCK_K"], first["GROUP_M"]) == (128, 256, 64, 16)


# (op, shape, dtype, params, kernel name, config filter)
COMPILE_CASES = [
    ("rmsnorm", [16384, 4096], "bf16", {}, "rmsnorm_kernel", _onepass([16384, 4096])),
    ("rmsnorm", [64, 50000], "fp32", {}, "rmsnorm_looped_kernel", None),
    ("row_sum", [16384, 4096], "fp32", {}, "row_reduce_kernel", None),
    ("row_max", [1000, 3000], "bf16", {}, "row_reduce_kernel", None),
    ("gemm_bias_act", [8192, 4096, 4096], "bf16", {"activation": "gelu"}, "gemm_bias_act_kernel", None),
    ("gemm_bias_act", [100, 300, 200], "fp16", {"activation": "silu"}, "gemm_bias_act_kernel", None),
    ("attention", [4, 32, 2048, 128], "bf16", {"causal": True}, "attention_fwd_kernel", None),
    ("attention", [2, 8, 1000, 64], "fp16", {"causal": False}, "attention_fwd_kernel", None),
]


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}")
def test_cross_compile(case):
    op, shape, dtype, params, name, pred = case
    params = defaults(op, params)
    mod = module_for(op)
    n = 0
    for _, tg, config, spec, compiled in cross_compiled(op, shape, dtype, params, name, pred):
        assert spec["attrs"], "alignment hints missing"
        if op == "gemm_bias_act":
            assert compiled.metadata.shared <= max(mod.shared_bytes(config, dtype, tg), 1)
        if op == "attention":
            assert compiled.metadata.shared <= mod.shared_estimate(config, dtype, shape[-1], tg)
        n += 1
    assert n == len(TARGETS)


def test_interpreter_and_compiler_interleave_with_helper():
    # attention's inner loop is a @jit helper (wrapped for the compiler under the
    # interpreter): run, compile, run again in one process.
    op, shape = "attention", [1, 1, 20, 16]
    params = defaults(op, {"causal": True})
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_H": 8, "num_warps": 4, "num_stages": 1}
    mod = module_for(op)
    for _ in range(2):
        out, ref = run_case(op, shape, "fp16", params, cfg)
        check_close(op, out, ref, "fp16")
        for tg in (TARGETS["gfx942"], TARGETS["sm_90"]):
            common.cross_compile(mod.compile_spec(op, shape, "fp16", params, cfg, tg), tg)


def test_worker_end_to_end_new_ops(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python", "fixtures"))
    from worker_client import TARGET_H200, TARGET_MI300X, Worker, worker_env

    jobs = [("rmsnorm", [5, 300], "bf16", {}, TARGET_MI300X),
            ("row_sum", [6, 700], "fp16", {}, TARGET_H200),
            ("row_max", [6, 70], "fp32", {}, TARGET_MI300X),
            ("gemm_bias_act", [33, 40, 24], "fp16", {"activation": "gelu"}, TARGET_H200),
            ("attention", [1, 2, 24, 16], "bf16", {"causal": True}, TARGET_MI300X),
            ("conv2d", [1, 3, 9, 10], "fp16", {"out_channels": 8, "kernel_size": 3, "padding": 1}, TARGET_H200)]
    w = Worker(env=worker_env(kernels_dir=None))
    try:
        h = w.call("hello", timeout=300)
        assert h["ok"], h
        for op in NEW_OPS:
            assert op in h["result"]["operators"]
        for mod in ("rmsnorm", "reduce", "gemm_epilogue", "attention"):
            assert mod in h["result"]["templates"]
        for op, shape, dtype, params, target in jobs:
            job = {"op": op, "shape": shape, "dtype": dtype, "params": params, "target": target,
                   "constraints": [], "validation": {"seeds": 1, "atol": None, "rtol": None},
                   "benchmark": {"warmup": 1, "runs": 2}}
            sp = w.call("space", job=job, timeout=300)
            assert sp["ok"], sp
            configs = sp["result"]["configs"]
            assert configs and sp["result"]["traffic"]["bytes"] > 0
            assert all(("waves_per_eu" in c) == (target["backend"] == "hip") for c in configs)
            ans = w.call("evaluate", job=job, config=configs[0], artifact_dir=str(tmp_path / op), timeout=300)
            assert ans["ok"], ans
            r = ans["result"]
            assert r["status"] == "ok", (op, r["message"])
            assert r["correctness"]["passed"] is True
            a = r["artifact"]
            data = open(a["path"], "rb").read()
            _, machine, flags = elf_header(data)
            if target["backend"] == "hip":
                assert a["kind"] == "hsaco" and machine == 224 and flags & 0xFF == 0x4C
            else:
                assert a["kind"] == "cubin" and machine == 190
            assert a["grid"] == list(module_for(op).compile_spec(op, shape, dtype, defaults(op, params),
                                                                 configs[0], target)["grid"])
    finally:
        assert w.close() == 0, w.stderr[-3000:]


class _Stand:
    """A tensor as Triton's specialisation sees it: dtype, address, extent."""

    def __init__(self, dtype, nbytes):
        self.dtype, self.nbytes = dtype, nbytes

    def data_ptr(self):
        return 0

    def ptr_range(self):
        return self.nbytes


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_spec_attrs_are_the_jits(backend):
    """common.spec builds the signature, constexprs and attrs Triton's JIT
    builds at launch (JITFunction._pack_args over its native specialisation),
    in the same order: Triton's cache key contains str(attrs), so a difference
    makes the worker's first launch compile the kernel a second time, and for
    an AMD target the code object would not be the one the JIT builds there
    (tt.pointer_range 32 on tensors within 2 GiB: buffer loads and stores).
    An int equal to 1 becomes the constexpr 1, as in the JIT."""
    import triton
    import triton.language as tl
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    @triton.jit
    def k(x_ptr, out_ptr, n_aligned, n_odd, scale, BLOCK: tl.constexpr, POLICY: tl.constexpr,
          n_big, y_ptr, n_one, big_ptr):
        pass

    runtime = [("x_ptr", "*bf16", 4096), ("out_ptr", "*fp32", 2 ** 31 - 1), ("n_aligned", "i32", 4096),
               ("n_odd", "i32", 300), ("scale", "fp32", 0.5), ("n_big", "i32", 2 ** 40),
               ("y_ptr", "*fp16", None), ("n_one", "i32", 1), ("big_ptr", "*fp16", 2 ** 31)]
    constexprs = {"BLOCK": 128, "POLICY": "evict_first"}
    target = TARGETS["gfx942"] if backend == "hip" else TARGETS["sm_90"]
    spec = common.spec(k, runtime, constexprs, {"num_warps": 4}, (1,), target)

    jit = HIPBackend if backend == "hip" else BaseBackend
    dtypes = {"*bf16": torch.bfloat16, "*fp32": torch.float32, "*fp16": torch.float16}
    # a pointer of unknown size (None) is specialised as one past 2 GiB would be
    values = {n: (_Stand(dtypes[t], 2 ** 33 if v is None else v) if t.startswith("*") else v)
              for n, t, v in runtime}
    jit_attrs, jit_sig, jit_consts = {}, {}, dict(constexprs)
    for i, name in enumerate(spec["fn"].arg_names):
        if name in constexprs:
            ty, desc = "constexpr", constexprs[name]
        else:
            ty, desc = native_specialize_impl(jit, values[name], False, True, True)
            if ty == "constexpr":
                jit_consts[name] = desc
        jit_sig[name] = ty
        if isinstance(desc, str):
            jit_attrs[(i,)] = jit.parse_attr(desc)
    assert str(spec["attrs"]) == str(jit_attrs)
    assert spec["signature"] == jit_sig
    assert spec["constexprs"] == jit_consts
    ranged = [spec["fn"].arg_names[i] for (i,), a in spec["attrs"].items() if ["tt.pointer_range", 32] in a]
    assert ranged == (["x_ptr", "out_ptr"] if backend == "hip" else [])


def test_amd_code_objects_use_buffer_ops_within_2gib():
    """An add cross-compiled for MI300X loads and stores through buffer
    instructions when its tensors are within 2 GiB (as the JIT would build it
    on the GPU), and through global ones past that."""
    mod = module_for("add")
    tg = TARGETS["gfx942"]
    asm = {}
    for n in (1 << 20, (1 << 29) + 1024):  # 4 MiB; just past 2 GiB of fp32
        config = mod.config_space("add", [n], "fp32", {}, tg)[0]
        asm[n] = common.cross_compile(mod.compile_spec("add", [n], "fp32", {}, config, tg), tg).asm["amdgcn"]
    small, big = asm[1 << 20], asm[(1 << 29) + 1024]
    assert "buffer_load" in small and "global_load" not in small
    assert "buffer_load" not in big and "global_load" in big
