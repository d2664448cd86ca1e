// Everything Kiln knows before it runs a job: the GPU targets
// (configs/targets/*.yaml), the operators (kernels/operators.yaml) and the
// optimisation principles (configs/principles.yaml). Loaded once per command and
// passed by const reference; immutable after load.
#pragma once
#include <filesystem>

#include "knowledge/operators.h"
#include "knowledge/principles.h"
#include "knowledge/targets.h"

namespace kiln {

struct Knowledge {
  TargetRegistry targets;
  OperatorRegistry operators;
  PrincipleRegistry principles;
  // Loads configs/targets, kernels/operators.yaml, configs/principles.yaml under
  // home. Throws the registries' errors (naming the file) on a bad file.
  static Knowledge load(const std::filesystem::path& home);
};

}  // namespace kiln
