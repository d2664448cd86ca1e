// The stdin/stdout loop of the bench's offline tools (kiln-estimate,
// kiln-shortlist): one JSON object a line in, one JSON line out per input.
#pragma once
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::bench {

// Reads stdin to its end, skipping empty lines; for every other line writes
// answer(the parsed line) to stdout as one JSON line, or {"error": "line N:
// ..."} (N counts every line read, empty ones too) when the line is no JSON or
// `answer` throws a std::exception. Returns 0, the tool's exit code.
template <class Answer>
int answer_json_lines(Answer answer) {
  std::string line;
  long long n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json out;
    try {
      out = answer(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      out = {{"error", "line " + std::to_string(n) + ": " + e.what()}};
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}

}  // namespace kiln::bench
