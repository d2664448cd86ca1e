// `--target` of kiln package (and the target field of a runtime miss): a comma
// list of target names (MI300X), architecture names (gfx942, sm_90, sm_90a:
// every target of that arch in configs/targets) or code-object target IDs
// (amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-: its arch).
#pragma once
#include <string>
#include <vector>

#include "knowledge/targets.h"

namespace kiln {

// The targets named, in the order given, each once. Throws
// std::invalid_argument naming the item it cannot resolve and the known names.
std::vector<const Target*> resolve_targets(const TargetRegistry& registry, const std::string& list);

// The architecture an item names, if it is one: "gfx942" for "gfx942",
// "GFX942" and "amdgcn-amd-amdhsa--gfx942:xnack-"; "sm_90" for "sm_90" and
// "sm_90a"; "" when it looks like no architecture.
std::string arch_of(const std::string& item);

}  // namespace kiln
