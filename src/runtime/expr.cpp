#include "expr.h"

#include <cctype>

namespace kiln::rt {

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw ExprError("division by zero");
  if (a == INT64_MIN && b == -1) throw ExprError("integer overflow in //");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw ExprError("modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

class ExprParser {
 public:
  ExprParser(std::string_view s, Expr& e) : s_(s), e_(e) {}
  int parse() {
    int n = expr();
    skip();
    if (pos_ != s_.size()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw ExprError("expression \"" + std::string(s_) + "\": " + why + " at position " +
                    std::to_string(pos_));
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(std::string_view tok) {
    skip();
    if (s_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  int add(Expr::Node::Kind k, int64_t v = 0, int l = -1, int r = -1) {
    e_.nodes_.push_back({k, v, l, r});
    return static_cast<int>(e_.nodes_.size()) - 1;
  }
  int64_t integer() {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      int d = s_[pos_] - '0';
      if (v > (INT64_MAX - d) / 10) fail("integer literal too large");
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ == start) fail("expected an integer");
    return v;
  }
  int expr() {
    int n = term();
    for (;;) {
      if (eat("+")) n = add(Expr::Node::Add, 0, n, term());
      else if (eat("-")) n = add(Expr::Node::Sub, 0, n, term());
      else return n;
    }
  }
  int term() {
    int n = factor();
    for (;;) {
      if (eat("*")) n = add(Expr::Node::Mul, 0, n, factor());
      else if (eat("//")) n = add(Expr::Node::FloorDiv, 0, n, factor());
      else if (eat("%")) n = add(Expr::Node::Mod, 0, n, factor());
      else {
        skip();
        if (pos_ < s_.size() && s_[pos_] == '/') fail("'/' is not an operator (use //)");
        return n;
      }
    }
  }
  int factor() {
    skip();
    if (pos_ >= s_.size()) fail("unexpected end");
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return add(Expr::Node::Int, integer());
    if (c == '(') {
      ++pos_;
      int n = expr();
      if (!eat(")")) fail("expected ')'");
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      while (pos_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      std::string_view word = s_.substr(start, pos_ - start);
      if (word.size() > 1 && word[0] == 's' &&
          word.find_first_not_of("0123456789", 1) == std::string_view::npos) {
        pos_ = start + 1;
        int64_t idx = integer();
        if (idx > 64) fail("dimension index too large");
        if (idx > e_.max_dim_) e_.max_dim_ = static_cast<int>(idx);
        return add(Expr::Node::Dim, idx);
      }
      Expr::Node::Kind k;
      if (word == "cdiv") k = Expr::Node::Cdiv;
      else if (word == "min") k = Expr::Node::Min;
      else if (word == "max") k = Expr::Node::Max;
      else {
        pos_ = start;
        fail("unknown name '" + std::string(word) + "'");
      }
      if (!eat("(")) fail("expected '(' after " + std::string(word));
      int l = expr();
      if (!eat(",")) fail("expected ','");
      int r = expr();
      if (!eat(")")) fail("expected ')'");
      return add(k, 0, l, r);
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  std::string_view s_;
  Expr& e_;
  size_t pos_ = 0;
};

Expr Expr::parse(std::string_view text) {
  Expr e;
  e.text_ = std::string(text);
  ExprParser p(e.text_, e);
  e.root_ = p.parse();
  return e;
}

static void overflow_if(bool overflow, const char* op) {
  if (overflow) throw ExprError(std::string("integer overflow in ") + op);
}

int64_t Expr::eval_node(int i, std::span<const int64_t> shape) const {
  const Node& n = nodes_[i];
  int64_t r = 0;
  switch (n.kind) {
    case Node::Int: return n.value;
    case Node::Dim:
      if (static_cast<size_t>(n.value) >= shape.size())
        throw ExprError("expression \"" + text_ + "\" uses s" + std::to_string(n.value) +
                        " but the shape has " + std::to_string(shape.size()) + " dimensions");
      return shape[n.value];
    default: break;
  }
  int64_t a = eval_node(n.lhs, shape), b = eval_node(n.rhs, shape);
  switch (n.kind) {
    case Node::Add: overflow_if(__builtin_add_overflow(a, b, &r), "+"); return r;
    case Node::Sub: overflow_if(__builtin_sub_overflow(a, b, &r), "-"); return r;
    case Node::Mul: overflow_if(__builtin_mul_overflow(a, b, &r), "*"); return r;
    case Node::FloorDiv: return floor_div(a, b);
    case Node::Mod: return floor_mod(a, b);
    case Node::Cdiv: {
      int64_t t;
      overflow_if(__builtin_add_overflow(a, b, &t) || __builtin_sub_overflow(t, 1, &t), "cdiv");
      return floor_div(t, b);
    }
    case Node::Min: return a < b ? a : b;
    case Node::Max: return a > b ? a : b;
    default: throw ExprError("bad expression node");
  }
}

int64_t Expr::eval(std::span<const int64_t> shape) const {
  if (root_ < 0) throw ExprError("empty expression");
  return eval_node(root_, shape);
}

}  // namespace kiln::rt
