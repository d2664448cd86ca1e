// The SQLite catalog, on real files in a temporary directory.
#include "catalog/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "catalog/job_key.h"
#include "catalog_rows.h"
#include "common/hash.h"
#include "temp_dir.h"
#include "thrown.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln;
using kiln_test::add_template_candidate;
using kiln_test::thrown;

namespace {

const fs::path kMigrations = fs::path(KILN_SOURCE_DIR) / "db" / "migrations";

// The schema version of the repository's migrations (the last file's number).
int latest_version() { return find_migrations(kMigrations).back().version; }

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// A live owner in this process; distinct suffixes for distinct "runs".
std::string live_owner(const std::string& tag) {
  return hostname() + ":" + std::to_string(getpid()) + ":" + tag;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

NewJob make_job(const std::string& name, int rows = 128) {
  NewJob j{.op = "softmax", .dtype = "fp16", .target = "MI300X", .arch = "gfx942",
           .shape = json::array({rows, 1000}), .params = json::object()};
  j.spec = {{"op", j.op}, {"shape", j.shape}, {"dtype", j.dtype}, {"params", j.params},
            {"target", {{"name", j.target}, {"arch", j.arch}}}, {"tag", name}};
  j.key = job_key(j.spec, "template-sha", "3.6.0");
  return j;
}

std::vector<NewJob> make_jobs(int n, const std::string& prefix = "j") {
  std::vector<NewJob> v;
  for (int i = 0; i < n; ++i) v.push_back(make_job(prefix + std::to_string(i), i + 1));
  return v;
}

long long scalar(const Catalog& cat, const std::string& sql) {
  auto r = cat.query(sql);
  if (r.rows.size() != 1 || r.rows[0].size() != 1) throw std::runtime_error("not a scalar: " + sql);
  return r.rows[0][0].is_null() ? -1 : r.rows[0][0].get<long long>();
}

long long count(const Catalog& cat, const std::string& table) {
  return scalar(cat, "SELECT count(*) FROM " + table);
}

json ok_result() {
  return json::parse(R"J({
    "status": "ok", "message": "", "exec_device": "cpu (Triton interpreter)",
    "correctness": {"seeds": 3, "max_abs_err": 1e-7, "max_rel_err": 2e-6, "passed": true},
    "latency": {"device": "NVIDIA H200", "runs": 100, "mean_ms": 0.5, "median_ms": 0.45,
                "p99_ms": 0.9, "min_ms": 0.4, "stddev_ms": 0.05},
    "artifact": {"target": "MI300X", "arch": "gfx942", "kind": "hsaco", "kernel_name": "k",
                 "registers": 32, "sgprs": 20, "spills": 0, "shared_bytes": 1024,
                 "scratch_bytes": 0, "occupancy": 8},
    "traffic": {"bytes": 10, "flops": 20},
    "timings": {"compile_s": 0.4, "check_s": 1.2, "bench_s": 0.25}})J");
}

ArtifactIn artifact(const std::string& bytes, const std::string& kind = "hsaco") {
  return ArtifactIn{.target = "MI300X", .arch = "gfx942", .kind = kind, .kernel_name = "softmax_kernel",
                    .bytes = bytes, .metadata = {{"grid", {128, 1, 1}}, {"block", {256, 1, 1}}}};
}

class CatalogTest : public ::testing::Test {
 protected:
  Catalog open(bool ro = false) { return Catalog::open(db, ro, kMigrations); }

  // A migrations dir holding 0001 from the repo plus `extra` files.
  fs::path migrations_with(const std::vector<std::pair<std::string, std::string>>& extra) {
    fs::path m = dir / ("migrations-" + std::to_string(n_mig++));
    fs::create_directories(m);
    fs::copy_file(kMigrations / "0001_initial.sql", m / "0001_initial.sql");
    for (auto& [name, sql] : extra) write_file(m / name, sql);
    return m;
  }

  // A job with one candidate; returns (job id, candidate id).
  std::pair<long long, long long> job_with_candidate(Catalog& cat, const std::string& tag = "x") {
    cat.submit("b", "m.yaml", "text", {make_job(tag)});
    auto j = cat.query("SELECT id FROM jobs WHERE key = '" + make_job(tag).key + "'");
    long long job_id = j.rows.at(0).at(0).get<long long>();
    return {job_id, add_template_candidate(cat, job_id, {{"num_warps", 4}, {"BLOCK", 1024}})};
  }

  // Submits one job per value, tagged PREFIX0, PREFIX1, ..., each set up by set(job, value).
  template <class T, class Set>
  static void submit_each(Catalog& cat, const std::string& prefix, const std::vector<T>& values, Set set) {
    std::vector<NewJob> jobs;
    for (const T& v : values) {
      jobs.push_back(make_job(prefix + std::to_string(jobs.size())));
      set(jobs.back(), v);
    }
    cat.submit("b", "m", "", jobs);
  }

  // Claims every job in turn: their spec tags in claim order.
  static std::vector<std::string> claim_all(Catalog& cat, ClaimOrder how = ClaimOrder::kLongestFirst) {
    std::vector<std::string> order;
    while (auto j = cat.claim_job("h:1", 60, std::nullopt, std::nullopt, how))
      order.push_back(j->spec["tag"].get<std::string>());
    return order;
  }

