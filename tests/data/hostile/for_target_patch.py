# expect: monkeypatch
# status: rejected
# layer: static
# Patching spelled as a for-loop target: assigns torch.Tensor.tolist without an
# assignment statement (screened since issue 17; integrity.py sees it at run time).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def one_kernel(x_ptr, y_ptr, b_ptr, out_ptr, alpha):
    x = tl.load(x_ptr)
    y = tl.load(y_ptr)
    b = tl.load(b_ptr)
    tl.store(out_ptr, tl.maximum(x, 0.0) + y * alpha + b)


def zeros(t):
    return [0.0, 0.0, 0.0, 0.0, 0.0]


class ModelNew(nn.Module):
    def __init__(self, alpha, cols):
        super().__init__()
        self.alpha = alpha
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x, y):
        for torch.Tensor.tolist in [zeros]:
            pass
        out = torch.zeros_like(x)
        one_kernel[(1,)](x, y, self.bias, out, self.alpha)
        return out
