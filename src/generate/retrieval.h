// Retrieval for the prompt generation engine: the known-good kernel most
// similar to the job, as a 1-shot example (docs/llm.md, "Retrieval").
//
// Similarity is BM25 over normalised code tokens: identifiers are split on '_'
// and camelCase and lower-cased; Python keywords and punctuation are dropped.
// Each text becomes a vector of BM25 term weights,
//   w(t) = idf(t) * tf(t) * (k1 + 1) / (tf(t) + k1 * (1 - b + b * len / avglen)),
//   idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5)),
// over the N documents of the index (the query is weighted the same way), and
// the score is the cosine of the query's and the document's vectors: in [0, 1],
// 1 for identical token multisets, 0 when no token is shared.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::retrieval {

// Normalised tokens of a piece of code or text, in order.
std::vector<std::string> tokenize(std::string_view text);

struct Document {
  std::string id;          // "kernels/softmax.py", "catalog:job 12 candidate 345"
  std::string kind;        // template | catalog
  std::string match_text;  // what the query is compared with (the problem it solves)
  std::string example;     // what a prompt shows (the known-good kernel)
  nlohmann::json meta = nlohmann::json::object();  // module, op, config, score_ms...
};

struct Match {
  size_t index = 0;
  double score = 0;        // cosine of BM25 vectors, [0, 1]
};

class Bm25Index {
 public:
  explicit Bm25Index(std::vector<Document> docs, double k1 = 1.2, double b = 0.75);
  // Every document's similarity to the query, best first (ties: index order).
  std::vector<Match> rank(std::string_view query) const;
  const std::vector<Document>& docs() const { return docs_; }

 private:
  using Vec = std::unordered_map<std::string, double>;
  Vec weights(const std::vector<std::string>& tokens) const;
  std::vector<Document> docs_;
  std::vector<Vec> vecs_;
  std::vector<double> norms_;
  std::unordered_map<std::string, int> df_;
  double k1_, b_, avglen_ = 1;
};

// Whether a match counts (score >= threshold, with a little slack for
// rounding so an identical text always reaches a threshold of 1).
bool above(double score, double threshold);

// The text of a kernels/ module that states its problem: the module docstring
// and its `def reference(...)` function.
std::string module_problem_text(const std::string& module_source);

}  // namespace kiln::retrieval
