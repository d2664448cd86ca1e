"""What the tl.dot templates' config spaces share (matmul.py, conv2d.py): which
AMD matrix-core knobs a tile can take, and the filter that drops the configs
a target cannot run."""

from __future__ import annotations

from . import common


def mfma_fits(config: dict) -> bool:
    """Whether the tile takes its AMD matrix-core knobs: a 32x32 MFMA
    (matrix_instr_nonkdim 32) needs at least 32 rows and columns per tile;
    kpack 2 packs two K steps into one MFMA operand and wants BLOCK_K >= 64."""
    if config.get("matrix_instr_nonkdim") == 32 and min(config["BLOCK_M"], config["BLOCK_N"]) < 32:
        return False
    return not (config.get("kpack") == 2 and config["BLOCK_K"] < 64)


def keep(shared_bytes, dtype: str, target: dict):
    """The `keep` filter of common.expand for a tl.dot template: the config's
    shared memory (`shared_bytes(config, dtype, target)`, the template's
    estimate) within the target's limit, and mfma_fits."""
    limit = common.shared_limit(target)
    return lambda c: shared_bytes(c, dtype, target) <= limit and mfma_fits(c)
