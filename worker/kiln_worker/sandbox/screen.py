"""Static screening of generated (untrusted) kernel code, before it ever runs.

A generated program is a Python module in the KernelBench form: it defines
``class ModelNew(nn.Module)`` whose ``forward`` launches ``@triton.jit`` kernels.
``screen(source)`` parses it (Python ``ast``; nothing is executed) and returns
``None`` when it passes, else a ``Violation`` naming the rule, line and reason.
The evaluator answers ``status: "rejected"`` with ``rule`` set to the name.

Three contexts, decided by the enclosing function:

* **kernel** -- a function decorated with ``triton.jit`` (possibly under
  ``triton.autotune`` / ``triton.heuristics``): ``triton.language`` (``tl.*``),
  ``libdevice``, ``math``; no ``torch`` at all.
* **init** -- ``__init__`` of a class (and module-level ``get_inputs`` /
  ``get_init_inputs``, the KernelBench boilerplate that generated files often
  repeat; the evaluator always uses the reference's): module structure and parameter
  creation (the wrapper allowlist plus ``torch.nn.<Module classes>``,
  ``nn.Parameter``, ``nn.init.*``, ``torch.randn/rand/randint/arange/tensor...``).
* **wrapper** -- everything else (``forward``, helper functions, module and class
  bodies): allocation, views and launches only (see ``TORCH_WRAPPER_OK``,
  ``TENSOR_METHOD_OK``). The Triton kernels must compute the result.

Rules (the ``rule`` names of the answer):

``import``        an import outside torch, torch.nn, torch.nn.functional, triton,
                  triton.language (+ .math, .extra.libdevice), math, or a relative /
                  star import
``file_io``       ``open``; ``torch.save / load / from_file``, ``torch.hub``,
                  ``torch.serialization``, ``.tofile``
``dynamic_code``  ``eval / exec / compile / __import__``; ``torch.compile``,
                  ``torch.jit``, ``torch.library``, ``torch.ops``, ``torch.utils``
                  (cpp_extension), ``torch.fx``, ``torch.export``, ``torch.package``
``reflection``    ``getattr / setattr / delattr / hasattr / globals / locals / vars
                  / dir``, three-argument ``type``, metaclasses, a module object used
                  as a value (``t = torch``)
``dunder``        dunder attributes / names / methods (``__class__``,
                  ``__subclasses__``, ``__globals__``, ``__builtins__`` ...) and dunder
                  strings (``"__class__"``, ``"{0.__class__}"``); only ``def
                  __init__`` and ``super().__init__(...)`` are allowed
``private_attr``  ``obj._name`` on anything but ``self``
``introspection`` ``os, sys, gc, inspect, ctypes, subprocess, socket, importlib,
                  pickle, builtins, ...`` reached by name or attribute
                  (``torch.sys.modules``), frame / code attributes (``f_globals``),
                  ``breakpoint / input / help``
``namespace``     an attribute path into a module outside the allowed set
                  (``torch.autograd``, ``triton.runtime``, ``tl.core``) or a name the
                  module does not have
``torch_compute`` a torch compute op in wrapper code (``torch.matmul``,
                  ``x.sum()``, ``x.float()``, ``x @ w``, any ``torch.nn.functional``
                  function, ``torch.nn.Linear`` outside ``__init__``) or any torch in a
                  kernel; also found at run time (``generated.py``)
``reference_call`` the name ``Model`` (the reference module's class)
``try_except``    any ``try`` statement (fallbacks around launches)
``side_stream``   ``torch.cuda.Stream / stream / current_stream / default_stream /
                  set_stream / Event / graph``, ``.record_stream``, ``.wait_stream``
``monkeypatch``   assigning or deleting an attribute of anything but ``self`` (also
                  as a ``for`` / comprehension / ``with ... as`` target); at run
                  time any change to torch, Triton, NumPy, Python or evaluator
                  objects, by any spelling (integrity.py)
``module_override`` a ModelNew method that overrides the ``nn.Module`` API
                  (``__call__``, ``state_dict``, ``to``, ``register_forward_hook`` ...)
``global_state``  ``global`` / ``nonlocal``
``process``       ``exit`` / ``quit``
``structure``     no module-level ``class ModelNew`` with a ``forward`` method
``size``          source over 512 KiB

``if __name__ == "__main__":`` blocks never run when the module is imported: only
the security rules apply there, not the compute rules.

A ``SyntaxError`` is not a rule: the evaluator answers ``compile_error``.
"""
from __future__ import annotations

