"""bench/trust/independent_bench.py's verdict (on the CPU: its judge is plain
torch): an output passes within 4x its fixed tolerance, or within twice torch
eager's own error against the same float64 reference."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "trust"))
from independent_bench import judge  # noqa: E402


def test_within_the_fixed_tolerance():
    ref = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)
    out = (ref + torch.tensor([3e-4, 0.0, 0.0], dtype=torch.float64)).float()  # 3x tol at ref 0
    ok, worst, eworst = judge([out], [ref.float()], [ref], "fp32")
    assert ok and worst == pytest.approx(3.0, rel=1e-3) and eworst < 1e-2


def test_past_it_fails_unless_eager_errs_as_much():
    ref = torch.zeros(4, dtype=torch.float64)
    out = torch.tensor([0.0, 0.0, 0.0, 6e-4])                 # 6x the tolerance
    assert judge([out], [ref.float()], [ref], "fp32")[0] is False
    eager = torch.tensor([0.0, 4e-4, 0.0, 0.0])               # eager itself at 4x
    ok, worst, eworst = judge([out], [eager], [ref], "fp32")
    assert ok and worst == pytest.approx(6.0) and eworst == pytest.approx(4.0)
    assert judge([out * 2], [eager], [ref], "fp32")[0] is False  # 12x > 2 x 4x


def test_non_finite_output_fails_whatever_eager_does():
    ref = torch.zeros(2, dtype=torch.float64)
    out = torch.tensor([0.0, float("nan")])
    assert judge([out], [torch.tensor([1.0, 1.0])], [ref], "fp32")[0] is False


def test_half_precision_tolerance_and_integer_outputs():
    ref = torch.tensor([1.0], dtype=torch.float64)
    assert judge([torch.tensor([1.03], dtype=torch.float16)], [ref.half()], [ref], "fp16")[0]   # 1.5x of 2e-2
    assert not judge([torch.tensor([1.1], dtype=torch.float16)], [ref.half()], [ref], "fp16")[0]
    idx = torch.tensor([3, 1]), torch.tensor([3, 2])
    assert judge([idx[0]], [idx[0]], [idx[0]], "fp32")[0]
    assert not judge([idx[1]], [idx[0]], [idx[0]], "fp32")[0]  # argmax off by one
