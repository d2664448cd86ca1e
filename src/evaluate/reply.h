// The worker's replies (the schema: src/evaluate/protocol.json), parsed and validated in one
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

#include "evaluate/protocol.h"
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

// An evaluate result, typed (evaluate/protocol.h).
struct EvaluateReply {
  EvaluationResult result;                // status, message, latency, ...; result.raw as sent
  std::optional<ArtifactClaim> artifact;  // absent, null or without a path: none
};

// The envelope of any reply. Throws ReplyFault.
ReplyEnvelope parse_envelope(const nlohmann::json& reply);

// An evaluate result: status one of the schema's statuses; message a string or absent; latency,
// correctness, traffic objects or null; numeric fields the engine reads are
// numbers or null; artifact null or an object with a string path (or null
// path: no file) and, with a path, a sha256 of 64 hex digits. Throws ReplyFault.
EvaluateReply parse_evaluate_result(const nlohmann::json& result);

// A space / reference_info result: "configs" absent or an array of objects, "traffic"
// an object or null/absent. Throws ReplyFault.
void check_space_result(const nlohmann::json& result);

// A worker's answer to one request, checked against the protocol and typed
// once (check_answer). Everything that consumes an answer -- the scheduler,
// the run's GPU accounts, the first-results line -- reads this one value,
// never the reply's JSON again, so they cannot see the answer differently.
struct CheckedAnswer {
  // kReply: a reply that passed the checks, `reply` as received (what the MPI
  // transport forwards); a reply that broke them is kCrash (see check_answer).
  WorkerOutcome outcome;
  // outcome kReply: the envelope's ok and error; its `result` is left empty
  // (the result object is `typed.result.raw`).
  ReplyEnvelope envelope;
  // outcome kReply and ok: the result, typed. For evaluate it is validated
  // (parse_evaluate_result: artifact set where the worker claims a file); for
  // any other method it is read leniently (read_evaluation_result: a confirm
  // answer's timings and latency, which share $defs.timings; `raw` a space
  // answer's configs). Otherwise empty.
  EvaluateReply typed;
};

// `o` for a request of `method`, checked and typed: a kReply whose reply fails
// the checks above becomes kCrash with detail "infrastructure fault: malformed
// worker reply to METHOD: WHY" (the caller then restarts the worker: it no
// longer speaks the protocol). Anything else keeps its outcome. Methods
// without a schema here ("confirm", ...) get the envelope check only.
// Never throws.
CheckedAnswer check_answer(const std::string& method, WorkerOutcome o);

}  // namespace kiln
