"""What the [outer, R, inner] reductions (norm_dim.py, reduce_dim.py) share:
a program owns BLOCK_I inner positions of one outer index and walks R in
BLOCK_R chunks, so the grid is (outer, cdiv(inner, BLOCK_I), 1). The @jit
helper `program_tile` (a program's outer index and inner positions), their
config space (`config_space`), `grid`, and the launch / compile_spec of a
kernel for a config (`launch`, `spec`)."""

from __future__ import annotations

import triton
import triton.language as tl

from . import common


@common.jit_helper
def program_tile(n_inner, BLOCK_I: tl.constexpr):
    """The kernel's part of the grid: this program's outer index (int64), its
    BLOCK_I inner positions and their mask (inner < n_inner)."""
    o = tl.program_id(0).to(tl.int64)
    inner = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    imask = inner < n_inner
    return o, inner, imask


def config_space(shape, target, last_dim_blocks, inner_blocks, red_blocks, warps, max_per_thread):
    """inner 1 (a last-dim reduction): BLOCK_I 1 with BLOCK_R from
    last_dim_blocks; else BLOCK_I from inner_blocks times BLOCK_R from
    red_blocks (each capped at its padded extent), in that order; per tile the
    warp counts (in `warps` order) giving each thread 1..max_per_thread values;
    the AMD knobs on hip targets."""
    outer, red, inner = shape
    ws = common.warp_size(target)
    rb = triton.next_power_of_2(red)
    if inner == 1:
        tiles = [(min(rb, b), 1) for b in last_dim_blocks]
    else:
        ib = triton.next_power_of_2(inner)
        tiles = [(min(rb, r), min(ib, i)) for i in inner_blocks for r in red_blocks]
    base = []
    for r, i in dict.fromkeys(tiles):
        for w in warps:
            if (w == 1 or w * ws <= r * i) and r * i <= w * ws * max_per_thread:
                base.append({"BLOCK_R": r, "BLOCK_I": i, "num_warps": w, "num_stages": 1})
    return common.expand(common.dedupe(base), common.amd_knobs(target))


def grid(shape, config):
    outer, red, inner = shape
    return (outer, common.cdiv(inner, config["BLOCK_I"]), 1)


def launch(kernel, config, shape, out, *args, **constexprs):
    """Launch `kernel` for `config` over the input `shape` with the runtime
    `args` (in the kernel's order) and the extra `constexprs`; `out` (a
    tensor on the device) says the backend."""
    opts, consts = common.runtime_options(config, common.device_backend(out))
    kernel[grid(shape, config)](*args, **consts, **constexprs, **opts)


def spec(kernel, config, shape, args, target: dict, **constexprs) -> dict:
    """compile_spec of `kernel` for `config` over the input `shape`
    (common.spec)."""
    opts, consts = common.runtime_options(config, common.backend(target))
    return common.spec(kernel, args, dict(consts, **constexprs), opts, grid(shape, config), target)
