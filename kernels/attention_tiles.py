"""What both attention kernels share: the program -> (query block, head) order,
the shape and parameter rules, and the runtime arguments after q, k, v.

kernels/attention.py (the template: Triton kernel, reference, config space) and
kernels/attention_wgmma.py (its warp-specialised Gluon kernel for sm_90) both
import this module; neither imports the other at import time (attention.py
loads attention_wgmma only for a `ws` config).
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from . import common


@common.jit_helper
def tile_order(pid, BH, S, BLOCK_M: tl.constexpr, GROUP_H: tl.constexpr):
    # program -> (query block, head): head groups of GROUP_H, in each the query
    # blocks heaviest first, the heads inside (kernels/attention.py's docstring).
    # Called by both kernels (scalar code inlines into the Gluon kernel too).
    num_m = tl.cdiv(S, BLOCK_M)
    per_group = GROUP_H * num_m
    group = pid // per_group
    first_bh = group * GROUP_H
    group_size = tl.minimum(BH - first_bh, GROUP_H)
    r = pid - group * per_group
    return num_m - 1 - r // group_size, first_bh + r % group_size


def check_shape(shape):
    """(B, H, S, D) of a [B, H, S, D] shape; ValueError when it is empty or D is
    not a power of two in 16..256."""
    B, H, S, D = (int(s) for s in shape)
    if min(B, H, S) < 1:
        raise ValueError(f"attention: empty shape {list(shape)}")
    if not common.is_pow2(D) or not 16 <= D <= 256:
        raise ValueError(f"attention: head dim D must be a power of two in 16..256, not {D}")
    return B, H, S, D


def causal(params) -> bool:
    """The `causal` param (default true; "1", "true", "yes" as strings)."""
    c = (params or {}).get("causal", True)
    if isinstance(c, str):
        c = c.lower() in ("1", "true", "yes")
    return bool(c)


def sm_scale(params, D) -> float:
    """The `sm_scale` param; 0 (the default) means 1/sqrt(D)."""
    s = float((params or {}).get("sm_scale", 0.0) or 0.0)
    if s < 0:
        raise ValueError("attention: sm_scale must be >= 0 (0 = 1/sqrt(D))")
    return s if s > 0 else 1.0 / math.sqrt(D)


def ws_pairs_fit(S: int) -> bool:
    """Whether a `ws` config can take `pair` (two query tiles per program): an
    even number of 128-row query blocks."""
    return triton.cdiv(S, 128) % 2 == 0


def kernel_args(shape, dtype, params) -> list:
    """`common.spec`'s runtime arguments of attention.py's kernel; the last
    four (out_ptr, BH, S, sm_scale) are attention_wgmma's too, after its three
    TMA descriptors."""
    B, H, S, D = check_shape(shape)
    ptr = common.pointer_type(dtype)
    size = common.numel(shape) * common.element_bytes(dtype)  # each of q, k, v, out
    return [("q_ptr", ptr, size), ("k_ptr", ptr, size), ("v_ptr", ptr, size), ("out_ptr", ptr, size),
            ("BH", "i32", B * H), ("S", "i32", S), ("sm_scale", "fp32", sm_scale(params, D))]
