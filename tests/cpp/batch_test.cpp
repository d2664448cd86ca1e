// src/batch: a manifest's jobs (keys, defaults, claim order), the nightly
// report's two forms, the measurements file, the default worker count.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "batch/errors.h"
#include "batch/expand.h"
#include "batch/measurements_file.h"
#include "batch/nightly_report.h"
#include "batch/workers.h"
#include "manifest/manifest.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln::batch {
namespace {

const Knowledge& knowledge() {
  static const Knowledge k = Knowledge::load(KILN_SOURCE_DIR);
  return k;
}

Manifest manifest(const std::string& text) { return parse_manifest(text, "m.yaml", knowledge()); }

const char* kTwoOps = R"(name: t
targets: [H200]
operators:
  - op: softmax
    shapes: [[64, 128], [32, 256]]
    dtypes: [fp16]
    exploration: {max_candidates: 4}
  - op: layernorm
    shapes: [[64, 128]]
    dtypes: [fp32]
)";

json hello(const std::string& softmax_version, const std::string& triton) {
  return {{"triton", triton}, {"templates", {{"softmax", softmax_version}, {"layernorm", "ln1"}}}};
}

TEST(ExpandJobs, KeysAreStableAndCoverTemplateAndTriton) {
  const Manifest m = manifest(kTwoOps);
  const auto a = expand_jobs(m, knowledge(), hello("s1", "3.6.0"));
  const auto b = expand_jobs(m, knowledge(), hello("s1", "3.6.0"));
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].key, b[i].key);
  EXPECT_NE(a[0].key, a[1].key);  // another shape
  const auto other_template = expand_jobs(m, knowledge(), hello("s2", "3.6.0"));
  EXPECT_NE(other_template[0].key, a[0].key);
  EXPECT_EQ(other_template[2].key, a[2].key);  // layernorm's template did not change
  const auto other_triton = expand_jobs(m, knowledge(), hello("s1", "3.5.0"));
  EXPECT_NE(other_triton[2].key, a[2].key);
}

TEST(ExpandJobs, ParamsAreCompleteWithTheRegistryDefaults) {
  const auto jobs = expand_jobs(manifest(kTwoOps), knowledge(), hello("s1", "3.6.0"));
  const OperatorSpec* ln = knowledge().operators.find("layernorm");
  ASSERT_NE(ln, nullptr);
  ASSERT_FALSE(ln->params.empty());
  for (const ParamSpec& p : ln->params) {
    EXPECT_EQ(jobs[2].params.at(p.name), p.default_value) << p.name;
    EXPECT_EQ(jobs[2].spec.at("params").at(p.name), p.default_value) << p.name;  // what the worker is sent
  }
}

TEST(ExpandJobs, DuplicateKeysAreKeptOnce) {
  const std::string twice = std::string(kTwoOps) + R"(  - op: layernorm
    shapes: [[64, 128]]
    dtypes: [fp32]
    params: {eps: 1.0e-5}
)";
  Manifest m;
  try {
    m = manifest(twice);
  } catch (const ManifestError&) {
    GTEST_SKIP() << "the manifest refuses a repeated entry itself";
  }
  EXPECT_EQ(expand_jobs(m, knowledge(), hello("s1", "3.6.0")).size(), 3u);
}

TEST(ExpandJobs, ClaimOrderFromSpaceHistoryAndTraffic) {
  const Manifest m = manifest(kTwoOps);
  json h = hello("s1", "3.6.0");
  h["job_space"] = {10, 2, nullptr};
  h["job_traffic"] = {{{"bytes", 1e9}, {"flops", 1e6}}, nullptr, nullptr};
  const OperatorSpec* sm = knowledge().operators.find("softmax");
  auto jobs = expand_jobs(m, knowledge(), h);
  EXPECT_DOUBLE_EQ(jobs[0].compile_est_s, 4 * sm->compile_s);  // at most max_candidates
  EXPECT_DOUBLE_EQ(jobs[1].compile_est_s, 2 * sm->compile_s);
  EXPECT_EQ(jobs[2].compile_est_s, 0);  // unsized
  EXPECT_GT(jobs[0].priority, 0);
  EXPECT_EQ(jobs[1].priority, 0);
  jobs = expand_jobs(m, knowledge(), h, {{{"softmax", jobs[0].arch}, 1.5}});
  EXPECT_DOUBLE_EQ(jobs[0].compile_est_s, 4 * 1.5);  // the catalog's history wins
}

