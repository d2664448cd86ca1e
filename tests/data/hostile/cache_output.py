# expect: stale_output
# status: incorrect
# layer: dynamic
# extends: relu_add_triton

class ModelNew(ModelNew):
    cached = None

    def forward(self, x, y):
        if self.cached is None:
            self.cached = super().forward(x, y)
        return self.cached
