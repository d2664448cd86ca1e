#include "evaluate/protocol.h"

#include <algorithm>

namespace kiln {

using nlohmann::json;

const std::vector<std::string>& method_names() {
  static const std::vector<std::string> names = {"hello",   "space",        "evaluate", "reference_info",
                                                 "traffic", "package_info", "confirm", "match"};
  return names;
}

const std::string& to_string(Method m) { return method_names().at(static_cast<size_t>(m)); }

const std::vector<std::string>& status_names() {
  static const std::vector<std::string> names = {"ok",    "compile_error", "resource_error", "incorrect",
                                                 "crash", "rejected",      "timeout"};
  return names;
}

const std::string& to_string(EvalStatus s) { return status_names().at(static_cast<size_t>(s)); }

std::optional<EvalStatus> parse_status(std::string_view name) {
  const auto& names = status_names();
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return static_cast<EvalStatus>(it - names.begin());
}

Traffic Traffic::from_json(const json& j) {
  Traffic t;
  if (!j.is_object()) return t;
  if (auto b = j.find("bytes"); b != j.end() && b->is_number()) t.bytes = b->get<double>();
  if (auto f = j.find("flops"); f != j.end() && f->is_number()) t.flops = f->get<double>();
  return t;
}

namespace {

// Reads members of one object by name; with `seen`, also notes each member it
// was asked for (its path and expected type), so that the list the schema test
// checks is the list this code reads.
class Reader {
 public:
  Reader(const json& obj, std::string prefix, std::vector<std::pair<std::string, std::string>>* seen)
      : obj_(obj), prefix_(std::move(prefix)), seen_(seen) {}

  std::optional<double> number(const char* key) const {
    const json* p = member(key, "number");
    if (!p || !p->is_number()) return std::nullopt;
    return p->get<double>();
  }
  std::optional<long long> integer(const char* key) const {
    const json* p = member(key, "integer");
    if (!p || !p->is_number()) return std::nullopt;
    if (p->is_number_float()) {
      const double d = p->get<double>();
      if (!(d >= -9.2e18 && d <= 9.2e18)) return std::nullopt;
      return static_cast<long long>(d);
    }
    return p->get<long long>();
  }
  std::optional<std::string> string(const char* key) const {
    const json* p = member(key, "string");
    if (!p || !p->is_string()) return std::nullopt;
    return p->get<std::string>();
  }
  std::optional<bool> boolean(const char* key) const {
    const json* p = member(key, "boolean");
    if (!p || !p->is_boolean()) return std::nullopt;
    return p->get<bool>();
  }
  const json* array(const char* key) const {
    const json* p = member(key, "array");
    return p && p->is_array() ? p : nullptr;
  }
  // A member that is an object of numbers, as a map (members of another type
  // are skipped; absent or not an object: empty).
  std::map<std::string, double> numbers(const char* key) const {
    std::map<std::string, double> out;
    const json* p = member(key, "object");
    if (p && p->is_object())
      for (const auto& [k, v] : p->items())
        if (v.is_number()) out[k] = v.get<double>();
    return out;
  }
  // Reads each (key, field) pair in turn, the member's expected type taken
  // from the field's: fields("runs", k.runs, "mean_ms", k.mean_ms).
  template <class T, class... Rest>
  void fields(const char* key, std::optional<T>& field, Rest&&... rest) const {
    field = get(key, field);
    if constexpr (sizeof...(rest) > 0) fields(std::forward<Rest>(rest)...);
  }
  // A member that is an object (absent, null or another type: nullopt).
  std::optional<Reader> object(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || !it->is_object()) return std::nullopt;
    return Reader(*it, prefix_ + key + ".", seen_);
  }

