#include "catalog/merge_check.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "catalog/job_key.h"
#include "common/hash.h"

namespace kiln::merge_check {

namespace {

using nlohmann::json;

constexpr long long kKiB = 1024, kMiB = 1024 * kKiB;
constexpr double kMaxTime = 1e11;          // unix seconds (year 5138)
constexpr double kMaxMs = 1e9;             // a latency or estimate, ms (11 days)
constexpr double kMaxSeconds = 1e7;        // a compile/check/bench time, s
constexpr long long kMaxCount = 1LL << 40; // counts, sizes in bytes, ids
constexpr long long kMaxShapeDim = 1LL << 40;

enum class Kind {
  kId,        // integer >= 1
  kName,      // a name that may become part of a file path
  kHex,       // lowercase hexadecimal (keys, checksums, batch ids)
  kEnum,      // one of `values`
  kText,      // text of at most max_bytes, no NUL
  kJson,      // JSON text of at most max_bytes, of `json_kind`
  kReal,      // finite number in [lo, hi]
  kInt,       // integer in [lo, hi]
  kBlob,      // a blob (or text) of at most max_bytes
};

enum class JsonKind { kAny, kObject, kArray, kShape };

struct Rule {
  Kind kind = Kind::kText;
  bool nullable = false;
  long long max_bytes = 4 * kKiB;
  double lo = 0, hi = 0;
  std::vector<std::string> values;
  JsonKind json_kind = JsonKind::kAny;
  size_t hex_len = 0;                     // 0: any length from 1 to 64
};

Rule make(Kind kind, bool nullable, long long max_bytes = 4 * kKiB) {
  Rule r;
  r.kind = kind;
  r.nullable = nullable;
  r.max_bytes = max_bytes;
  return r;
}
Rule id(bool nullable = false) { return make(Kind::kId, nullable); }
Rule name(bool nullable = false) { return make(Kind::kName, nullable, 128); }
Rule hex(size_t len = 0) {
  Rule r = make(Kind::kHex, false);
  r.hex_len = len;
  return r;
}
Rule one_of(std::initializer_list<const char*> v, bool nullable = false) {
  Rule r = make(Kind::kEnum, nullable);
  for (const char* s : v) r.values.emplace_back(s);
  return r;
}
Rule text(long long max_bytes, bool nullable = false) { return make(Kind::kText, nullable, max_bytes); }
Rule js(JsonKind k, long long max_bytes, bool nullable = false) {
  Rule r = make(Kind::kJson, nullable, max_bytes);
  r.json_kind = k;
  return r;
}
Rule real(double lo, double hi, bool nullable = false) {
  Rule r = make(Kind::kReal, nullable);
  r.lo = lo;
  r.hi = hi;
  return r;
}
Rule integer(double lo, double hi, bool nullable = false) {
  Rule r = make(Kind::kInt, nullable);
  r.lo = lo;
  r.hi = hi;
  return r;
}
Rule time(bool nullable = false) { return real(0, kMaxTime, nullable); }
Rule ms(bool nullable = true) { return real(0, kMaxMs, nullable); }
Rule seconds(bool nullable = true) { return real(0, kMaxSeconds, nullable); }
Rule count(bool nullable = true) { return integer(0, static_cast<double>(kMaxCount), nullable); }
Rule blob(long long max_bytes) { return make(Kind::kBlob, false, max_bytes); }

using Rules = std::map<std::string, Rule>;

// The columns of every table kiln merge copies, as the engine writes them
// (db/migrations; docs/catalog.md).
const std::map<std::string, Rules>& rules() {
  static const std::map<std::string, Rules> r = {
      {"batches",
       {{"id", hex()},
        {"name", text(4 * kKiB)},
        {"manifest_path", text(4 * kKiB)},
        {"manifest_sha256", hex(64)},
        {"manifest_text", text(16 * kMiB)},
        {"created_at", time()}}},
      {"jobs",
       {{"id", id()},
        {"key", hex(64)},
        {"op", name()},
        {"shape", js(JsonKind::kShape, 4 * kKiB)},
        {"dtype", name()},
        {"params", js(JsonKind::kObject, 1 * kMiB)},
        {"target", name()},
        {"arch", name()},
        {"spec", js(JsonKind::kObject, 16 * kMiB)},
        {"state", one_of({"queued", "running", "done", "failed"})},
        {"lease_owner", text(1 * kKiB, true)},
        {"lease_expires", time(true)},
        {"attempts", integer(0, 1e9)},
        {"message", text(16 * kMiB, true)},
        {"created_at", time()},
        {"started_at", time(true)},
        {"finished_at", time(true)},
        {"priority", real(0, 1e15)},
        {"compile_est_s", real(0, 1e15)}}},
      {"batch_jobs", {{"batch_id", hex()}, {"job_id", id()}}},
      {"candidates",
       {{"id", id()},
        {"job_id", id()},
        {"key", hex(64)},
        {"generator", one_of({"template", "llm"})},
        {"template", name(true)},
        {"config", js(JsonKind::kObject, 1 * kMiB)},
        {"source", text(16 * kMiB, true)},
        {"parent_id", id(true)},
        {"round", integer(0, 1e9)},
        {"instance", integer(0, 1e9)},
        {"created_at", time()}}},
      {"evaluations",
       {{"id", id()},
        {"candidate_id", id()},
        {"status", one_of({"ok", "compile_error", "resource_error", "incorrect", "timeout", "crash", "rejected"})},
        {"message", text(16 * kMiB, true)},
        {"exec_device", text(1 * kKiB, true)},
        {"seeds", count()},
        {"max_abs_err", real(0, INFINITY, true)},
        {"max_rel_err", real(0, INFINITY, true)},
        {"bench_device", text(1 * kKiB, true)},
        {"runs", count()},
        {"mean_ms", ms()},
        {"median_ms", ms()},
        {"p99_ms", ms()},
        {"min_ms", ms()},
        {"stddev_ms", ms()},
        {"estimate_ms", ms()},
        {"registers", count()},
        {"sgprs", count()},
        {"spills", count()},
        {"shared_bytes", count()},
        {"scratch_bytes", count()},
        {"occupancy", real(0, 1e6, true)},
        {"compile_s", seconds()},
        {"check_s", seconds()},
        {"bench_s", seconds()},
        {"worker", text(1 * kKiB, true)},
        {"result", js(JsonKind::kAny, 16 * kMiB)},
        {"created_at", time()}}},
      {"blobs", {{"sha256", hex(64)}, {"size", count(false)}, {"data", blob(512 * kMiB)}}},
      {"artifacts",
       {{"id", id()},
        {"candidate_id", id()},
        {"target", name()},
        {"arch", name()},
        {"kind", one_of({"hsaco", "cubin"})},
        {"sha256", hex(64)},
        {"kernel_name", name()},
        {"metadata", js(JsonKind::kObject, 16 * kMiB)}}},
      {"best",
       {{"job_id", id()},
        {"candidate_id", id()},
        {"basis", one_of({"measured", "estimated"})},
        {"value_ms", ms(false)},
        {"device", text(1 * kKiB, true)},
        {"selected_at", time()},
        {"confirmed_run", text(256, true)},
        {"confirmed_ms", ms()}}},
      {"llm_calls",
       {{"id", id()},
        {"candidate_id", id(true)},
        {"job_id", id()},
        {"instance", integer(0, 1e9)},
        {"round", integer(0, 1e9)},
        {"parent_id", id(true)},
        {"model", text(1 * kKiB, true)},
        {"url", text(4 * kKiB, true)},
        {"temperature", real(0, 100, true)},
        {"seed", integer(-9.2e18, 9.2e18, true)},
        {"prompt", js(JsonKind::kArray, 16 * kMiB)},
        {"response", text(16 * kMiB, true)},
        {"prompt_tokens", count()},
        {"completion_tokens", count()},
        {"latency_s", seconds()},
        {"attempts", integer(0, 1e6)},
        {"status", one_of({"ok", "error", "skipped"})},
        {"error", text(16 * kMiB, true)},
        {"retrieval", js(JsonKind::kAny, 16 * kMiB, true)},
        {"created_at", time()}}},
      {"confirmations",
       {{"id", id()},
        {"job_id", id()},
        {"candidate_id", id(true)},
        {"baseline", one_of({"eager", "compile"}, true)},
        {"run_id", text(256)},
        {"basis", one_of({"device", "cpu"})},
        {"device", text(1 * kKiB)},
        {"samples", blob(64 * kMiB)},
        {"n", count(false)},
        {"median_ms", ms(false)},
        {"conditions", js(JsonKind::kObject, 16 * kMiB)},
        {"created_at", time()}}},
      {"imported_measurements",
       {{"id", id()},
        {"job_id", id()},
        {"candidate_id", id()},
        {"target", name()},
        {"device", text(1 * kKiB)},
        {"driver", text(1 * kKiB, true)},
        {"uuid", text(256, true)},
        {"versions", js(JsonKind::kAny, 1 * kMiB)},
        {"median_ms", ms(false)},
        {"samples", js(JsonKind::kArray, 64 * kMiB)},
        {"source", text(4 * kKiB)},
        {"imported_at", time()}}},
      {"retries",
       {{"id", id()},
        {"job_id", id()},
        {"retried_at", time()},
        {"attempts", integer(0, 1e9)},
        {"message", text(16 * kMiB, true)},
        {"forgotten", js(JsonKind::kArray, 64 * kMiB)}}},
  };
  return r;
}

// A name that may become a file name (packages, kernels/<template>.py): 1-128
// of [A-Za-z0-9_.:+-], not starting with '.' or '-', no "..".
std::optional<std::string> bad_name(const std::string& s) {
  if (s.empty()) return "is empty";
  if (s.size() > 128) return "is longer than 128 bytes";
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '+' || c == '-'))
      return "contains '" + excerpt(std::string(1, static_cast<char>(c))) +
             "' (a name may hold letters, digits and _ . : + - only: it can become part of a file path)";
  if (s[0] == '.' || s[0] == '-') return "starts with '" + std::string(1, s[0]) + "'";
  if (s.find("..") != std::string::npos) return "contains \"..\"";
  return std::nullopt;
}

