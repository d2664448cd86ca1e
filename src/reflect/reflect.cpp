#include "reflect/reflect.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/number_text.h"

namespace kiln::reflect {

using nlohmann::json;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool has(const std::string& haystack_lower, const char* needle) {
  return haystack_lower.find(needle) != std::string::npos;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(s);
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// The compile-error constraint that the message calls for.
std::string compile_constraint(const std::string& m) {
  if (has(m, "atomic")) return "avoid atomics: reduce within one program and write each output element once";
  if (has(m, "arange") && (has(m, "power of 2") || has(m, "power-of-2") || has(m, "power of two")))
    return "tl.arange needs a power-of-two length: round block sizes up with triton.next_power_of_2 and mask the tail";
  if (has(m, "dot") && (has(m, ">= 16") || has(m, "at least 16") || has(m, "shape")))
    return "tl.dot needs 2-D operands with every dimension >= 16: use BLOCK_M, BLOCK_N, BLOCK_K multiples of 16";
  if (has(m, "constexpr"))
    return "values used as shapes (block sizes, tl.arange bounds) must be tl.constexpr kernel parameters";
  if (has(m, "is not defined") || has(m, "nameerror") || has(m, "has no attribute"))
    return "use only names that exist: import torch, triton and triton.language as tl, and only triton.language "
           "functions of Triton 3.x";
  if (has(m, "unsupported") || has(m, "not supported"))
    return "use only operations Triton supports inside @triton.jit functions (no Python lists, no torch calls)";
  return "fix the compile error above; keep to triton.language operations of Triton 3.x";
}

}  // namespace

std::string excerpt(const std::string& message, size_t max_chars) {
  if (message.size() <= max_chars) return message;
  // Prefer lines that name the error; then the end (a traceback's last lines).
  std::vector<std::string> lines = split_lines(message);
  std::vector<size_t> keep;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string l = lower(lines[i]);
    if (has(l, "error") || has(l, "exception") || has(l, "out of resource") || has(l, "^"))
      keep.push_back(i);
  }
  std::string head;
  for (size_t i : keep) {
    if (head.size() + lines[i].size() + 1 > max_chars / 2) break;
    head += lines[i] + "\n";
  }
  const size_t tail_len = max_chars > head.size() + 20 ? max_chars - head.size() - 20 : max_chars / 2;
  std::string tail = message.substr(message.size() - std::min(tail_len, message.size()));
  return head + "[...]\n" + tail;
}

Diagnosis diagnose(const Outcome& o, std::optional<double> best_so_far_ms,
                   std::optional<double> reference_ms) {
  Diagnosis d;
  const EvaluationResult r = read_evaluation_result(o.result);
  const Correctness correctness = r.correctness.value_or(Correctness{});
  const std::optional<double> max_abs_err = correctness.max_abs_err, max_rel_err = correctness.max_rel_err;
  const std::string msg = o.message.empty() ? r.message : o.message;
  const std::string m = lower(msg);
  const std::string ex = excerpt(msg);
  const std::string& s = o.status;

  if (s == "ok") {
    const std::optional<double> measured = r.latency.value_or(Latency{}).median_ms;
    const auto abs_err = max_abs_err;
    std::string evidence = "correct";
    if (abs_err) evidence += " (max abs error " + number_text(*abs_err, 3) + ")";
    if (measured && reference_ms && *measured > *reference_ms) {
      d.kind = "slower";
      d.summary = evidence + " but slower than the PyTorch reference: " + number_text(*measured) + " ms against " +
                  number_text(*reference_ms) + " ms eager.";
      d.constraint = "beat PyTorch eager: fuse the whole forward into as few kernels as possible, read each "
                     "input once, and size blocks so every compute unit has work";
      return d;
    }
    if (o.score_ms && best_so_far_ms && *o.score_ms > *best_so_far_ms * 1.05) {
      d.kind = "slower";
      d.summary = evidence + " but slower than the best kernel so far: " + number_text(*o.score_ms) + " ms against " +
                  number_text(*best_so_far_ms) + " ms" + (measured ? "" : " (static estimate)") + ".";
      d.constraint = "improve on the best kernel so far: larger tiles per program, fewer passes over memory, "
                     "fewer launches";
      return d;
    }
    d.kind = "ok";
    d.summary = evidence + (o.score_ms ? ", " + number_text(*o.score_ms) + " ms" + (measured ? "" : " (static estimate)")
                                       : std::string()) + ".";
    return d;
  }
  if (s == "compile_error") {
    if (has(m, "syntaxerror") || has(m, "indentationerror") || has(m, "invalid syntax") ||
        has(m, "unexpected indent") || has(m, "unterminated")) {
      d.kind = "syntax_error";
      d.summary = "The code is not valid Python:\n" + ex;
      d.constraint = "return one complete, syntactically valid Python module in a single ```python block";
      return d;
    }
    d.kind = "compile_error";
    d.summary = "Triton could not compile the kernel:\n" + ex;
    d.constraint = compile_constraint(m);
    return d;
  }
  if (s == "resource_error") {
    d.kind = "resource_error";
    const bool regs = has(m, "register") || has(m, "vgpr") || has(m, "spill");
    d.summary = std::string("The kernel needs more ") + (regs ? "registers" : "LDS / shared memory") +
                " than the target has:\n" + ex;
    d.constraint = regs ? "use smaller BLOCK sizes per program (or more num_warps) so registers fit; avoid large "
                          "per-thread arrays"
                        : "use smaller BLOCK sizes and fewer num_stages so each program's tiles fit in LDS / "
                          "shared memory";
    return d;
  }
  if (s == "incorrect") {
    d.kind = "incorrect";
    std::string evidence;
    if (max_abs_err) evidence += "max abs error " + number_text(*max_abs_err, 3);
    if (max_rel_err)
      evidence += (evidence.empty() ? "" : ", ") + std::string("max rel error ") + number_text(*max_rel_err, 3);
    d.summary = "The output does not match the reference" + (evidence.empty() ? "" : " (" + evidence + ")") +
                ":\n" + ex;
    if (has(m, "nan"))
      d.constraint = "write every output element: the grid must cover the whole output and masks must not "
                     "skip valid elements";
    else if (has(m, "shape") || has(m, "size"))
      d.constraint = "return a tensor of exactly the reference's shape and dtype";
    else
      d.constraint = "match the reference exactly: check indexing, strides, masks, the reduction axis, and "
                     "accumulate in fp32";
    return d;
  }
  if (s == "timeout") {
    d.kind = "timeout";
    d.summary = "The candidate did not finish in time: " + ex;
    d.constraint = "make every loop terminate and keep the grid proportional to the output; no spin-waits";
    return d;
  }
  if (s == "rejected") {
    d.kind = "rejected";
    d.summary = "The evaluator's screening rejected the code before running it:\n" + ex;
    d.constraint = "compute the result in @triton.jit kernels: no torch compute ops in forward, no calls to "
                   "the reference, no caching of outputs, no edits of the inputs, no other streams";
    return d;
  }
  // crash and anything unknown.
  d.kind = "crash";
  d.summary = "The candidate crashed while running:\n" + ex;
  if (has(m, "illegal") || has(m, "out of bounds") || has(m, "segmentation") || has(m, "memory access"))
    d.constraint = "mask every load and store and compute offsets in int64 so no access leaves the tensors";
  else
    d.constraint = "make the module run: allocate the output with torch.empty on the input's device and pass "
                   "contiguous tensors to the kernel";
  return d;
}

}  // namespace kiln::reflect
