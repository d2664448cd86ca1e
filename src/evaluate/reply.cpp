#include "evaluate/reply.h"

#include <cctype>
#include <set>

namespace kiln {

using nlohmann::json;

namespace {

// The JSON type's name, for messages.
std::string type_of(const json& j) { return j.type_name(); }

// A short excerpt of a value, for messages (a reply can be megabytes).
std::string excerpt(const json& j) {
  std::string s = j.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

[[noreturn]] void bad(const std::string& field, const std::string& want, const json& got) {
  throw ReplyFault("'" + field + "' must be " + want + ", not " + type_of(got) + " " + excerpt(got));
}

// Optional member: absent or null is fine, else of the predicate's kind.
template <class Pred>
void optional_member(const json& obj, const char* key, const std::string& field, const char* want, Pred ok) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return;
  if (!ok(*it)) bad(field, want, *it);
}

// A member checked to be a string, null or absent: its text, "" for the latter two.
// (json::value("k", "") throws type_error on a null member.)
std::string optional_string(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool is_num(const json& j) { return j.is_number(); }
bool is_obj(const json& j) { return j.is_object(); }

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

ReplyEnvelope parse_envelope(const json& reply) {
  if (!reply.is_object()) bad("reply", "an object", reply);
  ReplyEnvelope e;
  auto ok = reply.find("ok");
  if (ok == reply.end()) throw ReplyFault("'ok' is missing");
  if (!ok->is_boolean()) bad("ok", "true or false", *ok);
  e.ok = ok->get<bool>();
  if (e.ok) {
    auto r = reply.find("result");
    if (r == reply.end()) throw ReplyFault("'result' is missing");
    if (!r->is_object()) bad("result", "an object", *r);
    e.result = *r;
  } else {
    auto err = reply.find("error");
    if (err != reply.end() && !err->is_null()) {
      if (!err->is_string()) bad("error", "a string", *err);
      e.error = err->get<std::string>();
    }
  }
  return e;
}

EvaluateReply parse_evaluate_result(const json& r) {
  if (!r.is_object()) bad("result", "an object", r);
  EvaluateReply out;
  auto st = r.find("status");
  if (st == r.end()) throw ReplyFault("'result.status' is missing");
  if (!st->is_string() || !parse_status(st->get<std::string>())) {
    std::string names;
    for (const auto& n : status_names()) names += (names.empty() ? "" : ", ") + n;
    bad("result.status", "one of " + names, *st);
  }
  if (auto m = r.find("message"); m != r.end() && !m->is_null() && !m->is_string())
    bad("result.message", "a string", *m);
  for (const char* k : {"latency", "correctness", "traffic", "timings"})
    optional_member(r, k, std::string("result.") + k, "an object", is_obj);
  if (auto l = r.find("latency"); l != r.end() && l->is_object())
    for (const char* k : {"median_ms", "mean_ms", "p99_ms", "min_ms", "max_ms", "stddev_ms", "runs"})
      optional_member(*l, k, std::string("result.latency.") + k, "a number", is_num);
  if (auto t = r.find("traffic"); t != r.end() && t->is_object())
    for (const char* k : {"bytes", "flops"}) optional_member(*t, k, std::string("result.traffic.") + k, "a number", is_num);
  auto a = r.find("artifact");
  if (a != r.end() && !a->is_null()) {
    if (!a->is_object()) bad("result.artifact", "an object or null", *a);
    for (const char* k : {"num_warps", "warp_size", "registers", "sgprs", "spills", "shared_bytes",
                          "scratch_bytes", "occupancy", "size_bytes"})
      optional_member(*a, k, std::string("result.artifact.") + k, "a number", is_num);
    for (const char* k : {"kind", "kernel_name"})
      optional_member(*a, k, std::string("result.artifact.") + k, "a string",
                      [](const json& j) { return j.is_string(); });
    optional_member(*a, "grid", "result.artifact.grid", "an array of integers", [](const json& j) {
      if (!j.is_array()) return false;
      for (const auto& g : j)
        if (!g.is_number_integer()) return false;
      return true;
    });
    auto p = a->find("path");
    if (p != a->end() && !p->is_null()) {
      if (!p->is_string()) bad("result.artifact.path", "a string", *p);
      auto s = a->find("sha256");
      if (s == a->end()) throw ReplyFault("'result.artifact.sha256' is missing (the code object's digest)");
      if (!s->is_string() || !is_sha256(s->get<std::string>()))
        bad("result.artifact.sha256", "64 hex digits", *s);
      ArtifactClaim c;
      c.path = p->get<std::string>();
      c.sha256 = s->get<std::string>();
      for (auto& ch : c.sha256) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      c.kind = optional_string(*a, "kind");  // checked above: a string, null or absent
      c.kernel_name = optional_string(*a, "kernel_name");
      c.metadata = *a;
      c.metadata.erase("path");
      out.artifact = std::move(c);
    }
  }
  out.result = read_evaluation_result(r);
  return out;
}

void check_space_result(const json& r) {
  if (!r.is_object()) bad("result", "an object", r);
  auto c = r.find("configs");
  if (c != r.end()) {
    if (!c->is_array()) bad("result.configs", "an array", *c);
    for (size_t i = 0; i < c->size(); ++i)
      if (!(*c)[i].is_object()) bad("result.configs[" + std::to_string(i) + "]", "an object", (*c)[i]);
  }
  optional_member(r, "traffic", "result.traffic", "an object", is_obj);
  if (auto t = r.find("traffic"); t != r.end() && t->is_object())
    for (const char* k : {"bytes", "flops"}) optional_member(*t, k, std::string("result.traffic.") + k, "a number", is_num);
}

CheckedAnswer check_answer(const std::string& method, WorkerOutcome o) {
  CheckedAnswer a;
  if (o.kind == WorkerOutcome::Kind::kReply) {
    try {
      a.envelope = parse_envelope(o.reply);
      if (a.envelope.ok) {
        if (method == "evaluate") {
          a.typed = parse_evaluate_result(a.envelope.result);
        } else {
          if (method == "space" || method == "reference_info") check_space_result(a.envelope.result);
          a.typed.result = read_evaluation_result(a.envelope.result);
        }
      }
      a.envelope.result = json();  // kept once: typed.result.raw
    } catch (const ReplyFault& f) {
      a = CheckedAnswer{};
      a.outcome.kind = WorkerOutcome::Kind::kCrash;
      a.outcome.detail = "infrastructure fault: malformed worker reply to " + method + ": " + f.what();
      return a;
    }
  }
  a.outcome = std::move(o);
  return a;
}

}  // namespace kiln
