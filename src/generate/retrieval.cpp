#include "generate/retrieval.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>

namespace kiln::retrieval {

namespace {

const std::set<std::string>& python_keywords() {
  static const std::set<std::string> k = {
      "false", "none", "true", "and", "as", "assert", "async", "await", "break", "class", "continue",
      "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
      "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
      "with", "yield"};
  return k;
}

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Splits one identifier on '_' and camelCase boundaries ("HTTPServer" ->
// "HTTP", "Server"; "softmaxKernel" -> "softmax", "Kernel").
void split_identifier(const std::string& id, std::vector<std::string>& out) {
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) {
      std::string l = cur;
      std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
      if (!python_keywords().count(l)) out.push_back(l);
      cur.clear();
    }
  };
  for (size_t i = 0; i < id.size(); ++i) {
    const char c = id[i];
    if (c == '_') {
      flush();
      continue;
    }
    if (!cur.empty()) {
      const char p = cur.back();
      const bool upper = std::isupper(static_cast<unsigned char>(c));
      const bool prev_lower = std::islower(static_cast<unsigned char>(p)) || std::isdigit(static_cast<unsigned char>(p));
      const bool prev_upper = std::isupper(static_cast<unsigned char>(p));
      const bool next_lower = i + 1 < id.size() && std::islower(static_cast<unsigned char>(id[i + 1]));
      if (upper && (prev_lower || (prev_upper && next_lower))) flush();
    }
    cur += c;
  }
  flush();
}

}  // namespace

std::vector<std::string> tokenize(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    if (is_ident_char(text[i])) {
      size_t j = i;
      while (j < text.size() && is_ident_char(text[j])) ++j;
      split_identifier(std::string(text.substr(i, j - i)), out);
      i = j;
    } else {
      ++i;  // punctuation, whitespace, operators: dropped
    }
  }
  return out;
}

Bm25Index::Bm25Index(std::vector<Document> docs, double k1, double b) : docs_(std::move(docs)), k1_(k1), b_(b) {
  std::vector<std::vector<std::string>> toks;
  double total = 0;
  for (const Document& d : docs_) {
    toks.push_back(tokenize(d.match_text));
    total += toks.back().size();
    std::set<std::string> uniq(toks.back().begin(), toks.back().end());
    for (const auto& t : uniq) ++df_[t];
  }
  avglen_ = docs_.empty() ? 1 : std::max(1.0, total / docs_.size());
  for (const auto& t : toks) {
    vecs_.push_back(weights(t));
    double n = 0;
    for (const auto& [k, w] : vecs_.back()) n += w * w;
    norms_.push_back(std::sqrt(n));
  }
}

Bm25Index::Vec Bm25Index::weights(const std::vector<std::string>& tokens) const {
  std::unordered_map<std::string, int> tf;
  for (const auto& t : tokens) ++tf[t];
  const double N = static_cast<double>(docs_.size());
  const double len = static_cast<double>(tokens.size());
  Vec v;
  for (const auto& [t, f] : tf) {
    auto it = df_.find(t);
    const double n = it == df_.end() ? 0 : it->second;
    const double idf = std::log(1 + (N - n + 0.5) / (n + 0.5));
    v[t] = idf * f * (k1_ + 1) / (f + k1_ * (1 - b_ + b_ * len / avglen_));
  }
  return v;
}

std::vector<Match> Bm25Index::rank(std::string_view query) const {
  const Vec q = weights(tokenize(query));
  double qn = 0;
  for (const auto& [k, w] : q) qn += w * w;
  qn = std::sqrt(qn);
  std::vector<Match> out;
  for (size_t i = 0; i < docs_.size(); ++i) {
    double dot = 0;
    const Vec& d = vecs_[i];
    const Vec& small = q.size() < d.size() ? q : d;
    const Vec& large = q.size() < d.size() ? d : q;
    for (const auto& [k, w] : small)
      if (auto it = large.find(k); it != large.end()) dot += w * it->second;
    double s = (qn > 0 && norms_[i] > 0) ? dot / (qn * norms_[i]) : 0;
    out.push_back({i, std::clamp(s, 0.0, 1.0)});
  }
  std::stable_sort(out.begin(), out.end(), [](const Match& a, const Match& b) { return a.score > b.score; });
  return out;
}

bool above(double score, double threshold) { return score + 1e-9 >= threshold; }

std::string module_problem_text(const std::string& src) {
  std::string out;
  // The module docstring.
  size_t start = src.find("\"\"\"");
  if (start != std::string::npos && src.find_first_not_of(" \t\r\n") == start) {
    size_t end = src.find("\"\"\"", start + 3);
    if (end != std::string::npos) out += src.substr(start + 3, end - start - 3) + "\n";
  }
  // def reference(...): up to the next top-level statement.
  size_t def = src.find("\ndef reference(");
  if (def != std::string::npos) {
    std::istringstream in(src.substr(def + 1));
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
      if (!first && !line.empty() && !std::isspace(static_cast<unsigned char>(line[0]))) break;
      out += line + "\n";
      first = false;
    }
  }
  return out.empty() ? src : out;
}

}  // namespace kiln::retrieval
