"""Families matched by a procedure rather than by one pattern:

* ``pointwise``: a graph whose every operation is elementwise (activations,
  n-ary add/mul with constants, clamps, powers, ...) over inputs and parameters
  that are either the output's shape (``full``), a vector over its last dim
  (``row``, e.g. a bias) or one value per row (``col``). The graph becomes the
  pointwise template's expression (kernels/pointwise.py), so the kernel is
  generated from what the module computes.
* ``reduce_dim``: sum, mean, amax, amin, argmax, argmin over one dim of any
  rank, as [outer, R, inner].

Each returns match entries as families.PATTERNS' binds do (score 1.0 with the
job, or a refusal's score and reason).
"""
from __future__ import annotations

from .canonical import Graph, Ref
from .families import Refuse, leaf

_UNARY = {"relu", "sigmoid", "tanh", "silu", "exp", "log", "abs", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
          "hardsigmoid", "hardswish"}
_ELEMENTWISE = _UNARY | {"add", "mul", "gelu", "pow", "leaky_relu", "elu", "clamp", "softplus", "selu", "mish",
                         "relu6", "maximum", "minimum", "cast"}
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805
# Ops written (op x p1 .. pk): their number k of numeric parameters after x.
_NUMERIC_PARAMS = {"pow": 1, "leaky_relu": 1, "elu": 3, "softplus": 2}


def match_generic(g: Graph) -> list[dict]:
    out = []
    for fn in (match_pointwise, match_reduce_dim):
        try:
            r = fn(g)
        except Refuse as e:
            r = {"score": e.score, "reason": e.reason}
        if r is not None:
            out.append(r)
    return out


def _num(v: float) -> str:
    return repr(float(v))


def match_pointwise(g: Graph):
    compute = g.compute_nodes()
    if len(g.outputs) != 1 or not compute:
        return None
    def elementwise(i):
        n = g.nodes[i]
        return n.op in _ELEMENTWISE or (n.op == "view" and g.nodes[int(n.args[0])].op in ("input", "param"))
    if not all(elementwise(i) for i in compute):
        return None
    root = g.nodes[int(g.outputs[0])]
    base = {"op": "pointwise", "pattern": "elementwise chain"}
    if not root.shape:
        raise Refuse("an elementwise computation on scalars", 0.5)
    cols = root.shape[-1]
    rows = 1
    for d in root.shape[:-1]:
        rows *= d
    leaves: dict[int, int] = {}   # node index -> xi
    modes: list[str] = []
    sources: dict[str, dict] = {}

    def mode_of(shape: tuple) -> str:
        s = tuple(shape)
        if s == tuple(root.shape):
            return "full"
        pad = (1,) * (len(root.shape) - len(s)) + s
        if len(pad) == len(root.shape):
            if pad[-1] == cols and all(d == 1 for d in pad[:-1]):
                return "row"
            if pad[-1] == 1 and pad[:-1] == tuple(root.shape[:-1]):
                return "col"
        raise Refuse(f"an elementwise operand of shape {list(s)} broadcast to {list(root.shape)} "
                     "(the pointwise template broadcasts full tensors, last-dim vectors and per-row values)", 0.6)

    def expr(a) -> str:
        if not isinstance(a, Ref):
            if isinstance(a, bool) or not isinstance(a, (int, float)):
                raise Refuse(f"an elementwise operation with a non-numeric constant {a!r}", 0.5)
            return _num(a)
        i = int(a)
        n = g.nodes[i]
        view_of = None
        if n.op == "view" and g.nodes[int(n.args[0])].op in ("input", "param"):
            view_of = n  # a reshape of an operand (e.g. unsqueeze for a broadcast): the operand at that shape
            i = int(n.args[0])
            n = g.nodes[i]
        if n.op in ("input", "param"):
            if not n.dtype.startswith(("fp", "bf")):
                raise Refuse(f"an elementwise computation on a {n.dtype} tensor", 0.5)
            if i not in leaves:
                if len(leaves) >= 8:
                    raise Refuse("an elementwise computation over more than 8 tensors", 0.6)
                leaves[i] = len(leaves)
                m = mode_of(view_of.shape if view_of is not None else n.shape)
                modes.append(m)
                src = leaf(g, Ref(i), "an operand")
                sources[f"x{leaves[i]}"] = src
            return f"x{leaves[i]}"
        args = n.args
        op = n.op
        if op in ("add", "mul"):
            return f"({op} " + " ".join(expr(x) for x in args) + ")"
        if op == "cast":
            return expr(args[0])
        if op in _UNARY:
            return f"({op} {expr(args[0])})"
        if op == "gelu":
            return f"({'gelu_tanh' if args[1] == 'tanh' else 'gelu'} {expr(args[0])})"
        if op in _NUMERIC_PARAMS:
            return f"({op} {expr(args[0])} " + " ".join(_num(v) for v in args[1:1 + _NUMERIC_PARAMS[op]]) + ")"
        if op == "selu":
            return f"(elu {expr(args[0])} {_num(SELU_ALPHA)} {_num(SELU_SCALE)} 1.0)"
        if op == "clamp":
            lo = "none" if args[1] is None else _num(args[1])
            hi = "none" if args[2] is None else _num(args[2])
            return f"(clamp {expr(args[0])} {lo} {hi})"
        if op == "relu6":
            return f"(clamp {expr(args[0])} 0.0 6.0)"
        if op == "mish":
            x = expr(args[0])
            return f"(mul {x} (tanh (softplus {x} 1.0 20.0)))"
        if op in ("maximum", "minimum"):
            return f"({op} {expr(args[0])} {expr(args[1])})"
        raise Refuse(f"no pointwise form for {op}", 0.5)

    e = expr(g.outputs[0])
    if not leaves:
        raise Refuse("an elementwise computation with no tensor operand", 0.5)
    if "full" not in modes:
        raise Refuse("an elementwise computation whose output is larger than every operand (a pure broadcast)", 0.6)
    return {**base, "score": 1.0, "shape": [rows, cols], "params": {"expr": e, "inputs": ",".join(modes)},
            "inputs": sources}


_REDUCE_KINDS = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "argmax": "argmax",
                 "argmin": "argmin"}


def match_reduce_dim(g: Graph):
    if len(g.outputs) != 1:
        return None
    out = g.nodes[int(g.outputs[0])]
    compute = g.compute_nodes()
    if out.op not in _REDUCE_KINDS or len(compute) != 1:
        return None
    x = out.args[0]
    dims = tuple(out.args[1])
    xs = g.nodes[int(x)].shape
    base = {"op": "reduce_dim", "pattern": f"{out.op}(x, dim)"}
    if len(dims) != 1:
        raise Refuse(f"{out.op} over {len(dims)} dims (reduce_dim reduces one)", 0.6)
    d = dims[0]
    outer = 1
    for s in xs[:d]:
        outer *= s
    inner = 1
    for s in xs[d + 1:]:
        inner *= s
    src = leaf(g, x, f"{out.op}'s input")
    if src.get("transpose"):
        raise Refuse(f"{out.op} of a transposed input", 0.6)
    return {**base, "score": 1.0, "shape": [outer, xs[d], inner], "params": {"kind": _REDUCE_KINDS[out.op]},
            "inputs": {"x": src}}
