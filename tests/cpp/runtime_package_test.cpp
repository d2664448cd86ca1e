// Opening real packages through the C API: integrity (SHA256SUMS, flipped,
// truncated, unlisted), signatures, format, wrong-arch code objects, static
// targets, launch by meaning (exact, range, untuned + miss log), the HIP
// backend to the device boundary, and kiln-rt's exit codes.
#include <gtest/gtest.h>

#include <functional>

#include "backend.h"
#include "error.h"
#include "expr.h"
#include "kiln/runtime.h"
#include "runtime_test_util.h"

using namespace rt_test;

namespace {

struct Opened {
  kiln_status st;
  std::string err;
  kiln_package* pkg;
};

Opened open_pkg(const fs::path& dir, const char* target, const char* pubkey = nullptr) {
  kiln_open_options o{};
  o.struct_size = sizeof o;
  o.target = target;
  o.pubkey_pem = pubkey;
  kiln_package* p = nullptr;
  kiln_status st = kiln_package_open(dir.c_str(), &o, &p);
  return {st, kiln_last_error(), p};
}

std::string key(const char* name) { return (pkgs() / "keys" / name).string(); }

void expect_refused(const Opened& o, kiln_status st, std::initializer_list<const char*> words) {
  EXPECT_EQ(o.st, st) << o.err;
  EXPECT_EQ(o.pkg, nullptr);
  for (const char* w : words) EXPECT_NE(o.err.find(w), std::string::npos) << "'" << w << "' not in: " << o.err;
  kiln_package_close(o.pkg);
}

const char* kObj = "objects/softmax-64x1000-fp32-r0-gfx942.hsaco";

}  // namespace

TEST(RuntimePackage, OpensSignedPackageForStaticTargets) {
  for (const char* t : {"MI300X", "gfx942:sramecc+:xnack-", "amdgcn-amd-amdhsa--gfx90a", "gfx1100", "H200", "sm_90"}) {
    Opened o = open_pkg(pkgs() / "full", t, key("key.pub").c_str());
    EXPECT_EQ(o.st, KILN_OK) << t << ": " << o.err;
    EXPECT_EQ(kiln_package_has_device(o.pkg), 0);
    kiln_package_close(o.pkg);
  }
}

TEST(RuntimePackage, FlippedByteRefusedNamingTheFile) {
  fs::path d = copy_pkg("full", "flip");
  std::string b = slurp(d / kObj);
  b[b.size() / 2] ^= 0x01;
  spit(d / kObj, b);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {kObj, "content changed"});
}

TEST(RuntimePackage, TruncatedFileRefusedAsTruncated) {
  fs::path d = copy_pkg("full", "trunc");
  std::string b = slurp(d / kObj);
  spit(d / kObj, b.substr(0, b.size() - 100));
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {kObj, "truncated"});
}

TEST(RuntimePackage, UnlistedFileRefused) {
  fs::path d = copy_pkg("full", "unlisted");
  fs::copy_file(d / kObj, d / "objects" / "extra.hsaco");
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"unlisted file objects/extra.hsaco"});
  fs::remove(d / "objects" / "extra.hsaco");
  spit(d / "verify" / "notes.json", "{}");
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"unlisted file verify/notes.json"});
}

TEST(RuntimePackage, TamperedManifestRefusedBeforeItIsRead) {
  fs::path d = copy_pkg("full", "manifest");
  std::string m = slurp(d / "manifest.json");
  m.replace(m.find("\"softmax\""), 9, "\"softmux\"");
  spit(d / "manifest.json", m);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"manifest.json", "content changed"});
}

TEST(RuntimePackage, WrongFormatVersionRefused) {
  fs::path d = copy_pkg("mi300x", "format");
  std::string m = slurp(d / "manifest.json");
  m.replace(m.find("kiln-package/2"), 14, "kiln-package/1");
  spit(d / "manifest.json", m);
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_FORMAT, {"kiln-package/1", "kiln-package/2"});
}

