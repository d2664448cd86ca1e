// Best-candidate selection: measured on the target's kind beats everything;
// estimates are used only when nothing was measured there; never mixed.
#include "explore/select.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace kiln {
namespace {

using nlohmann::json;

class SelectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kiln-select-" + std::to_string(getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    catalog_ = std::make_unique<Catalog>(
        Catalog::open(dir_ / "kiln.db", false, std::filesystem::path(KILN_SOURCE_DIR) / "db" / "migrations"));
    catalog_->submit("t", "t.yaml", "", {NewJob{.key = "k1", .op = "softmax", .dtype = "fp16", .target = "H200",
                                                .arch = "sm_90", .shape = json::array({4, 8}),
                                                .params = json::object(), .spec = {{"op", "softmax"}}}});
    job_ = catalog_->claim_job("me:1", 60)->id;
    h200_.name = "H200";
    h200_.vendor = "nvidia";
    h200_.device_match = {"H200"};
  }
  void TearDown() override {
    catalog_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Adds a candidate with an evaluation.
  long long add(const std::string& status, std::optional<double> median, const std::string& device,
                std::optional<double> estimate) {
    CandidateRow c;
    c.job_id = job_;
    c.key = "c" + std::to_string(++n_);
    c.generator = "template";
    c.template_name = "softmax";
    c.config = {{"BLOCK", n_}};
    CandidateRow stored = catalog_->add_candidate(c);
    EvaluationIn e;
    e.status = status;
    e.result = json::object();
    if (median) e.result["latency"] = {{"device", device}, {"median_ms", *median}, {"runs", 10}};
    e.estimate_ms = estimate;
    catalog_->record_evaluation(stored.id, e);
    return stored.id;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Catalog> catalog_;
  long long job_ = 0;
  int n_ = 0;
  Target h200_;
};

TEST_F(SelectTest, MeasuredOnTheTargetsKindWins) {
  add("ok", std::nullopt, "", 0.001);                 // the best estimate
  long long fast = add("ok", 0.5, "NVIDIA H200", 0.9);
  add("ok", 0.7, "NVIDIA H200", 0.002);
  Selection s = select_best(*catalog_, job_, h200_);
  ASSERT_TRUE(s.best);
  EXPECT_EQ(s.best->candidate_id, fast);
  EXPECT_EQ(s.best->basis, "measured");
  EXPECT_DOUBLE_EQ(s.best->value_ms, 0.5);
  EXPECT_EQ(s.best->device, "NVIDIA H200");
}

TEST_F(SelectTest, AnotherKindsLatencyIsNotAMeasurementOfThisTarget) {
  add("ok", 0.1, "NVIDIA H100 80GB HBM3", 0.8);
  long long est = add("ok", 0.9, "NVIDIA H100 80GB HBM3", 0.3);
  Selection s = select_best(*catalog_, job_, h200_);
  ASSERT_TRUE(s.best);
  EXPECT_EQ(s.best->basis, "estimated");
  EXPECT_EQ(s.best->candidate_id, est);
}

TEST_F(SelectTest, FailedCandidatesNeverWin) {
  add("incorrect", 0.01, "NVIDIA H200", 0.001);
  add("timeout", std::nullopt, "", std::nullopt);
  long long ok = add("ok", 2.0, "NVIDIA H200", 1.0);
  Selection s = select_best(*catalog_, job_, h200_);
  ASSERT_TRUE(s.best);
  EXPECT_EQ(s.best->candidate_id, ok);
  EXPECT_EQ(s.evaluated, 3);
  EXPECT_EQ(s.correct, 1);
}

TEST_F(SelectTest, NothingCorrectSummarisesFailures) {
  add("incorrect", 0.01, "NVIDIA H200", 0.001);
  add("compile_error", std::nullopt, "", std::nullopt);
  add("compile_error", std::nullopt, "", std::nullopt);
  Selection s = select_best(*catalog_, job_, h200_);
  EXPECT_FALSE(s.best);
  EXPECT_EQ(s.failure_summary, "2 compile_error, 1 incorrect");
}

}  // namespace
}  // namespace kiln
