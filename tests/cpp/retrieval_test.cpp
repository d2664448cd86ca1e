// Retrieval: tokenisation, BM25 cosine scores in [0, 1], the threshold, and the
// corpus built from kernels/ and the catalog.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include <boost/asio/io_context.hpp>

#include "catalog/catalog.h"
#include "catalog/job_key.h"
#include "generate/llm_generator.h"
#include "generate/retrieval.h"
#include "manifest/manifest.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln {
namespace {

using retrieval::Bm25Index;
using retrieval::Document;
using retrieval::tokenize;

Document doc(const std::string& id, const std::string& text) {
  Document d;
  d.id = id;
  d.kind = "template";
  d.match_text = text;
  d.example = text;
  return d;
}

TEST(Tokenize, SplitsIdentifiersDropsKeywordsAndPunctuation) {
  EXPECT_EQ(tokenize("def softmax_kernel(x_ptr, BLOCK_SIZE: tl.constexpr):"),
            (std::vector<std::string>{"softmax", "kernel", "x", "ptr", "block", "size", "tl", "constexpr"}));
  EXPECT_EQ(tokenize("class LayerNormKernel(nn.Module): return self.HTTPServer"),
            (std::vector<std::string>{"layer", "norm", "kernel", "nn", "module", "self", "http", "server"}));
  EXPECT_EQ(tokenize("for i in range(10): if x is None or not y: pass"),
            (std::vector<std::string>{"i", "range", "10", "x", "y"}));
  EXPECT_TRUE(tokenize("(){}[]+-*/ ,.:;=<>!@#").empty());
  EXPECT_EQ(tokenize("tl.arange(0, BLOCK)"), (std::vector<std::string>{"tl", "arange", "0", "block"}));
}

TEST(Bm25, IdenticalTextScoresOneUnrelatedZero) {
  Bm25Index index({doc("a", "torch.softmax(x, dim=-1) row softmax"), doc("b", "matmul tl.dot accumulator"),
                   doc("c", "layernorm mean variance eps weight bias")});
  auto r = index.rank("torch.softmax(x, dim=-1) row softmax");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].index, 0u);
  EXPECT_NEAR(r[0].score, 1.0, 1e-9);
  for (const auto& m : r) {
    EXPECT_GE(m.score, 0.0);
    EXPECT_LE(m.score, 1.0);
  }
  auto none = index.rank("completely different words here");
  for (const auto& m : none) EXPECT_EQ(m.score, 0.0);
}

TEST(Bm25, ScoresAreNormalisedAndOrdered) {
  Bm25Index index({doc("softmax", "softmax over the last dim: exp(x - max) / sum exp"),
                   doc("add", "elementwise add of two tensors x + y"),
                   doc("gelu", "bias gelu elementwise tanh approximation")});
  auto r = index.rank("softmax exp max sum over rows");
  EXPECT_EQ(index.docs()[r[0].index].id, "softmax");
  EXPECT_GT(r[0].score, r[1].score);
  EXPECT_GT(r[0].score, 0.3);
  EXPECT_LT(r[0].score, 1.0);
  // A longer query repeating the same words is still bounded by 1.
  auto big = index.rank("softmax softmax softmax exp exp max sum over the last dim x");
  EXPECT_LE(big[0].score, 1.0);
}

TEST(Bm25, RareTermsWeighMore) {
  // "kernel" is everywhere; "welford" is in one document only.
  Bm25Index index({doc("a", "kernel kernel welford"), doc("b", "kernel kernel online"), doc("c", "kernel kernel")});
  auto r = index.rank("kernel welford");
  EXPECT_EQ(index.docs()[r[0].index].id, "a");
  EXPECT_GT(r[0].score, r[1].score + 0.2);
}

