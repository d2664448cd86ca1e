// What kiln package reads from the catalog (the selected candidate and the
// shortlist of an estimated job, a confirmation) and what kiln
// import-measurements writes, on a real catalog file.
#include "catalog/packaging.h"
#include "stats/stats.h"

#include <sqlite3.h>

#include <memory>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "catalog/job_key.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln;

namespace {

const fs::path kMigrations = fs::path(KILN_SOURCE_DIR) / "db" / "migrations";

class PackagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cat.emplace(Catalog::open(dir / "c.db", false, kMigrations));
    NewJob j{.op = "softmax", .dtype = "fp16", .target = "MI300X", .arch = "gfx942",
             .shape = json::array({128, 1000}), .params = json::object()};
    j.spec = {{"op", j.op}, {"shape", j.shape}, {"dtype", j.dtype}, {"params", j.params}};
    j.key = job_key(j.spec, "t", "3.6.0");
    key = j.key;
    cat->submit("b", "m.yaml", "text", {j});
    const std::string owner = "host:" + std::to_string(getpid());
    job_id = cat->claim_job(owner, 60)->id;
    // estimate per candidate; the 8th is incorrect
    const std::vector<double> est = {1.0, 1.3, 1.1, 1.49, 1.6, 1.2, 2.0, 1.05, 1.4, 1.45, 1.25, 1.35};
    for (size_t i = 0; i < est.size(); ++i) {
      CandidateRow c;
      c.job_id = job_id;
      c.generator = "template";
      c.template_name = "softmax";
      c.config = {{"BLOCK", 64 * (i + 1)}};
      const long long id = cat->add_candidate(c).id;
      ids.push_back(id);
      EvaluationIn e;
      e.status = i == 7 ? "incorrect" : "ok";
      e.result = json::object();
      e.estimate_ms = est[i];
      e.artifact = ArtifactIn{.target = "MI300X", .arch = "gfx942", .kind = "hsaco", .kernel_name = "softmax_kernel",
                             .bytes = "code object " + std::to_string(i), .metadata = {{"num_warps", 4}}};
      cat->record_evaluation(id, e);
    }
    cat->set_best({job_id, ids[0], "estimated", 1.0, ""});
    cat->finish_job(job_id, owner, true, "");
  }
  void TearDown() override {
    cat.reset();
  }
  std::vector<long long> shortlist() {
    auto jobs = package_jobs(*cat, "MI300X");
    EXPECT_EQ(jobs.size(), 1u);
    std::vector<long long> out;
    for (const auto& c : jobs[0].candidates) out.push_back(c.candidate_id);
    return out;
  }
  long long count(const std::string& sql) {
    auto r = cat->query(sql);
    return r.rows[0][0].get<long long>();
  }
  kiln_test::TempDir tmp{"kiln-packaging-test"};
  fs::path dir = tmp.path();
  std::optional<Catalog> cat;
  std::string key;
  long long job_id = 0;
  std::vector<long long> ids;
};

}  // namespace

TEST_F(PackagingTest, EstimatedJobShipsTheBestThenUpToSevenByEstimate) {
  // ok, by estimate: 1.1 (2), 1.2 (5), 1.25 (10), 1.3 (1), 1.35 (11), 1.4 (8), 1.45 (9), then 1.49 (3), 1.6 (4),
  // 2.0 (6); 1.05 (7) is incorrect; at most 8 in all
  EXPECT_EQ(shortlist(), (std::vector<long long>{ids[0], ids[2], ids[5], ids[10], ids[1], ids[11], ids[8], ids[9]}));
  EXPECT_EQ(package_jobs(*cat, "MI300X", 12)[0].candidates.size(), 11u);  // every correct one, however far
  auto jobs = package_jobs(*cat, "MI300X", 2);
  ASSERT_EQ(jobs[0].candidates.size(), 2u);  // the best and the next by estimate
  EXPECT_EQ(jobs[0].candidates[1].candidate_id, ids[2]);
  EXPECT_EQ(jobs[0].candidates[1].bytes, "code object 2");
  EXPECT_EQ(jobs[0].basis, "estimated");
  EXPECT_TRUE(jobs[0].measured_on.is_null());
  EXPECT_TRUE(jobs[0].confirmed.is_null());
  EXPECT_TRUE(package_jobs(*cat, "H200").empty());
}