std::optional<std::string> bad_json(const json& j, JsonKind kind) {
  switch (kind) {
    case JsonKind::kAny: return std::nullopt;
    case JsonKind::kObject: return j.is_object() ? std::nullopt : std::optional<std::string>("is not a JSON object");
    case JsonKind::kArray: return j.is_array() ? std::nullopt : std::optional<std::string>("is not a JSON array");
    case JsonKind::kShape:
      if (!j.is_array() || j.empty() || j.size() > 8) return "is not a shape (a list of 1 to 8 sizes)";
      for (const json& d : j)
        if (!d.is_number_integer() || d.get<long long>() < 1 || d.get<long long>() > kMaxShapeDim)
          return "is not a shape (sizes are integers from 1 to 2^40)";
      return std::nullopt;
  }
  return std::nullopt;
}

const char* type_name(int t) {
  switch (t) {
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "a blob";
    default: return "NULL";
  }
}

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The problem with one value, or nullopt.
std::optional<std::string> check_value(const Rule& r, const sql::Stmt& row, int i) {
  const int t = row.type(i);
  if (t == SQLITE_NULL) return r.nullable ? std::nullopt : std::optional<std::string>("is NULL");
  auto want = [&](const char* what) { return std::string("is ") + type_name(t) + ", not " + what; };
  switch (r.kind) {
    case Kind::kId:
      if (t != SQLITE_INTEGER) return want("an integer id");
      if (row.i64(i) < 1) return "is " + std::to_string(row.i64(i)) + ", not an id (>= 1)";
      return std::nullopt;
    case Kind::kInt: {
      if (t != SQLITE_INTEGER) return want("an integer");
      const long long v = row.i64(i);
      if (static_cast<double>(v) < r.lo || static_cast<double>(v) > r.hi)
        return "is " + std::to_string(v) + ", outside [" + number_text(r.lo) + ", " + number_text(r.hi) + "]";
      return std::nullopt;
    }
    case Kind::kReal: {
      if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) return want("a number");
      const double v = row.dbl(i);
      if (std::isnan(v)) return std::string("is NaN");
      if (std::isinf(v) && !std::isinf(r.hi)) return "is " + number_text(v) + ", not finite";
      if (v < r.lo || v > r.hi)
        return "is " + number_text(v) + ", outside [" + number_text(r.lo) + ", " + number_text(r.hi) + "]";
      return std::nullopt;
    }
    case Kind::kBlob:
      if (t != SQLITE_BLOB && t != SQLITE_TEXT) return want("a blob");
      if (row.bytes(i) > r.max_bytes)
        return "holds " + std::to_string(row.bytes(i)) + " bytes, more than " + std::to_string(r.max_bytes);
      return std::nullopt;
    default: break;
  }
  // Text kinds.
  if (t != SQLITE_TEXT) return want("text");
  if (row.bytes(i) > r.max_bytes)
    return "holds " + std::to_string(row.bytes(i)) + " bytes, more than " + std::to_string(r.max_bytes);
  const std::string s = row.text(i);
  if (s.find('\0') != std::string::npos) return std::string("contains a NUL byte");
  switch (r.kind) {
    case Kind::kName:
      if (auto why = bad_name(s)) return "'" + excerpt(s) + "' " + *why;
      return std::nullopt;
    case Kind::kHex: {
      const bool hex_ok = !s.empty() && s.size() <= 64 && (r.hex_len == 0 || s.size() == r.hex_len) &&
                          std::all_of(s.begin(), s.end(), [](char c) {
                            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                          });
      if (!hex_ok)
        return "'" + excerpt(s) + "' is not " +
               (r.hex_len ? std::to_string(r.hex_len) + " lowercase hex digits" : std::string("lowercase hex"));
      return std::nullopt;
    }
    case Kind::kEnum:
      if (std::find(r.values.begin(), r.values.end(), s) == r.values.end()) {
        std::string list;
        for (const auto& v : r.values) list += (list.empty() ? "" : ", ") + v;
        return "'" + excerpt(s) + "' is not one of " + list;
      }
      return std::nullopt;
    case Kind::kJson: {
      const json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return "'" + excerpt(s) + "' is not JSON";
      if (auto why = bad_json(j, r.json_kind)) return "'" + excerpt(s) + "' " + *why;
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

}  // namespace

std::string excerpt(const std::string& s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out.size() >= max && s.size() > max) out += "...";
  return out;
}

