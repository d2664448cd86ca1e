"""The worker's diagnostics: one line to stderr, tagged with its pid (the
engine copies workers' stderr with `kiln run -v`; stdout is the protocol's)."""
from __future__ import annotations

import os
import sys


def log(msg: str) -> None:
    sys.stderr.write(f"kiln_worker[{os.getpid()}]: {msg}\n")
    sys.stderr.flush()