TEST(OperatorDefaults, GivenValuesWinRequiredStayOut) {
  const OperatorSpec* ln = knowledge().operators.find("layernorm");
  const json p = ln->with_defaults({{"eps", 0.5}, {"extra", 1}});
  EXPECT_EQ(p.at("eps"), 0.5);
  EXPECT_EQ(p.at("extra"), 1);
  const OperatorSpec* pw = knowledge().operators.find("pointwise");
  ASSERT_NE(pw, nullptr);
  const json q = pw->with_defaults(nullptr);
  EXPECT_FALSE(q.contains("expr"));  // required: no default
  EXPECT_TRUE(q.contains("inputs"));
}

NightlyBest best(double ms, std::vector<double> samples = {}, const std::string& basis = "measured") {
  return {.job_id = 7, .key = "k", .basis = basis, .device = basis == "measured" ? "NVIDIA H200" : "",
          .ms = ms, .candidate_id = 3, .samples = std::move(samples), .samples_basis = "device"};
}

NightlyJob job(const std::string& op, NightlyStatus s) {
  return {.id = 1, .key = op + "-key", .op = op, .dtype = "fp16", .target = "H200",
          .state = s == NightlyStatus::Failed ? "failed" : "done", .shape = {64, 128},
          .params = json::object(), .ran_now = s != NightlyStatus::Unchanged, .status = s};
}

NightlyReport report() {
  NightlyReport r{.name = "nightly-test", .when = "2026-01-01 00:00:00 UTC", .manifest = "/m.yaml",
                  .catalog = "k.db", .batch = "b1", .triton = "3.6.0", .threshold = 0.05, .min_effect = 0.03};
  NightlyJob slower = job("softmax", NightlyStatus::Regression);
  std::vector<double> before, after;
  for (int i = 0; i < 20; ++i) {
    before.push_back(1.0 + 0.001 * i);
    after.push_back(1.2 + 0.001 * i);
  }
  slower.now = best(1.2, after);
  slower.previous = best(1.0, before);
  slower.test = stats::decide_regression(slower.previous->samples, slower.now->samples, {0.01, 0.03});
  slower.ratio = slower.test->ratio;
  slower.regression = true;
  NightlyJob mixed = job("add", NightlyStatus::NotComparable);
  mixed.now = best(0.5);
  mixed.previous = best(0.4, {}, "estimated");
  NightlyJob same = job("layernorm", NightlyStatus::Same);
  same.now = best(1.0);
  same.previous = best(1.01);
  same.ratio = 1.0 / 1.01;
  same.by_ratio = true;
  NightlyJob failed = job("matmul", NightlyStatus::Failed);
  failed.message = "no config compiled";
  failed.previous = best(2.0);
  failed.regression = true;
  r.jobs = {slower, mixed, same, failed, job("rmsnorm", NightlyStatus::Unchanged)};
  NightlyPackage skipped;
  skipped.target = "H200";
  skipped.skipped = "regressions";
  r.packages = {skipped};
  return r;
}

