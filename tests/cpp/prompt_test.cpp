// Prompt rendering (task, knowledge, example, reflection) and reply code extraction.
#include <gtest/gtest.h>

#include "generate/prompt.h"
#include "manifest/manifest.h"
#include "shipped_knowledge.h"

using nlohmann::json;

namespace kiln {
namespace {

using kiln_test::knowledge;

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Each of `parts` is in `text` (a failure names the part).
void expect_has(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) {
    EXPECT_TRUE(has(text, p)) << "no \"" << p << "\" in:\n" << text;
  }
}

// None of `parts` is in `text`.
void expect_lacks(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) {
    EXPECT_FALSE(has(text, p)) << "\"" << p << "\" in:\n" << text;
  }
}

// Each of `parts` is in `text`, and the first place of each comes after the one before's.
void expect_in_order(const std::string& text, std::initializer_list<std::string> parts) {
  size_t before = 0;
  const std::string* previous = nullptr;
  for (const std::string& p : parts) {
    const size_t at = text.find(p);
    ASSERT_NE(at, std::string::npos) << "no \"" << p << "\" in:\n" << text;
    if (previous != nullptr) {
      EXPECT_LT(before, at) << "\"" << *previous << "\" is not before \"" << p << "\"";
    }
    before = at;
    previous = &p;
  }
}

prompt::Inputs base() {
  prompt::Inputs in;
  in.op = "relu_scale";
  in.description = "ReLU then scale";
  in.reference_source = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2\n";
  in.reference_path = "/abs/relu_scale.py";
  in.dtype = "fp32";
  in.target = knowledge().targets.find("MI300X");
  in.principles = prompt::select_principles(knowledge().principles, {"fit_lds"}, "hip");
  return in;
}

TEST(Principles, AskedFirstThenHeavyOnesByWeight) {
  auto p = prompt::select_principles(knowledge().principles, {"maximize_occupancy"}, "hip", 0.75);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p[0].first->name, "maximize_occupancy");  // weight 0.5, but asked for
  EXPECT_TRUE(p[0].second);
  for (size_t i = 1; i < p.size(); ++i) {
    EXPECT_FALSE(p[i].second);
    EXPECT_GE(p[i].first->weight, 0.75);
    if (i > 1) {
      EXPECT_LE(p[i].first->weight, p[i - 1].first->weight);
    }
  }
  // fit_lds is AMD only: asked for on a cuda target, it is left out.
  auto cuda = prompt::select_principles(knowledge().principles, {"fit_lds"}, "cuda", 0.75);
  for (const auto& [pr, asked] : cuda) EXPECT_NE(pr->name, "fit_lds");
  // A cut above every weight keeps only the asked ones.
  auto only = prompt::select_principles(knowledge().principles, {"avoid_atomics"}, "hip", 1.5);
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0].first->name, "avoid_atomics");
}

TEST(Render, TargetSpecs) {
  const std::string amd = prompt::render_target(*knowledge().targets.find("MI300X"));
  expect_has(amd, {"## Hardware: MI300X (gfx942", "compute units (CUs): 304", "wavefront size: 64",
                   "LDS per CU: 64 KiB", "L2 cache: 32 MiB", "Infinity Cache (MALL): 256 MiB",
                   "memory bandwidth: 5300 GB/s", "fp16 1307"});
  const std::string nv = prompt::render_target(*knowledge().targets.find("H200"));
  expect_has(nv, {"warp size: 32", "streaming multiprocessors (SMs)", "shared memory per SM"});
}

