// The pure parts of `kiln package`: target resolution, --out safety and path
// sanitising, bundle entry IDs and the bundler, Ed25519 signing, the code
// object version.
#include <gtest/gtest.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "knowledge/target_list.h"
#include "manifest/manifest.h"
#include "manifest/misses.h"
#include "package/bundle.h"
#include "package/out_dir.h"
#include "package/package.h"
#include "package/signing.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

const Knowledge& knowledge() {
  static const Knowledge k = Knowledge::load(KILN_SOURCE_DIR);
  return k;
}

std::vector<std::string> names(const std::vector<const Target*>& ts) {
  std::vector<std::string> out;
  for (const Target* t : ts) out.push_back(t->name);
  return out;
}

struct TempDir {
  fs::path dir;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "kiln-package-test-XXXXXX").string();
    dir = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(dir); }
};

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST(TargetList, NamesArchitecturesAndTargetIds) {
  const auto& reg = knowledge().targets;
  EXPECT_EQ(names(resolve_targets(reg, "MI300X")), (std::vector<std::string>{"MI300X"}));
  EXPECT_EQ(names(resolve_targets(reg, "mi300x, MI250X,MI355X")),
            (std::vector<std::string>{"MI300X", "MI250X", "MI355X"}));
  // an architecture is every target of it (configs/targets: MI300X and MI325X are gfx942)
  EXPECT_EQ(names(resolve_targets(reg, "gfx942")), (std::vector<std::string>{"MI300X", "MI325X"}));
  EXPECT_EQ(names(resolve_targets(reg, "sm_90")), (std::vector<std::string>{"H100", "H200"}));
  EXPECT_EQ(names(resolve_targets(reg, "sm_90a")), (std::vector<std::string>{"H100", "H200"}));
  EXPECT_EQ(names(resolve_targets(reg, "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-")),
            (std::vector<std::string>{"MI250X"}));
  // each once, in the order first named
  EXPECT_EQ(names(resolve_targets(reg, "H200,sm_90,H200")), (std::vector<std::string>{"H200", "H100"}));
}

TEST(TargetList, UnknownItemsAreNamed) {
  const auto& reg = knowledge().targets;
  for (const char* bad : {"gfx1234", "sm_12", "MI999", "", " , ", "sm_", "gfx"}) {
    try {
      resolve_targets(reg, bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_TRUE(m.find("unknown target") != std::string::npos || m.find("names no target") != std::string::npos) << m;
    }
  }
  EXPECT_EQ(arch_of("GFX942"), "gfx942");
  EXPECT_EQ(arch_of("sm_90a"), "sm_90");
  EXPECT_EQ(arch_of("MI300X"), "");
}

TEST(OutDir, SafeComponentNeverEscapes) {
  for (const char* hostile : {"../../x/pwn", "..", ".", "/etc/passwd", "a/../../b", "....", "x\ny", ""}) {
    const std::string s = safe_component(hostile);
    EXPECT_FALSE(s.empty());
    EXPECT_EQ(s.find('/'), std::string::npos) << s;
    EXPECT_EQ(s.find(".."), std::string::npos) << s;
    EXPECT_NE(s.front(), '.') << s;
  }
  EXPECT_EQ(safe_component("softmax"), "softmax");
  EXPECT_EQ(safe_component("16384x4096"), "16384x4096");
  EXPECT_EQ(safe_component(std::string(500, 'a')).size(), 80u);
}

TEST(OutDir, PathInsideRefusesEscapes) {
  const fs::path root = "/tmp/pkgroot";
  EXPECT_EQ(path_inside(root, "objects/a.hsaco"), fs::path("/tmp/pkgroot/objects/a.hsaco"));
  for (const char* bad : {"../x", "objects/../../x", "/etc/passwd", "", "./a", "objects/."})
    EXPECT_THROW(path_inside(root, bad), std::invalid_argument) << bad;
}

TEST(OutDir, RefusesRootHomeCwdCatalogAndAncestors) {
  TempDir t;
  const fs::path work = t.dir / "work", home = t.dir / "home";
  fs::create_directories(work / "sub");
  fs::create_directories(home);
  const fs::path old_cwd = fs::current_path();
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  fs::current_path(work);
  const std::vector<fs::path> catalog_dir = {t.dir / "cat"};
  for (const std::string& bad : std::vector<std::string>{"/", ".", "./", "..", "../", "sub/..", work.string() + "/", home.string(),
                                home.string() + "//", t.dir.string(), (t.dir / "cat").string(),
                                (t.dir / "cat").string() + "/"})
    EXPECT_THROW(check_out_allowed(bad, catalog_dir), std::invalid_argument) << bad;
  EXPECT_NO_THROW(check_out_allowed("sub/pkg", catalog_dir));
  EXPECT_NO_THROW(check_out_allowed(t.dir / "dist/", catalog_dir));
  write(work / "file", "x");
  EXPECT_THROW(check_out_allowed("file", catalog_dir), std::invalid_argument);
  fs::current_path(old_cwd);
  if (old_home) ::setenv("HOME", saved_home.c_str(), 1);
  else ::unsetenv("HOME");
}

TEST(OutDir, TempSiblingIsFreshAndInstallReplacesOnlyPackages) {
  TempDir t;
  const fs::path out = t.dir / "dist";
  write(t.dir / "dist.tmp-kiln", "unrelated");
  const fs::path a = make_temp_sibling(out), b = make_temp_sibling(out.string() + "/");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.parent_path(), t.dir);
  EXPECT_TRUE(fs::is_empty(a));
  write(a / "manifest.json", R"({"format": "kiln-package/2"})");
  install_dir(a, out, false);  // out did not exist
  EXPECT_FALSE(is_kiln_package(out));  // a bare marker is not a package: no SHA256SUMS
  EXPECT_EQ(why_not_kiln_package(out), "no SHA256SUMS");
  write(out / "SHA256SUMS", std::string(64, '0') + "  manifest.json\n");
  EXPECT_TRUE(is_kiln_package(out)) << why_not_kiln_package(out);
  write(b / "manifest.json", R"({"format": "kiln-package/2", "n": 2})");
  EXPECT_THROW(install_dir(b, out, false), std::invalid_argument);  // a package needs force
  install_dir(b, out.string() + "/", true);
  EXPECT_NE(read(out / "manifest.json").find("\"n\": 2"), std::string::npos);
  // not a package: never replaced, force or not
  const fs::path other = t.dir / "other";
  fs::create_directories(other);
  write(other / "notes", "mine");
  write(other / "manifest.json", R"({"format": "something-else"})");
  const fs::path c = make_temp_sibling(other);
  EXPECT_FALSE(is_kiln_package(other));
  EXPECT_THROW(install_dir(c, other, true), std::invalid_argument);
  EXPECT_EQ(read(other / "notes"), "mine");
  EXPECT_EQ(read(t.dir / "dist.tmp-kiln"), "unrelated");
}

