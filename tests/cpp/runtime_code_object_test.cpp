// Code objects read with no device, checked against what Triton itself says
// about them (its metadata and the AMDGPU metadata it printed in the amdgcn
// assembly, recorded by make_package.py), clang offload bundles made by
// clang-offload-bundler-15, target-id feature matching, and the verification
// input generator against the numpy implementation.
#include <cmath>
#include <gtest/gtest.h>

#include <set>

#include "code_object.h"
#include "compat.h"
#include "dtype.h"
#include "manifest.h"
#include "error.h"
#include "runtime_test_util.h"
#include "target_id.h"
#include "tools.h"
#include "verify_data.h"

using namespace kiln::rt;
using namespace rt_test;

TEST(RuntimeCodeObject, AmdMetadataMatchesTriton) {
  auto f = facts("full");
  int amd = 0;
  for (auto& [file, fact] : f["objects"].items()) {
    if (fact["kind"] != "hsaco") continue;
    ++amd;
    SCOPED_TRACE(file);
    CodeObject co = parse_code_object(slurp(pkgs() / "full" / file), file);
    const auto& a = fact["asm"];
    EXPECT_EQ(co.kind, CodeObject::Amd);
    EXPECT_EQ(co.note_target, a["target"].get<std::string>());
    EXPECT_EQ(co.gfx, fact["arch"].get<std::string>());  // Triton's metadata arch
    // amdhsa.version [1, minor]: code object version minor + 3
    EXPECT_EQ(co.code_object_version, a["version"][1].get<int>() + 3);
    ASSERT_EQ(co.kernels.size(), 1u);
    const AmdKernelMeta& k = co.kernels[0];
    EXPECT_EQ(k.name, fact["name"].get<std::string>());
    EXPECT_EQ(k.name, a["name"].get<std::string>());
    EXPECT_EQ(k.kernarg_segment_size, a["kernarg_segment_size"].get<int64_t>());
    EXPECT_EQ(k.group_segment_fixed_size, a["group_segment_fixed_size"].get<int64_t>());
    EXPECT_EQ(k.private_segment_fixed_size, a["private_segment_fixed_size"].get<int64_t>());
    EXPECT_EQ(k.sgpr_count, a["sgpr_count"].get<int64_t>());
    EXPECT_EQ(k.vgpr_count, a["vgpr_count"].get<int64_t>());
    EXPECT_EQ(k.wavefront_size, a["wavefront_size"].get<int64_t>());
    EXPECT_EQ(k.wavefront_size, fact["warp_size"].get<int64_t>());
  }
  EXPECT_EQ(amd, 9);  // 3 AMD targets x (softmax 2 ranks + add)
}

TEST(RuntimeCodeObject, CubinSmMatchesTriton) {
  auto f = facts("full");
  int n = 0;
  for (auto& [file, fact] : f["objects"].items()) {
    if (fact["kind"] != "cubin") continue;
    ++n;
    SCOPED_TRACE(file);
    CodeObject co = parse_code_object(slurp(pkgs() / "full" / file), file);
    EXPECT_EQ(co.kind, CodeObject::Cuda);
    EXPECT_EQ("sm" + std::to_string(co.sm), fact["arch"].get<std::string>());   // Triton: "sm90"
    EXPECT_EQ(co.sm_name(), fact["ptx_target"].get<std::string>());             // the PTX's .target
  }
  EXPECT_EQ(n, 3);
}

TEST(RuntimeCodeObject, NotElfAndTruncatedAreFormatErrors) {
  std::string image = slurp(pkgs() / "full" / "objects" / "add-5000-fp16-r0-gfx942.hsaco");
  EXPECT_THROW(parse_code_object("hello", "x"), Error);
  try {
    parse_code_object(image.substr(0, image.size() / 2), "half.hsaco");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status, KILN_E_FORMAT);
    EXPECT_NE(std::string(e.what()).find("half.hsaco"), std::string::npos) << e.what();
  }
}

