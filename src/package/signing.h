// Ed25519 signatures of a package's SHA256SUMS (OpenSSL EVP, no digest: Ed25519
// hashes the message itself). Keys are PEM files as `openssl genpkey
// -algorithm ed25519 -out key.pem` (private) and `openssl pkey -in key.pem
// -pubout -out pub.pem` (public) write them. Stateless; thread-safe.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln {

// The 64-byte signature of `data` with the private key in `key_pem`, as 128
// lower-case hex characters. Throws std::runtime_error naming the file when it
// is unreadable or not an Ed25519 private key.
std::string ed25519_sign_hex(const std::filesystem::path& key_pem, std::string_view data);

// True when `sig_hex` (128 hex characters, surrounding whitespace ignored) is
// a valid signature of `data` by the public key in `pub_pem` (a private key
// file works too). Throws std::runtime_error for an unreadable or non-Ed25519 key.
bool ed25519_verify_hex(const std::filesystem::path& pub_pem, std::string_view data, std::string_view sig_hex);

}  // namespace kiln
