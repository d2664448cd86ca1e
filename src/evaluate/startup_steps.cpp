#include "evaluate/startup_steps.h"

#include <array>
#include <cstdio>

namespace kiln {

std::map<std::string, double> startup_steps(const nlohmann::json& hello_result) {
  std::map<std::string, double> out;
  if (!hello_result.is_object()) return out;
  const auto it = hello_result.find("startup");
  if (it == hello_result.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items())
    if (v.is_number()) out[k] = v.get<double>();
  return out;
}

std::string describe_startup(const std::map<std::string, double>& steps) {
  static constexpr std::array<const char*, 8> kOrder = {"preload_s", "process_s", "imports_s", "context_s",
                                                        "compile_s", "kernels_s", "library_s", "hello_s"};
  std::string out;
  auto add = [&out](const std::string& key, double seconds) {
    std::string name = key.size() > 2 && key.compare(key.size() - 2, 2, "_s") == 0
                           ? key.substr(0, key.size() - 2) : key;
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.2f s", seconds);
    out += (out.empty() ? "" : ", ") + name + buf;
  };
  for (const char* k : kOrder)
    if (auto it = steps.find(k); it != steps.end()) add(k, it->second);
  for (const auto& [k, v] : steps) {
    bool known = false;
    for (const char* o : kOrder) known = known || k == o;
    if (!known) add(k, v);
  }
  return out;
}

}  // namespace kiln