TEST(Bm25, ThresholdDecides) {
  EXPECT_TRUE(retrieval::above(0.8, 0.8));
  EXPECT_TRUE(retrieval::above(1.0 - 1e-12, 1.0));  // an identical text always passes
  EXPECT_FALSE(retrieval::above(0.79, 0.8));
  EXPECT_TRUE(retrieval::above(0.1, 0.0));
  Bm25Index index({doc("same", "relu scale x"), doc("other", "matmul dot")});
  auto r = index.rank("relu scale x");
  EXPECT_TRUE(retrieval::above(r[0].score, 0.8));
  EXPECT_FALSE(retrieval::above(r[1].score, 0.8));
}

TEST(Bm25, EmptyQueryAndEmptyIndex) {
  Bm25Index empty({});
  EXPECT_TRUE(empty.rank("anything").empty());
  Bm25Index one({doc("a", "x y")});
  auto r = one.rank("");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].score, 0.0);
}

TEST(ModuleProblem, DocstringAndReferenceFunction) {
  const std::string src =
      "\"\"\"Row softmax.\"\"\"\n\nimport torch\n\n@triton.jit\ndef k(x):\n    pass\n\n"
      "def reference(op, inputs, params):\n    x = inputs['x']\n    return torch.softmax(x, dim=-1)\n\n"
      "def output_like(op, inputs, params):\n    return None\n";
  const std::string p = retrieval::module_problem_text(src);
  EXPECT_NE(p.find("Row softmax."), std::string::npos);
  EXPECT_NE(p.find("torch.softmax(x, dim=-1)"), std::string::npos);
  EXPECT_EQ(p.find("output_like"), std::string::npos);
  EXPECT_EQ(p.find("@triton.jit"), std::string::npos);
}

TEST(Corpus, TemplatesFromKernelsDirAndCatalogBests) {
  const fs::path home = KILN_SOURCE_DIR;
  const Knowledge k = Knowledge::load(home);
  auto docs = build_corpus(home / "kernels", k.operators, nullptr, 0);
  ASSERT_FALSE(docs.empty());
  bool softmax = false;
  for (const auto& d : docs) {
    EXPECT_EQ(d.kind, "template");
    EXPECT_NE(d.id, "kernels/common.py");
    EXPECT_NE(d.id, "kernels/__init__.py");
    if (d.id == "kernels/softmax.py") {
      softmax = true;
      EXPECT_NE(d.example.find("@triton.jit"), std::string::npos);
      EXPECT_NE(d.match_text.find("operator softmax"), std::string::npos);
      EXPECT_EQ(d.meta["module"], "softmax");
    }
  }
  EXPECT_TRUE(softmax);

  // The softmax operator's own problem retrieves its own template at >= 0.8.
  Bm25Index index(docs);
  JobContext job;
  job.row.op = "softmax";
  job.row.spec = json::object();
  job.knowledge = &k;
  job.module = "softmax";
  auto r = index.rank(retrieval_query(job, home / "kernels"));
  EXPECT_EQ(index.docs()[r[0].index].id, "kernels/softmax.py");
  EXPECT_GE(r[0].score, 0.8);
  EXPECT_LT(r[1].score, 0.8);

  // Catalog bests of other jobs join the corpus; the job itself is left out.
  const fs::path dir = fs::temp_directory_path() / ("kiln-retrieval-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    Catalog cat = Catalog::open(dir / "k.db", false, home / "db" / "migrations");
    json spec = {{"op", "relu_scale"}, {"reference", {{"source", "class Model: relu scale"}, {"sha256", "x"}}}};
    NewJob j1{"k1", "relu_scale", "fp32", "MI300X", "gfx942", json::array(), json::object(), spec};
    NewJob j2{"k2", "relu_scale2", "fp32", "MI300X", "gfx942", json::array(), json::object(), spec};
    cat.submit("t", "m.yaml", "", {j1, j2});
    auto row = cat.claim_job("h:1", 60);
    CandidateRow c;
    c.job_id = row->id;
    c.generator = "llm";
    c.config = json::object();
    c.source = "import triton  # the best kernel";
    CandidateRow stored = cat.add_candidate(c);
    EvaluationIn e;
    e.status = "ok";
    e.result = json::object();
    e.estimate_ms = 0.5;
    cat.record_evaluation(stored.id, e);
    cat.set_best({row->id, stored.id, "estimated", 0.5, ""});
    auto with = build_corpus(home / "kernels", k.operators, &cat, /*exclude_job=*/999);
    ASSERT_EQ(with.size(), docs.size() + 1);
    EXPECT_EQ(with.back().kind, "catalog");
    EXPECT_EQ(with.back().example, "import triton  # the best kernel");
    EXPECT_NE(with.back().match_text.find("class Model: relu scale"), std::string::npos);
    auto without = build_corpus(home / "kernels", k.operators, &cat, row->id);
    EXPECT_EQ(without.size(), docs.size());
  }
  fs::remove_all(dir);
}