TEST(NightlyReport, JsonCountsDecisionsAndNotes) {
  const NightlyReport r = report();
  const json j = to_json(r);
  EXPECT_EQ(j["summary"]["jobs"], 5);
  EXPECT_EQ(j["summary"]["regression"], 1);
  EXPECT_EQ(j["summary"]["failed"], 1);
  EXPECT_EQ(j["summary"]["not comparable"], 1);
  EXPECT_EQ(j["summary"]["unchanged"], 1);
  EXPECT_EQ(j["summary"]["ran_now"], 4);
  EXPECT_EQ(j["summary"]["regressions"], 2);
  EXPECT_EQ(j["regressions"], json({"softmax 64x128 fp16 H200", "matmul 64x128 fp16 H200"}));
  const json& d = j["jobs"][0]["decision"];
  EXPECT_EQ(d["decided_by"], "mann-whitney");
  EXPECT_EQ(d["verdict"], "regressed");
  EXPECT_EQ(d["n_now"], 20);
  EXPECT_EQ(j["jobs"][0]["new"]["confirmed_samples"], 20);
  EXPECT_TRUE(j["jobs"][1]["decision"].is_null());
  EXPECT_NE(j["jobs"][1]["note"].get<std::string>().find("not comparable: measured now, estimated before"),
            std::string::npos);
  EXPECT_EQ(j["jobs"][2]["decision"]["decided_by"], "ratio");
  EXPECT_EQ(j["jobs"][3]["message"], "no config compiled");
  EXPECT_TRUE(j["jobs"][3]["new"].is_null());
  EXPECT_EQ(j["packages"][0], json({{"target", "H200"}, {"skipped", "regressions"}}));
  EXPECT_TRUE(j["run"].is_null());
  EXPECT_EQ(j["batch"], "b1");
}

TEST(NightlyReport, MarkdownNamesTheRegressions) {
  const std::string md = markdown(report());
  EXPECT_NE(md.find("**2 regression(s):**"), std::string::npos) << md;
  EXPECT_NE(md.find("- matmul 64x128 fp16 H200: failed (no config compiled), previous best 2 ms measured on "
                    "NVIDIA H200"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| softmax | 64x128 | fp16 | H200 | **regression** | yes |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ratio (no samples) |"), std::string::npos) << md;
  EXPECT_NE(md.find("- H200: not packaged: regressions"), std::string::npos) << md;
  NightlyReport quiet = report();
  quiet.jobs = {quiet.jobs[2]};
  quiet.packages.clear();
  const std::string q = markdown(quiet);
  EXPECT_NE(q.find("No regressions."), std::string::npos);
  EXPECT_EQ(q.find("## Packages"), std::string::npos);
}

fs::path temp_file(const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("kiln_batch_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << text;
  return p;
}

TEST(MeasurementsFile, ReadsAValidFile) {
  const fs::path p = temp_file(R"({"format": "kiln-measurements/1", "device": "AMD Instinct MI300X",
    "target": "MI300X", "kernels": [{"job_key": "abc", "candidate_id": 4, "median_ms": 0.5,
    "samples": [0.5, 0.51]}]})");
  const MeasurementsIn m = read_measurements(p, knowledge());
  fs::remove(p);
  EXPECT_EQ(m.device, "AMD Instinct MI300X");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].candidate_id, 4);
  EXPECT_EQ(m.kernels[0].targets, std::vector<std::string>{"MI300X"});
}

TEST(MeasurementsFile, ABadFieldIsAnInputErrorNamingFileAndField) {
  const fs::path p = temp_file(R"({"device": "x", "kernels": [{"job_key": "abc", "candidate_id": 0}]})");
  try {
    read_measurements(p, knowledge());
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kernels[0].candidate_id"), std::string::npos) << e.what();
  }
  fs::remove(p);
  EXPECT_THROW(read_measurements("/nonexistent/m.json", knowledge()), InputError);
}

TEST(DefaultWorkers, OneOnTheCpuACorePerWorkerOnGpus) {
  RunOptions o;
  o.device = "cpu";
  EXPECT_EQ(default_workers(o), 1);
  o.device = "gpu";
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(default_workers(o), std::clamp(cores - 1, 1, 12));
  o.device = "auto";
  o.gpus.ids = {"0", "1"};
  EXPECT_EQ(default_workers(o), std::clamp(cores - 1, 1, 24));
}

}  // namespace
}  // namespace kiln::batch
