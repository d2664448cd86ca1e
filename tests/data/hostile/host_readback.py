# expect: torch_compute
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        first = x.view(-1).tolist()
        return super().forward(x, y)
