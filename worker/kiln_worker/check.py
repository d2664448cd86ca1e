"""Correctness: the candidate against the PyTorch reference, on several seeds.

For each seed: fresh inputs (``make_inputs(seed=...)``), an output from
``output_like`` filled with NaN (so an element the kernel never writes fails),
``launch``, then the reference on upcast copies of the inputs (float64 for fp32
jobs, float32 for fp16/bf16), and the comparison

    fail if any output element is NaN/inf, or |out - ref| > atol_eff + rtol * |ref|

Default tolerances (KernelBench's): fp32 atol = rtol = 1e-4; fp16 / bf16
atol = rtol = 1e-2 (fp8 types 1e-1). A template module may define the optional
hook ``validation_tolerance(op, shape, dtype, params)``; ``validation.atol`` /
``validation.rtol`` in the job override both. Explicit values are used exactly
as given.

Scale of the absolute tolerance. With default tolerances,
``atol_eff = atol * max(1, rms(ref))``: atol is measured in units of the
output's typical magnitude once that exceeds 1. Reductions (matmul's K, conv2d's
C*k*k) make outputs of size ~sqrt(K) from unit-variance inputs, and a correct
kernel that sums in a different order (tiling, split-K, MFMA/MMA trees) differs
from the reference by ~eps_acc * sqrt(K) * typical term -- proportional to the
output's scale, not to each element -- so elements that happen to be near zero
need an absolute slack of that order; a fixed atol would flag correct large-K
GEMMs while rms scaling adapts to K (and to how make_inputs scales its data)
without a per-operator table. Elementwise ops, softmax and layernorm have
rms(ref) <= ~1.5, so their atol is unchanged. A precision loss, e.g. TF32
``tl.dot`` on fp32 inputs (error ~2^-11 of the output scale), still fails the
fp32 default; fp32 templates should use ``input_precision="ieee"``.

The kernel must not modify its inputs: each input is compared bitwise with a
copy taken before the launch. The reference always reads the pristine copy.
"""
from __future__ import annotations

import math
from typing import Any

DEFAULT_TOL = {
    "fp32": (1e-4, 1e-4),
    "tf32": (1e-3, 1e-3),
    "fp16": (1e-2, 1e-2),
    "bf16": (1e-2, 1e-2),
    "fp8e4nv": (1e-1, 1e-1),
    "fp8e5": (1e-1, 1e-1),
    "fp64": (1e-8, 1e-8),
}


class Incorrect(Exception):
    def __init__(self, message: str, stats: dict):
        super().__init__(message)
        self.message = message
        self.stats = stats


def default_tolerances(dtype: str) -> tuple[float, float]:
    return DEFAULT_TOL.get(str(dtype).lower(), (1e-2, 1e-2))


def resolve_tolerances(job: dict, module: Any = None, op: str | None = None,
                       shape: Any = None, params: dict | None = None) -> tuple[float, float, bool]:
    """(atol, rtol, scaled): scaled is False when atol was set explicitly.

    Precedence: ``validation.atol`` / ``validation.rtol`` in the job, then the
    template module's optional hook ``validation_tolerance(op, shape, dtype,
    params) -> {"atol": .., "rtol": ..}`` (either key may be absent or None),
    then the worker's defaults by dtype. Explicit values (job or hook) are used
    as given; only the worker's default atol is scaled by the output's RMS.
    """
    val = job.get("validation") or {}
    dtype = job.get("dtype", "fp32")
    datol, drtol = default_tolerances(dtype)
    scaled_default = True
    hook = getattr(module, "validation_tolerance", None) if module is not None else None
    if callable(hook):
        t = hook(op if op is not None else job.get("op"), shape if shape is not None else job.get("shape"),
                 dtype, params if params is not None else (job.get("params") or {})) or {}
        if t.get("atol") is not None:
            datol, scaled_default = float(t["atol"]), False
        if t.get("rtol") is not None:
            drtol = float(t["rtol"])
    atol = val.get("atol")
    rtol = val.get("rtol")
    scaled = atol is None and scaled_default
    return (float(atol) if atol is not None else datol,
            float(rtol) if rtol is not None else drtol, scaled)


