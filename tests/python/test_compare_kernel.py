"""The one-pass comparison kernel (worker/kiln_worker/evaluation/compare_kernel.py) gives
exactly check.torch_stats' statistics -- counts, maxima, ratios -- on the
dtype pairs a check meets, under the Triton interpreter (on a GPU too, where
one is present), and check.compare takes it only where it applies."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

from kiln_worker.evaluation import check, compare_kernel  # noqa: E402

PAIRS = [(torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.float64)]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") == "0" else [])


def _both(out, ref, atol, rtol):
    out_flat, ref_flat = out.reshape(-1), ref.reshape(-1)
    steps = [(a, min(ref_flat.numel(), a + check.COMPARE_CHUNK)) for a in range(0, ref_flat.numel(),
                                                                              check.COMPARE_CHUNK)]
    return (compare_kernel.compare_stats(out_flat, ref_flat, atol, rtol),
            check.torch_stats(out_flat, ref_flat, steps, atol, rtol))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dt,ref_dt", PAIRS)
@pytest.mark.parametrize("n", [1, 4095, 4096, 10_000])
def test_same_statistics_as_torch(device, out_dt, ref_dt, n):
    if device == "cpu" and os.environ.get("TRITON_INTERPRET", "0") == "0":
        pytest.skip("the kernel on the CPU needs the interpreter (TRITON_INTERPRET=1)")
    g = torch.Generator().manual_seed(n)
    ref = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(ref_dt).to(device)
    noise = torch.randn(n, generator=g, dtype=torch.float64).to(ref_dt).to(device) * 1e-3
    out = (ref + noise).to(out_dt)
    for atol, rtol in ((1e-2, 1e-2), (1e-4, 1e-4), (0.37, 0.0)):
        fused, reference = _both(out, ref, atol, rtol)
        assert fused == reference  # exactly: same counts, same maxima to the last bit
    if n > 2:  # a few elements far out, and non-finite ones
        out[n // 2] = ref[n // 2].to(out_dt) + 50
        out[n - 1] = float("inf")
        out[0] = float("nan")
        fused, reference = _both(out, ref, 1e-2, 1e-2)
        # NaN and inf are the non-finite ones; inf and the far one are out of
        # tolerance (NaN compares false). With non-finite outputs the maxima
        # differ (torch's propagate a NaN), and compare() does not use them:
        # the detailed pass reports the failure.
        assert fused[:2] == reference[:2] == (2, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_compare_passes_and_fails_as_before(device):
    if device == "cpu" and os.environ.get("TRITON_INTERPRET", "0") == "0":
        pytest.skip("needs the interpreter on the CPU")
    ref = torch.linspace(-4, 4, 5000, dtype=torch.float32, device=device)
    out = ref.to(torch.bfloat16)
    stats = check.compare(out, ref, 1e-2, 1e-2, seed=0, memo={})
    assert stats["max_abs_err"] > 0 and stats["worst_ratio"] < 1
    bad = out.clone()
    bad[123] += 1
    with pytest.raises(check.Incorrect, match="1 of 5000 elements out of tolerance"):
        check.compare(bad, ref, 1e-2, 1e-2, seed=0, memo={})


def test_the_fused_pass_applies_on_a_gpu_only_with_a_positive_atol():
    x = torch.zeros(4)
    assert not check.fused_applies(x, x.double(), 1e-2)  # CPU tensors: torch's pass
    meta = torch.empty(4, device="meta")
    assert not check.fused_applies(meta, meta, 1e-2)
    if torch.cuda.is_available():
        c = torch.zeros(4, device="cuda")
        assert check.fused_applies(c.half(), c, 1e-2)
        assert not check.fused_applies(c.half(), c, 0.0)  # 0 / 0 ratios: torch's pass
        assert not check.fused_applies(c, c.half(), 1e-2)  # a half-precision reference


def test_a_kernel_that_cannot_run_leaves_the_torch_pass(monkeypatch):
    # A backend that cannot compile the kernel (say, no div_rn): the first
    # check falls back to torch's pass, and the later ones do not try again.
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise RuntimeError("no div_rn here")

    monkeypatch.setattr(compare_kernel, "_unavailable", [])
    monkeypatch.setattr(compare_kernel.compare_kernel, "run", broken)
    monkeypatch.setattr(check, "fused_applies", lambda o, r, a: compare_kernel.available())
    ref = torch.linspace(-4, 4, 100, dtype=torch.float32)
    for _ in range(3):
        stats = check.compare(ref.to(torch.bfloat16), ref, 1e-2, 1e-2, seed=0, memo={})
        assert stats["worst_ratio"] < 1
    assert len(calls) == 1 and not compare_kernel.available()


def test_strided_views_read_in_logical_order():
    # issue 17: the kernel read raw pointers of a reshape(-1) that can be a
    # strided view: a wrong output equal to the reference storage's prefix
    # passed, a correct strided output failed
    from kiln_worker.evaluation import compare_kernel
    # the kernel's device: a GPU where Triton compiles for one, else the interpreter's CPU
    dev = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    base = torch.randn(74, dtype=torch.float32, device=dev)
    ref = base[::2]
    assert ref.reshape(-1).stride() == (2,)
    prefix = base[:37].clone()
    nonfinite, nbad, *_ = compare_kernel.compare_stats(prefix, ref, 1e-4, 1e-4)
    assert nbad > 0
    full = torch.full((74,), float("nan"), device=dev)
    full[::2] = ref
    nonfinite, nbad, *_ = compare_kernel.compare_stats(full[::2], ref, 1e-4, 1e-4)
    assert (nonfinite, nbad) == (0, 0)
