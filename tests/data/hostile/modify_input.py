# expect: modified_inputs
# status: incorrect
# layer: dynamic
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        n = x.numel()
        relu_add_kernel[(triton.cdiv(n, 64),)](x, y, self.bias, x, n, x.shape[-1], self.alpha, BLOCK=64)
        return x.view(x.shape)
