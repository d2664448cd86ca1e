// Package integrity (docs/package-format.md "Integrity"): SHA256SUMS over every
// file, no unlisted file under objects/ or verify/, and an optional Ed25519
// signature of SHA256SUMS checked with a PEM public key (OpenSSL EVP).
// Pure functions over the file system; thread-safe.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace kiln::rt {

std::string read_file(const std::filesystem::path& p);  // throws Error(KILN_E_IO)

// Every path a package names (SHA256SUMS entries, variants[].file, verify)
// must be relative with no absolute, "..", "." or empty component, and after
// resolving symlinks must stay inside the package directory. Throws
// Error(KILN_E_INTEGRITY) naming `what` (e.g. "SHA256SUMS:3") and the entry.
void check_relpath(const std::string& rel, const std::string& what);
// pkg / rel resolved (realpath), after check_relpath and the inside check.
std::filesystem::path path_inside(const std::filesystem::path& pkg, const std::string& rel,
                                  const std::string& what);
// read_file(path_inside(pkg, rel, what)).
std::string read_pkg_file(const std::filesystem::path& pkg, const std::string& rel, const std::string& what);
std::string sha256_hex(std::string_view bytes);

// Checks SHA256SUMS.sig over the exact bytes of SHA256SUMS with the key at
// pubkey_pem. Throws Error(KILN_E_SIGNATURE) when the package is unsigned or
// the signature does not verify, Error(KILN_E_IO) when the key is unreadable.
void check_signature(const std::filesystem::path& pkg, const std::filesystem::path& pubkey_pem);

// Parses SHA256SUMS and checks every listed file and that every file under
// objects/ and verify/ is listed. `expected_size(relpath)` may return the size
// the (already verified) manifest records for a file, or -1, to tell a
// truncated file from a changed one. Throws Error(KILN_E_INTEGRITY) naming the
// file. Returns relpath -> sha256 hex.
using SizeHint = long long (*)(const void* ctx, const std::string& relpath);
std::map<std::string, std::string> check_sums(const std::filesystem::path& pkg,
                                              SizeHint expected_size = nullptr,
                                              const void* ctx = nullptr);

// Only the manifest.json entry, checked before the manifest is trusted.
void check_one(const std::filesystem::path& pkg, const std::map<std::string, std::string>& sums,
               const std::string& relpath);
std::map<std::string, std::string> parse_sums(const std::filesystem::path& pkg);

}  // namespace kiln::rt
