"""The hostile corpus (tests/data/hostile/*.py): generated programs that cheat.

Each file carries its expectations in header comments: ``# expect: <rule>``,
``# status: <status>``, ``# layer: static|dynamic``, optional ``# reference: <name>``
(tests/data/reference/<name>.py; default relu_add).

Most cheats are an honest solution with one thing changed. Such a file holds only the
change and names the honest solution it extends, ``# extends: <name>``
(tests/data/reference/solutions/<name>.py): the program is that solution followed by the
file, so a cheat in ``ModelNew`` redefines it as ``class ModelNew(ModelNew)``. ``program``
assembles it; the screen and the worker always get one self-contained source, as they do
a generated program.
"""
from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = sorted((DATA / "hostile").glob("*.py"))
SOLUTIONS = DATA / "reference" / "solutions"


def header(path: Path, key: str) -> str | None:
    m = re.search(rf"^# {key}: (\S+)", path.read_text(), re.M)
    return m.group(1) if m else None


def program(path: Path) -> str:
    """The source of the generated program ``path`` stands for."""
    text = path.read_text()
    base = header(path, "extends")
    if base is None:
        return text
    return (SOLUTIONS / f"{base}.py").read_text() + "\n\n" + text