// Found by fuzz_rt_code_object: a metadata note whose MessagePack map declares
// ~2^32 entries made msgpack-c reserve 256 GiB before reading them. Now a
// format error, and a cheap one.
TEST(RuntimeCodeObject, OversizedMetadataContainerIsAFormatError) {
  const std::string image = slurp(fs::path(KILN_SOURCE_DIR) / "fuzz" / "corpus" / "rt_code_object" /
                                  "regress-msgpack-map-size.hsaco");
  ASSERT_FALSE(image.empty());
  try {
    parse_code_object(image, "huge-map.hsaco");
    FAIL() << "parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.status, KILN_E_FORMAT);
    EXPECT_NE(std::string(e.what()).find("huge-map.hsaco"), std::string::npos) << e.what();
  }
}

TEST(RuntimeCodeObject, BundleListsThreeAndSelectsByTargetId) {
  fs::path co = pkgs() / "bundle" / "objects" / "softmax-64x1000-fp32-r0.co";
  CmdResult list = run("clang-offload-bundler-15 --list -type=bc -input=" + shell_quote(co.string()));
  ASSERT_EQ(list.rc, 0) << list.out;
  std::set<std::string> listed;
  std::istringstream in(list.out);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) listed.insert(line);
  EXPECT_EQ(lines, 3) << list.out;
  EXPECT_EQ(listed, (std::set<std::string>{"hipv4-amdgcn-amd-amdhsa--gfx942", "hipv4-amdgcn-amd-amdhsa--gfx90a",
                                           "hipv4-amdgcn-amd-amdhsa--gfx1100"}))
      << list.out;

  std::string bytes = slurp(co);
  auto entries = read_offload_bundle(bytes, co.string());
  std::set<std::string> ours;
  for (const auto& e : entries) ours.insert(e.id);
  EXPECT_EQ(ours, listed);

  for (const char* want : {"gfx942", "gfx90a", "gfx1100"}) {
    for (std::string id : {std::string(want), std::string(want) + ":sramecc+:xnack-",
                           "amdgcn-amd-amdhsa--" + std::string(want) + ":xnack+"}) {
      int i = select_bundle_entry(entries, TargetId::parse(id));
      ASSERT_GE(i, 0) << id;
      CodeObject obj = parse_code_object(std::string_view(bytes).substr(entries[i].offset, entries[i].size), id);
      EXPECT_EQ(obj.gfx, want) << id;
    }
  }
  EXPECT_EQ(select_bundle_entry(entries, TargetId::parse("gfx908")), -1);
  EXPECT_EQ(select_bundle_entry(entries, TargetId::parse("gfx950")), -1);
}

TEST(RuntimeCodeObject, TargetIdFeatureRule) {
  auto id = [](const char* s) { return TargetId::parse(s); };
  EXPECT_EQ(amd_mismatch(id("gfx942"), id("gfx942:sramecc+:xnack-")), "");          // any matches
  EXPECT_EQ(amd_mismatch(id("gfx942:sramecc+"), id("gfx942:sramecc+:xnack-")), "");
  std::string why = amd_mismatch(id("gfx942:sramecc+"), id("gfx942:sramecc-:xnack-"));
  EXPECT_NE(why.find("sramecc+"), std::string::npos) << why;
  EXPECT_NE(why.find("sramecc-"), std::string::npos) << why;
  why = amd_mismatch(id("gfx90a"), id("gfx942"));
  EXPECT_NE(why.find("gfx90a"), std::string::npos);
  EXPECT_NE(why.find("gfx942"), std::string::npos);
  EXPECT_EQ(id("hipv4-amdgcn-amd-amdhsa--gfx942:xnack-").str(), "gfx942:xnack-");
  EXPECT_THROW(id("gfx942:sramecc"), Error);

  // the bundle rule: a featured entry wins where it matches, a plain one matches any
  std::vector<BundleEntry> entries = {{"host-x86_64-unknown-linux-gnu", 0, 0},
                                      {"hipv4-amdgcn-amd-amdhsa--gfx942", 0, 0},
                                      {"hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+", 0, 0},
                                      {"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", 0, 0}};
  EXPECT_EQ(select_bundle_entry(entries, id("gfx942:sramecc+:xnack-")), 2);
  EXPECT_EQ(select_bundle_entry(entries, id("gfx942:sramecc-:xnack-")), 1);
  EXPECT_EQ(select_bundle_entry(entries, id("gfx90a:xnack-")), -1);
  EXPECT_EQ(select_bundle_entry(entries, id("gfx90a:xnack+")), 3);
}

