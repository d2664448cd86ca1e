"""Running total along the sequence (KernelBench's cumsum form: the dim at init)."""
import torch
import torch.nn as nn

batch_size, seq_len, dim = 6, 50, 1


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, seq_len)]


def get_init_inputs():
    return [dim]
