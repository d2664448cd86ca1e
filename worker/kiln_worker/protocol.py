"""The worker protocol's names, mirrored from its schema, src/evaluate/protocol.json
(the one source of truth; tests/python/test_protocol_schema.py fails when this
module and the schema differ, tests/cpp/protocol_test.cpp does the same for the
engine's src/evaluate/protocol.h).

No imports beyond the standard library: the server, the evaluation and the
sandbox all use these names.
"""
from __future__ import annotations

# The methods a worker serves, in the order hello lists them.
METHODS: tuple[str, ...] = (
    "hello", "space", "evaluate", "reference_info", "traffic", "package_info", "confirm", "match",
)

# An evaluation's verdict.
OK = "ok"
COMPILE_ERROR = "compile_error"
RESOURCE_ERROR = "resource_error"
INCORRECT = "incorrect"
CRASH = "crash"
REJECTED = "rejected"   # generated code: a screening or run-time rule
TIMEOUT = "timeout"     # generated code: the sandbox child was killed

STATUSES: tuple[str, ...] = (
    OK, COMPILE_ERROR, RESOURCE_ERROR, INCORRECT, CRASH, REJECTED, TIMEOUT,
)
# What the template path answers (no sandbox: never rejected or timeout).
TEMPLATE_STATUSES: tuple[str, ...] = (OK, COMPILE_ERROR, RESOURCE_ERROR, INCORRECT, CRASH)

# Exit codes of `python3 -m kiln_worker`.
EXIT_STDIN_CLOSED = 0
EXIT_MISSING_PACKAGES = 3
EXIT_DEVICE_LOST = 4


def unknown_method(method: object) -> str:
    """The ok:false error for a method the worker does not serve."""
    names = ", ".join(METHODS[:-1]) + " or " + METHODS[-1]
    return f"unknown method {method!r} (expected {names})"
