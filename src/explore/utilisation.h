// The GPU driver's own account of how busy each GPU was during a run.
//
// Workers on a GPU send the driver's utilisation samples with each answer
// (timings.util_samples, worker/kiln_worker/evaluation/utilisation.py): each
// sample is the percentage of one short period (1/6 s to 1 s by product)
// during which any kernel ran on that GPU. Every worker of one GPU reads the
// same driver buffer, so their samples repeat: DriverUtilisation keeps one
// sample per (GPU, timestamp). The run's figure per GPU is the mean of its
// samples inside the run; the samples cover only periods some worker
// reported after, so `coverage` says how much of the run they span.
//
// Threading: not thread-safe; the explorer uses it from its io_context
// thread. Failure: none; a GPU without samples has no figure.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "evaluate/reply.h"

namespace kiln {

class DriverUtilisation {
 public:
  struct Figure {
    double fraction = 0;   // mean busy share of the samples in the window, 0..1
    size_t samples = 0;    // distinct samples in the window
    double coverage = 0;   // (last - first sample time) / window length, 0..1
  };

  explicit DriverUtilisation(size_t gpus) : samples_(gpus) {}

  // Takes the samples of one worker answer for GPU index `gpu`, and removes
  // them from every view of the answer (the typed timings, the result that is
  // recorded, the reply as received): they describe the GPU, not the
  // candidate, and are not recorded with it.
  void take(size_t gpu, CheckedAnswer& answer);

  // The figure for one GPU over [from, to] (unix seconds); nullopt without samples there.
  std::optional<Figure> figure(size_t gpu, double from, double to) const;

  // Over every GPU: the mean of the GPUs' fractions (each GPU weighted
  // alike), their summed samples and the lowest coverage; nullopt when no
  // GPU has a figure.
  std::optional<Figure> overall(double from, double to) const;

 private:
  std::vector<std::map<double, double>> samples_;  // per GPU: time -> percent
};

// Removes timings.util_samples from a worker answer (or a result) without
// reading them: what a caller that keeps no figure (the MPI coordinator) does,
// so that they are never recorded with the candidate.
void drop_util_samples(nlohmann::json& answer);

}  // namespace kiln
