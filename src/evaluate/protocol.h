// The worker protocol's types in C++, mirroring its schema
// src/evaluate/protocol.json (the one source of truth and the protocol's
// documentation). tests/cpp/protocol_test.cpp reads the schema and fails when
// the enums here, or the members EvaluationResult reads, differ from it;
// worker/kiln_worker/protocol.py mirrors the same names on the Python side.
//
// The engine reads a worker's evaluate result only through EvaluationResult:
// reply.h validates a live reply and builds one; read_evaluation_result() builds
// one from a result already validated or stored (the catalog's `result` column).
//
// Threading: pure functions and value types, no state.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

// The schema's $defs.method, in its order (hello lists them so).
enum class Method { kHello, kSpace, kEvaluate, kReferenceInfo, kTraffic, kPackageInfo, kConfirm, kMatch };
const std::vector<std::string>& method_names();
const std::string& to_string(Method m);

// The schema's $defs.status: an evaluation's verdict.
enum class EvalStatus { kOk, kCompileError, kResourceError, kIncorrect, kCrash, kRejected, kTimeout };
const std::vector<std::string>& status_names();
const std::string& to_string(EvalStatus s);
// nullopt for a name the schema does not list.
std::optional<EvalStatus> parse_status(std::string_view name);

// A job's minimum traffic ($defs.traffic); 0 where the worker gave none.
struct Traffic {
  double bytes = 0;
  double flops = 0;
  // Absent, null or non-numeric members stay 0; never throws.
  static Traffic from_json(const nlohmann::json& j);
};

// $defs.correctness
struct Correctness {
  std::optional<long long> seeds;
  std::optional<double> max_abs_err, max_rel_err;
  std::optional<bool> passed;
};

// $defs.latency: the benchmark on a GPU.
struct Latency {
  std::optional<std::string> device;
  std::optional<long long> runs;
  std::optional<double> mean_ms, median_ms, p99_ms, min_ms, max_ms, stddev_ms;
  std::optional<double> kernel_s;  // device-event time of the timed calls
};

// $defs.artifact: the code object the worker compiled for the target.
struct ArtifactInfo {
  std::optional<std::string> path;  // as the worker names it (checked: artifact_file.h)
  std::string sha256, kind, kernel_name;  // "" where absent
  std::optional<long long> num_warps, warp_size, registers, sgprs, spills, shared_bytes, scratch_bytes,
      size_bytes;
  std::optional<double> occupancy;
  std::vector<long long> grid;      // empty where absent
  nlohmann::json object;            // the whole artifact object as sent (packaging metadata)
};

// One span during which the worker held the GPU lock (wall-clock seconds).
struct GpuSpan {
  double start = 0, end = 0;
  std::string kind;  // bench | check | setup
};

// $defs.timings.warm_up: a GPU worker's warm-up, in its first evaluation.
struct WarmUpTimings {
  std::optional<double> context_s, compile_s, kernels_s;
  std::optional<double> compile_wait_s;  // of compile_s: waiting for another worker's compile of it
  std::optional<double> wait_s;          // the first evaluation's wait for it
};

// $defs.timings.plan_import: the memory plan's fake-tensor import (only for a
// template that needs values; others are planned on meta tensors), once per
// worker, in the evaluation that needed it.
struct PlanImportTimings {
  std::optional<double> import_s;  // its own seconds (in a thread)
  std::optional<double> wait_s;    // what the memory plans waited for it
};

// $defs.timings
struct Timings {
  std::optional<double> compile_s, check_s, bench_s, setup_s, preload_s, gpu_s, kernel_s;
  // Where the evaluation's time went besides those (a worker's first one
  // pays for its set-up): the template module's import, the job's memory plan,
  // the set-up's input draws and references, the check's wait for the set-up
  // thread (and that thread's for the warm-up), the memory wait of a check
  // alone, reading the driver's utilisation samples, and the whole
  // evaluation in the worker.
  std::optional<double> module_s, plan_s, inputs_s, reference_s, setup_wait_s, setup_warm_wait_s, memory_wait_s,
      util_s, worker_s;
  std::map<std::string, double> lock_wait_s;  // the wait for the GPU lock per kind (setup, check, bench)
  std::optional<WarmUpTimings> warm_up;
  std::optional<PlanImportTimings> plan_import;
  std::vector<GpuSpan> gpu_spans;
  // The GPU driver's utilisation samples since the worker's previous answer:
  // (unix seconds, percent of the sample period during which a kernel ran).
  std::vector<std::pair<double, double>> util_samples;
};

// $defs.evaluation_result: the result of `evaluate`.
struct EvaluationResult {
  EvalStatus status = EvalStatus::kCrash;
  std::string message;      // "" where absent
  std::optional<std::string> exec_device;
  std::optional<Correctness> correctness;
  std::optional<Latency> latency;
  std::optional<ArtifactInfo> artifact;
  std::optional<Traffic> traffic;
  Timings timings;
  nlohmann::json raw = nlohmann::json::object();  // the object as sent, recorded whole
};

// An EvaluationResult from a result object that was validated before (reply.h)
// or stored by the catalog: a member of the wrong type, or missing, is left
// unset; an unknown or absent status reads as crash; a non-object reads as an
// empty result. Accepts the whole answer ({"id", "ok", "result": {...}}) too.
// Never throws.
EvaluationResult read_evaluation_result(const nlohmann::json& result);

// A $defs.latency object (also reference_info's eager benchmark), read by the
// same rules; nullopt when it is not an object. Never throws.
std::optional<Latency> read_latency(const nlohmann::json& latency);

// The schema's member paths EvaluationResult reads, with the JSON type it
// expects ("number", "integer", "string", "boolean", "array"): for the test
// that checks them against protocol.json.
const std::vector<std::pair<std::string, std::string>>& evaluation_result_fields();

}  // namespace kiln
