// The worker-reply parser (evaluate/reply.h) and the artifact checks
// (evaluate/artifact_file.h), on real files in a temporary directory.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/hash.h"
#include "evaluate/artifact_file.h"
#include "evaluate/reply.h"
#include "thrown.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kiln-reply-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

ArtifactClaim claim_for(const fs::path& p, const std::string& bytes) {
  ArtifactClaim c;
  c.path = p.string();
  c.sha256 = sha256_hex(bytes);
  return c;
}

json ok_result() {
  return {{"status", "ok"}, {"message", ""}, {"latency", {{"median_ms", 0.1}}}, {"traffic", {{"bytes", 1e6}}},
          {"artifact", {{"kind", "cubin"}, {"path", "/x/k.cubin"}, {"sha256", std::string(64, 'a')},
                        {"registers", 32}, {"grid", {1, 1, 1}}}}};
}

}  // namespace

TEST(Reply, WellFormedEvaluateResultParses) {
  const EvaluateReply r = parse_evaluate_result(ok_result());
  EXPECT_EQ(r.result.status, EvalStatus::kOk);
  ASSERT_TRUE(r.result.latency);
  EXPECT_EQ(r.result.latency->median_ms, 0.1);
  ASSERT_TRUE(r.result.traffic);
  EXPECT_EQ(r.result.traffic->bytes, 1e6);
  ASSERT_TRUE(r.result.artifact);
  EXPECT_EQ(r.result.artifact->registers, 32);
  EXPECT_EQ(r.result.raw, ok_result());
  ASSERT_TRUE(r.artifact);
  EXPECT_EQ(r.artifact->path, "/x/k.cubin");
  EXPECT_EQ(r.artifact->kind, "cubin");
  EXPECT_FALSE(r.artifact->metadata.contains("path"));
  json none = ok_result();
  none["artifact"] = nullptr;
  EXPECT_FALSE(parse_evaluate_result(none).artifact);
}

// Found while writing fuzz_reply, crashing it (fuzz/corpus/reply/regress-artifact-kind-null.json): an
// optional string given as null is absent, never an uncaught json type_error.
TEST(Reply, NullOptionalStringsReadAsAbsent) {
  json r = ok_result();
  r["artifact"]["kind"] = nullptr;
  r["artifact"]["kernel_name"] = nullptr;
  r["message"] = nullptr;
  const EvaluateReply e = parse_evaluate_result(r);
  ASSERT_TRUE(e.artifact);
  EXPECT_EQ(e.artifact->kind, "");
  EXPECT_EQ(e.artifact->kernel_name, "");
  WorkerOutcome o;
  o.reply = {{"ok", true}, {"result", r}};
  EXPECT_EQ(check_answer("evaluate", o).outcome.kind, WorkerOutcome::Kind::kReply);
}