  kiln_test::TempDir tmp{"kiln-catalog-test"};
  fs::path dir = tmp.path(), db = dir / "catalog.db";
  int n_mig = 0;
};

// ---- open and migrations ----------------------------------------------------

TEST_F(CatalogTest, ClaimsTheMostExpensiveJobFirst) {
  Catalog cat = open();
  submit_each<double>(cat, "p", {0.1, 5.0, 0.0, 1.0, 5.0}, [](NewJob& j, double p) { j.priority = p; });
  EXPECT_EQ(cat.query("SELECT priority FROM jobs ORDER BY id").rows[1][0], 5.0);
  // Highest priority first; equal priorities in id order; unknown (0) last.
  EXPECT_EQ(claim_all(cat), (std::vector<std::string>{"p1", "p4", "p3", "p0", "p2"}));
}

TEST_F(CatalogTest, ClaimsTheMostCompilingJobFirstThenTheMostExpensive) {
  Catalog cat = open();
  submit_each<std::pair<double, double>>(cat, "c", {{0, 9}, {3, 0.1}, {3, 1}, {0, 0}, {1, 5}},
                                         [](NewJob& j, std::pair<double, double> compile_priority) {
                                           j.compile_est_s = compile_priority.first;
                                           j.priority = compile_priority.second;
                                         });
  EXPECT_EQ(cat.query("SELECT compile_est_s FROM jobs ORDER BY id").rows[4][0], 1.0);
  EXPECT_EQ(claim_all(cat), (std::vector<std::string>{"c2", "c1", "c4", "c0", "c3"}));
}

TEST_F(CatalogTest, ClaimsTheCheapestJobFirstForATimeLimitedRun) {
  Catalog cat = open();
  submit_each<std::pair<double, double>>(cat, "c", {{0, 9}, {3, 0.1}, {3, 1}, {0, 0}, {1, 5}, {0, 0}},
                                         [](NewJob& j, std::pair<double, double> compile_priority) {
                                           j.compile_est_s = compile_priority.first;
                                           j.priority = compile_priority.second;
                                         });
  // Least compiling first, then the cheapest; equal keys in id order.
  EXPECT_EQ(claim_all(cat, ClaimOrder::kCheapestFirst),
            (std::vector<std::string>{"c3", "c5", "c0", "c4", "c1", "c2"}));
}

TEST_F(CatalogTest, CompileSecondsAreMeansPerOperatorAndArchOfRecentEvaluations) {
  Catalog cat = open();
  const long long job_id = job_with_candidate(cat).first;  // softmax on gfx942
  NewJob other = make_job("other");
  other.op = "matmul";
  other.arch = "sm_90";
  other.key = job_key(other.spec, "t", "3.6.0");
  cat.submit("b2", "m", "", {other});
  const long long other_id = cat.query("SELECT id FROM jobs WHERE op = 'matmul'").rows[0][0].get<long long>();
  auto evaluate = [&](long long job, int i, double compile_s) {
    CandidateRow c;
    c.job_id = job;
    c.generator = "template";
    c.template_name = "t";
    c.config = {{"i", i}};
    EvaluationIn e;
    e.status = "ok";
    e.result = ok_result();
    e.result["timings"]["compile_s"] = compile_s;
    cat.record_evaluation(cat.add_candidate(c).id, e);
  };
  for (int i = 0; i < 4; ++i) evaluate(job_id, i, 1.0 + i);   // softmax: 1, 2, 3, 4
  for (int i = 0; i < 2; ++i) evaluate(other_id, i, 9.0);     // matmul: too few
  auto means = cat.compile_seconds(3);
  EXPECT_EQ(means.size(), 1u);
  EXPECT_DOUBLE_EQ(means.at({"softmax", "gfx942"}), 2.5);
  EXPECT_EQ(cat.compile_seconds(2).at({"matmul", "sm_90"}), 9.0);
  // only the latest `recent` evaluations: the two matmul ones and softmax's last (4 s)
  auto recent = cat.compile_seconds(1, 3);
  EXPECT_DOUBLE_EQ(recent.at({"softmax", "gfx942"}), 4.0);
  EXPECT_EQ(recent.size(), 2u);
}

TEST_F(CatalogTest, MigrationsAppliedOnceAndTracked) {
  auto migs = find_migrations(kMigrations);
  ASSERT_FALSE(migs.empty());
  {
    auto cat = open();
    EXPECT_EQ(cat.schema_version(), migs.back().version);
    EXPECT_EQ(count(cat, "jobs"), 0);
    EXPECT_EQ(scalar(cat, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                          "('batches','jobs','batch_jobs','candidates','evaluations','blobs',"
                          "'artifacts','best')"),
              8);
    const Catalog::Settings settings = cat.settings();
    EXPECT_EQ(settings.journal_mode, "wal");
    EXPECT_TRUE(settings.foreign_keys);
    EXPECT_EQ(settings.synchronous, 1);  // NORMAL
    cat.submit("b", "m.yaml", "t", make_jobs(2));
  }
  // Reopening neither fails (CREATE TABLE would) nor loses data.
  auto cat = open();
  EXPECT_EQ(cat.schema_version(), migs.back().version);
  EXPECT_EQ(count(cat, "jobs"), 2);
}

TEST_F(CatalogTest, LaterMigrationAppliedOnceInOrder) {
  fs::path m1 = migrations_with({});
  { EXPECT_EQ(Catalog::open(db, false, m1).schema_version(), 1); }
  fs::path m2 = migrations_with({{"0002_extra.sql", "CREATE TABLE extra (x INTEGER);\n"
                                                    "INSERT INTO extra VALUES (1);\n"},
                                 {"0003_more.sql", "INSERT INTO extra SELECT x + 1 FROM extra;"},
                                 {"README.txt", "not a migration"}});
  {
    auto cat = Catalog::open(db, false, m2);
    EXPECT_EQ(cat.schema_version(), 3);
    EXPECT_EQ(count(cat, "extra"), 2);  // 0002 then 0003, in order
  }
  auto cat = Catalog::open(db, false, m2);
  EXPECT_EQ(cat.schema_version(), 3);
  EXPECT_EQ(count(cat, "extra"), 2);  // not re-applied
}

TEST_F(CatalogTest, FailedMigrationLeavesNothing) {
  fs::path bad = migrations_with(
      {{"0002_broken.sql", "CREATE TABLE half (x INTEGER);\nTHIS IS NOT SQL;\n"}});
  const std::string w = thrown<CatalogError>([&] { Catalog::open(db, false, bad); });
  EXPECT_NE(w.find("0002_broken.sql"), std::string::npos) << w;
  auto cat = Catalog::open(db, false, migrations_with({}));
  EXPECT_EQ(cat.schema_version(), 1);
  EXPECT_EQ(scalar(cat, "SELECT count(*) FROM sqlite_master WHERE name = 'half'"), 0);
}

// Several processes opening (and so migrating) a fresh catalog at once.
TEST_F(CatalogTest, ConcurrentFirstOpenMigratesOnce) {
  const int kProcs = 6;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) < 0) _exit(5);  // released together when the pipe closes
      try {
        auto cat = open();
        auto r = cat.submit("b", "m", "t", make_jobs(5));
        _exit(cat.schema_version() == latest_version() && r.total_jobs == 5 ? 0 : 6);
      } catch (const std::exception& e) {
        fprintf(stderr, "child: %s\n", e.what());
        _exit(2);
      }
    }
    kids.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  auto cat = open();
  EXPECT_EQ(cat.schema_version(), latest_version());
  EXPECT_EQ(count(cat, "jobs"), 5);
  EXPECT_EQ(count(cat, "batches"), 1);
}

TEST_F(CatalogTest, MigrationNumberingChecked) {
  fs::path gap = migrations_with({{"0003_gap.sql", "SELECT 1;"}});
  EXPECT_THROW(find_migrations(gap), CatalogError);
  EXPECT_THROW(Catalog::open(db, false, gap), CatalogError);
  EXPECT_THROW(find_migrations(dir / "nope"), CatalogError);
}

TEST_F(CatalogTest, DefaultMigrationsComeFromKilnHome) {
  const char* old = std::getenv("KILN_HOME");
  std::string saved = old ? old : "";
  setenv("KILN_HOME", KILN_SOURCE_DIR, 1);
  EXPECT_EQ(default_migrations_dir(), fs::path(KILN_SOURCE_DIR) / "db" / "migrations");
  EXPECT_EQ(Catalog::open(db).schema_version(), find_migrations(kMigrations).back().version);
  setenv("KILN_HOME", (dir / "elsewhere").c_str(), 1);
  EXPECT_THROW(Catalog::open(dir / "other.db"), CatalogError);
  if (old)
    setenv("KILN_HOME", saved.c_str(), 1);
  else
    unsetenv("KILN_HOME");
}

TEST_F(CatalogTest, ReadOnlyMissingFile) {
  EXPECT_EQ(thrown<CatalogError>([&] { Catalog::open(db, true, kMigrations); }),
            "no catalog at " + db.string() + "; run `kiln submit` first");
  EXPECT_FALSE(fs::exists(db));
}

TEST_F(CatalogTest, ReadOnlyRefusesToMigrateOlderSchema) {
  { Catalog::open(db, false, migrations_with({})); }
  fs::path m2 = migrations_with({{"0002_x.sql", "CREATE TABLE x (a);"}});
  const std::string w = thrown<CatalogError>([&] { Catalog::open(db, true, m2); });
  EXPECT_NE(w.find("schema version 1"), std::string::npos) << w;
  EXPECT_NE(w.find("needs 2"), std::string::npos) << w;
  auto cat = Catalog::open(db, true, migrations_with({}));
  EXPECT_EQ(cat.schema_version(), 1);
}

TEST_F(CatalogTest, ReadOnlyCatalogRefusesWrites) {
  { open().submit("b", "m.yaml", "t", make_jobs(1)); }
  auto ro = open(true);
  EXPECT_TRUE(ro.read_only());
  EXPECT_EQ(count(ro, "jobs"), 1);
  EXPECT_THROW(ro.submit("c", "m.yaml", "t", make_jobs(2, "other")), CatalogError);
  EXPECT_THROW(ro.claim_job(live_owner("a"), 60), CatalogError);
  EXPECT_EQ(count(ro, "jobs"), 1);
}

TEST_F(CatalogTest, NewerSchemaRefused) {
  { open(); }
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
  for (bool ro : {false, true}) {
    const std::string w = thrown<CatalogError>([&] { open(ro); });
    EXPECT_NE(w.find("newer"), std::string::npos) << w;
  }
}

TEST_F(CatalogTest, CorruptFileGivesClearMessage) {
  std::string junk;
  for (int i = 0; i < 200; ++i) junk += "this is not an SQLite database. ";
  write_file(db, junk);
  for (bool ro : {false, true}) {
    const std::string w = thrown<CatalogError>([&] { open(ro); });
    EXPECT_NE(w.find("not a valid SQLite catalog"), std::string::npos) << w;
    EXPECT_NE(w.find(db.string()), std::string::npos) << w;
  }
  EXPECT_EQ(slurp(db), junk);  // untouched
}

TEST_F(CatalogTest, DirectoryIsNotACatalog) {
  fs::create_directories(db);
  EXPECT_THROW(open(), CatalogError);
}

// Runs fn in a child process as an unprivileged user (root ignores file
// permissions); returns what fn returned, or nullopt if privileges could not
// be dropped.
std::optional<std::string> as_nobody(const std::function<std::string()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  pid_t pid = fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    close(fds[0]);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    std::string msg;
    try {
      msg = fn();
    } catch (const std::exception& e) {
      msg = std::string("exception: ") + e.what();
    }
    if (write(fds[1], msg.data(), msg.size()) < 0) _exit(4);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return msg;
}

const fs::perms kReadOnlyDir = fs::perms::owner_read | fs::perms::owner_exec |
                               fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec;

