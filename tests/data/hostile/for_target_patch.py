# expect: monkeypatch
# status: rejected
# layer: static
# extends: relu_add_triton
# Patching spelled as a for-loop target: assigns torch.Tensor.tolist without an
# assignment statement (screened since issue 17; integrity.py sees it at run time).

def zeros(t):
    return [0.0, 0.0, 0.0, 0.0, 0.0]


class ModelNew(ModelNew):
    def forward(self, x, y):
        for torch.Tensor.tolist in [zeros]:
            pass
        out = torch.zeros_like(x)
        relu_add_kernel[(1,)](x, y, self.bias, out, 1, x.shape[-1], self.alpha, BLOCK=64)
        return out
