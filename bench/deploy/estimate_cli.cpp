// kiln-estimate: the static estimate (src/search/estimate.cpp) for offline
// evaluation. Reads JSON lines on stdin, one candidate each:
//   {"target": "H200", "dtype": "fp16", "traffic": {"bytes": .., "flops": ..},
//    "artifact": {"grid": [..], "num_warps": .., "registers": .., "occupancy": ..},
//    "config": {"BLOCK_M": .., ...}}
// and writes one JSON line per input: the estimate's terms (Estimate::to_json),
// or {"error": "..."} for a line it cannot estimate. bench/deploy/estimate_quality.py
// drives it. Usage: kiln-estimate [--targets DIR]  (default configs/targets)
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "json_lines.h"
#include "search/estimate.h"
#include "knowledge/targets.h"

int main(int argc, char** argv) {
  std::string dir = "configs/targets";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--targets" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::cerr << "usage: kiln-estimate [--targets DIR] < candidates.jsonl\n";
      return 2;
    }
  }
  kiln::TargetRegistry targets;
  try {
    targets = kiln::TargetRegistry::load(dir);
  } catch (const std::exception& e) {
    std::cerr << "kiln-estimate: " << e.what() << "\n";
    return 2;
  }
  return kiln::bench::answer_json_lines([&](const nlohmann::json& in) {
    const auto* t = targets.find(in.at("target").get<std::string>());
    if (!t) throw std::invalid_argument("unknown target " + in.at("target").dump());
    const auto k = kiln::KernelResources::from_artifact(in.value("artifact", nlohmann::json::object()));
    const auto tr = kiln::Traffic::from_json(in.value("traffic", nlohmann::json::object()));
    return kiln::estimate_latency(*t, in.at("dtype").get<std::string>(), tr, k,
                                  in.value("config", nlohmann::json::object()))
        .to_json();
  });
}