// A catalog in a directory the process cannot write.
TEST_F(CatalogTest, ReadOnlyDirectoryGivesClearMessage) {
  fs::path ro_dir = dir / "ro";
  fs::create_directories(ro_dir);
  fs::permissions(dir, kReadOnlyDir | fs::perms::owner_write);
  fs::permissions(ro_dir, kReadOnlyDir);
  auto msg = as_nobody([&] {
    Catalog::open(ro_dir / "catalog.db", false, kMigrations);
    return std::string("opened");
  });
  if (!msg) GTEST_SKIP() << "cannot drop privileges";
  EXPECT_NE(msg->find("exception: "), std::string::npos) << *msg;
  EXPECT_NE(msg->find("not writable"), std::string::npos) << *msg;
  EXPECT_NE(msg->find(ro_dir.string()), std::string::npos) << *msg;
}

// A published catalog (read-only directory, no -wal/-shm files): writers get a
// clear error, readers can still open and query it.
TEST_F(CatalogTest, PublishedCatalogInReadOnlyDirectory) {
  fs::path pub = dir / "pub";
  fs::create_directories(pub);
  const fs::path file = pub / "catalog.db";
  { Catalog::open(file, false, kMigrations).submit("b", "m", "t", make_jobs(2)); }
  ASSERT_FALSE(fs::exists(file.string() + "-wal"));  // checkpointed on close
  fs::permissions(dir, kReadOnlyDir | fs::perms::owner_write);
  fs::permissions(pub, kReadOnlyDir);
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read);
  auto writer = as_nobody([&] {
    Catalog::open(file, false, kMigrations);
    return std::string("opened");
  });
  if (!writer) GTEST_SKIP() << "cannot drop privileges";
  EXPECT_NE(writer->find("cannot write"), std::string::npos) << *writer;
  EXPECT_NE(writer->find("is not writable"), std::string::npos) << *writer;
  auto reader = as_nobody([&] {
    auto cat = Catalog::open(file, true, kMigrations);
    return std::to_string(count(cat, "jobs")) + " jobs, version " +
           std::to_string(cat.schema_version());
  });
  ASSERT_TRUE(reader);
  EXPECT_EQ(*reader, "2 jobs, version " + std::to_string(latest_version()));
}

TEST_F(CatalogTest, LocalDiskHasNoNetworkWarning) {
  EXPECT_EQ(network_filesystem_warning(db), "");
}

// ---- submit -------------------------------------------------------------------

TEST_F(CatalogTest, SubmitIsIdempotent) {
  auto cat = open();
  auto jobs = make_jobs(3);
  auto r1 = cat.submit("quick", "jobs/q.yaml", "text", jobs);
  EXPECT_EQ(r1.total_jobs, 3);
  EXPECT_EQ(r1.new_jobs, 3);
  ASSERT_EQ(r1.batch_id.size(), 12u);
  EXPECT_EQ(r1.batch_id.find_first_not_of("0123456789abcdef"), std::string::npos);

  std::reverse(jobs.begin(), jobs.end());  // order does not matter
  auto r2 = cat.submit("quick", "jobs/q.yaml", "text", jobs);
  EXPECT_EQ(r2.batch_id, r1.batch_id);
  EXPECT_EQ(r2.total_jobs, 3);
  EXPECT_EQ(r2.new_jobs, 0);
  EXPECT_EQ(count(cat, "batches"), 1);
  EXPECT_EQ(count(cat, "jobs"), 3);
  EXPECT_EQ(count(cat, "batch_jobs"), 3);

  auto b = cat.query("SELECT name, manifest_path, manifest_sha256, manifest_text FROM batches");
  EXPECT_EQ(b.rows[0][0], "quick");
  EXPECT_EQ(b.rows[0][1], "jobs/q.yaml");
  EXPECT_EQ(b.rows[0][2], sha256_hex("text"));
  EXPECT_EQ(b.rows[0][3], "text");
  auto j = cat.query("SELECT state, shape, params, target, arch, attempts FROM jobs ORDER BY id");
  EXPECT_EQ(j.rows[0][0], "queued");
  EXPECT_EQ(j.rows[0][1], "[1,1000]");  // canonical JSON, from the first submission
  EXPECT_EQ(j.rows[0][2], "{}");
  EXPECT_EQ(j.rows[0][3], "MI300X");
  EXPECT_EQ(j.rows[0][4], "gfx942");
  EXPECT_EQ(j.rows[0][5], 0);
}

TEST_F(CatalogTest, BatchIdIsHashOfSortedKeys) {
  auto cat = open();
  auto jobs = make_jobs(3);
  std::vector<std::string> keys;
  for (auto& j : jobs) keys.push_back(j.key);
  std::sort(keys.begin(), keys.end());
  std::string joined;
  for (auto& k : keys) joined += k + "\n";
  EXPECT_EQ(cat.submit("b", "m", "t", jobs).batch_id, sha256_hex(joined).substr(0, 12));
}

TEST_F(CatalogTest, SecondManifestSharingAKeySharesTheJob) {
  auto cat = open();
  auto a = make_jobs(2, "a");                                // a0, a1
  std::vector<NewJob> b = {a[1], make_job("b0", 7)};          // a1 shared
  auto ra = cat.submit("A", "a.yaml", "A", a);
  auto rb = cat.submit("B", "b.yaml", "B", b);
  EXPECT_NE(ra.batch_id, rb.batch_id);
  EXPECT_EQ(rb.total_jobs, 2);
  EXPECT_EQ(rb.new_jobs, 1);
  EXPECT_EQ(count(cat, "jobs"), 3);
  EXPECT_EQ(count(cat, "batches"), 2);
  EXPECT_EQ(count(cat, "batch_jobs"), 4);
  EXPECT_EQ(scalar(cat, "SELECT count(*) FROM batch_jobs bj JOIN jobs j ON j.id = bj.job_id "
                        "WHERE j.key = '" + a[1].key + "'"),
            2);
  // Duplicate keys inside one submission count once.
  auto rc = cat.submit("C", "c.yaml", "C", {a[0], a[0]});
  EXPECT_EQ(rc.total_jobs, 1);
  EXPECT_EQ(rc.new_jobs, 0);
}

// ---- job state machine ---------------------------------------------------------

TEST_F(CatalogTest, ClaimFinishReleaseTransitions) {
  auto cat = open();
  cat.submit("b", "m", "t", make_jobs(2));
  const std::string a = live_owner("a"), b = live_owner("b");

  auto j1 = cat.claim_job(a, 60);
  ASSERT_TRUE(j1);
  EXPECT_EQ(j1->state, "running");
  EXPECT_EQ(j1->attempts, 1);
  EXPECT_EQ(j1->lease_owner, a);
  ASSERT_TRUE(j1->lease_expires);
  EXPECT_GT(*j1->lease_expires, 0);
  EXPECT_EQ(j1->op, "softmax");
  EXPECT_EQ(j1->shape, json::array({1, 1000}));  // oldest first
  EXPECT_TRUE(j1->spec.is_object());

  auto j2 = cat.claim_job(b, 60);
  ASSERT_TRUE(j2);
  EXPECT_NE(j2->id, j1->id);
  EXPECT_FALSE(cat.claim_job(b, 60));  // nothing left

  // Owner checks.
  EXPECT_THROW(cat.finish_job(j1->id, b, true, ""), CatalogError);
  EXPECT_THROW(cat.release_job(j1->id, b), CatalogError);
  EXPECT_EQ(cat.job(j1->id)->state, "running");

  cat.finish_job(j1->id, a, true, "best 0.1 ms");
  auto done = cat.job(j1->id);
  EXPECT_EQ(done->state, "done");
  EXPECT_EQ(done->message, "best 0.1 ms");
  EXPECT_EQ(done->lease_owner, "");
  EXPECT_FALSE(done->lease_expires);
  const std::string w = thrown<CatalogError>([&] { cat.finish_job(j1->id, a, true, ""); });
  EXPECT_NE(w.find("is done, not running"), std::string::npos) << w;
  EXPECT_THROW(cat.release_job(j1->id, a), CatalogError);

  // Release (drain) puts it back; the next claim gets it again.
  cat.release_job(j2->id, b);
  EXPECT_EQ(cat.job(j2->id)->state, "queued");
  auto again = cat.claim_job(a, 60);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, j2->id);
  EXPECT_EQ(again->attempts, 2);
  cat.finish_job(again->id, a, false, "all candidates failed");
  EXPECT_EQ(cat.job(j2->id)->state, "failed");
  EXPECT_FALSE(cat.claim_job(a, 60));  // done and failed are never claimed

  EXPECT_EQ(cat.requeue_failed(), 1);
  EXPECT_EQ(cat.job(j2->id)->state, "queued");
  EXPECT_THROW(cat.finish_job(999999, a, true, ""), CatalogError);
  EXPECT_FALSE(cat.job(999999));
}

