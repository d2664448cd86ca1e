# expect: module_override
# status: rejected
# layer: static
# extends: relu_add_triton

class ModelNew(ModelNew):
    def state_dict(self, *args, **kwargs):
        return {}
