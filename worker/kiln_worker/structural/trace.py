"""Tracing a KernelBench-form reference module into a canonical ATen graph,
without running it at full size.

The module's ``get_init_inputs()``, ``Model(...)`` and ``get_inputs()`` all run
under a ``FakeTensorMode``: every tensor they create (parameters, buffers,
inputs, however large) is a fake tensor with a shape, a dtype and no storage,
and ``make_fx`` records the forward as ATen operations on them. Nothing of the
module's size is allocated (``trace_reference`` reports the process's peak RSS
growth so callers can check). Parameters and buffers become graph inputs named
by their state-dict names (``functional_call``), so a binding can say which
template input each one is.

The result is a :class:`Graph` in the canonical form of ``canonical.py``.
"""
from __future__ import annotations

import resource
import time
from typing import Any

from ..sandbox import reference_module as rm
from .canonical import Graph, canonicalise


class TraceError(Exception):
    """The module could not be traced (answered as the job's reason)."""


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def trace_module(mod) -> tuple[Graph, dict]:
    """(canonical graph, facts) for an imported KernelBench-form module."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call
    from torch.utils import _pytree as pytree

    t0 = time.perf_counter()
    rss0 = _rss_kib()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:  # noqa: F841
        try:
            torch.manual_seed(0)
            init = rm.init_inputs(mod)
            model = mod.Model(*init)
            inputs = mod.get_inputs()
        except rm.ReferenceError_:
            raise
        except Exception as exc:  # noqa: BLE001 - the module's own failure
            raise TraceError(f"building the module under fake tensors failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(inputs, (list, tuple)):
            raise TraceError("get_inputs() must return a list")
        model.eval()
        state = dict(model.named_parameters())
        state.update(dict(model.named_buffers()))
        tensor_pos = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]
        consts = {i: v for i, v in enumerate(inputs) if not isinstance(v, torch.Tensor)}

        def fwd(params, *tensors):
            args = list(inputs)
            for i, t in zip(tensor_pos, tensors):
                args[i] = t
            with torch.no_grad():
                return functional_call(model, params, tuple(args))

        try:
            gm = make_fx(fwd, tracing_mode="real")(state, *[inputs[i] for i in tensor_pos])
        except Exception as exc:  # noqa: BLE001
            raise TraceError(f"tracing the forward failed: {type(exc).__name__}: {str(exc)[:300]}") from exc
    # Which placeholder is which: params first (pytree order of the dict), then the inputs.
    leaves, _ = pytree.tree_flatten((state, *[inputs[i] for i in tensor_pos]))
    names: list[dict] = []
    flat_state, _ = pytree.tree_flatten(state)
    keys = sorted(state.keys()) if len(flat_state) == len(state) else list(state.keys())
    # pytree flattens a dict in insertion order in recent torch; find by identity.
    by_id = {id(v): k for k, v in state.items()}
    for leaf in leaves[:len(flat_state)]:
        names.append({"kind": "param", "name": by_id.get(id(leaf), "?")})
    for i in tensor_pos:
        names.append({"kind": "input", "index": i})
    del keys
    graph = canonicalise(gm, names)
    facts = {
        "trace_s": round(time.perf_counter() - t0, 4),
        "rss_growth_kib": max(0, _rss_kib() - rss0),
        "inputs": [rm.describe(v) if not isinstance(v, torch.Tensor) else
                   {"kind": "tensor", "shape": list(v.shape), "dtype": rm.dtype_name(v.dtype)}
                   for v in inputs],
        "consts": {str(k): v for k, v in consts.items() if isinstance(v, (int, float, bool)) or v is None},
        "params": {k: {"shape": list(v.shape), "dtype": rm.dtype_name(v.dtype)} for k, v in state.items()},
        "init_inputs": [rm.describe(v) for v in init] if isinstance(init, list) else [],
    }
    return graph, facts


def trace_reference(reference: Any, workdir: str) -> tuple[Graph, dict]:
    """Loads job.reference ({"path"} or {"source"}) and traces it."""
    spec = rm.reference_spec({"reference": reference})
    mod = rm.load(spec, workdir, name=f"kiln_structural_{abs(hash(rm.reference_source(spec))) % 10**12}")
    return trace_module(mod)
