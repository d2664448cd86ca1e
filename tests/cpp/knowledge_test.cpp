// Targets, operators and principles: the shipped files load and mean what they
// say; bad files fail with file:line:column.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "manifest/manifest.h"
#include "shipped_knowledge.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln {
namespace {

using kiln_test::knowledge;

// A scratch directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("kiln_knowledge_test_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& file, const std::string& text) const {
    std::ofstream(path / file) << text;
    return path / file;
  }
};

// Runs f, expects std::runtime_error whose message starts with `prefix`.
template <class F>
void expect_error(F f, const std::string& prefix, const std::string& contains = "") {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << prefix;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(prefix, 0), 0u) << what << "\nwanted prefix: " << prefix;
    if (!contains.empty()) {
      EXPECT_NE(what.find(contains), std::string::npos) << what;
    }
  }
}

// ---------------------------------------------------------------------------
// Targets

TEST(Targets, AllShippedTargetsLoad) {
  const auto& reg = knowledge().targets;
  EXPECT_EQ(reg.names(), (std::vector<std::string>{"H100", "H200", "MI100", "MI250X", "MI300X", "MI325X",
                                                   "MI355X", "RX6900XT", "RX7900XTX"}));
  for (const auto& t : reg.all()) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE(t.vendor == "amd" || t.vendor == "nvidia");
    EXPECT_EQ(t.backend, t.vendor == "amd" ? "hip" : "cuda");
    EXPECT_GT(t.compute_units, 0);
    EXPECT_GT(t.lds_bytes_per_cu, 0);
    EXPECT_GT(t.max_shared_per_block, 0);
    EXPECT_LE(t.max_shared_per_block, t.lds_bytes_per_cu);
    EXPECT_GT(t.registers_per_cu, 0);
    EXPECT_GT(t.max_waves_per_simd, 0);
    EXPECT_GT(t.l2_bytes, 0);
    EXPECT_GT(t.memory_bandwidth_gbs, 0);
    for (const char* d : {"fp32", "fp16", "bf16"}) EXPECT_GT(t.peak_tflops.count(d) ? t.peak_tflops.at(d) : 0, 0) << d;
    EXPECT_FALSE(t.device_match.empty());
    EXPECT_TRUE(t.triton_supported);
    EXPECT_TRUE(t.raw["sources"].is_array() && !t.raw["sources"].empty());
    EXPECT_EQ(t.raw["name"], t.name);
    EXPECT_EQ(t.file.filename(), t.name + ".yaml");
  }
}

TEST(Targets, KeyFacts) {
  const auto& reg = knowledge().targets;
  const Target* mi300x = reg.find("MI300X");
  ASSERT_NE(mi300x, nullptr);
  EXPECT_EQ(mi300x->arch, "gfx942");
  EXPECT_EQ(mi300x->warp_size, 64);
  EXPECT_EQ(mi300x->compute_units, 304);
  EXPECT_EQ(mi300x->lds_bytes_per_cu, 64 * 1024);
  EXPECT_EQ(mi300x->infinity_cache_bytes, 256LL << 20);
  EXPECT_EQ(reg.find("MI325X")->arch, "gfx942");
  EXPECT_EQ(reg.find("MI250X")->arch, "gfx90a");
  EXPECT_EQ(reg.find("MI250X")->compute_units, 110);
  EXPECT_EQ(reg.find("MI355X")->arch, "gfx950");
  EXPECT_EQ(reg.find("MI355X")->compute_units, 256);
  EXPECT_EQ(reg.find("MI355X")->lds_bytes_per_cu, 160 * 1024);
  EXPECT_EQ(reg.find("MI100")->arch, "gfx908");
  EXPECT_EQ(reg.find("RX7900XTX")->arch, "gfx1100");
  EXPECT_EQ(reg.find("RX7900XTX")->warp_size, 32);
  EXPECT_EQ(reg.find("RX7900XTX")->compute_units, 96);
  EXPECT_EQ(reg.find("RX6900XT")->arch, "gfx1030");
  EXPECT_EQ(reg.find("H100")->arch, "sm_90");
  EXPECT_EQ(reg.find("H100")->compute_units, 132);
  EXPECT_EQ(reg.find("H200")->compute_units, 132);
  EXPECT_DOUBLE_EQ(reg.find("H200")->memory_bandwidth_gbs, 4800);
  EXPECT_EQ(reg.find("H200")->warp_size, 32);
}

