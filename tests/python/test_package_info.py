"""The worker's `package_info` method (worker/kiln_worker/packaging/package_info.py and
its parts: shape_expr, launch_exprs, verify_data), against the contract of
docs/package-format.md.

    TRITON_INTERPRET=1 python3 -m pytest -q tests/python/test_package_info.py

* every template's launch expressions, as a loader would evaluate their text,
  against the template's own compile_spec (grid, every scalar argument's
  value, every pointer's tensor: dtype and byte size) over its config space
  and extra knob configs, on several shapes and two targets; the tensors
  against make_inputs / output_like;
* the SplitMix64 generator and the dtype rounding against a pure-Python
  (integer / Fraction) reading of the spec, and a known answer;
* verification data round trip: the real template kernel launched in the
  Triton interpreter on inputs regenerated from the verify object passes
  check_verify; a NaN left in the output, one element off by 10x the
  tolerance, a whole row wrong each fail;
* the method through a real worker process, its answer validated against the
  format.
"""
from __future__ import annotations

import math
import os
import sys
from fractions import Fraction
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
HOME = Path(__file__).resolve().parents[2]
for p in (str(HOME / "worker"), str(HOME), str(HOME / "tests" / "python" / "fixtures")):
    if p not in sys.path:
        sys.path.insert(0, p)

import pytest  # noqa: E402
import torch  # noqa: E402

from kiln_worker.evaluation import confirm  # noqa: E402
from kiln_worker.packaging import launch_exprs, package_info, verify_data  # noqa: E402
from kiln_worker.packaging.shape_expr import ExprError, cdiv, dims, emin, evaluate, parse  # noqa: E402
from kiln_worker.codeobject.targetcompile import kernel_args  # noqa: E402
from kiln_worker.evaluation.templates import Library  # noqa: E402
from worker_client import TARGET_H200, TARGET_MI300X, Worker, worker_env  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="runs the templates under TRITON_INTERPRET=1")

LIB = Library(HOME / "kernels")
EB = {"fp32": 4, "fp16": 2, "bf16": 2}
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# op -> (dtype, params, shapes, extra configs beyond its config space)
CASES = {
    "add": ("fp16", {}, [[3, 100], [4, 100], [7], [2, 3, 5, 16]], [{"BLOCK": 64, "num_warps": 1}]),
    "bias_gelu": ("bf16", {"approximate": "tanh"}, [[5, 70], [16, 128]], []),
    "softmax": ("fp32", {}, [[6, 40], [1, 33], [64, 512], [5, 3000], [2, 4000]],
                [{"BLOCK_M": 2, "BLOCK_N": 4096, "num_warps": 4, "num_stages": 2, "programs": 3, "stream": 1}]),
    "layernorm": ("bf16", {"eps": 1e-5}, [[4, 33], [32, 1024]],
                  [{"BLOCK_M": 1, "BLOCK_N": 1024, "num_warps": 4, "num_stages": 1, "programs": 5}]),
    "rmsnorm": ("fp16", {"eps": 1e-6}, [[7, 20], [48, 256]], []),
    "row_sum": ("bf16", {}, [[3, 50], [33, 2048]],
                [{"BLOCK_M": 1, "BLOCK_N": 2048, "num_warps": 4, "num_stages": 2, "programs": 4}]),
    "row_mean": ("fp16", {}, [[3, 50]], []),
    "row_max": ("fp32", {}, [[1, 7], [16, 64]], []),
    "matmul": ("fp16", {}, [[40, 24, 33], [64, 48, 32], [1, 16, 16], [512, 512, 16]],
               [{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 2, "num_stages": 3,
                 "persistent": 1},
                {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 2, "num_stages": 3,
                 "persistent": 2}]),
    "gemm_bias_act": ("bf16", {"activation": "gelu"}, [[16, 48, 32], [33, 17, 40]],
                      [{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 16, "num_warps": 2,
                        "num_stages": 3, "persistent": 1}]),
    "conv2d": ("fp32", {"out_channels": 5, "kernel_size": 3, "stride": 2, "padding": 1},
               [[2, 3, 9, 10], [1, 4, 16, 16]],
               [{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "BLOCK_P": 64, "num_warps": 2, "num_stages": 2},
                {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "num_warps": 2, "num_stages": 2, "programs": 3,
                 "spec": 1, "stream": 1},
                {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "num_warps": 2, "num_stages": 2, "programs": 8,
                 "prefetch": 1}]),
    "attention": ("fp16", {"causal": False, "sm_scale": 0.0}, [[1, 2, 40, 32], [2, 3, 128, 64]],
                  [{"BLOCK_M": 128, "BLOCK_N": 64, "GROUP_H": 8, "num_warps": 4, "num_stages": 2, "ws": 1},
                   {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_H": 8, "num_warps": 4, "num_stages": 2, "ws": 1,
                    "pair": 1}]),
}


