# expect: reflection
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        mm = getattr(torch, 'ma' + 'tmul')
        eye = torch.zeros(x.shape[-1], x.shape[-1])
        return mm(x, eye) + y * self.alpha + self.bias
