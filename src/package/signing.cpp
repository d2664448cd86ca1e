#include "package/signing.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cctype>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/hash.h"

namespace kiln {

namespace {

using PKey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (!e) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

PKey load_key(const std::filesystem::path& file, bool want_private) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (!f) throw std::runtime_error("cannot read key file " + file.string());
  EVP_PKEY* k = want_private ? PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr)
                             : PEM_read_PUBKEY(f.get(), nullptr, nullptr, nullptr);
  if (!k && !want_private) {  // a private key file also holds the public key
    std::rewind(f.get());
    k = PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr);
  }
  if (!k)
    throw std::runtime_error("key file " + file.string() + " is not a PEM " +
                             (want_private ? "private" : "public") + " key (" + openssl_error() +
                             "); make one with: openssl genpkey -algorithm ed25519 -out key.pem");
  PKey key(k, &EVP_PKEY_free);
  if (EVP_PKEY_id(k) != EVP_PKEY_ED25519)
    throw std::runtime_error("key file " + file.string() + " is not an Ed25519 key");
  return key;
}

}  // namespace

std::string ed25519_sign_hex(const std::filesystem::path& key_pem, std::string_view data) {
  PKey key = load_key(key_pem, true);
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1)
    throw std::runtime_error("signing with " + key_pem.string() + " failed: " + openssl_error());
  std::vector<unsigned char> sig(len);
  if (EVP_DigestSign(ctx.get(), sig.data(), &len, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1)
    throw std::runtime_error("signing with " + key_pem.string() + " failed: " + openssl_error());
  return hex_text(std::string_view(reinterpret_cast<const char*>(sig.data()), len));
}

bool ed25519_verify_hex(const std::filesystem::path& pub_pem, std::string_view data, std::string_view sig_hex) {
  PKey key = load_key(pub_pem, false);
  while (!sig_hex.empty() && std::isspace(static_cast<unsigned char>(sig_hex.back()))) sig_hex.remove_suffix(1);
  while (!sig_hex.empty() && std::isspace(static_cast<unsigned char>(sig_hex.front()))) sig_hex.remove_prefix(1);
  if (sig_hex.size() != 128) return false;
  std::vector<unsigned char> sig;
  for (size_t i = 0; i < sig_hex.size(); i += 2) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = nib(sig_hex[i]), lo = nib(sig_hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    sig.push_back(static_cast<unsigned char>(hi * 16 + lo));
  }
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), reinterpret_cast<const unsigned char*>(data.data()),
                          data.size()) == 1;
}

}  // namespace kiln
