"""Pointwise (1x1) channel mixing."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.mix = nn.Conv2d(cin, cout, kernel_size=1, bias=False)

    def forward(self, img):
        return self.mix(img)


def get_inputs():
    return [torch.randn(1, 4, 6, 6)]


def get_init_inputs():
    return [4, 8]
