"""memplan.meta_tensors' own answers (random draws, tensors made like another,
arithmetic) against PyTorch's meta kernels and FakeTensorMode: the same shapes
and dtypes, so a job's memory plan is exact without importing what those
kernels import (sympy, torch._dynamo)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(ROOT))
from kiln_worker.evaluation import memplan, templates  # noqa: E402


def made(fn):
    """fn() inside the mode: (shape, dtype, device type) of what it returns."""
    with memplan.meta_tensors():
        t = fn()
    return tuple(t.shape), t.dtype, t.device.type


def real_meta(fn):
    """fn() on PyTorch's own meta kernels (every tensor made with device="meta")."""
    t = fn("meta")
    return tuple(t.shape), t.dtype, t.device.type


g = torch.Generator().manual_seed(0)
FACTORIES = [
    lambda d: torch.randn(2, 3, device=d),
    lambda d: torch.randn((2, 3), dtype=torch.float16, device=d),
    lambda d: torch.rand([4], device=d),
    lambda d: torch.randint(5, (2, 3), device=d),
    lambda d: torch.randint(1, 5, (6,), dtype=torch.int32, device=d),
    lambda d: torch.randperm(7, device=d),
    lambda d: torch.randn(size=(3, 2), device=d),
    lambda d: torch.randint(0, 9, size=[4], device=d),
]


@pytest.mark.parametrize("i", range(len(FACTORIES)))
def test_random_draws_have_the_shape_and_dtype_of_pytorchs(i):
    fn = FACTORIES[i]
    assert made(lambda: fn("cpu")) == real_meta(fn)


def test_likes_fills_and_arithmetic_follow_pytorchs_meta_kernels():
    cases = [
        # (what the template does, given a device)
        lambda d: torch.empty_like(torch.empty(3, 4, device=d, dtype=torch.bfloat16)),
        lambda d: torch.zeros_like(torch.empty(3, 4, device=d), dtype=torch.float16),
        lambda d: torch.full_like(torch.empty(3, 4, device=d), 2.0),
        lambda d: torch.randn_like(torch.empty(5, device=d, dtype=torch.float16)),
        lambda d: torch.randint_like(torch.empty(5, device=d), 3),
        lambda d: torch.empty(3, 4, device=d, dtype=torch.bfloat16) * 0.5,
        lambda d: 0.5 * torch.empty(3, 4, device=d, dtype=torch.bfloat16),
        lambda d: 1.0 + torch.empty(4, device=d),
        lambda d: torch.empty(3, 1, device=d, dtype=torch.float16) + torch.empty(4, device=d),
        lambda d: torch.empty(3, 4, device=d, dtype=torch.int32) / 2,
        lambda d: torch.true_divide(torch.empty(3, device=d, dtype=torch.int64), 2),
        lambda d: 6 / torch.empty(3, device=d, dtype=torch.int16),
        lambda d: torch.div(torch.empty(3, 4, device=d, dtype=torch.int64), 2, rounding_mode="floor"),
        lambda d: torch.sub(torch.empty(2, 1, 4, device=d), torch.empty(3, 1, device=d), alpha=2),
        lambda d: 2 - torch.empty(3, device=d, dtype=torch.int64),
        lambda d: torch.empty(3, 4, device=d).mul_(3.0),
        lambda d: torch.empty(3, 4, device=d).normal_(generator=None),
        lambda d: torch.empty(3, 4, device=d).uniform_(-1, 1),
    ]
    for fn in cases:
        assert made(lambda: fn("cpu")) == real_meta(fn)
    with memplan.meta_tensors():
        x = torch.empty(3, 4)
        assert x.mul_(2.0) is x and x.normal_() is x  # in place: the same tensor
        with pytest.raises(ValueError):
            torch.empty(3, 4) + torch.empty(5)  # does not broadcast: an error, as PyTorch's


def test_broadcast_is_torchs():
    for shapes in ([(3, 1), (4,)], [(2, 1, 4), (3, 1)], [(), (5,)], [(1,), (1,)], [(7, 0), (1, 0)]):
        assert memplan.broadcast(shapes) == tuple(torch.broadcast_shapes(*shapes))
    with pytest.raises(ValueError):
        memplan.broadcast([(3,), (4,)])


CASES = [("add", [1000], "fp16", {}), ("bias_gelu", [64, 96], "bf16", {"approximate": "tanh"}),
         ("softmax", [33, 100], "fp32", {}), ("layernorm", [64, 4096], "bf16", {}),
         ("rmsnorm", [64, 4096], "fp16", {}), ("row_max", [17, 300], "fp32", {}),
         ("matmul", [128, 96, 64], "bf16", {}), ("gemm_bias_act", [512, 256, 128], "bf16", {"activation": "gelu"}),
         ("conv2d", [2, 3, 32, 32], "fp16", {}), ("attention", [1, 2, 128, 64], "bf16", {}),
         ("scaled_softmax", [64, 100], "fp16", {"scale": 0.5}), ("cumprod", [64, 100], "fp32", {}),
         ("reduce_dim", [4, 33, 7], "fp32", {"kind": "argmax"}), ("norm_dim", [4, 33, 7], "bf16", {"kind": "l2"}),
         ("bmm", [2, 64, 48, 32], "fp16", {"trans_a": True}), ("pool2d", [2, 3, 16, 16], "fp32", {"kind": "avg"}),
         ("pointwise", [64, 100], "bf16", {"expr": "(mul (silu x0) x1)", "inputs": "full,row"})]


def test_plans_on_meta_tensors_equal_those_on_fake_tensors():
    """Every family of the library (one case each): the plan's four sizes on
    meta tensors are FakeTensorMode's."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    lib = templates.Library()
    assert {c[0] for c in CASES} >= set(lib.operators) - {"row_sum", "row_mean", "log_softmax", "cumsum"}
    for op, shape, dt, params in CASES:
        mod = importlib.import_module("kernels." + lib.module_name_for(op).split(".")[-1])
        params = lib.complete_params(op, params)
        with memplan.meta_tensors():
            m = memplan._plan(mod, op, shape, dt, params, None)
        with FakeTensorMode(allow_non_fake_inputs=True):
            f = memplan._plan(mod, op, shape, dt, params, None)
        sizes = lambda p: (p.input_bytes, p.upcast_bytes, p.ref_bytes, p.output_bytes)  # noqa: E731
        assert sizes(m) == sizes(f), (op, sizes(m), sizes(f))
