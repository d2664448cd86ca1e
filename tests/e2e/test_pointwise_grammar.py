"""The pointwise operator's `params.expr` grammar (kernels/pointwise_grammar.json)
is checked twice: by `kiln submit` (src/knowledge/expr_grammar.cpp) and by the
worker (kernels/pointwise.py). The same expressions go to both here, and both
must give the same verdict, so the engine refuses at submit exactly what the
worker would refuse at run time, and never something the worker takes.
"""
import json
import sys

import pytest

from conftest import ROOT
from test_e2e import kiln

sys.path.insert(0, str(ROOT))
from kernels import pointwise  # noqa: E402

ACCEPTED = [  # a person's expectation, not either side's output
    "(mul (silu x0) x1)",
    "(add (mul (gelu_tanh x0) 0.5) x1)",
    "x0",
    "(clamp x0 none 6.0)",
    "(clamp x0 -inf inf)",
    "(add x0 1e-05 -2.5E+3 .5 7.)",
    "(elu x0 1.6732632423543772 1.0507009873554805 1.0)",
    "(add\tx0\n x7)",
    "(pow x0 2)",
    "(add " + " ".join(["x0"] * 64) + ")",
    "(relu " * 63 + "x0" + ")" * 63,
    "(add x0 nan)",
]
REFUSED = [
    "",
    "(__import__ x0)",
    "(add x0 os)",
    "(add x0 __builtins__)",
    "(eval x0)",
    "(add x0 x8)",
    "(add x0 x1000)",
    "(add x0 x\u0663)",          # an Arabic-Indic digit: int() would take it
    "(add x0 1_0)",              # float() would take it
    "(add x0 0x10)",
    "(add x0 infinity)",
    "(add x0 1e1000)",
    "(add x0\u00a0x1)",          # a no-break space: str.split() would split there
    "(relu x0",
    "(relu x0))",
    ")",
    "(relu)",
    "(pow x0)",
    "(add " + " ".join(["x0"] * 65) + ")",
    "(relu " * 65 + "x0" + ")" * 65,
    "(add x0 " + "1" * 65 + ")",
    "(add x0 x1) (add x0 x1)",
    "((add) x0)",
    "(add x0 'x1')",
    "(add x0 x1;)",
]


def worker_accepts(expr):
    try:
        pointwise.parse(expr)
        return True
    except ValueError:
        return False


def submit(tmp_path, exprs):
    """`kiln submit --dry-run` of one manifest with a pointwise entry per expression."""
    m = tmp_path / "m.yaml"
    m.write_text("targets: [H200]\ndefaults: {dtypes: [fp32]}\noperators:\n" + "".join(
        "  - op: pointwise\n    input_shape: [64, 64]\n"
        f"    params: {{expr: {json.dumps(e)}, inputs: 'full,full,full,full,full,full,full,full'}}\n"
        for e in exprs))
    r = kiln("submit", m, "--dry-run", catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode in (0, 2), r.stderr
    if r.returncode == 2:
        assert "param 'expr'" in r.stderr, r.stderr  # refused for the expression, not for something else
    assert not (tmp_path / "kiln.db").exists()
    return r


def test_both_accept_the_accepted(tmp_path):
    for expr in ACCEPTED:
        assert worker_accepts(expr), f"worker: {expr!r}"
    r = submit(tmp_path, ACCEPTED)  # one manifest: every entry must pass
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("expr", REFUSED, ids=lambda e: repr(e[:30]))
def test_both_refuse_the_refused(tmp_path, expr):
    assert not worker_accepts(expr), f"worker: {expr!r}"
    assert submit(tmp_path, [expr]).returncode == 2, f"kiln submit: {expr!r}"


def test_the_grammar_file_is_the_workers():
    g = json.loads((ROOT / "kernels" / "pointwise_grammar.json").read_text())
    assert set(pointwise._ARITY) == set(g["operations"])
    assert pointwise.MAX_INPUTS == g["max_inputs"]
