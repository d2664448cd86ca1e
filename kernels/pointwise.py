"""A pointwise family generated from an expression: any chain of elementwise
operations over up to 8 inputs, with broadcasts, fused into one kernel.

    pointwise: out[r, c] = EXPR(x0, x1, ...)   over a [rows, cols] output

`params.expr` is the expression as an S-expression over the inputs `x0` ..
`x7` and float constants, e.g. ``(mul (silu x0) x1)`` (a SwiGLU gate) or
``(add (mul (gelu_tanh x0) 0.5) x1)``; `params.inputs` says, comma-separated,
how each input broadcasts: ``full`` ([rows, cols]), ``row`` (a [cols] vector
shared by every row: a bias) or ``col`` (a [rows] vector shared by every
column: a per-row scale). The structural matcher writes both from a traced
reference (worker/kiln_worker/structural/generic.py).

Operations (each on fp32 values): add, mul (n-ary), relu, sigmoid, tanh, gelu
(erf), gelu_tanh, silu, exp, log, abs, sqrt, rsqrt, reciprocal, sin, cos,
pow (constant exponent), leaky_relu (slope), elu (alpha, scale, input_scale:
SELU is elu with SELU's constants), clamp (lo, hi; `none` for open),
softplus (beta, threshold), hardsigmoid, hardswish, maximum, minimum.

The kernel is generated from the expression (`kernel_source`): one program
per BLOCK output elements, each input loaded once at the index its broadcast
gives, the expression computed in registers, one store. Its source is written
to a per-user cache directory named by its hash and imported from there, so
Triton sees an ordinary module (and the interpreter can run it). The
template's `reference` evaluates the same expression with torch operations.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
import sys
import tempfile
import threading

import torch
import triton

from . import common

OPERATORS = ("pointwise",)
MODES = ("full", "row", "col")
_lock = threading.Lock()
_kernels: dict = {}


# -- the expression -----------------------------------------------------------

def _load_grammar() -> dict:
    import json
    from pathlib import Path
    with open(Path(__file__).with_name("pointwise_grammar.json"), encoding="utf-8") as f:
        return json.load(f)


# The grammar both sides check (kernels/pointwise_grammar.json; the engine
# refuses an expr outside it at `kiln submit`, src/knowledge/expr_grammar.cpp).
GRAMMAR = _load_grammar()
MAX_INPUTS = int(GRAMMAR["max_inputs"])
_ARITY = {op: (int(lo), int(hi)) for op, (lo, hi) in GRAMMAR["operations"].items()}
_INPUT = re.compile(GRAMMAR["input"], re.ASCII)
_NUMBER = re.compile(GRAMMAR["number"], re.ASCII)
_WS = GRAMMAR["whitespace"]


def _tokens(text: str) -> list:
    out, cur = [], []
    for ch in text:
        if ch in "()" or ch in _WS:
            if cur:
                out.append("".join(cur))
                cur = []
            if ch in "()":
                out.append(ch)
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def parse(text: str):
    """The S-expression as nested tuples: ("op", args...), ("x", i), floats, None.
    Raises ValueError for anything outside kernels/pointwise_grammar.json."""
    if len(text) > int(GRAMMAR["max_length"]):
        raise ValueError(f"pointwise: expr longer than {GRAMMAR['max_length']} characters")
    tokens = _tokens(text)
    pos = 0

    def atom(tok):
        if len(tok) > int(GRAMMAR["max_token"]):
            raise ValueError(f"pointwise: unknown atom {tok[:40]!r} in expr")
        if _INPUT.fullmatch(tok):
            i = int(tok[1:])
            if i >= MAX_INPUTS:
                raise ValueError(f"pointwise: input {tok} out of range (at most {MAX_INPUTS})")
            return ("x", i)
        if tok == "none":
            return None
        if _NUMBER.fullmatch(tok):
            return float(tok)
        raise ValueError(f"pointwise: unknown atom {tok[:40]!r} in expr")

    def read(depth):
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("pointwise: expr ends early")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            if depth >= int(GRAMMAR["max_depth"]):
                raise ValueError(f"pointwise: expr nested deeper than {GRAMMAR['max_depth']}")
            if pos >= len(tokens):
                raise ValueError("pointwise: expr ends early")
            op = tokens[pos]
            pos += 1
            if op not in _ARITY:
                raise ValueError(f"pointwise: unknown operation {op[:40]!r}")
            args = []
            while pos < len(tokens) and tokens[pos] != ")":
                args.append(read(depth + 1))
            if pos >= len(tokens):
                raise ValueError("pointwise: missing ')'")
            pos += 1
            lo, hi = _ARITY[op]
            if not lo <= len(args) <= hi:
                raise ValueError(f"pointwise: {op} takes {lo}..{hi} operands, got {len(args)}")
            return (op,) + tuple(args)
        if tok == ")":
            raise ValueError("pointwise: unexpected ')'")
        return atom(tok)

    tree = read(0)
    if pos != len(tokens):
        raise ValueError("pointwise: trailing text after the expression")
    return tree


def inputs_used(tree) -> set:
    if isinstance(tree, tuple) and tree and tree[0] == "x":
        return {tree[1]}
    if isinstance(tree, tuple):
        out = set()
        for a in tree[1:]:
            out |= inputs_used(a)
        return out
    return set()


def _modes(params) -> list:
    text = str((params or {}).get("inputs", "full"))
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes or len(modes) > MAX_INPUTS or any(m not in MODES for m in modes):
        raise ValueError(f"pointwise: inputs must be 1..{MAX_INPUTS} of {', '.join(MODES)}, got {text!r}")
    return modes


def _tree(params):
    tree = parse(str((params or {}).get("expr", "")))
    n = len(_modes(params))
    bad = [i for i in inputs_used(tree) if i >= n]
    if bad:
        raise ValueError(f"pointwise: expr uses x{bad[0]} but inputs lists {n}")
    return tree


# -- triton code ----------------------------------------------------------------

def _c(v: float) -> str:
    if math.isinf(v):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(float(v))


def _code(t) -> str:
    if isinstance(t, float):
        return _c(t)
    if t[0] == "x":
        return f"v{t[1]}"
    op, a = t[0], [_code(x) if x is not None else None for x in t[1:]]
    if op == "add":
        return "(" + " + ".join(a) + ")"
    if op == "mul":
        return "(" + " * ".join(a) + ")"
    x = a[0]
    simple = {"relu": f"tl.maximum({x}, 0.0)", "sigmoid": f"(1.0 / (1.0 + tl.exp(-({x}))))",
              "tanh": f"(2.0 / (1.0 + tl.exp(-2.0 * ({x}))) - 1.0)",
              "gelu": f"(0.5 * ({x}) * (1.0 + tl.erf(({x}) * 0.7071067811865476)))",
              "gelu_tanh": f"(({x}) / (1.0 + tl.exp(-1.5957691216057308 * (({x}) + 0.044715 * ({x}) * ({x}) * ({x})))))",
              "silu": f"(({x}) / (1.0 + tl.exp(-({x}))))", "exp": f"tl.exp({x})", "log": f"tl.log({x})",
              "abs": f"tl.abs({x})", "sqrt": f"tl.sqrt({x})", "rsqrt": f"tl.rsqrt({x})",
              "reciprocal": f"(1.0 / ({x}))", "sin": f"tl.sin({x})", "cos": f"tl.cos({x})",
              "hardsigmoid": f"tl.minimum(tl.maximum(({x}) / 6.0 + 0.5, 0.0), 1.0)",
              "hardswish": f"(({x}) * tl.minimum(tl.maximum(({x}) / 6.0 + 0.5, 0.0), 1.0))"}
    if op in simple:
        return simple[op]
    if op == "pow":
        e = t[2]
        if e == 2.0:
            return f"(({x}) * ({x}))"
        if e == 3.0:
            return f"(({x}) * ({x}) * ({x}))"
        return f"tl.exp({_c(e)} * tl.log({x}))"
    if op == "leaky_relu":
        return f"tl.where(({x}) >= 0.0, {x}, ({x}) * {a[1]})"
    if op == "elu":
        alpha, scale, iscale = a[1], a[2], a[3]
        return f"({scale} * tl.where(({x}) > 0.0, {x}, {alpha} * (tl.exp(({x}) * {iscale}) - 1.0)))"
    if op == "clamp":
        y = x
        if a[1] is not None:
            y = f"tl.maximum({y}, {a[1]})"
        if a[2] is not None:
            y = f"tl.minimum({y}, {a[2]})"
        return y
    if op == "softplus":
        beta, thr = a[1], a[2]
        return (f"tl.where(({x}) * {beta} > {thr}, {x}, "
                f"tl.log(1.0 + tl.exp(tl.minimum(({x}) * {beta}, {thr}))) / {beta})")
    if op == "maximum":
        return f"tl.maximum({a[0]}, {a[1]})"
    if op == "minimum":
        return f"tl.minimum({a[0]}, {a[1]})"
    raise ValueError(f"pointwise: no code for {op}")


def kernel_source(params) -> str:
    tree, modes = _tree(params), _modes(params)
    ptrs = ", ".join(f"x{i}_ptr" for i in range(len(modes)))
    lines = ["import triton", "import triton.language as tl", "", "",
             "@triton.jit",
             f"def pointwise_kernel({ptrs}, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):",
             "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
             "    row = offs // n_cols",
             "    col = offs - row * n_cols",
             "    mask = row < n_rows"]
    for i, m in enumerate(modes):
        idx = {"full": "offs", "row": "col", "col": "row"}[m]
        lines.append(f"    v{i} = tl.load(x{i}_ptr + {idx}, mask=mask, other=0.0).to(tl.float32)")
    lines.append(f"    y = {_code(tree)}")
    lines.append("    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)")
    return "\n".join(lines) + "\n"


def _cache_dir() -> str:
    d = os.environ.get("KILN_POINTWISE_DIR") or os.path.join(tempfile.gettempdir(), f"kiln-pointwise-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    return d


def kernel(params):
    """The generated @triton.jit kernel for these params (imported once per process)."""
    src = kernel_source(params)
    key = hashlib.sha256(src.encode()).hexdigest()[:24]
    with _lock:
        if key in _kernels:
            return _kernels[key]
        path = os.path.join(_cache_dir(), f"pw_{key}.py")
        if not os.path.isfile(path) or open(path).read() != src:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(src)
            os.replace(tmp, path)
        name = f"kiln_pointwise_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _kernels[key] = mod.pointwise_kernel
        return mod.pointwise_kernel


# -- torch reference ------------------------------------------------------------

def _eval(t, xs):
    F = torch.nn.functional
    if isinstance(t, float):
        return t
    if t[0] == "x":
        return xs[t[1]]
    op = t[0]
    a = [_eval(x, xs) if x is not None else None for x in t[1:]]
    x = a[0]
    if op == "add":
        out = a[0]
        for v in a[1:]:
            out = out + v
        return out
    if op == "mul":
        out = a[0]
        for v in a[1:]:
            out = out * v
        return out
    table = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
             "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu, "exp": torch.exp,
             "log": torch.log, "abs": torch.abs, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
             "reciprocal": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "hardsigmoid": F.hardsigmoid,
             "hardswish": F.hardswish}
    if op in table:
        return table[op](x)
    if op == "pow":
        return torch.pow(x, a[1])
    if op == "leaky_relu":
        return F.leaky_relu(x, a[1])
    if op == "elu":
        return a[2] * torch.where(x * a[3] > 0, x, a[1] * torch.expm1(x * a[3]))
    if op == "clamp":
        return torch.clamp(x, a[1], a[2])
    if op == "softplus":
        return F.softplus(x, a[1], a[2])
    if op == "maximum":
        return torch.maximum(torch.as_tensor(a[0]), torch.as_tensor(a[1]))
    if op == "minimum":
        return torch.minimum(torch.as_tensor(a[0]), torch.as_tensor(a[1]))
    raise ValueError(f"pointwise: unknown operation {op}")


# -- template interface ---------------------------------------------------------

def _check(op):
    if op not in OPERATORS:
        raise ValueError(f"pointwise: unknown operator {op!r}")


def _input_shape(mode, rows, cols):
    return {"full": [rows, cols], "row": [cols], "col": [rows]}[mode]


def make_inputs(op, shape, dtype, params, seed, device):
    """Normal inputs; an expression with log, sqrt, rsqrt, reciprocal or a
    fractional pow gets inputs in [0.5, 2.5) instead (positive, away from 0)."""
    _check(op)
    rows, cols = shape
    text = str((params or {}).get("expr", ""))
    positive = any(k in text for k in ("(log", "(sqrt", "(rsqrt", "(reciprocal", "(pow"))
    g = common.generator(seed, device)
    out = {}
    for i, m in enumerate(_modes(params)):
        t = common.randn(_input_shape(m, rows, cols), dtype, seed, device, generator=g)
        if positive:
            t = (t.float().abs().remainder(2.0) + 0.5).to(t.dtype)
        out[f"x{i}"] = t
    return out


def reference(op, inputs, params):
    _check(op)
    tree, modes = _tree(params), _modes(params)
    xs = []
    for i, m in enumerate(modes):
        t = inputs[f"x{i}"]
        xs.append(t[None, :] if m == "row" else t[:, None] if m == "col" else t)
    rows_cols = [t for t, m in zip(xs, modes) if m == "full"]
    out = _eval(tree, xs)
    if not isinstance(out, torch.Tensor):
        out = torch.full_like(xs[0], float(out))
    if rows_cols and out.shape != rows_cols[0].shape:
        out = out.expand_as(rows_cols[0])
    return out


def output_like(op, inputs, params):
    _check(op)
    modes = _modes(params)
    xs = [inputs[f"x{i}"] for i in range(len(modes))]
    rows = next((t.shape[0] for t, m in zip(xs, modes) if m in ("full", "col")), 1)
    cols = next((t.shape[-1] for t, m in zip(xs, modes) if m in ("full", "row")), 1)
    return torch.empty((rows, cols), dtype=xs[0].dtype, device=xs[0].device)


def config_space(op, shape, dtype, params, target):
    """BLOCK 256..4096 output elements per program, 2..8 warps with at least
    one element and at most 16 per thread; the AMD knobs on hip targets."""
    _check(op)
    _tree(params)
    ws = common.warp_size(target)
    n = common.numel(shape)
    cap = max(256, triton.next_power_of_2(n))
    base = []
    for block in (1024, 512, 2048, 256, 4096):
        if block > cap:
            continue
        for w in (4, 8, 2):
            if w * ws <= block <= w * ws * 16:
                base.append({"BLOCK": block, "num_warps": w, "num_stages": 1})
    return common.expand(common.dedupe(base), common.amd_knobs(target))


def _grid(shape, config):
    return (common.cdiv(common.numel(shape), config["BLOCK"]), 1, 1)


def launch(op, inputs, out, config, params):
    _check(op)
    modes = _modes(params)
    rows, cols = out.shape
    opts, consts = common.runtime_options(config, common.device_backend(out))
    kernel(params)[_grid(out.shape, config)](*[inputs[f"x{i}"] for i in range(len(modes))], out, rows, cols,
                                             **consts, **opts)
    return out


def compile_spec(op, shape, dtype, params, config, target):
    _check(op)
    rows, cols = shape
    modes = _modes(params)
    opts, consts = common.runtime_options(config, common.backend(target))
    ptr = common.pointer_type(dtype)
    e = common.element_bytes(dtype)
    args = [(f"x{i}_ptr", ptr, common.numel(_input_shape(m, rows, cols)) * e) for i, m in enumerate(modes)]
    args += [("out_ptr", ptr, rows * cols * e), ("n_rows", "i32", rows), ("n_cols", "i32", cols)]
    return common.spec(kernel(params), args, consts, opts, _grid(shape, config), target)


def traffic(op, shape, dtype, params):
    _check(op)
    rows, cols = shape
    e = common.element_bytes(dtype)
    reads = sum(common.numel(_input_shape(m, rows, cols)) for m in _modes(params))
    ops = str((params or {}).get("expr", "")).count("(")
    return {"bytes": (reads + rows * cols) * e, "flops": rows * cols * max(1, ops)}
