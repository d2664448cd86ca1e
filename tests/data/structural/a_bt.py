"""Similarity scores: queries times keys transposed."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, queries, keys):
        return queries @ keys.t()


def get_inputs():
    return [torch.randn(32, 64), torch.randn(48, 64)]


def get_init_inputs():
    return []
