#include "knowledge/target_list.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace kiln {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

}  // namespace

std::string arch_of(const std::string& item_in) {
  std::string item = lower(trim(item_in));
  const std::string prefix = "amdgcn-amd-amdhsa--";
  if (item.rfind(prefix, 0) == 0) item = item.substr(prefix.size());
  if (auto colon = item.find(':'); colon != std::string::npos) {
    // target features: ":sramecc+:xnack-"
    for (size_t i = colon; i < item.size(); ++i)
      if (!std::isalnum(static_cast<unsigned char>(item[i])) && item[i] != ':' && item[i] != '+' && item[i] != '-')
        return "";
    item = item.substr(0, colon);
  }
  if (item.size() > 3 && item.rfind("gfx", 0) == 0 &&
      std::all_of(item.begin() + 3, item.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    return item;
  if (item.size() > 3 && item.rfind("sm_", 0) == 0) {
    std::string digits = item.substr(3);
    if (!digits.empty() && digits.back() == 'a') digits.pop_back();
    if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      return "sm_" + digits;
  }
  return "";
}

std::vector<const Target*> resolve_targets(const TargetRegistry& registry, const std::string& list) {
  std::vector<const Target*> out;
  auto add = [&](const Target* t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  size_t start = 0;
  bool any = false;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = trim(list.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    any = true;
    if (const Target* t = registry.find(item)) {
      add(t);
      continue;
    }
    const std::string arch = arch_of(item);
    bool found = false;
    for (const Target& t : registry.all())
      if (!arch.empty() && lower(t.arch) == arch) {
        add(&t);
        found = true;
      }
    if (!found) {
      std::string known;
      for (const auto& n : registry.names()) known += (known.empty() ? "" : ", ") + n;
      std::string arches;
      for (const Target& t : registry.all())
        if (arches.find(t.arch) == std::string::npos) arches += (arches.empty() ? "" : ", ") + t.arch;
      throw std::invalid_argument("unknown target '" + item + "' (targets: " + known + "; architectures: " + arches + ")");
    }
  }
  if (!any) throw std::invalid_argument("--target names no target");
  return out;
}

}  // namespace kiln
