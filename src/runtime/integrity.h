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
