"""Finding and importing the template library (kernels/<module>.py).

The kernels directory is ``$KILN_KERNELS_DIR`` if set, else ``<home>/kernels``
where home is ``$KILN_HOME`` or the directory above ``worker/``. It holds
``operators.yaml`` and one module per family. The directory is imported as a
package named after it (``kernels`` normally), bound explicitly to that directory
so that an unrelated installed package of the same name cannot shadow it; the
modules may import each other absolutely (``from kernels.common import ...``) or
relatively.

Under the Triton interpreter the cross-compile runs in a separate process (see
compile_child.py); each process imports the library once.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
import types
from pathlib import Path

_lock = threading.RLock()


def home_dir() -> Path:
    env = os.environ.get("KILN_HOME")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[3]


def kernels_dir() -> Path:
    env = os.environ.get("KILN_KERNELS_DIR")
    if env:
        return Path(env).resolve()
    return home_dir() / "kernels"


class TemplateError(Exception):
    """The template library is missing or broken (an infrastructure error)."""


class Library:
    def __init__(self, directory: Path | None = None):
        self.dir = Path(directory) if directory else kernels_dir()
        self.package = self.dir.name
        if not self.package.isidentifier():
            raise TemplateError(f"kernels directory name {self.package!r} is not a Python identifier")
        self._operators: dict | None = None
        self._launch_modules: dict[str, types.ModuleType] = {}
        # per (module, sha256 of its source): _scan's findings (a source is
        # parsed once however often template_hashes reads it)
        self._scans: dict[tuple[str, bytes], tuple[list[str], list[str]]] = {}

    # -- operators.yaml ---------------------------------------------------
    @property
    def operators(self) -> dict:
        if self._operators is None:
            path = self.dir / "operators.yaml"
            try:
                import yaml
                with open(path) as f:
                    doc = yaml.safe_load(f)
            except FileNotFoundError:
                raise TemplateError(f"operator registry not found: {path}") from None
            except Exception as exc:  # yaml errors
                raise TemplateError(f"cannot read {path}: {exc}") from None
            ops = (doc or {}).get("operators")
            if not isinstance(ops, dict):
                raise TemplateError(f"{path}: no 'operators' map")
            self._operators = ops
        return self._operators

    def complete_params(self, op: str, params: dict | None) -> dict:
        """params with every param of op that it leaves out set to its
        operators.yaml default (a given value is never changed).

        The engine owns a job's params: it fills these defaults in when it
        expands a manifest (knowledge/operators.h, OperatorSpec::with_defaults),
        the job key covers them, and its requests arrive complete, so for them
        this adds nothing. It completes what other clients leave out (tests,
        bench/ scripts) and the structural matcher's proposals, which are sized
        before the engine completes them. tests/python/test_param_defaults.py
        checks that both sides give the same defaults."""
        spec = (self.operators.get(op) or {}).get("params") or {}
        out = {k: v["default"] for k, v in spec.items() if isinstance(v, dict) and "default" in v}
        out.update(params or {})
        return out

    def module_name_for(self, op: str) -> str:
        entry = self.operators.get(op)
        if entry is None:
            raise TemplateError(f"unknown operator {op!r} (not in {self.dir / 'operators.yaml'})")
        mod = entry.get("module") if isinstance(entry, dict) else None
        if not mod or not str(mod).isidentifier():
            raise TemplateError(f"operator {op!r} has no valid 'module' in operators.yaml")
        return str(mod)

    def modules(self) -> list[str]:
        seen: list[str] = []
        for op, entry in self.operators.items():
            mod = entry.get("module") if isinstance(entry, dict) else None
            if mod and mod not in seen:
                seen.append(mod)
        return seen

    def template_hashes(self) -> dict[str, str]:
        """{module: sha256 of <kernels>/<module>.py, the shared common.py and
        every other module of the kernels directory it imports}.

        What a template imports from the directory (common.py's helpers,
        attention.py's attention_tiles.py and attention_wgmma.py, gemm_epilogue's
        matmul.py), directly or through another module, at module level or
        inside a function, changes what it compiles to, so it is part of the
        template's version (and so of every job key). The digest is the
        module's bytes, then common.py's, then each other imported module's in
        name order (a template that imports only common.py hashes as it did
        before imports were followed).
        """
        common = self.dir / "common.py"
        shared = common.read_bytes() if common.is_file() else b""
        out = {}
        for mod in self.modules():
            path = self.dir / f"{mod}.py"
            if path.is_file():
                h = hashlib.sha256(path.read_bytes())
                h.update(b"\0common.py\0" + shared)
                deps = sorted(self.imported_modules(mod) - {mod, "common"})
                for dep in deps:
                    h.update(b"\0" + f"{dep}.py".encode() + b"\0" + (self.dir / f"{dep}.py").read_bytes())
                for data in self.data_files([mod, "common", *deps]):
                    h.update(b"\0" + data.encode() + b"\0" + (self.dir / data).read_bytes())
                out[mod] = h.hexdigest()
        return out

    def data_files(self, mods: list[str]) -> list[str]:
        """Files of the kernels directory, other than modules, that these
        modules name in a string literal (pointwise.py reads its grammar from
        pointwise_grammar.json): what they read changes what they compile, so
        it is part of the template's version. Sorted names."""
        found: set[str] = set()
        for name in mods:
            scan = self._scan(name)
            if scan is not None:
                found.update(s for s in scan[1] if (self.dir / s).is_file())
        return sorted(found)

    def imported_modules(self, mod: str) -> set[str]:
        """The modules of the kernels directory that <mod>.py imports, directly or
        through each other (relative imports, ``from <package> import x``,
        ``import <package>.x``; found by reading the source, nothing is run)."""
        seen: set[str] = set()
        todo = [mod]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            scan = self._scan(name)
            if scan is None:
                continue
            seen.add(name)
            todo.extend(n for n in scan[0] if (self.dir / f"{n}.py").is_file())
        seen.discard(mod)
        return seen

    def _scan(self, name: str) -> tuple[list[str], list[str]] | None:
        """What <name>.py's source names, read without running it: the modules
        it may import from the kernels directory (_local_names) and its string
        constants that may name a data file of it (data_files); whether those
        files exist is the callers' question. None when the file is missing;
        TemplateError when it does not parse. Parsed once per source."""
        path = self.dir / f"{name}.py"
        if not path.is_file():
            return None
        src = path.read_bytes()
        key = (name, hashlib.sha256(src).digest())
        found = self._scans.get(key)
        if found is None:
            try:
                tree = ast.parse(src, filename=str(path))
            except SyntaxError as exc:
                raise TemplateError(f"cannot parse {path}: {exc}") from None
            strings = sorted({node.value for node in ast.walk(tree)
                              if isinstance(node, ast.Constant) and isinstance(node.value, str)
                              and "/" not in node.value and not node.value.endswith(".py")
                              and 0 < len(node.value) < 256})
            found = (self._local_names(tree), strings)
            self._scans[key] = found
        return found

    def _local_names(self, tree: ast.AST) -> list[str]:
        """The kernels-directory module names tree's imports mention (existing
        or not)."""
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                parts = (node.module or "").split(".") if node.module else []
                if node.level == 0:
                    if not parts or parts[0] != self.package:
                        continue
                    parts = parts[1:]
                if parts:
                    names.append(parts[0])
                else:  # from . import a, b / from <package> import a, b
                    names.extend(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == self.package and len(parts) > 1:
                        names.append(parts[1])
        return names

    # -- importing ----------------------------------------------------------
    def _ensure_package(self) -> None:
        pkg = sys.modules.get(self.package)
        locs = list(getattr(pkg, "__path__", []) or []) if pkg else []
        if pkg is not None and any(Path(p).resolve() == self.dir.resolve() for p in locs):
            return
        init = self.dir / "__init__.py"
        if init.is_file():
            spec = importlib.util.spec_from_file_location(
                self.package, init, submodule_search_locations=[str(self.dir)])
        else:
            spec = importlib.machinery.ModuleSpec(self.package, None, is_package=True)
            spec.submodule_search_locations = [str(self.dir)]
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.package] = module
        if spec.loader is not None:
            spec.loader.exec_module(module)

    def _import(self, mod: str) -> types.ModuleType:
        path = self.dir / f"{mod}.py"
        if not path.is_file():
            raise TemplateError(f"template module not found: {path}")
        self._ensure_package()
        return importlib.import_module(f"{self.package}.{mod}")

    def launch_module(self, op: str) -> types.ModuleType:
        mod = self.module_name_for(op)
        with _lock:
            if mod not in self._launch_modules:
                self._launch_modules[mod] = self._import(mod)
            return self._launch_modules[mod]
