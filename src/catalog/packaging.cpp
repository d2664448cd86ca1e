#include "catalog/packaging.h"

#include "stats/stats.h"


#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <map>
#include <set>

#include "catalog/sql.h"
#include "common/hash.h"

namespace kiln {

namespace {

using nlohmann::json;

using sql::Stmt;

bool has_table(const Catalog& c, const std::string& name) {
  return sql::has_table(sql::Access::db(c), c.path(), name);
}

std::set<std::string> columns(const Catalog& c, const std::string& table) {
  const auto cols = sql::table_columns(sql::Access::db(c), c.path(), table);
  return {cols.begin(), cols.end()};
}

PackageCandidate candidate_from(const Stmt& q, int at, const Catalog& c) {
  PackageCandidate pc;
  q.into(at, pc.candidate_id, sql::Strict{pc.config}, pc.kind, pc.sha256, pc.kernel_name, sql::Strict{pc.metadata});
  pc.bytes = q.blob(at + 6);
  pc.estimate_ms = q.opt_dbl(at + 7);
  if (sha256_hex(pc.bytes) != pc.sha256)
    throw CatalogError("catalog " + c.path().string() + ": code object " + pc.sha256 +
                       " does not match its checksum (a corrupt catalog: kiln query \"PRAGMA integrity_check\")");
  return pc;
}

}  // namespace

nlohmann::json confirmed_summary(double median_ms, const std::string& samples_f32le, size_t rounds) {
  std::vector<double> x;
  for (size_t i = 0; i + 4 <= samples_f32le.size(); i += 4) {
    float f;
    std::memcpy(&f, samples_f32le.data() + i, 4);  // little-endian hosts (x86-64, aarch64)
    if (std::isfinite(f)) x.push_back(f);
  }
  const long long n = static_cast<long long>(x.size());
  json out = {{"median_ms", median_ms}, {"ci_low_ms", nullptr}, {"ci_high_ms", nullptr}, {"runs", n}};
  if (n >= 6) {
    // The interval `kiln best` shows: the percentile bootstrap of the median
    // over the rounds and their samples (src/stats, fixed seed), so the
    // package and the catalog agree.
    const stats::Interval ci = stats::bootstrap_median_ci_rounds(x, rounds);
    out["ci_low_ms"] = ci.lo;
    out["ci_high_ms"] = ci.hi;
  }
  return out;
}

std::optional<long long> confirmed_flush_bytes(const json& c) {
  if (!c.is_object() || !c.contains("l2_flush_bytes")) return std::nullopt;
  const json& v = c.at("l2_flush_bytes");
  if (!v.is_number_integer() || v.get<long long>() <= 0) return std::nullopt;
  return v.get<long long>();
}

std::optional<double> confirmed_sm_clock_mhz(const json& c) {
  if (!c.is_object() || !c.contains("rounds") || !c.at("rounds").is_array()) return std::nullopt;
  std::vector<double> mhz;
  for (const json& r : c.at("rounds")) {
    if (!r.is_object()) continue;
    for (const char* at : {"start", "end"}) {
      if (!r.contains(at) || !r.at(at).is_object() || !r.at(at).contains("sm_clock_mhz")) continue;
      const json& v = r.at(at).at("sm_clock_mhz");
      if (v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>())) mhz.push_back(v.get<double>());
    }
  }
  if (mhz.empty()) return std::nullopt;
  return stats::median(std::move(mhz));
}

std::optional<bool> confirmed_power_limited(const json& c) {
  if (!c.is_object() || !c.contains("sustained") || !c.at("sustained").is_object()) return std::nullopt;
  const json& s = c.at("sustained");
  if (!s.contains("power_limited") || !s.at("power_limited").is_boolean()) return std::nullopt;
  return s.at("power_limited").get<bool>();
}

namespace {

constexpr const char* kCandidateCols =
    "c.id, c.config, a.kind, a.sha256, a.kernel_name, a.metadata, bl.data, e.estimate_ms";

}  // namespace