TEST_F(PackagingTest, ImportedMeasurementsReselectTheBest) {
  MeasurementsIn m;
  m.source = "tune.json";
  m.device = "AMD Instinct MI300X";
  m.driver = "6.8";
  m.uuid = "GPU-1";
  m.kernels = {{key, {"MI300X"}, "MI300X", ids[0], 0.7, {0.7, 0.71}}, {key, {}, "", ids[5], 0.5, {0.5}}};
  ImportStats st = import_measurements(*cat, m);
  EXPECT_EQ(st.measurements, 2);
  EXPECT_EQ(st.jobs, 1);
  EXPECT_EQ(st.best_changed, 1);
  auto b = cat->best(job_id);
  EXPECT_EQ(b->candidate_id, ids[5]);
  EXPECT_EQ(b->basis, "measured");
  EXPECT_EQ(b->device, "AMD Instinct MI300X");
  EXPECT_DOUBLE_EQ(b->value_ms, 0.5);
  auto jobs = package_jobs(*cat, "MI300X");
  ASSERT_EQ(jobs[0].candidates.size(), 1u);  // measured: no shortlist
  EXPECT_EQ(jobs[0].measured_on, json({{"device", "AMD Instinct MI300X"}, {"driver", "6.8"}, {"uuid", "GPU-1"}}));
  // again: nothing changes; a slower re-measurement of the pick moves the best to the next fastest
  EXPECT_EQ(import_measurements(*cat, m).best_changed, 0);
  m.kernels = {{key, {"MI300X"}, "MI300X", ids[5], 0.9, {0.9}}};
  EXPECT_EQ(import_measurements(*cat, m).best_changed, 1);
  EXPECT_EQ(cat->best(job_id)->candidate_id, ids[0]);
  EXPECT_EQ(count("SELECT COUNT(*) FROM imported_measurements"), 2);
}

TEST_F(PackagingTest, ABadKernelImportsNothing) {
  MeasurementsIn m;
  m.source = "tune.json";
  m.device = "D";
  for (const ImportedKernel& bad : std::vector<ImportedKernel>{
           {"no-such-key", {"MI300X"}, "MI300X", ids[0], 0.1, {0.1}},
           {key, {"H100", "H200"}, "sm_90", ids[0], 0.1, {0.1}},
           {key, {"MI300X"}, "MI300X", 999999, 0.1, {0.1}},
           {key, {"MI300X"}, "MI300X", ids[7], 0.1, {0.1}}}) {  // incorrect
    m.kernels = {{key, {"MI300X"}, "MI300X", ids[1], 0.2, {0.2}}, bad};
    EXPECT_THROW(import_measurements(*cat, m), CatalogError);
  }
  EXPECT_EQ(count("SELECT COUNT(*) FROM imported_measurements"), 0);
  EXPECT_EQ(cat->best(job_id)->candidate_id, ids[0]);
  EXPECT_EQ(cat->best(job_id)->basis, "estimated");
}