// --- retry_failed (kiln retry) ---------------------------------------------------

namespace {

EvaluationIn evaluation(const std::string& status, const std::string& message = "") {
  EvaluationIn e;
  e.status = status;
  e.message = message.empty() ? status + " message" : message;
  e.result = status == "ok" ? ok_result() : json::object();
  e.worker = "pid 1";
  return e;
}

// Adds a template candidate with `tag` in its config to job `job_id`; returns its id.
long long add_cand(Catalog& cat, long long job_id, const std::string& tag) {
  return add_template_candidate(cat, job_id, {{"tag", tag}});
}

// Submits one job tagged `tag` and claims it for `owner`: a running job for the
// test to fail. Throws when the claim finds none.
JobRow running_job(Catalog& cat, const std::string& tag, const std::string& owner) {
  cat.submit("b", "m", "", {make_job(tag)});
  auto j = cat.claim_job(owner, 60);
  if (!j) throw std::runtime_error("no job to claim for " + tag);
  return *j;
}

// The statuses of job_id's evaluations, sorted.
std::vector<std::string> eval_statuses(const Catalog& cat, long long job_id) {
  std::vector<std::string> out;
  for (const auto& row : cat.query("SELECT e.status FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
                                   "WHERE c.job_id = " + std::to_string(job_id) + " ORDER BY e.status").rows)
    out.push_back(row[0].get<std::string>());
  return out;
}

// Every row of the tables retry_failed may write, as text: equal before and after means nothing changed.
std::string catalog_dump(const Catalog& cat) {
  std::string s;
  for (const char* t : {"jobs", "candidates", "evaluations", "artifacts", "blobs", "retries"})
    for (const auto& row : cat.query(std::string("SELECT * FROM ") + t + " ORDER BY 1").rows)
      s += std::string(t) + json(row).dump() + "\n";
  return s;
}

}  // namespace

TEST(RetryVerdicts, OnlyTimeoutAndCrashAreNoVerdict) {
  for (const char* s : {"ok", "incorrect", "compile_error", "resource_error", "rejected", "some_future_status"})
    EXPECT_TRUE(is_verdict(s)) << s;
  for (const char* s : {"timeout", "crash"}) EXPECT_FALSE(is_verdict(s)) << s;
}

TEST_F(CatalogTest, RetryForgetsTheEvaluationsThatAreNoVerdict) {
  auto cat = open();
  const std::string o = live_owner("run");
  const JobRow job = running_job(cat, "r", o);
  std::map<std::string, long long> cand;
  for (const char* s : {"ok", "incorrect", "compile_error", "resource_error", "rejected", "timeout", "crash"}) {
    cand[s] = add_cand(cat, job.id, s);
    EvaluationIn e = evaluation(s);
    if (std::string(s) == "crash") e.artifact = artifact("crash's own code object");
    if (std::string(s) == "ok") e.artifact = artifact("ok's code object");
    cat.record_evaluation(cand[s], e);
  }
  cat.finish_job(job.id, o, false, "no correct candidate among 7 (crash 1, timeout 1)\nsecond line");
  ASSERT_EQ(count(cat, "blobs"), 2);

  const RetryReport r = cat.retry_failed({});
  EXPECT_EQ(r.retried, 1);
  EXPECT_EQ(r.forgotten, 2);
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_TRUE(r.jobs[0].retried);
  EXPECT_EQ(r.jobs[0].job_id, job.id);
  EXPECT_EQ(r.jobs[0].state, "failed");
  EXPECT_EQ(r.jobs[0].op, "softmax");
  EXPECT_EQ(r.jobs[0].message, "no correct candidate among 7 (crash 1, timeout 1)\nsecond line");
  EXPECT_EQ(r.jobs[0].forgotten, (std::map<std::string, int>{{"crash", 1}, {"timeout", 1}}));

  // The verdicts stay, the crash and the timeout are gone with the crash's code object.
  EXPECT_EQ(eval_statuses(cat, job.id),
            (std::vector<std::string>{"compile_error", "incorrect", "ok", "rejected", "resource_error"}));
  for (const CandidateRow& c : cat.candidates(job.id))
    EXPECT_EQ(c.evaluated, c.id != cand["crash"] && c.id != cand["timeout"]) << c.config.dump();
  EXPECT_EQ(scalar(cat, "SELECT count(*) FROM artifacts WHERE candidate_id = " + std::to_string(cand["crash"])), 0);
  EXPECT_EQ(scalar(cat, "SELECT count(*) FROM artifacts WHERE candidate_id = " + std::to_string(cand["ok"])), 1);
  EXPECT_EQ(count(cat, "blobs"), 1);

  // The job is queued again, its message and the retries row keep the history.
  const auto after = cat.job(job.id);
  EXPECT_EQ(after->state, "queued");
  EXPECT_EQ(after->message.rfind("retried at ", 0), 0u) << after->message;
  EXPECT_NE(after->message.find("; was: no correct candidate among 7"), std::string::npos) << after->message;
  EXPECT_EQ(after->attempts, 1);
  auto log = cat.query("SELECT job_id, attempts, message, forgotten FROM retries");
  ASSERT_EQ(log.rows.size(), 1u);
  EXPECT_EQ(log.rows[0][0], job.id);
  EXPECT_EQ(log.rows[0][1], 1);
  EXPECT_EQ(log.rows[0][2], "no correct candidate among 7 (crash 1, timeout 1)\nsecond line");
  const json forgotten = json::parse(log.rows[0][3].get<std::string>());
  ASSERT_EQ(forgotten.size(), 2u);
  std::set<std::string> keys;
  for (const auto& f : forgotten) {
    keys.insert(f["candidate_key"].get<std::string>());
    EXPECT_EQ(f["message"], f["status"].get<std::string>() + " message");
    EXPECT_EQ(f["worker"], "pid 1");
  }
  std::set<std::string> want;
  for (const CandidateRow& c : cat.candidates(job.id))
    if (c.id == cand["crash"] || c.id == cand["timeout"]) want.insert(c.key);
  EXPECT_EQ(keys, want);

  // The next run evaluates the forgotten candidates again, code object and all.
  auto again = cat.claim_job(o, 60);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->attempts, 2);
  EvaluationIn e = evaluation("ok");
  e.artifact = artifact("crash's own code object");
  cat.record_evaluation(cand["crash"], e);
  cat.record_evaluation(cand["timeout"], evaluation("incorrect"));
  EXPECT_THROW(cat.record_evaluation(cand["incorrect"], evaluation("ok")), CatalogError);  // kept: still one
}