TEST(Targets, FindByNameAndAliasCaseInsensitively) {
  const auto& reg = knowledge().targets;
  EXPECT_EQ(reg.find("mi300x")->name, "MI300X");
  EXPECT_EQ(reg.find("Instinct MI300X")->name, "MI300X");
  EXPECT_EQ(reg.find("instinct-mi300x")->name, "MI300X");
  EXPECT_EQ(reg.find("Radeon RX 7900 XTX")->name, "RX7900XTX");
  EXPECT_EQ(reg.find("rx 7900 xtx")->name, "RX7900XTX");
  EXPECT_EQ(reg.find("7900xtx")->name, "RX7900XTX");
  EXPECT_EQ(reg.find("h200 sxm")->name, "H200");
  EXPECT_EQ(reg.find("MI250X GCD")->name, "MI250X");
  EXPECT_EQ(reg.find("MI300"), nullptr);
  EXPECT_EQ(reg.find("B200"), nullptr);
  EXPECT_EQ(reg.find(""), nullptr);
  EXPECT_EQ(reg.find("gfx942"), nullptr);  // an arch is not a target: MI300X and MI325X share it
}

TEST(Targets, MatchesDevice) {
  const auto& reg = knowledge().targets;
  auto m = [&](const char* target, const char* dev) {
    return TargetRegistry::matches_device(*reg.find(target), dev);
  };
  EXPECT_TRUE(m("MI300X", "AMD Instinct MI300X"));
  EXPECT_TRUE(m("MI300X", "amd instinct mi300x vf"));
  EXPECT_FALSE(m("MI300X", "AMD Instinct MI325X"));
  EXPECT_TRUE(m("MI250X", "AMD Instinct MI250X / MI250"));
  EXPECT_TRUE(m("H200", "NVIDIA H200"));
  EXPECT_FALSE(m("H200", "NVIDIA H100 80GB HBM3"));
  EXPECT_TRUE(m("H100", "NVIDIA H100 80GB HBM3"));
  EXPECT_FALSE(m("H100", "NVIDIA H200"));
  EXPECT_TRUE(m("RX7900XTX", "AMD Radeon RX 7900 XTX"));
  EXPECT_FALSE(m("RX7900XTX", "cpu (Triton interpreter)"));
  EXPECT_FALSE(m("H200", ""));
}

TEST(Targets, RawIsTheDocumentAsJson) {
  const Target* t = knowledge().targets.find("MI300X");
  EXPECT_EQ(t->raw["compute_units"], 304);
  EXPECT_TRUE(t->raw["compute_units"].is_number_integer());
  EXPECT_TRUE(t->raw["memory_bandwidth_gbs"].is_number());
  EXPECT_EQ(t->raw["backend"], "hip");
  EXPECT_EQ(t->raw["peak_tflops"]["fp16"], 1307.4);
  EXPECT_EQ(t->raw["device_match"], json::array({"MI300X"}));
  EXPECT_EQ(t->raw["triton_supported"], true);
}

const char* kGoodTarget =
    "name: X1\nvendor: amd\nbackend: hip\narch: gfx942\nwarp_size: 64\ncompute_units: 4\n";

