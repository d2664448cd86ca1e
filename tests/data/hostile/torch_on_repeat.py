# expect: torch_compute
# status: rejected
# layer: dynamic
# extends: relu_add_triton
# Launches its kernel on new inputs and hands the work to PyTorch modules when
# the inputs repeat (the benchmark reused them).

class ModelNew(ModelNew):
    def __init__(self, alpha, cols):
        super().__init__(alpha, cols)
        self.act = nn.ReLU()
        self.last_x = None

    def forward(self, x, y):
        if self.last_x is x:
            out = torch.empty_like(x)
            relu_add_kernel[(1,)](x, y, self.bias, out, 0, x.shape[-1], self.alpha, BLOCK=64)
            return self.act(x) + y * self.alpha + self.bias
        self.last_x = x
        return super().forward(x, y)
