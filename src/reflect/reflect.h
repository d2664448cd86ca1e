// Reflection: every evaluated candidate becomes a diagnosis — what went wrong
// (or right), in a sentence or a paragraph an LLM can act on, and a constraint
// for the next attempt. The llm generator puts the diagnosis and the constraints
// into its repair prompt; the template generator prunes its config space with
// the same outcomes (src/search/prune.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evaluate/protocol.h"
#include "search/candidate.h"

namespace kiln::reflect {

struct Diagnosis {
  // ok | syntax_error | compile_error | resource_error | incorrect | timeout |
  // crash | rejected | slower
  std::string kind;
  std::string summary;     // what happened, with the evidence (compiler message, max error, ms)
  std::string constraint;  // a rule for the next attempt ("" when there is nothing to add)
};

// Diagnoses one outcome. best_so_far_ms: the job's best correct score so far
// (same basis as o.score_ms); reference_ms: the PyTorch reference's eager
// latency measured on this device (compared only with a measured latency).
Diagnosis diagnose(const Outcome& o, std::optional<double> best_so_far_ms,
                   std::optional<double> reference_ms);

// The message's most telling lines (the error lines and the end of a traceback),
// at most max_chars.
std::string excerpt(const std::string& message, size_t max_chars = 1500);

}  // namespace kiln::reflect
