"""Correctness: the candidate against the PyTorch reference, on several seeds.

For each seed: fresh inputs (``make_inputs(seed=...)``), an output from
``output_like`` filled with NaN (so an element the kernel never writes fails),
``launch``, then the reference on upcast copies of the inputs (float64 for fp32
jobs, float32 for fp16/bf16), and the comparison.

Tolerance policy (the one place it is defined; docs/llm.md and worker/README.md
refer here). Per element, honouring the output's and the reference's strides:

    pass  iff  out is finite  and  |out - ref| <= atol + rtol * |ref|

with, per job dtype (DEFAULT_TOL; KernelBench's values are the floor):

    fp32 / tf32   atol = rtol = 1e-4      fp16 / bf16   atol = rtol = 1e-2
    fp8 types     atol = rtol = 1e-1      fp64          atol = rtol = 1e-8

``validation.atol`` / ``validation.rtol`` in the job override either value
exactly as given (a manifest's deliberate choice). A template module may define
``validation_tolerance(op, shape, dtype, params)`` returning ``atol`` / ``rtol``
(used as given) or ``reduction``: the length K of the sums each output element
is, when the inputs are unit-variance and unscaled (matmul's K, row_sum's N).
Such outputs have magnitude ~sqrt(K), and a correct kernel that sums in
another order differs from the reference by ~eps_acc * sqrt(K) even where the
output is near zero; the default atol is then ``atol * sqrt(K)``. The scale
comes from the job's shape, never from the data: no output value -- a few
large ones, say -- can widen the allowance of the others. (Before 2026-12, atol
was scaled by rms(ref), which a few large reference outputs inflated.)

The output must have the reference's shape (and, for generated code, dtype:
sandbox/child.py); the comparison reads both through their strides (a strided
view is compared element by element in its logical order, never by its
storage's prefix).

Seeds (``seed_list``): ``validation.seeds`` as a list is used as given; as a
count n (default 3) the seeds are derived from the job's key and the
candidate (config hash or source hash), deterministic for reproducibility:
for a template, n - 1 seeds of the job (shared by its candidates, whose inputs
and references each worker computes once) and one of the candidate's own; for
generated code all n are the candidate's. The result records them
(``correctness.seeds_used``).

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
                       shape: Any = None, params: dict | None = None) -> tuple[float, float]:
    """(atol, rtol) of the module docstring's policy.

    Precedence: ``validation.atol`` / ``validation.rtol`` in the job, then the
    template module's optional hook ``validation_tolerance(op, shape, dtype,
    params) -> {"atol": .., "rtol": .., "reduction": K}`` (any key may be
    absent or None), then the worker's defaults by dtype (the default atol
    times sqrt(K) when the hook names a reduction length K).
    """
    val = job.get("validation") or {}
    dtype = job.get("dtype", "fp32")
    datol, drtol = default_tolerances(dtype)
    hook = getattr(module, "validation_tolerance", None) if module is not None else None
    if callable(hook):
        t = hook(op if op is not None else job.get("op"), shape if shape is not None else job.get("shape"),
                 dtype, params if params is not None else (job.get("params") or {})) or {}
        if t.get("reduction"):
            datol *= max(1.0, math.sqrt(float(t["reduction"])))
        if t.get("atol") is not None:
            datol = float(t["atol"])
        if t.get("rtol") is not None:
            drtol = float(t["rtol"])
    atol = val.get("atol")
    rtol = val.get("rtol")
    return (float(atol) if atol is not None else datol,
            float(rtol) if rtol is not None else drtol)


def job_key(job: dict) -> str:
    """The job's key: job["key"] when the engine sends one, else a hash of
    what names the job (op, shape, dtype, params, reference, target)."""
    import hashlib
    import json
    if isinstance(job.get("key"), str) and job["key"]:
        return job["key"]
    ref = job.get("reference")
    if isinstance(ref, dict):
        ref = {k: ref.get(k) for k in ("path", "source")}
    ident = {"op": job.get("op"), "shape": job.get("shape"), "dtype": job.get("dtype"),
             "params": job.get("params"), "reference": ref,
             "target": (job.get("target") or {}).get("name") if isinstance(job.get("target"), dict) else None}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def candidate_id(config: Any = None, source: str | None = None) -> str:
    """A candidate's identity for its seeds: the hash of its source (generated
    code) or of its config (a template's)."""
    import hashlib
    import json
    if source is not None:
        return "src:" + hashlib.sha256(source.encode()).hexdigest()
    return "cfg:" + hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def derive_seed(*parts: str) -> int:
    """A seed in [0, 2**31) from the parts (sha256): deterministic."""
    import hashlib
    h = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def seed_list(job: dict, candidate: str | None = None, per_candidate: int = 1) -> list[int]:
    """The seeds of a check (module docstring): a list in validation.seeds as
    given; else n seeds, n - per_candidate of the job and per_candidate of the
    candidate (all of them the job's when candidate is None)."""
    seeds = (job.get("validation") or {}).get("seeds", 3)
    if isinstance(seeds, (list, tuple)):
        return [int(s) for s in seeds]
    n = max(1, int(seeds if seeds is not None else 3))
    key = job_key(job)
    own = 0 if candidate is None else max(0, min(n, int(per_candidate)))
    return ([derive_seed(key, "job", i) for i in range(n - own)]
            + [derive_seed(key, candidate, i) for i in range(own)])


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
    """The reference and the output flattened in their logical order, each
    contiguous (a copy where a tensor is a strided view: reshape(-1) of a
    strided view can itself be a strided view, and compare_kernel reads raw
    pointers), and their COMPARE_CHUNK steps; Incorrect when the shapes differ.
    The copies are the check's, outside any timed region."""
    if tuple(out.shape) != tuple(ref.shape):
        raise Incorrect(f"output shape {list(out.shape)} differs from the reference's "
                        f"{list(ref.shape)} (seed {seed})", {})
    ref_flat = ref.detach().reshape(-1).contiguous()
    n = ref_flat.numel()
    out_flat = out.detach().reshape(-1).contiguous()
    return ref_flat, out_flat, [(s, min(n, s + COMPARE_CHUNK)) for s in range(0, n, COMPARE_CHUNK)]


def _broken_reference(bad: int, seed: int) -> Incorrect:
    return Incorrect(f"the reference has {bad} non-finite values (seed {seed}); "
                     "the template's inputs or reference are broken", {})


def compare(out, ref, atol: float, rtol: float, seed: int, memo: dict | None = None) -> dict:
    """Statistics of one seed; raises Incorrect on failure (the message and
    statistics of _compare_detailed). The policy: the module docstring.

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
    depends on the reference alone -- its non-finite count -- so later
    candidates against the same reference skip computing it."""
    import torch
    ref_flat, out_flat, steps = _flattened(out, ref, seed)
    n = ref_flat.numel()
    if n == 0:
        return {"max_abs_err": 0.0, "max_rel_err": 0.0, "atol": atol, "rtol": rtol}
    bad_ref = memo.get("bad_ref") if memo is not None else None
    if bad_ref is None:
        bad = [(~torch.isfinite(ref_flat[a:b])).sum() for a, b in steps]
        bad_ref = int(sum(torch.stack([x.double() for x in bad]).tolist()))
        if memo is not None:
            memo["bad_ref"] = bad_ref
    if bad_ref:
        raise _broken_reference(bad_ref, seed)
    stats = None
    if fused_applies(out_flat, ref_flat, atol):
        from . import compare_kernel
        try:
            stats = compare_kernel.compare_stats(out_flat, ref_flat, atol, rtol)
        except Exception:  # noqa: BLE001  (compare_kernel.available() is False from now on)
            if compare_kernel.available():
                raise  # not the kernel's compile or launch
    if stats is None:
        stats = torch_stats(out_flat, ref_flat, steps, atol, rtol)
    nonfinite, nbad, max_abs, max_rel, worst_ratio = stats
    if nonfinite or nbad:
        return _compare_detailed(out, ref, atol, rtol, seed)  # raises with the message
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "atol": atol, "rtol": rtol,
            "worst_ratio": worst_ratio}


