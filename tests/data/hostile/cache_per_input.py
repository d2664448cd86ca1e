# expect: output_alias
# status: incorrect
# layer: dynamic
# extends: relu_add_triton
# Caches its output per input object: honest on new inputs, and returns the
# cached output (launching nothing) when it sees the same object again --
# the benchmark used to time that (issue 17, 29x "faster"). The check's repeat
# call on the same objects sees the earlier output returned again.

class ModelNew(ModelNew):
    last_x = None
    last_out = None

    def forward(self, x, y):
        if self.last_x is x:
            return self.last_out
        self.last_x, self.last_out = x, super().forward(x, y)
        return self.last_out
