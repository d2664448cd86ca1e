"""How an exception during a candidate's compile, launch or benchmark becomes
its status: one rule for template candidates (evaluate.py) and generated code
(sandbox/child.py).

- ``resource_error``: the target's limits (registers, shared memory) refused it;
- ``compile_error``: Triton's front end or ptxas refused it on the executing device;
- ``crash``: anything else, with the traceback's tail.

Out of memory is the caller's (the template path retries holding the GPU alone).
"""
from __future__ import annotations

import traceback

from ..codeobject.targetcompile import describe_exception, is_resource_error, trim_message


def traceback_tail(exc: BaseException, lines: int = 25) -> str:
    """The last `lines` lines of the exception's traceback, trimmed to a message."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return trim_message("\n".join(text.rstrip().splitlines()[-lines:]))


def _compiler_errors() -> tuple:
    kinds = []
    try:
        from triton.compiler.errors import CompilationError
        kinds.append(CompilationError)
    except Exception:  # pragma: no cover
        pass
    try:
        from triton.runtime.errors import PTXASError
        kinds.append(PTXASError)
    except Exception:  # pragma: no cover
        pass
    return tuple(kinds)


def classify(exc: BaseException, device_name: str) -> tuple[str, str]:
    """(status, message) of an exception raised on `device_name` (module docstring)."""
    if is_resource_error(exc):
        return "resource_error", f"on {device_name}: {describe_exception(exc)}"
    if isinstance(exc, _compiler_errors()):
        return "compile_error", f"on {device_name}: {describe_exception(exc)}"
    return "crash", traceback_tail(exc)
