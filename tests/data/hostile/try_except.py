# expect: try_except
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        try:
            return super().forward(x, y)
        except Exception:
            return torch.relu(x) + y * self.alpha + self.bias
