// The messages between kiln-mpi's coordinator (rank 0) and its worker ranks.
// Each is one JSON object, sent as an MPI_CHAR message with tag kMessageTag
// (docs/cluster.md lists them):
//
//   worker -> coordinator
//     {"type":"ready", "slots":W, "device":"NVIDIA H200", "hello":{...}, "host":"n1", "pid":P, "gpu":"0"|null}
//     {"type":"result", "item_id":N, "outcome":{"kind":"reply|timeout|crash", "reply":{...}, "detail":"..."},
//      "worker":"rank R pid P", "artifact_b64":"..."}      (the code object's bytes, when there is one)
//     {"type":"heartbeat"}
//     {"type":"bye", "reason":"..."}                        (the rank is leaving: stop, signal, no evaluator)
//   coordinator -> worker
//     {"type":"job", "job_id":J, "job":{...}}               (once per job and rank, before its work)
//     {"type":"work", "item_id":N, "job_id":J, "request":{...}, "timeout_s":T}
//                                   (the worker request without its "job", which the job_id names)
//     {"type":"heartbeat"}
//     {"type":"stop"}
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "evaluate/worker_process.h"

namespace kiln::mpi {

inline constexpr int kMessageTag = 0x4b4c;  // "KL"

std::string base64_encode(std::string_view bytes);
// Throws std::invalid_argument on a character outside the alphabet.
std::string base64_decode(std::string_view text);

nlohmann::json outcome_to_json(const WorkerOutcome& o);
WorkerOutcome outcome_from_json(const nlohmann::json& j);

}  // namespace kiln::mpi