import ast
import re
import types
from dataclasses import dataclass, field
from typing import Any

MAX_SOURCE_BYTES = 512 * 1024

ALLOWED_IMPORTS = {
    "torch", "torch.nn", "torch.nn.functional",
    "triton", "triton.language", "triton.language.math",
    "triton.language.extra", "triton.language.extra.libdevice",
    "triton.language.extra.cuda", "triton.language.extra.cuda.libdevice",
    "triton.language.extra.hip", "triton.language.extra.hip.libdevice",
    "math",
}

# modules an attribute path may pass through
ALLOWED_MODULES = ALLOWED_IMPORTS | {"torch.cuda", "torch.nn.init"}

INTROSPECTION_NAMES = {
    "os", "sys", "gc", "inspect", "ctypes", "subprocess", "socket", "importlib", "pickle",
    "builtins", "marshal", "shutil", "pathlib", "io", "multiprocessing", "threading",
    "_thread", "signal", "code", "codeop", "types", "weakref", "runpy", "tempfile", "urllib",
    "http", "requests", "pty", "fcntl", "mmap", "resource", "posix", "nt", "atexit",
    "faulthandler", "sysconfig", "platform", "select", "selectors", "asyncio", "ssl",
    "dill", "cloudpickle", "copyreg", "zipimport", "pkgutil", "linecache", "traceback",
    "functools", "operator",
    # frame / code / generator internals
    "f_globals", "f_locals", "f_back", "f_code", "f_builtins", "gi_frame", "gi_code",
    "cr_frame", "cr_code", "ag_frame", "co_code", "co_consts", "tb_frame", "tb_next",
    "func_globals", "func_code", "mro",
}

BANNED_BUILTINS = {
    "eval": "dynamic_code", "exec": "dynamic_code", "compile": "dynamic_code",
    "__import__": "dynamic_code",
    "open": "file_io",
    "getattr": "reflection", "setattr": "reflection", "delattr": "reflection",
    "hasattr": "reflection", "globals": "reflection", "locals": "reflection",
    "vars": "reflection", "dir": "reflection",
    "breakpoint": "introspection", "input": "introspection", "help": "introspection",
    "exit": "process", "quit": "process",
}

# Paths (prefixes) with a dedicated rule, checked before anything else (no
# prefix of one rule is a prefix of another's: their order does not matter).
_PATH_PREFIXES = {
    "side_stream": ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.current_stream",
                    "torch.cuda.default_stream", "torch.cuda.set_stream",
                    "torch.cuda.ExternalStream", "torch.cuda.StreamContext", "torch.cuda.Event",
                    "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.graphs",
                    "torch.cuda.streams", "torch.cuda.make_graphed_callables", "torch.Stream",
                    "torch.Event", "torch.stream"),
    "file_io": ("torch.save", "torch.load", "torch.from_file", "torch.hub", "torch.serialization"),
    "dynamic_code": ("torch.compile", "torch.jit", "torch.library", "torch.ops", "torch.utils",
                     "torch.fx", "torch.export", "torch.package", "torch.classes",
                     "torch.cuda.jiterator", "torch.compiler", "triton.compile", "triton.compiler"),
    "torch_compute": ("torch.manual_seed", "torch.cuda.manual_seed", "torch.random"),
    "introspection": ("triton.knobs", "triton.runtime"),
    "namespace": ("triton.language.core",),
}
PATH_RULES = [(prefix, rule) for rule, prefixes in _PATH_PREFIXES.items() for prefix in prefixes]

STREAM_ATTRS = {"Stream", "stream", "current_stream", "default_stream", "set_stream",
                "ExternalStream", "record_stream", "wait_stream", "wait_event", "StreamContext",
                "CUDAGraph", "graph", "cuda_stream"}

