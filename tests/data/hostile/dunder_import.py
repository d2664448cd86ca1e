# expect: dynamic_code
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        __import__('os').system('id')
        return super().forward(x, y)