 private:
  std::optional<double> get(const char* key, const std::optional<double>&) const { return number(key); }
  std::optional<long long> get(const char* key, const std::optional<long long>&) const { return integer(key); }
  std::optional<std::string> get(const char* key, const std::optional<std::string>&) const { return string(key); }
  std::optional<bool> get(const char* key, const std::optional<bool>&) const { return boolean(key); }
  const json* member(const char* key, const char* type) const {
    if (seen_) seen_->emplace_back(prefix_ + key, type);
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  const json& obj_;
  std::string prefix_;
  std::vector<std::pair<std::string, std::string>>* seen_;
};

Latency read_latency_members(const Reader& l) {
  Latency k;
  l.fields("device", k.device, "runs", k.runs, "mean_ms", k.mean_ms, "median_ms", k.median_ms, "p99_ms", k.p99_ms,
           "min_ms", k.min_ms, "max_ms", k.max_ms, "stddev_ms", k.stddev_ms, "kernel_s", k.kernel_s);
  return k;
}

EvaluationResult read(const json& top, std::vector<std::pair<std::string, std::string>>* seen) {
  EvaluationResult out;
  const json* rp = &top;
  if (top.is_object() && top.contains("ok") && top.contains("result") && top["result"].is_object())
    rp = &top["result"];
  static const json empty = json::object();
  const json& r = rp->is_object() ? *rp : empty;
  out.raw = r;
  const Reader in(r, "", seen);
  if (auto s = in.string("status"))
    if (auto st = parse_status(*s)) out.status = *st;
  out.message = in.string("message").value_or("");
  out.exec_device = in.string("exec_device");
  if (auto c = in.object("correctness")) {
    Correctness k;
    c->fields("seeds", k.seeds, "max_abs_err", k.max_abs_err, "max_rel_err", k.max_rel_err, "passed", k.passed);
    out.correctness = k;
  }
  if (auto l = in.object("latency")) out.latency = read_latency_members(*l);
  if (auto a = in.object("artifact")) {
    ArtifactInfo k;
    a->fields("path", k.path);
    k.sha256 = a->string("sha256").value_or("");
    k.kind = a->string("kind").value_or("");
    k.kernel_name = a->string("kernel_name").value_or("");
    a->fields("num_warps", k.num_warps, "warp_size", k.warp_size, "registers", k.registers, "sgprs", k.sgprs,
              "spills", k.spills, "shared_bytes", k.shared_bytes, "scratch_bytes", k.scratch_bytes,
              "size_bytes", k.size_bytes, "occupancy", k.occupancy);
    if (const json* g = a->array("grid"))
      for (const auto& v : *g)
        if (v.is_number()) k.grid.push_back(v.get<long long>());
    k.object = r["artifact"];
    out.artifact = std::move(k);
  }
  if (auto t = in.object("traffic")) {
    Traffic k;
    k.bytes = t->number("bytes").value_or(0);
    k.flops = t->number("flops").value_or(0);
    out.traffic = k;
  }
  if (auto t = in.object("timings")) {
    Timings& k = out.timings;
    t->fields("compile_s", k.compile_s, "check_s", k.check_s, "bench_s", k.bench_s, "setup_s", k.setup_s,
              "preload_s", k.preload_s, "gpu_s", k.gpu_s, "kernel_s", k.kernel_s);
    t->fields("module_s", k.module_s, "plan_s", k.plan_s, "inputs_s", k.inputs_s, "reference_s", k.reference_s,
              "setup_wait_s", k.setup_wait_s, "setup_warm_wait_s", k.setup_warm_wait_s, "memory_wait_s",
              k.memory_wait_s, "util_s", k.util_s, "worker_s", k.worker_s);
    k.lock_wait_s = t->numbers("lock_wait_s");
    if (auto w = t->object("warm_up")) {
      WarmUpTimings u;
      w->fields("context_s", u.context_s, "compile_s", u.compile_s, "kernels_s", u.kernels_s, "wait_s", u.wait_s,
                "compile_wait_s", u.compile_wait_s);
      k.warm_up = u;
    }
    if (auto i = t->object("plan_import")) {
      PlanImportTimings u;
      i->fields("import_s", u.import_s, "wait_s", u.wait_s);
      k.plan_import = u;
    }
    if (const json* spans = t->array("gpu_spans"))
      for (const auto& s : *spans) {
        // [start, end, kind]: a span of another shape is skipped
        if (!s.is_array() || s.size() < 2 || !s[0].is_number() || !s[1].is_number()) continue;
        GpuSpan g;
        g.start = s[0].get<double>();
        g.end = s[1].get<double>();
        if (s.size() > 2 && s[2].is_string()) g.kind = s[2].get<std::string>();
        k.gpu_spans.push_back(std::move(g));
      }
    if (const json* us = t->array("util_samples"))
      for (const auto& u : *us)  // [seconds, percent]: a sample of another shape is skipped
        if (u.is_array() && u.size() == 2 && u[0].is_number() && u[1].is_number())
          k.util_samples.emplace_back(u[0].get<double>(), u[1].get<double>());
  }
  return out;
}

}  // namespace

EvaluationResult read_evaluation_result(const json& result) { return read(result, nullptr); }

std::optional<Latency> read_latency(const json& latency) {
  if (!latency.is_object()) return std::nullopt;
  return read_latency_members(Reader(latency, "latency.", nullptr));
}

const std::vector<std::pair<std::string, std::string>>& evaluation_result_fields() {
  static const std::vector<std::pair<std::string, std::string>> fields = [] {
    std::vector<std::pair<std::string, std::string>> seen;
    const json all = {{"correctness", json::object()}, {"latency", json::object()}, {"artifact", json::object()},
                      {"traffic", json::object()},
                      {"timings", {{"warm_up", json::object()}, {"plan_import", json::object()}}}};
    read(all, &seen);
    return seen;
  }();
  return fields;
}

}  // namespace kiln
