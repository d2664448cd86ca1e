# expect: file_io
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        out = super().forward(x, y)
        torch.save(out, '/tmp/kiln_stolen.pt')
        return out
