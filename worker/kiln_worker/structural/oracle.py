"""The reference module as the correctness oracle of a job a template serves.

A served job is a library operator job (op, shape, dtype, params) whose JOB also
carries ``"oracle": {"reference": {...}, "inputs": BINDING, "consts": {...},
"forward_inputs": [...]}``. Before the job's config space is answered, the
worker draws the template's inputs (``make_inputs``, seed 0), gives them to the
reference module through the binding (each forward argument and parameter the
template tensor it stands for, transposed or reshaped to the reference's
shape), runs both the reference module and the template's ``reference()`` in
the evaluator's upcast dtype, and requires them equal within tolerance. A
binding that does not compute what the module computes fails the job there,
before any candidate; candidates are then checked against the template's
reference as usual, which this step tied to the module.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading

from ..sandbox import reference_module as rm

_done: dict[str, str | None] = {}   # job digest -> None (agreed) or the failure message
_lock = threading.Lock()
CHUNK = 1 << 26  # elements compared at once (compare): 512 MiB per float64 temporary


class OracleMismatch(Exception):
    pass


def _digest(job: dict) -> str:
    keep = {k: job.get(k) for k in ("op", "shape", "dtype", "params", "oracle")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


def module_value(tensor, entry: dict):
    if entry.get("transpose"):
        tensor = tensor.transpose(-1, -2)
    shape = entry.get("shape")
    return tensor.reshape(shape) if shape is not None and list(tensor.shape) != list(shape) else tensor


def compare(mod_out, tmpl_out, exact: bool) -> str | None:
    """None when the module's output equals the template's (exactly, or within
    1e-3 absolute + 1e-3 relative in float64, NaNs in the same places). Runs
    over CHUNK elements at a time: a KernelBench output is GiBs, and float64
    temporaries of its full size ran a shared GPU out of memory."""
    import torch
    if mod_out.numel() != tmpl_out.numel():
        return f"the module's output has {mod_out.numel()} elements, the template's {tmpl_out.numel()}"
    a = mod_out.reshape(tmpl_out.shape).reshape(-1)
    b = tmpl_out.reshape(-1)
    exact = exact or not tmpl_out.is_floating_point()
    differ, worst = 0, 0.0
    for lo in range(0, b.numel(), CHUNK):
        a64, b64 = a[lo:lo + CHUNK].to(torch.float64), b[lo:lo + CHUNK].to(torch.float64)
        if exact:
            differ += int((a64 != b64).sum())
            continue
        nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
        err = (a64 - b64).abs()
        bad = (err > 1e-3 + 1e-3 * b64.abs()) | (nan_a != nan_b)
        if bool(bad.any()):
            differ += int(bad.sum())
            worst = max(worst, float(torch.nan_to_num(err, nan=float("inf")).max()))
    if not differ:
        return None
    if exact:
        return f"{differ} of {b.numel()} elements differ"
    return f"max abs difference {worst:.3g} ({differ} of {b.numel()} elements outside tolerance)"


def verify(lib, job: dict, device: str = "cpu") -> None:
    """Raises OracleMismatch when the template does not compute what the
    reference module computes for this job (once per job and process)."""
    key = _digest(job)
    with _lock:
        if key in _done:
            if _done[key] is not None:
                raise OracleMismatch(_done[key])
            return
    msg = _verify(lib, job, device)
    with _lock:
        _done[key] = msg
    if msg is not None:
        raise OracleMismatch(msg)


def verify_on(lib, job: dict, dev) -> None:
    """verify() on the worker's device. On a GPU the check runs alone: it runs
    once per job at the job's full size in the upcast dtype (inputs, the
    template's reference and the module's output: tens of GiB for a
    KernelBench convolution), so it posts a memory-pressure notice (the other
    workers give back the inputs they cache), holds the GPU lock exclusively
    and waits, bounded, for its working set to be free
    (evaluate.alone_on_gpu). Whatever it allocated is given back to the driver
    afterwards, for the other workers. The caller drops its own cached inputs
    first (server.space)."""
    if not getattr(dev, "is_gpu", False):
        verify(lib, job, dev.torch_device)
        return
    import gc
    from ..evaluation.evaluate import _release_cached_gpu_memory, alone_on_gpu
    try:
        with alone_on_gpu(dev, _plan(lib, job, dev), "the template against the reference module",
                          kind="setup"):
            verify(lib, job, dev.torch_device)
    except Exception as exc:  # noqa: BLE001 - re-raised, named
        import torch
        if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc):
            raise RuntimeError(
                "the check of the template against the reference module (once per job, at the job's full "
                "size, in float64) ran out of GPU memory while holding the GPU alone; run with fewer "
                "--workers. " + str(exc).splitlines()[0][:300]) from exc
        raise
    finally:
        gc.collect()
        _release_cached_gpu_memory()


def _plan(lib, job: dict, dev):
    """The oracle check's memory as a plan (evaluation/memplan.py): the upcast
    inputs, the template's reference and the module's output (both upcast) and
    one more output-sized temporary for the comparison; None when the sizes
    cannot be known without running it."""
    from ..evaluation import memplan
    try:
        op, shape, dtype = job["op"], list(job["shape"]), job.get("dtype", "fp32")
        params = lib.complete_params(op, job.get("params"))
        p = memplan.job_plan(lib.launch_module(op), op, shape, dtype, params, memplan.share_bytes(dev))
    except Exception:  # noqa: BLE001 - no plan: the lock alone, as before
        return None
    if p is None:
        return None
    return memplan.MemoryPlan(input_bytes=0, upcast_bytes=p.upcast_bytes, ref_bytes=2 * p.ref_bytes,
                              output_bytes=p.ref_bytes, share_bytes=p.share_bytes)


def _verify(lib, job: dict, device: str) -> str | None:
    import torch
    from torch.func import functional_call
    from ..evaluation.check import upcast_dtype
    oracle = job["oracle"]
    op, shape, dtype = job["op"], list(job["shape"]), job.get("dtype", "fp32")
    params = lib.complete_params(op, job.get("params"))
    tmpl = lib.launch_module(op)
    inputs = tmpl.make_inputs(op, shape, dtype, params, 0, device)
    updt = upcast_dtype(dtype)
    up = {k: (v.to(updt) if v.is_floating_point() else v) for k, v in inputs.items()}
    del inputs  # the upcast copies stand for them from here (memory: see compare)
    expect = tmpl.reference(op, up, params)
    with tempfile.TemporaryDirectory(prefix="kiln-oracle-") as tmp:
        spec = rm.reference_spec({"reference": oracle["reference"]})
        mod = rm.load(spec, tmp, name=f"kiln_oracle_{_digest(job)[:12]}")
        torch.manual_seed(0)
        model = mod.Model(*rm.init_inputs(mod)).to(device)
        state = {k: (v.detach().to(updt) if v.is_floating_point() else v)
                 for k, v in {**dict(model.named_parameters()), **dict(model.named_buffers())}.items()}
        fwd = oracle.get("forward_inputs") or []
        bound = {int(e["input"]) for e in (oracle.get("inputs") or {}).values() if "input" in e}
        args: list = []
        for i, desc in enumerate(fwd):
            if i in bound:
                args.append(None)  # the template's tensor, below
            elif isinstance(desc, dict) and desc.get("kind") == "tensor":
                args.append(torch.randn(desc["shape"], dtype=updt, device=device))
            else:
                args.append((oracle.get("consts") or {}).get(str(i), desc))
        for name, entry in (oracle.get("inputs") or {}).items():
            value = module_value(up[name], entry)
            if "input" in entry:
                args[int(entry["input"])] = value
            elif "param" in entry:
                state[entry["param"]] = value
        with torch.no_grad():
            got = functional_call(model, state, tuple(args))
    del args, state, up, model
    outs = rm.as_outputs(got)
    if not outs or len(outs) != 1:
        return "the reference module did not return one tensor"
    diff = compare(outs[0], expect, exact=not expect.is_floating_point())
    if diff is None:
        return None
    return (f"the {op} template does not compute what the reference module computes under the binding "
            f"({diff}); the structural match was wrong, give exploration: {{generator: llm}} for this entry")
