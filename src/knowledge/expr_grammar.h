// The grammar of an expression-valued operator param (the pointwise
// operator's params.expr), read from the JSON file the worker reads too
// (kernels/pointwise_grammar.json), so that `kiln submit` refuses, with the
// manifest's file:line, exactly what the worker would refuse at run time.
//
// An expression is an S-expression: ( OPERATION OPERAND... ) with an
// operation of the file's `operations` and an operand count in its [lo, hi],
// an input (`input`, index below `max_inputs`), the word none, or a number
// (`number`); tokens are '(' , ')' and runs of other characters separated by
// the `whitespace` characters; at most `max_length` bytes, `max_token` bytes
// a token and `max_depth` nested parentheses. kernels/pointwise.py implements the same reading;
// tests/python/test_pointwise_grammar.py feeds both the same expressions.
//
// Immutable after load; check() is const and thread-safe.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>

namespace kiln {

class ExprGrammar {
 public:
  // Throws std::runtime_error naming the file when it is missing or malformed.
  static ExprGrammar load(const std::filesystem::path& file);

  // nullopt when `text` is in the grammar; else why not, quoting at most a
  // short excerpt of the offending token.
  std::optional<std::string> check(std::string_view text) const;

 private:
  int max_inputs_ = 0, max_depth_ = 0;
  size_t max_length_ = 0, max_token_ = 0;
  std::string whitespace_;
  std::regex input_, number_;
  std::map<std::string, std::pair<int, int>, std::less<>> arity_;
};

}  // namespace kiln
