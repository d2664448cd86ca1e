# expect: no_launch
# status: rejected
# layer: dynamic
# extends: relu_add_triton
# Honest for its first three calls (the checks: two seeds and a repeat), then
# returns its last output without launching: only the checked benchmark sees it.

class ModelNew(ModelNew):
    calls = 0
    last = None

    def forward(self, x, y):
        self.calls += 1
        if self.calls > 3:
            return self.last
        self.last = super().forward(x, y)
        return self.last
