#include "integrity.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "error.h"

namespace fs = std::filesystem;

namespace kiln::rt {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(KILN_E_IO, "cannot read " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void check_relpath(const std::string& rel, const std::string& what) {
  // Quoted printable and short: the path comes from a file anyone may have written.
  std::string shown;
  for (unsigned char ch : rel.substr(0, 80)) shown += (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
  if (rel.size() > 80) shown += "... (" + std::to_string(rel.size()) + " bytes)";
  auto bad = [&](const std::string& why) {
    return Error(KILN_E_INTEGRITY, what + ": path '" + shown + "' " + why +
                                       ": a package may only name relative paths inside itself; refused");
  };
  if (rel.empty()) throw bad("is empty");
  if (rel.size() > 1024) throw bad("is longer than 1024 bytes");
  if (!rel.empty() && rel.back() == '\r') throw bad("ends with a carriage return (line ends converted to CRLF?)");
  for (unsigned char ch : rel)
    if ((ch < 0x20 && ch != 0) || ch == 0x7f) throw bad("contains a control character");
  if (rel[0] == '/') throw bad("is absolute");
  if (rel.find('\0') != std::string::npos) throw bad("contains a NUL byte");
  size_t start = 0;
  while (true) {
    size_t end = rel.find('/', start);
    std::string c = rel.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (c.empty()) throw bad("has an empty component");
    if (c == "..") throw bad("has a '..' component");
    if (c == ".") throw bad("has a '.' component");
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

fs::path path_inside(const fs::path& pkg, const std::string& rel, const std::string& what) {
  check_relpath(rel, what);
  std::error_code ec;
  fs::path root = fs::canonical(pkg, ec);
  if (ec) throw Error(KILN_E_IO, "cannot resolve package directory " + pkg.string() + ": " + ec.message());
  fs::path full = pkg / rel;
  if (!fs::exists(fs::symlink_status(full, ec)))
    throw Error(KILN_E_INTEGRITY, what + ": " + rel + " is missing from " + pkg.string());
  fs::path real = fs::canonical(full, ec);
  if (ec)
    throw Error(KILN_E_INTEGRITY, what + ": " + rel + " cannot be resolved (" + ec.message() +
                                      "; a dangling symbolic link?): refused");
  auto ri = root.begin(), pi = real.begin();
  for (; ri != root.end(); ++ri, ++pi)
    if (pi == real.end() || *ri != *pi)
      throw Error(KILN_E_INTEGRITY, what + ": " + rel + " resolves to " + real.string() +
                                        ", outside the package " + root.string() +
                                        " (a symbolic link out of the package): refused");
  if (pi == real.end() || !fs::is_regular_file(real, ec))
    throw Error(KILN_E_INTEGRITY, what + ": " + rel + " is not a regular file: refused");
  return real;
}

std::string read_pkg_file(const fs::path& pkg, const std::string& rel, const std::string& what) {
  return read_file(path_inside(pkg, rel, what));
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

static bool from_hex(std::string_view h, std::string& out) {
  if (h.size() % 2) return false;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out.clear();
  for (size_t i = 0; i < h.size(); i += 2) {
    int a = val(h[i]), b = val(h[i + 1]);
    if (a < 0 || b < 0) return false;
    out += static_cast<char>(a * 16 + b);
  }
  return true;
}

void check_signature(const fs::path& pkg, const fs::path& pubkey_pem) {
  std::string pem = read_file(pubkey_pem);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  if (!key || EVP_PKEY_id(key.get()) != EVP_PKEY_ED25519)
    throw Error(KILN_E_IO, "public key " + pubkey_pem.string() +
                               " is not an Ed25519 PEM public key (openssl pkey -pubout)");
  fs::path sig_path = pkg / "SHA256SUMS.sig";
  if (!fs::exists(sig_path))
    throw Error(KILN_E_SIGNATURE, "package " + pkg.string() +
                                      " is unsigned (no SHA256SUMS.sig) but a public key is "
                                      "configured (" + pubkey_pem.string() + "): refused");
  std::string sig_text = read_pkg_file(pkg, "SHA256SUMS.sig", "SHA256SUMS.sig");
  while (!sig_text.empty() && (sig_text.back() == '\n' || sig_text.back() == '\r' || sig_text.back() == ' '))
    sig_text.pop_back();
  std::string sig;
  if (sig_text.size() != 128 || !from_hex(sig_text, sig))
    throw Error(KILN_E_SIGNATURE, sig_path.string() + " is not a hex Ed25519 signature (128 hex chars)");
  std::string sums = read_pkg_file(pkg, "SHA256SUMS", "SHA256SUMS");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1)
    throw Error(KILN_E_SIGNATURE, "cannot initialise Ed25519 verification");
  int ok = EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                            reinterpret_cast<const unsigned char*>(sums.data()), sums.size());
  if (ok != 1)
    throw Error(KILN_E_SIGNATURE, "bad signature: " + sig_path.string() +
                                      " does not verify SHA256SUMS with key " + pubkey_pem.string() +
                                      " (signed by another key, or SHA256SUMS was changed)");
}

std::map<std::string, std::string> parse_sums(const fs::path& pkg) {
  fs::path p = pkg / "SHA256SUMS";
  if (!fs::exists(p))
    throw Error(KILN_E_INTEGRITY, p.string() + " is missing: not a kiln package, or an incomplete copy");
  std::string text = read_pkg_file(pkg, "SHA256SUMS", "SHA256SUMS");
  std::map<std::string, std::string> sums;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return Error(KILN_E_INTEGRITY, p.string() + ":" + std::to_string(lineno) + ": " + why);
    };
    if (line.size() < 67 || line.compare(64, 2, "  ") != 0) throw bad("expected '<sha256>  <path>'");
    std::string hash = line.substr(0, 64), rel = line.substr(66);
    if (hash.find_first_not_of("0123456789abcdef") != std::string::npos) throw bad("bad hash");
    check_relpath(rel, p.string() + ":" + std::to_string(lineno));
    if (!sums.emplace(rel, hash).second) throw bad("'" + rel + "' listed twice");
  }
  return sums;
}

static bool elf_truncated(const std::string& b) {
  if (b.size() < 4 || b.compare(0, 4, "\x7f" "ELF") != 0) return false;
  if (b.size() < 64) return true;
  uint64_t shoff;
  uint16_t shentsize, shnum;
  std::memcpy(&shoff, b.data() + 40, 8);
  std::memcpy(&shentsize, b.data() + 58, 2);
  std::memcpy(&shnum, b.data() + 60, 2);
  return shoff + uint64_t(shentsize) * shnum > b.size();
}

static void check_file(const fs::path& pkg, const std::string& rel, const std::string& want,
                       SizeHint hint, const void* ctx) {
  if (!fs::exists(fs::symlink_status(pkg / rel)))
    throw Error(KILN_E_INTEGRITY, rel + ": listed in SHA256SUMS but missing from " + pkg.string());
  std::string bytes = read_pkg_file(pkg, rel, "SHA256SUMS entry");
  std::string got = sha256_hex(bytes);
  if (got == want) return;
  long long size = hint ? hint(ctx, rel) : -1;
  if ((size >= 0 && static_cast<long long>(bytes.size()) < size) || elf_truncated(bytes))
    throw Error(KILN_E_INTEGRITY,
                rel + ": truncated (" + std::to_string(bytes.size()) + " bytes" +
                    (size >= 0 ? ", the manifest records " + std::to_string(size) : std::string()) +
                    "; SHA-256 " + got.substr(0, 12) + "... != listed " + want.substr(0, 12) +
                    "...): copy the package again");
  throw Error(KILN_E_INTEGRITY, rel + ": content changed (SHA-256 " + got.substr(0, 12) +
                                    "... != listed " + want.substr(0, 12) +
                                    "... in SHA256SUMS): the file was modified or corrupted");
}

void check_one(const fs::path& pkg, const std::map<std::string, std::string>& sums,
               const std::string& rel) {
  auto it = sums.find(rel);
  if (it == sums.end())
    throw Error(KILN_E_INTEGRITY, rel + " is not listed in SHA256SUMS of " + pkg.string());
  check_file(pkg, rel, it->second, nullptr, nullptr);
}

std::map<std::string, std::string> check_sums(const fs::path& pkg, SizeHint hint, const void* ctx) {
  auto sums = parse_sums(pkg);
  for (const auto& [rel, hash] : sums) check_file(pkg, rel, hash, hint, ctx);
  for (const char* dir : {"objects", "verify"}) {
    fs::path d = pkg / dir;
    if (!fs::exists(d)) continue;
    std::vector<std::string> unlisted;
    for (const auto& e : fs::recursive_directory_iterator(d)) {
      if (e.is_directory()) continue;
      std::string rel = fs::relative(e.path(), pkg).generic_string();
      if (!sums.count(rel)) unlisted.push_back(rel);
    }
    std::sort(unlisted.begin(), unlisted.end());
    if (!unlisted.empty())
      throw Error(KILN_E_INTEGRITY, "unlisted file " + unlisted.front() +
                                        " (not in SHA256SUMS" +
                                        (unlisted.size() > 1 ? ", and " + std::to_string(unlisted.size() - 1) + " more" : std::string()) +
                                        "): refused; remove it or re-package");
  }
  return sums;
}

}  // namespace kiln::rt
