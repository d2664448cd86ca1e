// A number as prompts and reports show it: at most `digits` significant digits
// (std::setprecision's default notation: 0.0123, 1.5e+06). Pure.
#pragma once
#include <iomanip>
#include <sstream>
#include <string>

namespace kiln {

inline std::string number_text(double v, int digits = 4) {
  std::ostringstream os;
  os << std::setprecision(digits) << v;
  return os.str();
}

}  // namespace kiln