TEST_F(CatalogTest, RetryFiltersAndNeverTouchesRunningOrDoneJobs) {
  auto cat = open();
  // Batch A: f1 f2 done live expired; batch B: f3 and queued.
  std::vector<NewJob> a = {make_job("f1"), make_job("f2"), make_job("done"), make_job("live"), make_job("expired")};
  std::vector<NewJob> b = {make_job("f3"), make_job("queued")};
  const std::string batch_a = cat.submit("A", "a", "", a).batch_id;
  const std::string batch_b = cat.submit("B", "b", "", b).batch_id;
  std::map<std::string, long long> id;
  for (const auto& row : cat.query("SELECT id, json_extract(spec, '$.tag') FROM jobs").rows)
    id[row[1].get<std::string>()] = row[0].get<long long>();
  const std::string o = live_owner("o"), live = live_owner("live"), gone = live_owner("expired");
  // Claims go by id here (no priorities): f1 f2 done live expired f3, then "queued" is left.
  // "live" and "expired" run under owners of their own (one lease live, one lapsed below).
  for (const char* tag : {"f1", "f2", "done", "live", "expired", "f3"}) {
    const std::string t = tag;
    const std::string& owner = t == "live" ? live : t == "expired" ? gone : o;
    auto j = cat.claim_job(owner, 600);
    ASSERT_TRUE(j);
    ASSERT_EQ(j->spec["tag"], t);
    cat.record_evaluation(add_cand(cat, j->id, t), evaluation("crash"));
    if (t == "done") cat.finish_job(j->id, o, true, "");
    else if (t != "live" && t != "expired") cat.finish_job(j->id, o, false, t + " failed");
  }
  ASSERT_EQ(cat.renew_leases(gone, -5), 1);  // lapsed 5 s ago
  ASSERT_EQ(cat.job(id["queued"])->state, "queued");

  // One batch.
  RetryRequest only_b;
  only_b.batch_id = batch_b;
  const RetryReport rb = cat.retry_failed(only_b);
  ASSERT_EQ(rb.jobs.size(), 1u);
  EXPECT_EQ(rb.jobs[0].job_id, id["f3"]);
  EXPECT_EQ(rb.forgotten, 1);
  EXPECT_EQ(cat.job(id["f1"])->state, "failed");
  EXPECT_EQ(cat.job(id["f3"])->state, "queued");

  // Named jobs: f1 is retried, the others are reported and left as they are.
  RetryRequest named;
  named.job_ids = {id["done"], id["live"], id["expired"], id["queued"], id["f1"], id["f1"]};
  const RetryReport rn = cat.retry_failed(named);
  EXPECT_EQ(rn.retried, 1);
  EXPECT_EQ(rn.forgotten, 1);
  ASSERT_EQ(rn.jobs.size(), 5u);  // f1 once
  std::map<long long, RetriedJob> by_id;
  for (const auto& j : rn.jobs) by_id[j.job_id] = j;
  EXPECT_TRUE(by_id[id["f1"]].retried);
  for (const char* t : {"done", "live", "expired", "queued"}) {
    EXPECT_FALSE(by_id[id[t]].retried) << t;
    EXPECT_TRUE(by_id[id[t]].forgotten.empty()) << t;
  }
  EXPECT_EQ(by_id[id["done"]].state, "done");
  EXPECT_EQ(by_id[id["live"]].state, "running");
  EXPECT_EQ(by_id[id["expired"]].state, "running");
  EXPECT_EQ(by_id[id["queued"]].state, "queued");
  for (const char* t : {"done", "live", "expired"}) EXPECT_EQ(eval_statuses(cat, id[t]), std::vector<std::string>{"crash"}) << t;
  EXPECT_EQ(cat.job(id["live"])->lease_owner, live);
  EXPECT_EQ(cat.job(id["expired"])->lease_owner, gone);
  EXPECT_EQ(cat.job(id["done"])->state, "done");
  EXPECT_EQ(cat.job(id["f2"])->state, "failed");  // not named

  // Everything failed: f2 only now (f1, f3 are queued).
  const RetryReport rest = cat.retry_failed({});
  ASSERT_EQ(rest.jobs.size(), 1u);
  EXPECT_EQ(rest.jobs[0].job_id, id["f2"]);
  EXPECT_EQ(cat.retry_failed({}).jobs.size(), 0u);  // nothing failed is left
  EXPECT_EQ(count(cat, "retries"), 3);
  RetryRequest only_a;
  only_a.batch_id = batch_a;
  EXPECT_EQ(cat.retry_failed(only_a).jobs.size(), 0u);
}

TEST_F(CatalogTest, RetryIsAllOrNothingAndDryRunChangesNothing) {
  auto cat = open();
  const std::string batch = cat.submit("A", "a", "", {make_job("f1"), make_job("f2")}).batch_id;
  cat.submit("B", "b", "", {make_job("other")});
  const std::string o = live_owner("o");
  std::map<std::string, long long> id;
  while (auto j = cat.claim_job(o, 60)) {
    const std::string tag = j->spec["tag"];
    id[tag] = j->id;
    cat.record_evaluation(add_cand(cat, j->id, tag + "-crash"), evaluation("crash"));
    cat.record_evaluation(add_cand(cat, j->id, tag + "-bad"), evaluation("incorrect"));
    cat.finish_job(j->id, o, false, tag + " failed");
  }
  const std::string before = catalog_dump(cat);

  // An unknown job among known ones: nothing changes, and the message names it.
  RetryRequest bad;
  bad.job_ids = {id["f1"], 987654};
  std::string w = thrown<CatalogNotFound>([&] { cat.retry_failed(bad); });
  EXPECT_NE(w.find("no job 987654"), std::string::npos) << w;
  EXPECT_EQ(catalog_dump(cat), before);
  // An unknown batch; a job of another batch.
  RetryRequest no_batch;
  no_batch.batch_id = "feedfacecafe";
  w = thrown<CatalogNotFound>([&] { cat.retry_failed(no_batch); });
  EXPECT_NE(w.find("no batch feedfacecafe"), std::string::npos) << w;
  RetryRequest wrong_batch;
  wrong_batch.batch_id = batch;
  wrong_batch.job_ids = {id["f1"], id["other"]};
  w = thrown<CatalogNotFound>([&] { cat.retry_failed(wrong_batch); });
  EXPECT_NE(w.find("job " + std::to_string(id["other"]) + " is not in batch " + batch), std::string::npos) << w;
  EXPECT_EQ(catalog_dump(cat), before);

  // The dry run reports what the real one does and changes nothing.
  RetryRequest dry;
  dry.batch_id = batch;
  dry.dry_run = true;
  const RetryReport preview = cat.retry_failed(dry);
  EXPECT_EQ(catalog_dump(cat), before);
  EXPECT_EQ(preview.retried, 2);
  EXPECT_EQ(preview.forgotten, 2);
  dry.dry_run = false;
  const RetryReport done = cat.retry_failed(dry);
  EXPECT_EQ(done.retried, preview.retried);
  EXPECT_EQ(done.forgotten, preview.forgotten);
  ASSERT_EQ(done.jobs.size(), preview.jobs.size());
  for (size_t i = 0; i < done.jobs.size(); ++i) {
    EXPECT_EQ(done.jobs[i].job_id, preview.jobs[i].job_id);
    EXPECT_EQ(done.jobs[i].forgotten, preview.jobs[i].forgotten);
  }
  EXPECT_NE(catalog_dump(cat), before);
  EXPECT_EQ(cat.job(id["other"])->state, "failed");
  EXPECT_EQ(eval_statuses(cat, id["f1"]), std::vector<std::string>{"incorrect"});
}

TEST_F(CatalogTest, RetryCanKeepEveryEvaluation) {
  auto cat = open();
  const std::string o = live_owner("o");
  const JobRow j = running_job(cat, "k", o);
  cat.record_evaluation(add_cand(cat, j.id, "t"), evaluation("timeout"));
  cat.finish_job(j.id, o, false, "llm-unavailable");
  RetryRequest keep;
  keep.forget_evaluations = false;
  const RetryReport r = cat.retry_failed(keep);
  EXPECT_EQ(r.retried, 1);
  EXPECT_EQ(r.forgotten, 0);
  EXPECT_EQ(eval_statuses(cat, j.id), std::vector<std::string>{"timeout"});
  EXPECT_EQ(cat.job(j.id)->state, "queued");
  EXPECT_EQ(scalar(cat, "SELECT json_array_length(forgotten) FROM retries"), 0);
}

TEST_F(CatalogTest, MergeCopiesTheRetries) {
  const fs::path other = dir / "other.db";
  {
    auto src = Catalog::open(other, false, kMigrations);
    const std::string o = live_owner("o");
    const JobRow j = running_job(src, "m", o);
    src.record_evaluation(add_cand(src, j.id, "c"), evaluation("crash"));
    src.finish_job(j.id, o, false, "crashed");
    ASSERT_EQ(src.retry_failed({}).retried, 1);
  }
  auto cat = open();
  EXPECT_EQ(merge_catalog(cat, other).retries, 1);
  EXPECT_EQ(merge_catalog(cat, other).retries, 0);  // by (job, time): once
  auto row = cat.query("SELECT r.message, json_extract(r.forgotten, '$[0].candidate_key') = c.key "
                       "FROM retries r JOIN candidates c ON c.job_id = r.job_id");
  ASSERT_EQ(row.rows.size(), 1u);
  EXPECT_EQ(row.rows[0][0], "crashed");
  EXPECT_EQ(row.rows[0][1], 1);
}

TEST_F(CatalogTest, ClaimRestrictedToBatch) {
  auto cat = open();
  auto ra = cat.submit("A", "a", "A", make_jobs(2, "a"));
  auto rb = cat.submit("B", "b", "B", make_jobs(1, "b"));
  const std::string o = live_owner("o");
  auto j = cat.claim_job(o, 60, rb.batch_id);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->key, make_jobs(1, "b")[0].key);
  EXPECT_FALSE(cat.claim_job(o, 60, rb.batch_id));
  EXPECT_TRUE(cat.claim_job(o, 60, ra.batch_id));
  EXPECT_FALSE(cat.claim_job(o, 60, std::string("nosuchbatch")));
}