TEST_F(PackagingTest, ConfirmedFromTheConfirmationRoundWhereTheCatalogHasOne) {
  // The confirmations table of migration 0005, written raw on a connection of the test's own.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(cat->path().c_str(), &db), SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> close_db(db, sqlite3_close);
  sqlite3_busy_timeout(db, 10000);
  std::string blob;
  for (int i = 20; i >= 1; --i) {  // 20 samples, 1..20 ms, in any order
    const float f = static_cast<float>(i);
    blob.append(reinterpret_cast<const char*>(&f), 4);
  }
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO confirmations (job_id, candidate_id, run_id, basis, device, samples, n, "
                         "median_ms, conditions, created_at) VALUES (?1, ?2, 'r1', 'device', 'MI300X', ?3, 20, 10.5, "
                         "'{}', 0)", -1, &st, nullptr);
  sqlite3_bind_int64(st, 1, job_id);
  sqlite3_bind_int64(st, 2, ids[0]);
  sqlite3_bind_blob(st, 3, blob.data(), (int)blob.size(), SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
  EXPECT_TRUE(package_jobs(*cat, "MI300X")[0].confirmed.is_null());  // best.confirmed_run not set
  ASSERT_EQ(sqlite3_exec(db, "UPDATE best SET confirmed_run = 'r1'", nullptr, nullptr, nullptr), SQLITE_OK);
  // the interval kiln best shows: the bootstrap of the median over the same samples
  std::vector<double> xs;
  for (int i = 1; i <= 20; ++i) xs.push_back(i);
  const stats::Interval ci = stats::bootstrap_median_ci(xs);
  const json got = package_jobs(*cat, "MI300X")[0].confirmed;
  EXPECT_EQ(got["median_ms"], 10.5);
  EXPECT_EQ(got["runs"], 20);
  EXPECT_DOUBLE_EQ(got["ci_low_ms"].get<double>(), ci.lo);
  EXPECT_DOUBLE_EQ(got["ci_high_ms"].get<double>(), ci.hi);
  EXPECT_LT(ci.lo, 10.5);
  EXPECT_GT(ci.hi, 10.5);
  EXPECT_EQ(confirmed_summary(1.0, std::string(8, '\0'))["ci_low_ms"], nullptr);  // too few samples
  EXPECT_FALSE(got.contains("flush_bytes"));  // the round's conditions ('{}') do not say
  ASSERT_EQ(sqlite3_exec(db, "UPDATE confirmations SET conditions = '{\"l2_flush_bytes\": 268435456}'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  EXPECT_EQ(package_jobs(*cat, "MI300X")[0].confirmed["flush_bytes"], 268435456);
  EXPECT_FALSE(package_jobs(*cat, "MI300X")[0].confirmed.contains("sm_clock_mhz"));  // no rounds' clocks
  EXPECT_FALSE(package_jobs(*cat, "MI300X")[0].confirmed.contains("power_limited"));
  // a power-limited round's clocks: the median of the rounds' start and end readings
  ASSERT_EQ(sqlite3_exec(db, "UPDATE confirmations SET conditions = '{\"l2_flush_bytes\": 268435456, \"rounds\": ["
                             "{\"start\": {\"sm_clock_mhz\": 1485}, \"end\": {\"sm_clock_mhz\": 1420}}, "
                             "{\"start\": {\"sm_clock_mhz\": 1470}, \"end\": {\"sm_clock_mhz\": 1440}}], "
                             "\"sustained\": {\"mhz\": 1450, \"power_limited\": true}}'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  const json clocked = package_jobs(*cat, "MI300X")[0].confirmed;
  EXPECT_EQ(clocked["sm_clock_mhz"], 1455.0);
  EXPECT_EQ(clocked["power_limited"], true);
  EXPECT_EQ(clocked["flush_bytes"], 268435456);
}

namespace {
// A confirmation's conditions as package_jobs hands them over: parsed without
// exceptions (unparsable text is a discarded value).
nlohmann::json conditions(const char* text) { return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false); }
}  // namespace

TEST(ConfirmedClock, TheMedianOfTheRoundsStartAndEndClocksOrNothing) {
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions(R"({"rounds": [{"start": {"sm_clock_mhz": 1485, "power_w": 699.1},
                                                  "end": {"sm_clock_mhz": 1420}},
                                                 {"start": {"sm_clock_mhz": 1470}, "end": {"sm_clock_mhz": 1440}},
                                                 {"start": {"sm_clock_mhz": 1455}, "end": {"sm_clock_mhz": 1450}}]})")),
            1452.5);  // 1420 1440 1450 1455 1470 1485
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions(R"({"rounds": [{"start": {"sm_clock_mhz": 1485}, "end": {}}]})")), 1485.0);
  // what is not a positive number is left out, not counted as 0
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions(R"({"rounds": [{"start": {"sm_clock_mhz": 0}, "end": {"sm_clock_mhz": 1420}},
                                                 {"start": {"sm_clock_mhz": "1470"}, "end": {"sm_clock_mhz": 1440}}]})")),
            1430.0);
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions(R"j({"rounds": [{"start": {"source": "none (CPU)"}, "end": {"source": "none (CPU)"}}]})j")),
            std::nullopt);
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions(R"({"rounds": []})")), std::nullopt);
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions(R"({"rounds": 5})")), std::nullopt);
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions("{}")), std::nullopt);
  EXPECT_EQ(confirmed_sm_clock_mhz(conditions("not json")), std::nullopt);
  EXPECT_EQ(confirmed_power_limited(conditions(R"({"sustained": {"mhz": 1450, "power_limited": true}})")), true);
  EXPECT_EQ(confirmed_power_limited(conditions(R"({"sustained": {"mhz": 1950, "power_limited": false}})")), false);
  EXPECT_EQ(confirmed_power_limited(conditions(R"({"sustained": {"preheat_s": 0.3}})")), std::nullopt);  // a CPU round
  EXPECT_EQ(confirmed_power_limited(conditions(R"({"sustained": {"power_limited": 1}})")), std::nullopt);
  EXPECT_EQ(confirmed_power_limited(conditions("{}")), std::nullopt);
  EXPECT_EQ(confirmed_power_limited(conditions("not json")), std::nullopt);
}

