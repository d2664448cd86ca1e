// Job keys and canonical JSON.
#include "catalog/job_key.h"

#include <functional>
#include <set>

#include <gtest/gtest.h>

#include "common/hash.h"

using nlohmann::json;
using namespace kiln;

namespace {

json spec() {
  return json::parse(R"({
    "op": "softmax", "shape": [128, 1000], "dtype": "fp16", "params": {"dim": -1},
    "target": {"name": "MI300X", "backend": "hip", "arch": "gfx942", "warp_size": 64,
               "compute_units": 304, "aliases": ["mi300x"], "description": "AMD Instinct MI300X"},
    "constraints": ["avoid_global_memory", "maximise_register_reuse"],
    "validation": {"seeds": 3, "atol": null, "rtol": null},
    "benchmark": {"warmup": 25, "runs": 100},
    "explore": {"generator": "template", "strategy": "exhaustive", "instances": 1,
                "max_candidates": 64, "timeout_s": 300, "seed": 0},
    "where": "jobs/quickstart.yaml:12"})");
}

const std::string kTemplate = "3f2a";  // stands for the sha256 of kernels/softmax.py
const std::string kTriton = "3.6.0";

std::string key(const json& s) { return job_key(s, kTemplate, kTriton); }

TEST(CanonicalJson, SortsKeysRecursivelyWithoutWhitespace) {
  json j = json::parse(R"({ "b": 1, "a": { "d": 2, "c": [3, {"z": 1, "y": 2.5}] }, "A": null })");
  EXPECT_EQ(canonical_json(j), R"({"A":null,"a":{"c":[3,{"y":2.5,"z":1}],"d":2},"b":1})");
}

TEST(CanonicalJson, InsertionOrderDoesNotMatter) {
  json a, b;
  a["x"] = 1;
  a["y"] = {{"q", true}, {"p", "s"}};
  b["y"] = {{"p", "s"}, {"q", true}};
  b["x"] = 1;
  EXPECT_EQ(canonical_json(a), canonical_json(b));
  // An insertion-ordered document converts into the sorted map.
  nlohmann::ordered_json o;
  o["zeta"] = 1;
  o["alpha"] = {{"m", 2}, {"b", 3}};
  EXPECT_EQ(canonical_json(json(o)), R"({"alpha":{"b":3,"m":2},"zeta":1})");
}

TEST(CanonicalJson, ByteOrderAndEscapes) {
  // Keys sort by byte value: upper case before lower case, UTF-8 after ASCII.
  json j = {{"é", 1}, {"z", 2}, {"Z", 3}, {"_", 4}};
  EXPECT_EQ(canonical_json(j), "{\"Z\":3,\"_\":4,\"z\":2,\"\xc3\xa9\":1}");
  EXPECT_EQ(canonical_json(json("a\"b\n")), R"("a\"b\n")");
  EXPECT_EQ(canonical_json(json::array({1, 1.0, -0.5, 1e300})), "[1,1.0,-0.5,1e+300]");
}

