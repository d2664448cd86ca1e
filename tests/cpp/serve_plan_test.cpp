// The serving plan of reference entries (manifest/serve_plan.h): the worker's
// structural-match answers applied to the expanded jobs.
#include <gtest/gtest.h>

#include <filesystem>

#include "manifest/serve_plan.h"
#include "shipped_knowledge.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln {
namespace {

const fs::path kSource = KILN_SOURCE_DIR;
const fs::path kData = kSource / "tests/data/structural";

using kiln_test::knowledge;

Manifest parse(const std::string& text) {
  return parse_manifest(text, (kData / "plan.yaml").string(), knowledge());
}

// What the worker answers for tests/data/structural/rms_manual.py (fp32).
json rms_match(double score = 1.0) {
  return {{"served", true}, {"score", score}, {"op", "rmsnorm"}, {"module", "rmsnorm"},
          {"pattern", "x * rsqrt(mean(x^2, -1) + eps) * w"}, {"shape", {6, 48}}, {"params", {{"eps", 1e-6}}},
          {"inputs", {{"x", {{"input", 0}, {"shape", {2, 3, 48}}}}, {"weight", {{"param", "gain"}, {"shape", {48}}}}}},
          {"oracle", {{"inputs", {{"x", {{"input", 0}}}}}, {"forward_inputs", json::array()}, {"consts", json::object()}}}};
}

const char* kTwo = R"(
targets: [H200]
operators:
  - op: softmax
    input_shape: [4, 8]
    dtypes: [fp32]
  - reference: rms_manual.py
)";

TEST(ServePlan, ReferenceWithoutGeneratorIsAutoUntilPlanned) {
  Manifest m = parse(kTwo);
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[1].explore.generator, "auto");
  EXPECT_TRUE(m.jobs[1].to_json(*knowledge().targets.find("H200")).contains("llm"));  // its threshold
}

TEST(ServePlan, ServedReferenceBecomesTheTemplateJob) {
  Manifest m = parse(kTwo);
  const json reference = m.jobs[1].reference;
  auto plan = apply_serve_plan(m, json::array({nullptr, rms_match()}), knowledge().operators);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].generator, "template");
  EXPECT_FALSE(plan[0].reference);
  EXPECT_TRUE(plan[1].reference);
  EXPECT_TRUE(plan[1].served_by_template);
  EXPECT_EQ(plan[1].generator, "template");
  EXPECT_EQ(plan[1].op, "rmsnorm");
  const JobSpec& j = m.jobs[1];
  EXPECT_EQ(j.op, "rmsnorm");
  EXPECT_EQ(j.shape, (std::vector<long long>{6, 48}));
  EXPECT_EQ(j.explore.generator, "template");
  EXPECT_TRUE(j.reference.is_null());
  EXPECT_EQ(j.oracle["reference"], reference);
  EXPECT_EQ(j.oracle["name"], "rms_manual");
  EXPECT_EQ(j.oracle["score"], 1.0);
  const json js = j.to_json(*knowledge().targets.find("H200"));
  EXPECT_FALSE(js.contains("reference"));
  EXPECT_FALSE(js.contains("llm"));
  EXPECT_EQ(js["oracle"]["inputs"]["x"]["input"], 0);
  EXPECT_EQ(js["params"]["eps"], 1e-6);
}

TEST(ServePlan, UnservedOrBelowThresholdGoesToTheLlm) {
  for (const json& mt : {json{{"served", false}, {"score", 0.0}, {"reason", "no template family computes this graph (sort)"}},
                         rms_match(0.79), json()}) {
    Manifest m = parse(kTwo);
    m.jobs[1].llm.retrieval_threshold = 0.8;
    auto plan = apply_serve_plan(m, json::array({nullptr, mt}), knowledge().operators);
    EXPECT_EQ(plan[1].generator, "llm") << mt.dump();
    EXPECT_FALSE(plan[1].served_by_template);
    EXPECT_EQ(m.jobs[1].explore.generator, "llm");
    EXPECT_FALSE(m.jobs[1].reference.is_null());
    EXPECT_TRUE(m.jobs[1].oracle.is_null());
    EXPECT_FALSE(plan[1].reason.empty() && mt.is_object() && mt.contains("reason"));
  }
}

TEST(ServePlan, LlmGivenIsKeptEvenWhereATemplateServes) {
  Manifest m = parse("targets: [H200]\noperators:\n  - reference: rms_manual.py\n    exploration: {generator: llm}\n");
  auto plan = apply_serve_plan(m, json::array({rms_match()}), knowledge().operators);
  EXPECT_EQ(plan[0].generator, "llm");
  EXPECT_EQ(m.jobs[0].op, "rms_manual");
  EXPECT_NE(plan[0].reason.find("rmsnorm would serve it"), std::string::npos);
}

TEST(ServePlan, TemplateGivenButUnmatchedIsAnErrorAtTheEntry) {
  Manifest m = parse("targets: [H200]\noperators:\n  - reference: sorted_rows.py\n    exploration: {generator: template}\n");
  try {
    apply_serve_plan(m, json::array({{{"served", false}, {"score", 0.0}, {"reason", "(sort)"}}}), knowledge().operators);
    FAIL() << "expected a ManifestError";
  } catch (const ManifestError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(e.message().find("no template family serves it: (sort)"), std::string::npos) << e.what();
  }
}

TEST(ServePlan, UnknownOperatorFromTheWorkerIsNotServed) {
  Manifest m = parse("targets: [H200]\noperators:\n  - reference: rms_manual.py\n");
  json mt = rms_match();
  mt["op"] = "no_such_op";
  auto plan = apply_serve_plan(m, json::array({mt}), knowledge().operators);
  EXPECT_EQ(plan[0].generator, "llm");
  EXPECT_NE(plan[0].reason.find("not in kernels/operators.yaml"), std::string::npos);
}

}  // namespace
}  // namespace kiln
