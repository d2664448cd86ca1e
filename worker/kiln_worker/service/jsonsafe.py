"""Turning arbitrary Python values into strict JSON (no NaN/Infinity tokens)."""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any


def json_safe(v: Any, depth: int = 0) -> Any:
    """Recursively converts v to JSON-representable values.

    Non-finite floats become None (strict JSON has no NaN; the engine's
    nlohmann::json would reject the document); namedtuples and dataclasses
    become objects; tuples and sets become arrays; bytes are summarised; anything
    else becomes its str().
    """
    if depth > 64:
        return str(v)
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):
        return json_safe(v.value, depth + 1)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): json_safe(x, depth + 1) for k, x in v.items()}
    if hasattr(v, "_asdict") and callable(v._asdict):  # namedtuple (e.g. GPUTarget, KernelMetadata)
        try:
            return json_safe(dict(v._asdict()), depth + 1)
        except Exception:
            pass
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return json_safe({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}, depth + 1)
    if isinstance(v, (list, tuple, set, frozenset)):
        items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        return [json_safe(x, depth + 1) for x in items]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(v))} bytes>"
    # numpy / torch scalars
    item = getattr(v, "item", None)
    if callable(item):
        try:
            return json_safe(item(), depth + 1)
        except Exception:
            pass
    return str(v)
