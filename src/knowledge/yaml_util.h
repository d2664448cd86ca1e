// Small helpers shared by the knowledge loaders and the manifest parser:
// YAML -> JSON, strict scalar parsing, "file:line:column" locations, and
// "did you mean" suggestions. Header-only (inline) so it needs no build entry.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace kiln::yamlu {

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

inline bool iequals(const std::string& a, const std::string& b) { return lower(a) == lower(b); }

// "file:line:column: message" with 1-based line/column; just "file: message"
// when the mark is unknown.
inline std::string located(const std::string& file, const YAML::Mark& mark,
                           const std::string& message) {
  if (mark.line < 0) return file + ": " + message;
  return file + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) +
         ": " + message;
}

// A plain (unquoted, untagged) scalar: its type is resolved from its text.
inline bool is_plain(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "?"; }

// A scalar that is text whatever it looks like: quoted, a block scalar, or !!str.
inline bool is_forced_string(const YAML::Node& n) {
  return n.IsScalar() && (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str");
}

inline std::optional<bool> parse_bool(const YAML::Node& n) {
  if (!is_plain(n)) return std::nullopt;
  const std::string s = n.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

inline std::optional<long long> parse_int(const YAML::Node& n) {
  if (!n.IsScalar() || is_forced_string(n)) return std::nullopt;
  const std::string& s = n.Scalar();
  if (s.empty()) return std::nullopt;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t k = i; k < s.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return std::nullopt;
  return v;
}

inline std::optional<double> parse_float(const YAML::Node& n) {
  if (!n.IsScalar() || is_forced_string(n)) return std::nullopt;
  const std::string& s = n.Scalar();
  if (s.empty()) return std::nullopt;
  // Only decimal notation: no hex floats, inf or nan.
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '-' || c == '+'))
      return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno == ERANGE || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

inline bool is_null(const YAML::Node& n) {
  if (n.IsNull()) return true;
  if (!is_plain(n)) return false;
  const std::string& s = n.Scalar();
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// What a node is, in words, for "expected X, got Y" messages.
inline std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || is_null(n)) return "nothing (null)";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  std::string text = n.Scalar();  // quoted as an excerpt: a value can be megabytes
  if (text.size() > 60) text = text.substr(0, 40) + "... (" + std::to_string(text.size()) + " characters)";
  if (is_forced_string(n)) return "the string \"" + text + "\"";
  if (parse_bool(n)) return "the boolean " + text;
  if (parse_int(n) || parse_float(n)) return "the number " + text;
  return "the string \"" + text + "\"";
}

// What a node is, without quoting any of its text (for a whole file's content).
inline std::string kind(const YAML::Node& n) {
  if (!n.IsDefined() || is_null(n)) return "nothing (null)";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "a scalar of " + std::to_string(n.Scalar().size()) + " characters (not quoted)";
}

// YAML -> JSON with plain scalars typed (null, bool, int, float, string);
// quoted scalars stay strings.
inline nlohmann::json to_json(const YAML::Node& n) {
  if (!n.IsDefined() || is_null(n)) return nullptr;
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : n) a.push_back(to_json(x));
    return a;
  }
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[kv.first.Scalar()] = to_json(kv.second);
    return o;
  }
  if (is_forced_string(n)) return n.Scalar();
  if (auto b = parse_bool(n)) return *b;
  if (auto i = parse_int(n)) return *i;
  if (auto f = parse_float(n)) return *f;
  return n.Scalar();
}

inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                                          std::tolower(static_cast<unsigned char>(b[j - 1]))
                                      ? 0
                                      : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

inline size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() &&
         std::tolower(static_cast<unsigned char>(a[n])) == std::tolower(static_cast<unsigned char>(b[n])))
    ++n;
  return n;
}

// The closest candidate when it is close enough to be a likely typo, else "".
// Ties go to the longer common prefix ("MI300" -> "MI300X", not "MI100").
inline std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos, best_p = 0;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c), p = common_prefix(word, c);
    if (d < best_d || (d == best_d && p > best_p)) best_d = d, best_p = p, best = c;
  }
  size_t limit = word.size() <= 4 ? 1 : (word.size() <= 8 ? 2 : 3);
  return best_d <= limit ? best : std::string();
}

inline std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// " (did you mean 'x'?)" or "".
// Names (operators, targets, keys, ...) longer than this are rejected without
// a search for a close name, and quoted in messages as an excerpt.
inline constexpr size_t kMaxNameChars = 256;

