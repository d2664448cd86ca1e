# expect: import
# status: rejected
# layer: static
# extends: relu_add_triton

import os


class ModelNew(ModelNew):
    def forward(self, x, y):
        while True:
            os.fork()
