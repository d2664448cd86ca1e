"""The `package_info` method: what `kiln package` writes for one variant.

Request: {"job": JOB, "config": CONFIG, "artifact": ARTIFACT (the `artifact`
of this candidate's `evaluate`), "neighbours": bool, "verify_seed": S}.

Result (docs/package-format.md, KERNEL.tensors and VARIANT grid / args /
assume / range, verify/<file>.json):

    {"tensors": [{"name", "role", "dtype", "shape": [E, ...]}, ...],
     "grid": [E, E, E],
     "args": [{"name", "type", "hidden"?, "bind": {...}}, ...],
     "zero_before_launch": ["c_ptr", ...]?,
     "assume": [{"expr": E, "multiple_of": 16}, ...],
     "range": {"exact": true} | {"dims": [{"min", "max", "multiple_of"}, ...],
                                 "verified_shapes": [[...], ...]},
     "range_notes": ["...", ...], "verify": {...kiln-verify/1...},
     "timings": {"launch_s", "range_s", "verify_s"}}

1. **Launch.** launch_exprs.launch gives the tensors, grid and argument
   expressions; they are checked against the template's own `compile_spec`
   at the job shape (its grid, the values it gives each scalar argument, the
   byte size and dtype of each pointer's tensor) and the answer is refused
   when they disagree. Arguments are bound in the artifact's order (the code
   object's parameters: Triton's value-1 specialisations are not among them;
   the two hidden scratch pointers last). `assume`: the integer arguments
   Triton specialised as multiples of 16 (compile_spec's attrs).
   `zero_before_launch` (only when compile_spec's spec names any): the
   pointer arguments whose tensors the loader clears before every launch (a
   split-K kernel adds into its output); each must be an argument bound to a
   tensor.
2. **Range** (with `neighbours`). Per dimension, neighbouring and boundary
   sizes (+-1, half, double, the multiples of the config's blocks and of 16
   around the size and one off them, 1), the other dimensions kept. Each is
   checked: compile_spec must give the same specialisation (kernel,
   signature, constexprs, attrs, options -- else it would be another code
   object: refused without compiling, the difference is the reason), the
   launch expressions must equal its grid and arguments, and where the
   shape is small enough for the executing device (the CPU interpreter: a
   few thousand elements; a GPU: an eighth of its free memory, at most
   8 GiB) the evaluator compiles it for the target -- the code object's
   sha256 must be the artifact's -- and checks it (one seed, its tolerances).
   Per dimension the range is the widest interval around the job's size,
   on a lattice of multiple_of (a power of two dividing the size), holding
   only passing sizes among those tried; it is then cut before any size of
   that lattice (up to 512 of them) where compile_spec says the artifact's
   code object could not serve (base_serves: another kernel or constexpr,
   a specialisation fact lost, an i32 argument grown to i64). The two
   corners of the box (all minima, all maxima) are checked too (one too
   large to run is kept with a note). A failing corner, or no passing
   neighbour: {"exact": true}. `range_notes` says which neighbour failed
   and why. Neighbours run only when the job shape itself fits the device.
3. **Verification data**: verify_data.build, at the job shape.
"""
from __future__ import annotations

import contextlib
import copy
import math
import re
import sys
import time
from typing import Any

from . import launch_exprs, verify_data
from ..evaluation.evaluate import BadRequest, job_fields

# CUtensorMapSwizzle (Triton's tensordesc_meta["swizzle"]) -> bytes
_SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}
# Neighbours run on the CPU interpreter only while this small.
CPU_MAX_ELEMENTS = 1 << 15
CPU_MAX_FLOPS = 1 << 23
CPU_MAX_PROGRAMS = 256
GPU_MAX_BYTES = 8 << 30
MAX_CANDIDATES_PER_DIM = 8
SWEEP_POINTS = 512


class PackageInfoError(Exception):
    """The launch expressions disagree with the template, or the request does
    not describe this config's code object (answered ok:false)."""


# ---------------------------------------------------------------------------
# compile_spec, with the values it gave each argument
# ---------------------------------------------------------------------------

