"""Verification data of a packaged kernel (`verify/<file>.json`, kiln-verify/1).

docs/package-format.md fixes the contract; this module writes it and holds a
pure-Python checker that applies it.

Inputs. Tensor `t` of `n` elements is filled row-major by SplitMix64 from
`seed + t * G` (G = 0x9E3779B97F4A7C15): per element the state advances by G,
is mixed, its top 53 bits give u in [0, 1), and x = lo + (hi - lo) * u
(double arithmetic, in that order: no fused multiply-add) is rounded ONCE to
the tensor's dtype, to nearest even. For bf16 that is a rounding of the double
straight to 8 significant bits, not through fp32 first (which can round twice:
torch's double -> bfloat16 conversion goes through float). `splitmix64` is
the numpy form (uint64 arithmetic, vectorised, in chunks); `round_to_dtype`
rounds exactly (fp32 / fp16: numpy's correctly rounded casts from double;
bf16: frexp / rint / ldexp).

Input ranges (`lo`, `hi` per input, `INPUT_RANGES`), chosen so that the check
sees the operator's behaviour, not a near-constant output:

| operator | inputs | why |
| --- | --- | --- |
| add | x, y in [-1, 1) | |
| bias_gelu | x in [-3, 3), bias in [-1, 1) | pre-activations across gelu's bend, both signs |
| softmax | x in [-8, 8) | logits wider than [-1, 1): exp spans e^16, the max subtraction matters |
| layernorm | x in [-1, 3), weight in [0.5, 1.5), bias in [-1, 1) | a mean of 1: a kernel that does not centre fails |
| rmsnorm | x in [-2, 2), weight in [0.5, 1.5) | |
| row_sum, row_mean | x in [-0.5, 1.5) | a row mean of 0.5: sums grow with cols, not ~0 |
| row_max | x in [-4, 4) | |
| matmul | a, b in [-1, 1) | |
| gemm_bias_act | a in [-1, 1), b in +-3/sqrt(K), bias in [-1, 1) | pre-activations O(1), where relu / gelu / silu bend |
| conv2d | x in [-1, 1), weight in +-3/sqrt(C k k) | outputs O(1) whatever C |
| attention | q, k in [-2, 2), v in [-1, 1) | scores of std ~1.3: the softmax is far from uniform |
| scaled_softmax, log_softmax | x in [-8, 8) | as softmax |
| cumprod | x in [0.95, 1.05) | near 1 (as make_inputs): long products neither vanish nor overflow |
| pointwise with log, sqrt, rsqrt, reciprocal or pow | every input in [0.5, 2.5) | positive, away from 0 (as make_inputs) |

Timing inputs (`timing` per floating-point input, `timing_inputs`): the
distribution of the values the confirmation timed the kernel on (the
template's make_inputs at the confirmation's first seed, confirm.SEED_BASE), normal
(`mean`, `std`) or uniform (`lo`, `hi`); kiln-rt bench fills its inputs from
it by the same SplitMix64 stream (normal: Box-Muller on pairs of draws), not
from the verification range. Not used by the check.

Expected values: the template's `reference` on float64 copies of exactly these
inputs (on the GPU when the worker has one, else the CPU). Per output: every
element as a sample when it has at most 4096, else 4096 flat indices from the
same generator (seed ^ 0x5A5A5A5A, the output's tensor index, index = z %
count); the float64 `sum` and `abs_sum`; `atol` / `rtol`: the evaluator's
tolerances for the job (check.resolve_tolerances: per element
|out - ref| <= atol + rtol * |ref|), at least 1e-4 for fp32 and
1e-2 for fp16 / bf16 (KernelBench's).
"""
from __future__ import annotations

