#include "verify_data.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "error.h"

namespace kiln::rt {

namespace {

// Rounds x to a binary float with `digits` significant bits and the given
// smallest subnormal quantum, ties to even (the default rounding mode).
double round_binary(double x, int digits, double min_quantum) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  double q = std::ldexp(1.0, e - digits);
  if (q < min_quantum) q = min_quantum;
  return std::nearbyint(x / q) * q;
}

uint16_t bf16_bits(double r) {  // r already representable in bf16
  float f = static_cast<float>(r);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

uint16_t fp16_bits(double r) {
  _Float16 h = static_cast<_Float16>(r);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

}  // namespace

double round_to_dtype(double x, std::string_view d) {
  if (d == "fp64") return x;
  if (d == "fp32") return static_cast<double>(static_cast<float>(x));
  if (d == "bf16") return round_binary(x, 8, std::ldexp(1.0, -133));
  if (d == "fp16") return round_binary(x, 11, std::ldexp(1.0, -24));
  if (d[0] == 'i' || d[0] == 'u') return std::nearbyint(x);
  throw std::runtime_error("verification inputs of dtype " + std::string(d) + " are not supported");
}

namespace {

// Element k of a dtype buffer set to x (already rounded to the dtype).
void store_as(double x, std::string_view d, unsigned char* b, int64_t k) {
    if (d == "fp32") { float f = static_cast<float>(x); std::memcpy(b + 4 * k, &f, 4); }
    else if (d == "fp64") std::memcpy(b + 8 * k, &x, 8);
    else if (d == "bf16") { uint16_t u = bf16_bits(x); std::memcpy(b + 2 * k, &u, 2); }
    else if (d == "fp16") { uint16_t u = fp16_bits(x); std::memcpy(b + 2 * k, &u, 2); }
    else if (d == "i32") { int32_t v = static_cast<int32_t>(x); std::memcpy(b + 4 * k, &v, 4); }
    else if (d == "i64") { int64_t v = static_cast<int64_t>(x); std::memcpy(b + 8 * k, &v, 8); }
    else if (d == "i16") { int16_t v = static_cast<int16_t>(x); std::memcpy(b + 2 * k, &v, 2); }
    else if (d == "i8") { int8_t v = static_cast<int8_t>(x); std::memcpy(b + k, &v, 1); }
    else if (d == "u8") { uint8_t v = static_cast<uint8_t>(x); std::memcpy(b + k, &v, 1); }
    else throw std::runtime_error("verification inputs of dtype " + std::string(d) + " are not supported");
}

}  // namespace

void fill_inputs(uint64_t seed, int tensor, double lo, double hi, std::string_view d, void* out,
                 int64_t n) {
  SplitMix64 g(seed, static_cast<uint64_t>(tensor));
  auto* b = static_cast<unsigned char*>(out);
  for (int64_t k = 0; k < n; ++k) store_as(round_to_dtype(lo + (hi - lo) * g.uniform(), d), d, b, k);
}

void fill_dist(uint64_t seed, int tensor, const InputDist& dist, std::string_view d, void* out, int64_t n) {
  if (dist.kind == InputDist::kUniform) return fill_inputs(seed, tensor, dist.a, dist.b, d, out, n);
  SplitMix64 g(seed, static_cast<uint64_t>(tensor));
  auto* b = static_cast<unsigned char*>(out);
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t k = 0; k < n; k += 2) {
    const double r = std::sqrt(-2.0 * std::log(1.0 - g.uniform()));  // 1 - u in (0, 1]
    const double t = kTwoPi * g.uniform();
    store_as(round_to_dtype(dist.a + dist.b * r * std::cos(t), d), d, b, k);
    if (k + 1 < n) store_as(round_to_dtype(dist.a + dist.b * r * std::sin(t), d), d, b, k + 1);
  }
}

double load_as_double(const void* data, int64_t i, std::string_view d) {
  const auto* b = static_cast<const unsigned char*>(data);
  if (d == "fp32") { float f; std::memcpy(&f, b + 4 * i, 4); return f; }
  if (d == "fp64") { double x; std::memcpy(&x, b + 8 * i, 8); return x; }
  if (d == "bf16") { uint16_t u; std::memcpy(&u, b + 2 * i, 2); uint32_t w = uint32_t(u) << 16; float f; std::memcpy(&f, &w, 4); return f; }
  if (d == "fp16") { _Float16 h; std::memcpy(&h, b + 2 * i, 2); return static_cast<double>(h); }
  if (d == "i32") { int32_t v; std::memcpy(&v, b + 4 * i, 4); return v; }
  if (d == "i64") { int64_t v; std::memcpy(&v, b + 8 * i, 8); return static_cast<double>(v); }
  if (d == "i16") { int16_t v; std::memcpy(&v, b + 2 * i, 2); return v; }
  if (d == "i8") { int8_t v; std::memcpy(&v, b + i, 1); return v; }
  if (d == "u8" || d == "bool") return b[i];
  throw std::runtime_error("verification of dtype " + std::string(d) + " is not supported");
}

std::string check_output(const OutputCheck& c, const void* data, int64_t n, std::string_view d) {
  bool is_float = d.substr(0, 2) == "fp" || d == "bf16";
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = load_as_double(data, i, d);
    if (is_float && !std::isfinite(x))
      return "element " + std::to_string(i) + " is " + (std::isnan(x) ? "NaN (not written?)" : "infinite");
    sum += x;
  }
  if (c.count && c.count != n)
    return "output has " + std::to_string(n) + " elements, the verification data " + std::to_string(c.count);
  for (const auto& [idx, want] : c.samples) {
    if (idx < 0 || idx >= n) return "sample index " + std::to_string(idx) + " out of range";
    double got = load_as_double(data, idx, d);
    if (!(std::fabs(got - want) <= c.atol + c.rtol * std::fabs(want)))
      return "element " + std::to_string(idx) + " is " + std::to_string(got) + ", expected " +
             std::to_string(want) + " (atol " + std::to_string(c.atol) + ", rtol " + std::to_string(c.rtol) + ")";
  }
  double tol = c.atol * static_cast<double>(n) + c.rtol * c.abs_sum;
  if (!(std::fabs(sum - c.sum) <= tol))
    return "sum " + std::to_string(sum) + ", expected " + std::to_string(c.sum) + " +- " + std::to_string(tol);
  return {};
}

