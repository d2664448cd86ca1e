// Which GPU an evaluator uses: a `kiln run` spreads its slots over the node's
// GPUs (select_gpus, slot i on GPU i mod G); a `kiln-mpi` worker rank binds
// all its slots to one GPU by its node-local rank.
//
// A node's GPUs: KILN_GPUS_PER_NODE when set (0 forces CPU slots), else the
// devices a launcher already made visible (CUDA_VISIBLE_DEVICES /
// ROCR_VISIBLE_DEVICES, e.g. Slurm's --gpus), else `nvidia-smi -L` (NVIDIA) or
// the ROCm tools' view (`rocm-smi` present: the KFD topology's GPU nodes).
// The GPU-using ranks of a node take them in node-local rank order (the order
// of OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID), one each; more ranks than
// GPUs share round-robin, with a warning. The binding is passed to the rank's
// evaluators only (CUDA_VISIBLE_DEVICES=<id> on NVIDIA; ROCR_VISIBLE_DEVICES=<id>
// with HIP_VISIBLE_DEVICES=0 and CUDA_VISIBLE_DEVICES=0 on AMD, since HIP
// numbers what ROCr leaves visible from 0).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct NodeGpus {
  std::string vendor;                 // "nvidia", "amd", or "" (none found)
  std::vector<std::string> ids;       // device ids usable on this node
  std::string source;                 // how they were found (for logs)
};

// Detects the node's GPUs (see above). Never throws.
NodeGpus detect_node_gpus();

// The node-local rank the launcher gives (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID, MPI_LOCALRANKID, PMI_LOCAL_RANK); nullopt when none is set.
std::optional<int> launcher_local_rank();

// Set in each evaluator's environment: how many evaluators share its GPU.
// The evaluator bounds the inputs it caches to its share of the GPU's memory.
inline constexpr const char* kGpuSharersEnv = "KILN_GPU_SHARERS";

struct GpuBinding {
  std::string gpu;                                // the id assigned, "" = CPU slots
  std::map<std::string, std::string> env;         // for the evaluators
  std::string note;                               // a warning (sharing, --device gpu without GPUs)
};

// The GPUs `kiln run --gpus SPEC` uses, from the node's: "all" (every one),
// a count N (the first N), or a comma list of ids (each must be one of the
// node's). Throws std::invalid_argument naming the problem (a count above the
// node's GPUs, an id it does not have, a malformed spec).
NodeGpus select_gpus(const NodeGpus& node, const std::string& spec);

// `index`: this rank's position among the node's GPU-using ranks. `device`:
// auto | cpu | gpu (the --device option); cpu never binds. The env carries
// kGpuSharersEnv: ceil(users_on_node / GPUs) (a caller that knows the exact
// count per GPU, like `kiln run`'s slots, overwrites it).
GpuBinding bind_gpu(const NodeGpus& gpus, int index, int users_on_node, const std::string& device);

}  // namespace kiln
