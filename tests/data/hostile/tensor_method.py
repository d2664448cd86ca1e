# expect: torch_compute
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        return x.relu() + y * self.alpha + self.bias