TEST(RuntimePackage, WrongArchCodeObjectRefused) {
  // a gfx90a code object labelled for MI300X (gfx942), hashes made consistent
  fs::path d = copy_pkg("full", "arch");
  fs::copy_file(d / "objects/softmax-64x1000-fp32-r0-gfx90a.hsaco", d / kObj, fs::copy_options::overwrite_existing);
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  std::string image = slurp(d / kObj);
  for (auto& k : m["kernels"])
    for (auto& v : k["variants"])
      if (v["file"] == kObj) {
        v["size"] = image.size();
        v.erase("sha256");
      }
  spit(d / "manifest.json", m.dump());
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_COMPAT, {kObj, "gfx90a", "MI300X", "gfx942"});
  // the other targets' objects are intact: the package still opens for them
  Opened ok = open_pkg(d, "MI250X");
  EXPECT_EQ(ok.st, KILN_OK) << ok.err;
  kiln_package_close(ok.pkg);
  CmdResult r = run(std::string(KILN_BINARY_DIR) + "/kiln-rt verify " + shell_quote(d.string()));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("wrong architecture"), std::string::npos) << r.out;
}

TEST(RuntimePackage, ArgumentListMustMatchTheCodeObject) {
  // a manifest that forgets Triton's hidden profile_scratch pointer
  fs::path d = copy_pkg("mi300x", "args");
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  auto& args = m["kernels"][0]["variants"][0]["args"];
  ASSERT_EQ(args.back()["name"], "profile_scratch");
  args.erase(args.size() - 1);
  spit(d / "manifest.json", m.dump());
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_COMPAT, {"lists 4 arguments", "takes 5"});
  // n_cols declared i64 where the kernel takes an i32
  m["kernels"][0]["variants"][0]["args"].push_back({{"name", "profile_scratch"}, {"type", "*i8"}, {"hidden", true},
                                                     {"bind", {{"scratch", "profile"}}}});
  m["kernels"][0]["variants"][0]["args"][2]["type"] = "i64";
  spit(d / "manifest.json", m.dump());
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_COMPAT, {"n_cols", "i64", "4 bytes"});
}

TEST(RuntimePackage, Signatures) {
  // another key's signature
  expect_refused(open_pkg(pkgs() / "full", "MI300X", key("other.pub").c_str()), KILN_E_SIGNATURE,
                 {"bad signature", "SHA256SUMS.sig"});
  // unsigned with a key configured
  expect_refused(open_pkg(pkgs() / "mi300x", "MI300X", key("key.pub").c_str()), KILN_E_SIGNATURE, {"unsigned"});
  // SHA256SUMS changed after signing (files and sums made consistent again)
  fs::path d = copy_pkg("full", "resigned");
  std::string m = slurp(d / "manifest.json");
  m.replace(m.find("\"value_ms\": 0"), 13, "\"value_ms\": 7");
  spit(d / "manifest.json", m);
  std::string sig = slurp(d / "SHA256SUMS.sig");
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  spit(d / "SHA256SUMS.sig", sig);
  expect_refused(open_pkg(d, "MI300X", key("key.pub").c_str()), KILN_E_SIGNATURE, {"bad signature"});
  // re-signed with the right key: accepted
  ASSERT_EQ(make_package("resum " + shell_quote(d.string()) + " --sign " + shell_quote(key("key.pem"))).rc, 0);
  Opened ok = open_pkg(d, "MI300X", key("key.pub").c_str());
  EXPECT_EQ(ok.st, KILN_OK) << ok.err;
  kiln_package_close(ok.pkg);
}

TEST(RuntimePackage, StaticTargetWithNoCodeObjectsIsAnError) {
  expect_refused(open_pkg(pkgs() / "mi300x", "gfx90a"), KILN_E_COMPAT, {"gfx90a", "MI300X gfx942"});
  expect_refused(open_pkg(pkgs() / "full", "sm_80"), KILN_E_COMPAT, {"sm_80"});
}