TEST(RuntimeVerifyData, SplitMixInputsMatchNumpy) {
  auto f = facts("full");
  int checked = 0;
  for (auto& [tag, tensors] : f["verify"].items()) {
    auto spec = VerifySpec::parse(slurp(pkgs() / "full" / "verify" / (tag + ".json")), tag);
    auto m = nlohmann::json::parse(slurp(pkgs() / "full" / "manifest.json"));
    for (const auto& in : spec.inputs) {
      std::string dtype;
      for (const auto& k : m["kernels"])
        if (k["operator"].get<std::string>() + "-" == tag.substr(0, k["operator"].get<std::string>().size() + 1))
          dtype = k["tensors"][in.tensor]["dtype"];
      ASSERT_FALSE(dtype.empty());
      const auto& want = tensors[std::to_string(in.tensor)];
      std::vector<unsigned char> buf(want.size() * dtype_size(dtype));
      fill_inputs(spec.seed, in.tensor, in.lo, in.hi, dtype, buf.data(), static_cast<int64_t>(want.size()));
      for (size_t i = 0; i < want.size(); ++i, ++checked)
        ASSERT_EQ(load_as_double(buf.data(), static_cast<int64_t>(i), dtype), want[i].get<double>())
            << tag << " tensor " << in.tensor << " element " << i << " (" << dtype << ")";
    }
  }
  EXPECT_GE(checked, 3 * 64);
}

