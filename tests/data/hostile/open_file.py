# expect: file_io
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        secret = open('/etc/passwd').read()
        return super().forward(x, y)
