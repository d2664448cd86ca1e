// GPU targets: the hardware knowledge in configs/targets/*.yaml.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

struct Target {
  std::string name;                 // "MI300X" (the file's `name:`)
  std::vector<std::string> aliases; // other accepted spellings, e.g. "mi300x"
  std::string vendor;               // "amd" | "nvidia"
  std::string backend;              // Triton backend: "hip" | "cuda"
  std::string arch;                 // "gfx942" | "sm_90"
  int warp_size = 64;               // wavefront / warp size
  int compute_units = 0;            // CUs (AMD) / SMs (NVIDIA)
  int simds_per_cu = 4;             // AMD SIMDs per CU; 4 sub-partitions per SM on NVIDIA
  long long lds_bytes_per_cu = 0;   // LDS / shared memory per CU/SM
  long long max_shared_per_block = 0;
  long long registers_per_cu = 0;   // 32-bit registers per CU/SM (VGPR file on AMD)
  int max_waves_per_simd = 0;       // AMD: waves per SIMD; NVIDIA: warps per SM / 4
  long long l2_bytes = 0;
  long long infinity_cache_bytes = 0;
  double memory_bandwidth_gbs = 0;  // peak DRAM/HBM bandwidth
  // Dense peaks at boost clock, no sparsity: fp32 = vector FP32 (VALU / CUDA cores),
  // fp16 and bf16 = matrix units (MFMA / WMMA / tensor cores). Files may add more
  // keys (fp32_matrix for AMD MFMA FP32, tf32 for NVIDIA tensor cores).
  std::map<std::string, double> peak_tflops;
  std::vector<std::string> device_match;      // substrings of a device name that mean "this kind"
  bool triton_supported = true;     // Triton 3.6 compiles for this arch (checked by cross-compile)
  std::filesystem::path file;       // the YAML file it came from
  nlohmann::json raw;               // the whole YAML document, for the worker
};

class TargetRegistry {
 public:
  // Loads every *.yaml under dir; throws std::runtime_error naming file:line on bad files.
  static TargetRegistry load(const std::filesystem::path& dir);

  // By name or alias, case-insensitive, ignoring spaces, '-' and '_'
  // ("rx 7900 xtx" finds RX7900XTX); nullptr if unknown.
  const Target* find(const std::string& name) const;
  std::vector<std::string> names() const;   // canonical names, sorted
  const std::vector<Target>& all() const { return targets_; }

  // True when `device_name` (as the worker reports it) is a device of this target's kind:
  // it contains one of t.device_match, case-insensitively.
  static bool matches_device(const Target& t, const std::string& device_name);

 private:
  std::vector<Target> targets_;
};

}  // namespace kiln
