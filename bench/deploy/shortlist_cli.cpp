// kiln-shortlist: the shortlist an estimated target's package ships
// (pick_shortlist, src/package/shortlist.h) for offline evaluation. Reads JSON
// lines on stdin, one kernel each:
//   {"max": 8, "candidates": [{"estimate_ms": .., "config": {..}}, ..]}
// candidates as the package orders them (rank 0 first, then by estimate, ties
// in candidate order), and writes one JSON line per input: {"picked": [i, ..]}
// (indices into candidates, in shortlist order), or {"error": "..."} for a line
// it cannot read. bench/deploy/estimate_quality.py drives it.
// Usage: kiln-shortlist < kernels.jsonl
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_lines.h"
#include "package/shortlist.h"

int main(int argc, char**) {
  if (argc > 1) {
    std::cerr << "usage: kiln-shortlist < kernels.jsonl\n";
    return 2;
  }
  return kiln::bench::answer_json_lines([](const nlohmann::json& in) {
    std::vector<kiln::ShortlistEntry> pool;
    for (const auto& c : in.at("candidates"))
      pool.push_back({c.at("estimate_ms").get<double>(), c.value("config", nlohmann::json::object())});
    return nlohmann::json{{"picked", kiln::pick_shortlist(pool, in.value("max", 8))}};
  });
}