std::vector<PackageJob> package_jobs(const Catalog& catalog, const std::string& target, int shortlist_max,
                                     const std::optional<std::vector<long long>>& only_jobs) {
  const bool imported = has_table(catalog, "imported_measurements");
  // The confirmation round (its migration: table confirmations, best.confirmed_run):
  // read where this catalog has it.
  bool confirmations = false;
  if (has_table(catalog, "confirmations")) {
    const auto cols = columns(catalog, "confirmations");
    const auto best_cols = columns(catalog, "best");
    confirmations = cols.count("candidate_id") && cols.count("run_id") && cols.count("samples") &&
                    cols.count("median_ms") && cols.count("basis") && best_cols.count("confirmed_run");
  }
  Stmt q(catalog, std::string("SELECT j.id, j.key, j.op, j.shape, j.dtype, j.params, j.spec, j.target, j.arch, "
                           "b.basis, b.value_ms, b.device, ") +
                   kCandidateCols + ", e.result "
                   "FROM best b JOIN jobs j ON j.id = b.job_id JOIN candidates c ON c.id = b.candidate_id "
                   "JOIN artifacts a ON a.candidate_id = c.id AND a.target = j.target "
                   "JOIN blobs bl ON bl.sha256 = a.sha256 "
                   "LEFT JOIN evaluations e ON e.candidate_id = c.id "
                   "WHERE j.target = ?1 AND j.state = 'done' " +
                   std::string(only_jobs ? "AND j.id IN (SELECT value FROM json_each(?2)) " : "") +
                   "ORDER BY j.op, j.id",
         "packaging: the best kernels of target " + target);
  q.bind(1, target);
  if (only_jobs) q.bind(2, json(*only_jobs).dump());
  std::vector<PackageJob> jobs;
  while (q.step()) {
    PackageJob j;
    q.into(0, j.job_id, j.key, j.op, sql::Strict{j.shape}, j.dtype, sql::Strict{j.params}, sql::Strict{j.spec}, j.target,
           j.arch, j.basis, j.value_ms, j.device);  // device: "" for NULL
    j.candidates.push_back(candidate_from(q, 12, catalog));
    const json result = q.js_strict(20);
    if (j.basis == "measured") {
      j.measured_on = {{"device", j.device}, {"driver", nullptr}, {"uuid", nullptr}};
      if (result.is_object() && result.contains("latency") && result["latency"].is_object()) {
        // the worker reports them in latency.device_identity (bench.device_identity)
        const json& l = result["latency"];
        const json& id = l.contains("device_identity") && l["device_identity"].is_object() ? l["device_identity"] : l;
        for (const char* k : {"driver", "uuid"})
          if (id.contains(k) && id[k].is_string()) j.measured_on[k] = id[k];
      }
    }
    jobs.push_back(std::move(j));
  }
  for (PackageJob& j : jobs) {
    const long long best = j.candidates[0].candidate_id;
    if (j.basis == "measured" && imported) {
      Stmt m(catalog, "SELECT driver, uuid FROM imported_measurements WHERE candidate_id = ?1 AND device = ?2");
      m.bind(1, best).bind(2, j.device);
      if (m.step()) {
        if (!m.is_null(0)) j.measured_on["driver"] = m.text(0);
        if (!m.is_null(1)) j.measured_on["uuid"] = m.text(1);
      }
    }
    if (confirmations) {
      Stmt cq(catalog, "SELECT c.median_ms, c.samples, c.conditions FROM best b JOIN confirmations c "
                    "ON c.run_id = b.confirmed_run AND c.candidate_id = b.candidate_id "
                    "WHERE b.job_id = ?1 AND c.candidate_id = ?2 AND c.basis = 'device' LIMIT 1");
      cq.bind(1, j.job_id).bind(2, best);
      if (cq.step()) {
        const json conditions = json::parse(cq.text(2), nullptr, /*allow_exceptions=*/false);  // once, for all four
        j.confirmed = confirmed_summary(cq.dbl(0), cq.blob(1), confirmation_rounds(conditions));
        if (auto fb = confirmed_flush_bytes(conditions)) j.confirmed["flush_bytes"] = *fb;
        if (auto mhz = confirmed_sm_clock_mhz(conditions)) j.confirmed["sm_clock_mhz"] = *mhz;
        if (auto pl = confirmed_power_limited(conditions)) j.confirmed["power_limited"] = *pl;
      }
    }
    const std::optional<double> best_est = j.candidates[0].estimate_ms;
    if (j.basis != "estimated" || shortlist_max <= 1 || !best_est || *best_est <= 0) continue;
    Stmt s(catalog, std::string("SELECT ") + kCandidateCols +
                     " FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
                     "JOIN jobs j ON j.id = c.job_id "
                     "JOIN artifacts a ON a.candidate_id = c.id AND a.target = j.target "
                     "JOIN blobs bl ON bl.sha256 = a.sha256 "
                     "WHERE c.job_id = ?1 AND c.id != ?2 AND e.status = 'ok' AND e.estimate_ms IS NOT NULL "
                     "ORDER BY e.estimate_ms, c.id LIMIT ?3");
    s.binds(1, j.job_id, best, (long long)(shortlist_max - 1));
    while (s.step()) j.candidates.push_back(candidate_from(s, 0, catalog));
  }
  return jobs;
}