TEST(TargetErrors, BadFiles) {
  {
    TempDir d("missing");
    auto f = d.write("X.yaml", "name: X\nvendor: amd\nbackend: hip\nwarp_size: 64\ncompute_units: 4\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":1:1: missing required key 'arch'");
  }
  {
    TempDir d("syntax");
    auto f = d.write("X.yaml", "name: X\nvendor: [amd\nbackend: hip\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":3:", "YAML syntax error");
  }
  {
    TempDir d("backend");
    auto f = d.write("X.yaml", "name: X\nvendor: amd\nbackend: cuda\narch: gfx942\nwarp_size: 64\ncompute_units: 4\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":3:10: backend 'cuda' does not fit vendor 'amd'");
  }
  {
    TempDir d("warp");
    auto f = d.write("X.yaml", "name: X\nvendor: amd\nbackend: hip\narch: gfx942\nwarp_size: 48\ncompute_units: 4\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":5:12: warp_size must be 32 or 64");
  }
  {
    TempDir d("type");
    auto f = d.write("X.yaml", std::string(kGoodTarget) + "l2_bytes: lots\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":7:11: l2_bytes must be an integer, got the string \"lots\"");
  }
  {
    TempDir d("unknown");
    auto f = d.write("X.yaml", std::string(kGoodTarget) + "l2_byte: 4\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":7:1: unknown key 'l2_byte' (did you mean 'l2_bytes'?)");
  }
  {
    TempDir d("arch");
    auto f = d.write("X.yaml", "name: X\nvendor: nvidia\nbackend: cuda\narch: gfx942\nwarp_size: 32\ncompute_units: 4\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":4:7: a cuda target's arch must look like sm_90");
  }
  {
    TempDir d("dup");
    d.write("A.yaml", std::string(kGoodTarget) + "aliases: [shared]\n");
    auto f = d.write("B.yaml", "name: X2\naliases: [SHARED]\nvendor: amd\nbackend: hip\narch: gfx942\nwarp_size: 64\ncompute_units: 4\n");
    expect_error([&] { TargetRegistry::load(d.path); }, f.string() + ":1:1: target name or alias 'SHARED' is already used by X1");
  }
  {
    TempDir d("empty");
    expect_error([&] { TargetRegistry::load(d.path); }, d.path.string() + ": no target files");
  }
  expect_error([&] { TargetRegistry::load("/nonexistent/kiln/targets"); }, "/nonexistent/kiln/targets: not a directory");
}

TEST(TargetErrors, GoodMinimalFile) {
  TempDir d("minimal");
  d.write("X1.yaml", kGoodTarget);
  d.write("README.md", "not a target");
  auto reg = TargetRegistry::load(d.path);
  ASSERT_EQ(reg.names(), std::vector<std::string>{"X1"});
  EXPECT_EQ(reg.find("x1")->simds_per_cu, 4);
  EXPECT_TRUE(reg.find("x1")->device_match.empty());
  EXPECT_FALSE(TargetRegistry::matches_device(*reg.find("x1"), "anything"));
}

// ---------------------------------------------------------------------------
// Operators

TEST(Operators, RegistryLoads) {
  const auto& ops = knowledge().operators;
  EXPECT_EQ(ops.names(), (std::vector<std::string>{"add", "bias_gelu", "softmax", "layernorm", "matmul", "conv2d",
                                                  "rmsnorm", "row_sum", "row_mean", "row_max",
                                                  "gemm_bias_act", "attention", "scaled_softmax", "log_softmax",
                                                  "cumsum", "reduce_dim", "pointwise", "bmm", "pool2d", "cumprod",
                                                  "norm_dim"}));
  EXPECT_TRUE(ops.find("pointwise")->params[0].required);  // expr
  const OperatorSpec* add = ops.find("add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->module, "elementwise");
  EXPECT_EQ(add->min_rank, 1);
  EXPECT_EQ(add->max_rank, 4);
  EXPECT_TRUE(add->params.empty());
  const OperatorSpec* mm = ops.find("matmul");
  EXPECT_EQ(mm->min_rank, 3);
  EXPECT_EQ(mm->max_rank, 3);
  EXPECT_EQ(mm->dim_names, (std::vector<std::string>{"M", "N", "K"}));
  EXPECT_EQ(mm->dtypes, (std::vector<std::string>{"fp16", "bf16"}));
  const OperatorSpec* conv = ops.find("conv2d");
  ASSERT_EQ(conv->params.size(), 4u);
  EXPECT_EQ(conv->params[0].name, "out_channels");
  EXPECT_EQ(conv->params[0].type, "int");
  EXPECT_EQ(conv->params[0].default_value, 64);
  EXPECT_EQ(conv->params[0].min, 1.0);
  EXPECT_EQ(conv->params[1].name, "kernel_size");
  EXPECT_EQ(conv->params[1].choices, (std::vector<json>{1, 3}));
  const OperatorSpec* ln = ops.find("layernorm");
  EXPECT_EQ(ln->params[0].type, "float");
  EXPECT_DOUBLE_EQ(ln->params[0].default_value.get<double>(), 1e-5);
  const OperatorSpec* bg = ops.find("bias_gelu");
  EXPECT_EQ(bg->params[0].choices, (std::vector<json>{"none", "tanh"}));
  EXPECT_EQ(bg->params[0].default_value, "none");
  EXPECT_EQ(ops.find("Softmax"), nullptr);
  // every shipped operator says how long a candidate takes to compile (the claim order)
  for (const auto& name : ops.names()) EXPECT_GT(ops.find(name)->compile_s, 0.0) << name;
  EXPECT_GT(conv->compile_s, mm->compile_s);
}

TEST(Operators, CompileSecondsDefaultAndBounds) {
  TempDir d("ops");
  const std::string head = "operators:\n  x:\n    module: m\n    shape: {rank: 1}\n    dtypes: [fp32]\n";
  auto f = d.write("o.yaml", head);
  EXPECT_EQ(OperatorRegistry::load(f).find("x")->compile_s, OperatorSpec::kDefaultCompileS);
  f = d.write("o.yaml", head + "    compile_s: 1.5\n");
  EXPECT_EQ(OperatorRegistry::load(f).find("x")->compile_s, 1.5);
  f = d.write("o.yaml", head + "    compile_s: -1\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":6:16: operator 'x': compile_s must be >= 0");
  f = d.write("o.yaml", head + "    compile_s: slow\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":6:16: operator 'x' compile_s must be a number");
}

TEST(OperatorErrors, BadFiles) {
  TempDir d("ops");
  auto f = d.write("o.yaml", "version: 1\noperators:\n  x:\n    module: m\n    shape: {rank: 2}\n    dtypes: [fp64]\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":6:13: operator 'x': unknown dtype 'fp64'");
  f = d.write("o.yaml", "operators:\n  x:\n    module: m\n    shape: {rank: 1}\n    dtypes: [fp32]\n"
                        "    params:\n      p: {type: int}\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":7:10: operator 'x' param 'p': give a default or mark it required: true");
  f = d.write("o.yaml", "operators:\n  x:\n    module: m\n    shape: {rank: 1}\n    dtypes: [fp32]\n"
                        "    params:\n      p: {type: integer, default: 1}\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":7:17: operator 'x' param 'p': type must be one of");
  f = d.write("o.yaml", "operators:\n  x:\n    modul: m\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":3:5: unknown key 'modul' in operator 'x' (did you mean 'module'?)");
  f = d.write("o.yaml", "operators:\n  x:\n    module: m\n    shape: {min_rank: 3, max_rank: 2}\n    dtypes: [fp32]\n");
  expect_error([&] { OperatorRegistry::load(f); }, f.string() + ":4:12: operator 'x': ranks must satisfy");
  expect_error([&] { OperatorRegistry::load(d.path / "missing.yaml"); }, (d.path / "missing.yaml").string() + ": cannot open file");
}

// ---------------------------------------------------------------------------
// Principles

TEST(Principles, ShippedPrinciplesLoad) {
  const auto& reg = knowledge().principles;
  for (const char* n : {"avoid_global_memory", "maximize_register_reuse", "avoid_atomics", "maximize_occupancy",
                        "use_matrix_cores", "fit_lds", "coalesce_memory_access", "avoid_register_spills"})
    EXPECT_NE(reg.find(n), nullptr) << n;
  for (const auto& name : reg.names()) {
    const Principle* p = reg.find(name);
    SCOPED_TRACE(name);
    EXPECT_FALSE(p->description.empty());
    EXPECT_FALSE(p->prompt.empty());
    EXPECT_GE(p->weight, 0.0);
    EXPECT_LE(p->weight, 1.0);
    for (const char* k : {"prune", "bound", "order"}) EXPECT_TRUE(p->rules[k].is_array()) << k;
  }
  const Principle* agm = reg.find("avoid_global_memory");
  EXPECT_EQ(agm->rules["order"], json::parse(R"([{"key": "BLOCK_*", "dir": "desc"}])"));
  EXPECT_EQ(agm->rules["bound"], json::parse(R"([{"key": "num_stages", "op": ">=", "value": 2}])"));
  const Principle* aa = reg.find("avoid_atomics");
  EXPECT_EQ(aa->rules["prune"][0], json::parse(R"({"key": "SPLIT_K", "op": ">", "value": 1})"));
  EXPECT_EQ(reg.find("fit_lds")->backends, std::vector<std::string>{"hip"});
  EXPECT_EQ(reg.find("nope"), nullptr);
}

std::vector<json> configs(const char* text) { return json::parse(text).get<std::vector<json>>(); }

TEST(PrincipleRules, PruneAndBound) {
  const auto& reg = knowledge().principles;
  auto space = configs(R"([
    {"BLOCK_M": 64, "BLOCK_N": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 64, "SPLIT_K": 4, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 64, "USE_ATOMIC_ADD": true, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 64, "USE_ATOMIC_ADD": false, "num_warps": 4, "num_stages": 1}
  ])");
  auto r = apply_principles(space, {reg.find("avoid_atomics")});
  EXPECT_FALSE(r.relaxed);
  EXPECT_EQ(r.removed, 2u);
  ASSERT_EQ(r.configs.size(), 2u);
  EXPECT_EQ(r.configs[0], space[0]);
  EXPECT_EQ(r.configs[1], space[3]);

  r = apply_principles(space, {reg.find("avoid_atomics"), reg.find("avoid_global_memory")});
  ASSERT_EQ(r.configs.size(), 1u);  // num_stages 1 is out of bounds
  EXPECT_EQ(r.configs[0], space[0]);
}

TEST(PrincipleRules, OrderByTileAndPerWarp) {
  const auto& reg = knowledge().principles;
  auto space = configs(R"([
    {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 1, "num_stages": 2},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2},
    {"num_warps": 4, "num_stages": 2}
  ])");
  // Tile size desc: 8192, 4096, 1024; the config without BLOCK_* last.
  auto r = apply_principles(space, {reg.find("avoid_global_memory")});
  EXPECT_EQ(r.configs[0], space[1]);
  EXPECT_EQ(r.configs[1], space[2]);
  EXPECT_EQ(r.configs[2], space[0]);
  EXPECT_EQ(r.configs[3], space[3]);
  // Per warp desc: 2048 (64x64/2), 1024 (32x32/1 and 128x64/8, stable).
  r = apply_principles(space, {reg.find("maximize_register_reuse")});
  EXPECT_EQ(r.configs[0], space[2]);
  EXPECT_EQ(r.configs[1], space[0]);
  EXPECT_EQ(r.configs[2], space[1]);
  // The heavier principle's order is the more significant key.
  r = apply_principles(space, {reg.find("maximize_register_reuse"), reg.find("avoid_global_memory")});
  EXPECT_EQ(r.configs[0], space[1]);
}

TEST(PrincipleRules, RelaxedWhenEverythingWouldGo) {
  const auto& reg = knowledge().principles;
  auto space = configs(R"([{"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1},
                           {"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 1}])");
  auto r = apply_principles(space, {reg.find("avoid_global_memory")});
  EXPECT_TRUE(r.relaxed);
  EXPECT_EQ(r.removed, 0u);
  ASSERT_EQ(r.configs.size(), 2u);
  EXPECT_EQ(r.configs[0]["BLOCK_SIZE"], 2048);  // still ordered
}

TEST(PrincipleRules, BackendFilter) {
  const auto& reg = knowledge().principles;
  auto space = configs(R"([{"BLOCK_M": 64, "num_stages": 3}, {"BLOCK_M": 64, "num_stages": 2}])");
  EXPECT_EQ(apply_principles(space, {reg.find("fit_lds")}, "hip").configs.size(), 1u);
  EXPECT_EQ(apply_principles(space, {reg.find("fit_lds")}, "cuda").configs.size(), 2u);
  EXPECT_EQ(apply_principles(space, {reg.find("fit_lds")}).configs.size(), 1u);
}

TEST(PrincipleRules, Conditions) {
  auto holds = [](const char* cond, const char* config) {
    return rule_condition_holds(json::parse(cond), json::parse(config));
  };
  EXPECT_EQ(holds(R"({"key": "A", "op": ">", "value": 1})", R"({"A": 2})"), true);
  EXPECT_EQ(holds(R"({"key": "A", "op": ">", "value": 1})", R"({"A": 1})"), false);
  EXPECT_EQ(holds(R"({"key": "A", "op": ">", "value": 1})", R"({"B": 2})"), std::nullopt);
  EXPECT_EQ(holds(R"({"key": "A", "op": "in", "value": [1, 2]})", R"({"A": 2})"), true);
  EXPECT_EQ(holds(R"({"key": "A", "op": "==", "value": true})", R"({"A": 1})"), true);
  EXPECT_EQ(holds(R"({"key": "K", "op": "==", "value": "x"})", R"({"K": "x"})"), true);
  EXPECT_EQ(holds(R"({"key": "K", "op": "in", "value": ["y"]})", R"({"K": "x"})"), false);
  EXPECT_EQ(holds(R"({"key": "BLOCK_*", "op": ">=", "value": 4096})", R"({"BLOCK_M": 64, "BLOCK_N": 64})"), true);
  EXPECT_EQ(holds(R"({"key": "BLOCK_*", "per": "num_warps", "op": "==", "value": 1024})",
                  R"({"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4})"), true);
  EXPECT_EQ(holds(R"({"key": "*ATOMIC*", "op": "!=", "value": false})", R"({"USE_ATOMIC": 0})"), false);
}

TEST(PrincipleErrors, BadFiles) {
  TempDir d("principles");
  auto f = d.write("p.yaml", "principles:\n  x:\n    description: d\n    prompt: p\n    rules:\n      prune: [{key: A, op: \"=>\", value: 1}]\n");
  expect_error([&] { PrincipleRegistry::load(f); }, f.string() + ":6:28: op must be one of");
  f = d.write("p.yaml", "principles:\n  x:\n    description: d\n    prompt: p\n    rules:\n      sort: []\n");
  expect_error([&] { PrincipleRegistry::load(f); }, f.string() + ":6:7: unknown rule kind 'sort'");
  f = d.write("p.yaml", "principles:\n  x:\n    description: d\n    prompt: p\n    rules:\n      order: [{key: A, dir: up}]\n");
  expect_error([&] { PrincipleRegistry::load(f); }, f.string() + ":6:29: dir must be asc or desc");
  f = d.write("p.yaml", "principles:\n  x:\n    description: d\n    rules: {}\n");
  expect_error([&] { PrincipleRegistry::load(f); }, f.string() + ":3:5: principle 'x': missing 'prompt'");
  f = d.write("p.yaml", "principles:\n  x:\n    description: d\n    prompt: p\n    weight: heavy\n");
  expect_error([&] { PrincipleRegistry::load(f); }, f.string() + ":5:13: weight must be a number");
  f = d.write("p.yaml", "principles:\n  x:\n    description: d\n    prompt: p\n    rules:\n      bound: [{key: A, op: \"<\", value: big}]\n");
  expect_error([&] { PrincipleRegistry::load(f); }, f.string() + ":6:40: op '<' needs a number");
  f = d.write("p.yaml", "version: 1\nprinciple: {}\n");  // the registry files share one reader
  expect_error([&] { PrincipleRegistry::load(f); },
               f.string() + ":2:1: unknown key 'principle' in the principles file (did you mean 'principles'?)");
}

TEST(KnowledgeLoad, MissingHome) {
  expect_error([] { Knowledge::load("/nonexistent/kiln"); }, "/nonexistent/kiln/configs/targets: not a directory");
}

}  // namespace
}  // namespace kiln
