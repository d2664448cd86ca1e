// Unit tests of kiln-mpi's parts that need no MPI run: the message helpers, GPU
// binding, catalog checkpoints and the batched catalog writes rank 0 uses.
// (tests/e2e/test_mpi.py runs the launcher itself under mpirun.)
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "checkpoint.h"
#include "protocol.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln;
using namespace kiln::mpi;

namespace {

fs::path temp_root() { return fs::temp_directory_path() / ("kiln-mpi-test-" + std::to_string(getpid())); }

fs::path temp_dir(const std::string& name) {
  fs::path d = temp_root() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// This process's temporary directory goes when its tests are done (ctest runs
// each test in a process of its own, so each leaves one behind otherwise).
class RemoveTempRoot : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(temp_root(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTempRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveTempRoot);

// The single integer a read-only query returns (Catalog::query: its own
// read-only connection, so this reads what is committed).
long long count(const Catalog& c, const char* sql) {
  const Catalog::QueryResult r = c.query(sql);
  EXPECT_EQ(r.rows.size(), 1u) << sql;
  return r.rows.empty() ? -1 : r.rows[0][0].get<long long>();
}

// A catalog with one job and `n` candidates.
std::vector<CandidateRow> seed_catalog(Catalog& c, int n) {
  const NewJob j{.key = "k1", .op = "add", .dtype = "fp32", .target = "MI300X", .arch = "gfx942",
                 .shape = json::array({16}), .params = json::object(), .spec = {{"op", "add"}}};
  c.submit("t", "t.yaml", "text", {j});
  auto job = c.claim_job("host:1", 60);
  EXPECT_TRUE(job.has_value());
  std::vector<CandidateRow> in;
  for (int i = 0; i < n; ++i) {
    CandidateRow r;
    r.job_id = job->id;
    r.generator = "template";
    r.template_name = "add";
    r.config = {{"BLOCK", 64 * (i + 1)}};
    in.push_back(r);
  }
  return c.add_candidates(in);
}

EvaluationIn ok_eval(const std::string& bytes) {
  EvaluationIn e;
  e.status = "ok";
  e.worker = "rank 1 pid 7";
  e.result = {{"status", "ok"}, {"correctness", {{"seeds", 1}, {"max_abs_err", 0.0}}}};
  e.artifact = ArtifactIn{.target = "MI300X", .arch = "gfx942", .kind = "hsaco", .kernel_name = "k", .bytes = bytes,
                          .metadata = json::object()};
  return e;
}

}  // namespace

TEST(Protocol, Base64RoundTrip) {
  std::mt19937 rng(7);
  for (size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 255u, 4096u}) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    EXPECT_EQ(base64_decode(base64_encode(s)), s) << n;
  }
  EXPECT_EQ(base64_encode("Man"), "TWFu");
  EXPECT_EQ(base64_encode("Ma"), "TWE=");
  EXPECT_EQ(base64_encode("M"), "TQ==");
  EXPECT_THROW(base64_decode("T!=="), std::invalid_argument);
}

TEST(Protocol, OutcomeRoundTrip) {
  WorkerOutcome o;
  o.kind = WorkerOutcome::Kind::kTimeout;
  o.detail = "killed after 3 s";
  WorkerOutcome back = outcome_from_json(outcome_to_json(o));
  EXPECT_EQ(back.kind, WorkerOutcome::Kind::kTimeout);
  EXPECT_EQ(back.detail, "killed after 3 s");
  o.kind = WorkerOutcome::Kind::kReply;
  o.reply = {{"id", 3}, {"ok", true}, {"result", {{"status", "ok"}}}};
  back = outcome_from_json(outcome_to_json(o));
  EXPECT_EQ(back.kind, WorkerOutcome::Kind::kReply);
  EXPECT_EQ(back.reply, o.reply);
  // A reply kind without a reply object is a crash, not a silent success.
  back = outcome_from_json({{"kind", "reply"}});
  EXPECT_EQ(back.kind, WorkerOutcome::Kind::kCrash);
}