ImportStats import_measurements(Catalog& catalog, const MeasurementsIn& in) {
  if (!has_table(catalog, "imported_measurements"))
    throw CatalogError("catalog " + catalog.path().string() + " has no imported_measurements table (open it "
                       "read-write once so it is migrated)");
  sql::Tx tx(catalog);
  {
    ImportStats st;
    std::set<long long> touched;
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (size_t i = 0; i < in.kernels.size(); ++i) {
      const ImportedKernel& k = in.kernels[i];
      const std::string which = "kernels[" + std::to_string(i) + "] (job_key " + k.job_key + ")";
      // A package's kernel carries one job key for all its targets (the first
      // target's job): the candidate names the job it was timed for, which must
      // be the same kernel instance (operator, shape, dtype, params).
      Stmt j(catalog, "SELECT op, shape, dtype, params FROM jobs WHERE key = ?1");
      j.bind(1, k.job_key);
      if (!j.step()) throw CatalogError(which + ": no such job in catalog " + catalog.path().string());
      Stmt c(catalog, "SELECT c.job_id, jc.target, jc.op, jc.shape, jc.dtype, jc.params, e.status FROM candidates c "
                   "JOIN jobs jc ON jc.id = c.job_id LEFT JOIN evaluations e ON e.candidate_id = c.id WHERE c.id = ?1");
      c.bind(1, k.candidate_id);
      if (!c.step())
        throw CatalogError(which + ": candidate " + std::to_string(k.candidate_id) + " is not in the catalog");
      const long long job_id = c.i64(0);
      const std::string target = c.text(1);
      if (c.text(2) != j.text(0) || c.js_strict(3) != j.js_strict(1) || c.text(4) != j.text(2) || c.js_strict(5) != j.js_strict(3))
        throw CatalogError(which + ": candidate " + std::to_string(k.candidate_id) + " is one of another kernel's (" +
                           c.text(2) + " " + c.text(3) + " " + c.text(4) + "), not the job's");
      if (!k.targets.empty() && std::find(k.targets.begin(), k.targets.end(), target) == k.targets.end())
        throw CatalogError(which + ": candidate " + std::to_string(k.candidate_id) + " was tuned for " + target +
                           ", not for the file's target (" + k.target_text + ")");
      if (c.is_null(6) || c.text(6) != "ok")
        throw CatalogError(which + ": candidate " + std::to_string(k.candidate_id) +
                           " was not verified correct (status " + (c.is_null(6) ? "none" : c.text(6)) + ")");
      Stmt ins(catalog, "INSERT INTO imported_measurements (job_id, candidate_id, target, device, driver, uuid, "
                     "versions, median_ms, samples, source, imported_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) "
                     "ON CONFLICT (candidate_id, device) DO UPDATE SET driver = excluded.driver, "
                     "uuid = excluded.uuid, versions = excluded.versions, median_ms = excluded.median_ms, "
                     "samples = excluded.samples, source = excluded.source, imported_at = excluded.imported_at");
      ins.bind(1, job_id).bind(2, k.candidate_id).bind(3, target).bind(4, in.device);
      ins.bind_text_or_null(5, in.driver).bind_text_or_null(6, in.uuid).bind(7, in.versions.dump());
      ins.bind(8, k.median_ms).bind(9, json(k.samples).dump()).bind(10, in.source).bind(11, now);
      ins.step();
      ++st.measurements;
      touched.insert(job_id);
    }
    for (long long job_id : touched) {
      Stmt fastest(catalog, "SELECT candidate_id, median_ms, device FROM imported_measurements WHERE job_id = ?1 "
                         "ORDER BY median_ms, candidate_id LIMIT 1");
      fastest.bind(1, job_id);
      if (!fastest.step()) continue;
      const long long cand = fastest.i64(0);
      const double ms = fastest.dbl(1);
      const std::string device = fastest.text(2);
      Stmt cur(catalog, "SELECT candidate_id, basis, value_ms, device FROM best WHERE job_id = ?1");
      cur.bind(1, job_id);
      bool replace = true;
      if (cur.step()) {
        const bool same = cur.i64(0) == cand && cur.text(1) == "measured" && cur.dbl(2) == ms &&
                          cur.text(3) == device;
        // A measured best of the engine's own (not an import, whose row above
        // holds its latest value) stays when it is faster.
        bool engine_measured = false;
        if (cur.text(1) == "measured") {
          Stmt own(catalog, "SELECT 1 FROM imported_measurements WHERE candidate_id = ?1 AND device = ?2");
          own.bind(1, cur.i64(0)).bind(2, cur.text(3));
          engine_measured = !own.step();
        }
        if (same || (engine_measured && cur.dbl(2) < ms)) replace = false;
      }
      if (!replace) continue;
      Stmt up(catalog, "INSERT INTO best (job_id, candidate_id, basis, value_ms, device, selected_at) "
                    "VALUES (?1, ?2, 'measured', ?3, ?4, ?5) ON CONFLICT (job_id) DO UPDATE SET "
                    "candidate_id = excluded.candidate_id, basis = 'measured', value_ms = excluded.value_ms, "
                    "device = excluded.device, selected_at = excluded.selected_at");
      up.bind(1, job_id).bind(2, cand).bind(3, ms).bind(4, device).bind(5, now);
      up.step();
      ++st.best_changed;
    }
    st.jobs = static_cast<int>(touched.size());
    tx.commit();
    return st;
  }
}

}  // namespace kiln
