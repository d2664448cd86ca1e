// An H200-like target for the strategy and generator tests: 132 SMs, 64 warps
// and 228 KiB of shared memory per SM, 4.8 TB/s. Not configs/targets/H200.yaml:
// the tests must not move when the knowledge base is refined.
#pragma once
#include "knowledge/targets.h"

namespace kiln::testing_targets {

inline Target h200_like() {
  Target t;
  t.name = "TestGPU";
  t.vendor = "nvidia";
  t.backend = "cuda";
  t.arch = "sm_90";
  t.warp_size = 32;
  t.compute_units = 132;
  t.simds_per_cu = 4;
  t.lds_bytes_per_cu = 233472;
  t.max_shared_per_block = 232448;
  t.registers_per_cu = 65536;
  t.max_waves_per_simd = 16;
  t.memory_bandwidth_gbs = 4800;
  t.peak_tflops = {{"fp32", 66.9}, {"bf16", 989.4}};
  return t;
}

}  // namespace kiln::testing_targets
