#include "common/home.h"

#include <cstdlib>
#include <string>

namespace kiln {

std::filesystem::path kiln_home() {
  if (const char* env = std::getenv("KILN_HOME"); env && *env) return env;
  return KILN_DEFAULT_HOME;
}

std::string python_executable() {
  if (const char* env = std::getenv("KILN_PYTHON"); env && *env) return env;
  return "python3";
}

}  // namespace kiln
