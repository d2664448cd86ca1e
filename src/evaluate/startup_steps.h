// The steps of an evaluator worker's start, as its hello answers them
// ("startup": seconds per step, worker/kiln_worker/service/server.py main): preload
// (a forked worker: the fork server's imports, done once for all), process
// (the interpreter and the imports before main; a forked worker: since the fork), imports (torch, triton, the
// device query), and on a GPU context (the CUDA/HIP context), compile (the
// check's comparison kernel) and kernels (the warm-up's tiny kernels, the wait
// for the GPU lock included), then library (the template library) and hello
// (the hello answer's own work: the templates' digests).
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

// The numeric entries of a hello result's "startup" ({} when absent).
std::map<std::string, double> startup_steps(const nlohmann::json& hello_result);

// "process 0.23 s, imports 2.61 s, ..." in the order the steps happen; steps
// this list does not know follow in name order. "" when there are none.
std::string describe_startup(const std::map<std::string, double>& steps);

}  // namespace kiln
