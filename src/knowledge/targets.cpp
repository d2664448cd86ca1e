#include "knowledge/targets.h"

#include <algorithm>
#include <stdexcept>

#include "knowledge/yaml_util.h"

namespace kiln {
namespace {

// The key used for lookups: lower case without spaces, '-' or '_'.
std::string lookup_key(const std::string& s) {
  std::string out;
  for (char c : yamlu::lower(s))
    if (c != ' ' && c != '-' && c != '_') out += c;
  return out;
}

const std::vector<std::string> kKnownKeys = {
    "name", "aliases", "vendor", "backend", "arch", "warp_size", "compute_units", "simds_per_cu",
    "lds_bytes_per_cu", "max_shared_per_block", "registers_per_cu", "max_waves_per_simd",
    "l2_bytes", "infinity_cache_bytes", "memory_bandwidth_gbs", "peak_tflops", "device_match",
    "triton_supported", "memory_gb", "boost_clock_mhz", "notes", "sources"};

Target parse_target(const YAML::Node& doc, const std::filesystem::path& path) {
  yamlu::Checker ck{path.string()};
  ck.need_map(doc, "a target file");
  ck.no_duplicates(doc);

  auto required = [&](const char* key) {
    YAML::Node n = doc[key];
    if (!n.IsDefined() || yamlu::is_null(n)) ck.fail(doc, std::string("missing required key '") + key + "'");
    return n;
  };
  auto positive = [&](const char* key, long long v, const YAML::Node& n) {
    if (v <= 0) ck.fail(n, std::string(key) + " must be positive, got " + std::to_string(v));
    return v;
  };

  Target t;
  t.file = path;
  t.raw = yamlu::to_json(doc);
  t.name = ck.str(required("name"), "name");
  if (doc["aliases"]) t.aliases = ck.strings(doc["aliases"], "aliases");
  t.vendor = ck.str(required("vendor"), "vendor");
  if (t.vendor != "amd" && t.vendor != "nvidia")
    ck.fail(doc["vendor"], "vendor must be amd or nvidia, got '" + t.vendor + "'");
  t.backend = ck.str(required("backend"), "backend");
  if (t.backend != "hip" && t.backend != "cuda")
    ck.fail(doc["backend"], "backend must be hip or cuda, got '" + t.backend + "'");
  if ((t.vendor == "amd") != (t.backend == "hip"))
    ck.fail(doc["backend"], "backend '" + t.backend + "' does not fit vendor '" + t.vendor + "'");
  t.arch = ck.str(required("arch"), "arch");
  if (t.backend == "hip" && t.arch.rfind("gfx", 0) != 0)
    ck.fail(doc["arch"], "a hip target's arch must look like gfx942, got '" + t.arch + "'");
  if (t.backend == "cuda" && t.arch.rfind("sm_", 0) != 0)
    ck.fail(doc["arch"], "a cuda target's arch must look like sm_90, got '" + t.arch + "'");

  YAML::Node ws = required("warp_size");
  t.warp_size = static_cast<int>(ck.integer(ws, "warp_size"));
  if (t.warp_size != 32 && t.warp_size != 64)
    ck.fail(ws, "warp_size must be 32 or 64, got " + std::to_string(t.warp_size));
  YAML::Node cu = required("compute_units");
  t.compute_units = static_cast<int>(positive("compute_units", ck.integer(cu, "compute_units"), cu));

  auto opt_int = [&](const char* key, auto& field) {
    if (YAML::Node n = doc[key]; n && !yamlu::is_null(n)) {
      long long v = ck.integer(n, key);
      if (v < 0) ck.fail(n, std::string(key) + " must not be negative");
      field = static_cast<std::remove_reference_t<decltype(field)>>(v);
    }
  };
  opt_int("simds_per_cu", t.simds_per_cu);
  opt_int("lds_bytes_per_cu", t.lds_bytes_per_cu);
  opt_int("max_shared_per_block", t.max_shared_per_block);
  opt_int("registers_per_cu", t.registers_per_cu);
  opt_int("max_waves_per_simd", t.max_waves_per_simd);
  opt_int("l2_bytes", t.l2_bytes);
  opt_int("infinity_cache_bytes", t.infinity_cache_bytes);
  if (YAML::Node n = doc["memory_bandwidth_gbs"]; n && !yamlu::is_null(n)) {
    t.memory_bandwidth_gbs = ck.number(n, "memory_bandwidth_gbs");
    if (t.memory_bandwidth_gbs <= 0) ck.fail(n, "memory_bandwidth_gbs must be positive");
  }
  if (YAML::Node n = doc["peak_tflops"]; n && !yamlu::is_null(n)) {
    ck.need_map(n, "peak_tflops");
    for (const auto& kv : n) {
      double v = ck.number(kv.second, "peak_tflops." + kv.first.Scalar());
      if (v < 0) ck.fail(kv.second, "peak_tflops must not be negative");
      t.peak_tflops[kv.first.Scalar()] = v;
    }
  }
  if (doc["device_match"]) t.device_match = ck.strings(doc["device_match"], "device_match");
  for (const auto& s : t.device_match)
    if (s.empty()) ck.fail(doc["device_match"], "device_match entries must not be empty");
  if (YAML::Node n = doc["triton_supported"]; n && !yamlu::is_null(n))
    t.triton_supported = ck.boolean(n, "triton_supported");
  if (doc["sources"]) ck.strings(doc["sources"], "sources");
  for (const auto& kv : doc) {
    const std::string k = kv.first.Scalar();
    if (std::find(kKnownKeys.begin(), kKnownKeys.end(), k) == kKnownKeys.end())
      ck.fail(kv.first, "unknown key '" + k + "'" + yamlu::did_you_mean(k, kKnownKeys));
  }
  return t;
}

}  // namespace

TargetRegistry TargetRegistry::load(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw std::runtime_error(dir.string() + ": not a directory (expected target YAML files)");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error(dir.string() + ": no target files (*.yaml)");

  TargetRegistry reg;
  for (const auto& f : files) {
    YAML::Node doc = yamlu::load_document(yamlu::read_file(f), f.string());
    Target t = parse_target(doc, f);
    // Every spelling must name one target only.
    std::vector<std::string> spellings = t.aliases;
    spellings.push_back(t.name);
    for (const auto& s : spellings)
      if (const Target* other = reg.find(s))
        throw std::runtime_error(yamlu::located(f.string(), doc.Mark(),
                                                "target name or alias '" + s + "' is already used by " +
                                                    other->name + " (" + other->file.string() + ")"));
    reg.targets_.push_back(std::move(t));
  }
  std::sort(reg.targets_.begin(), reg.targets_.end(),
            [](const Target& a, const Target& b) { return a.name < b.name; });
  return reg;
}

const Target* TargetRegistry::find(const std::string& name) const {
  const std::string key = lookup_key(name);
  if (key.empty()) return nullptr;
  for (const auto& t : targets_) {
    if (lookup_key(t.name) == key) return &t;
    for (const auto& a : t.aliases)
      if (lookup_key(a) == key) return &t;
  }
  return nullptr;
}

std::vector<std::string> TargetRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& t : targets_) out.push_back(t.name);
  return out;
}

bool TargetRegistry::matches_device(const Target& t, const std::string& device_name) {
  const std::string dev = yamlu::lower(device_name);
  for (const auto& m : t.device_match)
    if (!m.empty() && dev.find(yamlu::lower(m)) != std::string::npos) return true;
  return false;
}

}  // namespace kiln
