#include "knowledge/knowledge.h"

namespace kiln {

Knowledge Knowledge::load(const std::filesystem::path& home) {
  Knowledge k;
  k.targets = TargetRegistry::load(home / "configs" / "targets");
  k.operators = OperatorRegistry::load(home / "kernels" / "operators.yaml");
  k.principles = PrincipleRegistry::load(home / "configs" / "principles.yaml");
  return k;
}

}  // namespace kiln