import math

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
SAMPLE_SALT = 0x5A5A5A5A
MAX_SAMPLES = 4096
FORMAT = "kiln-verify/1"
TOLERANCE_FLOOR = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
_CHUNK = 1 << 22
# Rounding a double once to a narrow float (round_to_dtype, _round_torch):
# significant bits, the lowest frexp exponent of a normal number (below it
# the quantum stays: subnormals), and the magnitude from which a rounded
# value is past the largest finite one (inf).
_ROUND = {"fp16": (11, -13, 2.0 ** 16), "bf16": (8, -125, 2.0 ** 128 * (1 - 2.0 ** -9))}


def splitmix64(seed: int, t: int, n: int, start: int = 0) -> np.ndarray:
    """The generator's outputs z for elements start .. start + n - 1 of tensor
    t, as uint64 (docs/package-format.md)."""
    base = np.uint64((seed + t * GOLDEN) & MASK64)
    k = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = base + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform(seed: int, t: int, n: int, start: int = 0) -> np.ndarray:
    """u = (z >> 11) * 2^-53 as float64, in [0, 1)."""
    return (splitmix64(seed, t, n, start) >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded once, to nearest even, to `dtype`; returned as
    float64 (exactly representable in the dtype)."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "fp32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "fp16":
        with np.errstate(over="ignore"):  # past 65504: inf, as the rounding gives
            return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        # 8 significant bits; exponent range as fp32 (normal from 2^-126,
        # subnormal quantum 2^-133). frexp: x = m * 2^e, 0.5 <= |m| < 1.
        bits, emin, big = _ROUND["bf16"]
        _, e = np.frexp(x)
        q = np.ldexp(1.0, np.maximum(e, emin) - bits)
        r = np.rint(x / q) * q  # x / q and the product are exact (powers of two)
        return np.where(np.abs(r) >= big, np.copysign(np.inf, x), r)  # past the largest finite value
    raise ValueError(f"unsupported dtype {dtype!r}")


def fill(seed: int, t: int, n: int, lo: float, hi: float, dtype: str) -> np.ndarray:
    """The n values of input tensor t, rounded to dtype, as float64."""
    out = np.empty(n, dtype=np.float64)
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        out[a:b] = round_to_dtype(lo + (hi - lo) * uniform(seed, t, b - a, a), dtype)
    return out


# The same inputs generated with torch on the device that computes the
# expected values (a GPU): numpy's generator runs at some 10 M elements/s on
# one core, and a KernelBench input holds up to 4 G elements. Bit for bit the
# numpy form's (fill): int64 arithmetic wraps as uint64's does, logical shifts
# are masked arithmetic ones, u and x take the same two roundings (two kernels:
# no fused multiply-add), and the dtype rounding is done in float64 exactly as
# round_to_dtype does (not through a float32 cast, which would round twice
# for fp16). build() checks a prefix and a suffix against fill and falls back
# to it on any difference.
_TORCH_CHUNK = 1 << 26


def _i64(v: int) -> int:
    v &= MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def _lsr(z, s: int):
    return (z >> s) & ((1 << (64 - s)) - 1)


def fill_torch(seed: int, t: int, n: int, lo: float, hi: float, dtype: str, device, as_dtype=None):
    """fill()'s n values as a torch tensor on `device`: float64, or as_dtype
    (the tensor's own dtype: the values are exactly representable in it)."""
    import torch
    out = torch.empty(n, dtype=as_dtype or torch.float64, device=device)
    g = _i64(GOLDEN)
    base = _i64(seed + t * GOLDEN)
    c1, c2 = _i64(0xBF58476D1CE4E5B9), _i64(0x94D049BB133111EB)
    for a in range(0, n, _TORCH_CHUNK):
        b = min(n, a + _TORCH_CHUNK)
        z = torch.arange(a + 1, b + 1, dtype=torch.int64, device=device) * g + base
        z = (z ^ _lsr(z, 30)) * c1
        z = (z ^ _lsr(z, 27)) * c2
        z = z ^ _lsr(z, 31)
        u = _lsr(z, 11).to(torch.float64) * (2.0 ** -53)
        del z
        x = u * (hi - lo)
        x = x + lo
        out[a:b] = _round_torch(x, dtype)
    return out


def _round_torch(x, dtype: str):
    import torch
    if dtype == "fp32":
        return x.to(torch.float32).to(torch.float64)
    if dtype not in _ROUND:
        raise ValueError(f"unsupported dtype {dtype!r}")
    bits, emin, big = _ROUND[dtype]
    _, e = torch.frexp(x)
    q = torch.ldexp(torch.ones_like(x), torch.clamp(e, min=emin).to(torch.float64) - bits)
    r = torch.round(x / q) * q  # round half to even, as np.rint
    return torch.where(r.abs() >= big, torch.copysign(torch.full_like(x, float("inf")), x), r)


def fill_checked(seed: int, t: int, n: int, lo: float, hi: float, dtype: str, device, as_dtype):
    """fill_torch on `device` as as_dtype, its first and last MAX_SAMPLES
    values checked against fill's (numpy); fill's own values where they
    differ (a device whose integer arithmetic did not wrap as assumed)."""
    import torch
    vals = fill_torch(seed, t, n, lo, hi, dtype, device, as_dtype)
    k = min(n, MAX_SAMPLES)
    for start in sorted({0, n - k}):
        ref = round_to_dtype(lo + (hi - lo) * uniform(seed, t, k, start), dtype)
        if not torch.equal(vals[start:start + k].to(torch.float64).cpu(), torch.from_numpy(ref)):
            return torch.from_numpy(fill(seed, t, n, lo, hi, dtype)).to(as_dtype).to(device)
    return vals


def sample_indices(seed: int, t: int, count: int) -> list[int]:
    """The flat indices whose expected values are shipped: all when count <=
    4096, else 4096 draws (repeats kept) of z % count."""
    if count <= MAX_SAMPLES:
        return list(range(count))
    z = splitmix64(seed ^ SAMPLE_SALT, t, MAX_SAMPLES)
    return [int(i) for i in (z % np.uint64(count))]


def input_ranges(op: str, shape, dtype: str, params: dict, names: list[str]) -> dict:
    """{input name: (lo, hi)} for an operator (the table in the module
    docstring); [-1, 1) for any input the table does not name."""
    r: dict = {}
    if op == "bias_gelu":
        r = {"x": (-3.0, 3.0)}
    elif op == "softmax":
        r = {"x": (-8.0, 8.0)}
    elif op == "layernorm":
        r = {"x": (-1.0, 3.0), "weight": (0.5, 1.5)}
    elif op == "rmsnorm":
        r = {"x": (-2.0, 2.0), "weight": (0.5, 1.5)}
    elif op in ("row_sum", "row_mean"):
        r = {"x": (-0.5, 1.5)}
    elif op == "row_max":
        r = {"x": (-4.0, 4.0)}
    elif op == "gemm_bias_act":
        c = 3.0 / math.sqrt(shape[2])
        r = {"b": (-c, c)}
    elif op == "conv2d":
        ks = int((params or {}).get("kernel_size", 3))
        c = 3.0 / math.sqrt(shape[1] * ks * ks)
        r = {"weight": (-c, c)}
    elif op == "attention":
        r = {"q": (-2.0, 2.0), "k": (-2.0, 2.0)}
    elif op in ("scaled_softmax", "log_softmax"):
        r = {"x": (-8.0, 8.0)}
    elif op == "cumprod":
        r = {"x": (0.95, 1.05)}
    elif op == "pointwise":
        expr = str((params or {}).get("expr", ""))
        if any(k in expr for k in ("(log", "(sqrt", "(rsqrt", "(reciprocal", "(pow")):
            r = {n: (0.5, 2.5) for n in names}
    return {n: r.get(n, (-1.0, 1.0)) for n in names}


# Kurtosis E[(x - mean)^4] / std^4 of a normal distribution is 3, of a uniform
# one 1.8: above the midpoint an input is recorded as normal.
NORMAL_KURTOSIS = 2.4
TIMING_SAMPLE = 1 << 20  # elements read per input (evenly strided)


def timing_inputs(mod, op: str, shape, dtype: str, params: dict, device) -> dict:
    """{input name: distribution} of the inputs the confirmation timed the job
    on (the template's make_inputs at its first seed): {"dist": "normal",
    "mean", "std"} or {"dist": "uniform", "lo", "hi"} (the values' range),
    for every floating-point input. kiln-rt bench draws its timing inputs
    from these (docs/package-format.md "verify"): a kernel's time at the
    power limit depends on its data (all-zero inputs read a GEMM 16% faster
    on an H200), so a package's latency is reproduced on values of the same
    kind, not on the verification's uniform ones. {} where the module has no
    make_inputs or it fails."""
    import torch
    make = getattr(mod, "make_inputs", None)
    if make is None:
        return {}
    try:
        # the confirmation's first input set: the values whose distribution `timing` records
        from ..evaluation.confirm import SEED_BASE
        drawn = make(op, list(shape), dtype, params, SEED_BASE, device)
    except Exception:  # noqa: BLE001 -- verification data does not depend on it
        return {}
    out = {}
    for name, x in (drawn or {}).items():
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
            continue
        flat = x.detach().reshape(-1)
        step = max(1, flat.numel() // TIMING_SAMPLE)
        v = flat[::step].to(torch.float64)
        mean = float(v.mean())
        std = float(v.std(unbiased=False))
        lo, hi = float(v.min()), float(v.max())
        if not all(math.isfinite(a) for a in (mean, std, lo, hi)):
            continue
        kurt = float(((v - mean) ** 4).mean()) / std ** 4 if std > 0 else 0.0
        out[name] = ({"dist": "normal", "mean": mean, "std": std} if kurt > NORMAL_KURTOSIS
                     else {"dist": "uniform", "lo": lo, "hi": hi})
    del drawn
    return out


def build(mod, op: str, shape: list, dtype: str, params: dict, job: dict, tensors: list[dict],
          tensor_shapes: list[list[int]], seed: int, device, device_section=None) -> dict:
    """The verify/<file>.json object for the job's shape: inputs generated,
    the reference computed in float64 on `device`, samples, sums and
    tolerances of each output. `tensors`: the Launch's tensors (name, role,
    dtype), `tensor_shapes`: their shapes at `shape`. `device_section`: a
    context manager held while the device works (the GPU lock): on a GPU
    the inputs' generation too, on the CPU not."""
    import contextlib

    import torch
    torch_dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    names = [t["name"] for t in tensors if t["role"] == "input"]
    ranges = input_ranges(op, shape, dtype, params, names)
    # On a GPU the inputs are generated there (fill_checked), inside the
    # device section; on the CPU by numpy (fill), before it.
    on_gpu = str(device).startswith("cuda")

    def inputs():
        timing = timing_inputs(mod, op, shape, dtype, params, device)
        host, spec_inputs = {}, []
        for i, t in enumerate(tensors):
            if t["role"] != "input":
                continue
            lo, hi = ranges[t["name"]]
            n = math.prod(tensor_shapes[i])
            tdt = torch_dtypes[t["dtype"]]
            if on_gpu:
                vals = fill_checked(seed, i, n, lo, hi, t["dtype"], device, tdt)
            else:  # the dtype's tensor (exact: the values are representable)
                vals = torch.from_numpy(fill(seed, i, n, lo, hi, t["dtype"])).to(tdt)
            host[t["name"]] = vals.reshape(tensor_shapes[i])
            entry = {"tensor": i, "lo": lo, "hi": hi}
            if t["name"] in timing:
                entry["timing"] = timing[t["name"]]
            spec_inputs.append(entry)
        return host, spec_inputs

    if not on_gpu:
        host, spec_inputs = inputs()
    with device_section or contextlib.nullcontext():
        if on_gpu:
            host, spec_inputs = inputs()
        spec_outputs = _expected(mod, op, shape, dtype, params, job, tensors, tensor_shapes, seed, device, host)
    return {"format": FORMAT, "seed": int(seed), "shape": [int(s) for s in shape],
            "inputs": spec_inputs, "outputs": spec_outputs}


def _expected(mod, op, shape, dtype, params, job, tensors, tensor_shapes, seed, device, host) -> list[dict]:
    """build's outputs: the reference on float64 copies of the inputs on `device`."""
    import torch

    from ..evaluation import check
    inputs = {k: v.to(device).to(torch.float64) for k, v in host.items()}
    with torch.no_grad():
        ref = mod.reference(op, inputs, params)
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    outs = [i for i, t in enumerate(tensors) if t["role"] == "output"]
    if len(refs) != len(outs):
        raise ValueError(f"{op}: the reference returned {len(refs)} outputs, the launch has {len(outs)}")
    atol, rtol = check.resolve_tolerances(dict(job, dtype=dtype), mod, op, shape, params)
    floor = TOLERANCE_FLOOR.get(dtype, 1e-2)
    spec_outputs = []
    for i, r in zip(outs, refs):
        r = r.detach().to(torch.float64).reshape(-1)
        if list(r.shape) != [math.prod(tensor_shapes[i])]:
            raise ValueError(f"{op}: the reference's output has {r.numel()} elements, tensor {i} "
                             f"({tensors[i]['name']}) {math.prod(tensor_shapes[i])}")
        bad = int((~torch.isfinite(r)).sum())
        if bad:
            raise ValueError(f"{op}: the reference has {bad} non-finite values on the verification inputs")
        count = r.numel()
        total = float(r.sum())
        abs_total = float(r.abs().sum())
        a = atol
        idx = sample_indices(seed, i, count)
        values = r[torch.tensor(idx, dtype=torch.long, device=r.device)].cpu().tolist() if idx else []
        spec_outputs.append({"tensor": i, "atol": max(a, floor), "rtol": max(rtol, floor),
                             "samples": [[j, v] for j, v in zip(idx, values)],
                             "sum": total, "abs_sum": abs_total, "count": count})
    return spec_outputs


def check_verify(verify: dict, outputs) -> list[str]:
    """The check of docs/package-format.md: `outputs` maps an output's tensor
    index to its elements, row-major, as any flat sequence of numbers (checked
    in plain Python, as a loader without numpy would) or a numpy array (the
    same check vectorised, for large outputs). Returns the failures, [] when
    the kernel passed."""
    failures = []
    for o in verify["outputs"]:
        t = o["tensor"]
        if t not in outputs:
            failures.append(f"tensor {t}: no output given")
            continue
        vals = outputs[t]
        fast = isinstance(vals, np.ndarray)
        vals = vals.astype(np.float64, copy=False).reshape(-1) if fast else [float(v) for v in vals]
        count, atol, rtol = int(o["count"]), float(o["atol"]), float(o["rtol"])
        if len(vals) != count:
            failures.append(f"tensor {t}: {len(vals)} elements, expected {count}")
            continue
        nans = np.flatnonzero(np.isnan(vals)).tolist() if fast else \
            [k for k, v in enumerate(vals) if math.isnan(v)]
        if nans:
            failures.append(f"tensor {t}: {len(nans)} elements NaN (never written?), first at {nans[0]}")
            continue
        bad = [(k, e) for k, e in o["samples"] if not abs(float(vals[k]) - e) <= atol + rtol * abs(e)]
        if bad:
            k, e = bad[0]
            failures.append(f"tensor {t}: {len(bad)} of {len(o['samples'])} samples out of tolerance; "
                            f"first at {k}: got {float(vals[k])!r}, expected {e!r} (atol {atol:g}, rtol {rtol:g})")
        total = float(np.sum(vals)) if fast else math.fsum(vals)
        if not abs(total - o["sum"]) <= atol * count + rtol * o["abs_sum"]:
            failures.append(f"tensor {t}: sum {total!r}, expected {o['sum']!r} "
                            f"(allowed {atol * count + rtol * o['abs_sum']:g})")
    return failures
