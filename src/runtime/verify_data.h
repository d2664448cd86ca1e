// Deterministic verification without PyTorch (docs/package-format.md "verify"):
// SplitMix64 inputs rounded to the dtype, NaN-poisoned outputs, and the check
// (no NaN, sampled |out - expected| <= atol + rtol*|expected|, sum within
// atol*count + rtol*abs_sum). Pure functions; thread-safe.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::rt {

class SplitMix64 {
 public:
  SplitMix64(uint64_t seed, uint64_t stream) : state_(seed + stream * 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Writes n elements of dtype into out (n * dtype_size bytes, dtype.h): lo + (hi-lo)*u,
// rounded to the dtype to nearest even. Throws std::runtime_error on an unknown dtype.
void fill_inputs(uint64_t seed, int tensor, double lo, double hi, std::string_view dtype,
                 void* out, int64_t n);

// A distribution input values are drawn from: uniform in [a, b), or normal
// with mean a and standard deviation b.
struct InputDist {
  enum Kind { kUniform, kNormal } kind = kUniform;
  double a = -1, b = 1;
  bool operator==(const InputDist&) const = default;
};
// fill_inputs for any InputDist: uniform is fill_inputs itself; normal takes
// the same SplitMix64 stream two draws at a time (Box-Muller: u1, u2 give
// a + b*sqrt(-2 ln(1-u1))*cos(2 pi u2) and the same with sin), each rounded
// once to the dtype.
void fill_dist(uint64_t seed, int tensor, const InputDist& dist, std::string_view dtype, void* out, int64_t n);
double round_to_dtype(double x, std::string_view dtype);
// Element i of a dtype buffer as double.
double load_as_double(const void* data, int64_t i, std::string_view dtype);

struct OutputCheck {
  int tensor = 0;
  double atol = 0, rtol = 0, sum = 0, abs_sum = 0;
  int64_t count = 0;
  std::vector<std::pair<int64_t, double>> samples;
};

struct VerifySpec {
  uint64_t seed = 0;
  std::vector<int64_t> shape;
  struct Input {
    int tensor;
    double lo, hi;
    // The distribution the confirmation timed this input on ("timing"), for
    // kiln-rt bench; absent in packages written before it (bench then times
    // on the verification range).
    std::optional<InputDist> timing;
  };
  std::vector<Input> inputs;
  std::vector<OutputCheck> outputs;
  static VerifySpec parse(const std::string& text, const std::string& what);  // Error(KILN_E_FORMAT)
};

// What input `in` is drawn from: its timing distribution where `timing` asks
// for it and the file records one (kiln-rt bench), else its verification
// range (kiln-rt verify, and bench on older packages).
InputDist input_dist(const VerifySpec::Input& in, bool timing);

// "" when the output passes, else what failed (first NaN index, worst sample, sum).
std::string check_output(const OutputCheck& c, const void* data, int64_t n, std::string_view dtype);

}  // namespace kiln::rt