@contextlib.contextmanager
def _capturing_spec(lib, sink: list):
    """While active, every `common.spec(kernel, args, ...)` call of the
    template library appends its args [(name, type, value)] to `sink`."""
    common = sys.modules.get(f"{lib.package}.common")
    if common is None:
        lib._ensure_package()
        import importlib
        common = importlib.import_module(f"{lib.package}.common")
    original = common.spec

    def spy(kernel, args, *rest, **kw):
        sink.append([tuple(a) for a in args])
        return original(kernel, args, *rest, **kw)

    common.spec = spy
    try:
        yield
    finally:
        common.spec = original


def traced_spec(lib, mod, op, shape, dtype, params, config, target) -> tuple[dict, list]:
    """(compile_spec's dict, its argument list [(name, type, value)])."""
    sink: list = []
    with _capturing_spec(lib, sink):
        spec = mod.compile_spec(op, list(shape), dtype, params, config, target)
    if not sink:
        raise PackageInfoError(f"{op}: compile_spec did not go through common.spec")
    return spec, sink[-1]


def _fn_name(fn) -> str:
    inner = getattr(fn, "fn", fn)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', getattr(inner, '__name__', '?'))}"


def spec_difference(a: dict, b: dict) -> str | None:
    """Why two compile_specs would give different code objects, or None."""
    if _fn_name(a["fn"]) != _fn_name(b["fn"]):
        return f"another kernel ({_fn_name(b['fn']).rsplit('.', 1)[-1]})"
    sa, sb = dict(a["signature"]), dict(b["signature"])
    for name in sa:
        if sa[name] != sb.get(name):
            if sb.get(name) == "constexpr":
                return f"argument {name} becomes the constant {b['constexprs'].get(name)!r}"
            return f"argument {name}'s type {sa[name]} becomes {sb.get(name)}"
    ca, cb = dict(a["constexprs"]), dict(b["constexprs"])
    for name in sorted(set(ca) | set(cb)):
        if ca.get(name) != cb.get(name):
            return f"constexpr {name} {ca.get(name)!r} becomes {cb.get(name)!r}"
    names = list(getattr(a["fn"], "arg_names", []))
    aa, ab = dict(a.get("attrs") or {}), dict(b.get("attrs") or {})
    for key in sorted(set(aa) | set(ab)):
        if aa.get(key) != ab.get(key):
            return f"argument {_arg_name(names, key)}'s specialisation {aa.get(key)} becomes {ab.get(key)}"
    return _options_change(a, b)


def base_serves(base: dict, other: dict) -> str | None:
    """Why the code object of `base` cannot launch where compile_spec gives
    `other`, or None when it can: the same kernel, constexprs and options,
    and every fact base was specialised on still true (an integer that is 1
    there, or a multiple of 16 that base does not assume, is only a
    specialisation base lacks: its code is general in them)."""
    if _fn_name(base["fn"]) != _fn_name(other["fn"]):
        return f"another kernel ({_fn_name(other['fn']).rsplit('.', 1)[-1]})"
    sb, so = dict(base["signature"]), dict(other["signature"])
    cb, co = dict(base["constexprs"]), dict(other["constexprs"])
    for name, ty in sb.items():
        if ty == "constexpr":
            if cb.get(name) != co.get(name):
                return f"constexpr {name} {cb.get(name)!r} becomes {co.get(name)!r}"
        elif so.get(name) == "constexpr":
            if co.get(name) != 1:
                return f"argument {name} becomes the constant {co.get(name)!r}"
        elif so.get(name) != ty and not (ty == "i64" and so.get(name) == "i32"):
            return f"argument {name}'s type {ty} becomes {so.get(name)}"
    names = list(getattr(base["fn"], "arg_names", []))
    ab, ao = dict(base.get("attrs") or {}), dict(other.get("attrs") or {})
    for key, facts in ab.items():
        missing = [f for f in facts or [] if list(f) not in [list(g) for g in ao.get(key) or []]]
        if missing:
            return f"argument {_arg_name(names, key)} loses {missing}"
    return _options_change(base, other)


def _arg_name(names, key):
    """The argument an attrs key (an index, or a tuple starting with one) names."""
    i = key[0] if isinstance(key, tuple) and key else key
    return names[i] if isinstance(i, int) and i < len(names) else key


