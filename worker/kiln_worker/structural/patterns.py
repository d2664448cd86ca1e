"""Graph patterns over the canonical graph (canonical.py) and their matcher.

A pattern is a tree of :func:`P` nodes (an operation and its operands), :class:`V`
(a tensor operand captured under a name; the same name must be the same node) and
:class:`C` (a constant captured under a name); any other value is a constant the
graph must hold (floats compared with a relative tolerance of 1e-6). ``add`` and
``mul`` are n-ary and commutative in the canonical graph, so their operands match
in any order (the count must be equal).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator

from .canonical import Graph, Ref

COMMUTATIVE = {"add", "mul"}


@dataclass(frozen=True)
class V:
    name: str


@dataclass(frozen=True)
class C:
    name: str


@dataclass(frozen=True)
class P:
    op: str
    args: tuple

    def __init__(self, op: str, *args):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", tuple(args))


def _const_eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(a)), abs(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_const_eq(x, y) for x, y in zip(a, b))
    return a == b


def match(g: Graph, pat: Any, val: Any, env: dict, covered: frozenset) -> Iterator[tuple[dict, frozenset]]:
    """Every (env, covered nodes) under which `pat` matches `val` (a Ref or a constant)."""
    if isinstance(pat, V):
        if not isinstance(val, Ref):
            return
        if pat.name in env:
            if isinstance(env[pat.name], Ref) and int(env[pat.name]) == int(val):
                yield env, covered
            return
        yield {**env, pat.name: val}, covered
        return
    if isinstance(pat, C):
        if isinstance(val, Ref):
            return
        if pat.name in env:
            if _const_eq(env[pat.name], val):
                yield env, covered
            return
        yield {**env, pat.name: val}, covered
        return
    if isinstance(pat, P):
        if not isinstance(val, Ref):
            return
        node = g.nodes[int(val)]
        if node.op != pat.op or len(node.args) != len(pat.args):
            return
        cov = covered | {int(val)}
        if pat.op in COMMUTATIVE:
            for perm in itertools.permutations(node.args):
                yield from _match_seq(g, pat.args, perm, env, cov)
            return
        yield from _match_seq(g, pat.args, node.args, env, cov)
        return
    # a literal constant
    if isinstance(val, Ref):
        return
    if _const_eq(pat, val):
        yield env, covered


def _match_seq(g, pats, vals, env, covered):
    if not pats:
        yield env, covered
        return
    for e, c in match(g, pats[0], vals[0], env, covered):
        yield from _match_seq(g, pats[1:], vals[1:], e, c)
