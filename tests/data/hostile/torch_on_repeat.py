# expect: torch_compute
# status: rejected
# layer: dynamic
# Launches its kernel on new inputs and hands the work to PyTorch modules when
# the inputs repeat (the benchmark reused them).
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
        self.act = nn.ReLU()
        self.last_x = None

    def forward(self, x, y):
        if self.last_x is x:
            out = torch.empty_like(x)
            relu_add_kernel[(1,)](x, y, self.bias, out, 0, x.shape[-1], self.alpha, BLOCK=64)
            return self.act(x) + y * self.alpha + self.bias
        self.last_x = x
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_kernel[(triton.cdiv(n, 64),)](x, y, self.bias, out, n, x.shape[-1], self.alpha, BLOCK=64)
        return out