// `s` for a message: whole when short, else its first 40 characters, "...",
// and its length.
inline std::string excerpt(const std::string& s, size_t keep = 40) {
  if (s.size() <= keep + 20) return s;
  return s.substr(0, keep) + "... (" + std::to_string(s.size()) + " characters)";
}

// A key for a message: quoted when it looks like a name (letters, digits,
// '_', '-', '.', spaces; at most 64 characters), else described by its length
// only. A path can name any file, and the first line of a secret parses as an
// unknown key ("root:$y$...:::"): it is not echoed.
inline std::string key_text(const std::string& k) {
  bool name = !k.empty() && k.size() <= 64;
  for (unsigned char c : k)
    name = name && (std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ' ');
  if (name) return "'" + k + "'";
  return "of " + std::to_string(k.size()) + " characters that is not a plain name (not quoted)";
}

inline std::string did_you_mean(const std::string& word, const std::vector<std::string>& c) {
  if (word.size() > kMaxNameChars) return " (a name of " + std::to_string(word.size()) + " characters is too long)";
  std::string s = closest(word, c);
  return s.empty() ? std::string() : " (did you mean '" + s + "'?)";
}

// The bound on a manifest, reference or knowledge file (16 MiB).
inline constexpr size_t kMaxInputFileBytes = size_t{16} << 20;

// A regular file's bytes, at most max_bytes. A FIFO, device or directory is
// refused without blocking (opened O_NONBLOCK, checked with fstat); so is a
// larger file (or one that grows past the bound while read). Throws
// std::runtime_error "PATH: why".
inline std::string read_file(const std::filesystem::path& path, size_t max_bytes = kMaxInputFileBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot open file: " + std::strerror(errno));
  struct stat st {};
  std::string out, why;
  if (::fstat(fd, &st) != 0) why = std::string("cannot stat: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file (a directory, FIFO or device); give a file";
  else if (static_cast<unsigned long long>(st.st_size) > max_bytes)
    why = "the file is " + std::to_string(st.st_size) + " bytes, over the bound of " +
          std::to_string(max_bytes >> 20) + " MiB";
  else {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = std::string("read: ") + std::strerror(errno);
        break;
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (out.size() > max_bytes) {
        why = "the file grew past the bound of " + std::to_string(max_bytes >> 20) + " MiB";
        break;
      }
    }
  }
  ::close(fd);
  if (!why.empty()) throw std::runtime_error(path.string() + ": " + why);
  return out;
}

