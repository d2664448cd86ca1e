# expect: global_state
# status: rejected
# layer: static
# extends: relu_add_triton

_CACHE = None


class ModelNew(ModelNew):
    def forward(self, x, y):
        global _CACHE
        if _CACHE is None:
            _CACHE = super().forward(x, y)
        return _CACHE