InputDist input_dist(const VerifySpec::Input& in, bool timing) {
  return timing && in.timing ? *in.timing : InputDist{InputDist::kUniform, in.lo, in.hi};
}

namespace {

// A verify input's "timing": {"dist": "normal", "mean", "std" >= 0} or
// {"dist": "uniform", "lo", "hi" >= lo}, finite numbers.
InputDist parse_timing(const nlohmann::json& t, const std::string& where) {
  auto num = [&](const char* key) {
    if (!t.contains(key) || !t.at(key).is_number() || !std::isfinite(t.at(key).get<double>()))
      throw std::runtime_error(where + "." + key + ": expected a finite number");
    return t.at(key).get<double>();
  };
  if (!t.is_object() || !t.contains("dist") || !t.at("dist").is_string())
    throw std::runtime_error(where + ": expected {\"dist\": \"normal\" | \"uniform\", ...}");
  const std::string dist = t.at("dist").get<std::string>();
  if (dist == "normal") {
    InputDist d{InputDist::kNormal, num("mean"), num("std")};
    if (d.b < 0) throw std::runtime_error(where + ".std: expected a number >= 0");
    return d;
  }
  if (dist == "uniform") {
    InputDist d{InputDist::kUniform, num("lo"), num("hi")};
    if (d.b < d.a) throw std::runtime_error(where + ": hi below lo");
    return d;
  }
  throw std::runtime_error(where + ".dist: \"" + dist + "\" is neither normal nor uniform");
}

}  // namespace

VerifySpec VerifySpec::parse(const std::string& text, const std::string& what) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != "kiln-verify/1")
      throw Error(KILN_E_FORMAT, what + ": format is not kiln-verify/1");
    VerifySpec v;
    v.seed = j.at("seed").get<uint64_t>();
    v.shape = j.at("shape").get<std::vector<int64_t>>();
    for (size_t n = 0; n < j.at("inputs").size(); ++n) {
      const auto& i = j.at("inputs").at(n);
      Input in{i.at("tensor").get<int>(), i.value("lo", -1.0), i.value("hi", 1.0), std::nullopt};
      if (i.contains("timing")) in.timing = parse_timing(i.at("timing"), "inputs[" + std::to_string(n) + "].timing");
      v.inputs.push_back(in);
    }
    for (const auto& o : j.at("outputs")) {
      OutputCheck c;
      c.tensor = o.at("tensor").get<int>();
      c.atol = o.value("atol", 0.0);
      c.rtol = o.value("rtol", 0.0);
      c.sum = o.value("sum", 0.0);
      c.abs_sum = o.value("abs_sum", 0.0);
      c.count = o.value("count", int64_t(0));
      for (const auto& s : o.at("samples")) c.samples.emplace_back(s.at(0).get<int64_t>(), s.at(1).get<double>());
      v.outputs.push_back(std::move(c));
    }
    return v;
  } catch (const Error&) {
    throw;
  } catch (const nlohmann::json::parse_error& e) {
    // The position only: the content is not quoted (a link could name any file).
    throw Error(KILN_E_FORMAT, what + ": not JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  } catch (const std::exception& e) {
    throw Error(KILN_E_FORMAT, what + ": " + e.what());
  }
}

}  // namespace kiln::rt
