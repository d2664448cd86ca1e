"""A projection followed by exact GELU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.proj(x))


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32, 48]
