// GPU binding: which GPU each evaluator gets (kiln run slots, kiln-mpi ranks).
#include "evaluate/gpu_binding.h"

#include <cstdlib>
#include <stdexcept>

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(GpuBinding, RanksTakeTheNodesGpusInOrder) {
  NodeGpus g{"nvidia", {"0", "1", "2", "3"}, "test"};
  EXPECT_EQ(bind_gpu(g, 0, 4, "auto").env.at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(bind_gpu(g, 3, 4, "auto").env.at("CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_TRUE(bind_gpu(g, 3, 4, "auto").note.empty());
  GpuBinding shared = bind_gpu(g, 5, 6, "auto");
  EXPECT_EQ(shared.gpu, "1");
  EXPECT_NE(shared.note.find("share"), std::string::npos);
  // How many evaluators share a GPU: the evaluator sizes its input cache by it.
  EXPECT_EQ(bind_gpu(g, 3, 4, "auto").env.at(kGpuSharersEnv), "1");
  EXPECT_EQ(shared.env.at(kGpuSharersEnv), "2");
  EXPECT_EQ(bind_gpu(g, 0, 9, "auto").env.at(kGpuSharersEnv), "3");
  EXPECT_TRUE(bind_gpu(g, 0, 4, "cpu").env.empty());
  NodeGpus amd{"amd", {"4", "5"}, "test"};
  GpuBinding b = bind_gpu(amd, 1, 2, "auto");
  EXPECT_EQ(b.env.at("ROCR_VISIBLE_DEVICES"), "5");
  EXPECT_EQ(b.env.at("HIP_VISIBLE_DEVICES"), "0");
  NodeGpus none{"", {}, "none"};
  EXPECT_TRUE(bind_gpu(none, 0, 1, "auto").gpu.empty());
  EXPECT_NE(bind_gpu(none, 0, 1, "gpu").note.find("no GPU"), std::string::npos);
}

TEST(GpuBinding, KilnGpusPerNodeOverridesDetection) {
  setenv("KILN_GPUS_PER_NODE", "3", 1);
  setenv("KILN_GPU_VENDOR", "amd", 1);
  unsetenv("ROCR_VISIBLE_DEVICES");
  NodeGpus g = detect_node_gpus();
  EXPECT_EQ(g.vendor, "amd");
  EXPECT_EQ(g.ids, (std::vector<std::string>{"0", "1", "2"}));
  setenv("ROCR_VISIBLE_DEVICES", "6,7,8,9", 1);  // a launcher's restriction is honoured
  g = detect_node_gpus();
  EXPECT_EQ(g.ids, (std::vector<std::string>{"6", "7", "8"}));
  setenv("KILN_GPUS_PER_NODE", "0", 1);
  EXPECT_TRUE(detect_node_gpus().ids.empty());
  unsetenv("KILN_GPUS_PER_NODE");
  unsetenv("KILN_GPU_VENDOR");
  unsetenv("ROCR_VISIBLE_DEVICES");
}

TEST(GpuBinding, LauncherLocalRank) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(launcher_local_rank(), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  EXPECT_EQ(launcher_local_rank(), 2);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

TEST(GpuBinding, SelectGpusTakesAllACountOrAList) {
  const NodeGpus node{"nvidia", {"0", "1", "2", "3"}, "test"};
  EXPECT_EQ(select_gpus(node, "all").ids, node.ids);
  EXPECT_EQ(select_gpus(node, "2").ids, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(select_gpus(node, "3,1").ids, (std::vector<std::string>{"3", "1"}));
  EXPECT_EQ(select_gpus(node, "3,1").vendor, "nvidia");
  EXPECT_THROW(select_gpus(node, "5"), std::invalid_argument);     // more than the node has
  EXPECT_THROW(select_gpus(node, "0"), std::invalid_argument);     // none
  EXPECT_THROW(select_gpus(node, "1,9"), std::invalid_argument);   // an id it lacks
  EXPECT_THROW(select_gpus(node, ","), std::invalid_argument);
  const NodeGpus none{"", {}, "no nvidia-smi / rocm-smi GPUs"};
  EXPECT_TRUE(select_gpus(none, "all").ids.empty());               // a CPU node: unbound
  try {
    select_gpus(none, "1");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has 0 GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
