// src/explore/confirm.h: finalists, the worker request, rows from its answer, the selection.
#include "explore/confirm.h"

#include <gtest/gtest.h>

#include "h200_like.h"
#include "manifest/manifest.h"

using nlohmann::json;
using namespace kiln;

namespace {

EvaluatedCandidate cand(long long id, double median, std::string status = "ok", std::string dev = "NVIDIA H200",
                        std::optional<double> est = std::nullopt) {
  EvaluatedCandidate c;
  c.candidate_id = id;
  c.config = {{"BLOCK", id * 64}};
  c.status = std::move(status);
  c.bench_device = std::move(dev);
  c.median_ms = median;
  c.estimate_ms = est;
  return c;
}

Target h200() {
  Target t = testing_targets::h200_like();
  t.device_match = {"H200"};
  return t;
}

}  // namespace

TEST(Confirm, FinalistsAreWithinTheMarginAtLeastThreeAtMostEight) {
  ConfirmSettings s;  // margin 5%, 3..8
  std::vector<EvaluatedCandidate> ev = {cand(1, 1.00), cand(2, 1.04), cand(3, 1.20), cand(4, 1.30),
                                        cand(5, 0.90, "incorrect"), cand(6, 0.95, "ok", "NVIDIA A100"),
                                        cand(7, 1.049)};
  auto f = pick_finalists(ev, h200(), true, s);
  ASSERT_EQ(f.size(), 3u);  // 1.00, 1.04, 1.049 within 5%; the wrong and the other GPU's never
  EXPECT_EQ(f[0].candidate_id, 1);
  EXPECT_EQ(f[1].candidate_id, 2);
  EXPECT_EQ(f[2].candidate_id, 7);
  s.margin = 0.0;
  f = pick_finalists(ev, h200(), true, s);  // topped up to 3 in score order
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[2].candidate_id, 7);
  s.margin = 1.0;
  s.max_finalists = 4;
  EXPECT_EQ(pick_finalists(ev, h200(), true, s).size(), 4u);
  // Not measured: by the estimate (the CPU test path).
  std::vector<EvaluatedCandidate> est = {cand(1, 0, "ok", "", 2.0), cand(2, 0, "ok", "", 1.0)};
  est[0].median_ms.reset();
  est[1].median_ms.reset();
  f = pick_finalists(est, h200(), false, ConfirmSettings{});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].candidate_id, 2);
  EXPECT_TRUE(pick_finalists(est, h200(), true, ConfirmSettings{}).empty());
}

