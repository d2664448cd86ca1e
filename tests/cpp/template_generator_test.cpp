// The template generator with a real catalog: halving's priors come from the
// catalog's measured jobs of the same operator, template, arch and device.
#include "generate/template_generator.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "catalog/job_key.h"
#include "h200_like.h"
#include "temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kMigrations = fs::path(KILN_SOURCE_DIR) / "db" / "migrations";

json cfg(int bm, int bn, int w) { return {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"BLOCK_K", 64}, {"num_warps", w}}; }

NewJob matmul_job(const json& shape, const std::string& triton = "3.6.0") {
  NewJob j{.op = "matmul", .dtype = "bf16", .target = "H200", .arch = "sm_90", .shape = shape,
           .params = json::object()};
  j.spec = {{"op", j.op}, {"shape", shape}, {"dtype", j.dtype}, {"params", j.params},
            {"explore", {{"strategy", "halving"}, {"max_candidates", 16}}}};
  j.key = job_key(j.spec, "template-sha", triton);
  return j;
}

class TemplateGeneratorTest : public ::testing::Test {
 protected:

  // A past job (4096^3 unless given) whose fastest config measured on `device` is `fast`.
  void record_past(Catalog& cat, const std::string& device, const json& fast,
                   const NewJob& past = matmul_job({4096, 4096, 4096})) {
    cat.submit("past", "m.yaml", "text", {past});
    const long long job = cat.query("SELECT id FROM jobs").rows.at(0).at(0).get<long long>();
    for (const auto& [config, ms] : {std::pair{fast, 0.2}, std::pair{cfg(128, 128, 8), 0.3}}) {
      CandidateRow c;
      c.job_id = job;
      c.generator = "template";
      c.template_name = "matmul";
      c.config = config;
      EvaluationIn e;
      e.status = "ok";
      e.result = {{"status", "ok"}, {"latency", {{"device", device}, {"median_ms", ms}, {"runs", 10}}}};
      cat.record_evaluation(cat.add_candidate(c).id, e);
    }
  }

  // Round 0 of a new 2048x4096x4096 job, measured on an H200.
  std::pair<std::vector<Proposal>, std::vector<std::string>> round0(Catalog* cat, bool measured = true) {
    const NewJob nj = matmul_job({2048, 4096, 4096});
    JobContext ctx;
    ctx.row.id = 99;
    ctx.row.key = nj.key;
    ctx.row.op = nj.op;
    ctx.row.dtype = nj.dtype;
    ctx.row.target = nj.target;
    ctx.row.arch = nj.arch;
    ctx.row.shape = nj.shape;
    ctx.row.params = nj.params;
    ctx.row.spec = nj.spec;
    ctx.target = &target;
    ctx.module = "matmul";
    for (int bm : {64, 128, 256})
      for (int bn : {64, 128, 256})
        for (int w : {4, 8}) ctx.space.push_back(cfg(bm, bn, w));
    ctx.traffic.bytes = 2.0 * (2048 * 4096 + 4096 * 4096 + 2048 * 4096);
    ctx.traffic.flops = 2.0 * 2048 * 4096 * 4096;
    ctx.device_name = "NVIDIA H200";
    ctx.measured = measured;
    ctx.catalog = cat;
    std::pair<std::vector<Proposal>, std::vector<std::string>> out;
    TemplateGenerator gen;
    gen.propose(ctx, {}, [&](std::vector<Proposal> p, std::vector<std::string> notes) {
      out = {std::move(p), std::move(notes)};
    });
    return out;
  }

  static bool noted(const std::vector<std::string>& notes, const std::string& what) {
    for (const auto& n : notes)
      if (n.find(what) != std::string::npos) return true;
    return false;
  }

  kiln_test::TempDir tmp{"kiln-generator-test"};
  fs::path dir = tmp.path();
  Target target = testing_targets::h200_like();
};

TEST_F(TemplateGeneratorTest, HalvingStartsFromTheCatalogsFastestOnASimilarJob) {
  Catalog cat = Catalog::open(dir / "c.db", false, kMigrations);
  const json fast = cfg(64, 64, 4);  // nowhere near the model's first picks
  record_past(cat, "NVIDIA H200", fast);
  auto [proposals, notes] = round0(&cat);
  ASSERT_GE(proposals.size(), 2u);
  EXPECT_EQ(proposals[0].config, fast);
  EXPECT_EQ(proposals[1].config, cfg(128, 128, 8));
  EXPECT_TRUE(noted(notes, "fastest on similar jobs"));
}

TEST_F(TemplateGeneratorTest, ARekeyedJobStartsFromItsPreviousKeysBest) {
  // Last night's job of the same problem under another Triton version (another
  // key): distance 0, so its fastest comes first.
  Catalog cat = Catalog::open(dir / "c.db", false, kMigrations);
  record_past(cat, "NVIDIA H200", cfg(256, 64, 8), matmul_job({2048, 4096, 4096}, "3.5.1"));
  ASSERT_NE(matmul_job({2048, 4096, 4096}, "3.5.1").key, matmul_job({2048, 4096, 4096}).key);
  auto [proposals, notes] = round0(&cat);
  ASSERT_FALSE(proposals.empty());
  EXPECT_EQ(proposals[0].config, cfg(256, 64, 8));
}

TEST_F(TemplateGeneratorTest, NoPriorsFromAnotherDeviceOrWhereThisRunDoesNotMeasure) {
  Catalog cat = Catalog::open(dir / "c.db", false, kMigrations);
  record_past(cat, "NVIDIA H100 80GB HBM3", cfg(64, 64, 4));
  auto [other_device, notes] = round0(&cat);
  EXPECT_FALSE(noted(notes, "fastest on similar jobs"));
  EXPECT_NE(other_device.at(0).config, cfg(64, 64, 4));

  Catalog cat2 = Catalog::open(dir / "c2.db", false, kMigrations);
  record_past(cat2, "NVIDIA H200", cfg(64, 64, 4));
  EXPECT_FALSE(noted(round0(&cat2, /*measured=*/false).second, "fastest on similar jobs"));
  EXPECT_FALSE(noted(round0(nullptr).second, "fastest on similar jobs"));
}

}  // namespace
}  // namespace kiln