TEST(RuntimeVerifyData, CheckCatchesNanWrongAndSum) {
  auto spec = VerifySpec::parse(slurp(pkgs() / "full" / "verify" / "add-5000-fp16.json"), "add");
  ASSERT_EQ(spec.outputs.size(), 1u);
  const OutputCheck& c = spec.outputs[0];
  // a correct output: x + y from the same generator, rounded to fp16
  std::vector<unsigned char> x(5000 * 2), y(5000 * 2), out(5000 * 2);
  fill_inputs(spec.seed, 0, -1, 1, "fp16", x.data(), 5000);
  fill_inputs(spec.seed, 1, -1, 1, "fp16", y.data(), 5000);
  for (int i = 0; i < 5000; ++i) {
    double s = round_to_dtype(load_as_double(x.data(), i, "fp16") + load_as_double(y.data(), i, "fp16"), "fp16");
    _Float16 h = static_cast<_Float16>(s);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  EXPECT_EQ(check_output(c, out.data(), 5000, "fp16"), "");
  auto bad = out;
  bad[2 * 4321] = bad[2 * 4321 + 1] = 0xFF;  // one element left as the NaN poison
  EXPECT_NE(check_output(c, bad.data(), 5000, "fp16").find("NaN"), std::string::npos);
  bad = out;
  _Float16 h = static_cast<_Float16>(load_as_double(out.data(), c.samples[7].first, "fp16") + 0.25);
  std::memcpy(bad.data() + 2 * c.samples[7].first, &h, 2);
  EXPECT_NE(check_output(c, bad.data(), 5000, "fp16").find("element"), std::string::npos);
}

TEST(RuntimeCompat, LimitsNameBothSides) {
  auto m = Manifest::parse(slurp(pkgs() / "full" / "manifest.json"), "manifest.json");
  const KernelSpec& softmax = m.kernels[0];
  auto variant_for = [&](const std::string& target) -> const Variant& {
    for (const auto& v : softmax.variants)
      if (v.target == target && v.rank == 0) return v;
    throw std::runtime_error("no variant for " + target);
  };
  const Variant& h200 = variant_for("H200");
  CodeObject cubin = parse_code_object(slurp(pkgs() / "full" / h200.file), h200.file);
  EXPECT_EQ(check_against(h200, cubin, limits_from_id("sm_90"), h200.file), "");
  std::string why = check_against(h200, cubin, limits_from_id("sm_89"), h200.file);
  EXPECT_NE(why.find("sm_90a"), std::string::npos) << why;
  EXPECT_NE(why.find("sm_89"), std::string::npos) << why;
  why = check_against(h200, cubin, limits_from_id("gfx942"), h200.file);
  EXPECT_NE(why.find("cannot run on gfx942"), std::string::npos) << why;
  Variant big = h200;
  big.shared_bytes = 300000;
  why = check_against(big, cubin, limits_from_id("sm_90"), h200.file);
  EXPECT_NE(why.find("300000"), std::string::npos) << why;
  EXPECT_NE(why.find("232448"), std::string::npos) << why;

  const Variant& mi300 = variant_for("MI300X");
  CodeObject hsaco = parse_code_object(slurp(pkgs() / "full" / mi300.file), mi300.file);
  EXPECT_EQ(check_against(mi300, hsaco, limits_from_id("gfx942:sramecc+:xnack-"), mi300.file), "");
  big = mi300;
  big.shared_bytes = 70000;
  why = check_against(big, hsaco, limits_from_id("gfx942"), mi300.file);
  EXPECT_NE(why.find("70000"), std::string::npos) << why;
  EXPECT_NE(why.find("65536"), std::string::npos) << why;
  TargetLimits wave32 = limits_from_id("gfx942");
  wave32.warp_size = 32;
  why = check_against(mi300, hsaco, wave32, mi300.file);
  EXPECT_NE(why.find("wave64"), std::string::npos) << why;
  EXPECT_NE(why.find("wave32"), std::string::npos) << why;
  Variant persistent = mi300;
  persistent.config["NUM_SMS"] = 228;
  TargetLimits cus = limits_from_target(*m.target("MI300X"));  // 304 CUs
  why = check_against(persistent, hsaco, cus, mi300.file);
  EXPECT_NE(why.find("228"), std::string::npos) << why;
  EXPECT_NE(why.find("304"), std::string::npos) << why;
}

TEST(InputCache, GivesFillInputsBytesOncePerVerifyFile) {
  InputCache cache;
  const InputDist U{InputDist::kUniform, -2, 2};
  std::vector<unsigned char> want(2 * 3000);
  fill_inputs(42, 1, -2, 2, "bf16", want.data(), 3000);
  const auto& a = cache.get("verify/x.json", 42, 1, U, "bf16", 3000, want.size());
  EXPECT_EQ(a, want);
  const unsigned char* first = a.data();
  // the same file and input again: the same bytes, not generated again
  EXPECT_EQ(cache.get("verify/x.json", 42, 1, U, "bf16", 3000, want.size()).data(), first);
  // another seed in the same file is another input
  std::vector<unsigned char> other(want.size());
  fill_inputs(43, 1, -2, 2, "bf16", other.data(), 3000);
  EXPECT_EQ(cache.get("verify/x.json", 43, 1, U, "bf16", 3000, want.size()), other);
  // another file: the first file's inputs are dropped, the values are its own
  EXPECT_EQ(cache.get("verify/y.json", 42, 1, U, "bf16", 3000, want.size()), want);
}

TEST(InputCache, KeepsATimingDistributionApartFromTheVerificationRange) {
  // the same file, seed and tensor drawn normal (kiln-rt bench) and uniform
  // (kiln-rt verify) are two inputs, each as fill_dist makes it
  InputCache cache;
  const InputDist normal{InputDist::kNormal, 0, 1}, uniform{InputDist::kUniform, -1, 1};
  std::vector<unsigned char> n(2 * 1001), u(2 * 1001);
  fill_dist(7, 0, normal, "bf16", n.data(), 1001);
  fill_dist(7, 0, uniform, "bf16", u.data(), 1001);
  EXPECT_NE(n, u);
  EXPECT_EQ(cache.get("verify/x.json", 7, 0, normal, "bf16", 1001, n.size()), n);
  EXPECT_EQ(cache.get("verify/x.json", 7, 0, uniform, "bf16", 1001, u.size()), u);
}

TEST(VerifyData, ANormalTimingDistributionHasItsMeanAndDeviation) {
  const int64_t n = 200001;  // odd: the last element takes the pair's first draw alone
  std::vector<float> x(n);
  fill_dist(2444243355ull, 1, {InputDist::kNormal, 0.5, 2.0}, "fp32", x.data(), n);
  double sum = 0, sq = 0, quart = 0;
  for (float v : x) sum += v;
  const double mean = sum / n;
  for (float v : x) {
    sq += (v - mean) * (v - mean);
    quart += std::pow(v - mean, 4);
  }
  const double sd = std::sqrt(sq / n);
  EXPECT_NEAR(mean, 0.5, 0.02);
  EXPECT_NEAR(sd, 2.0, 0.02);
  EXPECT_NEAR(quart / n / std::pow(sd, 4), 3.0, 0.1);  // a normal's kurtosis, not a uniform's 1.8
  // deterministic: the same stream gives the same values
  std::vector<float> again(n);
  fill_dist(2444243355ull, 1, {InputDist::kNormal, 0.5, 2.0}, "fp32", again.data(), n);
  EXPECT_EQ(x, again);
  // uniform is fill_inputs itself
  std::vector<unsigned char> a(2 * 77), b(2 * 77);
  fill_dist(9, 2, {InputDist::kUniform, -3, 3}, "fp16", a.data(), 77);
  fill_inputs(9, 2, -3, 3, "fp16", b.data(), 77);
  EXPECT_EQ(a, b);
}

TEST(VerifyData, AnInputsTimingDistributionIsReadAndChecked) {
  auto spec_with = [](const nlohmann::json& timing) {
    nlohmann::json j = {{"format", "kiln-verify/1"}, {"seed", 3}, {"shape", {8}},
                        {"inputs", {{{"tensor", 0}, {"lo", -1.0}, {"hi", 1.0}}}}, {"outputs", nlohmann::json::array()}};
    if (!timing.is_null()) j["inputs"][0]["timing"] = timing;
    return VerifySpec::parse(j.dump(), "verify/v.json");
  };
  EXPECT_FALSE(spec_with(nullptr).inputs[0].timing);  // packages written before it
  // bench on such a package, and verify always, draw from the check's range
  EXPECT_EQ(input_dist(spec_with(nullptr).inputs[0], true), (InputDist{InputDist::kUniform, -1.0, 1.0}));
  auto n = spec_with({{"dist", "normal"}, {"mean", 0.0}, {"std", 1.5}}).inputs[0].timing;
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, (InputDist{InputDist::kNormal, 0.0, 1.5}));
  const auto with_normal = spec_with({{"dist", "normal"}, {"mean", 0.0}, {"std", 1.5}}).inputs[0];
  EXPECT_EQ(input_dist(with_normal, true), *n);                                       // bench
  EXPECT_EQ(input_dist(with_normal, false), (InputDist{InputDist::kUniform, -1.0, 1.0}));  // verify
  auto u = spec_with({{"dist", "uniform"}, {"lo", 0.95}, {"hi", 1.05}}).inputs[0].timing;
  ASSERT_TRUE(u);
  EXPECT_EQ(*u, (InputDist{InputDist::kUniform, 0.95, 1.05}));
  for (const auto& [bad, says] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"dist", "normal"}, {"mean", 0.0}, {"std", -1.0}}, "inputs[0].timing.std"},
           {{{"dist", "normal"}, {"mean", "0"}, {"std", 1.0}}, "inputs[0].timing.mean"},
           {{{"dist", "uniform"}, {"lo", 1.0}, {"hi", 0.0}}, "hi below lo"},
           {{{"dist", "cauchy"}, {"lo", 1.0}, {"hi", 2.0}}, "cauchy"},
           {{{"mean", 0.0}}, "inputs[0].timing"},
           {"normal", "inputs[0].timing"}}) {
    try {
      spec_with(bad);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("verify/v.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(RuntimeManifest, ConfirmedFlushBytesIsReadAndChecked) {
  nlohmann::json j = nlohmann::json::parse(slurp(pkgs() / "full" / "manifest.json"));
  auto& var = j["kernels"][0]["variants"][0];
  var["confirmed"] = {{"median_ms", 0.07}, {"runs", 100}, {"flush_bytes", 268435456}};
  Manifest m = Manifest::parse(j.dump(), "manifest.json");
  EXPECT_EQ(m.kernels[0].variants[0].confirmed_flush_bytes, 268435456);
  EXPECT_EQ(m.kernels[0].variants[0].confirmed_median_ms, 0.07);
  var["confirmed"].erase("flush_bytes");
  EXPECT_FALSE(Manifest::parse(j.dump(), "manifest.json").kernels[0].variants[0].confirmed_flush_bytes);
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-5), nlohmann::json("256M")}) {
    var["confirmed"]["flush_bytes"] = bad;
    try {
      Manifest::parse(j.dump(), "manifest.json");
      ADD_FAILURE() << "accepted flush_bytes " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("confirmed.flush_bytes"), std::string::npos) << e.what();
    }
  }
}

