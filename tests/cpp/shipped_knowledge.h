// The knowledge base this repository ships (configs/: targets, operators,
// principles), loaded once per test binary; thread-safe (a function-local static).
// Throws what Knowledge::load throws when a shipped file is bad.
#pragma once
#include "knowledge/knowledge.h"

namespace kiln_test {

inline const kiln::Knowledge& knowledge() {
  static const kiln::Knowledge k = kiln::Knowledge::load(KILN_SOURCE_DIR);
  return k;
}

}  // namespace kiln_test