def _options_change(a: dict, b: dict) -> str | None:
    """Options, or the tensors to clear before a launch, that differ (the
    variant carries both)."""
    if dict(a.get("options") or {}) != dict(b.get("options") or {}):
        return f"options {a.get('options')} become {b.get('options')}"
    za, zb = list(a.get("zero_before_launch") or []), list(b.get("zero_before_launch") or [])
    if za != zb:
        return f"zero_before_launch {za} becomes {zb}"
    return None


# ---------------------------------------------------------------------------
# the launch at a shape against compile_spec
# ---------------------------------------------------------------------------

def tensor_shapes(L: launch_exprs.Launch, shape) -> list[list[int]]:
    return [[e.eval(shape) for e in t["shape"]] for t in L.tensors]


def launch_problems(L: launch_exprs.Launch, spec: dict, args: list, shape) -> list[str]:
    """Where the expressions evaluated at `shape` differ from compile_spec's
    launch there ([] when they agree)."""
    problems = []
    grid = [e.eval(shape) for e in L.grid]
    if grid != [int(g) for g in spec["grid"]]:
        problems.append(f"grid {grid} != compile_spec's {list(spec['grid'])}")
    shapes = tensor_shapes(L, shape)
    seen = set()
    for name, ty, value in args:
        seen.add(name)
        if ty.startswith("*"):
            i = L.pointers.get(name)
            if i is None:
                problems.append(f"pointer argument {name}: no tensor")
                continue
            t = L.tensors[i]
            if ty[1:] != t["dtype"]:
                problems.append(f"pointer argument {name} is {ty}, its tensor {t['name']} {t['dtype']}")
            nbytes = math.prod(shapes[i]) * _element_bytes(t["dtype"])
            if isinstance(value, int) and value != nbytes:
                problems.append(f"pointer argument {name}: compile_spec's tensor of {value} bytes, "
                                f"tensor {t['name']} {shapes[i]} has {nbytes}")
        elif ty.startswith("tensordesc"):
            if name not in L.tma:
                problems.append(f"descriptor argument {name}: no TMA binding")
        elif isinstance(value, int) and not isinstance(value, bool):
            e = L.ints.get(name)
            if e is None:
                problems.append(f"integer argument {name}: no expression")
            elif e.eval(shape) != value:
                problems.append(f"integer argument {name}: {e} = {e.eval(shape)}, compile_spec gives {value}")
    extra = [n for n in L.ints if n not in seen and not any(n.startswith(d + ".") for d in L.tma)]
    extra += [n for n in L.pointers if n not in seen]
    if extra:
        problems.append(f"expressions for arguments compile_spec does not pass: {extra}")
    return problems


def _element_bytes(dtype: str) -> int:
    return {"fp32": 4, "fp16": 2, "bf16": 2, "i8": 1, "fp64": 8, "i64": 8}[dtype]


# ---------------------------------------------------------------------------
# binding the code object's arguments
# ---------------------------------------------------------------------------

def bind_args(art_args: list, L: launch_exprs.Launch, spec: dict, values: dict) -> list[dict]:
    out = []
    for a in art_args:
        name, ty = a["name"], str(a["type"])
        arg: dict[str, Any] = {"name": name, "type": ty}
        if a.get("hidden"):
            arg["hidden"] = True
            kind = "global" if name.startswith("global") else "profile" if name.startswith("profile") else None
            if kind is None:
                raise PackageInfoError(f"hidden argument {name}: not a scratch pointer this worker knows")
            arg["bind"] = {"scratch": kind}
        elif ty == "nvTmaDesc":
            d = L.tma.get(name)
            if d is None:
                raise PackageInfoError(f"descriptor argument {name}: no TMA binding")
            # the box and swizzle Triton's launcher encodes (the compiler's
            # tensordesc_meta): the box's inner size is the swizzle width's,
            # not the descriptor's block_shape
            tm = a.get("tensormap") or {}
            swz = _SWIZZLE_BYTES.get(tm.get("swizzle"))
            box = tm.get("block_size")
            if swz is None or not box:
                raise PackageInfoError(f"descriptor argument {name}: the artifact has no tensormap "
                                       "(the compiler's tensordesc_meta: swizzle, block_size)")
            arg["bind"] = {"tma": {"tensor": d["tensor"], "dims": [str(e) for e in d["dims"]],
                                   "strides_bytes": [str(e) for e in d["strides_bytes"]],
                                   "box": [int(x) for x in box], "elem": a.get("dtype") or L.tensors[d["tensor"]]["dtype"],
                                   "swizzle_bytes": swz}}
        elif ty.startswith("*"):
            if name not in L.pointers:
                raise PackageInfoError(f"pointer argument {name}: no tensor")
            arg["bind"] = {"tensor": L.pointers[name]}
        elif name in L.ints:
            arg["bind"] = {"expr": str(L.ints[name])}
        elif name in values and isinstance(values[name], (int, float)) and not isinstance(values[name], bool):
            arg["bind"] = {"value": values[name]}
        else:
            raise PackageInfoError(f"argument {name} ({ty}): no binding")
        out.append(arg)
    return out