def fused_applies(out_flat, ref_flat, atol: float) -> bool:
    """Whether compare() takes compare_kernel's one pass: tensors on a GPU, a
    float32 / float64 reference, a positive atol (module docstring there), and
    a kernel that has not failed to compile or launch in this process."""
    import torch
    if not (out_flat.device.type == "cuda" and ref_flat.device == out_flat.device and atol > 0
            and ref_flat.dtype in (torch.float32, torch.float64)):
        return False
    from .compare_kernel import available
    return available()


def torch_stats(out_flat, ref_flat, steps, atol: float, rtol: float) -> tuple:
    """compare()'s statistics with torch operations, COMPARE_CHUNK elements at a
    time: (non-finite outputs, elements out of tolerance, max abs error, max
    rel error, max error / allowance), read back in one transfer."""
    import torch
    parts = []
    for a, b in steps:
        o, r = out_flat[a:b].to(ref_flat.dtype), ref_flat[a:b]
        diff = (o - r).abs()
        aref = r.abs()
        allowed = atol + rtol * aref
        rel = diff / torch.clamp(aref, min=max(atol, 1e-30))
        parts.append(torch.stack([(~torch.isfinite(o)).sum().double(), (diff > allowed).sum().double(),
                                  diff.max().double(), rel.max().double(),
                                  (diff / allowed).max().double()]))
    p = torch.stack(parts)
    nonfinite, nbad, max_abs, max_rel, worst_ratio = torch.cat([p[:, :2].sum(0), p[:, 2:].max(0).values]).tolist()
    return int(nonfinite), int(nbad), max_abs, max_rel, worst_ratio


def _compare_detailed(out, ref, atol: float, rtol: float, seed: int) -> dict:
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

    bad_ref = 0
    for a, b in steps:
        bad_ref += int((~torch.isfinite(ref_flat[a:b])).sum())
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
    max_abs = max_rel = 0.0
    worst, worst_ratio, nbad = 0, None, 0
    for a, b in steps:
        o, r = chunk(a, b)
        diff = (o - r).abs()
        aref = r.abs()
        rel = diff / torch.clamp(aref, min=max(atol, 1e-30))
        allowed = atol + rtol * aref
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
    stats = {"max_abs_err": max_abs, "max_rel_err": max_rel, "atol": atol, "rtol": rtol,
             "worst_ratio": worst_ratio}
    if nbad:
        idx = _index(worst, out.shape)
        got = out_flat[worst].to(ref_flat.dtype).item()
        exp = ref_flat[worst].item()
        raise Incorrect(
            f"{nbad} of {n} elements out of tolerance (atol {atol:.3g}, rtol {rtol:.3g}); "
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
