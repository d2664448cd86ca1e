// What kiln-rt does with an open package, as functions: the static report, the
// on-device verification of docs/package-format.md "verify", and timing with
// an L2 flush. Each uses the package's backend from the calling thread.
#pragma once
#include <string>
#include <vector>

#include "package.h"

namespace kiln::rt {

// Every variant's static problems, as "kernel label / target rank N: problem".
std::vector<std::string> static_problems(const Package& p);

// Launches variant v of kernel k at its own shape on the verify data's inputs
// (SplitMix64, outputs NaN-poisoned) and checks the outputs. "" when it passes.
// Throws Error when the package carries no verify data for it or a launch fails.
std::string verify_on_device(Package& p, size_t k, size_t v);

struct Timing {
  double median_ms = 0;
  std::vector<double> samples_ms;
};
// Device-event timing of `reps` launches, each after writing a buffer larger
// than the L2 cache (so every run starts cold), after `warmup` launches.
Timing time_on_device(Package& p, size_t k, size_t v, int reps, int warmup = 3);

}  // namespace kiln::rt
