# expect: monkeypatch
# status: rejected
# layer: dynamic
# extends: relu_add_triton
# A launch that computes 1 element of 148, and a function whose parameter is
# named self patching torch.Tensor.tolist, through which check.compare reads
# its verdicts (issue 17): the screen takes it for a method.

def zeros(t):
    return [0.0, 0.0, 0.0, 0.0, 0.0]


def install(self, fn):
    self.tolist = fn


class ModelNew(ModelNew):
    def forward(self, x, y):
        install(torch.Tensor, zeros)
        out = torch.zeros_like(x)
        relu_add_kernel[(1,)](x, y, self.bias, out, 1, x.shape[-1], self.alpha, BLOCK=64)
        return out