TEST(OutDir, ForceReplacesOnlyWhatIsAPackageByItsContent) {
  TempDir t;
  const fs::path out = t.dir / "dist";
  fs::create_directories(out / "objects");
  write(out / "mine.txt", "mine");
  write(out / "manifest.json", R"({"format":"kiln-package/2"})");
  fs::path tmp = make_temp_sibling(out);
  EXPECT_THROW(install_dir(tmp, out, true), std::invalid_argument);  // a bare marker
  EXPECT_EQ(read(out / "mine.txt"), "mine");
  const std::string h(64, 'a');
  write(out / "SHA256SUMS", h + "  manifest.json\n" + h + "  objects/a.hsaco\n");
  write(out / "objects" / "a.hsaco", "x");
  EXPECT_EQ(why_not_kiln_package(out), "foreign file mine.txt (not listed in SHA256SUMS)");
  try {
    install_dir(tmp, out, true);
    ADD_FAILURE() << "replaced a directory with a foreign file";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("foreign file mine.txt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(out / "mine.txt"), "mine");
  fs::remove(out / "mine.txt");
  fs::create_directories(out / "keep");
  EXPECT_EQ(why_not_kiln_package(out), "foreign file keep/ (a directory a package does not have)");
  fs::remove(out / "keep");
  fs::create_directories(out / "objects" / "deeper");
  EXPECT_NE(why_not_kiln_package(out).find("objects/deeper/"), std::string::npos);
  fs::remove(out / "objects" / "deeper");
  fs::create_symlink(out / "manifest.json", out / "objects" / "b.hsaco");
  EXPECT_EQ(why_not_kiln_package(out), "foreign file objects/b.hsaco (a symbolic link)");
  fs::remove(out / "objects" / "b.hsaco");
  write(out / "SHA256SUMS.sig", "sig");
  EXPECT_EQ(why_not_kiln_package(out), "");
  install_dir(tmp, out, true);  // a package by its content: replaced
  EXPECT_TRUE(fs::is_empty(out));
}

TEST(Bundle, EntryIds) {
  EXPECT_EQ(bundle_entry_id("amdgcn-amd-amdhsa--gfx942"), "hipv4-amdgcn-amd-amdhsa--gfx942");
  EXPECT_EQ(bundle_entry_id("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"),
            "hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-");
  for (const char* bad : {"sm_90", "gfx942", "amdgcn-amd-amdhsa--", "amdgcn-amd-amdhsa--gfx942 x",
                          "amdgcn-amd-amdhsa--gfx942,hipv4-x"})
    EXPECT_THROW(bundle_entry_id(bad), std::invalid_argument) << bad;
}

TEST(Bundle, WritesAndListsWithTheRealBundler) {
  fs::path tool;
  try {
    tool = find_offload_bundler();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("clang-tools-15"), std::string::npos);
    GTEST_SKIP() << e.what();
  }
  TempDir t;
  write(t.dir / "a", "code object a");
  write(t.dir / "b", "code object b");
  const std::vector<std::pair<std::string, fs::path>> entries = {
      {bundle_entry_id("amdgcn-amd-amdhsa--gfx942"), t.dir / "a"},
      {bundle_entry_id("amdgcn-amd-amdhsa--gfx90a:xnack-"), t.dir / "b"}};
  write_offload_bundle(tool, entries, t.dir / "x.co");
  EXPECT_EQ(read(t.dir / "x.co").substr(0, 24), "__CLANG_OFFLOAD_BUNDLE__");
  EXPECT_EQ(list_offload_bundle(tool, t.dir / "x.co"),
            (std::vector<std::string>{"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", "hipv4-amdgcn-amd-amdhsa--gfx942",
                                      kBundleHostEntry}));
  EXPECT_TRUE(list_offload_bundle(tool, t.dir / "a").empty());  // not a bundle: no entries
}

TEST(Signing, RoundTripWithAKeyMadeHere) {
  TempDir t;
  EVP_PKEY* key = nullptr;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  ASSERT_TRUE(ctx && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &key) == 1);
  EVP_PKEY_CTX_free(ctx);
  {
    FILE* f = std::fopen((t.dir / "key.pem").c_str(), "wb");
    ASSERT_TRUE(PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr));
    std::fclose(f);
    f = std::fopen((t.dir / "pub.pem").c_str(), "wb");
    ASSERT_TRUE(PEM_write_PUBKEY(f, key));
    std::fclose(f);
  }
  EVP_PKEY_free(key);
  const std::string sums = "abc  manifest.json\n";
  const std::string sig = ed25519_sign_hex(t.dir / "key.pem", sums);
  EXPECT_EQ(sig.size(), 128u);
  EXPECT_EQ(sig, ed25519_sign_hex(t.dir / "key.pem", sums));  // Ed25519 is deterministic
  EXPECT_TRUE(ed25519_verify_hex(t.dir / "pub.pem", sums, sig + "\n"));
  EXPECT_FALSE(ed25519_verify_hex(t.dir / "pub.pem", sums + "x", sig));
  std::string flipped = sig;
  flipped[10] = flipped[10] == '0' ? '1' : '0';
  EXPECT_FALSE(ed25519_verify_hex(t.dir / "pub.pem", sums, flipped));
  EXPECT_FALSE(ed25519_verify_hex(t.dir / "pub.pem", sums, sig.substr(2)));
  // a key of another kind, or no key, is refused by name
  write(t.dir / "junk.pem", "junk");
  try {
    ed25519_sign_hex(t.dir / "junk.pem", sums);
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("junk.pem"), std::string::npos);
  }
  EXPECT_THROW(ed25519_sign_hex(t.dir / "missing.pem", sums), std::runtime_error);
}

