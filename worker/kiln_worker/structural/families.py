"""What each template family computes, as graph patterns, and how a match
binds the family's operator: its shape, params and inputs.

Every :class:`Pattern` names the operator it serves (kernels/operators.yaml),
the pattern (patterns.py) and a ``bind`` function that checks what the pattern
cannot say (which dim, which shapes, which constants) and returns the job:
``{"shape", "params", "inputs"}``, where ``inputs`` maps each of the
template's ``make_inputs`` names to the reference's value it stands for
(``{"input": i}`` a forward argument, ``{"param": name}`` a parameter or
buffer; ``"transpose": true`` when the reference uses it transposed, so that
the reference's value is the template tensor's ``.t()``; ``"shape"`` the
reference's shape of it). ``bind`` raises :class:`Refuse` with a score below
1 and the reason when the computation is that family's but the template does
not cover this instance (conv groups, an elementwise affine missing, ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .canonical import Graph, Ref
from .patterns import C, P, V


class Refuse(Exception):
    def __init__(self, reason: str, score: float = 0.6):
        super().__init__(reason)
        self.reason = reason
        self.score = score


@dataclass
class Pattern:
    op: str          # the library operator it serves
    name: str        # the computation, for people
    expr: object     # patterns.P tree
    bind: Callable   # (env, graph) -> {"shape", "params", "inputs"}


# -- helpers --------------------------------------------------------------------

def leaf(g: Graph, r, what: str) -> dict:
    """The reference value a captured operand is: a forward input or a
    parameter, possibly transposed (2-D)."""
    n = g.nodes[int(r)]
    transpose = False
    if n.op == "permute" and isinstance(n.args[0], Ref) and _swaps_last_two(tuple(n.args[1])):
        transpose = True
        n = g.nodes[int(n.args[0])]
    if n.op == "input":
        out = {"input": n.attrs["index"]}
    elif n.op == "param":
        out = {"param": n.attrs["name"]}
    else:
        raise Refuse(f"{what} is computed ({n.op}), not an input or parameter", 0.5)
    out["shape"] = list(n.shape)
    if transpose:
        out["transpose"] = True
    return out


def _swaps_last_two(perm: tuple) -> bool:
    k = len(perm)
    return k >= 2 and perm == tuple(range(k - 2)) + (k - 1, k - 2)


def shape_of(g: Graph, r) -> tuple:
    return g.nodes[int(r)].shape


def rows_cols(shape: tuple) -> list:
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return [rows, shape[-1]]


def last_dim(g, r, dims, what):
    rank = len(shape_of(g, r))
    if tuple(dims) != (rank - 1,):
        raise Refuse(f"{what} over dim(s) {list(dims)} of a rank-{rank} tensor; the template's is the last dim", 0.7)


# -- binds ----------------------------------------------------------------------

def bind_softmax(env, g):
    last_dim(g, env["x"], (env["dim"],), "softmax")
    x = leaf(g, env["x"], "softmax's input")
    return {"shape": rows_cols(shape_of(g, env["x"])), "params": {}, "inputs": {"x": x}}


def bind_scaled_softmax(op):
    def bind(env, g):
        last_dim(g, env["x"], (env["dim"],), op)
        x = leaf(g, env["x"], f"{op}'s input")
        return {"shape": rows_cols(shape_of(g, env["x"])), "params": {"scale": float(env.get("scale", 1.0))},
                "inputs": {"x": x}}
    return bind


def bind_layernorm(env, g):
    s = shape_of(g, env["x"])
    norm = tuple(env["norm"])
    k = len(norm)
    if k == 0 or tuple(s[-k:]) != norm or tuple(shape_of(g, env["w"])) != norm:
        raise Refuse("layer norm whose normalised shape is not the input's trailing dims", 0.6)
    cols = 1
    for d in norm:
        cols *= d
    rows = 1
    for d in s[:-k]:
        rows *= d
    return {"shape": [rows, cols], "params": {"eps": float(env["eps"])},
            "inputs": {"x": leaf(g, env["x"], "layer norm's input"), "weight": leaf(g, env["w"], "the weight"),
                       "bias": leaf(g, env["b"], "the bias")}}


def bind_layernorm_plain(env, g):
    raise Refuse("layer norm without an elementwise affine: the layernorm template applies weight and bias", 0.7)


def bind_rmsnorm(env, g):
    last_dim(g, env["x"], env["dims"], "RMS norm's mean")
    s = shape_of(g, env["x"])
    if tuple(shape_of(g, env["w"])) != (s[-1],):
        raise Refuse("RMS norm's weight is not a vector over the last dim", 0.6)
    return {"shape": rows_cols(s), "params": {"eps": float(env["eps"])},
            "inputs": {"x": leaf(g, env["x"], "RMS norm's input"), "weight": leaf(g, env["w"], "the weight")}}


def _mm_operands(env, g):
    a, b = env["a"], env["b"]
    sa, sb = shape_of(g, a), shape_of(g, b)
    if len(sa) != 2 or len(sb) != 2:
        raise Refuse("matmul of operands that are not 2-D", 0.6)
    M, K = sa
    N = sb[1]
    return [M, N, K], leaf(g, a, "matmul's A"), leaf(g, b, "matmul's B")


def bind_matmul(env, g):
    shape, a, b = _mm_operands(env, g)
    if a.get("transpose") or b.get("transpose"):
        raise Refuse("a transposed operand: the matmul template reads contiguous A and B (bmm reads it "
                     "through strides)", 0.7)
    return {"shape": shape, "params": {}, "inputs": {"a": a, "b": b}}


def _strided(src: dict) -> tuple[dict, bool]:
    """A bmm operand: the stored tensor itself (no transform) and whether the
    kernel reads it transposed."""
    src = dict(src)
    return src, bool(src.pop("transpose", False))


def bind_bmm_2d(env, g):
    shape, a, b = _mm_operands(env, g)
    (a, ta), (b, tb) = _strided(a), _strided(b)
    M, N, K = shape
    return {"shape": [1, M, N, K], "params": {"trans_a": ta, "trans_b": tb}, "inputs": {"a": a, "b": b}}


def bind_bmm_3d(env, g):
    sa, sb = shape_of(g, env["a"]), shape_of(g, env["b"])
    if len(sa) != 3 or len(sb) != 3:
        raise Refuse("bmm of operands that are not 3-D", 0.6)
    (a, ta) = _strided(leaf(g, env["a"], "bmm's A"))
    (b, tb) = _strided(leaf(g, env["b"], "bmm's B"))
    bt, M, K = sa
    N = sb[2]
    return {"shape": [bt, M, N, K], "params": {"trans_a": ta, "trans_b": tb}, "inputs": {"a": a, "b": b}}


def bind_tensor_matrix(env, g):
    """(x.view(-1, K) @ b).view(..., N): a 3-D (or more) tensor times a matrix."""
    sa, sb = shape_of(g, env["a"]), shape_of(g, env["b"])
    if len(sb) != 2 or len(sa) < 3:
        raise Refuse("a reshaped matmul that is not tensor @ matrix", 0.6)
    rows = 1
    for d in sa[:-1]:
        rows *= d
    K, N = sa[-1], sb[1]
    (a, ta) = _strided(leaf(g, env["a"], "the tensor"))
    (b, tb) = _strided(leaf(g, env["b"], "the matrix"))
    if ta:
        raise Refuse("a transposed batched operand", 0.6)
    return {"shape": [1, rows, N, K], "params": {"trans_a": False, "trans_b": tb}, "inputs": {"a": a, "b": b}}


def bind_gemm(act):
    def bind(env, g):
        shape, a, b = _mm_operands(env, g)
        if tuple(shape_of(g, env["bias"])) != (shape[1],):
            raise Refuse("the bias is not a vector over N", 0.6)
        if act == "gelu" and env.get("approx", "none") != "none":
            raise Refuse("linear + tanh-GELU: the gemm epilogue's gelu is the exact (erf) form", 0.7)
        return {"shape": shape, "params": {"activation": act},
                "inputs": {"a": a, "b": b, "bias": leaf(g, env["bias"], "the bias")}}
    return bind


def bind_bias_gelu(env, g):
    s = shape_of(g, env["x"])
    if len(s) < 2 or tuple(shape_of(g, env["bias"])) != (s[-1],):
        raise Refuse("GELU of a sum that is not a tensor plus a last-dim bias vector", 0.6)
    return {"shape": rows_cols(s), "params": {"approximate": env["approx"]},
            "inputs": {"x": leaf(g, env["x"], "the input"), "bias": leaf(g, env["bias"], "the bias")}}


def bind_add(env, g):
    sx, sy = shape_of(g, env["x"]), shape_of(g, env["y"])
    if sx != sy:
        raise Refuse("a broadcast add (the add template takes two tensors of one shape)", 0.6)
    if not 1 <= len(sx) <= 4:
        raise Refuse("add of rank > 4", 0.6)
    return {"shape": list(sx), "params": {}, "inputs": {"x": leaf(g, env["x"], "x"), "y": leaf(g, env["y"], "y")}}


def bind_conv2d(env, g):
    sx, sw = shape_of(g, env["x"]), shape_of(g, env["w"])
    if len(sx) != 4:
        raise Refuse("a convolution that is not 2-D", 0.5)
    stride, pad = env["stride"], env["padding"]
    if env["groups"] != 1:
        raise Refuse(f"conv2d with groups={env['groups']}: the conv2d template has groups=1", 0.6)
    if tuple(env["dilation"]) != (1, 1):
        raise Refuse("dilated conv2d: the template has dilation 1", 0.6)
    if stride[0] != stride[1] or pad[0] != pad[1] or sw[2] != sw[3]:
        raise Refuse("conv2d with a non-square kernel, stride or padding", 0.6)
    if sw[2] not in (1, 3):
        raise Refuse(f"conv2d with a {sw[2]}x{sw[3]} kernel: the template has 1x1 and 3x3", 0.6)
    return {"shape": list(sx), "params": {"out_channels": sw[0], "kernel_size": sw[2], "stride": stride[0],
                                          "padding": pad[0]},
            "inputs": {"x": leaf(g, env["x"], "the input"), "weight": leaf(g, env["w"], "the weight")}}


def bind_conv2d_bias(env, g):
    raise Refuse("conv2d with a bias: the conv2d template has none", 0.7)


def bind_attention(env, g):
    sq = shape_of(g, env["q"])
    if len(sq) != 4 or shape_of(g, env["k"]) != sq or shape_of(g, env["v"]) != sq:
        raise Refuse("attention whose q, k, v are not one [B, H, S, D] shape", 0.6)
    D = sq[3]
    if D < 16 or D > 256 or D & (D - 1):
        raise Refuse(f"attention with head dim {D}: the template takes a power of two in 16..256", 0.6)
    scale = env["scale"]
    return {"shape": list(sq), "params": {"causal": bool(env["causal"]),
                                          "sm_scale": 0.0 if scale is None else float(scale)},
            "inputs": {"q": leaf(g, env["q"], "q"), "k": leaf(g, env["k"], "k"), "v": leaf(g, env["v"], "v")}}


def bind_row_reduce(op, what):
    def bind(env, g):
        last_dim(g, env["x"], env["dims"], what)
        s = shape_of(g, env["x"])
        if len(s) < 2:
            raise Refuse(f"{what} of a vector", 0.6)
        return {"shape": rows_cols(s), "params": {}, "inputs": {"x": leaf(g, env["x"], "the input")}}
    return bind


def _pool(kind, env, g, x_ref, shape4):
    k, s, p = env["k"], env["s"], env["p"]
    d = env.get("d", (1, 1))
    if kind == "avg" and (not env.get("cip", True) or env.get("div") is not None):
        raise Refuse("average pooling without count_include_pad or with a divisor override", 0.6)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise Refuse("pooling padding above half the kernel", 0.5)
    return {"shape": list(shape4), "params": {"kind": kind, "kernel_h": k[0], "kernel_w": k[1], "stride_h": s[0],
                                              "stride_w": s[1], "pad_h": p[0], "pad_w": p[1],
                                              "dilation_h": d[0], "dilation_w": d[1]},
            "inputs": {"x": leaf(g, x_ref, "the pooled tensor")}}


def bind_pool(kind, one_d):
    def bind(env, g):
        s = shape_of(g, env["x"])
        if one_d:
            if len(s) != 3:
                raise Refuse("1-D pooling of a tensor that is not [N, C, L]", 0.5)
            shape4 = (s[0], s[1], 1, s[2])
        else:
            if len(s) != 4:
                raise Refuse("2-D pooling of a tensor that is not NCHW", 0.5)
            shape4 = s
        return _pool(kind, env, g, env["x"], shape4)
    return bind


def _run_of_dims(g, x, dims, what):
    s = shape_of(g, x)
    dims = tuple(sorted(dims))
    if not dims or dims != tuple(range(dims[0], dims[-1] + 1)):
        raise Refuse(f"{what} over dims {list(dims)} that are not one run", 0.6)
    outer = red = inner = 1
    for i, d in enumerate(s):
        if i < dims[0]:
            outer *= d
        elif i <= dims[-1]:
            red *= d
        else:
            inner *= d
    return [outer, red, inner]


def bind_norm_dim(kind):
    def bind(env, g):
        if kind != "l2" and not env.get("keep", True):
            raise Refuse("a statistic without keepdim", 0.6)
        shape = _run_of_dims(g, env["x"], env["dims"], f"{kind} normalisation")
        params = {"kind": kind}
        if kind == "rms":
            params["eps"] = float(env["eps"])
        return {"shape": shape, "params": params, "inputs": {"x": leaf(g, env["x"], "the input")}}
    return bind


def bind_cumsum(env, g):
    last_dim(g, env["x"], (env["dim"],), "cumulative sum")
    return {"shape": rows_cols(shape_of(g, env["x"])), "params": {},
            "inputs": {"x": leaf(g, env["x"], "the input")}}


# -- the declarations -----------------------------------------------------------

X = V("x")

PATTERNS: list[Pattern] = [
    Pattern("softmax", "softmax(x, dim=-1)", P("softmax", X, C("dim")), bind_softmax),
    Pattern("scaled_softmax", "softmax(x * scale, dim=-1)", P("softmax", P("mul", X, C("scale")), C("dim")),
            bind_scaled_softmax("scaled_softmax")),
    Pattern("log_softmax", "log_softmax(x, dim=-1)", P("log_softmax", X, C("dim")), bind_scaled_softmax("log_softmax")),
    Pattern("log_softmax", "log_softmax(x * scale, dim=-1)", P("log_softmax", P("mul", X, C("scale")), C("dim")),
            bind_scaled_softmax("log_softmax")),
    Pattern("layernorm", "layer_norm(x, [D], weight, bias, eps)",
            P("layer_norm", X, C("norm"), V("w"), V("b"), C("eps")), bind_layernorm),
    Pattern("layernorm", "layer_norm(x, [D]) without affine",
            P("layer_norm", X, C("norm"), None, None, C("eps")), bind_layernorm_plain),
    Pattern("rmsnorm", "x * rsqrt(mean(x^2, -1) + eps) * w",
            P("mul", X, P("rsqrt", P("add", P("mean", P("pow", X, 2.0), C("dims"), True), C("eps"))), V("w")),
            bind_rmsnorm),
    Pattern("matmul", "a @ b", P("mm", V("a"), V("b")), bind_matmul),
    Pattern("bmm", "a @ b with strides (a.t(), b.t(), fp32)", P("mm", V("a"), V("b")), bind_bmm_2d),
    Pattern("bmm", "torch.bmm(a, b) with strides", P("bmm", V("a"), V("b")), bind_bmm_3d),
    Pattern("bmm", "tensor @ matrix", P("view", P("mm", P("view", V("a"), C("s1")), V("b")), C("s2")),
            bind_tensor_matrix),
    Pattern("gemm_bias_act", "a @ b + bias", P("add", P("mm", V("a"), V("b")), V("bias")), bind_gemm("none")),
    Pattern("gemm_bias_act", "relu(a @ b + bias)", P("relu", P("add", P("mm", V("a"), V("b")), V("bias"))),
            bind_gemm("relu")),
    Pattern("gemm_bias_act", "gelu(a @ b + bias)",
            P("gelu", P("add", P("mm", V("a"), V("b")), V("bias")), C("approx")), bind_gemm("gelu")),
    Pattern("gemm_bias_act", "silu(a @ b + bias)", P("silu", P("add", P("mm", V("a"), V("b")), V("bias"))),
            bind_gemm("silu")),
    Pattern("bias_gelu", "gelu(x + bias)", P("gelu", P("add", X, V("bias")), C("approx")), bind_bias_gelu),
    Pattern("add", "x + y", P("add", X, V("y")), bind_add),
    Pattern("conv2d", "conv2d(x, w, stride, padding)",
            P("conv", X, V("w"), None, C("stride"), C("padding"), C("dilation"), False, C("out_pad"), C("groups")),
            bind_conv2d),
    Pattern("conv2d", "conv2d(x, w) + bias",
            P("conv", X, V("w"), V("bias"), C("stride"), C("padding"), C("dilation"), False, C("out_pad"),
              C("groups")), bind_conv2d_bias),
    Pattern("attention", "scaled_dot_product_attention(q, k, v, is_causal, scale)",
            P("sdpa", V("q"), V("k"), V("v"), C("causal"), C("scale"), None), bind_attention),
    Pattern("row_sum", "x.sum(-1)", P("sum", X, C("dims"), C("keep")), bind_row_reduce("row_sum", "sum")),
    Pattern("row_mean", "x.mean(-1)", P("mean", X, C("dims"), C("keep")), bind_row_reduce("row_mean", "mean")),
    Pattern("row_max", "x.amax(-1)", P("amax", X, C("dims"), C("keep")), bind_row_reduce("row_max", "max")),
    Pattern("cumsum", "torch.cumsum(x, dim=-1)", P("cumsum", X, C("dim")), bind_cumsum),
    Pattern("cumprod", "torch.cumprod(x, dim=-1)", P("cumprod", X, C("dim")), bind_cumsum),
    Pattern("norm_dim", "x * rsqrt(mean(x^2, dim) + eps)",
            P("mul", X, P("rsqrt", P("add", P("mean", P("pow", X, 2.0), C("dims"), True), C("eps")))),
            bind_norm_dim("rms")),
    Pattern("norm_dim", "x / norm(x, 2, dim)", P("mul", X, P("reciprocal", P("norm", X, 2.0, C("dims"), C("keep")))),
            bind_norm_dim("l2")),
    Pattern("norm_dim", "x / mean(|x|, dim)", P("mul", X, P("reciprocal", P("mean", P("abs", X), C("dims"), True))),
            bind_norm_dim("l1mean")),
    Pattern("pool2d", "max_pool2d(x, k, stride, padding, dilation)",
            P("max_pool2d", X, C("k"), C("s"), C("p"), C("d"), False), bind_pool("max", False)),
    Pattern("pool2d", "max_pool1d(x, k, stride, padding, dilation)",
            P("view", P("max_pool2d", P("view", X, C("v1")), C("k"), C("s"), C("p"), C("d"), False), C("v2")),
            bind_pool("max", True)),
    Pattern("pool2d", "avg_pool2d(x, k, stride, padding)",
            P("avg_pool2d", X, C("k"), C("s"), C("p"), False, C("cip"), C("div")), bind_pool("avg", False)),
    Pattern("pool2d", "avg_pool1d(x, k, stride, padding)",
            P("view", P("avg_pool2d", P("view", X, C("v1")), C("k"), C("s"), C("p"), False, C("cip"), C("div")),
              C("v2")), bind_pool("avg", True)),
]