TEST(RuntimePackage, KernelFindExactRangeUntunedAndMissLog) {
  fs::path log = fs::path(KILN_BINARY_DIR) / "tests" / ("miss-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(log);
  ::setenv("KILN_MISS_LOG", log.c_str(), 1);
  Opened o = open_pkg(pkgs() / "bundle", "gfx942:sramecc+:xnack-");
  ASSERT_EQ(o.st, KILN_OK) << o.err;
  kiln_kernel* k = nullptr;
  int64_t exact[2] = {64, 1000};
  ASSERT_EQ(kiln_kernel_find(o.pkg, "softmax", exact, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  std::string desc = kiln_kernel_describe(k);
  EXPECT_NE(desc.find("softmax-64x1000-fp32-r0.co"), std::string::npos) << desc;
  EXPECT_NE(desc.find("grid=[64,1,1]"), std::string::npos) << desc;
  EXPECT_NE(desc.find("block=[256,1,1]"), std::string::npos) << desc;  // rank 0: 4 warps of 64
  EXPECT_EQ(kiln_kernel_num_tensors(k), 2);
  EXPECT_EQ(kiln_kernel_tensor_numel(k, 1), 64000);
  // static target: no launch
  void* ptrs[2] = {nullptr, nullptr};
  EXPECT_EQ(kiln_launch(k, ptrs, 2, nullptr), KILN_E_NO_DEVICE);
  kiln_kernel_free(k);

  int64_t in_range[2] = {300, 512};  // the variant's range admits it: grid follows the shape
  ASSERT_EQ(kiln_kernel_find(o.pkg, "softmax", in_range, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  EXPECT_NE(std::string(kiln_kernel_describe(k)).find("grid=[300,1,1]"), std::string::npos);
  kiln_kernel_free(k);

  int64_t too_wide[2] = {64, 2000};  // beyond BLOCK=1024
  EXPECT_EQ(kiln_kernel_find(o.pkg, "softmax", too_wide, 2, "fp32", &k), KILN_E_UNTUNED);
  EXPECT_NE(std::string(kiln_last_error()).find("untuned shape softmax 64x2000 fp32"), std::string::npos)
      << kiln_last_error();
  int64_t add_other[1] = {4096};  // add is exact-only
  EXPECT_EQ(kiln_kernel_find(o.pkg, "add", add_other, 1, "fp16", &k), KILN_E_UNTUNED);
  EXPECT_EQ(kiln_kernel_find(o.pkg, "add", exact, 1, "fp32", &k), KILN_E_UNTUNED);  // wrong dtype
  EXPECT_EQ(kiln_kernel_find(o.pkg, "gemm", exact, 2, "fp32", &k), KILN_E_NOT_FOUND);
  ::unsetenv("KILN_MISS_LOG");
  kiln_package_close(o.pkg);

  std::istringstream lines(slurp(log));
  std::vector<nlohmann::json> misses;
  for (std::string l; std::getline(lines, l);) misses.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(misses.size(), 3u);
  EXPECT_EQ(misses[0]["op"], "softmax");
  EXPECT_EQ(misses[0]["shape"], nlohmann::json({64, 2000}));
  EXPECT_EQ(misses[0]["dtype"], "fp32");
  EXPECT_NE(misses[0]["target"].get<std::string>().find("gfx942"), std::string::npos);
  EXPECT_GT(misses[0]["time"].get<double>(), 1.7e9);
  EXPECT_EQ(misses[1]["op"], "add");
}

TEST(RuntimePackage, TmaBindsAreEvaluatedPerShape) {
  // the H200 softmax's input passed as a TMA descriptor (rows x cols, row stride s1*4 bytes)
  fs::path d = copy_pkg("full", "tma");
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  for (auto& v : m["kernels"][0]["variants"]) {
    if (v["target"] != "H200") continue;
    v["args"][0] = {{"name", "x_desc"}, {"type", "nvTmaDesc"},
                    {"bind", {{"tma", {{"tensor", 0}, {"dims", {"s0", "s1"}}, {"strides_bytes", {"s1 * 4"}},
                                       {"box", {1, 1024}}, {"elem", "fp32"}, {"swizzle_bytes", 0}}}}}};
  }
  spit(d / "manifest.json", m.dump());
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  Opened o = open_pkg(d, "H200");
  ASSERT_EQ(o.st, KILN_OK) << o.err;
  kiln_kernel* k = nullptr;
  int64_t ok_shape[2] = {64, 1000};  // 4000-byte rows: a multiple of 16
  EXPECT_EQ(kiln_kernel_find(o.pkg, "softmax", ok_shape, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  kiln_kernel_free(k);
  int64_t odd[2] = {64, 1001};  // in range, but 4004-byte rows cannot be a TMA stride
  EXPECT_EQ(kiln_kernel_find(o.pkg, "softmax", odd, 2, "fp32", &k), KILN_E_LAUNCH);
  EXPECT_NE(std::string(kiln_last_error()).find("4004 bytes, not a multiple of 16"), std::string::npos)
      << kiln_last_error();
  kiln_package_close(o.pkg);
}

TEST(RuntimePackage, ParamsPickTheKernelAndPlanReadsTheParameterBuffer) {
  // the softmax kernel twice, the copy with other params: found by neither
  // alone without params, each by its params
  fs::path d = copy_pkg("full", "params");
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  auto copy = m["kernels"][0];
  copy["params"] = {{"kind", "other"}, {"k", 3}};
  m["kernels"].push_back(copy);
  spit(d / "manifest.json", m.dump());
  ASSERT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  Opened o = open_pkg(d, "H200");
  ASSERT_EQ(o.st, KILN_OK) << o.err;
  kiln_kernel* k = nullptr;
  int64_t shape[2] = {64, 1000};
  EXPECT_EQ(kiln_kernel_find(o.pkg, "softmax", shape, 2, "fp32", &k), KILN_E_USAGE);
  EXPECT_NE(std::string(kiln_last_error()).find("different params"), std::string::npos) << kiln_last_error();
  EXPECT_NE(std::string(kiln_last_error()).find("\"kind\":\"other\""), std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_kernel_find_params(o.pkg, "softmax", "{\"kind\": \"none\"}", shape, 2, "fp32", &k),
            KILN_E_NOT_FOUND);
  EXPECT_EQ(kiln_kernel_find_params(o.pkg, "softmax", "[1]", shape, 2, "fp32", &k), KILN_E_USAGE);
  ASSERT_EQ(kiln_kernel_find_params(o.pkg, "softmax", "{\"kind\": \"other\", \"k\": 3.0}", shape, 2, "fp32", &k),
            KILN_OK) << kiln_last_error();
  auto plan = nlohmann::json::parse(kiln_kernel_plan(k));
  kiln_kernel_free(k);
  EXPECT_EQ(plan["grid"], nlohmann::json({64, 1, 1}));
  EXPECT_EQ(plan["numel"], nlohmann::json({64000, 64000}));
  // every argument as the manifest binds it, evaluated at the shape
  nlohmann::json var;
  for (auto& v : m["kernels"][0]["variants"])
    if (v["target"] == "H200" && v["rank"] == 0) var = v;
  ASSERT_EQ(plan["args"].size(), var["args"].size());
  int scalars = 0;
  for (size_t i = 0; i < var["args"].size(); ++i) {
    const auto& b = var["args"][i]["bind"];
    const auto& a = plan["args"][i];
    EXPECT_EQ(a["name"], var["args"][i]["name"]);
    if (b.contains("tensor")) {
      EXPECT_EQ(a["tensor"], b["tensor"]);
    }
    if (b.contains("expr")) {
      ++scalars;
      int64_t want = kiln::rt::Expr::parse(b["expr"].get<std::string>()).eval(std::vector<int64_t>{64, 1000});
      EXPECT_EQ(a["value"].get<int64_t>(), want) << a;
    }
    if (b.contains("scratch")) {
      EXPECT_EQ(a["scratch"], b["scratch"]);
    }
  }
  EXPECT_GE(scalars, 1);
  // the one-params-set softmax of another package needs no params
  kiln_package_close(o.pkg);
  o = open_pkg(pkgs() / "full", "H200");
  ASSERT_EQ(o.st, KILN_OK) << o.err;
  ASSERT_EQ(kiln_kernel_find(o.pkg, "softmax", shape, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  kiln_kernel_free(k);
  kiln_package_close(o.pkg);
}

TEST(RuntimePackage, HipBackendLoadsAndReportsNoDevice) {
  std::string why;
  auto hip = kiln::rt::open_hip(&why);
  ASSERT_NE(hip, nullptr) << why << " (libamdhip64 is installed by scripts/setup.sh)";
  EXPECT_EQ(hip->device_count(), 0);
  EXPECT_NE(why.find("no device"), std::string::npos) << why;
  // with no device, opening for a device says so
  kiln_open_options o{};
  o.struct_size = sizeof o;
  kiln_package* p = nullptr;
  kiln_status st = kiln_package_open((pkgs() / "mi300x").c_str(), &o, &p);
  EXPECT_TRUE(st == KILN_E_NO_DEVICE || st == KILN_E_NO_RUNTIME) << kiln_last_error();
  EXPECT_NE(std::string(kiln_last_error()).find("libamdhip64"), std::string::npos) << kiln_last_error();
}

TEST(RuntimePackage, KilnRtVerifyExitCodes) {
  std::string bin = std::string(KILN_BINARY_DIR) + "/kiln-rt";
  CmdResult r = run(bin + " verify " + shell_quote((pkgs() / "mi300x").string()));
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("no device present"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("static: 3 code objects, 0 problems"), std::string::npos) << r.out;
  r = run(bin + " verify " + shell_quote((pkgs() / "full").string()) + " --pubkey " + shell_quote(key("key.pub")) +
          " --target MI300X");
  EXPECT_EQ(r.rc, 3) << r.out;
  r = run(bin + " verify " + shell_quote((pkgs() / "full").string()) + " --pubkey " + shell_quote(key("other.pub")));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("bad signature"), std::string::npos) << r.out;
  r = run(bin + " verify");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = run(bin + " info " + shell_quote((pkgs() / "bundle").string()) + " --target gfx90a");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("[fits gfx90a]"), std::string::npos) << r.out;
}

// Issue 22: every path a package names is a relative path inside it, listed in
// SHA256SUMS; declared sizes are bounded.
namespace {

nlohmann::json& first_variant(nlohmann::json& m) { return m["kernels"][0]["variants"][0]; }

// A copy of "mi300x" whose first variant's `key` is set by `edit` (given the
// package directory), re-summed so the hashes agree.
fs::path edited_pkg(const std::string& tag, const std::function<void(const fs::path&, nlohmann::json&)>& edit) {
  fs::path d = copy_pkg("mi300x", tag);
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  edit(d, m);
  spit(d / "manifest.json", m.dump());
  EXPECT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  return d;
}

// A copy of the variant's code object outside the package, same bytes.
fs::path outside_copy(const fs::path& d, const nlohmann::json& m, const std::string& tag) {
  fs::path out = d.parent_path() / ("outside-" + tag + "-" + std::to_string(::getpid()));
  fs::create_directories(out);
  fs::copy_file(d / first_variant(const_cast<nlohmann::json&>(m))["file"].get<std::string>(), out / "x.hsaco",
                fs::copy_options::overwrite_existing);
  return out / "x.hsaco";
}

}  // namespace

TEST(RuntimePackage, DotDotPathInManifestRefused) {
  fs::path d = edited_pkg("dotdot", [](const fs::path& d, nlohmann::json& m) {
    outside_copy(d, m, "dotdot");
    first_variant(m)["file"] = "../outside-dotdot-" + std::to_string(::getpid()) + "/x.hsaco";
  });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"../outside-dotdot", "'..' component"});
  CmdResult r = run(std::string(KILN_BINARY_DIR) + "/kiln-rt verify " + shell_quote(d.string()));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.out.find("0 problems"), std::string::npos) << r.out;
}

TEST(RuntimePackage, AbsolutePathInManifestRefused) {
  fs::path d = edited_pkg("abs", [](const fs::path& d, nlohmann::json& m) {
    first_variant(m)["file"] = outside_copy(d, m, "abs").string();
  });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"outside-abs", "is absolute"});
  d = edited_pkg("absverify", [](const fs::path&, nlohmann::json& m) { first_variant(m)["verify"] = "/etc/passwd"; });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"verify", "/etc/passwd", "is absolute"});
  d = edited_pkg("dotverify", [](const fs::path&, nlohmann::json& m) {
    first_variant(m)["verify"] = "verify/../../../../../etc/passwd";
  });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"verify", "'..' component"});
  d = edited_pkg("emptycomp", [](const fs::path&, nlohmann::json& m) {
    std::string f = first_variant(m)["file"];
    first_variant(m)["file"] = "objects//" + f.substr(f.find('/') + 1);
  });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"objects//", "empty component"});
}

