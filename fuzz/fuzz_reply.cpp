// libFuzzer target: the worker-reply parser (src/evaluate/reply.*) on one reply
// line as the engine reads it (json::parse without exceptions, then the checks).
// Contract under test: parse_envelope / parse_evaluate_result /
// check_space_result throw only ReplyFault; check_answer never throws.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "evaluate/reply.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  for (const char* method : {"evaluate", "space", "reference_info", "confirm"}) {
    kiln::WorkerOutcome o;
    o.reply = j;
    (void)kiln::check_answer(method, std::move(o));
  }
  try {
    const kiln::ReplyEnvelope e = kiln::parse_envelope(j);
    if (e.ok) {
      try {
        const kiln::EvaluateReply r = kiln::parse_evaluate_result(e.result);
        if (r.artifact) (void)r.artifact->metadata.dump();
      } catch (const kiln::ReplyFault&) {
      }
      kiln::check_space_result(e.result);
    }
  } catch (const kiln::ReplyFault&) {
  }
  // The result checks on the top-level value too: reach them without an envelope.
  try {
    (void)kiln::parse_evaluate_result(j);
  } catch (const kiln::ReplyFault&) {
  }
  return 0;
}