TEST(ConfirmedFlushBytes, ReadsTheRoundsFlushOrNothing) {
  EXPECT_EQ(confirmed_flush_bytes(conditions(R"({"l2_flush_bytes": 268435456, "reps": 20})")), 268435456);
  EXPECT_EQ(confirmed_flush_bytes(conditions(R"({"l2_flush_bytes": 0})")), std::nullopt);  // the CPU's rounds
  EXPECT_EQ(confirmed_flush_bytes(conditions(R"({"l2_flush_bytes": "256M"})")), std::nullopt);
  EXPECT_EQ(confirmed_flush_bytes(conditions("{}")), std::nullopt);
  EXPECT_EQ(confirmed_flush_bytes(conditions("not json")), std::nullopt);
}

TEST_F(PackagingTest, AMeasuredBestCarriesTheDriverAndUuidTheWorkerReported) {
  // the worker's latency block names the device in latency.device_identity
  CandidateRow c;
  c.job_id = job_id;
  c.generator = "template";
  c.template_name = "softmax";
  c.config = {{"BLOCK", 4096}};
  const long long id = cat->add_candidate(c).id;
  EvaluationIn e;
  e.status = "ok";
  e.result = {{"latency", {{"median_ms", 0.25},
                           {"device_identity", {{"driver", "580.159.04"}, {"uuid", "GPU-6253"}, {"name", "X"}}}}}};
  e.artifact = ArtifactIn{.target = "MI300X", .arch = "gfx942", .kind = "hsaco", .kernel_name = "softmax_kernel",
                         .bytes = "measured code object"};
  cat->record_evaluation(id, e);
  cat->set_best({job_id, id, "measured", 0.25, "AMD Instinct MI300X"});
  auto jobs = package_jobs(*cat, "MI300X");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].measured_on,
            json({{"device", "AMD Instinct MI300X"}, {"driver", "580.159.04"}, {"uuid", "GPU-6253"}}));
}

// kiln nightly packages its manifest's jobs only: the job set filters which
// done jobs are read, and nothing else changes.
TEST_F(PackagingTest, OnlyTheJobsAskedFor) {
  const auto all = package_jobs(*cat, "MI300X");
  ASSERT_EQ(all.size(), 1u);
  const auto same = package_jobs(*cat, "MI300X", 8, std::vector<long long>{job_id, job_id + 100});
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].job_id, job_id);
  EXPECT_EQ(same[0].candidates.size(), all[0].candidates.size());
  EXPECT_TRUE(package_jobs(*cat, "MI300X", 8, std::vector<long long>{job_id + 1}).empty());
  EXPECT_TRUE(package_jobs(*cat, "MI300X", 8, std::vector<long long>{}).empty());
}

// A damaged catalog is an error naming the file, never "no jobs".
TEST_F(PackagingTest, ADamagedCatalogIsAnErrorNotAnEmptyResult) {
  const fs::path file = cat->path();
  cat.reset();
  {
    // Overwrite every page after the first (the schema page stays readable).
    const auto size = fs::file_size(file);
    std::FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 4096, SEEK_SET);
    const std::string junk(size > 4096 ? size - 4096 : 0, '\x5a');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  fs::remove(file.string() + "-wal");
  fs::remove(file.string() + "-shm");
  try {
    Catalog damaged = Catalog::open(file, true, kMigrations);
    package_jobs(damaged, "MI300X");
    FAIL() << "package_jobs read a damaged catalog without an error";
  } catch (const CatalogError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
}
