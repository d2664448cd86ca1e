// The worker's replies (docs/worker-protocol.md), parsed and validated in one
// place before the engine uses them. A reply is untrusted input: a field of
// the wrong type, a missing field or a result that is not an object is a
// ReplyFault naming the field, never a JSON exception somewhere in the engine.
//
// Threading: pure functions, no state. Failure: ReplyFault (std::runtime_error).
#pragma once
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "evaluate/worker_process.h"

namespace kiln {

class ReplyFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// {"ok": true, "result": {...}} or {"ok": false, "error": "..."}.
struct ReplyEnvelope {
  bool ok = false;
  nlohmann::json result;  // ok: an object
  std::string error;      // !ok: the worker's reason (may be empty)
};

// The code object a worker says it wrote (the evaluate result's "artifact").
struct ArtifactClaim {
  std::string path;         // as the worker names it; the engine checks it (artifact_file.h)
  std::string sha256;       // 64 lower-case hex digits
  std::string kind;         // "cubin", "hsaco", ... ("" if absent)
  std::string kernel_name;  // "" if absent
  nlohmann::json metadata;  // the artifact object without "path" (resources, grid, args)
};

// An evaluate result.
struct EvaluateReply {
  std::string status;   // one of ok, compile_error, resource_error, incorrect, timeout, crash, rejected
  std::string message;  // "" if absent
  nlohmann::json result;                // the whole result object, as recorded
  std::optional<ArtifactClaim> artifact;  // absent or null: none
};

// The envelope of any reply. Throws ReplyFault.
ReplyEnvelope parse_envelope(const nlohmann::json& reply);

// An evaluate result: status one of the evaluation statuses (docs/catalog.md); message a string or absent; latency,
// correctness, traffic objects or null; numeric fields the engine reads are
// numbers or null; artifact null or an object with a string path (or null
// path: no file) and, with a path, a sha256 of 64 hex digits. Throws ReplyFault.
EvaluateReply parse_evaluate_result(const nlohmann::json& result);

// A space / reference_info result: "configs" absent or an array of objects, "traffic"
// an object or null/absent. Throws ReplyFault.
void check_space_result(const nlohmann::json& result);

// `o` for a request of `method`, checked: a kReply whose reply fails the
// checks above becomes kCrash with detail "infrastructure fault: malformed
// worker reply to METHOD: WHY" (the caller then restarts the worker: it no longer speaks the
// protocol). Anything else is returned unchanged. Methods without a schema
// here ("confirm", ...) get the envelope check only.
WorkerOutcome checked_outcome(const std::string& method, WorkerOutcome o);

}  // namespace kiln
