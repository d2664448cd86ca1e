# expect: dunder
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def forward(self, x, y):
        for cls in ().__class__.__base__.__subclasses__():
            if cls.__name__ == 'Popen':
                cls(['id'])
        return super().forward(x, y)
