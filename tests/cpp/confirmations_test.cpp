// The catalog's confirmation rounds (0005_confirmation.sql), on a real file.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "catalog/job_key.h"
#include "catalog_rows.h"
#include "stats/stats.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln;

namespace {

const fs::path kMigrations = fs::path(KILN_SOURCE_DIR) / "db" / "migrations";

struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("kiln-confirm-test-" + std::to_string(getpid()));
  Catalog cat;
  long long job = 0, c1 = 0, c2 = 0, other_job_cand = 0;
  Fixture() : cat((fs::remove_all(dir), fs::create_directories(dir), Catalog::open(dir / "k.db", false, kMigrations))) {
    std::vector<NewJob> jobs;
    for (int i = 0; i < 2; ++i) {
      NewJob j;
      j.op = "softmax";
      j.dtype = "fp16";
      j.target = "H200";
      j.arch = "sm_90";
      j.shape = json::array({128 * (i + 1), 1000});
      j.params = json::object();
      j.spec = {{"op", j.op}, {"shape", j.shape}, {"dtype", j.dtype}};
      j.key = job_key(j.spec, "t", "3.6.0");
      jobs.push_back(j);
    }
    cat.submit("b", "m.yaml", "", jobs);
    const std::string owner = "h:" + std::to_string(getpid());
    auto r1 = cat.claim_job(owner, 60);
    auto r2 = cat.claim_job(owner, 60);
    job = r1->id;
    c1 = kiln_test::add_template_candidate(cat, job, {{"num_warps", 4}});
    c2 = kiln_test::add_template_candidate(cat, job, {{"num_warps", 8}});
    other_job_cand = kiln_test::add_template_candidate(cat, r2->id, {{"num_warps", 4}});
  }
  ~Fixture() { fs::remove_all(dir); }
};

ConfirmationRow row(long long job, std::optional<long long> cand, std::optional<std::string> base,
                    const std::string& run, std::vector<double> samples) {
  ConfirmationRow r;
  r.job_id = job;
  r.candidate_id = cand;
  r.baseline = base;
  r.run_id = run;
  r.basis = "device";
  r.device = "NVIDIA H200";
  r.samples_ms = std::move(samples);
  r.conditions = {{"rounds", json::array({{{"sm_clock_mhz", {1980, 1980}}}})}, {"clock_drop", false}};
  return r;
}

}  // namespace

TEST(Confirmations, SamplesEncodeAsFloat32LittleEndian) {
  const std::string b = encode_samples({1.0, 0.5});
  ASSERT_EQ(b.size(), 8u);
  // 1.0f = 0x3f800000, 0.5f = 0x3f000000, little-endian
  EXPECT_EQ(static_cast<unsigned char>(b[3]), 0x3f);
  EXPECT_EQ(static_cast<unsigned char>(b[2]), 0x80);
  EXPECT_EQ(static_cast<unsigned char>(b[0]), 0x00);
  EXPECT_EQ(static_cast<unsigned char>(b[7]), 0x3f);
  EXPECT_EQ(decode_samples(b), (std::vector<double>{1.0, 0.5}));
  EXPECT_THROW(decode_samples("abc"), CatalogError);
}

TEST(Confirmations, RoundTripLatestRunAndBest) {
  Fixture f;
  const std::vector<double> a = {0.1011, 0.1012, 0.1009, 0.1010, 0.1013};
  f.cat.record_confirmations({row(f.job, f.c1, std::nullopt, "r1", a),
                              row(f.job, std::nullopt, std::string("eager"), "r1", {0.2, 0.21, 0.19})});
  f.cat.record_confirmations({row(f.job, f.c2, std::nullopt, "r2", {0.3, 0.31}),
                              row(f.job, f.c1, std::nullopt, "r2", {0.1, 0.1, 0.1})});
  auto latest = f.cat.confirmations(f.job);
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0].run_id, "r2");
  EXPECT_EQ(*latest[0].candidate_id, f.c1);  // candidates by id
  auto r1 = f.cat.confirmations(f.job, "r1");
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(*r1[0].candidate_id, f.c1);
  EXPECT_EQ(*r1[1].baseline, "eager");
  ASSERT_EQ(r1[0].samples_ms.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(r1[0].samples_ms[i]), static_cast<float>(a[i]));
  // The stored median is the median of the stored (float32) samples.
  EXPECT_DOUBLE_EQ(r1[0].median_ms, stats::median(r1[0].samples_ms));
  EXPECT_FALSE(r1[0].conditions["clock_drop"].get<bool>());
  EXPECT_TRUE(f.cat.confirmations(f.job, "nope").empty());

  BestRow b{f.job, f.c1, "measured", r1[0].median_ms, "NVIDIA H200", std::string("r1"), r1[0].median_ms};
  f.cat.set_best(b);
  auto got = f.cat.best(f.job);
  ASSERT_TRUE(got && got->confirmed_run);
  EXPECT_EQ(*got->confirmed_run, "r1");
  EXPECT_DOUBLE_EQ(*got->confirmed_ms, r1[0].median_ms);
  f.cat.set_best({f.job, f.c2, "measured", 0.3, "NVIDIA H200"});
  EXPECT_FALSE(f.cat.best(f.job)->confirmed_run.has_value());
}

TEST(Confirmations, BadRoundsWriteNothing) {
  Fixture f;
  // A candidate of another job, in the middle of a round: nothing of the round is written.
  EXPECT_THROW(f.cat.record_confirmations({row(f.job, f.c1, std::nullopt, "r", {1.0}),
                                           row(f.job, f.other_job_cand, std::nullopt, "r", {1.0})}),
               CatalogError);
  EXPECT_THROW(f.cat.record_confirmations({row(f.job, f.c1, std::string("eager"), "r", {1.0})}), CatalogError);
  EXPECT_THROW(f.cat.record_confirmations({row(f.job, f.c1, std::nullopt, "r", {})}), CatalogError);
  EXPECT_TRUE(f.cat.confirmations(f.job).empty());
}

TEST(Confirmations, MergeCopiesRoundsOnceWithCandidateIdsMapped) {
  Fixture f;
  f.cat.record_confirmations({row(f.job, f.c2, std::nullopt, "r1", {0.5, 0.6, 0.7}),
                              row(f.job, std::nullopt, std::string("eager"), "r1", {1.0})});
  f.cat.set_best({f.job, f.c2, "measured", 0.6, "NVIDIA H200", std::string("r1"), 0.6});
  const fs::path into_path = f.dir / "into.db";
  Catalog into = Catalog::open(into_path, false, kMigrations);
  MergeStats st = merge_catalog(into, f.dir / "k.db");
  EXPECT_EQ(st.confirmations, 2);
  EXPECT_TRUE(std::find(st.skipped_tables.begin(), st.skipped_tables.end(), "confirmations") == st.skipped_tables.end());
  auto q = into.query("SELECT c.config, k.median_ms FROM confirmations k JOIN candidates c ON c.id = k.candidate_id");
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_EQ(json::parse(q.rows[0][0].get<std::string>())["num_warps"], 8);
  EXPECT_DOUBLE_EQ(q.rows[0][1].get<double>(), 0.6f);
  auto b = into.query("SELECT confirmed_run FROM best");
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(b.rows[0][0], "r1");
  EXPECT_EQ(merge_catalog(into, f.dir / "k.db").confirmations, 0);  // idempotent
}