def seed_list(job: dict) -> list[int]:
    seeds = (job.get("validation") or {}).get("seeds", 3)
    if isinstance(seeds, (list, tuple)):
        return [int(s) for s in seeds]
    n = int(seeds if seeds is not None else 3)
    return list(range(max(1, n)))


def upcast_dtype(job_dtype: str):
    import torch
    return torch.float64 if str(job_dtype).lower() in ("fp32", "float32", "tf32", "fp64") else torch.float32


def upcast(value: Any, dt):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().to(dt) if value.is_floating_point() else value.detach().clone()
    if isinstance(value, dict):
        return {k: upcast(v, dt) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(upcast(v, dt) for v in value)
    return value


def snapshot(inputs: dict) -> dict:
    import torch
    return {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _bits(t):
    import torch
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        return t
    return t.view(torch.uint8) if t.element_size() > 0 and t.numel() > 0 else t


def modified_inputs(before: dict, after: dict) -> list[str]:
    """The names of the inputs the kernel changed (bitwise). The comparisons
    stay on the device and are read back in one transfer when all the inputs
    share one device (see compare())."""
    import torch
    changed, pending = {}, []
    for k, v in before.items():
        a = after.get(k)
        if isinstance(v, torch.Tensor):
            if (not isinstance(a, torch.Tensor) or a.shape != v.shape or a.dtype != v.dtype
                    or a.device != v.device):
                changed[k] = True
            else:
                changed[k] = None
                pending.append((k, torch.ne(_bits(a), _bits(v)).any()))
    if pending:
        if len({f.device for _, f in pending}) == 1:
            flags = torch.stack([f for _, f in pending]).tolist()
        else:
            flags = [bool(f) for _, f in pending]
        for (k, _), flag in zip(pending, flags):
            changed[k] = bool(flag)
    return [k for k, c in changed.items() if c]


def _index(flat_idx: int, shape) -> list[int]:
    idx = []
    for d in reversed(list(shape)):
        idx.append(flat_idx % d if d else 0)
        flat_idx = flat_idx // d if d else 0
    return list(reversed(idx))


# Elements per step of compare(): its temporaries (the output in the
# reference's dtype, |diff|, |ref|, the ratios) are a few of these at a time
# instead of a few whole outputs: a conv2d output of 205 M fp32 elements took
# ~6 GB per check, and a dozen workers share one GPU.
COMPARE_CHUNK = 1 << 24


def _flattened(out, ref, seed: int):
    """The flattened reference and output and their COMPARE_CHUNK steps;
    Incorrect when the shapes differ."""
    if tuple(out.shape) != tuple(ref.shape):
        raise Incorrect(f"output shape {list(out.shape)} differs from the reference's "
                        f"{list(ref.shape)} (seed {seed})", {})
    ref_flat = ref.detach().reshape(-1)
    n = ref_flat.numel()
    return ref_flat, out.detach().reshape(-1), [(s, min(n, s + COMPARE_CHUNK)) for s in range(0, n, COMPARE_CHUNK)]


def _broken_reference(bad: int, seed: int) -> Incorrect:
    return Incorrect(f"the reference has {bad} non-finite values (seed {seed}); "
                     "the template's inputs or reference are broken", {})


def _effective_atol(atol: float, scaled: bool, squares: float, n: int) -> float:
    """atol, or atol * max(1, rms(ref)) when scaled (module docstring)."""
    return atol * max(1.0, math.sqrt(squares / n)) if scaled else atol


def compare(out, ref, atol: float, rtol: float, scaled: bool, seed: int,
            memo: dict | None = None) -> dict:
    """Statistics of one seed; raises Incorrect on failure (the message and
    statistics of _compare_detailed).

    Nearly every candidate passes, and on a GPU every `.item()` is a round
    trip that waits for the device -- behind the other workers' kernels when
    several share it. So this pass keeps every partial result on the device
    and reads them back once: the non-finite outputs, the elements out of
    tolerance and the maxima, read in one transfer. On a GPU one kernel reads
    the output and the reference once for all of them (compare_kernel);
    elsewhere torch computes them COMPARE_CHUNK elements at a time
    (torch_stats), with the same results. Only a failing output pays for the
    detailed pass that finds the first non-finite or worst element for the
    message.

    `memo` (a dict kept with the reference, e.g. per job and seed) keeps what
    depends on the reference alone -- its non-finite count and sum of squares
    -- so later candidates against the same reference skip computing it."""
    import torch
    ref_flat, out_flat, steps = _flattened(out, ref, seed)
    n = ref_flat.numel()
    if n == 0:
        return {"max_abs_err": 0.0, "max_rel_err": 0.0, "atol": atol, "rtol": rtol}
    ref_info = memo.get("ref_info") if memo is not None else None
    if ref_info is None:
        bad = [(~torch.isfinite(ref_flat[a:b])).sum() for a, b in steps]
        sq = [(ref_flat[a:b].double() ** 2).sum() for a, b in steps] if scaled else []
        got = torch.stack([x.double() for x in bad + sq]).tolist()
        # summed in Python chunk by chunk, as _compare_detailed does
        ref_info = {"bad_ref": int(sum(got[:len(steps)])), "squares": sum(got[len(steps):], 0.0)}
        if memo is not None:
            memo["ref_info"] = ref_info
    if ref_info["bad_ref"]:
        raise _broken_reference(ref_info["bad_ref"], seed)
    atol_eff = _effective_atol(atol, scaled, ref_info["squares"], n)
    stats = None
    if fused_applies(out_flat, ref_flat, atol_eff):
        from . import compare_kernel
        try:
            stats = compare_kernel.compare_stats(out_flat, ref_flat, atol_eff, rtol)
        except Exception:  # noqa: BLE001  (compare_kernel.available() is False from now on)
            if compare_kernel.available():
                raise  # not the kernel's compile or launch
    if stats is None:
        stats = torch_stats(out_flat, ref_flat, steps, atol_eff, rtol)
    nonfinite, nbad, max_abs, max_rel, worst_ratio = stats
    if nonfinite or nbad:
        return _compare_detailed(out, ref, atol, rtol, scaled, seed)  # raises with the message
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "atol": atol_eff, "rtol": rtol,
            "worst_ratio": worst_ratio}


def fused_applies(out_flat, ref_flat, atol_eff: float) -> bool:
    """Whether compare() takes compare_kernel's one pass: tensors on a GPU, a
    float32 / float64 reference, a positive atol (module docstring there), and
    a kernel that has not failed to compile or launch in this process."""
    import torch
    if not (out_flat.device.type == "cuda" and ref_flat.device == out_flat.device and atol_eff > 0
            and ref_flat.dtype in (torch.float32, torch.float64)):
        return False
    from .compare_kernel import available
    return available()


def torch_stats(out_flat, ref_flat, steps, atol_eff: float, rtol: float) -> tuple:
    """compare()'s statistics with torch operations, COMPARE_CHUNK elements at a
    time: (non-finite outputs, elements out of tolerance, max abs error, max
    rel error, max error / allowance), read back in one transfer."""
    import torch
    parts = []
    for a, b in steps:
        o, r = out_flat[a:b].to(ref_flat.dtype), ref_flat[a:b]
        diff = (o - r).abs()
        aref = r.abs()
        allowed = atol_eff + rtol * aref
        rel = diff / torch.clamp(aref, min=max(atol_eff, 1e-30))
        parts.append(torch.stack([(~torch.isfinite(o)).sum().double(), (diff > allowed).sum().double(),
                                  diff.max().double(), rel.max().double(),
                                  (diff / allowed).max().double()]))
    p = torch.stack(parts)
    nonfinite, nbad, max_abs, max_rel, worst_ratio = torch.cat([p[:, :2].sum(0), p[:, 2:].max(0).values]).tolist()
    return int(nonfinite), int(nbad), max_abs, max_rel, worst_ratio


def _compare_detailed(out, ref, atol: float, rtol: float, scaled: bool, seed: int) -> dict:
    """Statistics of one seed; raises Incorrect on failure. Works through the
    flattened tensors COMPARE_CHUNK elements at a time; the result is the
    whole tensors' (maxima, the first worst element, counts)."""
    import torch
    ref_flat, out_flat, steps = _flattened(out, ref, seed)
    n = ref_flat.numel()
    if n == 0:
        return {"max_abs_err": 0.0, "max_rel_err": 0.0, "atol": atol, "rtol": rtol}

    def chunk(a, b):
        return out_flat[a:b].to(ref_flat.dtype), ref_flat[a:b]

    bad_ref, squares = 0, 0.0
    for a, b in steps:
        r = ref_flat[a:b]
        bad_ref += int((~torch.isfinite(r)).sum())
        if scaled:
            squares += float((r.double() ** 2).sum().item())
    if bad_ref:
        raise _broken_reference(bad_ref, seed)
    nonfinite, first = 0, None
    for a, b in steps:
        bad = ~torch.isfinite(chunk(a, b)[0])
        count = int(bad.sum())
        if count and first is None:
            first = a + int(torch.nonzero(bad)[0].item())
        nonfinite += count
    if nonfinite:
        val = out_flat[first].to(ref_flat.dtype).item()
        raise Incorrect(f"output has {nonfinite} of {n} elements NaN/inf (never written or "
                        f"overflowed); first at index {_index(first, out.shape)}: got {val}, "
                        f"expected {ref_flat[first].item():.6g} (seed {seed})",
                        {"max_abs_err": None, "max_rel_err": None, "nonfinite": nonfinite})
    atol_eff = _effective_atol(atol, scaled, squares, n)
    max_abs = max_rel = 0.0
    worst, worst_ratio, nbad = 0, None, 0
    for a, b in steps:
        o, r = chunk(a, b)
        diff = (o - r).abs()
        aref = r.abs()
        rel = diff / torch.clamp(aref, min=max(atol_eff, 1e-30))
        allowed = atol_eff + rtol * aref
        ratio = diff / allowed
        i = int(torch.argmax(ratio).item())
        v = float(ratio[i].item())
        # the first worst element of the whole tensor; 0 / 0 (NaN, zero
        # tolerance and no error) ranks highest, as in torch.argmax
        if worst_ratio is None or (math.isnan(v) and not math.isnan(worst_ratio)) or \
                (not math.isnan(worst_ratio) and v > worst_ratio):
            worst, worst_ratio = a + i, v
        max_abs = max(max_abs, float(diff.max().item()))
        max_rel = max(max_rel, float(rel.max().item()))
        nbad += int((diff > allowed).sum().item())
    stats = {"max_abs_err": max_abs, "max_rel_err": max_rel, "atol": atol_eff, "rtol": rtol,
             "worst_ratio": worst_ratio}
    if nbad:
        idx = _index(worst, out.shape)
        got = out_flat[worst].to(ref_flat.dtype).item()
        exp = ref_flat[worst].item()
        raise Incorrect(
            f"{nbad} of {n} elements out of tolerance (atol {atol_eff:.3g}, rtol {rtol:.3g}); "
            f"max abs err {stats['max_abs_err']:.4g}, max rel err {stats['max_rel_err']:.4g}; "
            f"worst at index {idx}: got {got:.6g}, expected {exp:.6g} (seed {seed})", stats)
    return stats


def merge_stats(acc: dict, s: dict) -> dict:
    for k in ("max_abs_err", "max_rel_err"):
        v = s.get(k)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        acc[k] = max(acc.get(k) or 0.0, v)
    for k in ("atol", "rtol"):
        if s.get(k) is not None:
            acc[k] = max(acc.get(k) or 0.0, s[k])
    return acc