TEST(Reply, MalformedRepliesAreTypedFaults) {
  EXPECT_THROW(parse_envelope(json("a string")), ReplyFault);
  EXPECT_THROW(parse_envelope(json{{"ok", "yes"}, {"result", json::object()}}), ReplyFault);
  EXPECT_THROW(parse_envelope(json{{"ok", true}}), ReplyFault);
  EXPECT_THROW(parse_envelope(json{{"ok", true}, {"result", "done"}}), ReplyFault);
  EXPECT_THROW(parse_envelope(json{{"ok", false}, {"error", 3}}), ReplyFault);
  EXPECT_EQ(parse_envelope(json{{"ok", false}, {"error", "boom"}}).error, "boom");
  auto broken = [](const char* key, json v) {
    json r = ok_result();
    r[key] = std::move(v);
    return r;
  };
  EXPECT_THROW(parse_evaluate_result(broken("status", 7)), ReplyFault);
  EXPECT_THROW(parse_evaluate_result(broken("status", "fine")), ReplyFault);  // not a status of the schema
  EXPECT_THROW(parse_evaluate_result(broken("status", "triumph")), ReplyFault);  // the catalog's CHECK would abort the run
  EXPECT_EQ(parse_evaluate_result(broken("status", "rejected")).result.status, EvalStatus::kRejected);
  EXPECT_THROW(parse_evaluate_result(broken("message", json::array())), ReplyFault);
  EXPECT_THROW(parse_evaluate_result(broken("latency", "fast")), ReplyFault);
  EXPECT_THROW(parse_evaluate_result(broken("latency", {{"median_ms", "0.1"}})), ReplyFault);
  EXPECT_THROW(parse_evaluate_result(broken("traffic", {{"bytes", "many"}})), ReplyFault);
  EXPECT_THROW(parse_evaluate_result(broken("artifact", "/etc/passwd")), ReplyFault);
  json no_sha = ok_result();
  no_sha["artifact"].erase("sha256");
  EXPECT_THROW(parse_evaluate_result(no_sha), ReplyFault);
  json bad_grid = ok_result();
  bad_grid["artifact"]["grid"] = {"x"};
  EXPECT_THROW(parse_evaluate_result(bad_grid), ReplyFault);
  json no_status = ok_result();
  no_status.erase("status");
  const std::string w = kiln_test::thrown<ReplyFault>([&] { parse_evaluate_result(no_status); });
  EXPECT_NE(w.find("result.status"), std::string::npos) << w;
}

TEST(Reply, CheckAnswerTurnsAFaultIntoACrash) {
  WorkerOutcome o;
  o.reply = {{"ok", true}, {"result", "not an object"}};
  const CheckedAnswer c = check_answer("evaluate", o);
  EXPECT_EQ(c.outcome.kind, WorkerOutcome::Kind::kCrash);
  EXPECT_NE(c.outcome.detail.find("malformed worker reply to evaluate"), std::string::npos) << c.outcome.detail;
  EXPECT_TRUE(c.outcome.reply.is_null());  // nothing of the broken reply is left to read
  EXPECT_FALSE(c.envelope.ok);
  WorkerOutcome space;
  space.reply = {{"ok", true}, {"result", {{"configs", {1, 2}}}}};
  EXPECT_EQ(check_answer("space", space).outcome.kind, WorkerOutcome::Kind::kCrash);
  WorkerOutcome fine;
  fine.reply = {{"ok", true}, {"result", ok_result()}};
  EXPECT_EQ(check_answer("evaluate", fine).outcome.kind, WorkerOutcome::Kind::kReply);
}

// The one typed value every consumer reads: the envelope, the result typed
// (validated for evaluate, with its code-object claim), and the result object
// kept once, as sent.
TEST(Reply, CheckAnswerTypesTheReplyOnce) {
  json r = ok_result();
  r["timings"] = {{"check_s", 0.25}, {"gpu_spans", {{1.0, 2.0, "bench"}}}};
  WorkerOutcome o;
  o.reply = {{"id", 3}, {"ok", true}, {"result", r}};
  const CheckedAnswer a = check_answer("evaluate", o);
  ASSERT_EQ(a.outcome.kind, WorkerOutcome::Kind::kReply) << a.outcome.detail;
  EXPECT_EQ(a.outcome.reply, o.reply);  // as received (the MPI transport forwards it)
  EXPECT_TRUE(a.envelope.ok);
  EXPECT_TRUE(a.envelope.result.is_null());  // not a second copy: typed.result.raw is the result
  EXPECT_EQ(a.typed.result.raw, r);
  EXPECT_EQ(a.typed.result.timings.check_s, 0.25);
  ASSERT_EQ(a.typed.result.timings.gpu_spans.size(), 1u);
  ASSERT_TRUE(a.typed.artifact);
  EXPECT_EQ(a.typed.artifact->sha256, r["artifact"]["sha256"].get<std::string>());
  // A confirm answer: no evaluate schema, but its timings are read all the same.
  WorkerOutcome c;
  c.reply = {{"ok", true}, {"result", {{"entries", json::array()}, {"timings", {{"kernel_s", 1.5}}}}}};
  const CheckedAnswer ca = check_answer("confirm", c);
  EXPECT_EQ(ca.typed.result.timings.kernel_s, 1.5);
  EXPECT_FALSE(ca.typed.artifact);
  // An error reply: its reason, nothing typed.
  WorkerOutcome e;
  e.reply = {{"ok", false}, {"error", "no GPU"}};
  const CheckedAnswer ea = check_answer("evaluate", e);
  EXPECT_EQ(ea.outcome.kind, WorkerOutcome::Kind::kReply);
  EXPECT_FALSE(ea.envelope.ok);
  EXPECT_EQ(ea.envelope.error, "no GPU");
  EXPECT_EQ(ea.typed.result.raw, json::object());
}

