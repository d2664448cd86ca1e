# expect: structure
# status: rejected
# layer: static
import torch
import torch.nn as nn
import triton
import triton.language as tl

class Solution(nn.Module):
    def forward(self, x, y):
        return x
