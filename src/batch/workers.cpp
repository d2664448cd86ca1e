#include "batch/workers.h"

#include <algorithm>
#include <thread>

namespace kiln::batch {

int default_workers(const RunOptions& o) {
  const bool on_gpus = o.device == "gpu" || !o.gpus.ids.empty();
  if (!on_gpus) return 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int gpu_count = std::max<int>(1, static_cast<int>(o.gpus.ids.size()));
  return std::clamp(cores - 1, 1, 12 * gpu_count);
}

}  // namespace kiln::batch
