// Launch expressions of kiln-package/2 (docs/package-format.md "Expressions"):
// integer arithmetic over the shape s0, s1, ... with + - * // % cdiv min max.
// Parsed once at package open; evaluation is allocation-free.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

struct ExprError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Expr {
 public:
  // Throws ExprError naming the position for anything outside the grammar.
  static Expr parse(std::string_view text);
  // Throws ExprError for division by zero, overflow, or an s<i> beyond shape.
  int64_t eval(std::span<const int64_t> shape) const;
  // Highest s<i> index used, -1 if none.
  int max_dim() const { return max_dim_; }
  const std::string& text() const { return text_; }

 private:
  struct Node {
    enum Kind { Int, Dim, Add, Sub, Mul, FloorDiv, Mod, Cdiv, Min, Max } kind;
    int64_t value = 0;  // Int: literal, Dim: index
    int lhs = -1, rhs = -1;
  };
  int64_t eval_node(int i, std::span<const int64_t> shape) const;
  std::vector<Node> nodes_;
  int root_ = -1;
  int max_dim_ = -1;
  std::string text_;
  friend class ExprParser;
};

// Python semantics: floor toward negative infinity.
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

}  // namespace kiln::rt
