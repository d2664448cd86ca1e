# expect: output_alias
# status: incorrect
# layer: dynamic
# Caches its output per input object: honest on new inputs, and returns the
# cached output (launching nothing) when it sees the same object again --
# the benchmark used to time that (issue 17, 29x "faster"). The check's repeat
# call on the same objects sees the earlier output returned again.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_add_kernel(x_ptr, y_ptr, b_ptr, out_ptr, n, cols, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % cols, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) + y * alpha + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha, cols):
        super().__init__()
        self.alpha = alpha
        self.bias = nn.Parameter(torch.randn(cols))
        self.last_x = None
        self.last_out = None

    def forward(self, x, y):
        if self.last_x is x:
            return self.last_out
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_kernel[(triton.cdiv(n, 64),)](x, y, self.bias, out, n, x.shape[-1], self.alpha, BLOCK=64)
        self.last_x = x
        self.last_out = out
        return out
