# expect: none
# status: incorrect
# layer: dynamic
# reference: strided_view
# The reference's output is a strided view ((2x)[::2]); this wrong program
# writes 2x of the unstrided prefix (2 x[i], not 2 x[2i]) -- what the fused
# comparison kernel read of a strided reference before issue 17.
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
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = x.shape[0] // 2
        out = torch.empty(n, device=x.device, dtype=x.dtype)
        double_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
        return out
