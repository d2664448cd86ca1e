# expect: output_alias
# status: incorrect
# layer: dynamic
# extends: relu_add_triton

class ModelNew(ModelNew):
    buf = None

    def forward(self, x, y):
        if self.buf is None:
            self.buf = torch.empty_like(x)
        n = x.numel()
        relu_add_kernel[(triton.cdiv(n, 64),)](x, y, self.bias, self.buf, n, x.shape[-1], self.alpha, BLOCK=64)
        return self.buf
