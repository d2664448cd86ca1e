// The launch-expression grammar of docs/package-format.md: Python's integer
// semantics (floor division and modulo toward negative infinity), cdiv/min/max,
// and a clear error for anything outside the grammar.
#include <gtest/gtest.h>

#include <vector>

#include "expr.h"

using kiln::rt::Expr;
using kiln::rt::ExprError;

static int64_t ev(const char* s, std::vector<int64_t> shape = {}) { return Expr::parse(s).eval(shape); }

TEST(RuntimeExpr, ArithmeticAndPrecedence) {
  EXPECT_EQ(ev("1 + 2 * 3"), 7);
  EXPECT_EQ(ev("(1 + 2) * 3"), 9);
  EXPECT_EQ(ev("10 - 4 - 3"), 3);  // left associative
  EXPECT_EQ(ev("100 // 7 // 2"), 7);
  EXPECT_EQ(ev("2 * 3 % 4"), 2);
}

TEST(RuntimeExpr, PythonFloorSemantics) {
  // as Python: -7 // 2 == -4, -7 % 2 == 1, 7 // -2 == -4, 7 % -2 == -1
  EXPECT_EQ(ev("(0 - 7) // 2"), -4);
  EXPECT_EQ(ev("(0 - 7) % 2"), 1);
  EXPECT_EQ(ev("7 // (0 - 2)"), -4);
  EXPECT_EQ(ev("7 % (0 - 2)"), -1);
  EXPECT_EQ(ev("6 // 3"), 2);
}

TEST(RuntimeExpr, ShapeDimsAndFunctions) {
  std::vector<int64_t> s{16384, 4096, 3};
  EXPECT_EQ(ev("cdiv(s0, 4)", s), 4096);
  EXPECT_EQ(ev("cdiv(s1 + 1, 256)", s), 17);
  EXPECT_EQ(ev("min(s0, s1) + max(s2, 8)", s), 4096 + 8);
  EXPECT_EQ(ev("s0*s1", s), 16384LL * 4096);
  EXPECT_EQ(Expr::parse("cdiv(s2, s0) + s1").max_dim(), 2);
  EXPECT_EQ(ev(" 42 "), 42);
}

TEST(RuntimeExpr, RejectsWhatTheGrammarDoesNot) {
  for (const char* bad : {"", "s0 / 2", "foo(1, 2)", "1 +", "(1", "cdiv(1)", "1 2", "-1", "s", "1.5", "x0",
                          "min(1, 2, 3)", "s0 ** 2"}) {
    EXPECT_THROW(Expr::parse(bad), ExprError) << bad;
  }
  try {
    Expr::parse("s0 / 2");
    FAIL();
  } catch (const ExprError& e) {
    EXPECT_NE(std::string(e.what()).find("use //"), std::string::npos) << e.what();
  }
}

TEST(RuntimeExpr, EvaluationErrors) {
  EXPECT_THROW(ev("s1", {5}), ExprError);             // dimension the shape lacks
  EXPECT_THROW(ev("s0 // (s0 - s0)", {3}), ExprError);  // division by zero
  EXPECT_THROW(ev("cdiv(4, 0)"), ExprError);
  EXPECT_THROW(ev("9223372036854775807 + 1"), ExprError);
  EXPECT_THROW(ev("99999999999999999999"), ExprError);
}