TEST(RuntimePackage, SymlinkOutOfThePackageRefused) {
  std::string obj;
  fs::path d = edited_pkg("symlink", [&](const fs::path& d, nlohmann::json& m) {
    obj = first_variant(m)["file"];
    fs::path out = outside_copy(d, m, "symlink");
    fs::remove(d / obj);
    fs::create_symlink(out, d / obj);  // same bytes: the hashes agree, the file is outside
  });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {obj.c_str(), "outside the package"});
  // a whole directory linked out of the package
  fs::path e = copy_pkg("mi300x", "symdir");
  fs::path out = e.parent_path() / ("outside-verify-" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::rename(e / "verify", out);
  fs::create_directory_symlink(out, e / "verify");
  expect_refused(open_pkg(e, "MI300X"), KILN_E_INTEGRITY, {"verify/", "outside the package"});
}

TEST(RuntimePackage, ManifestFileNotInSha256SumsRefused) {
  std::string obj;
  fs::path d = edited_pkg("unsummed", [&](const fs::path& d, nlohmann::json& m) {
    obj = first_variant(m)["file"];
    fs::copy_file(d / obj, d / "extra.hsaco");
    first_variant(m)["file"] = "extra.hsaco";
  });
  std::string sums = slurp(d / "SHA256SUMS"), kept;
  std::istringstream in(sums);
  for (std::string line; std::getline(in, line);)
    if (line.find("  extra.hsaco") == std::string::npos) kept += line + "\n";
  ASSERT_NE(kept, sums);
  spit(d / "SHA256SUMS", kept);
  expect_refused(open_pkg(d, "MI300X"), KILN_E_INTEGRITY, {"extra.hsaco", "not listed in SHA256SUMS"});
}

