"""Run-time integrity of the interpreter the verdicts are computed in.

Generated code runs in the sandbox child next to the code that judges it
(child.py): the comparison with the reference (check.compare), the
launch capture, the benchmark. Static screening refuses the spellings of
monkey-patching it knows (``x.attr = v`` on anything but ``self``), but a
spelling it does not know -- a function whose parameter is named ``self``,
``for torch.Tensor.tolist in [f]``, ``type(x)`` passed on -- patches
``torch.Tensor.tolist`` just as well, and every verdict read through it is
forged. The audit hook does not see it either: torch's tensor metaclass sets
class attributes without the ``object.__setattr__`` audit event.

So the judge does not trust the spelling but the state. ``Snapshot.take()``,
before the generated module is imported (everything trusted is loaded),
records by identity:

* every module's namespace (``vars(module)`` of each module in sys.modules),
* every class's namespace (all classes: ``object``'s subclasses, recursively),
* every module-level object's instance namespace (one level: ``triton.knobs``'
  groups, a JITFunction's attributes),
* every Python function's behaviour found in those namespaces (``__code__``,
  ``__defaults__``, ``__kwdefaults__``, its ``__dict__``, its closure cells),
* interpreter-wide hooks: ``sys.gettrace`` / ``getprofile``, torch's
  function-mode and dispatch-mode stacks, the set of Python threads.

What counts as a change: in a class, any entry added, replaced or deleted; in
a module, any entry replaced or deleted, and a callable added -- except a
library's plain data (an int, str, None ... flag or counter, set lazily) and a
library global that was None and now holds a non-callable instance of a class
that existed at take() (a singleton built lazily: ``tempfile._name_sequence``
on Triton's first compile); the evaluator's own modules count every entry; in a module-level object, a
callable replaced. ``Snapshot.changes()`` lists what differs, by name. The harness calls it after
every phase in which untrusted code ran (import, ``ModelNew(...)``, each
``forward``, the benchmark) and again after each verdict is computed: a patch
by any spelling -- setattr, ``__dict__``, ``object.__setattr__``,
``type.__setattr__``, ctypes into a namespace, gc referents, importlib -- that
is still in place when a verdict is computed is seen, and the evaluation is
``rejected`` (rule ``monkeypatch``). A patch made and undone inside
``forward`` changes no verdict. New modules (imports) and new classes are not
changes; an attribute added to a module that is the submodule of that name
(an import's side effect) is not either.

Cost: ~0.1 s to take, a few tens of ms per comparison (torch + Triton loaded:
~1200 modules, ~5000 classes, ~130 k names, ~20 k functions).
"""
from __future__ import annotations

import sys
import types
from operator import is_

_MISSING = object()

# Attributes that torch / Triton / the standard library assign lazily while
# honest code runs (caches, counters, lazy imports' bookkeeping). They hold
# data, not behaviour the verdict path calls.
LAZY_NAMES = frozenset({
    "__warningregistry__", "_warn_once_cache", "__annotations__", "_abc_impl",
    "_lazy_seed_tracker", "_queued_calls", "_initialized", "_is_in_bad_fork",
    "_tls", "_cached_device_count", "_device_count_nvml_cached",
})
# Module namespaces that change with the harness's own progress (its state,
# not behaviour), or belong to the untrusted program.
SKIP_MODULES = ("__main__", "__mp_main__", "kiln_generated", "kiln_reference", "linecache", "warnings")


def _function_state(f) -> tuple:
    """A function's behaviour, flat, for an identity comparison (map(is_)):
    its code, defaults, keyword defaults, attributes and closure cells."""
    d = f.__dict__
    cells = f.__closure__
    return (f.__code__, f.__defaults__, f.__kwdefaults__, len(d), *d, *d.values(),
            *(_cell(c) for c in cells or ()))


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _plain(v) -> bool:
    return v is _MISSING or type(v) in _PLAIN


def _frozen(ns) -> tuple:
    """(keys, values) of a namespace, in its order."""
    return tuple(ns), tuple(ns.values())


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _all_classes() -> list:
    out, seen, stack = [], set(), [object]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        out.append(c)
        try:
            stack.extend(type.__subclasses__(c))
        except TypeError:
            pass
    return out


def _plain_function(v):
    """The Python function behind a namespace value, or None."""
    t = type(v)
    if t is types.FunctionType:
        return v
    if t in (staticmethod, classmethod):
        f = v.__func__
        return f if type(f) is types.FunctionType else None
    return None