void check_row(const std::string& table, const std::vector<std::string>& cols, const sql::Stmt& row, int at,
               long long rowid) {
  const std::string where = table + " row " + std::to_string(rowid);
  auto refuse = [&](const std::string& col, const std::string& why) {
    throw CatalogError(where + ": " + col + " " + why);
  };
  const auto table_rules = rules().find(table);
  for (size_t k = 0; k < cols.size(); ++k) {
    const int i = at + static_cast<int>(k);
    const Rule* rule = nullptr;
    if (table_rules != rules().end())
      if (auto it = table_rules->second.find(cols[k]); it != table_rules->second.end()) rule = &it->second;
    if (!rule) {  // a column of a newer schema: only bounded
      if (row.bytes(i) > 16 * kMiB) refuse(cols[k], "holds more than 16 MiB");
      continue;
    }
    if (auto why = check_value(*rule, row, i)) refuse(cols[k], *why);
  }

  // Relations between the columns of the row.
  auto col = [&](const char* name) -> int {
    auto it = std::find(cols.begin(), cols.end(), name);
    return it == cols.end() ? -1 : at + static_cast<int>(it - cols.begin());
  };
  if (table == "blobs") {
    const int c_sha = col("sha256"), c_size = col("size"), c_data = col("data");
    if (c_sha >= 0 && c_data >= 0 && sha256_hex(row.blob(c_data)) != row.text(c_sha))
      refuse("sha256", "'" + excerpt(row.text(c_sha)) + "' is not the checksum of its data");
    if (c_size >= 0 && c_data >= 0 && row.i64(c_size) != row.bytes(c_data))
      refuse("size", "is " + std::to_string(row.i64(c_size)) + " but the data holds " +
                         std::to_string(row.bytes(c_data)) + " bytes");
  } else if (table == "candidates") {
    const int c_key = col("key"), c_gen = col("generator"), c_tpl = col("template"), c_cfg = col("config"),
              c_src = col("source");
    if (c_key >= 0 && c_gen >= 0 && c_cfg >= 0) {
      const std::string generator = row.text(c_gen), tpl = c_tpl >= 0 ? row.text(c_tpl) : "";
      const json config = json::parse(row.text(c_cfg));
      const std::optional<std::string> source = c_src >= 0 ? row.opt_text(c_src) : std::nullopt;
      // Either way the engine computes a candidate's key: the catalog's default
      // (candidate_key) or the explorer's (generator, template, config, source lines).
      std::string lines = generator + "\n" + tpl + "\n" + canonical_json(config);
      if (source) lines += "\n" + *source;
      const std::string key = row.text(c_key);
      // A config the explorer proposed as null is stored as {}.
      const bool empty_config = config.is_object() && config.empty();
      std::string null_lines = generator + "\n" + tpl + "\nnull";
      if (source) null_lines += "\n" + *source;
      if (key != candidate_key(generator, tpl, config, source) && key != sha256_hex(lines) &&
          !(empty_config && (key == candidate_key(generator, tpl, json(), source) || key == sha256_hex(null_lines))))
        refuse("key", "'" + excerpt(key) + "' is not the key of its generator, template, config and source");
    }
  } else if (table == "jobs") {
    const int c_spec = col("spec");
    if (c_spec < 0) return;
    const json spec = json::parse(row.text(c_spec));
    auto agree = [&](const char* column, const json& in_spec) {
      const int c = col(column);
      if (c < 0) return;
      const json mine = (std::string(column) == "shape" || std::string(column) == "params")
                            ? json::parse(row.text(c))
                            : json(row.text(c));
      if (mine != in_spec)
        refuse(column, "'" + excerpt(row.text(c)) + "' is not what its spec says ('" + excerpt(in_spec.dump()) + "')");
    };
    for (const char* k : {"op", "shape", "dtype", "params"})
      if (spec.contains(k)) agree(k, spec[k]);
    if (spec.contains("target") && spec["target"].is_object()) {
      const json& t = spec["target"];
      if (t.contains("name")) agree("target", t["name"]);
      if (t.contains("arch")) agree("arch", t["arch"]);
    }
  } else if (table == "confirmations") {
    const int c_samples = col("samples"), c_n = col("n"), c_cand = col("candidate_id"), c_base = col("baseline");
    if (c_samples >= 0 && row.bytes(c_samples) % 4 != 0)
      refuse("samples", "holds " + std::to_string(row.bytes(c_samples)) + " bytes, not float32 values");
    if (c_samples >= 0 && c_n >= 0 && row.i64(c_n) * 4 != row.bytes(c_samples))
      refuse("n", "is " + std::to_string(row.i64(c_n)) + " but samples holds " +
                      std::to_string(row.bytes(c_samples) / 4) + " values");
    if (c_cand >= 0 && c_base >= 0 && row.is_null(c_cand) == row.is_null(c_base))
      refuse("candidate_id", "and baseline: exactly one must be set");
  }
}

}  // namespace kiln::merge_check