TEST(Checkpoint, CopiesAtomicallyAndSelfContained) {
  const fs::path dir = temp_dir("checkpoint");
  Catalog c = Catalog::open(dir / "live.db");
  auto cands = seed_catalog(c, 3);
  c.record_evaluations({{cands[0].id, ok_eval("abc")}});
  const fs::path out = dir / "shared" / "kiln.db";
  CheckpointResult r = checkpoint_catalog(c, out);
  EXPECT_GT(r.bytes, 0);
  EXPECT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  EXPECT_FALSE(fs::exists(out.string() + "-wal"));
  // The copy opens read-only as a catalog and has what the live one had.
  Catalog copy = Catalog::open(out, true);
  EXPECT_EQ(count(copy, "SELECT COUNT(*) FROM candidates"), 3);
  EXPECT_EQ(count(copy, "SELECT COUNT(*) FROM evaluations"), 1);
  EXPECT_EQ(copy.settings().journal_mode, "delete");
  // A later checkpoint replaces it.
  c.record_evaluations({{cands[1].id, ok_eval("def")}, {cands[2].id, ok_eval("abc")}});
  checkpoint_catalog(c, out);
  Catalog copy2 = Catalog::open(out, true);
  EXPECT_EQ(count(copy2, "SELECT COUNT(*) FROM evaluations"), 3);
  EXPECT_EQ(count(copy2, "SELECT COUNT(*) FROM blobs"), 2);  // "abc" stored once
  // An unwritable destination fails without leaving anything behind.
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(checkpoint_catalog(c, dir / "file" / "kiln.db"), std::exception);
}

TEST(Checkpoint, InStepsWhileTheCatalogIsWritten) {
  const fs::path dir = temp_dir("steps");
  Catalog c = Catalog::open(dir / "live.db");
  auto cands = seed_catalog(c, 40);
  const fs::path out = dir / "shared.db";
  CatalogCopy copy(c, out);
  size_t next = 0;
  while (!copy.step(1)) {  // one page at a time, writing between steps
    if (next < cands.size()) {
      c.record_evaluations({{cands[next].id, ok_eval(std::string(3000, static_cast<char>('a' + next % 26)))}});
      ++next;
    }
  }
  EXPECT_FALSE(fs::exists(out));  // nothing at PATH until commit
  for (; next < cands.size(); ++next)
    c.record_evaluations({{cands[next].id, ok_eval("z" + std::to_string(next))}});
  copy.commit();
  Catalog shared = Catalog::open(out, true);
  EXPECT_EQ(count(shared, "SELECT COUNT(*) FROM evaluations"), 40);
  // An abandoned copy leaves no PATH.tmp and the previous PATH as it was.
  {
    CatalogCopy unfinished(c, out);
    unfinished.step(1);
    EXPECT_TRUE(fs::exists(out.string() + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  Catalog again = Catalog::open(out, true);
  EXPECT_EQ(count(again, "SELECT COUNT(*) FROM evaluations"), 40);
}

TEST(CatalogBatch, RecordEvaluationsIsAllOrNothing) {
  const fs::path dir = temp_dir("batch");
  Catalog c = Catalog::open(dir / "k.db");
  auto cands = seed_catalog(c, 3);
  c.record_evaluations({{cands[0].id, ok_eval("a")}});
  // One of the batch already has an evaluation: nothing of the batch is written.
  EXPECT_THROW(c.record_evaluations({{cands[1].id, ok_eval("b")}, {cands[0].id, ok_eval("c")}}), CatalogError);
  EXPECT_EQ(count(c, "SELECT COUNT(*) FROM evaluations"), 1);
  EXPECT_EQ(count(c, "SELECT COUNT(*) FROM artifacts"), 1);
  // Twice in one batch is refused too.
  EXPECT_THROW(c.record_evaluations({{cands[1].id, ok_eval("b")}, {cands[1].id, ok_eval("b")}}), CatalogError);
  EXPECT_EQ(count(c, "SELECT COUNT(*) FROM evaluations"), 1);
  c.record_evaluations({{cands[1].id, ok_eval("b")}, {cands[2].id, ok_eval("c")}});
  EXPECT_EQ(count(c, "SELECT COUNT(*) FROM evaluations"), 3);
  EXPECT_EQ(count(c, "SELECT COUNT(*) FROM evaluations WHERE worker = 'rank 1 pid 7'"), 3);
  EXPECT_THROW(c.record_evaluation(cands[2].id, ok_eval("d")), CatalogError);
}

TEST(CatalogBatch, AddCandidatesIsIdempotentAndMarksEvaluated) {
  const fs::path dir = temp_dir("cands");
  Catalog c = Catalog::open(dir / "k.db");
  auto cands = seed_catalog(c, 4);
  ASSERT_EQ(cands.size(), 4u);
  for (const auto& r : cands) EXPECT_FALSE(r.evaluated);
  c.record_evaluations({{cands[2].id, ok_eval("x")}});
  std::vector<CandidateRow> again_in;
  for (auto r : cands) {
    r.id = 0;
    r.key.clear();  // computed again, the same
    again_in.push_back(r);
  }
  auto again = c.add_candidates(again_in);
  ASSERT_EQ(again.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(again[i].id, cands[i].id);
    EXPECT_EQ(again[i].evaluated, i == 2);
  }
  EXPECT_EQ(count(c, "SELECT COUNT(*) FROM candidates"), 4);
  // The same as add_candidate, one at a time.
  CandidateRow one = c.add_candidate(again_in[1]);
  EXPECT_EQ(one.id, cands[1].id);
}