TEST_F(CatalogTest, ExpiredLeaseIsReclaimed) {
  auto cat = open();
  cat.submit("b", "m", "t", make_jobs(2));
  const std::string a = live_owner("a"), b = live_owner("b");
  auto ja = cat.claim_job(a, 60);
  ASSERT_TRUE(ja);
  auto jb = cat.claim_job(b, 60);  // a's lease is live: b gets the other job
  ASSERT_TRUE(jb);
  EXPECT_NE(jb->id, ja->id);
  EXPECT_FALSE(cat.claim_job(b, 60));

  // a's lease now lapses in 0.2 s (renew sets it from now).
  EXPECT_EQ(cat.renew_leases(a, 0.2), 1);
  EXPECT_EQ(cat.renew_leases("nobody:1", 60), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto re = cat.claim_job(b, 60);
  ASSERT_TRUE(re);
  EXPECT_EQ(re->id, ja->id);
  EXPECT_EQ(re->attempts, 2);
  EXPECT_EQ(re->lease_owner, b);
  EXPECT_NE(re->message.find("lease expired"), std::string::npos) << re->message;
  // The old owner lost it.
  EXPECT_THROW(cat.finish_job(ja->id, a, true, ""), CatalogError);
  EXPECT_EQ(cat.renew_leases(a, 60), 0);
  cat.finish_job(re->id, b, true, "");
}

TEST_F(CatalogTest, RenewedLeaseIsNotReclaimed) {
  auto cat = open();
  cat.submit("b", "m", "t", make_jobs(1));
  const std::string a = live_owner("a"), b = live_owner("b");
  ASSERT_TRUE(cat.claim_job(a, 0.2));
  EXPECT_EQ(cat.renew_leases(a, 60), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(cat.claim_job(b, 60));
}

TEST_F(CatalogTest, DeadOwnerOnThisHostIsReclaimedAtOnce) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // reaped: the pid no longer exists
  ASSERT_EQ(kill(child, 0), -1);

  auto cat = open();
  cat.submit("b", "m", "t", make_jobs(3));
  const std::string dead = hostname() + ":" + std::to_string(child);
  const std::string elsewhere = "some-other-host.invalid:" + std::to_string(child);
  const std::string alive = live_owner("alive");
  // (Claimed in this order: a live claimer would itself reclaim the dead one's job.)
  auto ja = cat.claim_job(alive, 3600);
  auto je = cat.claim_job(elsewhere, 3600);
  auto jd = cat.claim_job(dead, 3600);
  ASSERT_TRUE(jd && je && ja);

  const std::string me = live_owner("me");
  auto got = cat.claim_job(me, 60);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->id, jd->id);
  EXPECT_NE(got->message.find("process gone"), std::string::npos) << got->message;
  EXPECT_EQ(got->attempts, 2);
  // Another host's pid cannot be checked, and a live owner keeps its job.
  EXPECT_FALSE(cat.claim_job(me, 60));
  EXPECT_EQ(cat.job(je->id)->lease_owner, elsewhere);
  EXPECT_EQ(cat.job(ja->id)->lease_owner, alive);
}

TEST_F(CatalogTest, ConcurrentClaimsFromThreadsNeverShareAJob) {
  const int kJobs = 200, kThreads = 4;
  { open().submit("b", "m", "t", make_jobs(kJobs)); }
  std::vector<std::vector<long long>> got(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        auto cat = open();  // one connection per thread
        const std::string me = live_owner("t" + std::to_string(t));
        while (auto j = cat.claim_job(me, 60)) {
          got[t].push_back(j->id);
          cat.finish_job(j->id, me, true, "");
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++errors;
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors, 0);
  std::vector<long long> all;
  for (auto& v : got) all.insert(all.end(), v.begin(), v.end());
  std::set<long long> unique(all.begin(), all.end());
  EXPECT_EQ(all.size(), (size_t)kJobs);
  EXPECT_EQ(unique.size(), (size_t)kJobs);
  auto cat = open();
  EXPECT_EQ(scalar(cat, "SELECT count(*) FROM jobs WHERE state = 'done' AND attempts = 1"), kJobs);
}

TEST_F(CatalogTest, ConcurrentClaimsFromProcessesNeverShareAJob) {
  const int kJobs = 120, kProcs = 4;
  { open().submit("b", "m", "t", make_jobs(kJobs)); }
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        auto cat = open();
        std::ofstream out(dir / ("claimed-" + std::to_string(p)));
        const std::string me = hostname() + ":" + std::to_string(getpid());
        while (auto j = cat.claim_job(me, 60)) {
          out << j->id << "\n";
          out.flush();
          cat.finish_job(j->id, me, true, "");
        }
      } catch (...) {
        rc = 2;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::vector<long long> all;
  for (int p = 0; p < kProcs; ++p) {
    std::ifstream in(dir / ("claimed-" + std::to_string(p)));
    for (long long id; in >> id;) all.push_back(id);
  }
  std::set<long long> unique(all.begin(), all.end());
  EXPECT_EQ(all.size(), (size_t)kJobs);
  EXPECT_EQ(unique.size(), (size_t)kJobs);
}

// ---- candidates and evaluations -------------------------------------------------

TEST_F(CatalogTest, AddCandidateIsIdempotent) {
  auto cat = open();
  auto [job_id, cand_id] = job_with_candidate(cat);
  CandidateRow c;
  c.job_id = job_id;
  c.generator = "template";
  c.template_name = "softmax";
  c.config = {{"BLOCK", 1024}, {"num_warps", 4}};  // same config, other order
  auto again = cat.add_candidate(c);
  EXPECT_EQ(again.id, cand_id);
  EXPECT_EQ(again.key, candidate_key("template", "softmax", c.config, std::nullopt));
  EXPECT_FALSE(again.evaluated);

  c.config["num_warps"] = 8;
  c.round = 1;
  c.instance = 2;
  c.parent_id = cand_id;
  auto other = cat.add_candidate(c);
  EXPECT_NE(other.id, cand_id);
  EXPECT_EQ(other.round, 1);
  EXPECT_EQ(other.instance, 2);
  EXPECT_EQ(other.parent_id, cand_id);

  CandidateRow llm;
  llm.job_id = job_id;
  llm.key = "explicit-key";
  llm.generator = "llm";
  llm.config = json::object();
  llm.source = "@triton.jit\ndef k(): pass\n";
  auto l1 = cat.add_candidate(llm);
  EXPECT_EQ(l1.key, "explicit-key");
  EXPECT_EQ(l1.template_name, "");
  EXPECT_EQ(l1.source, llm.source);
  EXPECT_EQ(cat.add_candidate(llm).id, l1.id);

  auto all = cat.candidates(job_id);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, cand_id);
  EXPECT_EQ(all[1].id, other.id);
  EXPECT_EQ(all[2].id, l1.id);
  EXPECT_EQ(all[0].config, json({{"BLOCK", 1024}, {"num_warps", 4}}));

  EvaluationIn e;
  e.status = "ok";
  e.result = ok_result();
  cat.record_evaluation(cand_id, e);
  c.config = {{"BLOCK", 1024}, {"num_warps", 4}};
  c.round = 0;
  c.instance = 0;
  c.parent_id.reset();
  auto evaluated = cat.add_candidate(c);
  EXPECT_EQ(evaluated.id, cand_id);
  EXPECT_TRUE(evaluated.evaluated);
  EXPECT_TRUE(cat.candidates(job_id)[0].evaluated);
  EXPECT_FALSE(cat.candidates(job_id)[1].evaluated);

  CandidateRow orphan = c;
  orphan.job_id = 424242;  // no such job: foreign key
  EXPECT_THROW(cat.add_candidate(orphan), CatalogError);
}