TEST(RuntimeManifest, ConfirmedClockAndPowerLimitAreReadAndChecked) {
  nlohmann::json j = nlohmann::json::parse(slurp(pkgs() / "full" / "manifest.json"));
  auto& var = j["kernels"][0]["variants"][0];
  var["confirmed"] = {{"median_ms", 1.6}, {"runs", 100}, {"sm_clock_mhz", 1452.5}, {"power_limited", true}};
  Manifest m = Manifest::parse(j.dump(), "manifest.json");
  EXPECT_EQ(m.kernels[0].variants[0].confirmed_sm_clock_mhz, 1452.5);
  EXPECT_EQ(m.kernels[0].variants[0].confirmed_power_limited, true);
  var["confirmed"]["sm_clock_mhz"] = 1980;  // an integer is a number too
  var["confirmed"]["power_limited"] = false;
  m = Manifest::parse(j.dump(), "manifest.json");
  EXPECT_EQ(m.kernels[0].variants[0].confirmed_sm_clock_mhz, 1980.0);
  EXPECT_EQ(m.kernels[0].variants[0].confirmed_power_limited, false);
  var["confirmed"].erase("sm_clock_mhz");
  var["confirmed"].erase("power_limited");
  m = Manifest::parse(j.dump(), "manifest.json");
  EXPECT_FALSE(m.kernels[0].variants[0].confirmed_sm_clock_mhz);
  EXPECT_FALSE(m.kernels[0].variants[0].confirmed_power_limited);
  const std::vector<std::pair<std::string, nlohmann::json>> bad = {
      {"sm_clock_mhz", 0}, {"sm_clock_mhz", -1450.0}, {"sm_clock_mhz", "1450 MHz"}, {"sm_clock_mhz", nullptr},
      {"power_limited", 1}, {"power_limited", "yes"}, {"power_limited", nullptr}};
  for (const auto& [key, value] : bad) {
    nlohmann::json k = j;
    k["kernels"][0]["variants"][0]["confirmed"][key] = value;
    try {
      Manifest::parse(k.dump(), "manifest.json");
      ADD_FAILURE() << "accepted " << key << " " << value.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("kernels[0].variants[0].confirmed." + key), std::string::npos)
          << e.what();
    }
  }
}
