"""Every template's launch as expressions of the job's shape (s0, s1, ...).

For a packaged kernel the loader needs, for a shape it is asked to launch: the
tensors (their shapes and dtypes, in kiln_launch's order: the inputs as
`make_inputs` returns them, then the output of `output_like`), the grid, and a
binding for every kernel argument. `launch(lib, op, rank, dtype, params,
config, target)` answers that per template family, as a `Launch`:

* `tensors`: [{"name", "role", "dtype", "shape": [Expr]}];
* `grid`: [Expr] * 3;
* `pointers`: {kernel argument name: tensor index};
* `ints`: {kernel argument name: Expr} (integer scalars, including the shape
  and stride arguments Triton passes after a host-side TMA descriptor);
* `tma`: {descriptor argument name: {"tensor", "dims", "strides_bytes"}} for
  the Gluon attention kernel's host-side descriptors.

Written out per template rather than traced through `compile_spec`: the
templates branch on the shape (one-pass or looped kernels, persistent grids
clamped by min(...), EVEN_K flags), and a trace would only see the branch of
the shape it ran. Whatever branch-dependent facts the code object was
specialised on are constexprs or attrs of `compile_spec`, which package_info
compares shape by shape (package_info.spec_difference). package_info also
checks these expressions against compile_spec's own values at the job shape
(and at every neighbour) before it answers, and tests/python/
test_package_info.py does so for every template over configs and shapes: a
template change these functions miss fails loudly instead of shipping a wrong
launch. Kept in the worker, not in kernels/, so the templates' hashes (and
with them every job key) do not change.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .shape_expr import Expr, cdiv, dims, emax, emin, product


@dataclass
class Launch:
    tensors: list = field(default_factory=list)
    grid: list = field(default_factory=list)
    pointers: dict = field(default_factory=dict)
    ints: dict = field(default_factory=dict)
    tma: dict = field(default_factory=dict)

    def tensor(self, name: str, role: str, dtype: str, shape: list, *pointer_names: str) -> int:
        i = len(self.tensors)
        self.tensors.append({"name": name, "role": role, "dtype": dtype, "shape": [Expr.of(d) for d in shape]})
        for p in pointer_names:
            self.pointers[p] = i
        return i


class UnknownTemplate(ValueError):
    """No launch description for this operator."""


def _grid(*g) -> list:
    g = [Expr.of(x) for x in g]
    return g + [Expr.of(1)] * (3 - len(g))


def _row_grid(rows: Expr, config: dict) -> list:
    """common.row_options: the row blocks, or a persistent grid of `programs`
    programs when that is smaller."""
    blocks = cdiv(rows, int(config["BLOCK_M"]))
    programs = int(config.get("programs", 0) or 0)
    return _grid(emin(programs, blocks) if programs > 0 else blocks)


def _elementwise(lib, op, rank, dtype, params, config, target) -> Launch:
    s = dims(rank)
    L = Launch()
    if op == "add":
        L.tensor("x", "input", dtype, s, "x_ptr")
        L.tensor("y", "input", dtype, s, "y_ptr")
        L.tensor("out", "output", dtype, s, "out_ptr")
        n = product(s)
        L.ints["n_elements"] = n
        L.grid = _grid(cdiv(n, int(config["BLOCK"])))
        return L
    M, N = s
    L.tensor("x", "input", dtype, [M, N], "x_ptr")
    L.tensor("bias", "input", dtype, [N], "bias_ptr")
    L.tensor("out", "output", dtype, [M, N], "out_ptr")
    L.ints.update(M=M, N=N)
    L.grid = _grid(cdiv(M, int(config["BLOCK_M"])), cdiv(N, int(config["BLOCK_N"])))
    return L


def _row_kernel(dtype: str, config: dict, per_column=(), out_dtype: str | None = None,
                reduced: bool = False) -> Launch:
    """A row kernel over x [rows, cols]: `per_column` (name, pointer) inputs of
    [cols], then out [rows, cols] (or [rows] when `reduced`); a program per
    block of rows."""
    rows, cols = dims(2)
    L = Launch()
    L.tensor("x", "input", dtype, [rows, cols], "x_ptr")
    for name, pointer in per_column:
        L.tensor(name, "input", dtype, [cols], pointer)
    L.tensor("out", "output", out_dtype or dtype, [rows] if reduced else [rows, cols], "out_ptr")
    L.ints.update(n_rows=rows, n_cols=cols)
    L.grid = _row_grid(rows, config)
    return L


def _softmax(lib, op, rank, dtype, params, config, target) -> Launch:
    return _row_kernel(dtype, config)


def _layernorm(lib, op, rank, dtype, params, config, target) -> Launch:
    per_column = [("weight", "w_ptr")] + ([("bias", "b_ptr")] if op == "layernorm" else [])
    return _row_kernel(dtype, config, per_column)


def _reduce(lib, op, rank, dtype, params, config, target) -> Launch:
    return _row_kernel(dtype, config, out_dtype=lib.launch_module(op).out_dtype(op, dtype), reduced=True)


def _gemm_grid(lib, M, N, config, target) -> list:
    """matmul.grid: one program per tile, or min(tiles, SMs x persistent)
    programs (at least 1), SMs being the target's (matmul.sm_count)."""
    tiles = cdiv(M, int(config["BLOCK_M"])) * cdiv(N, int(config["BLOCK_N"]))
    per_sm = int(config.get("persistent") or 0)
    if per_sm > 0:
        sms = lib.launch_module("matmul").sm_count(target)
        tiles = emax(1, emin(tiles, sms * per_sm))
    return _grid(tiles)


