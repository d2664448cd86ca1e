# expect: private_attr
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        stream = torch._C._cuda_getCurrentRawStream(0)
        return super().forward(x, y)
