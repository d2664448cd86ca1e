"""Argument checks the template modules share: the operator a module serves,
the dtypes it takes, and enum / eps params. Each raises ValueError with a
message that starts with the module's name (the worker reports it as the
candidate's error).

A template imports this module only for its checks; importing it makes it part
of that template's hash (kiln_worker/evaluation/templates.py).
"""

from __future__ import annotations

HALF = ("fp16", "bf16")


def operator(family: str, operators, op, dtype=None, dtypes=None) -> None:
    """op must be one of `operators`; with `dtypes`, a given `dtype` one of them."""
    if op not in operators:
        raise ValueError(f"{family}: unknown operator {op!r}")
    if dtypes is not None and dtype is not None and dtype not in dtypes:
        raise ValueError(f"{family}: dtype must be {' or '.join(dtypes)}, not {dtype!r}")


def choice(family: str, params, key: str, default, allowed):
    """params[key] (default when absent), which must be one of `allowed`."""
    value = (params or {}).get(key, default)
    if value not in allowed:
        raise ValueError(f"{family}: {key} must be one of {', '.join(map(str, allowed))}, got {value!r}")
    return value


def eps(family: str, params, default: float) -> float:
    """params['eps'] as a float (default when absent), which must be >= 0."""
    value = float((params or {}).get("eps", default))
    if value < 0:
        raise ValueError(f"{family}: eps must be >= 0")
    return value
