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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "package/shortlist.h"

int main(int argc, char**) {
  if (argc > 1) {
    std::cerr << "usage: kiln-shortlist < kernels.jsonl\n";
    return 2;
  }
  std::string line;
  long long n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json out;
    try {
      const auto in = nlohmann::json::parse(line);
      std::vector<kiln::ShortlistEntry> pool;
      for (const auto& c : in.at("candidates"))
        pool.push_back({c.at("estimate_ms").get<double>(), c.value("config", nlohmann::json::object())});
      out = {{"picked", kiln::pick_shortlist(pool, in.value("max", 8))}};
    } catch (const std::exception& e) {
      out = {{"error", "line " + std::to_string(n) + ": " + e.what()}};
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}
