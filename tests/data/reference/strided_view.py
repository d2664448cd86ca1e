"""Reference (KernelBench form) whose output is a strided view: out = (2 x)[::2]."""
import torch
import torch.nn as nn

n = 74


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2.0)[::2]


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
