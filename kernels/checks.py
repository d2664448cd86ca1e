"""Argument checks the template modules share: the operator a module serves
and the dtypes it takes (`operators`), enum params (`choice`) and eps (`eps`).
Each makes the checking function a template keeps as `_check`, `_kind`,
`_eps` ..., which raises ValueError with a message that starts with the
template's name (the worker reports it as the candidate's error).

A template imports this module only for its checks; importing it makes it part
of that template's hash (kiln_worker/evaluation/templates.py).
"""

from __future__ import annotations

HALF = ("fp16", "bf16")


def operators(family: str, names, dtypes=None):
    """A template's `_check(op, dtype=None)`: op must be one of `names` and,
    with `dtypes`, a given dtype one of them."""
    def check(op, dtype=None) -> None:
        if op not in names:
            raise ValueError(f"{family}: unknown operator {op!r}")
        if dtypes is not None and dtype is not None and dtype not in dtypes:
            raise ValueError(f"{family}: dtype must be {' or '.join(dtypes)}, not {dtype!r}")
    return check


def choice(family: str, key: str, default, allowed):
    """A reader of an enum param: `read(params)` is params[key] (`default`
    when absent), which must be one of `allowed`."""
    def read(params):
        value = (params or {}).get(key, default)
        if value not in allowed:
            raise ValueError(f"{family}: {key} must be one of {', '.join(map(str, allowed))}, got {value!r}")
        return value
    return read


def eps(family: str, default: float):
    """A reader of the eps param: `read(params)` is params['eps'] as a float
    (`default` when absent), which must be >= 0."""
    def read(params) -> float:
        value = float((params or {}).get("eps", default))
        if value < 0:
            raise ValueError(f"{family}: eps must be >= 0")
        return value
    return read
