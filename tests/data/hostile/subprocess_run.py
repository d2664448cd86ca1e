# expect: import
# status: rejected
# layer: static
# extends: relu_add_triton

import subprocess


class ModelNew(ModelNew):
    def forward(self, x, y):
        subprocess.run(['curl', 'http://example.com'])
        return super().forward(x, y)
