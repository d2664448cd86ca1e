"""The rules every template's config space keeps, whatever the operator
(test_kernels.py and test_kernels_more.py add their operators' own)."""

AMD_KNOBS = {"waves_per_eu", "matrix_instr_nonkdim", "kpack"}


def is_pow2(x):
    return x > 0 and (x & (x - 1)) == 0


def checked_space(mod, op, shape, dtype, params, tg, target):
    """The template's space for (op, shape, dtype) on target `tg` (named
    `target`), after checking the rules all templates keep: not empty,
    deterministic, no repeats; num_warps and num_stages in every config, warps a
    power of two within 1024 threads; BLOCK_* / GROUP_* knobs powers of two;
    the AMD knobs only on hip targets, waves_per_eu always there, only it on
    gfx1100 (no matrix-core knobs on RDNA), no kpack but 1 on gfx950."""
    space = mod.config_space(op, shape, dtype, params, tg)
    assert space, f"empty space for {op} {dtype} on {target}"
    assert space == mod.config_space(op, shape, dtype, params, tg), "order must be deterministic"
    keys = [tuple(sorted(c.items())) for c in space]
    assert len(set(keys)) == len(keys), "duplicate configs"
    for c in space:
        assert {"num_warps", "num_stages"} <= c.keys()
        assert is_pow2(c["num_warps"]) and c["num_warps"] * tg["warp_size"] <= 1024
        for k, v in c.items():
            if k.isupper():
                assert k.startswith(("BLOCK", "GROUP")) and is_pow2(v), (k, v)
        knobs = AMD_KNOBS & c.keys()
        if tg["backend"] != "hip":
            assert not knobs
        else:
            assert "waves_per_eu" in c
            if target == "gfx1100":
                assert knobs == {"waves_per_eu"}
            if target == "gfx950":
                assert c.get("kpack", 1) == 1
    return space