TEST(RuntimePackage, DeclaredSizesAreBounded) {
  std::string bin = std::string(KILN_BINARY_DIR) + "/kiln-rt verify ";
  fs::path d = edited_pkg("negsize", [](const fs::path&, nlohmann::json& m) { first_variant(m)["size"] = -1; });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_FORMAT, {"size", "non-negative"});
  d = edited_pkg("negshape", [](const fs::path&, nlohmann::json& m) { m["kernels"][0]["shape"][0] = -4; });
  expect_refused(open_pkg(d, "MI300X"), KILN_E_FORMAT, {"shape", "negative"});
  d = edited_pkg("hugesize", [](const fs::path&, nlohmann::json& m) { first_variant(m)["size"] = int64_t(1) << 62; });
  CmdResult r = run(bin + shell_quote(d.string()) + " --target MI300X");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("declared size 4611686018427387904 bytes is above the bound"), std::string::npos) << r.out;
  d = edited_pkg("wrongsize", [](const fs::path&, nlohmann::json& m) { first_variant(m)["size"] = 17; });
  r = run(bin + shell_quote(d.string()) + " --target MI300X");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("declared size 17 bytes, the code object has"), std::string::npos) << r.out;
  d = edited_pkg("hugeshape", [](const fs::path&, nlohmann::json& m) {
    for (auto& s : m["kernels"][0]["shape"]) s = int64_t(1) << 40;
  });
  r = run(bin + shell_quote(d.string()) + " --target MI300X");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("overflows int64"), std::string::npos) << r.out;
  d = edited_pkg("bigshape", [](const fs::path&, nlohmann::json& m) {
    for (auto& s : m["kernels"][0]["shape"]) s = int64_t(1) << 20;  // 2^40 fp32 elements: 4 TiB
  });
  r = run(bin + shell_quote(d.string()) + " --target MI300X");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("above the bound of 1099511627776 bytes"), std::string::npos) << r.out;
}