def _matmul(lib, op, rank, dtype, params, config, target) -> Launch:
    M, N, K = dims(3)
    L = Launch()
    L.tensor("a", "input", dtype, [M, K], "a_ptr")
    L.tensor("b", "input", dtype, [K, N], "b_ptr")
    if op == "gemm_bias_act":
        L.tensor("bias", "input", dtype, [N], "bias_ptr")
    L.tensor("out", "output", dtype, [M, N], "c_ptr")
    L.ints.update(M=M, N=N, K=K)
    L.grid = _gemm_grid(lib, M, N, config, target)
    return L


def _conv2d(lib, op, rank, dtype, params, config, target) -> Launch:
    mod = lib.launch_module(op)
    N, C, H, W = dims(4)
    oc, ks, stride, pad = mod._params(params)
    OH = (H + (2 * pad - ks)) // stride + 1
    OW = (W + (2 * pad - ks)) // stride + 1
    L = Launch()
    L.tensor("x", "input", dtype, [N, C, H, W], "x_ptr")
    L.tensor("weight", "input", dtype, [oc, C, ks, ks], "w_ptr")
    L.tensor("out", "output", dtype, [N, oc, OH, OW], "out_ptr")
    L.ints.update(C=C, H=H, W=W, OC=Expr.of(oc), OH=OH, OW=OW)
    bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    programs = int(config.get("programs", 0) or 0)
    if programs > 0:
        chunks = N * cdiv(OH * OW, bm)
        L.grid = _grid(emin(programs, chunks), cdiv(oc, bn))
    else:
        bp = max(int(config.get("BLOCK_P", bm)), bm)
        L.grid = _grid(cdiv(OH * OW, bp), cdiv(oc, bn), N)
    return L


