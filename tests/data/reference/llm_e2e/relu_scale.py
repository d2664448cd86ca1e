"""Reference (KernelBench form) for the llm end-to-end test: out = relu(x) * scale."""
import torch
import torch.nn as nn

rows = 4
cols = 33


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [2.0]
