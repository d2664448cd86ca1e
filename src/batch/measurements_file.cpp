#include "batch/measurements_file.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "batch/errors.h"
#include "manifest/misses.h"

namespace kiln::batch {

using nlohmann::json;

namespace {
constexpr size_t kMaxSamplesPerKernel = 100000;
}  // namespace

MeasurementsIn read_measurements(const std::filesystem::path& file, const Knowledge& knowledge) {
  const std::string name = file.string();
  auto bad = [&](const std::string& why) { return InputError(name + ": " + why); };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) throw bad("not a regular file");
  if (std::filesystem::file_size(file, ec) > (64u << 20)) throw bad("larger than 64 MiB: not a measurements file");
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    // The position only: the content is not quoted (the file may be anything).
    throw bad("not JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  } catch (const json::exception&) {  // 1e400: out of range
    throw bad("not JSON (a number out of range)");
  }
  if (!j.is_object()) throw bad("expected a JSON object {device, driver, uuid, versions, kernels}");
  MeasurementsIn m;
  m.source = std::filesystem::absolute(file).string();
  if (!j.contains("device") || !j["device"].is_string() || j["device"].get<std::string>().empty())
    throw bad("'device' must be a non-empty string (the device the kernels were timed on)");
  m.device = j["device"];
  for (auto [key, dst] : {std::pair<const char*, std::string*>{"driver", &m.driver}, {"uuid", &m.uuid}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_string()) throw bad(std::string("'") + key + "' must be a string");
    *dst = j[key];
  }
  if (j.contains("format") && j["format"] != "kiln-measurements/1")
    throw bad("'format' must be kiln-measurements/1 (what kiln-rt tune writes)");
  // The target: per kernel, else the file's (kiln-rt tune writes its label,
  // "gfx942:sramecc+:xnack- (AMD Instinct MI300X)").
  auto targets_of = [&](const json& t, const std::string& at) {
    std::pair<std::vector<std::string>, std::string> out;
    if (t.is_null()) return out;
    if (!t.is_string() || t.get<std::string>().empty() || t.get<std::string>().size() > 256)
      throw bad(at + "target must be a non-empty string");
    try {
      for (const Target* x : miss_targets(knowledge.targets, t.get<std::string>())) out.first.push_back(x->name);
    } catch (const std::invalid_argument& e) {
      throw bad(at + "target: " + e.what());
    }
    out.second = t;
    return out;
  };
  const auto file_targets = targets_of(j.value("target", json(nullptr)), "");
  if (j.contains("versions") && !j["versions"].is_null()) {
    if (!j["versions"].is_object()) throw bad("'versions' must be an object");
    m.versions = j["versions"];
  }
  if (!j.contains("kernels") || !j["kernels"].is_array() || j["kernels"].empty())
    throw bad("'kernels' must be a non-empty list");
  for (size_t i = 0; i < j["kernels"].size(); ++i) {
    const json& k = j["kernels"][i];
    const std::string at = "kernels[" + std::to_string(i) + "]";
    if (!k.is_object()) throw bad(at + " must be an object");
    ImportedKernel ik;
    if (!k.contains("job_key") || !k["job_key"].is_string() || k["job_key"].get<std::string>().empty())
      throw bad(at + ".job_key must be a non-empty string");
    ik.job_key = k["job_key"];
    std::tie(ik.targets, ik.target_text) =
        k.contains("target") ? targets_of(k["target"], at + ".") : file_targets;
    if (!k.contains("candidate_id") || !k["candidate_id"].is_number_integer() || k["candidate_id"].get<long long>() <= 0)
      throw bad(at + ".candidate_id must be a positive integer");
    ik.candidate_id = k["candidate_id"];
    auto positive = [](const json& v) {
      return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0 && v.get<double>() < 1e7;
    };
    if (!k.contains("median_ms") || !positive(k["median_ms"]))
      throw bad(at + ".median_ms must be a positive number of milliseconds");
    ik.median_ms = k["median_ms"];
    if (!k.contains("samples") || !k["samples"].is_array() || k["samples"].empty())
      throw bad(at + ".samples must be a non-empty list of milliseconds");
    if (k["samples"].size() > kMaxSamplesPerKernel)
      throw bad(at + ".samples holds " + std::to_string(k["samples"].size()) +
                " samples; at most " + std::to_string(kMaxSamplesPerKernel) +
                " per kernel are imported (time fewer runs, or keep a subsample)");
    for (const auto& s : k["samples"]) {
      if (!positive(s)) throw bad(at + ".samples must hold positive numbers of milliseconds");
      ik.samples.push_back(s);
    }
    m.kernels.push_back(std::move(ik));
  }
  return m;
}

}  // namespace kiln::batch
