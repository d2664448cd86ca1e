// Reflection: diagnoses of outcomes, and template pruning from resource errors.
#include <gtest/gtest.h>

#include "reflect/reflect.h"
#include "search/prune.h"

using nlohmann::json;

namespace kiln {
namespace {

using reflect::diagnose;

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

Outcome outcome(const std::string& status, const std::string& message, json result = json::object(),
                std::optional<double> score = std::nullopt) {
  Outcome o;
  o.status = status;
  o.message = message;
  o.result = std::move(result);
  o.score_ms = score;
  return o;
}

TEST(Diagnose, SyntaxError) {
  auto d = diagnose(outcome("compile_error", "SyntaxError: expected ':' (line 8, column 69)"), {}, {});
  EXPECT_EQ(d.kind, "syntax_error");
  EXPECT_TRUE(has(d.summary, "expected ':'"));
  EXPECT_TRUE(has(d.constraint, "syntactically valid"));
}

TEST(Diagnose, CompileErrorsGetSpecificConstraints) {
  auto d = diagnose(outcome("compile_error", "CompilationError: at 10:4: arange's range must be a power of 2"), {}, {});
  EXPECT_EQ(d.kind, "compile_error");
  EXPECT_TRUE(has(d.summary, "Triton could not compile"));
  EXPECT_TRUE(has(d.summary, "power of 2"));
  EXPECT_TRUE(has(d.constraint, "power-of-two"));
  EXPECT_TRUE(has(diagnose(outcome("compile_error", "tl.atomic_add is not supported here"), {}, {}).constraint,
                  "avoid atomics"));
  EXPECT_TRUE(has(diagnose(outcome("compile_error", "NameError: name 'tl' is not defined"), {}, {}).constraint,
                  "import"));
  EXPECT_FALSE(diagnose(outcome("compile_error", "something odd"), {}, {}).constraint.empty());
}

TEST(Diagnose, ResourceErrors) {
  auto lds = diagnose(outcome("resource_error", "out of resource: shared memory, Required: 131072, Hardware limit: 65536"), {}, {});
  EXPECT_EQ(lds.kind, "resource_error");
  EXPECT_TRUE(has(lds.summary, "LDS / shared memory"));
  EXPECT_TRUE(has(lds.constraint, "smaller BLOCK sizes"));
  auto regs = diagnose(outcome("resource_error", "register spills: 120 VGPRs spilled"), {}, {});
  EXPECT_TRUE(has(regs.summary, "registers"));
  EXPECT_TRUE(has(regs.constraint, "registers fit"));
}

TEST(Diagnose, IncorrectCarriesMaxErrorAndWhere) {
  json r = {{"correctness", {{"max_abs_err", 3.41}, {"max_rel_err", 0.5}}}};
  auto d = diagnose(outcome("incorrect", "69 of 132 elements out of tolerance; max abs err 3.411 at [2, 7]", r), {}, {});
  EXPECT_EQ(d.kind, "incorrect");
  EXPECT_TRUE(has(d.summary, "max abs error 3.41"));
  EXPECT_TRUE(has(d.summary, "at [2, 7]"));
  EXPECT_TRUE(has(d.constraint, "match the reference"));
  EXPECT_TRUE(has(diagnose(outcome("incorrect", "output has NaN at [0, 3]"), {}, {}).constraint, "every output element"));
}

TEST(Diagnose, TimeoutCrashRejected) {
  auto t = diagnose(outcome("timeout", "no answer within 300 s"), {}, {});
  EXPECT_EQ(t.kind, "timeout");
  EXPECT_TRUE(has(t.constraint, "terminate"));
  auto c = diagnose(outcome("crash", "RuntimeError: illegal memory access was encountered"), {}, {});
  EXPECT_EQ(c.kind, "crash");
  EXPECT_TRUE(has(c.constraint, "mask every load"));
  auto r = diagnose(outcome("rejected", "torch_compute: forward calls torch.softmax"), {}, {});
  EXPECT_EQ(r.kind, "rejected");
  EXPECT_TRUE(has(r.summary, "torch.softmax"));
  EXPECT_TRUE(has(r.constraint, "no torch compute ops"));
}

TEST(Diagnose, SlowerThanReferenceOrBest) {
  json measured = {{"latency", {{"median_ms", 2.0}}}, {"correctness", {{"max_abs_err", 1e-6}}}};
  auto ref = diagnose(outcome("ok", "", measured, 2.0), std::nullopt, 1.0);
  EXPECT_EQ(ref.kind, "slower");
  EXPECT_TRUE(has(ref.summary, "PyTorch reference"));
  EXPECT_TRUE(has(ref.summary, "2 ms against 1 ms"));
  auto best = diagnose(outcome("ok", "", json::object(), 3.0), 1.0, std::nullopt);
  EXPECT_EQ(best.kind, "slower");
  EXPECT_TRUE(has(best.summary, "best kernel so far"));
  EXPECT_TRUE(has(best.summary, "static estimate"));
  // An estimate is never compared with the reference's measured latency.
  EXPECT_EQ(diagnose(outcome("ok", "", json::object(), 3.0), std::nullopt, 1.0).kind, "ok");
  // Within 5% of the best: fine.
  EXPECT_EQ(diagnose(outcome("ok", "", json::object(), 1.04), 1.0, std::nullopt).kind, "ok");
  EXPECT_TRUE(diagnose(outcome("ok", "", json::object(), 1.0), 1.0, std::nullopt).constraint.empty());
}

TEST(Excerpt, KeepsErrorLinesAndTail) {
  std::string msg;
  for (int i = 0; i < 200; ++i) msg += "  File \"x.py\", line " + std::to_string(i) + ", in f\n";
  msg.insert(100, "ValueError: the important line\n");
  msg += "RuntimeError: the last line\n";
  const std::string e = reflect::excerpt(msg, 600);
  EXPECT_LE(e.size(), 700u);
  EXPECT_TRUE(has(e, "ValueError: the important line"));
  EXPECT_TRUE(has(e, "RuntimeError: the last line"));
  EXPECT_EQ(reflect::excerpt("short"), "short");
}

TEST(Prune, ResourceErrorDropsLargerTiles) {
  std::vector<json> space;
  for (int m : {32, 64, 128})
    for (int n : {32, 64, 128})
      for (int s : {1, 2}) space.push_back({{"BLOCK_M", m}, {"BLOCK_N", n}, {"num_stages", s}, {"num_warps", 4}});
  EXPECT_EQ(*block_product(space[0]), 32.0 * 32);
  EXPECT_FALSE(block_product(json{{"num_warps", 4}}));
  // Nothing failed: nothing pruned.
  auto none = prune_space(space, {});
  EXPECT_EQ(none.configs.size(), space.size());
  EXPECT_EQ(none.removed, 0u);
  EXPECT_EQ(none.kept.size(), space.size());

  Outcome o = outcome("resource_error", "out of resource: shared memory");
  o.candidate.generator = "template";
  o.candidate.config = {{"BLOCK_M", 64}, {"BLOCK_N", 128}, {"num_stages", 2}, {"num_warps", 4}};
  auto r = prune_space(space, {o});
  // Dropped: product >= 8192 with num_stages >= 2, except the failing config itself (evaluated).
  for (const auto& c : r.configs) {
    const double p = *block_product(c);
    const int s = c["num_stages"];
    if (c == o.candidate.config) continue;
    EXPECT_FALSE(p >= 8192 && s >= 2) << c.dump();
  }
  // 64x128, 128x64, 128x128 at 2 stages = 3, minus the failing config kept = 2 dropped.
  EXPECT_EQ(r.removed, 2u);
  EXPECT_EQ(r.configs.size() + r.removed, space.size());
  ASSERT_EQ(r.kept.size(), r.configs.size());
  for (size_t i = 0; i < r.kept.size(); ++i) EXPECT_EQ(space[r.kept[i]], r.configs[i]);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_TRUE(has(r.notes[0], "BLOCK product >= 8192"));

  // Other failures do not prune.
  Outcome bad = outcome("incorrect", "");
  bad.candidate.config = o.candidate.config;
  EXPECT_EQ(prune_space(space, {bad}).removed, 0u);
}

}  // namespace
}  // namespace kiln