TEST_F(CatalogTest, RecordEvaluationFillsTypedColumns) {
  auto cat = open();
  auto [job_id, cand_id] = job_with_candidate(cat);
  EvaluationIn e;
  e.status = "ok";
  e.result = ok_result();
  e.estimate_ms = 0.3;
  e.worker = "host:123";
  e.artifact = artifact("\x7f" "ELF code object bytes");
  cat.record_evaluation(cand_id, e);
  auto r = cat.query(
      "SELECT status, message, exec_device, seeds, max_abs_err, max_rel_err, bench_device, runs, "
      "mean_ms, median_ms, p99_ms, min_ms, stddev_ms, estimate_ms, registers, sgprs, spills, "
      "shared_bytes, scratch_bytes, occupancy, compile_s, check_s, bench_s, worker, result "
      "FROM evaluations");
  ASSERT_EQ(r.rows.size(), 1u);
  const auto& row = r.rows[0];
  EXPECT_EQ(row[0], "ok");
  EXPECT_TRUE(row[1].is_null());
  EXPECT_EQ(row[2], "cpu (Triton interpreter)");
  EXPECT_EQ(row[3], 3);
  EXPECT_DOUBLE_EQ(row[4].get<double>(), 1e-7);
  EXPECT_DOUBLE_EQ(row[5].get<double>(), 2e-6);
  EXPECT_EQ(row[6], "NVIDIA H200");
  EXPECT_EQ(row[7], 100);
  EXPECT_DOUBLE_EQ(row[8].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(row[9].get<double>(), 0.45);
  EXPECT_DOUBLE_EQ(row[10].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(row[11].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(row[12].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(row[13].get<double>(), 0.3);
  EXPECT_EQ(row[14], 32);
  EXPECT_EQ(row[15], 20);
  EXPECT_EQ(row[16], 0);
  EXPECT_EQ(row[17], 1024);
  EXPECT_EQ(row[18], 0);
  EXPECT_DOUBLE_EQ(row[19].get<double>(), 8);
  EXPECT_DOUBLE_EQ(row[20].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(row[21].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(row[22].get<double>(), 0.25);
  EXPECT_EQ(row[23], "host:123");
  EXPECT_EQ(json::parse(row[24].get<std::string>()), ok_result());

  auto a = cat.query("SELECT target, arch, kind, sha256, kernel_name, metadata FROM artifacts");
  ASSERT_EQ(a.rows.size(), 1u);
  EXPECT_EQ(a.rows[0][3], sha256_hex(e.artifact->bytes));
  EXPECT_EQ(a.rows[0][4], "softmax_kernel");
  EXPECT_EQ(json::parse(a.rows[0][5].get<std::string>()), e.artifact->metadata);
  auto b = cat.query("SELECT sha256, size, data FROM blobs");
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(b.rows[0][1], (long long)e.artifact->bytes.size());
  EXPECT_EQ(b.rows[0][2], "<blob " + std::to_string(e.artifact->bytes.size()) + " bytes>");
}

TEST_F(CatalogTest, TimeoutWithEmptyResultHasNullColumns) {
  auto cat = open();
  auto [job_id, cand_id] = job_with_candidate(cat);
  EvaluationIn e;
  e.status = "timeout";
  e.message = "no answer in 300 s";
  e.result = json::object();
  cat.record_evaluation(cand_id, e);
  auto r = cat.query(
      "SELECT status, message, exec_device, seeds, median_ms, registers, compile_s, estimate_ms, "
      "worker, result FROM evaluations");
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0][0], "timeout");
  EXPECT_EQ(r.rows[0][1], "no answer in 300 s");
  for (int c = 2; c <= 8; ++c) EXPECT_TRUE(r.rows[0][c].is_null()) << r.columns[c];
  EXPECT_EQ(r.rows[0][9], "{}");

  // A partial result (crash after correctness): only what is there is filled.
  auto [j2, c2] = job_with_candidate(cat, "y");
  EvaluationIn crash;
  crash.status = "crash";
  crash.result = {{"status", "crash"}, {"message", "illegal address"},
                  {"correctness", {{"seeds", 2}, {"max_abs_err", nullptr}}},
                  {"latency", nullptr}, {"artifact", "garbage"}};
  cat.record_evaluation(c2, crash);
  auto r2 = cat.query("SELECT message, seeds, max_abs_err, runs, registers FROM evaluations "
                      "WHERE candidate_id = " + std::to_string(c2));
  EXPECT_EQ(r2.rows[0][0], "illegal address");  // taken from the result when not given
  EXPECT_EQ(r2.rows[0][1], 2);
  EXPECT_TRUE(r2.rows[0][2].is_null());
  EXPECT_TRUE(r2.rows[0][3].is_null());
  EXPECT_TRUE(r2.rows[0][4].is_null());
}

TEST_F(CatalogTest, RecordEvaluationTwiceThrowsAndKeepsOneRow) {
  auto cat = open();
  auto [job_id, cand_id] = job_with_candidate(cat);
  EvaluationIn e;
  e.status = "ok";
  e.result = ok_result();
  e.artifact = artifact("first");
  cat.record_evaluation(cand_id, e);
  EvaluationIn e2 = e;
  e2.status = "incorrect";
  e2.artifact = artifact("second");
  const std::string w = thrown<CatalogError>([&] { cat.record_evaluation(cand_id, e2); });
  EXPECT_NE(w.find("already has an evaluation"), std::string::npos) << w;
  EXPECT_EQ(count(cat, "evaluations"), 1);
  EXPECT_EQ(count(cat, "artifacts"), 1);
  EXPECT_EQ(count(cat, "blobs"), 1);
  EXPECT_EQ(cat.query("SELECT status FROM evaluations").rows[0][0], "ok");
}

TEST_F(CatalogTest, RecordEvaluationIsAllOrNothing) {
  auto cat = open();
  auto [job_id, cand_id] = job_with_candidate(cat);
  EvaluationIn e;
  e.status = "ok";
  e.result = ok_result();
  e.artifact = artifact("bytes", "not-a-kind");  // violates the artifacts CHECK
  EXPECT_THROW(cat.record_evaluation(cand_id, e), CatalogError);
  EXPECT_EQ(count(cat, "evaluations"), 0);
  EXPECT_EQ(count(cat, "blobs"), 0);
  EXPECT_EQ(count(cat, "artifacts"), 0);

  EvaluationIn bad_status;
  bad_status.status = "slow";  // not a status
  EXPECT_THROW(cat.record_evaluation(cand_id, bad_status), CatalogError);
  EXPECT_THROW(cat.record_evaluation(987654, e), CatalogError);  // no such candidate

  e.artifact = artifact("bytes");
  cat.record_evaluation(cand_id, e);  // nothing half-written blocks the real one
  EXPECT_EQ(count(cat, "evaluations"), 1);
  EXPECT_EQ(count(cat, "blobs"), 1);
}

TEST_F(CatalogTest, BlobsAreStoredOnceByContent) {
  auto cat = open();
  auto [job_id, c1] = job_with_candidate(cat);
  CandidateRow c;
  c.job_id = job_id;
  c.generator = "template";
  c.template_name = "softmax";
  std::vector<long long> ids = {c1};
  for (int w : {8, 16}) {
    c.config = {{"num_warps", w}};
    ids.push_back(cat.add_candidate(c).id);
  }
  std::string same(4096, '\x01');
  for (int i = 0; i < 3; ++i) {
    EvaluationIn e;
    e.status = "ok";
    e.result = ok_result();
    e.artifact = artifact(i < 2 ? same : std::string("different"));
    cat.record_evaluation(ids[i], e);
  }
  EXPECT_EQ(count(cat, "artifacts"), 3);
  EXPECT_EQ(count(cat, "blobs"), 2);
  EXPECT_EQ(scalar(cat, "SELECT size FROM blobs WHERE sha256 = '" + sha256_hex(same) + "'"), 4096);
  EXPECT_EQ(scalar(cat, "SELECT count(DISTINCT sha256) FROM artifacts"), 2);
}

TEST_F(CatalogTest, BestIsSetReplacedAndChecked) {
  auto cat = open();
  auto [job_id, c1] = job_with_candidate(cat);
  EXPECT_FALSE(cat.best(job_id));
  cat.set_best({job_id, c1, "estimated", 0.7, ""});
  auto b = cat.best(job_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->candidate_id, c1);
  EXPECT_EQ(b->basis, "estimated");
  EXPECT_DOUBLE_EQ(b->value_ms, 0.7);
  EXPECT_EQ(b->device, "");
  EXPECT_TRUE(cat.query("SELECT device FROM best").rows[0][0].is_null());

  CandidateRow c;
  c.job_id = job_id;
  c.generator = "template";
  c.config = {{"num_warps", 2}};
  long long c2 = cat.add_candidate(c).id;
  cat.set_best({job_id, c2, "measured", 0.42, "NVIDIA H200"});
  b = cat.best(job_id);
  EXPECT_EQ(b->candidate_id, c2);
  EXPECT_EQ(b->basis, "measured");
  EXPECT_EQ(b->device, "NVIDIA H200");
  EXPECT_EQ(count(cat, "best"), 1);

  auto [other_job, other_cand] = job_with_candidate(cat, "other");
  EXPECT_THROW(cat.set_best({job_id, other_cand, "measured", 1, "x"}), CatalogError);
  EXPECT_THROW(cat.set_best({job_id, c2, "guessed", 1, ""}), CatalogError);
  EXPECT_EQ(cat.best(job_id)->candidate_id, c2);
}

// ---- query ----------------------------------------------------------------------

TEST_F(CatalogTest, QueryRefusesEverythingThatWrites) {
  auto cat = open();
  cat.submit("b", "m", "t", make_jobs(2));
  const fs::path attached = dir / "attached.db";
  const fs::path vacuumed = dir / "vacuumed.db";
  const std::vector<std::string> bad = {
      "INSERT INTO batches VALUES ('x', 'n', 'p', 's', 't', 0)",
      "UPDATE jobs SET state = 'done'",
      "DELETE FROM jobs",
      "DROP TABLE jobs",
      "ATTACH DATABASE '" + attached.string() + "' AS x",
      "PRAGMA user_version=5",
      "PRAGMA user_version = 5",
      "pragma USER_VERSION = 5",
      "PRAGMA journal_mode = DELETE",
      "PRAGMA foreign_keys = OFF",
      "PRAGMA writable_schema = ON",
      "SELECT 1; DELETE FROM jobs",
      "SELECT 1;DROP TABLE jobs;",
      "SELECT 1; PRAGMA user_version = 5",
      "SELECT 1; ATTACH '" + attached.string() + "' AS x",
      "WITH x AS (SELECT 1) DELETE FROM jobs",
      "REPLACE INTO best VALUES (1, 1, 'measured', 1, NULL, 0)",
      "CREATE TABLE t (x)",
      "CREATE TEMP TABLE t (x)",
      "CREATE TEMP VIEW v AS SELECT 1",
      "ALTER TABLE jobs ADD COLUMN z",
      "VACUUM",
      "VACUUM INTO '" + vacuumed.string() + "'",
      "REINDEX",
      "ANALYZE",
      "BEGIN",
      "BEGIN IMMEDIATE; SELECT 1",
      "SELECT load_extension('/nonexistent')",
      "DETACH x",
  };
  for (const auto& sql : bad) {
    try {
      cat.query(sql);
      ADD_FAILURE() << "query accepted: " << sql;
    } catch (const CatalogError& e) {
      EXPECT_NE(std::string(e.what()).find("kiln query is read-only"), std::string::npos)
          << sql << " -> " << e.what();
    }
  }
  try {
    cat.query("SELECT 1; DELETE FROM jobs");
  } catch (const CatalogError& e) {
    EXPECT_NE(std::string(e.what()).find("`DELETE FROM jobs` is not a read statement"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(count(cat, "jobs"), 2);
  EXPECT_EQ(count(cat, "batches"), 1);
  EXPECT_EQ(cat.schema_version(), latest_version());
  EXPECT_EQ(scalar(cat, "SELECT count(*) FROM jobs WHERE state = 'queued'"), 2);
  EXPECT_FALSE(fs::exists(attached));
  EXPECT_FALSE(fs::exists(vacuumed));
  // The catalog still works for writers.
  EXPECT_TRUE(cat.claim_job(live_owner("a"), 60));
}

TEST_F(CatalogTest, QueryReturnsRows) {
  auto cat = open();
  auto jobs = make_jobs(3);
  cat.submit("b", "m", "t", jobs);
  auto r = cat.query("SELECT id, key, 1.5 AS f, NULL AS n, x'00010203' AS b FROM jobs ORDER BY id");
  ASSERT_EQ(r.columns, (std::vector<std::string>{"id", "key", "f", "n", "b"}));
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_TRUE(r.rows[0][0].is_number_integer());
  EXPECT_EQ(r.rows[0][1], jobs[0].key);
  EXPECT_TRUE(r.rows[0][2].is_number_float());
  EXPECT_DOUBLE_EQ(r.rows[0][2].get<double>(), 1.5);
  EXPECT_TRUE(r.rows[0][3].is_null());
  EXPECT_EQ(r.rows[0][4], "<blob 4 bytes>");

  EXPECT_TRUE(cat.query("SELECT * FROM jobs WHERE 0").rows.empty());
  EXPECT_EQ(cat.query("SELECT * FROM jobs WHERE 0").columns.size(), 19u);
  // Several read statements: the last one's rows.
  auto multi = cat.query("SELECT 1; SELECT 2 AS two;  -- trailing comment\n");
  EXPECT_EQ(multi.columns, std::vector<std::string>{"two"});
  EXPECT_EQ(multi.rows.at(0).at(0), 2);
  // Introspection.
  EXPECT_EQ(scalar(cat, "PRAGMA user_version"), latest_version());
  EXPECT_GT(cat.query("PRAGMA table_info(jobs)").rows.size(), 10u);
  EXPECT_GT(cat.query("SELECT name FROM pragma_table_info('jobs')").rows.size(), 10u);
  EXPECT_EQ(scalar(cat, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                        "WHERE i < 10) SELECT sum(i) FROM n"),
            55);
  EXPECT_EQ(cat.query("SELECT json_extract(spec, '$.op') FROM jobs LIMIT 1").rows[0][0], "softmax");
  // Errors are CatalogErrors too.
  EXPECT_THROW(cat.query("SELEC 1"), CatalogError);
  EXPECT_THROW(cat.query("SELECT * FROM no_such_table"), CatalogError);
  EXPECT_THROW(cat.query("   "), CatalogError);
  // Works on a read-only catalog as well.
  auto ro = open(true);
  EXPECT_EQ(count(ro, "jobs"), 3);
}

TEST_F(CatalogTest, MeasuredConfigsAreEachJobsFastestOnTheDevice) {
  auto cat = open();
  cat.submit("b", "m.yaml", "text", {make_job("a", 64), make_job("b", 256)});
  auto ids = cat.query("SELECT id FROM jobs ORDER BY id");
  const long long a = ids.rows.at(0).at(0).get<long long>(), b = ids.rows.at(1).at(0).get<long long>();
  // (job, BLOCK, status, device, median): a mix of what must and must not count.
  struct Row { long long job; int block; const char* status; const char* device; double median; };
  const std::vector<Row> rows = {
      {a, 256, "ok", "NVIDIA H200", 0.30},   {a, 512, "ok", "NVIDIA H200", 0.10},
      {a, 1024, "ok", "NVIDIA H200", 0.20},  {a, 2048, "ok", "NVIDIA H100", 0.01},  // other device
      {a, 4096, "incorrect", "NVIDIA H200", 0.001},                                  // wrong answers
      {b, 256, "ok", "NVIDIA H200", 0.50},   {b, 512, "ok", "NVIDIA H200", 0.70}};
  for (const Row& r : rows) {
    CandidateRow c;
    c.job_id = r.job;
    c.generator = "template";
    c.template_name = "softmax";
    c.config = {{"BLOCK", r.block}};
    const long long cand = cat.add_candidate(c).id;
    EvaluationIn e;
    e.status = r.status;
    e.result = ok_result();
    e.result["status"] = r.status;
    e.result["latency"]["device"] = r.device;
    e.result["latency"]["median_ms"] = r.median;
    cat.record_evaluation(cand, e);
  }
  // Another template's candidates of the same job never count.
  CandidateRow other;
  other.job_id = a;
  other.generator = "template";
  other.template_name = "softmax_v2";
  other.config = {{"BLOCK", 128}};
  EvaluationIn e;
  e.status = "ok";
  e.result = ok_result();
  e.result["latency"]["median_ms"] = 0.0001;
  cat.record_evaluation(cat.add_candidate(other).id, e);

  const auto m = cat.measured_configs("softmax", "gfx942", "softmax", "NVIDIA H200", 2);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].job_id, a);
  EXPECT_EQ(m[0].key, make_job("a", 64).key);
  EXPECT_EQ(m[0].shape, json::array({64, 1000}));
  EXPECT_EQ(m[0].dtype, "fp16");
  ASSERT_EQ(m[0].best.size(), 2u);  // per_job: the fastest two, fastest first
  EXPECT_EQ(m[0].best[0].first, json({{"BLOCK", 512}}));
  EXPECT_DOUBLE_EQ(m[0].best[0].second, 0.10);
  EXPECT_EQ(m[0].best[1].first, json({{"BLOCK", 1024}}));
  EXPECT_EQ(m[1].job_id, b);
  EXPECT_EQ(m[1].best[0].first, json({{"BLOCK", 256}}));
  // Nothing for another device, arch, operator or template.
  EXPECT_TRUE(cat.measured_configs("softmax", "gfx942", "softmax", "AMD Instinct MI300X", 2).empty());
  EXPECT_TRUE(cat.measured_configs("softmax", "sm_90", "softmax", "NVIDIA H200", 2).empty());
  EXPECT_TRUE(cat.measured_configs("layernorm", "gfx942", "softmax", "NVIDIA H200", 2).empty());
  EXPECT_TRUE(cat.measured_configs("softmax", "gfx942", "layernorm", "NVIDIA H200", 2).empty());
  // Only the most recent jobs are read.
  const auto recent = cat.measured_configs("softmax", "gfx942", "softmax", "NVIDIA H200", 2, /*max_jobs=*/1);
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].job_id, b);
  // A read-only catalog answers too.
  auto ro = open(true);
  EXPECT_EQ(ro.measured_configs("softmax", "gfx942", "softmax", "NVIDIA H200", 8).at(0).best.size(), 3u);
}

}  // namespace
