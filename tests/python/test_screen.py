"""Static screening of generated code (worker/kiln_worker/sandbox/screen.py); no worker, no GPU.

The hostile corpus (tests/data/hostile/*.py, see hostile_corpus.py) carries its
expectations in header comments: ``# expect: <rule>``, ``# status: <status>``,
``# layer: static|dynamic``. Static ones must be rejected by the screen with exactly that rule; dynamic ones must
pass the screen (they are caught at run time, see test_worker_generated.py).
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

HOME = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HOME / "worker"))
from kiln_worker.sandbox.screen import screen  # noqa: E402
from hostile_corpus import CORPUS as HOSTILE, header, program  # noqa: E402

SOLUTIONS = sorted((HOME / "tests" / "data" / "reference" / "solutions").glob("*.py"))
REFERENCES = sorted((HOME / "tests" / "data" / "reference").glob("*.py"))


def rule_of(src: str) -> str | None:
    v = screen(textwrap.dedent(src))
    return v.rule if v else None


PRELUDE = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


def model(forward_body: str, init_body: str = "pass", extra: str = "") -> str:
    fb = textwrap.indent(textwrap.dedent(forward_body).strip(), " " * 8)
    ib = textwrap.indent(textwrap.dedent(init_body).strip(), " " * 8)
    return PRELUDE + textwrap.dedent(extra) + f"""