def _attention(lib, op, rank, dtype, params, config, target) -> Launch:
    B, H, S, D = dims(4)
    L = Launch()
    shape = [B, H, S, D]
    if config.get("ws"):
        # attention_wgmma: host-side TMA descriptors over the [B*H*S, D] views
        # of q, k and v, each followed by its shape (i32) and strides (i64,
        # elements) as Triton's launcher passes them.
        rows = B * H * S
        eb = _element_bytes(dtype)
        for name in ("q", "k", "v"):
            t = L.tensor(name, "input", dtype, shape)
            desc = f"{name}_desc"
            L.tma[desc] = {"tensor": t, "dims": [rows, D], "strides_bytes": [D * eb]}
            L.ints.update({f"{desc}.shape[0]": rows, f"{desc}.shape[1]": D,
                           f"{desc}.strides[0]": D, f"{desc}.strides[1]": Expr.of(1)})
        L.tensor("out", "output", dtype, shape, "out_ptr")
        tiles = B * H * cdiv(S, 128)
        L.grid = _grid(tiles // 2 if config.get("pair") else tiles)
    else:
        for name in ("q", "k", "v"):
            L.tensor(name, "input", dtype, shape, f"{name}_ptr")
        L.tensor("out", "output", dtype, shape, "out_ptr")
        L.grid = _grid(B * H * cdiv(S, int(config["BLOCK_M"])))
    L.ints.update(BH=B * H, S=S)
    return L


def _bmm(lib, op, rank, dtype, params, config, target) -> Launch:
    """bmm: a transposed operand is the stored tensor ([bt, K, M] / [bt, N, K]),
    read through its strides; grid (tiles x SPLIT_K, batch), where a
    matrix-vector config (`gemv`) has M * N outputs in BLOCK_M blocks for
    tiles (one of M, N is 1)."""
    bt, M, N, K = dims(4)
    ta, tb = lib.launch_module(op)._flags(params)
    L = Launch()
    L.tensor("a", "input", dtype, [bt, K, M] if ta else [bt, M, K], "a_ptr")
    L.tensor("b", "input", dtype, [bt, N, K] if tb else [bt, K, N], "b_ptr")
    L.tensor("out", "output", dtype, [bt, M, N], "c_ptr")
    L.ints.update(M=M, N=N, K=K)
    split = int(config.get("SPLIT_K", 1))
    if config.get("gemv"):
        tiles = cdiv(M * N, int(config["BLOCK_M"]))
    else:
        tiles = cdiv(M, int(config["BLOCK_M"])) * cdiv(N, int(config["BLOCK_N"]))
    L.grid = _grid(tiles * split if split > 1 else tiles, bt)
    return L


def _scan(lib, op, rank, dtype, params, config, target) -> Launch:
    """cumsum / cumprod: one program per BLOCK_M rows, one-pass or chunked
    (the chunked kernel carries the running total in registers: one launch)."""
    rows, cols = dims(2)
    L = Launch()
    L.tensor("x", "input", dtype, [rows, cols], "x_ptr")
    L.tensor("out", "output", dtype, [rows, cols], "out_ptr")
    L.ints.update(n_rows=rows, n_cols=cols)
    L.grid = _grid(cdiv(rows, int(config["BLOCK_M"])))
    return L


def _reduce_dim(lib, op, rank, dtype, params, config, target) -> Launch:
    """[outer, R, inner] -> [outer, inner]; arg-reductions write int64 (i64)."""
    outer, red, inner = dims(3)
    kind = lib.launch_module(op)._kind(params)
    L = Launch()
    L.tensor("x", "input", dtype, [outer, red, inner], "x_ptr")
    L.tensor("out", "output", "i64" if kind.startswith("arg") else dtype, [outer, inner], "out_ptr")
    L.ints.update(n_outer=outer, n_red=red, n_inner=inner)
    L.grid = _grid(outer, cdiv(inner, int(config["BLOCK_I"])))
    return L


def _norm_dim(lib, op, rank, dtype, params, config, target) -> Launch:
    outer, red, inner = dims(3)
    L = Launch()
    L.tensor("x", "input", dtype, [outer, red, inner], "x_ptr")
    L.tensor("out", "output", dtype, [outer, red, inner], "out_ptr")
    L.ints.update(n_red=red, n_inner=inner)  # eps: a float value (compile_spec's)
    L.grid = _grid(outer, cdiv(inner, int(config["BLOCK_I"])))
    return L


def _pool(lib, op, rank, dtype, params, config, target) -> Launch:
    """pool2d: the output size per dim floor((in + 2 pad - dil (k - 1) - 1) /
    stride) + 1, the window's constants (stride, padding, dilation) folded in
    from params; one program per BLOCK outputs of the flattened output."""
    kind, kh, kw, sh, sw, ph, pw, dh, dw = lib.launch_module(op)._p(params)
    N, C, H, W = dims(4)
    OH = (H + (2 * ph - dh * (kh - 1) - 1)) // sh + 1
    OW = (W + (2 * pw - dw * (kw - 1) - 1)) // sw + 1
    L = Launch()
    L.tensor("x", "input", dtype, [N, C, H, W], "x_ptr")
    L.tensor("out", "output", dtype, [N, C, OH, OW], "out_ptr")
    L.ints.update(n_planes=N * C, H=H, W=W, OH=OH, OW=OW, SH=Expr.of(sh), SW=Expr.of(sw), PH=Expr.of(ph),
                  PW=Expr.of(pw), DH=Expr.of(dh), DW=Expr.of(dw))
    L.grid = _grid(cdiv(N * C * OH * OW, int(config["BLOCK"])))
    return L


def _pointwise(lib, op, rank, dtype, params, config, target) -> Launch:
    """The generated kernel's inputs x0.. by broadcast mode (full [rows, cols],
    row [cols], col [rows]), then the output; one program per BLOCK outputs."""
    rows, cols = dims(2)
    modes = lib.launch_module(op)._modes(params)
    L = Launch()
    for i, m in enumerate(modes):
        L.tensor(f"x{i}", "input", dtype, {"full": [rows, cols], "row": [cols], "col": [rows]}[m], f"x{i}_ptr")
    L.tensor("out", "output", dtype, [rows, cols], "out_ptr")
    L.ints.update(n_rows=rows, n_cols=cols)
    L.grid = _grid(cdiv(rows * cols, int(config["BLOCK"])))
    return L


def _element_bytes(dtype: str) -> int:
    return {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]


_BY_MODULE = {
    "elementwise": _elementwise,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _layernorm,
    "reduce": _reduce,
    "matmul": _matmul,
    "gemm_epilogue": _matmul,
    "conv2d": _conv2d,
    "attention": _attention,
    "bmm": _bmm,
    "softmax_variants": _softmax,  # the scale: a float value (compile_spec's)
    "scan": _scan,
    "reduce_dim": _reduce_dim,
    "norm_dim": _norm_dim,
    "pool": _pool,
    "pointwise": _pointwise,
}


def launch(lib, op: str, rank: int, dtype: str, params: dict, config: dict, target: dict) -> Launch:
    """The Launch of one config of `op` for shapes of `rank` dimensions."""
    module = lib.module_name_for(op)
    fn = _BY_MODULE.get(module)
    if fn is None:
        raise UnknownTemplate(f"no launch expressions for template module {module!r} (operator {op!r}); "
                              "add them to worker/kiln_worker/packaging/launch_exprs.py")
    return fn(lib, op, rank, dtype, params, config, target)


def modules() -> list[str]:
    """The template modules these expressions cover."""
    return sorted(_BY_MODULE)
