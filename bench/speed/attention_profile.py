"""One launch of an attention kernel on the anchor case (causal 4x32x2048x128
bf16), for Nsight Compute: which kernel is picked by argv[1] -- `sdpa`,
`triton` (the template's plain kernel, 64x64 / 4 warps / 3 stages) or `ws`
(kernels/attention_wgmma.py: Gluon, warp-specialised, 128x128, 2 stages).
Each runs twice; profile the second:

    ncu -k regex:'attention|fmha|flash|cudnn|sm90' --launch-skip 1 -c 1 \\
        --section SpeedOfLight --section WarpStateStats python3 bench/speed/attention_profile.py ws
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "worker")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernels import attention  # noqa: E402
from kiln_worker.processes.device import install_scratch_allocator  # noqa: E402

SHAPE = [4, 32, 2048, 128]


def main() -> int:
    which = sys.argv[1]
    install_scratch_allocator()
    p = {"causal": True}
    inputs = attention.make_inputs("attention", SHAPE, "bf16", p, 1, torch.device("cuda"))
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    out = torch.empty_like(q)
    configs = {  # the template's configs; `ws` selects the Gluon kernel
        "triton": {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_H": 8, "num_warps": 4, "num_stages": 3},
        "ws": attention.ws_config(128, 2),
    }
    if which != "sdpa" and which not in configs:
        raise SystemExit(f"unknown kernel {which!r}: sdpa, triton or ws")
    for _ in range(2):
        if which == "sdpa":
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attention.launch("attention", inputs, out, configs[which], p)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