// YAML::LoadAll, made to terminate: yaml-cpp 0.7's LoadAll loops forever,
// allocating, on a stray top-level token such as a lone "," (each pass starts
// a "document" at the same place and consumes nothing; found by fuzz_manifest).
// One event pass first, with no node built, checks that every document
// starts past the previous one. Throws YAML::ParserException.
inline std::vector<YAML::Node> load_all(const std::string& text) {
  struct Starts : YAML::EventHandler {
    std::vector<YAML::Mark> at;
    void OnDocumentStart(const YAML::Mark& m) override { at.push_back(m); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } starts;
  std::istringstream in(text);
  YAML::Parser parser(in);
  while (parser.HandleNextDocument(starts)) {
    const size_t n = starts.at.size();
    if (n >= 2 && starts.at[n - 1].pos <= starts.at[n - 2].pos)
      throw YAML::ParserException(starts.at[n - 1], "unexpected token at the top level (a stray ',', ']' or '}'?)");
  }
  return YAML::LoadAll(text);
}

// Parses one YAML document; syntax errors become "file:line:column: message".
// Throws std::runtime_error.
inline YAML::Node load_document(const std::string& text, const std::string& file) {
  std::vector<YAML::Node> docs;
  try {
    docs = load_all(text);
  } catch (const YAML::ParserException& e) {
    throw std::runtime_error(located(file, e.mark, "YAML syntax error: " + e.msg));
  }
  if (docs.size() > 1) throw std::runtime_error(file + ": expected one YAML document, found " +
                                                std::to_string(docs.size()));
  if (docs.empty() || docs[0].IsNull()) throw std::runtime_error(file + ": empty document");
  return docs[0];
}

// Knowledge-file checking: every failure is a std::runtime_error naming
// file:line:column of the offending node.
struct Checker {
  std::string file;

  [[noreturn]] void fail(const YAML::Node& n, const std::string& msg) const {
    throw std::runtime_error(located(file, n.Mark(), msg));
  }
  [[noreturn]] void fail(const YAML::Mark& m, const std::string& msg) const {
    throw std::runtime_error(located(file, m, msg));
  }
  void need_map(const YAML::Node& n, const std::string& what) const {
    if (!n.IsMap()) fail(n, what + " must be a mapping, got " + describe(n));
  }
  // Rejects duplicate keys (yaml-cpp keeps both silently).
  void no_duplicates(const YAML::Node& map) const {
    std::vector<std::string> seen;
    for (const auto& kv : map) {
      const std::string k = kv.first.Scalar();
      if (std::find(seen.begin(), seen.end(), k) != seen.end())
        fail(kv.first, "duplicate key '" + k + "'");
      seen.push_back(k);
    }
  }
  std::string str(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar() || is_null(n)) fail(n, what + " must be a string, got " + describe(n));
    return n.Scalar();
  }
  long long integer(const YAML::Node& n, const std::string& what) const {
    auto v = parse_int(n);
    if (!v) fail(n, what + " must be an integer, got " + describe(n));
    return *v;
  }
  double number(const YAML::Node& n, const std::string& what) const {
    auto v = parse_float(n);
    if (!v) fail(n, what + " must be a number, got " + describe(n));
    return *v;
  }
  bool boolean(const YAML::Node& n, const std::string& what) const {
    auto v = parse_bool(n);
    if (!v) fail(n, what + " must be true or false, got " + describe(n));
    return *v;
  }
  // map[key]; fails "<where>: missing '<key>'" when it is not there.
  YAML::Node need(const YAML::Node& map, const std::string& key, const std::string& where) const {
    YAML::Node v = map[key];
    if (!v) fail(map, where + ": missing '" + key + "'");
    return v;
  }
  // Rejects duplicate keys and keys not in `known` (`where` names the mapping).
  void known_keys(const YAML::Node& map, const std::vector<std::string>& known, const std::string& where) const {
    no_duplicates(map);
    for (const auto& kv : map) {
      const std::string k = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), k) == known.end())
        fail(kv.first, "unknown key '" + k + "' in " + where + did_you_mean(k, known));
    }
  }
  std::vector<std::string> strings(const YAML::Node& n, const std::string& what) const {
    std::vector<std::string> out;
    if (n.IsScalar() && !is_null(n)) return {n.Scalar()};
    if (!n.IsSequence()) fail(n, what + " must be a list of strings, got " + describe(n));
    for (const auto& x : n) out.push_back(str(x, what + " item"));
    return out;
  }
};

// A registry file {version: 1, <section>: {name: entry, ...}} (`title` names
// the file in messages, e.g. "the operator registry"; `kind` its version, e.g.
// "operator registry"): checked, and each entry, a mapping of the keys
// `entry_keys`, parsed by parse(checker, where, value node) in file order
// (where: "<entry> 'name'", for messages) and given its name. Throws std::runtime_error
// naming file:line:column; an empty section is an error.
template <class Parse>
auto load_registry(const std::filesystem::path& file, const std::string& section, const std::string& title,
                   const std::string& kind, const std::string& entry, const std::vector<std::string>& entry_keys,
                   Parse parse) {
  Checker ck{file.string()};
  YAML::Node doc = load_document(read_file(file), file.string());
  ck.need_map(doc, title);
  ck.known_keys(doc, {"version", section}, title);
  if (doc["version"] && ck.integer(doc["version"], "version") != 1)
    ck.fail(doc["version"], "unsupported " + kind + " version (this build reads version 1)");
  YAML::Node entries = doc[section];
  if (!entries) ck.fail(doc, "missing '" + section + "'");
  ck.need_map(entries, section);
  ck.no_duplicates(entries);
  std::vector<decltype(parse(ck, std::string(), YAML::Node()))> out;
  for (const auto& kv : entries) {
    const std::string name = kv.first.Scalar();
    const std::string where = entry + " '" + name + "'";
    ck.need_map(kv.second, where);
    ck.known_keys(kv.second, entry_keys, where);
    out.push_back(parse(ck, where, kv.second));
    out.back().name = name;
  }
  if (out.empty()) ck.fail(entries, "no " + section);
  return out;
}

}  // namespace kiln::yamlu
