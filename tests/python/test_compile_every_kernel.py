"""Every kernel of every template compiles for real targets, not only in the
interpreter.

The interpreter runs a kernel's Python; it never sees Triton's MLIR passes. A
kernel can pass every CPU test and still fail to compile for a GPU: the chunked
cumsum kernel did (`TritonGPUOptimizeThreadLocality` failed on a `tl.sum`
accumulated in a loop-carried value), and every cumsum job on the H200 failed
with `compile_error`. Here each distinct kernel a template's config space
reaches, over the shapes of its launch tests, is cross-compiled for an NVIDIA
(sm_90) and an AMD (gfx942) target through the worker's own compile child
(compile_stage, the step an evaluation runs first), and must come back `ok`.

    TRITON_INTERPRET=1 python3 -m pytest -q tests/python/test_compile_every_kernel.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
HOME = Path(__file__).resolve().parents[2]
for p in (str(HOME / "worker"), str(HOME), str(HOME / "tests" / "python"),
          str(HOME / "tests" / "python" / "fixtures")):
    if p not in sys.path:
        sys.path.insert(0, p)

import pytest  # noqa: E402

from kiln_worker.evaluation.templates import Library  # noqa: E402
from kiln_worker.processes.compile_child import CompileClient  # noqa: E402
from worker_client import TARGET_H200, TARGET_MI300X  # noqa: E402
import test_launch_new_families as new_families  # noqa: E402
import test_package_info as package_info  # noqa: E402

LIB = Library(HOME / "kernels")


def _cases():
    """(op, dtype, params, shapes) of both launch-test tables."""
    out = [(op, dtype, params, shapes) for op, (dtype, params, shapes, _) in package_info.CASES.items()]
    out += [(op, dtype, new_families._params(op, params), shapes)
            for op, dtype, params, shapes in new_families.CASES]
    return out


def _distinct_kernels(op, dtype, params, shapes, target):
    """One (shape, config) per distinct kernel function the config space
    reaches at these shapes, with the kernel's name."""
    mod = LIB.launch_module(op)
    seen = {}
    for shape in shapes:
        for config in mod.config_space(op, shape, dtype, params, target):
            try:
                spec = mod.compile_spec(op, shape, dtype, params, config, target)
            except ValueError:
                continue
            name = spec["fn"].__name__
            if name not in seen:
                seen[name] = (shape, config)
    return seen


@pytest.fixture(scope="module")
def compiler():
    c = CompileClient()
    c.start()
    yield c
    c.close()


CASES = _cases()


@pytest.mark.parametrize("target", [TARGET_H200, TARGET_MI300X], ids=lambda t: t["name"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_every_kernel_compiles_for_the_target(compiler, case, target, tmp_path):
    op, dtype, params, shapes = case
    kernels = _distinct_kernels(op, dtype, params, shapes, target)
    assert kernels, f"{op}: no config at {shapes} for {target['name']}"
    for name, (shape, config) in kernels.items():
        res = compiler.compile({"op": op, "shape": shape, "dtype": dtype, "params": params,
                                "config": config, "target": target, "artifact_dir": str(tmp_path)})
        assert res["status"] == "ok", f"{op} {name} {shape} {config} on {target['name']}: {res['message'][:600]}"