TEST(JobKey, IsSha256OfTheDocumentedCanonicalForm) {
  json s = {{"op", "add"}, {"shape", {4}}, {"dtype", "fp32"}};
  EXPECT_EQ(job_key(s, "t", "3.6.0"),
            sha256_hex(R"({"spec":{"dtype":"fp32","op":"add","shape":[4]},)"
                       R"("template_version":"t","triton_version":"3.6.0"})"));
  EXPECT_EQ(key(spec()).size(), 64u);
  EXPECT_EQ(key(spec()).find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(JobKey, StableAcrossKeyOrderAndRepeats) {
  const std::string k = key(spec());
  EXPECT_EQ(key(spec()), k);
  // Same document written in another key order.
  json reordered = json::parse(R"({
    "where": "jobs/quickstart.yaml:12",
    "explore": {"seed": 0, "timeout_s": 300, "max_candidates": 64, "instances": 1,
                "strategy": "exhaustive", "generator": "template"},
    "benchmark": {"runs": 100, "warmup": 25},
    "validation": {"rtol": null, "atol": null, "seeds": 3},
    "constraints": ["avoid_global_memory", "maximise_register_reuse"],
    "target": {"description": "AMD Instinct MI300X", "aliases": ["mi300x"],
               "compute_units": 304, "warp_size": 64, "arch": "gfx942", "backend": "hip",
               "name": "MI300X"},
    "params": {"dim": -1}, "dtype": "fp16", "shape": [128, 1000], "op": "softmax"})");
  EXPECT_EQ(key(reordered), k);
}

TEST(JobKey, ChangesWithTemplateAndTritonVersion) {
  const std::string k = key(spec());
  EXPECT_NE(job_key(spec(), kTemplate + "0", kTriton), k);
  EXPECT_NE(job_key(spec(), kTemplate, "3.5.1"), k);
  EXPECT_NE(job_key(spec(), "", ""), k);
  // The two versions are not interchangeable.
  EXPECT_NE(job_key(spec(), "a", "b"), job_key(spec(), "b", "a"));
}

TEST(JobKey, ChangesWithEverySpecField) {
  const std::string base = key(spec());
  const std::vector<std::pair<std::string, std::function<void(json&)>>> edits = {
      {"op", [](json& s) { s["op"] = "layernorm"; }},
      {"shape", [](json& s) { s["shape"] = {128, 1024}; }},
      {"shape order", [](json& s) { s["shape"] = {1000, 128}; }},
      {"dtype", [](json& s) { s["dtype"] = "bf16"; }},
      {"params value", [](json& s) { s["params"]["dim"] = 0; }},
      {"params key", [](json& s) { s["params"]["eps"] = 1e-5; }},
      {"target name", [](json& s) { s["target"]["name"] = "MI250X"; }},
      {"target arch", [](json& s) { s["target"]["arch"] = "gfx90a"; }},
      {"target backend", [](json& s) { s["target"]["backend"] = "cuda"; }},
      {"target warp_size", [](json& s) { s["target"]["warp_size"] = 32; }},
      {"target compute_units", [](json& s) { s["target"]["compute_units"] = 228; }},
      {"constraints added", [](json& s) { s["constraints"].push_back("avoid_atomics"); }},
      {"constraints removed", [](json& s) { s["constraints"].erase(0); }},
      {"validation seeds", [](json& s) { s["validation"]["seeds"] = 5; }},
      {"validation atol", [](json& s) { s["validation"]["atol"] = 1e-3; }},
      {"benchmark runs", [](json& s) { s["benchmark"]["runs"] = 1000; }},
      {"benchmark warmup", [](json& s) { s["benchmark"]["warmup"] = 10; }},
      {"explore generator", [](json& s) { s["explore"]["generator"] = "llm"; }},
      {"explore strategy", [](json& s) { s["explore"]["strategy"] = "random"; }},
      {"explore max_candidates", [](json& s) { s["explore"]["max_candidates"] = 128; }},
      {"explore timeout_s", [](json& s) { s["explore"]["timeout_s"] = 60; }},
      {"explore seed", [](json& s) { s["explore"]["seed"] = 7; }},
      {"explore instances", [](json& s) { s["explore"]["instances"] = 4; }},
      {"new field", [](json& s) { s["layout"] = "row_major"; }},
      {"number type", [](json& s) { s["shape"] = {128.0, 1000.0}; }},
  };
  std::set<std::string> seen = {base};
  for (const auto& [what, edit] : edits) {
    json s = spec();
    edit(s);
    const std::string k = key(s);
    EXPECT_NE(k, base) << what;
    EXPECT_TRUE(seen.insert(k).second) << what << " collides with another edit";
  }
}

TEST(JobKey, VolatileFieldsDoNotCount) {
  const std::string base = key(spec());
  const std::vector<std::pair<std::string, std::function<void(json&)>>> edits = {
      {"where", [](json& s) { s["where"] = "jobs/nightly.yaml:40"; }},
      {"where removed", [](json& s) { s.erase("where"); }},
      {"name", [](json& s) { s["name"] = "nightly"; }},
      {"batch", [](json& s) { s["batch"] = "abc123"; }},
      {"manifest", [](json& s) { s["manifest"] = "jobs/x.yaml"; }},
      {"target aliases", [](json& s) { s["target"]["aliases"] = {"mi300", "MI-300X"}; }},
      {"target description", [](json& s) { s["target"]["description"] = "new words"; }},
      {"target notes", [](json& s) { s["target"]["notes"] = "see the ISA guide"; }},
      {"constraints order", [](json& s) {
         s["constraints"] = {"maximise_register_reuse", "avoid_global_memory"};
       }},
      {"constraints repeated", [](json& s) { s["constraints"].push_back("avoid_global_memory"); }},
  };
  for (const auto& [what, edit] : edits) {
    json s = spec();
    edit(s);
    EXPECT_EQ(key(s), base) << what;
  }
  // key_spec leaves its input alone.
  json s = spec();
  json ks = key_spec(s);
  EXPECT_TRUE(s.contains("where"));
  EXPECT_FALSE(ks.contains("where"));
  EXPECT_FALSE(ks["target"].contains("aliases"));
  EXPECT_TRUE(ks["target"].contains("arch"));
}

TEST(CandidateKey, DependsOnGeneratorTemplateConfigSource) {
  const json cfg = {{"num_warps", 4}, {"BLOCK", 1024}};
  const std::string k = candidate_key("template", "softmax", cfg, std::nullopt);
  EXPECT_EQ(k.size(), 64u);
  EXPECT_EQ(candidate_key("template", "softmax", json::parse(R"({"BLOCK":1024,"num_warps":4})"),
                          std::nullopt),
            k);
  EXPECT_NE(candidate_key("template", "softmax", {{"num_warps", 8}, {"BLOCK", 1024}},
                          std::nullopt),
            k);
  EXPECT_NE(candidate_key("template", "layernorm", cfg, std::nullopt), k);
  EXPECT_NE(candidate_key("llm", "softmax", cfg, std::nullopt), k);
  EXPECT_NE(candidate_key("template", "softmax", cfg, std::string("")), k);
  EXPECT_NE(candidate_key("llm", "", cfg, std::string("code a")),
            candidate_key("llm", "", cfg, std::string("code b")));
}

}  // namespace
