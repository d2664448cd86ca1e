"""Families matched by a procedure rather than one pattern: the pointwise
family (any chain of elementwise operations and broadcasts over the inputs),
reductions and arg-reductions over any dim, cumulative sums."""
from __future__ import annotations

from .canonical import Graph


def match_generic(g: Graph) -> list[dict]:
    return []
