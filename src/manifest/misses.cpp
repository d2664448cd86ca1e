#include "manifest/misses.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/target_list.h"

namespace kiln {

using nlohmann::json;

namespace {

constexpr size_t kMaxLogBytes = 64u << 20;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

std::vector<const Target*> miss_targets(const TargetRegistry& registry, const std::string& text) {
  try {
    return resolve_targets(registry, text);
  } catch (const std::invalid_argument&) {
    // The runtime's label: "ID (DEVICE NAME)" or "TARGET (ID)".
    const size_t open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open || text.find(',') != std::string::npos)
      throw;
    const std::string head = trim(text.substr(0, open)), inner = trim(text.substr(open + 1, close - open - 1));
    std::vector<const Target*> by_device;
    for (const Target& t : registry.all())
      if (TargetRegistry::matches_device(t, inner)) by_device.push_back(&t);
    if (!by_device.empty()) return by_device;
    for (const std::string& part : {head, inner}) {
      try {
        if (!part.empty()) return resolve_targets(registry, part);
      } catch (const std::invalid_argument&) {
      }
    }
    throw;
  }
}

MissManifest load_misses(const std::filesystem::path& file, const Knowledge& knowledge) {
  const std::string name = file.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) throw ManifestError(name, 0, 0, "not a regular file");
  if (std::filesystem::file_size(file, ec) > kMaxLogBytes)
    throw ManifestError(name, 0, 0, "larger than 64 MiB: not a miss log");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ManifestError(name, 0, 0, "cannot read the file");
  MissManifest out;
  std::map<std::string, int> first_line;  // entry text -> line it came from
  std::vector<std::pair<std::string, int>> entries;
  std::vector<std::string> all_targets;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto fail = [&](const std::string& why) { throw ManifestError(name, lineno, 1, why); };
    json m;
    try {
      m = json::parse(line);
    } catch (const json::parse_error& e) {
      // The position only: the line is not quoted (the file may be anything).
      fail("not a JSON line (syntax error at character " + std::to_string(e.byte) + ")");
    } catch (const json::exception&) {  // 1e400: out of range
      fail("not a JSON line (a number out of range)");
    }
    if (!m.is_object()) fail("a miss must be a JSON object");
    for (const char* k : {"op", "dtype", "target"})
      if (!m.contains(k) || !m[k].is_string() || m[k].get<std::string>().empty() || m[k].get<std::string>().size() > 128)
        fail(std::string("'") + k + "' must be a non-empty string");
    if (!m.contains("shape") || !m["shape"].is_array() || m["shape"].empty() || m["shape"].size() > 8)
      fail("'shape' must be a list of 1 to 8 positive integers");
    for (const auto& d : m["shape"])
      if (!d.is_number_integer() || d.get<long long>() <= 0) fail("'shape' must be a list of positive integers");
    json params = json::object();
    if (m.contains("params") && !m["params"].is_null()) {
      if (!m["params"].is_object()) fail("'params' must be an object");
      params = m["params"];
    }
    const std::string op = m["op"];
    if (!knowledge.operators.find(op)) fail("unknown operator '" + op.substr(0, 64) + "'");
    std::vector<const Target*> targets;
    try {
      targets = miss_targets(knowledge.targets, m["target"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    ++out.lines;
    for (const Target* t : targets) {
      const json entry = {{"op", op}, {"shapes", json::array({m["shape"]})},
                          {"dtypes", json::array({m["dtype"]})}, {"targets", json::array({t->name})},
                          {"params", params}};
      const std::string text = entry.dump();  // JSON is YAML flow style
      if (first_line.emplace(text, lineno).second) {
        entries.push_back({text, lineno});
        if (std::find(all_targets.begin(), all_targets.end(), t->name) == all_targets.end())
          all_targets.push_back(t->name);
      }
    }
  }
  if (entries.empty()) throw ManifestError(name, 0, 0, "no misses in the log");
  std::string yaml = "name: " + json("misses:" + file.filename().string()).dump() + "\n";
  yaml += "targets: " + json(all_targets).dump() + "\n";
  yaml += "operators:\n";
  const int first_entry_line = 4;
  for (const auto& [text, ln] : entries) yaml += "  - " + text + "\n";
  try {
    out.manifest = parse_manifest(yaml, name, knowledge);
  } catch (const ManifestError& e) {
    const int idx = e.line() - first_entry_line;
    const int ln = idx >= 0 && idx < (int)entries.size() ? entries[idx].second : 0;
    throw ManifestError(name, ln, 1, e.message());
  }
  out.manifest.path = file;
  out.manifest.text = yaml;
  out.distinct = static_cast<int>(entries.size());
  return out;
}

}  // namespace kiln