TEST(CodeObject, AmdVersionFromTheElfHeader) {
  std::string elf(64, '\0');
  elf.replace(0, 4, "\x7f" "ELF");
  elf[4] = 2;
  elf[7] = 64;  // ELFOSABI_AMDGPU_HSA
  elf[18] = static_cast<char>(224);
  for (int abi = 2; abi <= 4; ++abi) {
    elf[8] = static_cast<char>(abi);
    EXPECT_EQ(amd_code_object_version(elf), abi + 2);
  }
  elf[18] = static_cast<char>(190);  // a cubin
  EXPECT_EQ(amd_code_object_version(elf), 0);
  EXPECT_EQ(amd_code_object_version("short"), 0);
}

TEST(MissTargets, RuntimeLabels) {
  const auto& reg = knowledge().targets;
  EXPECT_EQ(names(miss_targets(reg, "gfx942:sramecc+:xnack- (AMD Instinct MI300X)")),
            (std::vector<std::string>{"MI300X"}));
  EXPECT_EQ(names(miss_targets(reg, "sm_90 (NVIDIA H200)")), (std::vector<std::string>{"H200"}));
  EXPECT_EQ(names(miss_targets(reg, "MI250X (amdgcn-amd-amdhsa--gfx90a)")), (std::vector<std::string>{"MI250X"}));
  EXPECT_EQ(names(miss_targets(reg, "gfx942 (Some Unknown GPU)")), (std::vector<std::string>{"MI300X", "MI325X"}));
  EXPECT_EQ(names(miss_targets(reg, "MI355X")), (std::vector<std::string>{"MI355X"}));
  EXPECT_THROW(miss_targets(reg, "nothing (at all)"), std::invalid_argument);
}
