"""The canonical graph: ATen operations with shapes, dtypes and constants, in
one spelling per computation, so that a pattern written once matches the many
ways a module can say the same thing.

Rewrites (applied while the FX graph is read, operands first):

* no-ops vanish: detach, clone, contiguous, alias, expand (broadcasts are implicit
  in the elementwise node's shape), a dtype conversion to the same dtype;
* ``t``/``transpose`` are ``permute``; ``view``/``reshape``/``_unsafe_view`` are ``view``;
* arithmetic is n-ary and commutative: ``add`` and ``mul`` flatten nested uses of
  themselves (when the inner node has no other user) and fold their constants into
  one; ``sub``/``neg``/``rsub``/``div`` become ``add``/``mul`` with ``-1``,
  ``reciprocal`` or ``1/c``; ``x*x`` is ``pow(x, 2)``; ``pow(x, .5)`` is ``sqrt``,
  ``pow(x, -.5)`` and ``reciprocal(sqrt(x))`` are ``rsqrt``;
* ``addmm(b, x, w)`` is ``add(mm(x, w), b)``; ``linear`` likewise;
* reductions carry their dims normalised (non-negative, sorted) and keepdim;
  ``max.dim`` / ``min.dim`` become ``amax``/``amin`` and ``argmax``/``argmin``
  through their ``getitem``; softmax-like ops carry a non-negative dim;
* ``native_layer_norm(...)[0]`` is ``layer_norm(x, w, b, eps)``; the SDPA kernels
  of every backend are ``sdpa(q, k, v, causal, scale)``.

A node refers to an operand by :class:`Ref` (its index); anything else in
``args`` is a constant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class Ref(int):
    """An operand that is another node of the graph (its index)."""

    def __repr__(self) -> str:
        return f"%{int(self)}"


@dataclass
class Node:
    op: str
    args: tuple
    shape: tuple
    dtype: str
    attrs: dict = field(default_factory=dict)  # input: index; param: name

    def text(self) -> str:
        if self.op in ("input", "param"):
            return f"{self.op}({self.attrs.get('index', self.attrs.get('name'))})"
        return f"{self.op}({', '.join(repr(a) for a in self.args)})"


@dataclass
class Graph:
    nodes: list
    outputs: list  # Refs

    def compute_nodes(self) -> list:
        return [i for i, n in enumerate(self.nodes) if n.op not in ("input", "param")]

    def users(self) -> dict:
        u: dict[int, int] = {}
        for n in self.nodes:
            for a in n.args:
                if isinstance(a, Ref):
                    u[int(a)] = u.get(int(a), 0) + 1
        for o in self.outputs:
            u[int(o)] = u.get(int(o), 0) + 1
        return u

    def as_json(self) -> dict:
        return {"nodes": [{"op": n.op, "args": [f"%{int(a)}" if isinstance(a, Ref) else _jsonable(a) for a in n.args],
                           "shape": list(n.shape), "dtype": n.dtype, **({"attrs": n.attrs} if n.attrs else {})}
                          for n in self.nodes],
                "outputs": [int(o) for o in self.outputs]}

    def text(self) -> str:
        return "; ".join(f"%{i} = {n.text()}" for i, n in enumerate(self.nodes))


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return repr(v)


_NOOPS = {"detach", "clone", "contiguous", "alias", "lift_fresh_copy", "expand", "dropout",
          "_assert_tensor_metadata"}
_VIEWS = {"view", "reshape", "_unsafe_view", "flatten", "unsqueeze", "squeeze"}
_REDUCTIONS = {"sum", "mean", "amax", "amin", "prod", "argmax", "argmin", "any", "all",
               "var", "std", "logsumexp", "norm", "linalg_vector_norm"}
_SDPA = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math"}


def _dtype(v) -> str:
    from ..sandbox.reference_module import dtype_name
    return dtype_name(getattr(v, "dtype", "")) if v is not None else ""


def _shape(v) -> tuple:
    s = getattr(v, "shape", None)
    return tuple(int(d) for d in s) if s is not None else ()


def _norm_dims(dims, rank: int) -> list:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({(int(d) + rank) % rank if rank else 0 for d in dims}) if rank else []


class _Builder:
    def __init__(self):
        self.nodes: list[Node] = []
        self.users: dict[int, int] = {}  # FX-level user counts, by our index (for flattening)

    def add(self, op, args, shape, dtype, **attrs) -> Ref:
        self.nodes.append(Node(op, tuple(args), tuple(shape), dtype, attrs))
        return Ref(len(self.nodes) - 1)

    def node(self, r) -> Node | None:
        return self.nodes[int(r)] if isinstance(r, Ref) else None

    # n-ary commutative arithmetic with constant folding
    def nary(self, op: str, operands: list, shape, dtype, single_use) -> Any:
        flat, const = [], (1.0 if op == "mul" else 0.0)
        has_const = False
        for a in operands:
            n = self.node(a)
            if n is not None and n.op == op and single_use(a):
                for b in n.args:
                    if isinstance(b, Ref):
                        flat.append(b)
                    else:
                        const = const * b if op == "mul" else const + b
                        has_const = True
            elif isinstance(a, Ref):
                flat.append(a)
            else:
                const = const * a if op == "mul" else const + a
                has_const = True
        # x * x -> pow(x, 2)
        if op == "mul":
            seen: dict[int, int] = {}
            for r in flat:
                seen[int(r)] = seen.get(int(r), 0) + 1
            out = []
            for r in flat:
                k = seen.get(int(r), 0)
                if k == 0:
                    continue
                if k >= 2:
                    src = self.nodes[int(r)]
                    out.append(self.add("pow", (r, float(k)), src.shape, src.dtype))
                else:
                    out.append(r)
                seen[int(r)] = 0
            flat = out
        identity = 1.0 if op == "mul" else 0.0
        args = list(flat)
        if has_const and const != identity:
            args.append(float(const))
        if len(args) == 1 and isinstance(args[0], Ref):
            return args[0]
        return self.add(op, args, shape, dtype)


def canonicalise(gm, names: list) -> Graph:
    """The canonical Graph of an FX GraphModule traced by make_fx; `names`
    describes its placeholders in order ({"kind": "param", "name"} / {"kind":
    "input", "index"})."""
    b = _Builder()
    env: dict[Any, Any] = {}
    fx_users = {n: len(n.users) for n in gm.graph.nodes}
    origin: dict[int, Any] = {}  # our Ref -> fx node (to ask its user count)
    ph = 0
    outputs: list = []

    def single_use(r) -> bool:
        fxn = origin.get(int(r))
        return fxn is not None and fx_users.get(fxn, 0) <= 1

    def val(a):
        if isinstance(a, (list, tuple)):
            return type(a)(val(x) for x in a)
        if hasattr(a, "op") and hasattr(a, "target"):
            return env[a]
        return a

    for n in gm.graph.nodes:
        meta = n.meta.get("val")
        if n.op == "placeholder":
            info = names[ph] if ph < len(names) else {"kind": "input", "index": ph}
            ph += 1
            if info["kind"] == "param":
                r = b.add("param", (), _shape(meta), _dtype(meta), name=info["name"])
            else:
                r = b.add("input", (), _shape(meta), _dtype(meta), index=info["index"])
            env[n] = r
            origin[int(r)] = n
            continue
        if n.op == "output":
            outs = n.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            outputs = [val(o) for o in outs]
            continue
        if n.op != "call_function":
            env[n] = b.add(f"unsupported:{n.op}", (), _shape(meta), _dtype(meta))
            continue
        tgt = n.target
        name = getattr(tgt, "__name__", str(tgt))
        if name == "getitem":
            base, idx = val(n.args[0]), n.args[1]
            if isinstance(base, tuple):
                env[n] = base[idx]
            else:
                env[n] = b.add("getitem", (base, idx), _shape(meta), _dtype(meta))
            if isinstance(env[n], Ref):
                origin.setdefault(int(env[n]), n)
            continue
        opname = name.split(".")[0]
        args = [val(a) for a in n.args]
        kw = {k: val(v) for k, v in n.kwargs.items()}
        shape, dtype = _shape(meta), _dtype(meta)
        r = _rewrite(b, opname, args, kw, shape, dtype, meta, single_use)
        env[n] = r
        if isinstance(r, Ref) and int(r) not in origin:
            origin[int(r)] = n
        elif isinstance(r, Ref):
            # a no-op: the result is its operand; uses of n count as uses of it
            fx_users[origin[int(r)]] = fx_users.get(origin[int(r)], 0) + fx_users.get(n, 0) - 1
    return _prune(Graph(b.nodes, [o for o in outputs if isinstance(o, Ref)]))


def _rank(b: _Builder, r) -> int:
    n = b.node(r)
    return len(n.shape) if n is not None else 0


def _rewrite(b: _Builder, op: str, args: list, kw: dict, shape, dtype, meta, single_use):
    if op in _NOOPS:
        return args[0]
    if op in ("_to_copy", "to", "type_as", "_to_dtype"):
        src = b.node(args[0])
        if src is not None and src.dtype == dtype:
            return args[0]
        return b.add("cast", (args[0], dtype), shape, dtype)
    if op in _VIEWS:
        src = b.node(args[0])
        if src is not None and src.shape == tuple(shape):
            return args[0]
        return b.add("view", (args[0], tuple(shape)), shape, dtype)
    if op == "t":
        return b.add("permute", (args[0], (1, 0)), shape, dtype) if _rank(b, args[0]) == 2 else args[0]
    if op == "transpose":
        rank = _rank(b, args[0])
        perm = list(range(rank))
        d0, d1 = (int(args[1]) + rank) % rank, (int(args[2]) + rank) % rank
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return b.add("permute", (args[0], tuple(perm)), shape, dtype)
    if op == "permute":
        rank = _rank(b, args[0])
        perm = tuple((int(d) + rank) % rank for d in args[1])
        if perm == tuple(range(rank)):
            return args[0]
        return b.add("permute", (args[0], perm), shape, dtype)
    # arithmetic
    if op in ("add", "sub", "rsub"):
        x, y = args[0], args[1]
        alpha = kw.get("alpha", args[2] if len(args) > 2 else 1)
        if op == "rsub":
            x, y = y, x
        if alpha != 1:
            y = _scale(b, y, alpha, single_use)
        if op in ("sub", "rsub"):
            y = _scale(b, y, -1.0, single_use)
        return b.nary("add", [x, y], shape, dtype, single_use)
    if op == "neg":
        return b.nary("mul", [args[0], -1.0], shape, dtype, single_use)
    if op == "mul":
        return b.nary("mul", [args[0], args[1]], shape, dtype, single_use)
    if op == "div":
        x, y = args[0], args[1]
        if kw.get("rounding_mode") is not None:
            return b.add("div_" + str(kw["rounding_mode"]), (x, y), shape, dtype)
        if isinstance(y, Ref):
            yn = b.node(y)
            if yn.op == "sqrt":
                y = b.add("rsqrt", yn.args, yn.shape, yn.dtype)
            else:
                y = b.add("reciprocal", (y,), yn.shape, yn.dtype)
            return b.nary("mul", [x, y], shape, dtype, single_use)
        if not isinstance(x, Ref):
            return b.add("reciprocal", (y,), shape, dtype)
        return b.nary("mul", [x, 1.0 / float(y)], shape, dtype, single_use)
    if op == "reciprocal":
        xn = b.node(args[0])
        if xn is not None and xn.op == "sqrt":
            return b.add("rsqrt", xn.args, shape, dtype)
        return b.add("reciprocal", (args[0],), shape, dtype)
    if op == "pow" and isinstance(args[0], Ref) and not isinstance(args[1], Ref):
        e = float(args[1])
        if e == 1.0:
            return args[0]
        if e == 0.5:
            return b.add("sqrt", (args[0],), shape, dtype)
        if e == -0.5:
            return b.add("rsqrt", (args[0],), shape, dtype)
        if e == -1.0:
            return b.add("reciprocal", (args[0],), shape, dtype)
        return b.add("pow", (args[0], e), shape, dtype)
    if op == "square":
        return b.add("pow", (args[0], 2.0), shape, dtype)
    if op in ("addmm",):
        bias, x, w = args[0], args[1], args[2]
        beta, alpha = kw.get("beta", 1), kw.get("alpha", 1)
        mm = b.add("mm", (x, w), shape, dtype)
        if alpha != 1:
            mm = _scale(b, mm, alpha, single_use)
        if beta != 1:
            bias = _scale(b, bias, beta, single_use)
        return b.nary("add", [mm, bias], shape, dtype, lambda r: True if int(r) == int(mm) else single_use(r))
    if op == "linear":
        x, w = args[0], args[1]
        bias = args[2] if len(args) > 2 else kw.get("bias")
        wn = b.node(w)
        wt = b.add("permute", (w, (1, 0)), tuple(reversed(wn.shape)), wn.dtype)
        mm = b.add("mm" if _rank(b, x) == 2 else "matmul", (x, wt), shape, dtype)
        if bias is None:
            return mm
        return b.nary("add", [mm, bias], shape, dtype, lambda r: True if int(r) == int(mm) else single_use(r))
    if op in ("mm", "bmm", "matmul", "mv", "dot"):
        return b.add(op, tuple(args[:2]), shape, dtype)
    # reductions
    if op in _REDUCTIONS:
        x = args[0]
        rank = _rank(b, x)
        if op in ("argmax", "argmin"):
            dim = args[1] if len(args) > 1 else kw.get("dim")
            keep = args[2] if len(args) > 2 else kw.get("keepdim", False)
            return b.add(op, (x, tuple(_norm_dims(dim, rank)), bool(keep)), shape, dtype)
        dims = args[1] if len(args) > 1 else kw.get("dim")
        keep = args[2] if len(args) > 2 else kw.get("keepdim", False)
        if op in ("var", "std"):
            corr = kw.get("correction", 1)
            return b.add(op, (x, tuple(_norm_dims(dims, rank)), bool(keep), corr), shape, dtype)
        if op in ("norm", "linalg_vector_norm"):
            p = args[1] if len(args) > 1 else kw.get("ord", 2)
            dims = args[2] if len(args) > 2 else kw.get("dim")
            keep = args[3] if len(args) > 3 else kw.get("keepdim", False)
            return b.add("norm", (x, float(p), tuple(_norm_dims(dims, rank)), bool(keep)), shape, dtype)
        return b.add(op, (x, tuple(_norm_dims(dims, rank)), bool(keep)), shape, dtype)
    if op in ("max", "min") and len(args) >= 2 and not isinstance(args[1], Ref):
        x = args[0]
        rank = _rank(b, x)
        keep = bool(args[2]) if len(args) > 2 else bool(kw.get("keepdim", False))
        dims = tuple(_norm_dims(args[1], rank))
        vals = b.add("amax" if op == "max" else "amin", (x, dims, keep), _shape(meta[0]), _dtype(meta[0]))
        idx = b.add("argmax" if op == "max" else "argmin", (x, dims, keep), _shape(meta[1]), _dtype(meta[1]))
        return (vals, idx)
    if op in ("max", "min") and len(args) == 1:
        x = args[0]
        return b.add("amax" if op == "max" else "amin", (x, tuple(range(_rank(b, x))), False), shape, dtype)
    if op in ("_softmax", "softmax", "_log_softmax", "log_softmax"):
        x = args[0]
        rank = _rank(b, x)
        dim = (int(args[1]) + rank) % rank
        return b.add("log_softmax" if "log" in op else "softmax", (x, dim), shape, dtype)
    if op in ("cumsum", "cumprod"):
        x = args[0]
        rank = _rank(b, x)
        return b.add(op, (x, (int(args[1]) + rank) % rank), shape, dtype)
    if op == "native_layer_norm":
        x, normalized, w, bias, eps = args[0], args[1], args[2], args[3], args[4]
        ln = b.add("layer_norm", (x, tuple(normalized), w, bias, float(eps)), shape or _shape(meta[0]),
                   dtype or _dtype(meta[0]))
        return (ln, None, None)
    if op in ("layer_norm",):
        x, normalized = args[0], args[1]
        w = args[2] if len(args) > 2 else kw.get("weight")
        bias = args[3] if len(args) > 3 else kw.get("bias")
        eps = args[4] if len(args) > 4 else kw.get("eps", 1e-5)
        return b.add("layer_norm", (x, tuple(normalized), w, bias, float(eps)), shape, dtype)
    if op in _SDPA:
        q, k, v = args[0], args[1], args[2]
        names = {"_scaled_dot_product_flash_attention_for_cpu": ["q", "k", "v", "dropout_p", "is_causal"],
                 "_scaled_dot_product_flash_attention": ["q", "k", "v", "dropout_p", "is_causal"],
                 "scaled_dot_product_attention": ["q", "k", "v", "attn_mask", "dropout_p", "is_causal"],
                 "_scaled_dot_product_efficient_attention": ["q", "k", "v", "attn_bias", "compute_log_sumexp",
                                                             "dropout_p", "is_causal"]}.get(op, [])
        named = dict(zip(names, args))
        named.update(kw)
        mask = named.get("attn_mask", named.get("attn_bias"))
        causal = bool(named.get("is_causal", False))
        scale = named.get("scale")
        qn = b.node(q)
        out_shape = qn.shape[:-1] + (b.node(v).shape[-1],) if qn is not None else shape
        r = b.add("sdpa", (q, k, v, causal, None if scale is None else float(scale), mask), out_shape,
                  qn.dtype if qn is not None else dtype)
        return (r, None, None, None, None, None, None, None, None) if isinstance(meta, (list, tuple)) else r
    if op == "gelu":
        return b.add("gelu", (args[0], kw.get("approximate", args[1] if len(args) > 1 else "none")), shape, dtype)
    if op in ("leaky_relu",):
        return b.add(op, (args[0], float(args[1]) if len(args) > 1 else float(kw.get("negative_slope", 0.01))),
                     shape, dtype)
    if op in ("elu",):
        alpha = float(args[1]) if len(args) > 1 else float(kw.get("alpha", 1.0))
        scale = float(args[2]) if len(args) > 2 else float(kw.get("scale", 1.0))
        iscale = float(args[3]) if len(args) > 3 else float(kw.get("input_scale", 1.0))
        return b.add("elu", (args[0], alpha, scale, iscale), shape, dtype)
    if op in ("hardtanh", "clamp", "clip"):
        lo = args[1] if len(args) > 1 else kw.get("min", -1.0 if op == "hardtanh" else None)
        hi = args[2] if len(args) > 2 else kw.get("max", 1.0 if op == "hardtanh" else None)
        return b.add("clamp", (args[0], None if lo is None else float(lo), None if hi is None else float(hi)),
                     shape, dtype)
    if op in ("softplus",):
        beta = float(args[1]) if len(args) > 1 else float(kw.get("beta", 1.0))
        thr = float(args[2]) if len(args) > 2 else float(kw.get("threshold", 20.0))
        return b.add("softplus", (args[0], beta, thr), shape, dtype)
    if op in ("max_pool2d_with_indices", "max_pool2d", "avg_pool2d"):
        x = args[0]
        pair = lambda v, d: tuple(v) * (2 if len(tuple(v)) == 1 else 1) if v else d  # noqa: E731
        k = pair(args[1], None)
        s = pair(args[2] if len(args) > 2 else kw.get("stride"), k)
        p = pair(args[3] if len(args) > 3 else kw.get("padding"), (0, 0))
        if op == "avg_pool2d":
            ceil = bool(args[4]) if len(args) > 4 else bool(kw.get("ceil_mode", False))
            cip = bool(args[5]) if len(args) > 5 else bool(kw.get("count_include_pad", True))
            div = args[6] if len(args) > 6 else kw.get("divisor_override")
            return b.add("avg_pool2d", (x, k, s, p, ceil, cip, div), shape, dtype)
        d = pair(args[4] if len(args) > 4 else kw.get("dilation"), (1, 1))
        ceil = bool(args[5]) if len(args) > 5 else bool(kw.get("ceil_mode", False))
        out = _shape(meta[0]) if isinstance(meta, (list, tuple)) else shape
        r = b.add("max_pool2d", (x, k, s, p, d, ceil), out, _dtype(meta[0]) if isinstance(meta, (list, tuple)) else dtype)
        return (r, None) if isinstance(meta, (list, tuple)) else r
    if op == "convolution":
        x, w, bias, stride, padding, dilation, transposed, out_pad, groups = args[:9]
        return b.add("conv", (x, w, bias, tuple(stride), tuple(padding), tuple(dilation), bool(transposed),
                              tuple(out_pad), int(groups)), shape, dtype)
    if op in ("where",):
        return b.add("where", tuple(args[:3]), shape, dtype)
    return b.add(op, tuple(args) + tuple(sorted(kw.items())), shape, dtype)


def _scale(b: _Builder, r, k, single_use):
    if not isinstance(r, Ref):
        return r * k
    n = b.node(r)
    return b.nary("mul", [r, float(k)], n.shape, n.dtype, single_use)


def _prune(g: Graph) -> Graph:
    """Drops nodes no output depends on; renumbers."""
    live: set[int] = set()
    stack = [int(o) for o in g.outputs]
    while stack:
        i = stack.pop()
        if i in live:
            continue
        live.add(i)
        for a in g.nodes[i].args:
            if isinstance(a, Ref):
                stack.append(int(a))
    # keep every placeholder (an unused input is part of the interface)
    for i, n in enumerate(g.nodes):
        if n.op in ("input", "param"):
            live.add(i)
    order = sorted(live)
    remap = {old: Ref(new) for new, old in enumerate(order)}
    nodes = []
    for old in order:
        n = g.nodes[old]
        args = tuple(remap[int(a)] if isinstance(a, Ref) else a for a in n.args)
        nodes.append(Node(n.op, args, n.shape, n.dtype, n.attrs))
    return Graph(nodes, [remap[int(o)] for o in g.outputs])
