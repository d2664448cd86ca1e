"""Matching a traced reference against the template families: the best
binding and its similarity, or why none serves.

Similarity on graphs: 1.0 when a family's pattern matches the whole graph (its
root is the module's one output, every computation is the pattern's, every
captured operand is an input or a parameter) and its ``bind`` accepts the
instance; the score a ``bind`` refusal states (0.5..0.7: the computation is
the family's, this instance is not) ; ``0.7 x`` the share of the graph's
operations a pattern covers when it matches only part of it. A job is served
when the score reaches the threshold (``llm.retrieval_threshold``, 0.8) and the
operator takes the job's dtype.
"""
from __future__ import annotations

from .canonical import Graph
from .families import PATTERNS, Refuse
from .patterns import match
from . import generic

PARTIAL = 0.7


def _describe(g: Graph) -> str:
    ops = [g.nodes[i].op for i in g.compute_nodes()]
    seen: list[str] = []
    for o in ops:
        if o not in seen:
            seen.append(o)
    return ", ".join(seen[:8]) + (" ..." if len(seen) > 8 else "")


def match_graph(g: Graph, operators: dict, dtype: str, threshold: float = 0.8) -> dict:
    """{"served", "score", "op", "module", "shape", "params", "inputs", "pattern",
    "reason", "alternatives"} for graph g and a job dtype."""
    compute = g.compute_nodes()
    found: list[dict] = []
    if len(g.outputs) != 1:
        return {"served": False, "score": 0.0, "reason": f"the module returns {len(g.outputs)} tensors "
                "(the templates write one output)", "alternatives": []}
    if not compute:
        return {"served": False, "score": 0.0, "reason": "the module computes nothing (it returns an input)",
                "alternatives": []}
    out = g.outputs[0]
    for pat in PATTERNS:
        # the whole graph
        whole = False
        for env, covered in match(g, pat.expr, out, {}, frozenset()):
            whole = True
            try:
                b = pat.bind(env, g)
            except Refuse as r:
                found.append({"op": pat.op, "pattern": pat.name, "score": r.score, "reason": r.reason})
                continue
            rest = [i for i in compute if i not in covered and not _is_leaf_view(g, i)]
            if rest:
                score = PARTIAL * (len(compute) - len(rest)) / len(compute)
                found.append({"op": pat.op, "pattern": pat.name, "score": round(score, 3),
                              "reason": f"{pat.name} covers {len(compute) - len(rest)} of {len(compute)} operations"})
                continue
            found.append({"op": pat.op, "pattern": pat.name, "score": 1.0, **b})
            break
        if whole:
            continue
        # part of it
        for i in compute:
            if i == int(out):
                continue
            hit = next(iter(match(g, pat.expr, g.outputs[0].__class__(i), {}, frozenset())), None)
            if hit is not None:
                cov = len(hit[1])
                found.append({"op": pat.op, "pattern": pat.name, "score": round(PARTIAL * cov / len(compute), 3),
                              "reason": f"{pat.name} computes {cov} of the {len(compute)} operations "
                                        f"({_describe(g)})"})
                break
    gen = generic.match_generic(g)
    found.extend(gen)
    for f in found:
        if f["score"] >= 1.0 - 1e-9:
            entry = operators.get(f["op"])
            if entry is None:
                f["score"] = 0.75
                f["reason"] = f"no '{f['op']}' operator in kernels/operators.yaml"
                f.pop("shape", None)
            elif dtype not in (entry.get("dtypes") or []):
                f["score"] = 0.75
                f["reason"] = (f"the {f['op']} template takes {', '.join(entry.get('dtypes') or [])}; "
                               f"the job is {dtype}")
                f.pop("shape", None)
    found.sort(key=lambda f: -f["score"])
    best = found[0] if found else None
    alts = [{k: f[k] for k in ("op", "pattern", "score", "reason") if k in f} for f in found[:4]]
    if best is not None and best["score"] >= threshold and "shape" in best:
        module = (operators.get(best["op"]) or {}).get("module")
        return {"served": True, "score": best["score"], "op": best["op"], "module": module,
                "pattern": best["pattern"], "shape": best["shape"], "params": best["params"],
                "inputs": best["inputs"], "alternatives": alts[1:]}
    if best is None:
        reason = f"no template family computes this graph ({_describe(g)})"
        return {"served": False, "score": 0.0, "reason": reason, "alternatives": []}
    return {"served": False, "score": best["score"],
            "reason": f"nearest: {best['op']} ({best['pattern']}) at {best['score']:.2f}: {best['reason']}",
            "alternatives": alts}


def _is_leaf_view(g: Graph, i: int) -> bool:
    """A transpose of an input or parameter, which a binding absorbs."""
    n = g.nodes[i]
    return n.op == "permute" and g.nodes[int(n.args[0])].op in ("input", "param")
