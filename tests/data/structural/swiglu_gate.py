"""The gate of a SwiGLU MLP: silu(gate) * up."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, gate, up):
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(8, 96), torch.randn(8, 96)]


def get_init_inputs():
    return []