TORCH_WRAPPER_OK = {
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like",
    "torch.ones", "torch.ones_like", "torch.full", "torch.full_like",
    "torch.Size", "torch.device", "torch.dtype", "torch.Tensor", "torch.is_tensor",
    "torch.finfo", "torch.iinfo", "torch.no_grad", "torch.inference_mode", "torch.promote_types",
    "torch.get_default_dtype", "torch.is_floating_point",
    "torch.cuda.current_device", "torch.cuda.get_device_properties", "torch.cuda.is_available",
    "torch.cuda.device_count", "torch.cuda.get_device_capability", "torch.cuda.get_device_name",
    "torch.cuda.synchronize", "torch.cuda.device",
    "torch.nn.Module", "torch.nn.Parameter",
}
TORCH_INIT_OK = TORCH_WRAPPER_OK | {
    "torch.randn", "torch.rand", "torch.randint", "torch.randn_like", "torch.rand_like",
    "torch.randint_like", "torch.arange", "torch.linspace", "torch.tensor", "torch.as_tensor",
    "torch.eye", "torch.nn.ParameterList", "torch.nn.ParameterDict", "torch.nn.ModuleList",
    "torch.nn.ModuleDict", "torch.nn.Buffer",
}
TRITON_WRAPPER_OK = {"triton.jit", "triton.autotune", "triton.Config", "triton.heuristics",
                     "triton.cdiv", "triton.next_power_of_2", "triton.constexpr"}

# tensor methods / attributes allowed in wrapper code (no compute: shape, views,
# allocation, initialising a whole buffer)
TENSOR_METHOD_OK = {
    "view", "view_as", "reshape", "reshape_as", "contiguous", "is_contiguous", "stride", "size",
    "shape", "numel", "nelement", "dtype", "device", "t", "T", "mT", "transpose", "permute",
    "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "narrow", "select",
    "split", "chunk", "unbind", "dim", "ndim", "ndimension", "element_size", "itemsize", "nbytes",
    "data_ptr", "is_cuda", "is_cpu", "layout", "new_empty", "new_zeros", "new_ones", "new_full",
    "new_empty_strided", "is_floating_point", "is_complex", "storage_offset", "requires_grad",
    "detach", "data", "get_device", "zero_", "fill_", "movedim", "swapaxes", "swapdims",
    "diagonal", "as_strided", "is_leaf", "weight", "bias",
}
# plain Python container / string methods that happen to share a name with torch
PY_METHOD_NAMES = {"values", "index", "sort", "name", "items", "keys", "count", "copy", "append",
                   "extend", "pop", "insert", "remove", "join", "format", "get", "update",
                   "startswith", "endswith", "lower", "upper", "strip", "replace"}


@dataclass
class Violation:
    rule: str
    line: int
    col: int
    detail: str
    others: list = field(default_factory=list)

    @property
    def message(self) -> str:
        msg = f"rejected by screening: {self.rule} at line {self.line}: {self.detail}"
        if self.others:
            more = "; ".join(f"{v.rule} at line {v.line}" for v in self.others[:5])
            msg += f" (also: {more})"
        return msg

    def as_json(self) -> dict:
        return {"rule": self.rule, "line": self.line, "col": self.col, "detail": self.detail}


_names_cache: dict[str, Any] = {}


def _torch_names() -> dict:
    """Name sets taken from the installed torch (once per process)."""
    if not _names_cache:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        tensor = {n for n in dir(torch.Tensor) if not n.startswith("_")}
        funcs = {n for n in dir(torch) if not n.startswith("_")
                 and callable(vars(torch).get(n)) and not isinstance(vars(torch).get(n), type)}
        ff = {n for n in dir(F) if not n.startswith("_")}
        _names_cache["compute"] = (tensor | funcs | ff) - TENSOR_METHOD_OK - PY_METHOD_NAMES
        _names_cache["module_api"] = {n for n in dir(nn.Module)} - {"forward", "__init__"}
    return _names_cache


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


_DUNDER_STRING = re.compile(r"^\s*__\w+__\s*$|\{[^{}]*(\.|\[)\s*__\w+__")


def _module_obj(path: str):
    """The real module object for an allowed module path (imported by the worker)."""
    import importlib
    return importlib.import_module(path)


