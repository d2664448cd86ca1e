# expect: dunder
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        leak = '{0.__class__.__init__.__globals__}'.format(self)
        return super().forward(x, y)