TEST(Confirm, SettingsFromTheSpecAndTheRequest) {
  const json spec = {{"explore", {{"confirm_margin", 0.1}, {"baselines", {"eager", "compile"}}}}};
  ConfirmSettings s = confirm_settings(spec, 4, 7);
  EXPECT_DOUBLE_EQ(s.margin, 0.1);
  EXPECT_EQ(s.baselines, (std::vector<std::string>{"eager", "compile"}));
  EXPECT_EQ(confirm_settings(json::object(), 1, 1).baselines, std::vector<std::string>{"eager"});
  const json req = confirm_request({{"op", "add"}}, {{3, {{"BLOCK", 64}}, 0.1}}, s);
  EXPECT_EQ(req["method"], "confirm");
  EXPECT_EQ(req["rounds"], 4);
  EXPECT_EQ(req["reps"], 7);
  EXPECT_EQ(req["entries"].size(), 3u);
  EXPECT_EQ(req["entries"][0]["id"], 3);
  EXPECT_EQ(req["entries"][2]["baseline"], "compile");
  EXPECT_DOUBLE_EQ(req["throttle_threshold"].get<double>(), 0.90);  // the default: NVBench's rule at 90%
  EXPECT_DOUBLE_EQ(req["preheat_s"].get<double>(), 0.3);
  s.throttle_threshold = 0;
  s.throttle_recovery_s = 0.2;
  s.preheat_s = 0;
  const json off = confirm_request({{"op", "add"}}, {{3, {{"BLOCK", 64}}, 0.1}}, s);
  EXPECT_DOUBLE_EQ(off["throttle_threshold"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(off["throttle_recovery_s"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(off["preheat_s"].get<double>(), 0.0);
}

TEST(Confirm, SelectionByConfirmedMedianAmongPassedRechecks) {
  const std::vector<Finalist> fin = {{1, {}, 1.0}, {2, {}, 1.01}, {3, {}, 1.02}};
  const json result = {
      {"basis", "device"}, {"device", "NVIDIA H200"}, {"rounds", 2},
      {"conditions", {{"clock_drop", false}}},
      {"entries",
       {{{"id", 1}, {"samples_ms", {1.0, 1.0, 1.1}}, {"check", {{"passed", true}}}},
        {{"id", 2}, {"samples_ms", {0.9, 0.95, 0.9}}, {"check", {{"passed", true}}}},
        {{"id", 3}, {"samples_ms", {0.5, 0.5, 0.5}}, {"check", {{"passed", false}, {"message", "wrong"}}}},
        {{"baseline", "eager"}, {"samples_ms", {2.0, 2.1}}}}}};
  const auto rows = confirmation_rows(9, "run", fin, result);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(*rows[3].baseline, "eager");
  EXPECT_DOUBLE_EQ(rows[1].median_ms, 0.9);
  const auto best = select_confirmed(rows, {});
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->candidate_id, 2);  // 3 is faster but failed its re-check
  EXPECT_EQ(best->basis, "measured");
  EXPECT_DOUBLE_EQ(best->value_ms, 0.9);
  EXPECT_EQ(*best->confirmed_run, "run");
  // Malformed answers.
  json bad = result;
  bad["entries"][0]["id"] = 42;
  EXPECT_THROW(confirmation_rows(9, "run", fin, bad), std::runtime_error);
  bad = result;
  bad["entries"][0]["samples_ms"] = json::array();
  EXPECT_THROW(confirmation_rows(9, "run", fin, bad), std::runtime_error);
  bad = result;
  bad["basis"] = "guess";
  EXPECT_THROW(confirmation_rows(9, "run", fin, bad), std::runtime_error);
}

TEST(Confirm, CpuBasisKeepsTheEstimate) {
  const std::vector<Finalist> fin = {{1, {}, 1.0}, {2, {}, 2.0}};
  const json result = {{"basis", "cpu"}, {"device", "cpu"},
                       {"entries",
                        {{{"id", 1}, {"samples_ms", {5.0}}, {"check", {{"passed", true}}}},
                         {{"id", 2}, {"samples_ms", {4.0}}, {"check", {{"passed", true}}}}}}};
  const auto rows = confirmation_rows(9, "r", fin, result);
  const auto best = select_confirmed(rows, {cand(1, 0, "ok", "", 0.01), cand(2, 0, "ok", "", 0.02)});
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->candidate_id, 2);
  EXPECT_EQ(best->basis, "estimated");
  EXPECT_DOUBLE_EQ(best->value_ms, 0.02);
  EXPECT_DOUBLE_EQ(*best->confirmed_ms, 4.0);
}

namespace {
const Knowledge& knowledge() {
  static const Knowledge k = Knowledge::load(KILN_SOURCE_DIR);
  return k;
}
std::string manifest(const std::string& exploration) {
  return "targets: [H200]\ndefaults:\n  dtypes: [fp32]\n  exploration: " + exploration +
         "\noperators:\n  - op: add\n    shape: [1024]\n";
}
}  // namespace

TEST(Confirm, ManifestKeysReachTheSpecOnlyWhenGiven) {
  const Manifest plain = parse_manifest(manifest("{max_candidates: 4}"), "m.yaml", knowledge());
  const json p = plain.jobs.at(0).to_json(*knowledge().targets.find("H200"));
  EXPECT_FALSE(p["explore"].contains("confirm_margin"));
  EXPECT_FALSE(p["explore"].contains("baselines"));
  const Manifest m = parse_manifest(manifest("{confirm_margin: 0.1, baselines: [compile]}"), "m.yaml", knowledge());
  const json j = m.jobs.at(0).to_json(*knowledge().targets.find("H200"));
  EXPECT_DOUBLE_EQ(j["explore"]["confirm_margin"].get<double>(), 0.1);
  EXPECT_EQ(j["explore"]["baselines"], json({"eager", "compile"}));  // eager always, first
  const ConfirmSettings s = confirm_settings(j, 5, 20);
  EXPECT_EQ(s.baselines, (std::vector<std::string>{"eager", "compile"}));
  try {
    parse_manifest(manifest("{baselines: [eagre]}"), "m.yaml", knowledge());
    ADD_FAILURE() << "a misspelt baseline was accepted";
  } catch (const ManifestError& e) {
    EXPECT_NE(std::string(e.what()).find("exploration.baselines"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("eager"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_manifest(manifest("{confirm_margin: -1}"), "m.yaml", knowledge()), ManifestError);
}