// A library operator with generator: llm whose own template matches: the
// template generator serves it, no LLM is asked (and no endpoint is needed).
TEST(LlmGenerator, OwnTemplateServesLibraryOperator) {
  const fs::path home = KILN_SOURCE_DIR;
  const Knowledge k = Knowledge::load(home);
  JobContext job;
  job.row.id = 1;
  job.row.op = "softmax";
  job.row.dtype = "fp16";
  job.row.shape = {128, 1000};
  job.row.spec = {{"op", "softmax"},
                  {"explore", {{"generator", "llm"}, {"strategy", "exhaustive"}, {"max_candidates", 4}}},
                  {"llm", {{"base_url", "http://127.0.0.1:9/v1"}, {"model", "m"}, {"retrieval_threshold", 0.8}}}};
  job.knowledge = &k;
  job.target = k.targets.find("H200");
  job.module = "softmax";
  job.space = {{{"BLOCK_M", 1}, {"BLOCK_N", 1024}, {"num_warps", 4}, {"num_stages", 1}},
               {{"BLOCK_M", 2}, {"BLOCK_N", 1024}, {"num_warps", 8}, {"num_stages", 1}}};
  boost::asio::io_context io;
  auto gen = make_generator(job, io);
  EXPECT_EQ(gen->name(), "llm");
  std::vector<Proposal> got;
  std::vector<std::string> notes;
  gen->propose(job, {}, [&](std::vector<Proposal> p, std::vector<std::string> n) {
    got = std::move(p);
    notes = std::move(n);
  });
  io.run();
  ASSERT_EQ(got.size(), 2u);
  for (const auto& p : got) {
    EXPECT_EQ(p.generator, "template");
    EXPECT_EQ(p.template_name, "softmax");
  }
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("served by the template generator: kernels/softmax.py"), std::string::npos) << notes[0];
}

TEST(LlmGenerator, NoModelIsFatal) {
  const Knowledge k = Knowledge::load(KILN_SOURCE_DIR);
  JobContext job;
  job.row.op = "relu_scale";
  job.row.dtype = "fp32";
  job.row.shape = json::array();
  job.row.spec = {{"reference", {{"source", "class Model: pass\ndef get_inputs(): return []"}}},
                  {"explore", {{"generator", "llm"}}},
                  {"llm", {{"base_url", "http://127.0.0.1:9/v1"}, {"model", ""}}}};
  job.knowledge = &k;
  job.target = k.targets.find("MI300X");
  ::unsetenv("KILN_LLM_MODEL");
  boost::asio::io_context io;
  auto gen = make_generator(job, io);
  std::vector<std::string> notes;
  bool called = false;
  gen->propose(job, {}, [&](std::vector<Proposal> p, std::vector<std::string> n) {
    called = true;
    EXPECT_TRUE(p.empty());
    notes = std::move(n);
  });
  io.run();
  ASSERT_TRUE(called);
  ASSERT_FALSE(notes.empty());
  // This job fails, not the run: the note names both variables.
  EXPECT_EQ(notes.back().rfind("llm-unavailable: ", 0), 0u) << notes.back();
  EXPECT_NE(notes.back().find("KILN_LLM_BASE_URL"), std::string::npos) << notes.back();
  EXPECT_NE(notes.back().find("KILN_LLM_MODEL"), std::string::npos) << notes.back();
  // The template generator never serves a reference job.
  job.row.spec["explore"]["generator"] = "template";
  EXPECT_THROW(make_generator(job, io), std::invalid_argument);
}

