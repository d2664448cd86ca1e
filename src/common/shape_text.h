// A shape as people read it: [64, 128] -> "64x128". Pure; a shape is a JSON
// list of integers (anything else throws nlohmann::json's type_error).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

inline std::string shape_text(const nlohmann::json& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : "x") + std::to_string(d.get<long long>());
  return s;
}

}  // namespace kiln