// A split-K kernel adds into its output: the variant's "zero_before_launch"
// names the pointer arguments whose tensors every launch clears first. Up to
// the device boundary: parsed and checked at open, resolved to (tensor, bytes)
// at the launch's shape in the plan, shown by kiln-rt info.
namespace {

// The name of the variant's pointer argument bound to tensor `t`.
std::string pointer_to(const nlohmann::json& var, int t) {
  for (const auto& a : var["args"])
    if (a["bind"].contains("tensor") && a["bind"]["tensor"] == t) return a["name"];
  return "";
}

fs::path with_zero(const std::string& tag, const std::function<nlohmann::json(const nlohmann::json&)>& names) {
  fs::path d = copy_pkg("full", tag);
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  for (auto& v : m["kernels"][0]["variants"])
    if (v["target"] == "H200") v["zero_before_launch"] = names(v);
  spit(d / "manifest.json", m.dump());
  EXPECT_EQ(make_package("resum " + shell_quote(d.string())).rc, 0);
  return d;
}

}  // namespace

TEST(RuntimePackage, ZeroBeforeLaunchResolvesToTheOutputsBytes) {
  std::string out_name;
  fs::path d = with_zero("zero", [&](const nlohmann::json& v) {
    out_name = pointer_to(v, 1);  // softmax: tensor 1 is the output
    return nlohmann::json::array({out_name});
  });
  ASSERT_FALSE(out_name.empty());
  Opened o = open_pkg(d, "H200");
  ASSERT_EQ(o.st, KILN_OK) << o.err;
  kiln_kernel* k = nullptr;
  int64_t exact[2] = {64, 1000};
  ASSERT_EQ(kiln_kernel_find(o.pkg, "softmax", exact, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  auto plan = nlohmann::json::parse(kiln_kernel_plan(k));
  EXPECT_EQ(plan["zero_before_launch"], nlohmann::json::parse(R"([{"tensor": 1, "bytes": 256000}])")) << plan;
  void* ptrs[2] = {nullptr, nullptr};
  EXPECT_EQ(kiln_launch(k, ptrs, 2, nullptr), KILN_E_NO_DEVICE);  // static target: nothing queued
  kiln_kernel_free(k);
  int64_t in_range[2] = {300, 512};  // the bytes follow the launch's shape
  ASSERT_EQ(kiln_kernel_find(o.pkg, "softmax", in_range, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  plan = nlohmann::json::parse(kiln_kernel_plan(k));
  EXPECT_EQ(plan["zero_before_launch"], nlohmann::json::parse(R"([{"tensor": 1, "bytes": 614400}])")) << plan;
  kiln_kernel_free(k);
  kiln_package_close(o.pkg);

  // a variant without the field clears nothing
  o = open_pkg(pkgs() / "full", "H200");
  ASSERT_EQ(o.st, KILN_OK) << o.err;
  ASSERT_EQ(kiln_kernel_find(o.pkg, "softmax", exact, 2, "fp32", &k), KILN_OK) << kiln_last_error();
  EXPECT_EQ(nlohmann::json::parse(kiln_kernel_plan(k))["zero_before_launch"], nlohmann::json::array());
  kiln_kernel_free(k);
  kiln_package_close(o.pkg);

  CmdResult r = run(std::string(KILN_BINARY_DIR) + "/kiln-rt info " + shell_quote(d.string()) + " --target H200");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("zeroes " + out_name), std::string::npos) << r.out;
}

TEST(RuntimePackage, ZeroBeforeLaunchMustNameATensorArgument) {
  auto refused = [](const std::string& tag, nlohmann::json names, const char* why) {
    fs::path d = with_zero(tag, [&](const nlohmann::json&) { return names; });
    expect_refused(open_pkg(d, "H200"), KILN_E_FORMAT, {"zero_before_launch", why});
  };
  refused("zero-unknown", {"no_such_arg"}, "\"no_such_arg\" is not a pointer argument bound to a tensor");
  std::string scalar;  // an integer argument of the variant (bound to an expression)
  fs::path s = with_zero("zero-scalar", [&](const nlohmann::json& v) {
    for (const auto& a : v["args"])
      if (a["bind"].contains("expr")) scalar = a["name"];
    return nlohmann::json::array({scalar});
  });
  ASSERT_FALSE(scalar.empty());
  expect_refused(open_pkg(s, "H200"), KILN_E_FORMAT,
                 {"zero_before_launch", ("\"" + scalar + "\" is not a pointer argument bound to a tensor").c_str()});
  refused("zero-type", {1}, "expected an argument name");
  refused("zero-object", nlohmann::json::object(), "expected an array");
  fs::path d = with_zero("zero-twice", [](const nlohmann::json& v) {
    return nlohmann::json::array({pointer_to(v, 1), pointer_to(v, 1)});
  });
  expect_refused(open_pkg(d, "H200"), KILN_E_FORMAT, {"zero_before_launch", "twice"});
}