TEST(LlmSettings, EnvironmentOverrides) {
  ::setenv("KILN_LLM_BASE_URL", "http://10.0.0.1:8000/v1/", 1);
  ::setenv("KILN_LLM_MODEL", "env-model", 1);
  ::setenv("MY_TEST_KEY", "k2", 1);
  ::unsetenv("KILN_LLM_API_KEY");
  std::string key;
  LlmSettings s = resolve_llm_settings({{"base_url", "http://x/v1"}, {"model", "m"}, {"api_key_env", "MY_TEST_KEY"},
                                        {"rounds", 5}},
                                       &key);
  EXPECT_EQ(s.base_url, "http://10.0.0.1:8000/v1");
  EXPECT_EQ(s.model, "env-model");
  EXPECT_EQ(s.rounds, 5);
  EXPECT_EQ(key, "k2");
  ::setenv("KILN_LLM_API_KEY", "k1", 1);
  resolve_llm_settings(json::object(), &key);
  EXPECT_EQ(key, "k1");
  ::unsetenv("KILN_LLM_BASE_URL");
  ::unsetenv("KILN_LLM_MODEL");
  ::unsetenv("KILN_LLM_API_KEY");
  ::unsetenv("MY_TEST_KEY");
  LlmSettings d = resolve_llm_settings(json::object(), &key);
  EXPECT_EQ(d.base_url, "http://localhost:8000/v1");
  EXPECT_EQ(key, "");
}

TEST(JobKey, ReferencePathAndTransportSettingsDoNotCount) {
  json a = {{"op", "r"},
            {"reference", {{"path", "/a/r.py"}, {"source", "S"}, {"sha256", "h"}}},
            {"llm", {{"base_url", "http://a/v1"}, {"model", "m"}, {"timeout_s", 10}, {"rounds", 3}}}};
  json b = a;
  b["reference"]["path"] = "/elsewhere/r.py";
  b["llm"]["base_url"] = "http://b/v1";
  b["llm"]["timeout_s"] = 99;
  EXPECT_EQ(job_key(a, "", "3.6"), job_key(b, "", "3.6"));
  json c = a;
  c["reference"]["source"] = "S2";
  c["reference"]["sha256"] = "h2";
  EXPECT_NE(job_key(a, "", "3.6"), job_key(c, "", "3.6"));
  json d = a;
  d["llm"]["model"] = "other";
  EXPECT_NE(job_key(a, "", "3.6"), job_key(d, "", "3.6"));
}

