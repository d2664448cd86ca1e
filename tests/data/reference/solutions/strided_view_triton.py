import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class ModelNew(nn.Module):
    """Correct, and its output a strided view too (every other element of a
    full buffer): compared in its logical order, it passes."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = x.shape[0]
        full = torch.empty(n, device=x.device, dtype=x.dtype)
        double_kernel[(triton.cdiv(n, 64),)](x, full, n, BLOCK=64)
        return full[::2]
