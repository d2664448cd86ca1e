#include "protocol.h"

#include <array>
#include <stdexcept>

namespace kiln::mpi {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) | static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view in) {
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = i;
    return t;
  }();
  std::string out;
  out.reserve(in.size() / 4 * 3);
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int d = table[static_cast<unsigned char>(c)];
    if (d < 0) throw std::invalid_argument("base64: invalid character");
    v = (v << 6) | static_cast<unsigned>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

nlohmann::json outcome_to_json(const WorkerOutcome& o) {
  const char* kind = o.kind == WorkerOutcome::Kind::kReply     ? "reply"
                     : o.kind == WorkerOutcome::Kind::kTimeout ? "timeout"
                                                               : "crash";
  nlohmann::json j = {{"kind", kind}, {"detail", o.detail}};
  if (o.kind == WorkerOutcome::Kind::kReply) j["reply"] = o.reply;
  return j;
}

WorkerOutcome outcome_from_json(const nlohmann::json& j) {
  WorkerOutcome o;
  const std::string kind = j.value("kind", "crash");
  o.kind = kind == "reply" ? WorkerOutcome::Kind::kReply
           : kind == "timeout" ? WorkerOutcome::Kind::kTimeout
                               : WorkerOutcome::Kind::kCrash;
  o.detail = j.value("detail", "");
  if (auto r = j.find("reply"); r != j.end()) o.reply = *r;
  if (o.kind == WorkerOutcome::Kind::kReply && !o.reply.is_object()) {
    o.kind = WorkerOutcome::Kind::kCrash;
    o.detail = "malformed result message from the worker rank";
  }
  return o;
}

}  // namespace kiln::mpi
