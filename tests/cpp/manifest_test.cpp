// Manifest parsing, validation errors (file:line:column) and expansion into jobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <unistd.h>

#include "manifest/manifest.h"
#include "shipped_knowledge.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln {
namespace {

const fs::path kSource = KILN_SOURCE_DIR;

using kiln_test::knowledge;

Manifest parse(const std::string& text, const std::string& file = "m.yaml") {
  return parse_manifest(text, file, knowledge());
}

// Parses and returns the error; fails the test when there is none.
ManifestError error_of(const std::string& text, const std::string& file = "m.yaml") {
  try {
    parse(text, file);
  } catch (const ManifestError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a ManifestError for:\n" << text;
  return ManifestError(file, 0, 0, "<none>");
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------
// Bad manifests: every file in tests/data/manifests/bad starts with
//   # expect: LINE:COLUMN: message-prefix
// and must fail with exactly that location and a message starting so.

// The *.yaml files of each of `dirs` (and the `files` given), sorted.
std::vector<fs::path> yaml_files(std::initializer_list<fs::path> dirs, std::vector<fs::path> files = {}) {
  for (const fs::path& dir : dirs)
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<fs::path> bad_files() { return yaml_files({kSource / "tests/data/manifests/bad"}); }

class BadManifest : public ::testing::TestWithParam<fs::path> {};

TEST_P(BadManifest, FailsAtTheRightPlaceWithTheRightMessage) {
  const fs::path path = GetParam();
  const std::string text = read(path);
  std::smatch m;
  static const std::regex expect_re(R"(^# expect: (\d+):(\d+): ([^\n]*))");
  ASSERT_TRUE(std::regex_search(text, m, expect_re)) << path << " has no '# expect:' line";
  const int line = std::stoi(m[1]), column = std::stoi(m[2]);
  const std::string prefix = m[3];
  try {
    load_manifest(path, knowledge());
    FAIL() << path << " loaded without error";
  } catch (const ManifestError& e) {
    EXPECT_EQ(e.file(), path.string());
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
    EXPECT_EQ(e.message().rfind(prefix, 0), 0u) << "message: " << e.message() << "\nwanted prefix: " << prefix;
    const std::string where = line > 0 ? path.string() + ":" + std::to_string(line) + ":" +
                                             std::to_string(column) + ": "
                                       : path.string() + ": ";
    EXPECT_EQ(std::string(e.what()), where + e.message());
  }
}

INSTANTIATE_TEST_SUITE_P(Files, BadManifest, ::testing::ValuesIn(bad_files()),
                         [](const ::testing::TestParamInfo<fs::path>& info) {
                           return info.param.stem().string();
                         });

TEST(BadManifestFiles, ThereAreManyCases) { EXPECT_GE(bad_files().size(), 40u); }

TEST(ManifestError, FormatsFileLineColumn) {
  ManifestError e("jobs/x.yaml", 3, 7, "boom");
  EXPECT_STREQ(e.what(), "jobs/x.yaml:3:7: boom");
  EXPECT_EQ(e.message(), "boom");
  ManifestError f("jobs/x.yaml", 0, 0, "cannot read");
  EXPECT_STREQ(f.what(), "jobs/x.yaml: cannot read");
}

TEST(ManifestErrors, MissingFile) {
  try {
    load_manifest(kSource / "tests/data/manifests/does_not_exist.yaml", knowledge());
    FAIL();
  } catch (const ManifestError& e) {
    EXPECT_EQ(e.line(), 0);
    EXPECT_NE(std::string(e.what()).find("does_not_exist.yaml: cannot read"), std::string::npos);
  }
}

TEST(ManifestErrors, SuggestionOnlyWhenClose) {
  auto e = error_of("targets: [H200]\noperators:\n  - op: convolution\n    input_shape: [8]\n    dtype: fp32\n");
  EXPECT_EQ(e.message().find("did you mean"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("known operators: add, bias_gelu"), std::string::npos);
}

TEST(ManifestErrors, TargetNotSupportedByTriton) {
  // Every shipped target is supported; a registry with triton_supported: false
  // must reject the target by name.
  Knowledge k = knowledge();
  fs::path dir = fs::temp_directory_path() / ("kiln_manifest_test_targets_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "OLD.yaml") << "name: OLD\nvendor: amd\nbackend: hip\narch: gfx803\n"
                                     "warp_size: 64\ncompute_units: 36\ntriton_supported: false\n";
  k.targets = TargetRegistry::load(dir);
  try {
    parse_manifest("targets: [old]\noperators:\n  - {op: add, input_shape: [8], dtype: fp32}\n", "t.yaml", k);
    FAIL();
  } catch (const ManifestError& e) {
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), 11);
    EXPECT_NE(e.message().find("target 'OLD' (gfx803) is not supported"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(ManifestErrors, TabIndentation) {
  auto e = error_of("targets: [H200]\noperators:\n\t- op: add\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.message().rfind("YAML syntax error", 0), 0u) << e.what();
}

TEST(ManifestErrors, TwoDocuments) {
  auto e = error_of("targets: [H200]\n---\ntargets: [H100]\n");
  EXPECT_EQ(e.line(), 0);
  EXPECT_EQ(e.message(), "expected one YAML document, found 2");
}

// ---------------------------------------------------------------------------
// Good manifests: expansion, defaults and overrides.

TEST(Expansion, CrossProductOfShapesDtypesTargets) {
  Manifest m = parse(R"(
targets: [MI300X, H200]
operators:
  - op: softmax
    shapes: [[8, 16], [4, 1000]]
    dtypes: [fp16, bf16, fp32]
)");
  ASSERT_EQ(m.jobs.size(), 12u);
  // Order: shape, then dtype, then target.
  EXPECT_EQ(m.jobs[0].shape, (std::vector<long long>{8, 16}));
  EXPECT_EQ(m.jobs[0].dtype, "fp16");
  EXPECT_EQ(m.jobs[0].target, "MI300X");
  EXPECT_EQ(m.jobs[1].target, "H200");
  EXPECT_EQ(m.jobs[2].dtype, "bf16");
  EXPECT_EQ(m.jobs[6].shape, (std::vector<long long>{4, 1000}));
  std::set<std::string> distinct;
  for (const auto& j : m.jobs) distinct.insert(j.to_json(*knowledge().targets.find(j.target)).dump());
  EXPECT_EQ(distinct.size(), 12u);
}

TEST(Expansion, BuiltInDefaults) {
  Manifest m = parse("targets: [H200]\noperators:\n  - {op: add, input_shape: [1024], dtype: fp32}\n",
                     "dir/simple.yaml");
  ASSERT_EQ(m.jobs.size(), 1u);
  const JobSpec& j = m.jobs[0];
  EXPECT_EQ(m.name, "simple");
  EXPECT_EQ(j.explore.generator, "template");
  EXPECT_EQ(j.explore.strategy, "exhaustive");
  EXPECT_EQ(j.explore.instances, 1);
  EXPECT_EQ(j.explore.max_candidates, 64);
  EXPECT_EQ(j.explore.timeout_s, 300);
  EXPECT_EQ(j.explore.seed, 0u);
  EXPECT_EQ(j.validate.seeds, 3);
  EXPECT_FALSE(j.validate.atol.has_value());
  EXPECT_FALSE(j.validate.rtol.has_value());
  EXPECT_EQ(j.bench.warmup, 25);
  EXPECT_EQ(j.bench.runs, 100);
  EXPECT_TRUE(j.constraints.empty());
  EXPECT_EQ(j.params, json::object());
  EXPECT_EQ(j.where, "dir/simple.yaml:3");
}

TEST(Expansion, DefaultsThenOverridesKeyByKey) {
  Manifest m = parse(R"(name: layered
targets: [MI300X, H200]
defaults:
  dtypes: [fp16]
  knowledge_constraints: [avoid_global_memory]
  exploration: {strategy: random, max_candidates: 16, instances: 2, timeout_s: 60, seed: 9, generator: template}
  validation: {seeds: 5, atol: 1e-2, rtol: 1.0e-2}
  benchmark: {warmup: 10, runs: 1000}
operators:
  - op: softmax
    input_shape: [8, 16]
  - op: layernorm
    input_shape: [8, 16]
    dtype: bf16
    targets: [MI250X]
    knowledge_constraints: [maximize_register_reuse]
    exploration: {max_candidates: 4}
    validation: {seeds: 2, atol: null}
    benchmark: {runs: 7}
)");
  EXPECT_EQ(m.name, "layered");
  ASSERT_EQ(m.jobs.size(), 3u);
  const JobSpec& a = m.jobs[0];
  EXPECT_EQ(a.op, "softmax");
  EXPECT_EQ(a.dtype, "fp16");
  EXPECT_EQ(a.target, "MI300X");
  EXPECT_EQ(a.constraints, (std::vector<std::string>{"avoid_global_memory"}));
  EXPECT_EQ(a.explore.strategy, "random");
  EXPECT_EQ(a.explore.max_candidates, 16);
  EXPECT_EQ(a.explore.instances, 2);
  EXPECT_DOUBLE_EQ(a.explore.timeout_s, 60);
  EXPECT_EQ(a.explore.seed, 9u);
  EXPECT_EQ(a.validate.seeds, 5);
  EXPECT_DOUBLE_EQ(a.validate.atol.value(), 0.01);
  EXPECT_DOUBLE_EQ(a.validate.rtol.value(), 0.01);
  EXPECT_EQ(a.bench.warmup, 10);
  EXPECT_EQ(a.bench.runs, 1000);
  EXPECT_EQ(m.jobs[1].target, "H200");

  const JobSpec& b = m.jobs[2];
  EXPECT_EQ(b.op, "layernorm");
  EXPECT_EQ(b.dtype, "bf16");
  EXPECT_EQ(b.target, "MI250X");
  EXPECT_EQ(b.constraints, (std::vector<std::string>{"maximize_register_reuse"}));  // replaces
  EXPECT_EQ(b.explore.max_candidates, 4);   // overridden
  EXPECT_EQ(b.explore.strategy, "random");  // kept from defaults
  EXPECT_EQ(b.explore.instances, 2);
  EXPECT_EQ(b.validate.seeds, 2);
  EXPECT_FALSE(b.validate.atol.has_value());  // null: back to "by dtype"
  EXPECT_DOUBLE_EQ(b.validate.rtol.value(), 0.01);
  EXPECT_EQ(b.bench.warmup, 10);
  EXPECT_EQ(b.bench.runs, 7);
  EXPECT_EQ(b.params, (json{{"eps", 1e-5}}));
}

TEST(Expansion, HalvingSettingsKeyByKeyAndOnlyWhenGiven) {
  Manifest m = parse(R"(
targets: [H200]
defaults:
  exploration: {strategy: halving, halving: {initial: 6, priors: 0}}
operators:
  - op: matmul
    shapes: [[64, 64, 64]]
    dtype: bf16
    exploration:
      halving: {keep: 0.25, prune: 2, tiles: 1, priors: 3, budget_share: 0.5}
  - op: add
    input_shape: [8]
    dtype: fp32
    exploration: {strategy: exhaustive, halving: null}
)");
  ASSERT_EQ(m.jobs.size(), 2u);
  auto spec = [](const JobSpec& j) { return j.to_json(*knowledge().targets.find(j.target)); };
  const json mm = spec(m.jobs[0])["explore"]["halving"];
  EXPECT_EQ(mm, json::parse(
                    R"({"initial": 6, "keep": 0.25, "prune": 2.0, "tiles": 1.0, "priors": 3, "budget_share": 0.5})"));
  // The entry's `halving: null` gives nothing; the defaults' keys stay.
  EXPECT_EQ(spec(m.jobs[1])["explore"]["halving"], json::parse(R"({"initial": 6, "priors": 0})"));
  // Typed as the strategy reads them (SearchSettings::from_explore).
  EXPECT_TRUE(mm["initial"].is_number_integer());
  EXPECT_TRUE(mm["priors"].is_number_integer());
  EXPECT_TRUE(mm["prune"].is_number_float());
  // Without the section the spec has no `halving` (the jobs keep their keys).
  Manifest plain = parse("targets: [H200]\noperators:\n  - {op: add, input_shape: [8], dtype: fp32}\n");
  EXPECT_FALSE(spec(plain.jobs.at(0))["explore"].contains("halving"));
}

TEST(Expansion, ParamsDefaultsFilledAndOverridden) {
  Manifest m = parse(R"(
targets: [MI250X]
defaults:
  dtypes: [fp16]
  params: {padding: 1, eps: 1.0e-6}
operators:
  - op: conv2d
    input_shape: [64, 3, 224, 224]
    params: {out_channels: 32, kernel_size: 1}
  - op: conv2d
    input_shape: [64, 3, 224, 224]
  - op: layernorm
    input_shape: [8, 8]
  - op: bias_gelu
    input_shape: [8, 8]
    params: {approximate: tanh}
)");
  ASSERT_EQ(m.jobs.size(), 4u);
  EXPECT_EQ(m.jobs[0].params,
            (json{{"out_channels", 32}, {"kernel_size", 1}, {"stride", 1}, {"padding", 1}}));
  EXPECT_EQ(m.jobs[1].params,
            (json{{"out_channels", 64}, {"kernel_size", 3}, {"stride", 1}, {"padding", 1}}));
  EXPECT_EQ(m.jobs[2].params, (json{{"eps", 1e-6}}));
  EXPECT_EQ(m.jobs[3].params, (json{{"approximate", "tanh"}}));
  EXPECT_TRUE(m.jobs[0].params["kernel_size"].is_number_integer());
  EXPECT_TRUE(m.jobs[2].params["eps"].is_number_float());
}

TEST(Expansion, IntegerValueForFloatParam) {
  Manifest m = parse("targets: [H200]\noperators:\n  - {op: layernorm, input_shape: [8, 8], dtype: fp32, params: {eps: 0}}\n");
  EXPECT_TRUE(m.jobs[0].params["eps"].is_number());
  EXPECT_EQ(m.jobs[0].params["eps"].get<double>(), 0.0);
}

TEST(Expansion, DuplicatesMergedSilently) {
  Manifest m = parse(R"(
targets: [H200, h200, H200 SXM]
operators:
  - op: add
    shapes: [[8], [8], [16]]
    dtypes: [fp32, float32, fp32]
  - op: add
    input_shape: [8]
    dtype: fp32
  - op: add                      # differs: its own constraint
    input_shape: [8]
    dtype: fp32
    knowledge_constraints: [avoid_atomics]
)");
  ASSERT_EQ(m.jobs.size(), 3u);
  EXPECT_EQ(m.jobs[0].shape, (std::vector<long long>{8}));
  EXPECT_EQ(m.jobs[1].shape, (std::vector<long long>{16}));
  EXPECT_EQ(m.jobs[2].constraints, (std::vector<std::string>{"avoid_atomics"}));
  EXPECT_EQ(m.jobs[0].where, "m.yaml:4");  // the first entry wins
}

TEST(Expansion, ConstraintsSortedAndDeduplicated) {
  Manifest m = parse(R"(
targets: [H200]
operators:
  - op: add
    input_shape: [8]
    dtype: fp32
    knowledge_constraints: [maximize_register_reuse, avoid_global_memory, maximize_register_reuse]
)");
  EXPECT_EQ(m.jobs[0].constraints,
            (std::vector<std::string>{"avoid_global_memory", "maximize_register_reuse"}));
}

TEST(Expansion, SpellingsAccepted) {
  Manifest m = parse(R"(
targets: mi300x                  # one name, any case
operators:
  - op: softmax
    shape: [4, 4]                # shape is input_shape
    dtype: bfloat16              # torch spelling
  - op: matmul
    input_shape: [16, 16, 16]
    dtypes: half
    target: rx 7900 xtx          # alias spelling, single target
    knowledge_constraints: avoid_atomics
)");
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[0].target, "MI300X");
  EXPECT_EQ(m.jobs[0].dtype, "bf16");
  EXPECT_EQ(m.jobs[1].target, "RX7900XTX");
  EXPECT_EQ(m.jobs[1].dtype, "fp16");
  EXPECT_EQ(m.jobs[1].constraints, (std::vector<std::string>{"avoid_atomics"}));
}

TEST(Expansion, EmptyConstraintListOverridesDefaults) {
  Manifest m = parse(R"(
targets: [H200]
defaults: {dtypes: [fp32], knowledge_constraints: [avoid_global_memory]}
operators:
  - {op: add, input_shape: [8], knowledge_constraints: []}
)");
  EXPECT_TRUE(m.jobs[0].constraints.empty());
}

TEST(Expansion, LargeShapes) {
  Manifest m = parse("targets: [H200]\noperators:\n  - {op: add, input_shape: [67108864], dtype: fp32}\n"
                     "  - {op: add, input_shape: [4294967296, 2], dtype: fp32}\n");
  EXPECT_EQ(m.jobs[0].shape[0], 67108864);
  EXPECT_EQ(m.jobs[1].shape[0], 4294967296LL);
}

TEST(Expansion, TextAndPathKept) {
  const std::string text = "targets: [H200]\noperators:\n  - {op: add, input_shape: [8], dtype: fp32}\n";
  Manifest m = parse(text, "x/y.yaml");
  EXPECT_EQ(m.text, text);
  EXPECT_EQ(m.path, fs::path("x/y.yaml"));
}

// ---------------------------------------------------------------------------
// The JSON the worker gets.

TEST(JobJson, ExactShape) {
  Manifest m = parse(R"(
targets: [MI300X]
operators:
  - op: conv2d
    input_shape: [2, 3, 16, 16]
    dtype: fp16
    params: {out_channels: 8, padding: 1}
    knowledge_constraints: [avoid_global_memory]
    validation: {atol: 0.5}
)");
  ASSERT_EQ(m.jobs.size(), 1u);
  const Target& t = *knowledge().targets.find("MI300X");
  json j = m.jobs[0].to_json(t);
  json target = t.raw;
  json expected = {
      {"op", "conv2d"},
      {"shape", {2, 3, 16, 16}},
      {"dtype", "fp16"},
      {"params", {{"out_channels", 8}, {"kernel_size", 3}, {"stride", 1}, {"padding", 1}}},
      {"target", target},
      {"constraints", {"avoid_global_memory"}},
      {"validation", {{"seeds", 3}, {"atol", 0.5}, {"rtol", nullptr}}},
      {"benchmark", {{"warmup", 25}, {"runs", 100}}},
      {"explore",
       {{"generator", "template"},
        {"strategy", "exhaustive"},
        {"instances", 1},
        {"max_candidates", 64},
        {"timeout_s", 300.0},
        {"seed", 0}}},
  };
  EXPECT_EQ(j, expected) << j.dump(2);
  EXPECT_EQ(j["target"]["name"], "MI300X");
  EXPECT_EQ(j["target"]["backend"], "hip");
  EXPECT_EQ(j["target"]["arch"], "gfx942");
  EXPECT_EQ(j["target"]["warp_size"], 64);
  EXPECT_EQ(j["target"]["compute_units"], 304);
  EXPECT_FALSE(j.contains("where"));  // moving an entry in the file must not change the job
}

TEST(JobJson, TargetFieldsFromTheStructWin) {
  JobSpec s;
  s.op = "add";
  s.shape = {8};
  s.dtype = "fp32";
  s.target = "T";
  Target t;
  t.name = "T";
  t.backend = "cuda";
  t.arch = "sm_90";
  t.warp_size = 32;
  t.raw = {{"name", "stale"}, {"extra", 1}};
  json j = s.to_json(t);
  EXPECT_EQ(j["target"], (json{{"name", "T"}, {"backend", "cuda"}, {"arch", "sm_90"}, {"warp_size", 32}, {"extra", 1}}));
  EXPECT_EQ(j["params"], json::object());
  Target other = t;
  other.name = "U";
  EXPECT_THROW(s.to_json(other), std::invalid_argument);
}

TEST(JobJson, SameJobSameJsonAcrossFiles) {
  Manifest a = parse("targets: [H200]\noperators:\n  - {op: softmax, input_shape: [4, 4], dtype: fp32}\n", "a.yaml");
  Manifest b = parse("# moved\n\nname: other\ntargets: [h200]\ndefaults: {dtypes: [fp32]}\noperators:\n"
                     "  - op: softmax\n    shapes: [[4, 4]]\n", "b.yaml");
  const Target& t = *knowledge().targets.find("H200");
  EXPECT_EQ(a.jobs[0].to_json(t), b.jobs[0].to_json(t));
  EXPECT_NE(a.jobs[0].where, b.jobs[0].where);
}

// ---------------------------------------------------------------------------
// The shipped manifests.

std::vector<fs::path> shipped() {
  return yaml_files({kSource / "jobs/examples", kSource / "tests/data/manifests/good"},
                    {kSource / "jobs/quickstart.yaml"});
}

class ShippedManifest : public ::testing::TestWithParam<fs::path> {};

TEST_P(ShippedManifest, Loads) {
  Manifest m = load_manifest(GetParam(), knowledge());
  EXPECT_FALSE(m.jobs.empty());
  for (const auto& j : m.jobs) {
    const Target* t = knowledge().targets.find(j.target);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(j.to_json(*t)["target"]["name"], j.target);
  }
}

INSTANTIATE_TEST_SUITE_P(Jobs, ShippedManifest, ::testing::ValuesIn(shipped()),
                         [](const ::testing::TestParamInfo<fs::path>& info) {
                           return info.param.parent_path().filename().string() + "_" +
                                  info.param.stem().string();
                         });

TEST(Shipped, DocExampleIsTheTestedFile) {
  const std::string doc = read(kSource / "docs/manifest.md");
  const std::string marker = "<!-- full example -->\n```yaml\n";
  size_t start = doc.find(marker);
  ASSERT_NE(start, std::string::npos);
  start += marker.size();
  size_t end = doc.find("```", start);
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(doc.substr(start, end - start), read(kSource / "tests/data/manifests/good/full_reference.yaml"));

  Manifest m = load_manifest(kSource / "tests/data/manifests/good/full_reference.yaml", knowledge());
  EXPECT_EQ(m.name, "reference");
  ASSERT_EQ(m.jobs.size(), 13u);
  const JobSpec& conv = m.jobs[0];
  json j = conv.to_json(*knowledge().targets.find(conv.target));
  j.erase("target");
  EXPECT_EQ(j, json::parse(R"({
    "op": "conv2d", "shape": [64, 3, 224, 224], "dtype": "fp16",
    "params": {"kernel_size": 3, "out_channels": 64, "padding": 1, "stride": 1},
    "constraints": ["avoid_global_memory", "maximize_register_reuse"],
    "validation": {"seeds": 3, "atol": 0.01, "rtol": 0.01},
    "benchmark": {"warmup": 25, "runs": 100},
    "explore": {"generator": "template", "strategy": "exhaustive", "instances": 1,
                "max_candidates": 16, "timeout_s": 300.0, "seed": 0}})"));
}

TEST(Shipped, Quickstart) {
  Manifest m = load_manifest(kSource / "jobs/quickstart.yaml", knowledge());
  EXPECT_EQ(m.name, "quickstart");
  std::set<std::string> ops, targets;
  for (const auto& j : m.jobs) {
    ops.insert(j.op);
    targets.insert(j.target);
    EXPECT_LE(j.explore.max_candidates, 4);
    EXPECT_EQ(j.validate.seeds, 3);
    long long elems = 1;
    for (long long d : j.shape) elems *= d;
    EXPECT_LE(elems, 1 << 18) << j.op << ": keep quickstart shapes tiny for the interpreter";
  }
  EXPECT_EQ(ops, (std::set<std::string>{"add", "softmax", "layernorm", "matmul", "conv2d"}));
  EXPECT_EQ(targets, (std::set<std::string>{"MI300X", "H200"}));
  EXPECT_EQ(m.jobs.size(), 10u);
}

TEST(Shipped, SeedConv2d) {
  Manifest m = load_manifest(kSource / "jobs/examples/seed_conv2d.yaml", knowledge());
  ASSERT_EQ(m.jobs.size(), 1u);
  const JobSpec& j = m.jobs[0];
  EXPECT_EQ(j.op, "conv2d");
  EXPECT_EQ(j.shape, (std::vector<long long>{64, 3, 224, 224}));
  EXPECT_EQ(j.dtype, "fp16");
  EXPECT_EQ(j.target, "MI250X");
  EXPECT_EQ(j.params, (json{{"out_channels", 64}, {"kernel_size", 3}, {"stride", 1}, {"padding", 1}}));
  EXPECT_EQ(j.constraints, (std::vector<std::string>{"avoid_global_memory", "maximize_register_reuse"}));
}

TEST(Shipped, AnchorsH200) {
  Manifest m = load_manifest(kSource / "jobs/examples/anchors_h200.yaml", knowledge());
  std::set<std::string> got;
  for (const auto& j : m.jobs) {
    EXPECT_EQ(j.target, "H200");
    got.insert(j.op + " " + j.dtype + " " + json(j.shape).dump());
  }
  EXPECT_EQ(got, (std::set<std::string>{
                     "add fp32 [67108864]",
                     "softmax bf16 [16384,4096]",
                     "layernorm bf16 [16384,4096]",
                     "matmul bf16 [4096,4096,4096]",
                     "matmul bf16 [8192,8192,8192]",
                     "conv2d fp16 [64,3,224,224]",
                     "rmsnorm bf16 [16384,4096]",
                     "row_sum fp32 [16384,4096]",
                     "gemm_bias_act bf16 [8192,4096,4096]",
                     "attention bf16 [4,32,2048,128]",
                 }));
}

TEST(Shipped, MultiTarget) {
  Manifest m = load_manifest(kSource / "jobs/examples/multi_target.yaml", knowledge());
  std::set<std::string> targets;
  for (const auto& j : m.jobs) targets.insert(j.target);
  EXPECT_EQ(targets, (std::set<std::string>{"MI300X", "MI355X", "RX7900XTX", "MI250X", "H200"}));
}

}  // namespace
}  // namespace kiln

// ---------------------------------------------------------------------------
// `reference:` entries and the `llm:` section (docs/manifest.md, docs/llm.md).

namespace kiln {
namespace {

const fs::path kRefDir = kSource / "tests/data/reference/llm_e2e";

TEST(Reference, EntryExpandsFromTheModule) {
  Manifest m = parse(R"(
targets: [MI300X, H200]
llm: {model: qwen-coder, base_url: "http://localhost:8000/v1/"}
operators:
  - reference: relu_scale.py
    description: relu then scale
    exploration: {generator: llm, instances: 2}
)", (kRefDir / "m.yaml").string());
  ASSERT_EQ(m.jobs.size(), 2u);  // one per target
  const JobSpec& j = m.jobs[0];
  EXPECT_EQ(j.op, "relu_scale");  // the file stem
  EXPECT_TRUE(j.shape.empty());
  EXPECT_EQ(j.dtype, "fp32");
  EXPECT_EQ(j.description, "relu then scale");
  const std::string source = read(kRefDir / "relu_scale.py");
  EXPECT_EQ(j.reference["path"], fs::weakly_canonical(kRefDir / "relu_scale.py").string());
  EXPECT_EQ(j.reference["source"], source);
  EXPECT_EQ(j.reference["sha256"].get<std::string>().size(), 64u);
  const json js = j.to_json(*knowledge().targets.find("MI300X"));
  EXPECT_EQ(js["reference"], j.reference);
  EXPECT_EQ(js["shape"], json::array());
  EXPECT_EQ(js["params"], json::object());
  EXPECT_EQ(js["explore"]["generator"], "llm");
  EXPECT_EQ(js["explore"]["instances"], 2);
  EXPECT_EQ(js["description"], "relu then scale");
  EXPECT_EQ(js["llm"]["model"], "qwen-coder");
  EXPECT_EQ(js["llm"]["base_url"], "http://localhost:8000/v1");  // trailing '/' dropped
  EXPECT_EQ(js["llm"]["rounds"], 3);
  EXPECT_EQ(js["llm"]["retrieval_threshold"], 0.8);
  EXPECT_EQ(js["llm"]["instance_timeout_s"], 300.0);
}

TEST(Reference, NameAndDtypes) {
  Manifest m = parse(R"(
targets: [H200]
operators:
  - reference: relu_scale.py
    name: my_relu
    dtypes: [fp16, bf16]
    exploration: {generator: llm}
)", (kRefDir / "m.yaml").string());
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[0].op, "my_relu");
  EXPECT_EQ(m.jobs[0].dtype, "fp16");
  EXPECT_EQ(m.jobs[1].dtype, "bf16");
}

TEST(Reference, Errors) {
  const std::string f = (kRefDir / "m.yaml").string();
  auto msg = [&](const std::string& text) { return error_of(text, f).message(); };
  EXPECT_EQ(msg("targets: [H200]\noperators:\n  - reference: relu_scale.py\n    name: softmax\n"
                "    exploration: {generator: llm}\n")
                .rfind("name 'softmax' is a library operator", 0), 0u);
  EXPECT_EQ(msg("targets: [H200]\noperators:\n  - reference: relu_scale.py\n    params: {eps: 1}\n"
                "    exploration: {generator: llm}\n")
                .rfind("a reference entry takes no params", 0), 0u);
  EXPECT_NE(msg("targets: [H200]\noperators:\n  - reference: replies/2_correct.md\n"
                "    exploration: {generator: llm}\n")
                .find("is not in the KernelBench form"), std::string::npos);
  EXPECT_EQ(msg("targets: [H200]\noperators:\n  - op: add\n    name: x\n    input_shape: [8]\n    dtype: fp32\n")
                .rfind("name is for reference entries", 0), 0u);
  EXPECT_EQ(msg("targets: [H200]\noperators:\n  - input_shape: [8]\n").rfind("operator entry has no 'op'", 0), 0u);
  EXPECT_EQ(msg("targets: [H200]\ndefaults:\n  reference: relu_scale.py\noperators:\n  - op: add\n    input_shape: [8]\n"
                "    dtype: fp32\n").rfind("unknown key 'reference' in defaults", 0), 0u);
  EXPECT_EQ(msg("targets: [H200]\nllm: {base_url: localhost:8000}\noperators:\n  - op: add\n    input_shape: [8]\n"
                "    dtype: fp32\n").rfind("llm.base_url must start with http:// or https://", 0), 0u);
  EXPECT_EQ(msg("targets: [H200]\nllm: {rounds: 0}\noperators:\n  - op: add\n    input_shape: [8]\n"
                "    dtype: fp32\n").rfind("llm.rounds must be positive", 0), 0u);
  EXPECT_EQ(msg("targets: [H200]\nllm: {retrieval_threshold: 1.5}\noperators:\n  - op: add\n    input_shape: [8]\n"
                "    dtype: fp32\n").rfind("llm.retrieval_threshold must be in [0, 1]", 0), 0u);
}

TEST(Llm, SectionMergesTopDefaultsEntryKeyByKey) {
  Manifest m = parse(R"(
targets: [H200]
llm: {model: a, temperature: 0.5, rounds: 5}
defaults:
  exploration: {generator: llm}
  llm: {model: b, max_tokens: 1000}
operators:
  - op: add
    input_shape: [8]
    dtype: fp32
    llm: {rounds: 2, api_key_env: MY_KEY}
  - op: add
    input_shape: [16]
    dtype: fp32
    exploration: {generator: template}
)");
  ASSERT_EQ(m.jobs.size(), 2u);
  const json a = m.jobs[0].to_json(*knowledge().targets.find("H200"));
  EXPECT_EQ(a["llm"]["model"], "b");
  EXPECT_EQ(a["llm"]["temperature"], 0.5);
  EXPECT_EQ(a["llm"]["max_tokens"], 1000);
  EXPECT_EQ(a["llm"]["rounds"], 2);
  EXPECT_EQ(a["llm"]["api_key_env"], "MY_KEY");
  EXPECT_EQ(a["llm"]["max_retries"], 3);
  EXPECT_FALSE(a.contains("reference"));
  // A template job carries no llm section (its key is unchanged).
  const json t = m.jobs[1].to_json(*knowledge().targets.find("H200"));
  EXPECT_FALSE(t.contains("llm"));
}

TEST(Reference, ExampleManifestLoads) {
  Manifest m = load_manifest(kRefDir / "manifest.yaml", knowledge());
  ASSERT_EQ(m.jobs.size(), 1u);
  EXPECT_EQ(m.jobs[0].op, "relu_scale");
  EXPECT_EQ(m.jobs[0].llm.model, "scripted-coder");
}

}  // namespace
}  // namespace kiln