class Snapshot:
    """The identities of the interpreter's namespaces at take() (module docstring)."""

    def __init__(self):
        # (name, owner, copy): owner a class, a module's namespace dict or an
        # object's instance dict
        self.namespaces: list[tuple[str, object, tuple]] = []
        self.functions: list[tuple[str, object, tuple]] = []
        self.hooks: dict = {}
        self.threads: set = set()
        self.module_names: set[str] = set()
        self.class_ids: set[int] = set()  # every class that existed at take()

    @classmethod
    def take(cls, skip: tuple = ()) -> "Snapshot":
        """skip: module-name prefixes whose namespaces and classes are left out
        (under the interpreter, triton.language: interpreter.py patches it
        around every interpreted launch)."""
        s = cls()
        skipped = SKIP_MODULES + tuple(skip)
        seen_fn: set[int] = set()
        instances: list[tuple[str, object]] = []

        def functions_of(where: str, ns: dict) -> None:
            for k, v in ns.items():
                f = _plain_function(v)
                if f is not None and id(f) not in seen_fn:
                    seen_fn.add(id(f))
                    s.functions.append((f"{where}.{k}", f, _function_state(f)))

        for name, m in list(sys.modules.items()):
            if not isinstance(m, types.ModuleType) or name.startswith(skipped):
                continue
            ns = m.__dict__
            s.namespaces.append((name, ns, _frozen(ns)))
            s.module_names.add(name)
            functions_of(name, ns)
            for k, v in ns.items():
                if not issubclass(type(v), (type, types.ModuleType, types.FunctionType,
                                            types.BuiltinFunctionType)):
                    try:
                        d = object.__getattribute__(v, "__dict__")
                    except (AttributeError, TypeError):
                        continue
                    if isinstance(d, dict):
                        instances.append((f"{name}.{k}", v))
        for c in _all_classes():
            s.class_ids.add(id(c))
            owner = type.__dict__["__module__"].__get__(c) if "__module__" in type.__dict__ else "?"
            if isinstance(owner, str) and owner.startswith(skipped):
                continue
            where = f"{owner}.{getattr(c, '__qualname__', '?')}"
            ns = type.__dict__["__dict__"].__get__(c)  # the class's own mappingproxy
            s.namespaces.append((where, c, _frozen(ns)))
            functions_of(where, ns)
        seen_inst: set[int] = set()
        for where, v in instances:
            if id(v) in seen_inst:
                continue
            seen_inst.add(id(v))
            d = object.__getattribute__(v, "__dict__")
            s.namespaces.append((where, d, _frozen(d)))
            functions_of(where, d)
        s.hooks = _hooks()
        s.threads = set(sys._current_frames())
        return s

    def _lazy_instance(self, v) -> bool:
        """v is plain data built by trusted code: an instance, not callable,
        of a class that existed before the untrusted program ran (so its
        behaviour is in the snapshot), not a class, module or function."""
        t = type(v)
        return id(t) in self.class_ids and not isinstance(v, (type, types.ModuleType)) \
            and not callable(v)

    def changes(self, limit: int = 10) -> list[str]:
        """What differs from take(), by name (at most `limit`); [] when nothing."""
        out: list[str] = []
        for where, owner, (keys, values) in self.namespaces:
            now = owner if isinstance(owner, dict) else type.__dict__["__dict__"].__get__(owner)
            if len(now) == len(keys) and all(map(is_, now, keys)) and all(map(is_, now.values(), values)):
                continue
            before = dict(zip(keys, values))
            kind = "class" if isinstance(owner, type) else \
                "module" if where in self.module_names else "object"
            for k, v in before.items():
                if k in LAZY_NAMES:
                    continue
                cur = now.get(k, _MISSING)
                if cur is not v:
                    if kind == "object" and not (callable(v) or callable(cur)):
                        continue  # an object's data (a cache, a counter), not its behaviour
                    if kind == "module" and _plain(v) and _plain(cur) and \
                            not where.startswith("kiln_worker"):
                        continue  # a library's flag or counter (lazy state); the evaluator's own count
                    if kind == "module" and v is None and self._lazy_instance(cur) and \
                            not where.startswith("kiln_worker"):
                        continue  # a lazily built singleton (tempfile._name_sequence on a first compile)
                    out.append(f"{where}.{k} was {'deleted' if cur is _MISSING else 'replaced'}")
            for k in now.keys() - before.keys():
                if k in LAZY_NAMES:
                    continue
                v = now[k]
                if issubclass(type(v), types.ModuleType) and getattr(v, "__name__", "") == f"{where}.{k}":
                    continue  # a submodule imported lazily
                if isinstance(owner, type) or isinstance(v, (types.FunctionType, types.MethodType, type)) \
                        or callable(v):
                    out.append(f"{where}.{k} was added")
            if len(out) >= limit:
                return out[:limit]
        for where, f, before in self.functions:
            if not _same_state(_function_state(f), before):
                out.append(f"{where}: its code, defaults, attributes or closure were replaced")
                if len(out) >= limit:
                    return out[:limit]
        now = _hooks()
        for k, v in self.hooks.items():
            if now.get(k) is not v and now.get(k) != v:
                out.append(f"{k} changed")
        extra = set(sys._current_frames()) - self.threads
        if extra:
            out.append(f"{len(extra)} Python thread(s) started by the program are still running")
        return out[:limit]


def _same_state(a: tuple, b: tuple) -> bool:
    """Identity comparison of two _function_state tuples."""
    return len(a) == len(b) and all(map(is_, a, b))


def _hooks() -> dict:
    out: dict = {"sys.gettrace()": sys.gettrace(), "sys.getprofile()": sys.getprofile()}
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            out["torch function-mode stack depth"] = torch._C._len_torch_function_stack()
            out["torch dispatch-mode stack depth"] = torch._C._len_torch_dispatch_stack()
        except Exception:  # pragma: no cover - an older torch
            pass
    return out
