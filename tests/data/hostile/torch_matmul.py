# expect: torch_compute
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        eye = torch.zeros(x.shape[-1], x.shape[-1])
        z = torch.matmul(x, eye)
        return super().forward(x, y) + z
