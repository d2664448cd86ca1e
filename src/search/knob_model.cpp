#include "search/knob_model.h"

#include <stdexcept>
#include <string>

namespace kiln {

bool is_tile_knob(std::string_view name) { return name.substr(0, 5) == "BLOCK"; }

KnobModel knob_model(std::string_view name) {
  if (is_tile_knob(name) || name == "num_stages" || name == "programs") return KnobModel::kRanked;
  if (name == "num_warps") return KnobModel::kWeak;
  return KnobModel::kBlind;
}

std::optional<double> ranked_knob(const nlohmann::json& config, std::string_view name) {
  if (knob_model(name) != KnobModel::kRanked)
    throw std::logic_error("the estimate reads config knob " + std::string(name) +
                           " without classifying it (search/knob_model.h)");
  if (!config.is_object()) return std::nullopt;
  auto it = config.find(std::string(name));
  if (it == config.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return v > 0 ? std::optional<double>(v) : std::nullopt;
}

}  // namespace kiln
