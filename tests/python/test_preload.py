"""preload: a template's kernel loaded before the check takes the GPU lock,
stopped by Triton's launch-enter hook before it runs."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

from triton import knobs  # noqa: E402

from kiln_worker.evaluation import preload as pl  # noqa: E402


def _module(launch):
    return types.SimpleNamespace(launch=launch)


def _hooks():
    chain = knobs.runtime.launch_enter_hook
    return list(getattr(chain, "calls", [chain]))


def test_the_hook_stops_the_launch_and_is_removed():
    # Triton's launcher calls the launch-enter hook just before cuLaunchKernel;
    # here a launch that does the same, then "launches" (sets the flag)
    ran = []

    def launch(op, inputs, out, config, params):
        knobs.runtime.launch_enter_hook({"name": "k"})
        ran.append(op)

    before = _hooks()
    assert pl.preload(_module(launch), "add", {}, None, {}, {}) is True
    assert ran == []
    assert _hooks() == before
    # outside preload the same launch runs through
    launch("add", {}, None, {}, {})
    assert ran == ["add"]


def test_a_launch_error_or_no_kernel_is_not_loaded():
    def broken(op, inputs, out, config, params):
        raise ValueError("bad config")

    def no_kernel(op, inputs, out, config, params):
        return out

    before = _hooks()
    assert pl.preload(_module(broken), "add", {}, None, {}, {}) is False
    assert pl.preload(_module(no_kernel), "add", {}, None, {}, {}) is False
    assert _hooks() == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (Triton's real launcher)")
def test_on_a_gpu_the_kernel_is_loaded_and_nothing_runs():
    from kernels import elementwise

    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn_like(x)
    out = torch.full_like(x, float("nan"))
    # a block size no other test launches, so the kernel is new to this process
    config = {"BLOCK": 2048, "num_warps": 2, "num_stages": 1}
    loads = []

    def count(*args):
        loads.append(args)

    knobs.runtime.kernel_load_start_hook.add(count)
    try:
        assert pl.preload(elementwise, "add", {"x": x, "y": y}, out, config, {}) is True
        torch.cuda.synchronize()
        assert torch.isnan(out).all()  # the kernel did not run
        n = len(loads)
        assert n == 1  # ...but its module was loaded
        elementwise.launch("add", {"x": x, "y": y}, out, config, {})
        torch.cuda.synchronize()
        assert len(loads) == n  # the real launch loaded nothing
    finally:
        knobs.runtime.kernel_load_start_hook.remove(count)
    torch.testing.assert_close(out, x + y)