// 0002_llm.sql: evaluations keep their rows and accept 'rejected'; llm_calls work.
TEST(CatalogLlm, MigrationKeepsEvaluationsAndAddsLlmCalls) {
  const fs::path home = KILN_SOURCE_DIR;
  const fs::path dir = fs::temp_directory_path() / ("kiln-mig-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "m1");
  fs::copy_file(home / "db/migrations/0001_initial.sql", dir / "m1/0001_initial.sql");
  long long cand = 0, job = 0;
  {
    Catalog v1 = Catalog::open(dir / "k.db", false, dir / "m1");
    ASSERT_EQ(v1.schema_version(), 1);
    // Raw SQL, on a connection of the test's own: this build's submit and
    // claim_job use columns of later schemas.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir / "k.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "INSERT INTO jobs (key, op, shape, dtype, params, target, arch, spec, state, "
                           "lease_owner, lease_expires, attempts, created_at) VALUES ('k1', 'add', '[8]', "
                           "'fp32', '{}', 'H200', 'sm_90', '{\"op\":\"add\"}', 'running', 'h:1', 1e12, 1, 0)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    job = sqlite3_last_insert_rowid(raw);
    sqlite3_close(raw);
    CandidateRow c;
    c.job_id = job;
    c.generator = "template";
    c.template_name = "elementwise";
    c.config = {{"BLOCK", 64}};
    cand = v1.add_candidate(c).id;
    EvaluationIn e;
    e.status = "incorrect";
    e.message = "max abs err 1";
    e.result = {{"status", "incorrect"}, {"correctness", {{"max_abs_err", 1.0}}}};
    v1.record_evaluation(cand, e);
    CandidateRow r = c;
    r.config = {{"BLOCK", 128}};
    const long long c2 = v1.add_candidate(r).id;
    EvaluationIn rej;
    rej.status = "rejected";
    rej.result = json::object();
    EXPECT_THROW(v1.record_evaluation(c2, rej), CatalogError);  // not in 0001's CHECK
  }
  Catalog v2 = Catalog::open(dir / "k.db", false, home / "db/migrations");
  EXPECT_EQ(v2.schema_version(), find_migrations(home / "db/migrations").back().version);
  auto q = v2.query("SELECT candidate_id, status, message, max_abs_err FROM evaluations");
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_EQ(q.rows[0][0], cand);
  EXPECT_EQ(q.rows[0][1], "incorrect");
  EXPECT_EQ(q.rows[0][2], "max abs err 1");
  EXPECT_EQ(q.rows[0][3], 1.0);
  // 'rejected' is a status now.
  CandidateRow c3;
  c3.job_id = job;
  c3.generator = "llm";
  c3.config = json::object();
  c3.source = "import torch";
  const long long id3 = v2.add_candidate(c3).id;
  EvaluationIn rej;
  rej.status = "rejected";
  rej.message = "torch_compute";
  rej.result = json::object();
  v2.record_evaluation(id3, rej);
  // llm_calls: record, link, list.
  LlmCallIn call;
  call.job_id = job;
  call.round = 1;
  call.instance = 2;
  call.parent_id = cand;
  call.model = "m";
  call.url = "http://127.0.0.1:1/v1/chat/completions";
  call.temperature = 0.4;
  call.seed = 2;
  call.prompt = R"([{"role":"user","content":"hi"}])";
  call.response = "```python\nimport torch\n```";
  call.prompt_tokens = 11;
  call.completion_tokens = 7;
  call.latency_s = 0.25;
  call.retrieval = {{"best", "kernels/elementwise.py"}, {"score", 0.5}};
  const long long cid = v2.record_llm_call(call);
  LlmCallIn failed;
  failed.job_id = job;
  failed.prompt = "[]";
  failed.status = "error";
  failed.error = "cannot reach LLM endpoint";
  failed.attempts = 4;
  v2.record_llm_call(failed);
  v2.link_llm_call(cid, id3);
  auto calls = v2.llm_calls(job);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].candidate_id, id3);
  EXPECT_EQ(calls[0].parent_id, cand);
  EXPECT_EQ(calls[0].round, 1);
  EXPECT_EQ(calls[0].instance, 2);
  EXPECT_EQ(calls[0].prompt_tokens, 11);
  EXPECT_EQ(calls[0].completion_tokens, 7);
  EXPECT_EQ(calls[0].temperature, 0.4);
  EXPECT_EQ(calls[0].response, "```python\nimport torch\n```");
  EXPECT_EQ(calls[0].retrieval["best"], "kernels/elementwise.py");
  EXPECT_EQ(calls[0].status, "ok");
  EXPECT_FALSE(calls[1].candidate_id);
  EXPECT_EQ(calls[1].status, "error");
  EXPECT_EQ(calls[1].attempts, 4);
  EXPECT_TRUE(calls[1].retrieval.is_null());
  LlmCallIn bad = failed;
  bad.status = "weird";
  EXPECT_THROW(v2.record_llm_call(bad), CatalogError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
