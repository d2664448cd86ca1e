"""2-D max and average pooling over an NCHW tensor (1-D pooling is the H = 1 case):

    pool2d: out[n, c, oh, ow] = KIND over the window
            x[n, c, oh*stride_h - pad_h + i*dil_h, ow*stride_w - pad_w + j*dil_w],  i < kernel_h, j < kernel_w

KIND (param `kind`): `max` (padding is -inf, as torch) or `avg` (padding
counts as zeros: torch's count_include_pad=True; dilation 1). Output size per
dim: floor((in + 2 pad - dil (k - 1) - 1) / stride) + 1 (ceil_mode off).

One kernel: a program owns BLOCK consecutive output elements of the
flattened [N*C, OH, OW] output and unrolls the window (KH x KW constexprs),
each tap a masked gather; fp32 math, output in the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import common

OPERATORS = ("pool2d",)


@triton.jit
def pool2d_kernel(x_ptr, out_ptr, n_planes, H, W, OH, OW, SH, SW, PH, PW, DH, DW,
                  KH: tl.constexpr, KW: tl.constexpr, IS_MAX: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ow = offs % OW
    t = offs // OW
    oh = t % OH
    plane = t // OH
    valid = plane < n_planes
    base = x_ptr + plane * H * W
    if IS_MAX:
        acc = tl.full([BLOCK], -float("inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
    for i in tl.static_range(KH):
        ih = oh * SH - PH + i * DH
        hok = (ih >= 0) & (ih < H)
        for j in tl.static_range(KW):
            iw = ow * SW - PW + j * DW
            m = valid & hok & (iw >= 0) & (iw < W)
            if IS_MAX:
                v = tl.load(base + ih * W + iw, mask=m, other=-float("inf")).to(tl.float32)
                acc = tl.maximum(acc, v)
            else:
                v = tl.load(base + ih * W + iw, mask=m, other=0.0).to(tl.float32)
                acc += v
    if not IS_MAX:
        acc = acc / (KH * KW)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=valid)


def _check(op):
    if op not in OPERATORS:
        raise ValueError(f"pool: unknown operator {op!r}")


def _p(params):
    p = dict(params or {})
    kind = p.get("kind", "max")
    if kind not in ("max", "avg"):
        raise ValueError(f"pool2d: kind must be max or avg, got {kind!r}")
    kh, kw = int(p.get("kernel_h", 2)), int(p.get("kernel_w", 2))
    sh, sw = int(p.get("stride_h", kh)), int(p.get("stride_w", kw))
    ph, pw = int(p.get("pad_h", 0)), int(p.get("pad_w", 0))
    dh, dw = int(p.get("dilation_h", 1)), int(p.get("dilation_w", 1))
    if kind == "avg" and (dh, dw) != (1, 1):
        raise ValueError("pool2d: avg pooling has dilation 1")
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(ph, pw) < 0 or ph > kh // 2 or pw > kw // 2:
        raise ValueError("pool2d: kernel/stride/dilation >= 1 and 0 <= padding <= kernel/2")
    return kind, kh, kw, sh, sw, ph, pw, dh, dw


def out_hw(shape, params):
    _, _, H, W = shape
    kind, kh, kw, sh, sw, ph, pw, dh, dw = _p(params)
    return (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1


def make_inputs(op, shape, dtype, params, seed, device):
    _check(op)
    return {"x": common.randn(list(shape), dtype, seed, device)}


def reference(op, inputs, params):
    _check(op)
    kind, kh, kw, sh, sw, ph, pw, dh, dw = _p(params)
    x = inputs["x"]
    if kind == "max":
        return torch.nn.functional.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw))
    return torch.nn.functional.avg_pool2d(x, (kh, kw), (sh, sw), (ph, pw), count_include_pad=True)


def output_like(op, inputs, params):
    _check(op)
    x = inputs["x"]
    oh, ow = out_hw(list(x.shape), params)
    return torch.empty((x.shape[0], x.shape[1], oh, ow), dtype=x.dtype, device=x.device)


def config_space(op, shape, dtype, params, target):
    """BLOCK 128..1024 outputs per program on 1..8 warps (1..8 outputs per
    thread); the AMD knobs on hip targets."""
    _check(op)
    oh, ow = out_hw(shape, params)
    if oh < 1 or ow < 1:
        return []
    ws = common.warp_size(target)
    base = []
    for block in (256, 512, 1024, 128):
        for w in (4, 2, 8, 1):
            if w * ws <= block <= w * ws * 8:
                base.append({"BLOCK": block, "num_warps": w, "num_stages": 1})
    return common.expand(common.dedupe(base), common.amd_knobs(target))


def _grid(shape, params, config):
    n, c, _, _ = shape
    oh, ow = out_hw(shape, params)
    return (common.cdiv(n * c * oh * ow, config["BLOCK"]), 1, 1)


def _scalars(shape, params):
    n, c, H, W = shape
    kind, kh, kw, sh, sw, ph, pw, dh, dw = _p(params)
    oh, ow = out_hw(shape, params)
    return [n * c, H, W, oh, ow, sh, sw, ph, pw, dh, dw], {"KH": kh, "KW": kw, "IS_MAX": kind == "max"}


def launch(op, inputs, out, config, params):
    _check(op)
    x = inputs["x"]
    opts, consts = common.runtime_options(config, common.device_backend(out))
    scalars, extra = _scalars(list(x.shape), params)
    pool2d_kernel[_grid(list(x.shape), params, config)](x, out, *scalars, **extra, **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    opts, consts = common.runtime_options(config, common.backend(target))
    scalars, extra = _scalars(shape, params)
    consts.update(extra)
    ptr = common.pointer_type(dtype)
    e = common.element_bytes(dtype)
    oh, ow = out_hw(shape, params)
    names = ["n_planes", "H", "W", "OH", "OW", "SH", "SW", "PH", "PW", "DH", "DW"]
    args = [("x_ptr", ptr, common.numel(shape) * e), ("out_ptr", ptr, shape[0] * shape[1] * oh * ow * e)]
    args += [(nm, "i32", v) for nm, v in zip(names, scalars)]
    return common.spec(pool2d_kernel, args, consts, opts, _grid(shape, params, config), target)


def traffic(op, shape, dtype, params):
    _check(op)
    kind, kh, kw, *_ = _p(params)
    oh, ow = out_hw(shape, params)
    e = common.element_bytes(dtype)
    outs = shape[0] * shape[1] * oh * ow
    return {"bytes": (common.numel(shape) + outs) * e, "flops": outs * kh * kw}