TEST(Render, FirstRoundLayout) {
  prompt::Inputs in = base();
  in.reference_info = {{"inputs", json::array({{{"kind", "tensor"}, {"shape", {4, 33}}, {"dtype", "fp32"}}})},
                       {"latency", {{"median_ms", 0.0123}, {"device", "NVIDIA H200"}}}};
  const json msgs = prompt::render_messages(in);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0]["role"], "system");
  EXPECT_EQ(msgs[1]["role"], "user");
  const std::string u = msgs[1]["content"];
  // Sections in order: task, reference, inputs, hardware, principles, answer.
  expect_in_order(u, {"## Task", "### Reference (/abs/relu_scale.py)", "arg 0: fp32 [4, 33]",
                      "## Hardware: MI300X", "## Optimisation principles", "## Answer"});
  expect_has(u, {"class ModelNew(torch.nn.Module)", "return torch.relu(x) * 2", "About it: ReLU then scale",
                 "PyTorch eager latency: 0.0123 ms on NVIDIA H200", "1. fit_lds (weight", "required",
                 knowledge().principles.find("fit_lds")->prompt.substr(0, 40)});
  expect_lacks(u, {"Previous attempt", "## Example", "## Constraints"});
}

TEST(Render, ExampleAndRepairRound) {
  prompt::Inputs in = base();
  in.example = prompt::Example{"kernels/elementwise.py", 0.91, "@triton.jit\ndef add_kernel(): pass\n",
                               "It ran with config {\"BLOCK\":1024}."};
  in.previous = prompt::Attempt{0, "def broken(:\n", {"syntax_error", "The code is not valid Python:\nSyntaxError", "x"}};
  in.constraints = {"avoid atomics", "smaller BLOCK sizes"};
  in.best_so_far_ms = 0.5;
  in.round = 1;
  const std::string u = prompt::render_user(in);
  expect_in_order(u, {"## Example: a known-good kernel for a similar problem (kernels/elementwise.py, similarity 0.91)",
                      "## Previous attempt (round 0) and its diagnosis", "## Constraints for this attempt"});
  expect_has(u, {"def add_kernel(): pass", "It ran with config {\"BLOCK\":1024}.", "```python\ndef broken(:\n```",
                 "Diagnosis: syntax_error — The code is not valid Python:\nSyntaxError",
                 "- avoid atomics\n- smaller BLOCK sizes\n", "Best correct kernel so far: 0.5 ms.",
                 "Fix the problems above"});
}

TEST(Render, LibraryOperator) {
  prompt::Inputs in = base();
  in.is_reference = false;
  in.op = "softmax";
  in.shape = {128, 1000};
  in.dtype = "fp16";
  const std::string u = prompt::render_user(in);
  EXPECT_TRUE(has(u, "library operator `softmax` for shape [128, 1000], dtype fp16"));
}

TEST(ExtractCode, PythonFence) {
  EXPECT_EQ(prompt::extract_code("Here:\n```python\nimport torch\nx = 1\n```\nDone."), "import torch\nx = 1");
  EXPECT_EQ(prompt::extract_code("```py\na = 2\n```"), "a = 2");
  // The python block wins over an earlier other block.
  EXPECT_EQ(prompt::extract_code("```bash\npip install triton\n```\n\n```python\nb = 3\n```"), "b = 3");
  // The first python block when there are several.
  EXPECT_EQ(prompt::extract_code("```python\nfirst = 1\n```\ntext\n```python\nsecond = 2\n```"), "first = 1");
}

TEST(ExtractCode, FallbacksAndTruncation) {
  EXPECT_EQ(prompt::extract_code("```\nplain = 1\n```"), "plain = 1");
  EXPECT_EQ(prompt::extract_code("  import torch\nprint(1)\n"), "import torch\nprint(1)");
  // A reply cut off inside the block (max_tokens): to the end.
  EXPECT_EQ(prompt::extract_code("ok\n```python\nimport triton\ndef k():\n    pass"), "import triton\ndef k():\n    pass");
  // Inline backticks are not fences.
  EXPECT_EQ(prompt::extract_code("use `x` and ```python``` inline"), "use `x` and ```python``` inline");
  EXPECT_EQ(prompt::extract_code(""), "");
}

}  // namespace
}  // namespace kiln
