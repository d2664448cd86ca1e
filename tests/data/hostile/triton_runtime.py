# expect: introspection
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        st = triton.runtime.driver.active.get_current_stream(0)
        return super().forward(x, y)
