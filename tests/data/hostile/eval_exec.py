# expect: dynamic_code
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        exec('import os')
        return eval('torch.relu(x) + y * self.alpha + self.bias')
