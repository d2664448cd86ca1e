"""What the end-to-end tests share: where the repository and the `kiln` binary
are, and one way to run it.

KILN_BIN names the binary (default: build/kiln); kiln-mpi, kiln-mpirun and
kiln-replay are found beside it. The test files import these names
(`from conftest import KILN, ROOT, kiln`).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", ROOT / "build" / "kiln"))


def kiln(*args, catalog=None, check=True, timeout=900, env=None, base_env=None, unset=()):
    """Runs `kiln ARGS...` and returns its CompletedProcess (text stdout/stderr).

    The environment: `base_env` (default: ours), without the variables named in
    `unset`, with KILN_CATALOG=`catalog` when one is given, then `env` on top.
    With `check`, a non-zero exit raises AssertionError showing the command,
    its stdout and its stderr."""
    e = dict(os.environ if base_env is None else base_env)
    for k in unset:
        e.pop(k, None)
    if catalog is not None:
        e["KILN_CATALOG"] = str(catalog)
    e.update(env or {})
    r = subprocess.run([str(KILN), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=e)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(map(str, args))} exited {r.returncode}\n"
                             f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r
