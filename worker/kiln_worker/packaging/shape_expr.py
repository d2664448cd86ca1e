"""Integer expressions over a job's shape, in the grammar of docs/package-format.md.

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "//" | "%") factor)*
    factor := INT | "s" INT | NAME "(" expr "," expr ")" | "(" expr ")"
    NAME   := "cdiv" | "min" | "max"

64-bit signed integers; `//` and `%` floor as in Python; cdiv(a, b) = (a + b - 1) // b.

`Expr` builds them (`dim(0) * dim(1)`, `cdiv(dim(0), 4)`), folds constants and
renders the text a package carries (`str(e)`); `evaluate(text, shape)` parses
such a text strictly -- anything outside the grammar is an error, as in a
loader -- and evaluates it for a shape. No unary minus exists in the grammar, so
an Expr never renders a negative constant (x + -3 becomes x - 3).
"""
from __future__ import annotations

import re

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Precedence of a rendered node: sums, products, atoms.
_SUM, _PRODUCT, _ATOM = 1, 2, 3


class ExprError(ValueError):
    """A text outside the grammar, or an evaluation that leaves 64 bits or divides by 0."""


class Expr:
    """An immutable expression node: ("int", v), ("dim", i), (op, a, b) for
    op in + - * // % cdiv min max."""

    __slots__ = ("node",)

    def __init__(self, node: tuple):
        self.node = node

    # -- construction ----------------------------------------------------------
    @staticmethod
    def of(x) -> "Expr":
        if isinstance(x, Expr):
            return x
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"not an integer expression: {x!r}")
        return Expr(("int", int(x)))

    @property
    def const(self) -> int | None:
        return self.node[1] if self.node[0] == "int" else None

    def _bin(self, op: str, other) -> "Expr":
        a, b = self, Expr.of(other)
        ca, cb = a.const, b.const
        if ca is not None and cb is not None:
            return Expr(("int", _apply(op, ca, cb)))
        if op == "+":
            if cb == 0:
                return a
            if ca == 0:
                return b
            if cb is not None and cb < 0:
                return a._bin("-", -cb)
        if op == "-":
            if cb == 0:
                return a
            if cb is not None and cb < 0:
                return a._bin("+", -cb)
        if op == "*":
            if cb == 1:
                return a
            if ca == 1:
                return b
            if ca == 0 or cb == 0:
                return Expr(("int", 0))
        if op in ("//", "cdiv") and cb == 1:
            return a
        if op == "%" and cb == 1:
            return Expr(("int", 0))
        return Expr((op, a, b))

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return Expr.of(o)._bin("+", self)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return Expr.of(o)._bin("-", self)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return Expr.of(o)._bin("*", self)
    def __floordiv__(self, o): return self._bin("//", o)
    def __rfloordiv__(self, o): return Expr.of(o)._bin("//", self)
    def __mod__(self, o): return self._bin("%", o)
    def __rmod__(self, o): return Expr.of(o)._bin("%", self)

    def __eq__(self, other):
        return isinstance(other, Expr) and self.node == other.node

    def __hash__(self):
        return hash(self.node)

    # -- use -------------------------------------------------------------------
    def eval(self, shape) -> int:
        return _eval_node(self.node, [int(s) for s in shape])

    def __str__(self) -> str:
        return _render(self.node)[0]

    def __repr__(self) -> str:
        return f"Expr({str(self)!r})"


def dim(i: int) -> Expr:
    """The shape's i-th dimension, `s<i>`."""
    return Expr(("dim", int(i)))


def dims(rank: int) -> list[Expr]:
    return [dim(i) for i in range(rank)]


def cdiv(a, b) -> Expr:
    return Expr.of(a)._bin("cdiv", b)


def emin(a, b) -> Expr:
    return Expr.of(a)._bin("min", b)


def emax(a, b) -> Expr:
    return Expr.of(a)._bin("max", b)


def product(xs) -> Expr:
    out = Expr.of(1)
    for x in xs:
        out = out * x
    return out


