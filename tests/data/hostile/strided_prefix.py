# expect: none
# status: incorrect
# layer: dynamic
# reference: strided_view
# extends: strided_view_triton
# The reference's output is a strided view ((2x)[::2]); this wrong program
# writes 2x of the unstrided prefix (2 x[i], not 2 x[2i]) -- what the fused
# comparison kernel read of a strided reference before issue 17.

class ModelNew(ModelNew):
    def forward(self, x):
        n = x.shape[0] // 2
        out = torch.empty(n, device=x.device, dtype=x.dtype)
        double_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
        return out
