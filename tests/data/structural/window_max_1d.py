"""Sliding-window maximum over a sequence (dilated, padded)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=4, stride=2, padding=2, dilation=2)

    def forward(self, seq):
        return self.pool(seq)


def get_inputs():
    return [torch.randn(2, 3, 37)]


def get_init_inputs():
    return []
