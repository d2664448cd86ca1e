# expect: reflection
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        t = triton
        st = t.runtime
        return super().forward(x, y)
