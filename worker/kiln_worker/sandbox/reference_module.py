"""Reference operators given as PyTorch modules in the KernelBench form.

A reference module defines ``class Model(nn.Module)`` (``__init__`` and
``forward``) and the module-level functions ``get_inputs()`` (the forward's
arguments: tensors, possibly ints/floats) and ``get_init_inputs()`` (the
constructor's arguments). The manifest names it with ``reference: path.py``; the
job carries ``"reference": {"path": "/abs/path.py"}`` or ``{"source": "..."}``.

The reference is trusted (it comes from the manifest, like the template library),
but it is only ever imported in a sandbox child, next to the generated code.

Conventions used by the evaluator (``child.py``):

* inputs for seed ``s``: ``torch.manual_seed(s); get_inputs()``, then moved to the
  device; if the job has a ``dtype``, floating-point tensors are cast to it (else
  the job's dtype is the first floating input's);
* models: ``torch.manual_seed(seed0); Model(*get_init_inputs())`` and the same for
  ``ModelNew`` (KernelBench's convention); when both have the same parameter and
  buffer names and shapes, ModelNew gets the reference's values (so a different
  initialisation order does not fail a correct kernel); then both are moved to the
  device and (floating parameters) to the job's dtype;
* the reference runs on float64 copies for fp32 jobs and float32 copies for
  fp16/bf16 (``check.upcast_dtype``); if it cannot run there (an op without a
  float64 kernel), it runs in the job's dtype and the answer says so
  (``correctness.reference_dtype``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import types
from typing import Any

DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
               "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
               "bool": "bool", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


class ReferenceError_(Exception):
    """The reference module is missing or broken (answered ok:false by the worker)."""


def reference_spec(job: dict) -> dict:
    """{"path": abs} or {"source": text} from job.reference (a dict or a path string)."""
    ref = job.get("reference") if isinstance(job, dict) else None
    if isinstance(ref, str):
        ref = {"path": ref}
    if not isinstance(ref, dict) or not (isinstance(ref.get("path"), str) or isinstance(ref.get("source"), str)):
        raise ReferenceError_("job.reference must be {\"path\": \"/abs/file.py\"} or {\"source\": \"...\"}")
    if isinstance(ref.get("source"), str):
        return {"source": ref["source"], "path": ref.get("path")}
    path = os.path.abspath(ref["path"])
    if not os.path.isfile(path):
        raise ReferenceError_(f"reference module not found: {path}")
    return {"path": path}


def reference_source(spec: dict) -> str:
    if spec.get("source") is not None:
        return spec["source"]
    with open(spec["path"], encoding="utf-8") as f:
        return f.read()


def reference_sha256(spec: dict) -> str:
    return hashlib.sha256(reference_source(spec).encode()).hexdigest()


def load(spec: dict, workdir: str, name: str = "kiln_reference") -> types.ModuleType:
    """Imports the reference module (from its file, or a copy of the source in workdir)."""
    path = spec.get("path") if spec.get("source") is None else None
    if path is None:
        path = os.path.join(workdir, f"{name}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(spec["source"])
    s = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(s)
    sys.modules[name] = mod
    try:
        s.loader.exec_module(mod)
    except Exception as exc:
        raise ReferenceError_(f"the reference module {path} failed to import: "
                              f"{type(exc).__name__}: {exc}") from exc
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise ReferenceError_(f"the reference module {path} has no {attr}")
    return mod


def dtype_name(dt) -> str:
    s = str(dt).replace("torch.", "")
    return DTYPE_NAMES.get(s, s)


def torch_dtype(name: str):
    import torch
    table = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
             "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp64": torch.float64, "float64": torch.float64}
    if name not in table:
        raise ReferenceError_(f"unsupported job dtype {name!r} for a reference operator "
                              "(fp32, fp16, bf16, fp64)")
    return table[name]


def describe(v: Any) -> Any:
    """JSON description of an input value."""
    import torch
    if isinstance(v, torch.Tensor):
        return {"kind": "tensor", "shape": list(v.shape), "dtype": dtype_name(v.dtype),
                "stride": list(v.stride()), "device": v.device.type}
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
        return v if not isinstance(v, float) or v == v else None
    if isinstance(v, (list, tuple)):
        return [describe(x) for x in v]
    return {"kind": type(v).__name__, "repr": repr(v)[:200]}


def infer_dtype(inputs: list) -> str:
    import torch
    for v in inputs:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return dtype_name(v.dtype)
    return "fp32"


def prepare(value: Any, device: str, dtype=None) -> Any:
    """Moves tensors to the device, casting floating ones to dtype (when given)."""
    import torch
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        return t.to(device).contiguous() if t.device.type != device else t
    if isinstance(value, list):
        return [prepare(v, device, dtype) for v in value]
    if isinstance(value, tuple):
        return tuple(prepare(v, device, dtype) for v in value)
    return value


def clone_upcast(value: Any, updt) -> Any:
    """A private copy for the reference: floating tensors in updt (None: keep), always a copy."""
    import torch
    if isinstance(value, torch.Tensor):
        t = value.detach()
        return t.to(updt, copy=True) if (updt is not None and t.is_floating_point()) else t.clone()
    if isinstance(value, list):
        return [clone_upcast(v, updt) for v in value]
    if isinstance(value, tuple):
        return tuple(clone_upcast(v, updt) for v in value)
    return value


def make_inputs(mod, seed: int, device: str, dtype=None) -> list:
    import torch
    torch.manual_seed(int(seed))
    vals = mod.get_inputs()
    if not isinstance(vals, (list, tuple)):
        raise ReferenceError_("get_inputs() must return a list")
    return [prepare(v, device, dtype) for v in vals]


def init_inputs(mod) -> list:
    vals = mod.get_init_inputs()
    if not isinstance(vals, (list, tuple)):
        raise ReferenceError_("get_init_inputs() must return a list")
    return list(vals)


def as_outputs(value: Any) -> list | None:
    """forward's result as a list of tensors (None when it is not tensors)."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return None


def forward_source(mod) -> dict:
    out = {}
    for key, obj in (("forward", getattr(mod.Model, "forward", None)), ("model", mod.Model),
                     ("get_inputs", mod.get_inputs), ("get_init_inputs", mod.get_init_inputs)):
        try:
            out[key] = inspect.getsource(obj)
        except (OSError, TypeError):
            out[key] = None
    return out