class _Screen(ast.NodeVisitor):
    def __init__(self):
        self.violations: list[Violation] = []
        self.alias: dict[str, str] = {}     # local name -> dotted path
        self.ctx = "wrapper"                # wrapper | init | kernel
        self.self_names: set[str] = set()   # attributes assigned on self, methods, functions
        self.names = _torch_names()

    # -- helpers -------------------------------------------------------------
    def flag(self, node, rule: str, detail: str) -> None:
        self.violations.append(Violation(rule, getattr(node, "lineno", 0),
                                         getattr(node, "col_offset", 0), detail))

    def dotted(self, node) -> str | None:
        if isinstance(node, ast.Name):
            return self.alias.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    @staticmethod
    def root_name(node) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.value if not isinstance(node, ast.Call) else node.func
        return node.id if isinstance(node, ast.Name) else None

    # -- path checks ----------------------------------------------------------
    def check_path(self, node, path: str, as_value: bool) -> None:
        """path: a dotted name rooted at an imported module."""
        for prefix, rule in PATH_RULES:
            if path == prefix or path.startswith(prefix + "."):
                self.flag(node, rule, f"{path} is not allowed")
                return
        parts = path.split(".")
        # walk modules
        mod_path = parts[0]
        if mod_path not in ALLOWED_MODULES:
            self.flag(node, "import", f"{mod_path} is not an allowed module")
            return
        try:
            obj = _module_obj(mod_path)
        except Exception:
            self.flag(node, "namespace", f"cannot resolve {mod_path}")
            return
        i = 1
        while i < len(parts) and isinstance(obj, types.ModuleType):
            name = parts[i]
            if name.startswith("_"):
                self.flag(node, "dunder" if _is_dunder(name) else "private_attr",
                          f"{'.'.join(parts[:i + 1])} is private")
                return
            if name in INTROSPECTION_NAMES:
                self.flag(node, "introspection", f"{'.'.join(parts[:i + 1])} reaches {name}")
                return
            d = vars(obj)
            if name not in d:
                sub = f"{mod_path}.{name}"
                if sub in ALLOWED_MODULES:
                    try:
                        d = {name: _module_obj(sub)}
                    except Exception:
                        d = {}
                if name not in d:
                    self.flag(node, "namespace", f"{mod_path}.{name} does not exist or is not allowed")
                    return
            nxt = d[name]
            if isinstance(nxt, types.ModuleType):
                real = nxt.__name__
                mod_path = f"{mod_path}.{name}"
                if mod_path not in ALLOWED_MODULES and real not in ALLOWED_MODULES:
                    short = real.rsplit(".", 1)[-1]
                    rule = "introspection" if short in INTROSPECTION_NAMES or real in INTROSPECTION_NAMES else "namespace"
                    self.flag(node, rule, f"{'.'.join(parts[:i + 1])} is module {real}, not allowed")
                    return
            else:
                mod_path = f"{mod_path}.{name}"
            obj = nxt
            i += 1
        member = mod_path            # e.g. torch.matmul, torch.nn.functional, triton.language.load
        rest = parts[i:]             # attributes on the member object
        if isinstance(obj, types.ModuleType):
            if as_value:
                self.flag(node, "reflection", f"module {member} used as a value")
            return
        for a in rest:
            if not self.check_attr_name(node, a, on_self=False):
                return
        self.check_member(node, member, obj, rest)

    def check_member(self, node, member: str, obj, rest: list[str]) -> None:
        top = member.split(".")[0]
        if self.ctx == "dead":
            return  # security rules (PATH_RULES, names, attributes) still apply
        if self.ctx == "kernel":
            if top == "torch":
                self.flag(node, "torch_compute", f"{member}: torch is not allowed inside a Triton kernel")
            elif top == "triton" and not member.startswith("triton.language") \
                    and member not in ("triton.jit", "triton.cdiv"):
                self.flag(node, "namespace", f"{member} is not usable inside a Triton kernel")
            return
        if top == "math" or member.startswith("triton.language"):
            return
        if top == "triton":
            if member not in TRITON_WRAPPER_OK:
                self.flag(node, "namespace", f"{member} is not allowed (allowed: "
                          + ", ".join(sorted(TRITON_WRAPPER_OK)) + ")")
            return
        # torch
        import torch
        if isinstance(obj, (torch.dtype, torch.memory_format, torch.layout)):
            return
        if member.startswith("torch.nn.functional."):
            self.flag(node, "torch_compute", f"{member}: torch.nn.functional computes in PyTorch; "
                      "the Triton kernels must compute the result")
            return
        ok = TORCH_INIT_OK if self.ctx == "init" else TORCH_WRAPPER_OK
        if member in ok:
            for a in rest:
                if a in self.names["compute"] and member == "torch.Tensor":
                    self.flag(node, "torch_compute", f"{member}.{a} is a torch compute op")
                    return
            return
        if self.ctx == "init":
            if member.startswith("torch.nn.init."):
                return
            if member.startswith("torch.nn.") and isinstance(obj, type):
                import torch.nn as nn
                if issubclass(obj, (nn.Module, nn.Parameter)):
                    return
        where = "in __init__" if self.ctx == "init" else "in wrapper code (forward and helpers)"
        self.flag(node, "torch_compute", f"{member} is not allowed {where}: only allocation "
                  "(torch.empty/zeros/ones/full[_like]), views and kernel launches; the Triton "
                  "kernels must compute the result")

    def check_attr_name(self, node, attr: str, on_self: bool, base=None) -> bool:
        if _is_dunder(attr):
            if attr == "__init__" and isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                    and base.func.id == "super":
                return True
            self.flag(node, "dunder", f"attribute {attr}")
            return False
        if attr.startswith("_") and not on_self:
            self.flag(node, "private_attr", f"private attribute .{attr}")
            return False
        if attr in INTROSPECTION_NAMES:
            self.flag(node, "introspection", f"attribute .{attr}")
            return False
        if attr in STREAM_ATTRS:
            self.flag(node, "side_stream", f".{attr}: launches must use the current stream")
            return False
        if attr == "tofile":
            self.flag(node, "file_io", ".tofile")
            return False
        return True

    # -- imports ---------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name not in ALLOWED_IMPORTS:
                self.flag(node, "import", f"import {a.name} (allowed: torch, torch.nn, "
                          "torch.nn.functional, triton, triton.language, math)")
                continue
            if a.asname:
                self.alias[a.asname] = a.name
            else:
                top = a.name.split(".")[0]
                self.alias[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level:
            self.flag(node, "import", "relative import")
            return
        if mod == "__future__":
            return
        if mod not in ALLOWED_IMPORTS:
            self.flag(node, "import", f"from {mod} import ... (allowed: torch, torch.nn, "
                      "torch.nn.functional, triton, triton.language, math)")
            return
        for a in node.names:
            if a.name == "*":
                self.flag(node, "import", f"from {mod} import *")
                continue
            path = f"{mod}.{a.name}"
            self.alias[a.asname or a.name] = path
            saved, self.ctx = self.ctx, "init"  # existence / category only; use sites decide
            n_before = len(self.violations)
            self.check_path(node, path, as_value=False)
            self.ctx = saved
            # torch compute names may be imported (rejected where used)
            self.violations[n_before:] = [v for v in self.violations[n_before:]
                                          if v.rule != "torch_compute"]

    # -- names / attributes --------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        n = node.id
        if n in BANNED_BUILTINS:
            self.flag(node, BANNED_BUILTINS[n], f"{n} is not allowed")
        elif n == "Model":
            self.flag(node, "reference_call", "the reference Model must not be used")
        elif _is_dunder(n) and n != "__name__":
            self.flag(node, "dunder", f"name {n}")
        elif n in self.alias:
            if isinstance(node.ctx, ast.Load):
                self.check_path(node, self.alias[n], as_value=True)
            else:
                self.flag(node, "monkeypatch", f"rebinding the imported name {n}")
        elif n in INTROSPECTION_NAMES and isinstance(node.ctx, ast.Load):
            self.flag(node, "introspection", f"name {n}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self.dotted(node)
        if path is not None:
            self.check_path(node, path, as_value=True)
            return
        root = node.value
        on_self = isinstance(root, ast.Name) and root.id == "self"
        if not self.check_attr_name(node, node.attr, on_self, base=root):
            return
        if self.ctx == "wrapper" and node.attr in self.names["compute"]:
            if not (on_self and node.attr in self.self_names):
                self.flag(node, "torch_compute", f".{node.attr} is a torch compute op (not allowed "
                          "in wrapper code; allowed tensor methods: view, reshape, contiguous, "
                          "stride, size, shape, numel, t, permute, ... see screen.py)")
                return
        self.visit(node.value)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _DUNDER_STRING.search(node.value):
            self.flag(node, "dunder", f"string {node.value[:40]!r} names a dunder attribute")

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "type" and len(node.args) != 1:
            self.flag(node, "reflection", "type() with three arguments creates classes")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and self.ctx == "wrapper":
            self.flag(node, "torch_compute", "the @ operator computes in PyTorch")
        self.generic_visit(node)

    # -- statements -----------------------------------------------------------------
    def visit_Try(self, node) -> None:
        self.flag(node, "try_except", "try statements are not allowed (no fallbacks around launches)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node) -> None:
        self.flag(node, "global_state", "global/nonlocal state is not allowed")

    visit_Nonlocal = visit_Global

    def _check_target(self, t) -> None:
        if isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self._check_target(e)
            return
        if isinstance(t, ast.Starred):
            self._check_target(t.value)
            return
        if isinstance(t, ast.Attribute):
            if not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                self.flag(t, "monkeypatch", f"assigning attribute .{t.attr} of something other "
                          "than self")

    def _visit_targets(self, node) -> None:
        """Assign, Delete: each of node.targets."""
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def _visit_target(self, node) -> None:
        """AugAssign, AnnAssign, For and comprehensions (`for torch.Tensor.tolist
        in [f]: ...` assigns an attribute too): node.target."""
        self._check_target(node.target)
        self.generic_visit(node)

    visit_Assign = visit_Delete = _visit_targets
    visit_AugAssign = visit_AnnAssign = visit_For = visit_AsyncFor = visit_comprehension = _visit_target

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._check_target(node.optional_vars)
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        t = node.test
        main_block = (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
                      and t.left.id == "__name__" and len(t.comparators) == 1
                      and isinstance(t.comparators[0], ast.Constant)
                      and t.comparators[0].value == "__main__" and self.ctx == "wrapper")
        if not main_block:
            self.generic_visit(node)
            return
        saved, self.ctx = self.ctx, "dead"  # a self-test block: never runs on import
        for stmt in node.body + node.orelse:
            self.visit(stmt)
        self.ctx = saved

    def _is_kernel(self, fn) -> bool:
        for d in fn.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            path = self.dotted(target)
            if path in ("triton.jit", "triton.autotune", "triton.heuristics"):
                return True
        return False

    def visit_FunctionDef(self, node, in_class: ast.ClassDef | None = None) -> None:
        if _is_dunder(node.name) and not (in_class is not None and node.name == "__init__"):
            self.flag(node, "dunder", f"defining {node.name}")
        if in_class is not None and node.name in self.names["module_api"] and not _is_dunder(node.name):
            self.flag(node, "module_override", f"{in_class.name}.{node.name} overrides nn.Module.{node.name}")
        for d in node.decorator_list:
            self.visit(d)
        saved = self.ctx
        if self._is_kernel(node):
            self.ctx = "kernel"
        elif in_class is not None and node.name == "__init__":
            self.ctx = "init"
        elif in_class is None and node.name in ("get_inputs", "get_init_inputs") and saved == "wrapper":
            self.ctx = "init"  # KernelBench boilerplate copied from the reference (never called)
        elif saved != "kernel":
            self.ctx = "wrapper"
        for a in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(a)
        all_args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        all_args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
        for a in all_args:
            if a.annotation is not None:
                self.visit(a.annotation)
        if node.returns is not None:
            self.visit(node.returns)
        for stmt in node.body:
            self.visit(stmt)
        self.ctx = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "Model":
            self.flag(node, "reference_call", "defining a class named Model (the reference's)")
        if _is_dunder(node.name):
            self.flag(node, "dunder", f"class {node.name}")
        for kw in node.keywords:
            self.flag(node, "reflection", f"class keyword {kw.arg}= (metaclasses) is not allowed")
        for b in node.bases:
            self.visit(b)
        for d in node.decorator_list:
            self.visit(d)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.visit_FunctionDef(stmt, in_class=node)
            else:
                self.visit(stmt)


def _collect_self_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" \
                and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
    return names


def _structure(tree: ast.Module) -> Violation | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "ModelNew":
            if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "forward"
                   for s in stmt.body):
                return None
            return Violation("structure", stmt.lineno, stmt.col_offset,
                             "class ModelNew has no forward method")
    return Violation("structure", 1, 0, "no module-level class ModelNew(nn.Module)")


def parse(source: str) -> ast.Module:
    """ast.parse; raises SyntaxError (the evaluator's compile_error)."""
    return ast.parse(source, filename="<generated>", mode="exec")


def screen(source: str) -> Violation | None:
    """None when the program passes; else the first violation (by line), with the rest in
    ``others``. Raises SyntaxError when the source does not parse."""
    if len(source.encode("utf-8", errors="replace")) > MAX_SOURCE_BYTES:
        return Violation("size", 1, 0, f"source over {MAX_SOURCE_BYTES} bytes")
    tree = parse(source)
    s = _Screen()
    s.self_names = _collect_self_names(tree)
    for n in ast.walk(tree):  # aliases first, so a use before its import still resolves
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name in ALLOWED_IMPORTS:
                    s.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom) and not n.level and n.module in ALLOWED_IMPORTS:
            for a in n.names:
                if a.name != "*":
                    s.alias[a.asname or a.name] = f"{n.module}.{a.name}"
    s.visit(tree)
    found = sorted(s.violations, key=lambda v: (v.line, v.col))
    if not found:
        return _structure(tree)
    first = found[0]
    first.others = found[1:]
    return first
