#include "evaluate/gpu_binding.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kiln {

namespace {

std::string env_or(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool on_path(const std::string& tool) {
  std::string path = env_or("PATH");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    if (::access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Lines of a command's stdout (stderr discarded); empty when it fails.
std::vector<std::string> run_lines(const std::string& cmd) {
  std::vector<std::string> out;
  FILE* f = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!f) return out;
  char buf[1024];
  while (std::fgets(buf, sizeof buf, f)) out.emplace_back(buf);
  if (::pclose(f) != 0) out.clear();
  return out;
}

int count_nvidia() {
  int n = 0;
  for (const auto& l : run_lines("nvidia-smi -L"))
    if (l.rfind("GPU ", 0) == 0) ++n;
  return n;
}

// GPU nodes of the KFD topology (CPU nodes have simd_count 0).
int count_amd() {
  namespace fs = std::filesystem;
  int n = 0;
  std::error_code ec;
  const fs::path topo = "/sys/class/kfd/kfd/topology/nodes";
  if (fs::is_directory(topo, ec)) {
    for (const auto& e : fs::directory_iterator(topo, ec)) {
      std::ifstream in(e.path() / "properties");
      std::string key;
      long long value = 0;
      while (in >> key >> value)
        if (key == "simd_count" && value > 0) ++n;
    }
    if (n > 0) return n;
  }
  for (const auto& l : run_lines("rocm-smi --showid"))
    if (l.rfind("GPU[", 0) == 0 && l.find("Device ID") != std::string::npos) ++n;
  return n;
}

std::vector<std::string> numbered(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(std::to_string(i));
  return ids;
}

}  // namespace

std::optional<int> launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}) {
    const std::string v = env_or(name);
    if (v.empty()) continue;
    char* end = nullptr;
    const long r = std::strtol(v.c_str(), &end, 10);
    if (end && *end == '\0' && r >= 0) return static_cast<int>(r);
  }
  return std::nullopt;
}

NodeGpus detect_node_gpus() {
  NodeGpus g;
  const bool nvidia = on_path("nvidia-smi");
  const bool amd = on_path("rocm-smi") || std::filesystem::exists("/dev/kfd");
  std::string vendor = env_or("KILN_GPU_VENDOR");
  if (vendor.empty()) vendor = nvidia ? "nvidia" : amd ? "amd" : "";
  const std::string visible = vendor == "amd" ? env_or("ROCR_VISIBLE_DEVICES") : env_or("CUDA_VISIBLE_DEVICES");
  const std::string forced = env_or("KILN_GPUS_PER_NODE");
  if (!forced.empty()) {
    const int n = std::max(0, std::atoi(forced.c_str()));
    g.vendor = n > 0 ? (vendor.empty() ? "nvidia" : vendor) : "";
    g.source = "KILN_GPUS_PER_NODE=" + forced;
    std::vector<std::string> v = split_list(visible);
    if (static_cast<int>(v.size()) >= n && n > 0) v.resize(static_cast<size_t>(n));
    else v = numbered(n);
    g.ids = v;
    return g;
  }
  if (!visible.empty() && !vendor.empty()) {
    g.vendor = vendor;
    g.ids = split_list(visible);
    g.source = vendor == "amd" ? "ROCR_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    if (!g.ids.empty()) return g;
  }
  struct Probe {
    bool present;
    const char* vendor;
    int (*count)();
    const char* source;
  };
  for (const Probe& p : {Probe{nvidia, "nvidia", count_nvidia, "nvidia-smi -L"},
                         Probe{amd, "amd", count_amd, "rocm-smi / KFD topology"}})
    if (int n = p.present ? p.count() : 0; n > 0) {
      g.vendor = p.vendor;
      g.ids = numbered(n);
      g.source = p.source;
      return g;
    }
  g.source = "no nvidia-smi / rocm-smi GPUs";
  return g;
}

NodeGpus select_gpus(const NodeGpus& node, const std::string& spec) {
  if (spec == "all" || spec.empty()) return node;
  NodeGpus out = node;
  const bool count = spec.find_first_not_of("0123456789") == std::string::npos;
  if (count) {
    const long n = std::strtol(spec.c_str(), nullptr, 10);
    if (n < 1) throw std::invalid_argument("--gpus " + spec + ": at least 1 (or --device cpu)");
    if (static_cast<size_t>(n) > node.ids.size())
      throw std::invalid_argument("--gpus " + spec + ": this node has " + std::to_string(node.ids.size()) +
                                  " GPU(s) (" + node.source + ")");
    out.ids.resize(static_cast<size_t>(n));
    return out;
  }
  out.ids = split_list(spec);
  if (out.ids.empty()) throw std::invalid_argument("--gpus '" + spec + "': expected all, a count or a list of ids");
  for (const auto& id : out.ids)
    if (std::find(node.ids.begin(), node.ids.end(), id) == node.ids.end())
      throw std::invalid_argument("--gpus " + spec + ": no GPU " + id + " on this node (found " +
                                  std::to_string(node.ids.size()) + " by " + node.source + ")");
  out.source = "--gpus " + spec;
  return out;
}

GpuBinding bind_gpu(const NodeGpus& gpus, int index, int users_on_node, const std::string& device) {
  GpuBinding b;
  if (device == "cpu") return b;
  if (gpus.ids.empty()) {
    if (device == "gpu") b.note = "--device gpu, but this node has no GPU (" + gpus.source + ")";
    return b;
  }
  const int n = static_cast<int>(gpus.ids.size());
  b.gpu = gpus.ids[static_cast<size_t>(std::max(0, index) % n)];
  if (users_on_node > n)
    b.note = std::to_string(users_on_node) + " evaluating ranks on this node share " + std::to_string(n) +
             " GPU(s); start one rank per GPU (plus rank 0)";
  b.env[kGpuSharersEnv] = std::to_string(std::max(1, (users_on_node + n - 1) / n));
  if (gpus.vendor == "amd") {
    b.env["ROCR_VISIBLE_DEVICES"] = b.gpu;
    b.env["HIP_VISIBLE_DEVICES"] = "0";
    b.env["CUDA_VISIBLE_DEVICES"] = "0";
  } else {
    b.env["CUDA_VISIBLE_DEVICES"] = b.gpu;
  }
  return b;
}

}  // namespace kiln
