#include "knowledge/expr_grammar.h"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

namespace {

std::string short_token(std::string_view t) {
  return "'" + std::string(t.substr(0, 40)) + (t.size() > 40 ? "...'" : "'");
}

}  // namespace

ExprGrammar ExprGrammar::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read expression grammar " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  ExprGrammar g;
  try {
    const auto j = nlohmann::json::parse(ss.str());
    g.max_inputs_ = j.at("max_inputs").get<int>();
    g.max_depth_ = j.at("max_depth").get<int>();
    g.max_length_ = j.at("max_length").get<size_t>();
    g.max_token_ = j.at("max_token").get<size_t>();
    g.whitespace_ = j.at("whitespace").get<std::string>();
    g.input_ = std::regex(j.at("input").get<std::string>(), std::regex::ECMAScript);
    g.number_ = std::regex(j.at("number").get<std::string>(), std::regex::ECMAScript);
    for (const auto& [op, range] : j.at("operations").items())
      g.arity_[op] = {range.at(0).get<int>(), range.at(1).get<int>()};
  } catch (const std::exception& e) {
    throw std::runtime_error("expression grammar " + file.string() + ": " + e.what());
  }
  if (g.arity_.empty() || g.max_inputs_ < 1 || g.max_depth_ < 1)
    throw std::runtime_error("expression grammar " + file.string() + ": no operations or limits");
  return g;
}

std::optional<std::string> ExprGrammar::check(std::string_view text) const {
  if (text.size() > max_length_)
    return "longer than " + std::to_string(max_length_) + " characters";
  std::vector<std::string_view> tokens;
  size_t start = std::string_view::npos;
  for (size_t i = 0; i <= text.size(); ++i) {
    const bool end = i == text.size();
    const char c = end ? ' ' : text[i];
    const bool paren = c == '(' || c == ')';
    if (end || paren || whitespace_.find(c) != std::string::npos) {
      if (start != std::string_view::npos) tokens.push_back(text.substr(start, i - start));
      start = std::string_view::npos;
      if (paren) tokens.push_back(text.substr(i, 1));
    } else if (start == std::string_view::npos) {
      start = i;
    }
  }

  size_t pos = 0;
  std::optional<std::string> why;
  // Recursion bounded by max_depth_.
  auto read = [&](auto&& self, int depth) -> void {
    if (why) return;
    if (pos >= tokens.size()) return void(why = "the expression ends early");
    const std::string_view tok = tokens[pos++];
    if (tok == "(") {
      if (depth >= max_depth_)
        return void(why = "nested deeper than " + std::to_string(max_depth_));
      if (pos >= tokens.size()) return void(why = "the expression ends early");
      const std::string_view op = tokens[pos++];
      auto it = arity_.find(op);
      if (it == arity_.end()) return void(why = "unknown operation " + short_token(op));
      int n = 0;
      while (!why && pos < tokens.size() && tokens[pos] != ")") {
        self(self, depth + 1);
        ++n;
      }
      if (why) return;
      if (pos >= tokens.size()) return void(why = "missing ')'");
      ++pos;
      const auto [lo, hi] = it->second;
      if (n < lo || n > hi)
        why = std::string(op) + " takes " + std::to_string(lo) + ".." + std::to_string(hi) +
              " operands, got " + std::to_string(n);
      return;
    }
    if (tok == ")") return void(why = "unexpected ')'");
    if (tok.size() > max_token_) return void(why = "unknown atom " + short_token(tok));
    const std::string t(tok);  // short: std::regex recurses per character
    if (std::regex_match(t, input_)) {
      if (std::stoi(t.substr(1)) >= max_inputs_)
        why = "input " + t + " out of range (at most " + std::to_string(max_inputs_) + ")";
      return;
    }
    if (t == "none" || std::regex_match(t, number_)) return;
    why = "unknown atom " + short_token(tok);
  };
  read(read, 0);
  if (!why && pos != tokens.size()) why = "trailing text after the expression";
  return why;
}

}  // namespace kiln