def zero_before_launch(spec: dict, args: list[dict]) -> list[str]:
    """compile_spec's "zero_before_launch" (pointer arguments whose tensors
    must be zeros when the kernel starts), each checked to be an argument
    bound to a tensor."""
    names = list(spec.get("zero_before_launch") or [])
    bound = {a["name"] for a in args if "tensor" in a.get("bind", {})}
    for name in names:
        if name not in bound:
            raise PackageInfoError(f"zero_before_launch names {name!r}, not a pointer argument bound to a tensor")
    return names


def assumptions(L: launch_exprs.Launch, spec: dict) -> list[dict]:
    """The integer arguments Triton specialised as divisible by 16."""
    names = list(getattr(spec["fn"], "arg_names", []))
    out, seen = [], set()
    for key, attr in sorted(dict(spec.get("attrs") or {}).items()):
        i = key[0] if isinstance(key, tuple) else key
        name = names[i] if isinstance(i, int) and i < len(names) else None
        if name is None or name not in L.ints:
            continue
        for a in attr or []:
            if list(a[:1]) == ["tt.divisibility"]:
                text = str(L.ints[name])
                if text not in seen:
                    seen.add(text)
                    out.append({"expr": text, "multiple_of": int(a[1])})
    return out


def pinned_ones(L: launch_exprs.Launch, spec: dict) -> list[str]:
    """Integer arguments Triton turned into the constant 1 at this shape."""
    return [f"{name} ({L.ints[name]}) is 1 here: Triton made it the constant 1 in the code object"
            for name, v in dict(spec["constexprs"]).items() if name in L.ints and v == 1]


# ---------------------------------------------------------------------------
# neighbours
# ---------------------------------------------------------------------------