class ModelNew(nn.Module):
    def __init__(self, n=4):
        super().__init__()
{ib}

    def forward(self, x):
{fb}
"""


LAUNCH = """
out = torch.empty_like(x)
k[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
return out
"""


# -- the corpus ---------------------------------------------------------------------

def test_corpus_is_complete():
    rules = {header(p, "expect") for p in HOSTILE}
    for needed in ("import", "file_io", "dynamic_code", "reflection", "dunder", "introspection",
                   "torch_compute", "reference_call", "try_except", "side_stream", "output_alias",
                   "modified_inputs", "stale_output", "timeout", "monkeypatch"):
        assert needed in rules, needed
    for p in HOSTILE:
        assert header(p, "expect") and header(p, "status") and header(p, "layer") in ("static", "dynamic"), p


@pytest.mark.parametrize("path", [p for p in HOSTILE if header(p, "layer") == "static"], ids=lambda p: p.stem)
def test_hostile_static(path):
    v = screen(program(path))
    assert v is not None, f"{path.name} passed the screen"
    assert v.rule == header(path, "expect"), v.message
    assert header(path, "status") == "rejected"
    assert f"line {v.line}" in v.message and (v.line > 3 or v.rule == "structure")


@pytest.mark.parametrize("path", [p for p in HOSTILE if header(p, "layer") == "dynamic"], ids=lambda p: p.stem)
def test_hostile_dynamic_passes_the_screen(path):
    v = screen(program(path))
    assert v is None, v.message


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_good_solutions_pass(path):
    v = screen(path.read_text())
    assert v is None, v.message


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: p.stem)
def test_reference_modules_are_not_valid_solutions(path):
    v = screen(path.read_text())
    assert v is not None and v.rule in ("reference_call", "torch_compute", "structure")


# -- realistic generated code must pass ------------------------------------------------

REALISTIC = '''
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.autotune(
    configs=[triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
             triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8)],
    key=["M", "N", "K"],
)
@triton.jit
def mm_gelu_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """gelu(a @ b + bias)"""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptr + rm[:, None] * sam + (k * BLOCK_K + rk)[None, :] * sak)
        b = tl.load(b_ptr + (k * BLOCK_K + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(a, b, input_precision="ieee")
    acc = acc + tl.load(bias_ptr + rn)[None, :]
    out = 0.5 * acc * (1.0 + libdevice.erf(acc * 0.7071067811865476))
    out = tl.where(out > 0, out, tl.math.exp2(out) - 1.0)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, out.to(c_ptr.dtype.element_ty))


def mm_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    assert a.is_cuda and a.dim() == 2, "expects a 2-D CUDA tensor"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype, memory_format=torch.contiguous_format)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
    mm_gelu_kernel[grid](a, b, c, bias, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                         b.stride(1), c.stride(0), c.stride(1))
    return c


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))
        self._sms = torch.cuda.get_device_properties(0).multi_processor_count \\
            if torch.cuda.is_available() else 1

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float16:
            pass
        x = x.contiguous().view(-1, x.shape[-1])
        return mm_gelu(x, self.weight.t(), self.bias).view(x.shape[0], -1)


batch_size = 128


def get_inputs():
    return [torch.randn(batch_size, 512)]


def get_init_inputs():
    return [512, 256]


if __name__ == "__main__":
    m = ModelNew(*get_init_inputs()).cuda()
    x = torch.randn(128, 512, device="cuda")
    print((m(x) - torch.nn.functional.gelu(x @ m.weight.t() + m.bias)).abs().max())
'''


def test_realistic_generated_code_passes():
    v = screen(REALISTIC)
    assert v is None, v.message


# -- individual rules -------------------------------------------------------------------

def test_syntax_error_raises():
    with pytest.raises(SyntaxError):
        screen("class ModelNew(:\n")


def test_structure():
    assert rule_of(PRELUDE) == "structure"
    assert rule_of(PRELUDE + "\nclass ModelNew(nn.Module):\n    pass\n") == "structure"
    assert rule_of(model(LAUNCH)) is None


@pytest.mark.parametrize("body,rule", [
    ("return x @ x", "torch_compute"),
    ("return x.to(torch.float16)", "torch_compute"),
    ("return x.float()", "torch_compute"),
    ("return x.sum()", "torch_compute"),
    ("return x.clone()", "torch_compute"),
    ("y = torch.empty_like(x)\ny.copy_(x)\nreturn y", "torch_compute"),
    ("return torch.ops.aten.relu(x)", "dynamic_code"),
    ("return torch.nn.functional.relu(x)", "torch_compute"),
    ("return F.relu(x)", "torch_compute"),
    ("return nn.ReLU()(x)", "torch_compute"),
    ("torch.manual_seed(0)\n" + LAUNCH, "torch_compute"),
    ("s = torch.cuda.current_stream()\n" + LAUNCH, "side_stream"),
    ("x.record_stream(x)\n" + LAUNCH, "side_stream"),
    ("torch.compile(lambda t: t)\n" + LAUNCH, "dynamic_code"),
    ("torch.utils.cpp_extension.load_inline('m', '')\n" + LAUNCH, "dynamic_code"),
    ("print(x.__class__)\n" + LAUNCH, "dunder"),
    ("print(x._base)\n" + LAUNCH, "private_attr"),
    ("print(vars(x))\n" + LAUNCH, "reflection"),
    ("print(type('A', (), {}))\n" + LAUNCH, "reflection"),
    ("f = triton\n" + LAUNCH, "reflection"),
    ("print(torch.os.environ)\n" + LAUNCH, "introspection"),
    ("print(triton.knobs.runtime)\n" + LAUNCH, "introspection"),
    ("print(torch.cuda)\n" + LAUNCH, "reflection"),
    ("print(torch.autograd)\n" + LAUNCH, "namespace"),
    ("g = torch.autograd.grad\n" + LAUNCH, "namespace"),
    ("print(torch.no_such_function)\n" + LAUNCH, "namespace"),
    ("x.shape = (1,)\n" + LAUNCH, "monkeypatch"),
    ("breakpoint()\n" + LAUNCH, "introspection"),
    ("exit(0)", "process"),
    ("print('{0.__globals__}'.format(x))\n" + LAUNCH, "dunder"),
    ("nonlocal_thing = 1\nglobal G\n" + LAUNCH, "global_state"),
])
def test_forward_rules(body, rule):
    assert rule_of(model(body)) == rule


@pytest.mark.parametrize("body", [
    "out = torch.empty(x.shape, device=x.device, dtype=torch.float32)\n"
    "k[(triton.cdiv(x.numel(), 64),)](x.reshape(-1), out, x.numel(), BLOCK=64)\nreturn out.view_as(x)",
    "out = x.new_empty(x.shape)\nout.zero_()\nn = x.numel()\nk[(n,)](x.t().contiguous(), out, n, BLOCK=64)\nreturn out",
    "B, N = x.shape[0], x.size(1)\nblock = triton.next_power_of_2(N)\nout = torch.zeros_like(x)\n"
    "k[(B,)](x, out, N, BLOCK=block, num_warps=min(8, max(1, block // 256)))\nreturn out",
    "sm = torch.cuda.get_device_properties(0).multi_processor_count\n" + LAUNCH,
    "assert x.is_contiguous() and x.dtype in (torch.float16, torch.float32)\n" + LAUNCH,
    "self._calls = 1\n" + LAUNCH,
    "print(x.shape, x.stride(), x.numel(), x.element_size(), x.data_ptr(), math.pi)\n" + LAUNCH,
])
def test_forward_allowed(body):
    v = screen(model(body))
    assert v is None, v.message


def test_init_may_build_modules_but_forward_may_not_use_them():
    init = "self.lin = nn.Linear(4, 4)\nself.w = nn.Parameter(torch.randn(4, 4))\nnn.init.zeros_(self.w)"
    assert rule_of(model(LAUNCH, init)) is None
    assert rule_of(model("return nn.Linear(4, 4)(x)", init)) == "torch_compute"
    assert rule_of(model(LAUNCH, "self.w = torch.matmul(torch.randn(2, 2), torch.randn(2, 2))")) \
        == "torch_compute"


def test_kernel_context():
    bad = PRELUDE.replace("tl.store(", "torch.relu(x_ptr)\n    tl.store(")
    assert rule_of(bad + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n") \
        == "torch_compute"
    bad = PRELUDE.replace("tl.store(", "tl.core.builtins\n    tl.store(")
    assert rule_of(bad + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n") \
        == "namespace"


@pytest.mark.parametrize("src,rule", [
    ("import torch.utils\n", "import"),
    ("from torch import *\n", "import"),
    ("from . import x\n", "import"),
    ("import numpy as np\n", "import"),
    ("from torch import save as keep\n", "file_io"),
    ("from torch import _C\n", "private_attr"),
    ("from triton import runtime\n", "introspection"),
])
def test_import_rules(src, rule):
    assert rule_of(src + model(LAUNCH)) == rule


def test_imported_compute_name_is_rejected_where_used():
    src = "from torch import matmul\n" + model("return matmul(x, x)")
    assert rule_of(src) == "torch_compute"
    src = "from torch import empty_like\n" + model(LAUNCH.replace("torch.empty_like", "empty_like"))
    assert rule_of(src) is None


def test_module_override_and_dunder_methods():
    src = model(LAUNCH, extra="") + "\n    def to(self, *a):\n        return self\n"
    assert rule_of(src) == "module_override"
    src = model(LAUNCH) + "\n    def __call__(self, x):\n        return x\n"
    assert rule_of(src) == "dunder"
    src = PRELUDE + "\nclass ModelNew(nn.Module, metaclass=type):\n    def forward(self, x):\n        return x\n"
    assert rule_of(src) == "reflection"


def test_message_names_rule_and_line_and_lists_the_rest():
    src = model("import os\nopen('/x')\nreturn eval('x')")
    v = screen(src)
    assert v.rule == "import"
    assert v.message.startswith(f"rejected by screening: import at line {v.line}:")
    assert {o.rule for o in v.others} >= {"file_io", "dynamic_code"}


def test_size_limit():
    assert rule_of(model(LAUNCH) + "\n# " + "x" * (600 * 1024) + "\n") == "size"
