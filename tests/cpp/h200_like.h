// An H200-like target for the strategy and generator tests: 132 SMs, 64 warps
// and 228 KiB of shared memory per SM, 4.8 TB/s. Not configs/targets/H200.yaml:
// the tests must not move when the knowledge base is refined.
#pragma once
#include "knowledge/targets.h"

namespace kiln::testing_targets {

inline Target h200_like() {
  return {.name = "TestGPU", .vendor = "nvidia", .backend = "cuda", .arch = "sm_90", .warp_size = 32,
          .compute_units = 132, .simds_per_cu = 4, .lds_bytes_per_cu = 233472,
          .max_shared_per_block = 232448, .registers_per_cu = 65536, .max_waves_per_simd = 16,
          .memory_bandwidth_gbs = 4800, .peak_tflops = {{"fp32", 66.9}, {"bf16", 989.4}}};
}

}  // namespace kiln::testing_targets
