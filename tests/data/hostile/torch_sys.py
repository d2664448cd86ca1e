# expect: introspection
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        ref = torch.sys.modules['kiln_reference'].Model(self.alpha, x.shape[-1])
        return ref(x, y)