TEST(ArtifactFile, AFileInsideIsReadCheckedAndDeleted) {
  TempDir t;
  fs::create_directories(t.path / "slot-0");
  const fs::path p = t.path / "slot-0" / "k.cubin";
  write(p, "code object");
  EXPECT_EQ(take_artifact(t.path / "slot-0", claim_for(p, "code object")), "code object");
  EXPECT_FALSE(fs::exists(p));
}

TEST(ArtifactFile, NothingOutsideIsReadOrDeleted) {
  TempDir t;
  const fs::path dir = t.path / "slot-0";
  fs::create_directories(dir);
  const fs::path outside = t.path / "precious";
  write(outside, "the user's file");
  const ArtifactClaim c = claim_for(outside, "the user's file");
  // a path outside; a .. escape; a symlink inside pointing out; a symlinked parent
  EXPECT_THROW(take_artifact(dir, c), ArtifactRejected);
  ArtifactClaim dotdot = c;
  dotdot.path = (dir / ".." / "precious").string();
  EXPECT_THROW(take_artifact(dir, dotdot), ArtifactRejected);
  fs::create_symlink(outside, dir / "link.cubin");
  ArtifactClaim via_link = c;
  via_link.path = (dir / "link.cubin").string();
  EXPECT_THROW(take_artifact(dir, via_link), ArtifactRejected);
  fs::create_directories(t.path / "elsewhere");
  write(t.path / "elsewhere" / "k.cubin", "the user's file");
  fs::create_directory_symlink(t.path / "elsewhere", dir / "sub");
  ArtifactClaim via_dir = c;
  via_dir.path = (dir / "sub" / "k.cubin").string();
  EXPECT_THROW(take_artifact(dir, via_dir), ArtifactRejected);
  // the directory itself, a relative path
  ArtifactClaim itself = c;
  itself.path = dir.string();
  EXPECT_THROW(take_artifact(dir, itself), ArtifactRejected);
  ArtifactClaim relative = c;
  relative.path = "precious";
  EXPECT_THROW(take_artifact(dir, relative), ArtifactRejected);
  EXPECT_TRUE(fs::exists(outside));
  EXPECT_TRUE(fs::exists(t.path / "elsewhere" / "k.cubin"));
  EXPECT_TRUE(fs::is_symlink(dir / "link.cubin"));
}

TEST(ArtifactFile, WrongDigestFifoAndOversizeAreRejectedAndKept) {
  TempDir t;
  const fs::path p = t.path / "k.cubin";
  write(p, "code object");
  ArtifactClaim lie = claim_for(p, "something else");
  const std::string w = kiln_test::thrown<ArtifactRejected>([&] { take_artifact(t.path, lie); });
  EXPECT_NE(w.find("sha256"), std::string::npos) << w;
  EXPECT_TRUE(fs::exists(p));
  EXPECT_THROW(take_artifact(t.path, claim_for(p, "code object"), 4), ArtifactRejected);
  EXPECT_TRUE(fs::exists(p));
  const fs::path fifo = t.path / "fifo.cubin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(take_artifact(t.path, claim_for(fifo, "")), ArtifactRejected);  // returns at once: O_NONBLOCK
  EXPECT_TRUE(fs::exists(fifo));
}
