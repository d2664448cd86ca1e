#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/shape_text.h"
#include "catalog/job_key.h"
#include "catalog/service_reads.h"

namespace kiln::server {

using nlohmann::json;

namespace {

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json best_json(const BestRow& b) {
  return {{"candidate_id", b.candidate_id}, {"basis", b.basis}, {"value_ms", b.value_ms},
          {"device", b.device.empty() ? json(nullptr) : json(b.device)},
          {"confirmed_run", b.confirmed_run ? json(*b.confirmed_run) : json(nullptr)},
          {"confirmed_ms", opt(b.confirmed_ms)}};
}

json job_json(const reports::JobOverview& j) {
  return {{"id", j.id},
          {"key", j.key},
          {"op", j.op},
          {"shape", j.shape},
          {"dtype", j.dtype},
          {"params", j.params},
          {"target", j.target},
          {"arch", j.arch},
          {"state", j.state},
          {"message", j.message.empty() ? json(nullptr) : json(j.message)},
          {"created_at", j.created_at},
          {"started_at", opt(j.started_at)},
          {"finished_at", opt(j.finished_at)},
          {"candidates", j.candidates},
          {"evaluated", j.evaluated},
          {"correct", j.correct},
          {"best", j.best ? best_json(*j.best) : json(nullptr)}};
}

json confirmed_json(const Confirmed* c) {
  if (!c) return nullptr;
  json baselines = json::object();
  for (const auto& b : c->baselines)
    baselines[b.name] = {{"median_ms", b.median_ms}, {"speedup", b.speedup},
                         {"speedup_ci95", json::array({b.speedup_ci.lo, b.speedup_ci.hi})}};
  return {{"run_id", c->run_id},   {"basis", c->basis},
          {"device", c->device},   {"median_ms", c->median_ms},
          {"ci95_ms", json::array({c->ci.lo, c->ci.hi})}, {"n", c->samples_ms.size()},
          {"baselines", baselines}};
}

// Distance between two shapes: the sum over dimensions of |log2(a/b)| (a
// dimension of 0 counts as 1); another rank is farther than any same-rank shape.
double shape_distance(const json& a, const json& b) {
  if (a.size() != b.size()) return 1e6 + std::abs(static_cast<double>(a.size()) - static_cast<double>(b.size()));
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += std::abs(std::log2(std::max<double>(1, a[i].get<double>())) - std::log2(std::max<double>(1, b[i].get<double>())));
  return d;
}

}  // namespace

Reply json_reply(int status, const json& j) {
  Reply r;
  r.status = status;
  r.body = j.dump(2) + "\n";
  return r;
}

Reply error_reply(int status, const std::string& message) { return json_reply(status, {{"error", message}}); }

std::optional<json> parse_shape(const std::string& text) {
  std::string t = text;
  if (!t.empty() && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  json out = json::array();
  std::string cur;
  auto flush = [&]() -> bool {
    size_t a = cur.find_first_not_of(' '), b = cur.find_last_not_of(' ');
    if (a == std::string::npos) return false;
    const std::string d = cur.substr(a, b - a + 1);
    if (d.empty() || d.size() > 12 || d.find_first_not_of("0123456789") != std::string::npos) return false;
    out.push_back(std::stoll(d));
    cur.clear();
    return true;
  };
  for (char c : t) {
    if (c == 'x' || c == 'X' || c == ',') {
      if (!flush()) return std::nullopt;
    } else {
      cur += c;
    }
  }
  if (!flush() || out.empty() || out.size() > 8) return std::nullopt;
  return out;
}

// The parameters api_best reads (api_best_key covers exactly these).
constexpr const char* kBestParams[] = {"op", "target", "shape", "dtype"};

std::string api_best_key(const Params& q) {
  std::string key;  // each parameter as absent ("-;") or length:value;
  for (const char* p : kBestParams) {
    const auto it = q.find(p);
    key += it == q.end() ? "-;" : std::to_string(it->second.size()) + ":" + it->second + ";";
  }
  return key;
}

Reply api_best(reports::Reader& reader, const TargetRegistry& targets, Facts& facts, const Params& q) {
  for (const char* p : kBestParams)
    if (!q.count(p) || q.at(p).empty())
      return error_reply(400, std::string("missing parameter '") + p +
                                  "': GET /api/best?op=OP&target=TARGET&shape=AxB&dtype=DTYPE");
  const Target* t = targets.find(q.at("target"));
  if (!t) {
    std::string names;
    for (const auto& n : targets.names()) names += (names.empty() ? "" : ", ") + n;
    return error_reply(400, "unknown target '" + q.at("target") + "' (known: " + names + ")");
  }
  const auto shape = parse_shape(q.at("shape"));
  if (!shape) return error_reply(400, "bad shape '" + q.at("shape") + "': expected dimensions like 4096x4096");
  const std::string op = q.at("op"), dtype = q.at("dtype");
  reports::BestFilter f;
  f.op = op;
  f.target = t->name;
  f.dtype = dtype;
  f.shape = canonical_json(*shape);
  const auto found = reports::best_kernels(reader, f);
  if (found.empty()) {
    // the nearest tuned shapes of the same operator on the target (same dtype first)
    reports::BestFilter near;
    near.op = op;
    near.target = t->name;
    std::vector<std::pair<double, const reports::BestKernel*>> ranked;
    const auto all = reports::best_kernels(reader, near);
    std::set<std::string> seen;
    for (const auto& k : all) {
      if (!seen.insert(canonical_json(k.job.shape) + k.job.dtype).second) continue;
      ranked.push_back({shape_distance(*shape, k.job.shape) + (k.job.dtype == dtype ? 0 : 1000), &k});
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    json nearest = json::array();
    for (size_t i = 0; i < ranked.size() && i < 5; ++i) {
      const auto& k = *ranked[i].second;
      nearest.push_back({{"shape", k.job.shape}, {"dtype", k.job.dtype}, {"job_id", k.job.id},
                         {"basis", k.best.basis}, {"value_ms", k.best.value_ms},
                         {"url", "/api/best?op=" + op + "&target=" + t->name + "&shape=" + shape_text(k.job.shape) +
                                     "&dtype=" + k.job.dtype}});
    }
    std::string msg = "no tuned kernel for " + op + " " + shape_text(*shape) + " " + dtype + " on " + t->name +
                      " in the catalog";
    if (nearest.empty())
      msg += "; no shape of " + op + " is tuned on " + t->name;
    else {
      msg += "; nearest tuned shapes:";
      for (const auto& n : nearest) msg += " " + shape_text(n["shape"]) + " " + n["dtype"].get<std::string>() + ",";
      msg.pop_back();
    }
    return json_reply(404, {{"found", false}, {"error", msg}, {"op", op}, {"shape", *shape}, {"dtype", dtype},
                            {"target", t->name}, {"nearest", nearest}});
  }
  const reports::BestKernel& k = found.front();
  const auto c = facts.confirmed(reader.catalog(), k.best);
  json code = nullptr;
  if (!k.code_sha256.empty())
    code = {{"kind", k.code_kind}, {"sha256", k.code_sha256}, {"kernel_name", k.kernel_name},
            {"url", "/api/code-objects/" + k.code_sha256}};
  json out = {{"found", true},
              {"op", op},
              {"shape", k.job.shape},
              {"dtype", dtype},
              {"target", t->name},
              {"arch", k.job.arch},
              {"params", k.job.params},
              {"job_id", k.job.id},
              {"key", k.job.key},
              {"latency_ms", latency_ms(k, c.get())},
              {"basis", k.best.basis},
              {"device", k.best.device.empty() ? json(nullptr) : json(k.best.device)},
              {"best", best_json(k.best)},
              {"confirmed", confirmed_json(c.get())},
              {"config", k.config},
              {"code_object", code},
              {"package_url", "/api/packages/" + t->name},
              {"runs", found.size()}};
  if (found.size() > 1) out["note"] = "several jobs tuned this shape (other params or earlier runs); this is the newest";
  return json_reply(200, out);
}

std::optional<Reply> unknown_batch(reports::Reader& reader, const Params& q) {
  auto it = q.find("batch");
  if (it == q.end() || it->second.empty()) return std::nullopt;
  for (const auto& b : reports::batches(reader))
    if (b.id == it->second) return std::nullopt;
  return error_reply(404, "no batch '" + it->second + "' in the catalog (GET /api/jobs lists the batches)");
}

Reply api_jobs(reports::Reader& reader, const Params& q) {
  if (auto r = unknown_batch(reader, q)) return *r;
  std::optional<std::string> batch;
  if (auto it = q.find("batch"); it != q.end() && !it->second.empty()) batch = it->second;
  std::optional<std::string> state;
  if (auto it = q.find("state"); it != q.end() && !it->second.empty()) {
    state = it->second;
    if (*state != "queued" && *state != "running" && *state != "done" && *state != "failed")
      return error_reply(400, "bad state '" + *state + "': queued, running, done or failed");
  }
  json jobs = json::array();
  for (const auto& j : reports::jobs(reader, batch))
    if (!state || j.state == *state) jobs.push_back(job_json(j));
  json batches = json::array();
  for (const auto& b : reports::batches(reader))
    batches.push_back({{"id", b.id}, {"name", b.name}, {"created_at", b.created_at}, {"jobs", b.jobs}});
  return json_reply(200, {{"jobs", jobs}, {"batches", batches}});
}

Reply api_job(reports::Reader& reader, Facts& facts, const std::string& id_text) {
  if (id_text.empty() || id_text.size() > 18 || id_text.find_first_not_of("0123456789") != std::string::npos)
    return error_reply(400, "bad job id '" + id_text + "': a number, as /api/jobs lists");
  const long long id = std::stoll(id_text);
  const auto j = reports::job(reader, id);
  if (!j) return error_reply(404, "no job " + id_text + " in the catalog");
  json out = job_json(*j);
  if (j->best) {
    const auto c = facts.confirmed(reader.catalog(), *j->best);
    out["confirmed"] = confirmed_json(c.get());
  }
  json cands = json::array();
  for (const auto& c : reports::candidates(reader, id)) {
    json e = nullptr;
    if (c.evaluated)
      e = {{"status", c.status},
           {"message", c.message.empty() ? json(nullptr) : json(c.message)},
           {"bench_device", c.bench_device.empty() ? json(nullptr) : json(c.bench_device)},
           {"median_ms", opt(c.median_ms)},
           {"estimate_ms", opt(c.estimate_ms)},
           {"compile_s", opt(c.compile_s)},
           {"created_at", opt(c.evaluated_at)}};
    cands.push_back({{"id", c.id},
                     {"generator", c.generator},
                     {"template", c.template_name.empty() ? json(nullptr) : json(c.template_name)},
                     {"config", c.config},
                     {"round", c.round},
                     {"instance", c.instance},
                     {"parent_id", c.parent_id ? json(*c.parent_id) : json(nullptr)},
                     {"evaluation", e}});
  }
  out["candidate_count"] = out["candidates"];
  out["candidates"] = cands;  // in evaluation order
  return json_reply(200, out);
}

Reply api_code_object(reports::Reader& reader, const std::string& sha256) {
  if (sha256.size() != 64 || sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
    return error_reply(400, "bad code object id: the 64 hex digits of its sha256");
  auto bytes = reports::code_object_bytes(reader, sha256);
  if (!bytes) return error_reply(404, "no code object " + sha256 + " in the catalog");
  Reply r;
  r.content_type = "application/octet-stream";
  r.body = std::move(*bytes);
  r.headers.push_back({"Content-Disposition", "attachment; filename=\"" + sha256.substr(0, 16) + ".bin\""});
  return r;
}

}  // namespace kiln::server