def _check64(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise ExprError(f"value {v} does not fit 64-bit signed integers")
    return v


def _apply(op: str, a: int, b: int) -> int:
    if op in ("//", "%", "cdiv") and b == 0:
        raise ExprError(f"division by zero in {op}")
    if op == "+":
        v = a + b
    elif op == "-":
        v = a - b
    elif op == "*":
        v = a * b
    elif op == "//":
        v = a // b
    elif op == "%":
        v = a % b
    elif op == "cdiv":
        v = _check64(_check64(a + b) - 1) // b
    elif op == "min":
        v = min(a, b)
    elif op == "max":
        v = max(a, b)
    else:  # pragma: no cover
        raise ExprError(f"unknown operation {op!r}")
    return _check64(v)


def _eval_node(node: tuple, shape: list[int]) -> int:
    kind = node[0]
    if kind == "int":
        return _check64(node[1])
    if kind == "dim":
        if node[1] >= len(shape):
            raise ExprError(f"s{node[1]} is past the shape's {len(shape)} dimensions")
        return _check64(shape[node[1]])
    return _apply(kind, _eval_node(node[1].node, shape), _eval_node(node[2].node, shape))


_LEVEL = {"+": _SUM, "-": _SUM, "*": _PRODUCT, "//": _PRODUCT, "%": _PRODUCT}


def _render(node: tuple) -> tuple[str, int]:
    kind = node[0]
    if kind == "int":
        v = node[1]
        return (str(v), _ATOM) if v >= 0 else (f"(0 - {-v})", _ATOM)
    if kind == "dim":
        return f"s{node[1]}", _ATOM
    a, pa = _render(node[1].node)
    b, pb = _render(node[2].node)
    if kind in ("cdiv", "min", "max"):
        return f"{kind}({a}, {b})", _ATOM
    level = _LEVEL[kind]
    if pa < level:
        a = f"({a})"
    if pb <= level:  # left-associative: the right operand of the same level needs brackets
        b = f"({b})"
    return f"{a} {kind} {b}", level


# ---------------------------------------------------------------------------
# parsing a package's text (strict)
# ---------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(//|[-+*%(),]))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ExprError(f"unexpected text at {pos} in {text!r}")
        if m.group(1) is not None:
            if m.end() < len(text) and (text[m.end()].isalpha() or text[m.end()] == "_"):
                raise ExprError(f"unexpected name after {m.group(1)!r} in {text!r}")
            out.append(("int", m.group(1)))
        elif m.group(2) is not None:
            word = m.group(2)
            if re.fullmatch(r"s\d+", word):
                out.append(("dim", word[1:]))
            elif word in ("cdiv", "min", "max"):
                out.append(("name", word))
            else:
                raise ExprError(f"unknown name {word!r} in {text!r}")
        else:
            out.append(("op", m.group(3)))
        pos = m.end()
    return out


def parse(text: str) -> Expr:
    """The Expr of a text in the grammar; ExprError otherwise."""
    if not isinstance(text, str):
        raise ExprError(f"an expression must be a string, not {text!r}")
    toks = _tokens(text)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else (None, None)

    def take(kind=None, value=None):
        nonlocal pos
        k, v = peek()
        if k is None or (kind and k != kind) or (value and v != value):
            raise ExprError(f"expected {value or kind} at token {pos} of {text!r}")
        pos += 1
        return v

    def expr():
        e = term()
        while peek() in (("op", "+"), ("op", "-")):
            op = take()
            e = Expr((op, e, term()))
        return e

    def term():
        e = factor()
        while peek() in (("op", "*"), ("op", "//"), ("op", "%")):
            op = take()
            e = Expr((op, e, factor()))
        return e

    def factor():
        k, v = peek()
        if k == "int":
            take()
            return Expr(("int", _check64(int(v))))
        if k == "dim":
            take()
            return dim(int(v))
        if k == "name":
            take()
            take("op", "(")
            a = expr()
            take("op", ",")
            b = expr()
            take("op", ")")
            return Expr((v, a, b))
        if (k, v) == ("op", "("):
            take()
            e = expr()
            take("op", ")")
            return e
        raise ExprError(f"expected a number, s<i>, cdiv/min/max or '(' at token {pos} of {text!r}")

    e = expr()
    if pos != len(toks):
        raise ExprError(f"unexpected {toks[pos][1]!r} at token {pos} of {text!r}")
    return e


def evaluate(text: str, shape) -> int:
    """The value of an expression text for a shape (a loader's evaluation)."""
    return parse(text).eval(shape)