def _bound_args(op, shape, dtype, params, config, target):
    """package_info's launch of one config at `shape`, as the package
    carries it (texts), with compile_spec's own spec and argument values."""
    mod = LIB.launch_module(op)
    L = launch_exprs.launch(LIB, op, len(shape), dtype, params, config, target)
    spec, args = package_info.traced_spec(LIB, mod, op, shape, dtype, params, config, target)
    art = kernel_args(spec, None, _fake_tensormaps(spec))
    bound = package_info.bind_args(art, L, spec, {n: v for n, _, v in args})
    tensors = [{"name": t["name"], "role": t["role"], "dtype": t["dtype"], "shape": [str(e) for e in t["shape"]]}
               for t in L.tensors]
    return spec, args, bound, tensors, [str(e) for e in L.grid]


def _fake_tensormaps(spec):
    """kernel_args needs the compiler's tensordesc_meta for a descriptor; here
    only its presence matters (the box comes from it: checked against a real
    compile in test_attention_ws_descriptors)."""
    n = sum(1 for t in dict(spec["signature"]).values() if str(t).startswith("tensordesc"))
    return [{"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [64, 64], "fp4_padded": False}] * n


def _configs(op, shape, dtype, params, target, extra):
    mod = LIB.launch_module(op)
    out = []
    for c in list(mod.config_space(op, shape, dtype, params, target)) + list(extra):
        try:
            mod.compile_spec(op, shape, dtype, params, c, target)
        except ValueError:
            continue  # a knob config this shape / target does not take
        out.append(c)
    return out


@pytest.mark.parametrize("op", sorted(CASES))
def test_launch_expressions_equal_compile_spec(op):
    """At each shape, every config: the texts evaluated by the strict parser
    give compile_spec's grid and integer arguments exactly; each tensor
    binding names a tensor of the pointer's dtype and of compile_spec's byte
    size; each float argument carries compile_spec's value."""
    dtype, params, shapes, extra = CASES[op]
    checked = 0
    for target in (TARGET_MI300X, TARGET_H200):
        for shape in shapes:
            for config in _configs(op, shape, dtype, params, target, extra):
                spec, args, bound, tensors, grid = _bound_args(op, shape, dtype, params, config, target)
                where = f"{op} {shape} {target['name']} {config}"
                assert [evaluate(g, shape) for g in grid] == list(spec["grid"]), where
                by_name = {a["name"]: a for a in bound}
                for name, ty, value in args:
                    if ty.startswith("tensordesc"):
                        assert "tma" in by_name[name]["bind"], where
                        continue
                    if isinstance(value, int) and not ty.startswith("*") and value == 1 and \
                            name in spec["constexprs"]:
                        assert name not in by_name, where  # Triton's constant 1: not a parameter
                        continue
                    bind = by_name[name]["bind"]
                    if ty.startswith("*"):
                        t = tensors[bind["tensor"]]
                        assert t["dtype"] == ty[1:], where
                        size = math.prod(evaluate(e, shape) for e in t["shape"]) * EB[t["dtype"]]
                        assert value is None or size == value, (where, name, size, value)
                    elif isinstance(value, int):
                        assert evaluate(bind["expr"], shape) == value, (where, name)
                    else:
                        assert bind == {"value": value}, (where, name)
                assert [a["name"] for a in bound][-2:] == ["global_scratch", "profile_scratch"]
                checked += 1
    assert checked >= 2 * len(shapes), checked


@pytest.mark.parametrize("op", sorted(CASES))
def test_tensors_are_make_inputs_then_output_like(op):
    dtype, params, shapes, _ = CASES[op]
    mod = LIB.launch_module(op)
    shape = shapes[0]
    merged = dict(params)
    config = _configs(op, shape, dtype, params, TARGET_H200, [])[0]
    L = launch_exprs.launch(LIB, op, len(shape), dtype, merged, config, TARGET_H200)
    inputs = mod.make_inputs(op, shape, dtype, merged, 0, "cpu")
    out = mod.output_like(op, inputs, merged)
    real = [(k, "input", v) for k, v in inputs.items()] + [("out", "output", out)]
    assert [(t["name"], t["role"]) for t in L.tensors] == [(n, r) for n, r, _ in real]
    for t, (_, _, v) in zip(L.tensors, real):
        assert [evaluate(str(e), shape) for e in t["shape"]] == list(v.shape), (op, t["name"])
        assert TORCH[t["dtype"]] == v.dtype, (op, t["name"])


def test_attention_ws_descriptors_from_a_real_compile():
    """The Gluon kernel's TMA descriptors: the box and swizzle the compiler's
    tensordesc_meta gives (cross-compiled for sm_90), dims / strides over the
    [B*H*S, D] views, followed by their shape and stride arguments."""
    from kernels import common
    shape, params = [1, 2, 256, 128], {"causal": True, "sm_scale": 0.0}
    cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "GROUP_H": 8, "num_stages": 2, "num_warps": 4, "ws": 1}
    mod = LIB.launch_module("attention")
    spec, args = package_info.traced_spec(LIB, mod, "attention", shape, "bf16", params, cfg, TARGET_H200)
    compiled = common.cross_compile(spec, TARGET_H200)
    meta = compiled.metadata.tensordesc_meta
    L = launch_exprs.launch(LIB, "attention", 4, "bf16", params, cfg, TARGET_H200)
    bound = package_info.bind_args(kernel_args(spec, None, meta), L, spec, {n: v for n, _, v in args})
    descs = [a for a in bound if a["type"] == "nvTmaDesc"]
    assert [a["name"] for a in descs] == ["q_desc", "k_desc", "v_desc"]
    for i, (a, m) in enumerate(zip(descs, meta)):
        tma = a["bind"]["tma"]
        assert tma["tensor"] == i and tma["elem"] == "bf16"
        assert tma["box"] == list(m["block_size"])
        assert tma["swizzle_bytes"] == {0: 0, 1: 32, 2: 64, 3: 128}[m["swizzle"]]
        assert [evaluate(e, shape) for e in tma["dims"]] == [1 * 2 * 256, 128]
        assert [evaluate(e, shape) for e in tma["strides_bytes"]] == [128 * 2]
        k = bound.index(a)
        assert [(b["name"], evaluate(b["bind"]["expr"], shape)) for b in bound[k + 1:k + 5]] == [
            (f"{a['name']}.shape[0]", 512), (f"{a['name']}.shape[1]", 128),
            (f"{a['name']}.strides[0]", 128), (f"{a['name']}.strides[1]", 1)]


def test_assume_is_tritons_divisibility():
    """assume: exactly the integer arguments compile_spec marked divisible by
    16 (and none for values that are not)."""
    cases = [("add", [4, 100], "fp16", {"BLOCK": 64, "num_warps": 1}, [("s0 * s1", 16)]),
             ("add", [3, 100], "fp16", {"BLOCK": 64, "num_warps": 1}, []),
             ("matmul", [64, 48, 32], "fp16",
              {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 2, "num_stages": 3},
              [("s0", 16), ("s1", 16), ("s2", 16)]),
             ("softmax", [6, 48], "fp32", {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1},
              [("s1", 16)])]
    for op, shape, dtype, cfg, expected in cases:
        mod = LIB.launch_module(op)
        L = launch_exprs.launch(LIB, op, len(shape), dtype, {}, cfg, TARGET_MI300X)
        spec, args = package_info.traced_spec(LIB, mod, op, shape, dtype, {}, cfg, TARGET_MI300X)
        got = [(a["expr"], a["multiple_of"]) for a in package_info.assumptions(L, spec)]
        assert got == expected, (op, shape, got)
        ints = [v for _, ty, v in args if ty in ("i32", "i64") and v % 16 == 0 and v != 1]
        assert len(ints) == len(got)


def test_expression_grammar():
    s0, s1, s2 = dims(3)
    for e, shape, want in [(cdiv(s0 * s1, 1024), [3, 1000, 1], 3), (s0 - (s1 - 3), [10, 5, 0], 8),
                           (s0 * (s1 // 4), [10, 9, 0], 20), (emin(8, cdiv(s0, 2)) % 5, [30, 0, 0], 3),
                           ((s2 + (-3)) // 2 + 1, [0, 0, 9], 4), ((s2 - 3) // 2, [0, 0, 0], -2)]:
        assert evaluate(str(e), shape) == want == e.eval(shape), str(e)
        assert parse(str(e)) == e or evaluate(str(parse(str(e))), shape) == want
    assert evaluate("(0 - 7) // 2", []) == -4 and evaluate("(0 - 7) % 3", []) == 2
    assert evaluate("max(s0, 3) - min(2, 1) * 4", [5]) == 1
    for bad in ["s1x", "3s", "foo(1, 2)", "s0 +", "-1", "s0 ** 2", "s0 / 2", "cdiv(s0)", "s0 s1", ""]:
        with pytest.raises(ExprError):
            evaluate(bad, [1, 2])
    with pytest.raises(ExprError):
        evaluate("s0 * s0", [1 << 40])  # leaves 64 bits
    with pytest.raises(ExprError):
        evaluate("s0 // (s0 - 4)", [4])


def test_interval_picks_the_widest_lattice():
    # K = 64: the odd neighbours fail (EVEN_K / divisibility), multiples of 16 pass
    res = {63: "fail", 65: "fail", 32: "pass", 128: "pass", 48: "pass", 80: "pass", 1: "fail", 256: "skipped"}
    assert package_info._interval(64, res, 1) == (32, 128, 16)
    # no lattice of even sizes helps: only the contiguous passing run
    res = {39: "pass", 41: "pass", 38: "pass", 42: "pass", 33: "pass", 47: "pass", 32: "fail", 48: "fail",
           80: "fail", 20: "pass"}
    assert package_info._interval(40, res, 1) == (33, 47, 1)
    assert package_info._interval(40, {39: "fail", 41: "fail"}, 1) == (40, 40, 1)


# ---------------------------------------------------------------------------
# SplitMix64 and the rounding, against a plain reading of the spec
# ---------------------------------------------------------------------------

G, M64 = 0x9E3779B97F4A7C15, (1 << 64) - 1


def _spec_z(seed, t, n):
    state = (seed + t * G) & M64
    out = []
    for _ in range(n):
        state = (state + G) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


_FORMATS = {"fp32": (24, -126, 128), "fp16": (11, -14, 16), "bf16": (8, -126, 128)}


def _spec_round(x: float, dtype: str) -> float:
    """x rounded once to nearest even with `dtype`'s significand bits,
    subnormals and overflow, in exact rational arithmetic."""
    p, emin_, emax_ = _FORMATS[dtype]
    if x == 0:
        return x
    f = Fraction(x)
    e = math.frexp(x)[1] - 1  # |x| in [2^e, 2^(e+1))
    quantum = Fraction(2) ** (max(e, emin_) - (p - 1))
    r = round(f / quantum) * quantum  # Fraction.__round__: half to even
    if abs(r) >= Fraction(2) ** emax_:
        return math.copysign(math.inf, x)
    return float(r)


def test_splitmix64_known_answer_and_spec():
    # SplitMix64 seeded with 0: the generator's well-known first outputs
    assert int(verify_data.splitmix64(0, 0, 1)[0]) == 0xE220A8397B1DCDAF
    assert int(verify_data.splitmix64(0, 0, 2)[1]) == 0x6E789E6AA1B965F4
    for seed, t, n in [(0, 0, 10), (12345, 1, 1000), ((1 << 64) - 5, 3, 257), (7, 0, 3)]:
        got = [int(z) for z in verify_data.splitmix64(seed, t, n)]
        assert got == _spec_z(seed, t, n), (seed, t)
        # a later chunk is the same stream
        k = min(5, n)
        assert [int(z) for z in verify_data.splitmix64(seed, t, k, start=n - k)] == got[-k:]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_fill_matches_the_spec(dtype):
    seed, t, n, lo, hi = 99, 2, 3000, -8.0, 8.0
    got = verify_data.fill(seed, t, n, lo, hi, dtype).tolist()
    want = [_spec_round(lo + (hi - lo) * ((z >> 11) * 2.0 ** -53), dtype) for z in _spec_z(seed, t, n)]
    assert got == want
    # ties and near-ties, subnormals, overflow: one rounding from the double
    edges = [1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 2 ** -11 + 2 ** -30,
             1 + 2 ** -24, 1 + 3 * 2 ** -24, 3e-41, 6e-41, 1e-7, 2.0 ** -25, 65520.0, 65519.0, -2.5e-39,
             3.4e38, -1.7e-5, 0.0]
    assert verify_data.round_to_dtype(edges, dtype).tolist() == [_spec_round(x, dtype) for x in edges]
    # representable in the dtype: torch stores them exactly
    vals = torch.tensor(got, dtype=torch.float64)
    assert torch.equal(vals.to(TORCH[dtype]).to(torch.float64), vals)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_the_torch_generator_is_the_spec_bit_for_bit(dtype, monkeypatch):
    """fill_torch (the inputs generated on a GPU) against the spec's own
    arithmetic and against numpy's fill: every value equal, across chunk
    boundaries (a small chunk here), wide ranges that overflow fp16, tiny ones
    in the subnormals, seeds past 2^63; as the tensor's dtype too. The
    rounding edges go through its dtype rounding directly."""
    import torch
    monkeypatch.setattr(verify_data, "_TORCH_CHUNK", 1000)
    seed, t, n, lo, hi = 99, 2, 3000, -8.0, 8.0
    got = verify_data.fill_torch(seed, t, n, lo, hi, dtype, "cpu").tolist()
    assert got == [_spec_round(lo + (hi - lo) * ((z >> 11) * 2.0 ** -53), dtype) for z in _spec_z(seed, t, n)]
    for seed, t, n, lo, hi in [((1 << 64) - 5, 3, 2501, -70000.0, 70000.0), (7, 1, 1999, -1e-6, 1e-6),
                               (12345, 0, 4321, 0.95, 1.05), (3, 4, 1500, -3e38, 3e38)]:
        want = verify_data.fill(seed, t, n, lo, hi, dtype)
        assert verify_data.fill_torch(seed, t, n, lo, hi, dtype, "cpu").tolist() == want.tolist(), (seed, lo)
    torch_dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    as_dt = verify_data.fill_torch(5, 1, 2222, -2.0, 2.0, dtype, "cpu", torch_dt)
    assert as_dt.dtype == torch_dt
    assert as_dt.to(torch.float64).tolist() == verify_data.fill(5, 1, 2222, -2.0, 2.0, dtype).tolist()
    edges = [1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 2 ** -11 + 2 ** -30,
             1 + 2 ** -24, 1 + 3 * 2 ** -24, 3e-41, 6e-41, 1e-7, 2.0 ** -25, 65520.0, 65519.0, -2.5e-39,
             3.4e38, -1.7e-5, 0.0]
    assert verify_data._round_torch(torch.tensor(edges, dtype=torch.float64), dtype).tolist() == \
        [_spec_round(x, dtype) for x in edges]


def test_fill_checked_falls_back_to_numpy_on_any_difference(monkeypatch):
    """A device whose arithmetic gave other values (a broken fill_torch here)
    still gets the spec's inputs: the prefix / suffix check catches it."""
    import torch
    n = 3 * verify_data.MAX_SAMPLES
    want = verify_data.fill(11, 0, n, -1.0, 1.0, "fp16")
    good = verify_data.fill_checked(11, 0, n, -1.0, 1.0, "fp16", "cpu", torch.float16)
    assert good.to(torch.float64).tolist() == want.tolist()
    real = verify_data.fill_torch

    def off_by_one_at_the_end(*a, **k):
        v = real(*a, **k)
        v[-1] = v[-1] + 1
        return v
    monkeypatch.setattr(verify_data, "fill_torch", off_by_one_at_the_end)
    fixed = verify_data.fill_checked(11, 0, n, -1.0, 1.0, "fp16", "cpu", torch.float16)
    assert fixed.to(torch.float64).tolist() == want.tolist()


def test_sample_indices():
    assert verify_data.sample_indices(5, 1, 4096) == list(range(4096))
    idx = verify_data.sample_indices(5, 1, 10_000)
    assert len(idx) == 4096
    assert idx == [z % 10_000 for z in _spec_z(5 ^ 0x5A5A5A5A, 1, 4096)]


# ---------------------------------------------------------------------------
# verification data: round trip through the real kernels
# ---------------------------------------------------------------------------

def _verify_and_run(op, shape, dtype, params, config, seed=11):
    """The verify object for the job, and the template kernel's output on the
    inputs a loader regenerates from it (Triton interpreter)."""
    mod = LIB.launch_module(op)
    L = launch_exprs.launch(LIB, op, len(shape), dtype, params, config, TARGET_MI300X)
    shapes = package_info.tensor_shapes(L, shape)
    job = {"op": op, "shape": shape, "dtype": dtype, "params": params}
    v = verify_data.build(mod, op, shape, dtype, params, job, L.tensors, shapes, seed, "cpu")
    inputs = {}
    for spec_in in v["inputs"]:
        t = L.tensors[spec_in["tensor"]]
        vals = verify_data.fill(v["seed"], spec_in["tensor"], math.prod(shapes[spec_in["tensor"]]),
                                spec_in["lo"], spec_in["hi"], t["dtype"])
        inputs[t["name"]] = torch.tensor(vals).reshape(shapes[spec_in["tensor"]]).to(TORCH[t["dtype"]])
    out = mod.output_like(op, inputs, params)
    out.fill_(float("nan"))
    mod.launch(op, inputs, out, config, params)
    return v, out, [i for i, t in enumerate(L.tensors) if t["role"] == "output"][0]


def test_verify_records_the_distribution_the_confirmation_timed_on():
    """Each floating-point input's `timing`: the moments of the template's
    make_inputs at the confirmation's first seed (matmul: normal draws), so
    kiln-rt bench times on values of that kind, not on the check's uniform
    range."""
    v, _, _ = _verify_and_run(*VERIFY_CASES[2])  # matmul [32, 24, 40] fp16
    mod = LIB.launch_module("matmul")
    drawn = mod.make_inputs("matmul", [32, 24, 40], "fp16", {}, confirm.SEED_BASE, "cpu")
    names = [t["name"] for t in launch_exprs.launch(LIB, "matmul", 3, "fp16", {}, VERIFY_CASES[2][4],
                                                    TARGET_MI300X).tensors]
    assert len(v["inputs"]) == 2
    for spec_in in v["inputs"]:
        x = drawn[names[spec_in["tensor"]]].to(torch.float64)
        t = spec_in["timing"]
        assert t["dist"] == "normal"
        assert t["mean"] == pytest.approx(float(x.mean()), abs=1e-9)
        assert t["std"] == pytest.approx(float(x.std(unbiased=False)), rel=1e-9)
        assert 0.9 < t["std"] < 1.1  # randn
        assert (spec_in["lo"], spec_in["hi"]) == (-1.0, 1.0)  # the check's range is unchanged


def test_timing_inputs_tells_uniform_from_normal_and_skips_what_it_cannot_use():
    class Mod:
        @staticmethod
        def make_inputs(op, shape, dtype, params, seed, device):
            g = torch.Generator().manual_seed(seed)
            return {"u": 0.95 + 0.1 * torch.rand(20000, generator=g),
                    "n": 3.0 + 0.5 * torch.randn(20000, generator=g),
                    "k": torch.zeros(5, dtype=torch.int64),       # not floating point
                    "c": torch.full((7,), 2.0)}                   # constant: a zero-width uniform
    t = verify_data.timing_inputs(Mod, "x", [20000], "fp32", {}, "cpu")
    assert t["u"]["dist"] == "uniform"
    assert 0.95 <= t["u"]["lo"] < 0.951 and 1.049 < t["u"]["hi"] < 1.05
    assert t["n"]["dist"] == "normal"
    assert t["n"]["mean"] == pytest.approx(3.0, abs=0.02) and t["n"]["std"] == pytest.approx(0.5, rel=0.03)
    assert "k" not in t
    assert t["c"] == {"dist": "uniform", "lo": 2.0, "hi": 2.0}

    class Broken:
        @staticmethod
        def make_inputs(*a):
            raise RuntimeError("no")
    assert verify_data.timing_inputs(Broken, "x", [4], "fp32", {}, "cpu") == {}
    assert verify_data.timing_inputs(object(), "x", [4], "fp32", {}, "cpu") == {}


VERIFY_CASES = [
    ("softmax", [64, 96], "fp16", {}, {"BLOCK_M": 2, "BLOCK_N": 128, "num_warps": 2, "num_stages": 1}),
    ("layernorm", [8, 48], "bf16", {"eps": 1e-5}, {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1}),
    ("matmul", [32, 24, 40], "fp16", {}, {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8,
                                         "num_warps": 2, "num_stages": 3}),
    ("row_sum", [96, 50], "fp32", {}, {"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1}),
]


@pytest.mark.parametrize("op,shape,dtype,params,config", VERIFY_CASES, ids=[c[0] for c in VERIFY_CASES])
def test_verify_round_trip(op, shape, dtype, params, config):
    v, out, t = _verify_and_run(op, shape, dtype, params, config)
    assert v["format"] == "kiln-verify/1" and v["shape"] == shape
    o = v["outputs"][0]
    assert o["tensor"] == t and o["count"] == out.numel()
    assert o["atol"] >= verify_data.TOLERANCE_FLOOR[dtype] and o["rtol"] >= verify_data.TOLERANCE_FLOOR[dtype]
    assert len(o["samples"]) == min(4096, out.numel())
    flat = out.to(torch.float64).reshape(-1).tolist()
    assert verify_data.check_verify(v, {t: flat}) == []
    assert verify_data.check_verify(v, {t: out.to(torch.float64).numpy()}) == []  # the vectorised form

    nan = list(flat)
    nan[len(nan) // 3] = float("nan")
    assert any("NaN" in f for f in verify_data.check_verify(v, {t: nan}))

    k, e = o["samples"][len(o["samples"]) // 2]
    off = list(flat)
    off[k] = e + 10 * (o["atol"] + o["rtol"] * abs(e))
    assert any("samples out of tolerance" in f for f in verify_data.check_verify(v, {t: off}))

    row = out.shape[-1] if out.dim() > 1 else 1
    r = (len(flat) // row) // 2
    wrong = list(flat)
    wrong[r * row:(r + 1) * row] = [x * 0.5 + 0.25 for x in flat[r * row:(r + 1) * row]]
    if row == 1:  # a [rows] output: a block of rows
        wrong[r:r + 8] = [x * 0.5 + 0.25 for x in flat[r:r + 8]]
    assert verify_data.check_verify(v, {t: wrong}) != []
    import numpy as np
    for bad in (nan, off, wrong):  # the vectorised form fails them the same way
        assert verify_data.check_verify(v, {t: np.array(bad)}) == verify_data.check_verify(v, {t: bad})
    assert verify_data.check_verify(v, {t: flat[:-1]}) != []  # truncated


def test_verify_sum_check_catches_what_samples_miss():
    v, out, t = _verify_and_run(*VERIFY_CASES[0])
    o = v["outputs"][0]
    sampled = {k for k, _ in o["samples"]}
    flat = out.to(torch.float64).reshape(-1).tolist()
    # shift every unsampled element: no sample sees it, the sum does
    shifted = [x if i in sampled else x + 0.05 for i, x in enumerate(flat)]
    fails = verify_data.check_verify(v, {t: shifted})
    assert fails and all("sum" in f for f in fails), fails


# ---------------------------------------------------------------------------
# through the worker
# ---------------------------------------------------------------------------

def _validate(result, rank, n_inputs):
    """The answer against docs/package-format.md's shapes."""
    tensors = result["tensors"]
    assert all(t["role"] in ("input", "output") and t["dtype"] in EB for t in tensors)
    assert [t["role"] for t in tensors] == ["input"] * n_inputs + ["output"] * (len(tensors) - n_inputs)
    shape = result["verify"]["shape"]
    for t in tensors:
        assert all(evaluate(e, shape) >= 1 for e in t["shape"])
    assert len(result["grid"]) == 3 and all(evaluate(g, shape) >= 1 for g in result["grid"])
    for a in result["args"]:
        assert set(a) <= {"name", "type", "hidden", "bind"} and len(a["bind"]) == 1
        kind, val = next(iter(a["bind"].items()))
        assert kind in ("tensor", "expr", "value", "scratch", "tma")
        if kind == "tensor":
            assert 0 <= val < len(tensors) and a["type"] == "*" + tensors[val]["dtype"]
        elif kind == "expr":
            evaluate(val, shape)
        elif kind == "scratch":
            assert val in ("global", "profile") and a.get("hidden") is True
    for a in result["assume"]:
        assert set(a) == {"expr", "multiple_of"} and evaluate(a["expr"], shape) % a["multiple_of"] == 0
    rng = result["range"]
    if "exact" in rng:
        assert rng == {"exact": True}
    else:
        assert set(rng) == {"dims", "verified_shapes"} and len(rng["dims"]) == rank
        for s in rng["verified_shapes"]:
            for x, d in zip(s, rng["dims"]):
                assert d["min"] <= x <= d["max"] and x % d["multiple_of"] == 0, (s, d)
        assert shape in rng["verified_shapes"]
    v = result["verify"]
    assert set(v) == {"format", "seed", "shape", "inputs", "outputs"}
    assert [i["tensor"] for i in v["inputs"]] == list(range(n_inputs))
    for o in v["outputs"]:
        assert set(o) == {"tensor", "atol", "rtol", "samples", "sum", "abs_sum", "count"}
        assert tensors[o["tensor"]]["role"] == "output"


@pytest.fixture(scope="module")
def worker():
    w = Worker(worker_env(kernels_dir=None, KILN_PTXAS_SPILLS="0"))
    yield w
    assert w.close() == 0, w.stderr[-3000:]


def _evaluate(worker, job, config):
    ans = worker.call("evaluate", job=job, config=config, artifact_dir=None, timeout=300)
    assert ans["ok"] and ans["result"]["status"] == "ok", ans
    return ans["result"]["artifact"]


def test_worker_package_info_with_neighbours(worker):
    job = {"op": "softmax", "shape": [6, 40], "dtype": "fp32", "params": {}, "target": TARGET_MI300X,
           "validation": {"seeds": 1}, "benchmark": {"runs": 0}}
    cfg = {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1}
    art = _evaluate(worker, job, cfg)
    ans = worker.call("package_info", job=job, config=cfg, artifact=art, neighbours=True, verify_seed=7,
                      timeout=300)
    assert ans["ok"], ans
    r = ans["result"]
    _validate(r, 2, 1)
    assert r["grid"] == ["cdiv(s0, 2)", "1", "1"]
    assert [a["bind"] for a in r["args"]] == [{"tensor": 0}, {"tensor": 1}, {"expr": "s0"}, {"expr": "s1"},
                                              {"scratch": "global"}, {"scratch": "profile"}]
    rng = r["range"]
    assert "dims" in rng, r["range_notes"]
    # rows = 1 makes n_rows Triton's constant, cols = 80 needs the looped kernel:
    # both another code object, both outside the range, both reported
    notes = "\n".join(r["range_notes"])
    assert "[1, 40]: fail" in notes and "n_rows" in notes
    assert "[6, 80]: fail" in notes and "softmax_online_kernel" in notes
    assert rng["dims"][0]["min"] > 1 and rng["dims"][1]["max"] < 64
    assert len(rng["verified_shapes"]) > 4
    assert [1, 40] not in rng["verified_shapes"] and [6, 80] not in rng["verified_shapes"]
    assert r["verify"]["seed"] == 7 and r["verify"]["outputs"][0]["count"] == 240
    # the verification data holds for the kernel run at the shape (all 240 sampled)
    o = r["verify"]["outputs"][0]
    assert abs(o["sum"] - 6.0) < 1e-9 and len(o["samples"]) == 240


def test_worker_package_info_exact_and_refusals(worker):
    job = {"op": "matmul", "shape": [32, 48, 64], "dtype": "bf16", "params": {}, "target": TARGET_H200,
           "validation": {"seeds": 1}, "benchmark": {"runs": 0}}
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 2, "num_stages": 3}
    art = _evaluate(worker, job, cfg)
    ans = worker.call("package_info", job=job, config=cfg, artifact=art, neighbours=False, verify_seed=3)
    assert ans["ok"], ans
    r = ans["result"]
    _validate(r, 3, 2)
    assert r["range"] == {"exact": True}
    assert [t["shape"] for t in r["tensors"]] == [["s0", "s2"], ["s2", "s1"], ["s0", "s1"]]
    assert r["grid"] == ["cdiv(s0, 16) * cdiv(s1, 16)", "1", "1"]
    assert {a["expr"] for a in r["assume"]} == {"s0", "s1", "s2"}
    # a config that is not the artifact's (another grid): refused, not packaged wrongly
    other = dict(cfg, BLOCK_M=32)
    ans = worker.call("package_info", job=job, config=other, artifact=art, neighbours=False, verify_seed=3)
    assert not ans["ok"] and "package_info:" in ans["error"] and "grid" in ans["error"], ans
    ans = worker.call("package_info", job=job, config=cfg, artifact=art, verify_seed=-1)
    assert not ans["ok"] and "verify_seed" in ans["error"]


def test_sweep_cuts_the_range_where_compile_spec_changes():
    """The Gluon kernel's `pair` needs an even number of 128-row query blocks:
    a range of S on multiples of 16 around 2048 is cut to the sizes that
    keep it (compile_spec only, nothing compiled or run)."""
    ctx = package_info._Context()
    ctx.lib, ctx.op, ctx.dtype, ctx.target = LIB, "attention", "bf16", TARGET_H200
    ctx.mod = LIB.launch_module("attention")
    ctx.params = {"causal": True, "sm_scale": 0.0}
    ctx.config = {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_H": 8, "num_warps": 4, "num_stages": 2, "ws": 1, "pair": 1}
    ctx.shape = [1, 2, 2048, 128]
    ctx.spec, _ = package_info.traced_spec(LIB, ctx.mod, "attention", ctx.shape, "bf16", ctx.params, ctx.config,
                                           TARGET_H200)
    notes = []
    assert package_info._sweep(ctx, 2, (1024, 4096, 16), notes) == (1936, 2048, 16)
    assert any("[1, 2, 2064, 128]" in n for n in notes) and any("[1, 2, 1920, 128]" in n for n in notes)
    # the head dim is a constexpr: every other size is another code object
    assert package_info._sweep(ctx, 3, (64, 256, 64), []) == (128, 128, 64)


def test_clamped_grids_are_exercised():
    """The min / max branches of the grids (persistent programs fewer or more
    than the work) are among the cases test_launch_expressions_equal_compile_spec
    checks, not only the plain ones."""
    seen = set()
    for op, (dtype, params, shapes, extra) in CASES.items():
        for shape in shapes:
            for config in _configs(op, shape, dtype, params, TARGET_H200, extra):
                spec, _, _, _, grid = _bound_args(op, shape, dtype, params, config, TARGET_H200)
                e = parse(grid[0])
                if e.node[0] == "max":  # matmul persistent: max(1, min(tiles, SMs x P))
                    e = e.node[2]
                if e.node[0] == "min":
                    a, b = (x.eval(shape) for x in e.node[1:])
                    seen.add((op, "programs" if a < b else "work" if b < a else "equal"))
    for op in ("softmax", "layernorm", "row_sum", "matmul", "conv2d"):
        assert (op, "programs") in seen and (op, "work") in seen, (op, sorted(seen))


def test_the_variants_of_a_kernel_share_one_build_of_their_verification_data():
    from kiln_worker.packaging.package_info import VERIFY_CACHE_ENTRIES, verify_for

    class Ev:
        verify_cache: dict = {}
    ev, calls = Ev(), []

    def build(tag):
        def make():
            calls.append(tag)
            return {"outputs": [{"samples": [[0, 1.0]]}], "tag": tag}
        return make
    a = verify_for(ev, ("softmax", "[64, 1000]", 1), build("a"))
    a["outputs"][0]["samples"].append([1, 2.0])  # a caller's change stays its own
    b = verify_for(ev, ("softmax", "[64, 1000]", 1), build("a2"))
    assert calls == ["a"] and b["outputs"][0]["samples"] == [[0, 1.0]]
    for i in range(VERIFY_CACHE_ENTRIES):
        verify_for(ev, ("other", i), build(f"o{i}"))
    verify_for(ev, ("softmax", "[64, 1000]", 1), build("a3"))  # evicted: built again
    assert calls[-1] == "a3" and len(ev.verify_cache) == VERIFY_CACHE_ENTRIES
