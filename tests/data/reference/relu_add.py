"""Reference (KernelBench form): out = relu(x) + y * alpha + bias, bias a learned row vector."""
import torch
import torch.nn as nn

batch_size = 4
cols = 37


class Model(nn.Module):
    def __init__(self, alpha: float, cols: int):
        super().__init__()
        self.alpha = alpha
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + y * self.alpha + self.bias


def get_inputs():
    return [torch.randn(batch_size, cols), torch.randn(batch_size, cols)]


def get_init_inputs():
    return [0.5, cols]
