// A shape as people read it: [64, 128] -> "64x128". Pure and total: a shape
// that is not a list (a damaged catalog row, a request's text) is shown as its
// JSON, and a dimension that is not an integer as its JSON.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

inline std::string shape_text(const nlohmann::json& shape) {
  if (!shape.is_array()) return shape.dump();
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : "x") + d.dump();
  return s;
}

}  // namespace kiln