def dim_candidates(v: int, blocks: list[int], limit: int = MAX_CANDIDATES_PER_DIM) -> list[int]:
    """Sizes to try for one dimension of size v: v +- 1, v // 2, 2 v first,
    then the nearest of: the multiples of each block size (and of 16) just
    below and above v and one past them, and 1."""
    first = [v - 1, v + 1, v // 2, 2 * v]
    more = {1}
    for b in sorted(set(blocks) | {16}):
        if b > 1:
            up = (v // b + 1) * b
            down = ((v - 1) // b) * b
            more |= {up, up - 1, down, down + 1}
    out = []
    for x in first + sorted(more, key=lambda x: (abs(x - v), x)):
        if x >= 1 and x != v and x not in out:
            out.append(x)
    return sorted(out[:limit])


class _Neighbours:
    def __init__(self, ctx: "_Context"):
        self.ctx = ctx
        self.results: dict[tuple, tuple[str, str]] = {}  # shape -> (pass|fail|skipped, why)

    def budget_reason(self, shape) -> str | None:
        c = self.ctx
        sizes = tensor_shapes(c.L, shape)
        elems = sum(math.prod(s) for s in sizes)
        nbytes = sum(math.prod(s) * _element_bytes(t["dtype"]) for s, t in zip(sizes, c.L.tensors))
        programs = math.prod(e.eval(shape) for e in c.L.grid)
        if not c.dev.is_gpu:
            try:
                flops = int(c.mod.traffic(c.op, list(shape), c.dtype, c.params).get("flops", 0))
            except Exception:  # noqa: BLE001
                flops = 0
            if elems > CPU_MAX_ELEMENTS or flops > CPU_MAX_FLOPS or programs > CPU_MAX_PROGRAMS:
                return (f"too large for the CPU interpreter ({elems} elements, {flops} flops, "
                        f"{programs} programs)")
            return None
        limit = GPU_MAX_BYTES
        try:
            import torch
            free, _ = torch.cuda.mem_get_info()
            limit = min(limit, free // 8)
        except Exception:  # noqa: BLE001
            pass
        if nbytes > limit:
            return f"too large for the GPU's free memory ({nbytes} bytes of tensors, limit {limit})"
        return None

    def check(self, shape) -> tuple[str, str]:
        key = tuple(int(s) for s in shape)
        if key not in self.results:
            self.results[key] = self._check(list(key))
        return self.results[key]

    def _check(self, shape) -> tuple[str, str]:
        c = self.ctx
        try:
            spec, args = traced_spec(c.lib, c.mod, c.op, shape, c.dtype, c.params, c.config, c.target)
        except Exception as exc:  # noqa: BLE001
            return "fail", f"compile_spec rejects it: {exc}"
        diff = spec_difference(c.spec, spec)
        if diff:
            return "fail", f"another code object: {diff}"
        try:
            problems = launch_problems(c.L, spec, args, shape)
        except Exception as exc:  # noqa: BLE001
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            return "fail", "the launch expressions disagree with compile_spec: " + "; ".join(problems)
        why = self.budget_reason(shape)
        if why:
            return "skipped", why
        job = dict(c.job, shape=list(shape), benchmark={"runs": 0, "warmup": 0},
                   validation=dict(c.job.get("validation") or {}, seeds=[0]))
        try:
            res = c.evaluation.run(job, c.config, None)
        except Exception as exc:  # noqa: BLE001
            return "fail", f"evaluation failed: {type(exc).__name__}: {exc}"
        if res.get("status") != "ok":
            return "fail", f"{res.get('status')}: {str(res.get('message', ''))[:400]}"
        sha = (res.get("artifact") or {}).get("sha256")
        if c.sha and sha != c.sha:
            return "fail", f"a different code object (sha256 {str(sha)[:12]}, the artifact's {c.sha[:12]})"
        return "pass", "same code object, correct"


def _interval(v: int, results: dict[int, str], required: int) -> tuple[int, int, int]:
    """(lo, hi, multiple_of) for one dimension: the widest run of passing
    sizes around v on a lattice of a power-of-two multiple_of (a multiple of
    `required`, dividing v), any failing or skipped size on the lattice
    ending the run. Ties: the lattice holding more of the passing sizes,
    then the larger multiple_of (fewer sizes taken on trust)."""
    best, best_score = (v, v, required), (0, 0, 0)
    m = required
    while v % m == 0 and m <= v:
        lattice = sorted(x for x in results if x % m == 0)
        lo = hi = v
        inside = 0
        for x in (x for x in lattice if x > v):
            if results[x] != "pass":
                break
            hi, inside = x, inside + 1
        for x in sorted((x for x in lattice if x < v), reverse=True):
            if results[x] != "pass":
                break
            lo, inside = x, inside + 1
        score = (hi - lo, inside, m)
        if hi > lo and score > best_score:
            best, best_score = (lo, hi, m), score
        m *= 2
    return best


def _lattice(v: int, lo: int, hi: int, m: int, cap: int = SWEEP_POINTS) -> list[int]:
    """The sizes lo..hi on multiples of m (all, or `cap` of them spread out
    with both ends and the neighbours of v), v left out."""
    pts = list(range(lo, hi + 1, m))
    if len(pts) > cap:
        step = len(pts) / cap
        keep = {pts[int(i * step)] for i in range(cap)} | {lo, hi, v - m, v + m}
        pts = sorted(x for x in keep if lo <= x <= hi)
    return [x for x in pts if x != v]


def _sweep(ctx: "_Context", d: int, r: tuple, notes: list) -> tuple:
    """The interval of dimension d cut before the first size (on its
    lattice, the other dimensions at the job's) where the artifact's code
    object cannot serve: compile_spec only, no compile (base_serves)."""
    lo, hi, m = r
    v = ctx.shape[d]
    for x in _lattice(v, lo, hi, m):
        s = list(ctx.shape)
        s[d] = x
        try:
            spec, _ = traced_spec(ctx.lib, ctx.mod, ctx.op, s, ctx.dtype, ctx.params, ctx.config, ctx.target)
            why = base_serves(ctx.spec, spec)
        except Exception as exc:  # noqa: BLE001
            why = f"compile_spec rejects it: {exc}"
        if why:
            notes.append(f"{s}: inside the tried sizes but {why}: the range stops short of it")
            if x > v:
                hi = min(hi, x - m)
            else:
                lo = max(lo, x + m)
    return lo, hi, m


def compute_range(ctx: "_Context") -> tuple[dict, list[str]]:
    shape = ctx.shape
    notes: list[str] = []
    nb = _Neighbours(ctx)
    why = nb.budget_reason(shape)
    if why:
        return {"exact": True}, [f"no neighbours checked: the job shape is {why}"]
    blocks = [int(v) for k, v in ctx.config.items() if k.upper().startswith("BLOCK") and isinstance(v, int)]
    # a dimension the code object's divisibility assumption names alone keeps it
    required = {}
    for a in ctx.assume:
        m = re.fullmatch(r"s(\d+)", a["expr"])
        if m:
            required[int(m.group(1))] = max(required.get(int(m.group(1)), 1), a["multiple_of"])
    verified = [list(shape)]
    ranges = []
    for d, v in enumerate(shape):
        per: dict[int, str] = {}
        for x in dim_candidates(v, blocks):
            s = list(shape)
            s[d] = x
            status, reason = nb.check(s)
            per[x] = status
            if status == "pass":
                verified.append(s)
            else:
                notes.append(f"{s}: {status}: {reason}")
        ranges.append(_interval(v, per, required.get(d, 1)))
    ranges = [_sweep(ctx, d, r, notes) for d, r in enumerate(ranges)]
    if all(lo == hi for lo, hi, _ in ranges):
        notes.insert(0, "no neighbour passed: exact shape only")
        return {"exact": True}, notes
    for corner in ([lo for lo, _, _ in ranges], [hi for _, hi, _ in ranges]):
        if sum(1 for c, v in zip(corner, shape) if c != v) < 2:
            continue  # one dimension off: already checked
        status, reason = nb.check(corner)
        if status == "pass":
            verified.append(corner)
        elif status == "skipped":
            notes.append(f"corner {corner}: {reason}; the range keeps it (same specialisation and launch)")
        else:
            notes.insert(0, f"corner {corner} of the range failed ({reason}): exact shape only")
            return {"exact": True}, notes
    dims_ = [{"min": lo, "max": hi, "multiple_of": m} for lo, hi, m in ranges]
    # the shapes that passed and lie in the range (a passing size the sweep
    # or the lattice left outside is not claimed)
    inside = [s for s in verified if all(lo <= x <= hi and x % m == 0 for x, (lo, hi, m) in zip(s, ranges))]
    return {"dims": dims_, "verified_shapes": inside}, notes


# ---------------------------------------------------------------------------
# the method
# ---------------------------------------------------------------------------

class _Context:
    pass


VERIFY_CACHE_ENTRIES = 2


def verify_for(evaluation, key: tuple, build):
    """The verification data for `key`, built once per worker: the variants of
    one kernel (a shortlist of up to 8) ask for the same inputs, seed and
    tensors, and the float64 reference at full size is the dominant cost of
    packaging them. The last VERIFY_CACHE_ENTRIES are kept."""
    cache = getattr(evaluation, "verify_cache", None)
    if cache is None:
        return build()
    if key not in cache:
        while len(cache) >= VERIFY_CACHE_ENTRIES:
            cache.pop(next(iter(cache)))
        cache[key] = build()
    return copy.deepcopy(cache[key])


def run(lib, evaluation, dev, req: dict) -> dict:
    t0 = time.perf_counter()
    job = req.get("job")
    op, shape, dtype, params, target = job_fields(lib, job)
    config = req.get("config")
    if not isinstance(config, dict):
        raise BadRequest("'config' must be an object")
    artifact = req.get("artifact") or {}
    if not isinstance(artifact, dict):
        raise BadRequest("'artifact' must be an object (the evaluate answer's artifact)")
    seed = req.get("verify_seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 64:
        raise BadRequest("'verify_seed' must be an integer in [0, 2^64)")
    mod = lib.launch_module(op)

    ctx = _Context()
    ctx.lib, ctx.evaluation, ctx.dev, ctx.mod = lib, evaluation, dev, mod
    ctx.job, ctx.op, ctx.shape, ctx.dtype, ctx.params, ctx.config, ctx.target = \
        job, op, list(shape), dtype, params, config, target
    ctx.sha = artifact.get("sha256")
    ctx.L = L = launch_exprs.launch(lib, op, len(shape), dtype, params, config, target)
    try:
        ctx.spec, spec_args = traced_spec(lib, mod, op, shape, dtype, params, config, target)
    except Exception as exc:
        raise PackageInfoError(f"compile_spec rejects this config at the job shape: {exc}") from exc
    problems = launch_problems(L, ctx.spec, spec_args, shape)
    if problems:
        raise PackageInfoError("the launch expressions disagree with the template's compile_spec at "
                               f"{shape}: " + "; ".join(problems))
    values = {name: value for name, _, value in spec_args}
    art_args = artifact.get("args")
    if not art_args:
        from ..codeobject.targetcompile import kernel_args
        meta = artifact.get("metadata") or {}
        art_args = kernel_args(ctx.spec, None, meta.get("tensordesc_meta"))
    if artifact.get("grid") and [int(g) for g in artifact["grid"]] != [e.eval(shape) for e in L.grid]:
        raise PackageInfoError(f"the artifact's grid {artifact['grid']} is not this config's at {shape} "
                               f"({[e.eval(shape) for e in L.grid]})")
    kname = getattr(getattr(ctx.spec["fn"], "fn", None), "__name__", None)
    if artifact.get("kernel_name") and kname and artifact["kernel_name"] != kname:
        raise PackageInfoError(f"the artifact's kernel {artifact['kernel_name']} is not this config's ({kname})")
    args = bind_args(art_args, L, ctx.spec, values)
    zero = zero_before_launch(ctx.spec, args)
    ctx.assume = assumptions(L, ctx.spec)
    notes = pinned_ones(L, ctx.spec)
    t1 = time.perf_counter()

    if req.get("neighbours"):
        if not ctx.sha:
            notes.append("the artifact has no sha256: the neighbours' code objects are not compared with it")
        rng, more = compute_range(ctx)
        notes += more
    else:
        rng = {"exact": True}
        notes.append("neighbours not requested")
    t2 = time.perf_counter()

    shapes = tensor_shapes(L, shape)
    lock = None
    if dev.is_gpu:
        from ..processes.gpulock import gpu_lock
        lock = gpu_lock(shared=True, kind="setup")  # the reference's GPU work, as a check's
    verify = verify_for(evaluation, (op, repr(shape), dtype, repr(params), seed, repr(L.tensors), repr(shapes)),
                        lambda: verify_data.build(mod, op, shape, dtype, params, job, L.tensors, shapes, seed,
                                                  dev.torch_device if dev.is_gpu else "cpu", lock))
    t3 = time.perf_counter()
    out = {
        "tensors": [{"name": t["name"], "role": t["role"], "dtype": t["dtype"],
                     "shape": [str(e) for e in t["shape"]]} for t in L.tensors],
        "grid": [str(e) for e in L.grid],
        "args": args,
        "assume": ctx.assume,
        "range": rng,
        "range_notes": notes,
        "verify": verify,
        "timings": {"launch_s": t1 - t0, "range_s": t2 - t1, "verify_s": t3 - t2},
    }
    if zero:
        out["zero_before_launch"] = zero
    return out
