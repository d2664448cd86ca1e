// How many evaluator processes `kiln run` starts when --workers is not given.
// On GPUs, compiles (one core each) and checks of several workers overlap the
// benchmarks: a core per worker, one left for kiln itself, at most 12 per
// GPU (more workers than cores would starve the one holding a GPU). On the
// CPU (the Triton interpreter): 1. Pure apart from reading the core count.
#pragma once
#include "explore/explorer.h"

namespace kiln::batch {

// o.device and o.gpus as the run will use them.
int default_workers(const RunOptions& o);

// The most evaluator processes one run (or one kiln-mpi rank) starts: each is
// a Python interpreter with torch and Triton (hundreds of MB); --workers above
// this is refused as a usage error rather than spawned.
inline constexpr int kMaxWorkers = 256;

}  // namespace kiln::batch
