#include "generate/prompt.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/number_text.h"
#include "evaluate/protocol.h"

namespace kiln::prompt {

using nlohmann::json;

namespace {

std::string bytes_text(long long b) {
  if (b <= 0) return "unknown";
  if (b % (1024LL * 1024) == 0) return std::to_string(b / (1024LL * 1024)) + " MiB";
  if (b % 1024 == 0) return std::to_string(b / 1024) + " KiB";
  return std::to_string(b) + " bytes";
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

std::string fence(const std::string& code) { return "```python\n" + trim(code) + "\n```\n"; }

std::string dims_text(const json& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i].dump();
  return s + "]";
}

// The reference's inputs and eager latency, from the worker's reference_info.
std::string reference_info_text(const json& info) {
  if (!info.is_object()) return "";
  std::string out;
  auto inputs = info.find("inputs");
  if (inputs != info.end() && inputs->is_array() && !inputs->empty()) {
    out += "Inputs of forward (from get_inputs()):\n";
    int i = 0;
    for (const auto& x : *inputs) {
      out += "- arg " + std::to_string(i++) + ": ";
      if (x.is_object() && x.contains("shape")) {
        out += x.value("dtype", std::string("tensor")) + " " + dims_text(x["shape"]);
        if (x.contains("stride") && x["stride"].is_array()) out += " stride " + dims_text(x["stride"]);
        if (x.contains("name") && x["name"].is_string()) out += " (" + x["name"].get<std::string>() + ")";
      } else {
        out += x.dump();
      }
      out += "\n";
    }
  }
  auto init = info.find("init_inputs");
  if (init != info.end() && init->is_array() && !init->empty()) out += "Model(*get_init_inputs()) with " + init->dump() + "\n";
  auto outputs = info.find("outputs");
  if (outputs == info.end()) outputs = info.find("output");
  if (outputs != info.end() && !outputs->is_null()) {
    auto one = [](const json& x) {
      return x.is_object() && x.contains("shape") ? x.value("dtype", std::string("tensor")) + " " + dims_text(x["shape"])
                                                  : x.dump();
    };
    std::string list;
    if (outputs->is_array())
      for (const auto& x : *outputs) list += (list.empty() ? "" : ", ") + one(x);
    else
      list = one(*outputs);
    out += "Output of forward: " + list + "\n";
  }
  std::optional<double> eager;
  for (const char* k : {"eager_ms", "reference_ms"})
    if (info.contains(k) && info[k].is_number()) eager = info[k].get<double>();
  const std::optional<Latency> lat =  // evaluate/protocol.h
      info.is_object() && info.contains("latency") ? read_latency(info["latency"]) : std::nullopt;
  if (!eager && lat && lat->median_ms) eager = lat->median_ms;
  if (eager) {
    std::string dev = info.value("device", std::string());
    if (dev.empty() && lat) dev = lat->device.value_or("");
    out += "PyTorch eager latency: " + number_text(*eager) + " ms" + (dev.empty() ? "" : " on " + dev) +
           " — the kernel should beat it.\n";
  }
  return out;
}

}  // namespace

std::vector<std::pair<const Principle*, bool>> select_principles(const PrincipleRegistry& registry,
                                                                 const std::vector<std::string>& asked,
                                                                 const std::string& backend,
                                                                 double weight_cut) {
  auto applies = [&](const Principle* p) {
    return p->backends.empty() || backend.empty() ||
           std::find(p->backends.begin(), p->backends.end(), backend) != p->backends.end();
  };
  std::vector<const Principle*> first, rest;
  for (const auto& name : registry.names()) {
    const Principle* p = registry.find(name);
    if (!p || !applies(p)) continue;
    if (std::find(asked.begin(), asked.end(), name) != asked.end()) first.push_back(p);
    else if (p->weight >= weight_cut) rest.push_back(p);
  }
  auto by_weight = [](const Principle* a, const Principle* b) {
    return a->weight != b->weight ? a->weight > b->weight : a->name < b->name;
  };
  std::stable_sort(first.begin(), first.end(), by_weight);
  std::stable_sort(rest.begin(), rest.end(), by_weight);
  std::vector<std::pair<const Principle*, bool>> out;
  for (const Principle* p : first) out.emplace_back(p, true);
  for (const Principle* p : rest) out.emplace_back(p, false);
  return out;
}

std::string render_target(const Target& t) {
  std::ostringstream os;
  const bool amd = t.vendor == "amd" || t.backend == "hip";
  os << "## Hardware: " << t.name << " (" << t.arch << ", Triton backend " << t.backend << ")\n";
  os << "- " << (amd ? "compute units (CUs)" : "streaming multiprocessors (SMs)") << ": " << t.compute_units;
  if (t.simds_per_cu > 0) os << ", " << t.simds_per_cu << (amd ? " SIMDs per CU" : " sub-partitions per SM");
  os << "\n";
  os << "- " << (amd ? "wavefront" : "warp") << " size: " << t.warp_size << " threads\n";
  os << "- " << (amd ? "LDS" : "shared memory") << " per " << (amd ? "CU" : "SM") << ": "
     << bytes_text(t.lds_bytes_per_cu) << "; at most " << bytes_text(t.max_shared_per_block) << " per program\n";
  if (t.registers_per_cu > 0)
    os << "- registers: " << t.registers_per_cu << " 32-bit registers per " << (amd ? "CU" : "SM") << "\n";
  if (t.max_waves_per_simd > 0)
    os << "- occupancy limit: " << t.max_waves_per_simd << (amd ? " waves per SIMD" : " warps per sub-partition") << "\n";
  if (t.l2_bytes > 0) os << "- L2 cache: " << bytes_text(t.l2_bytes) << "\n";
  if (t.infinity_cache_bytes > 0) os << "- Infinity Cache (MALL): " << bytes_text(t.infinity_cache_bytes) << "\n";
  if (t.memory_bandwidth_gbs > 0) os << "- memory bandwidth: " << number_text(t.memory_bandwidth_gbs) << " GB/s\n";
  if (!t.peak_tflops.empty()) {
    os << "- peak dense TFLOPS:";
    bool first = true;
    for (const auto& [k, v] : t.peak_tflops) {
      os << (first ? " " : ", ") << k << " " << number_text(v);
      first = false;
    }
    os << "\n";
  }
  return os.str();
}

std::string render_principles(const std::vector<std::pair<const Principle*, bool>>& principles) {
  if (principles.empty()) return "";
  std::ostringstream os;
  os << "## Optimisation principles (heaviest first; the job asks for those marked required)\n";
  int i = 1;
  for (const auto& [p, required] : principles) {
    os << i++ << ". " << p->name << " (weight " << number_text(p->weight, 3) << (required ? ", required" : "") << "): "
       << trim(p->prompt.empty() ? p->description : p->prompt) << "\n";
  }
  return os.str();
}

std::string system_prompt() {
  return "You are an expert GPU kernel engineer. You write fast, correct Triton (Triton 3.x) kernels for AMD "
         "Instinct / Radeon and NVIDIA GPUs, wrapped in a PyTorch module. You answer with one complete Python "
         "module in a single ```python code block and nothing else of substance.";
}

std::string render_user(const Inputs& in) {
  std::ostringstream os;
  // 1. The task.
  os << "## Task\n";
  if (in.is_reference) {
    os << "Write a Triton implementation of the PyTorch module `Model` below (`" << in.op << "`).\n"
       << "Define `class ModelNew(torch.nn.Module)` with the same constructor arguments as `Model` and a "
          "`forward` with the same arguments and the same result (shape, dtype, values within tolerance). "
          "`forward` must compute the result with one or more `@triton.jit` kernels launched on the inputs' "
          "device (current stream). In `forward`, torch may only allocate outputs (torch.empty, "
          "torch.empty_like), make views and read shapes: any other torch op (x + y, x.sum(), x.float(), "
          "torch.matmul, F.*, calling an nn.Linear) is rejected, and so are calling the reference, caching "
          "outputs, returning an input and changing the inputs. Parameters live in ModelNew as in Model (same "
          "names and shapes: they get the reference's values). Import torch, triton and triton.language as tl; "
          "define the kernels at module level.\n";
    if (!in.description.empty()) os << "About it: " << trim(in.description) << "\n";
    if (in.dtype != "fp32" && !in.dtype.empty())
      os << "Floating-point inputs are given in " << in.dtype << "; accumulate in fp32.\n";
    os << "\n### Reference" << (in.reference_path.empty() ? "" : " (" + in.reference_path + ")") << "\n"
       << fence(in.reference_source);
  } else {
    os << "Write a Triton implementation of the library operator `" << in.op << "` for shape "
       << dims_text(in.shape) << ", dtype " << in.dtype
       << (in.params.is_object() && !in.params.empty() ? ", params " + in.params.dump() : std::string()) << ".\n"
       << "Define `class ModelNew(torch.nn.Module)` whose `forward` takes the operator's input tensors in the "
          "order the reference below reads them and returns the output, computed by `@triton.jit` kernels.\n";
    if (!in.description.empty()) os << "About it: " << trim(in.description) << "\n";
    os << "\n### Reference\n" << fence(in.reference_source);
  }
  const std::string info = reference_info_text(in.reference_info);
  if (!info.empty()) os << "\n" << info;

  // 2. Knowledge.
  os << "\n";
  if (in.target) os << render_target(*in.target);
  const std::string pr = render_principles(in.principles);
  if (!pr.empty()) os << "\n" << pr;

  // 3. The retrieved example.
  if (in.example) {
    os << "\n## Example: a known-good kernel for a similar problem (" << in.example->id << ", similarity "
       << number_text(in.example->score, 3) << ")\n"
       << "Adapt its approach; do not copy what does not apply.\n";
    if (!in.example->note.empty()) os << in.example->note << "\n";
    os << fence(in.example->code);
  }

  // 4. Reflection: the previous attempt, its diagnosis, the constraints so far.
  if (in.previous) {
    os << "\n## Previous attempt (round " << in.previous->round << ") and its diagnosis\n"
       << fence(in.previous->code)
       << "Diagnosis: " << in.previous->diagnosis.kind << " — " << trim(in.previous->diagnosis.summary) << "\n";
    if (in.best_so_far_ms) os << "Best correct kernel so far: " << number_text(*in.best_so_far_ms) << " ms.\n";
  }
  if (!in.constraints.empty()) {
    os << "\n## Constraints for this attempt\n";
    for (const auto& c : in.constraints) os << "- " << c << "\n";
  }

  // 5. What to return.
  os << "\n## Answer\n"
     << (in.previous ? "Fix the problems above and return the corrected, complete module"
                     : "Return the complete module")
     << " (imports, @triton.jit kernels, class ModelNew) in one ```python block.\n";
  return os.str();
}

json render_messages(const Inputs& in) {
  return json::array({{{"role", "system"}, {"content", system_prompt()}},
                      {{"role", "user"}, {"content", render_user(in)}}});
}

std::string extract_code(const std::string& reply) {
  auto block_at = [&](size_t open) -> std::string {
    size_t nl = reply.find('\n', open);
    if (nl == std::string::npos) return "";
    size_t close = reply.find("\n```", nl);
    if (close == std::string::npos) return trim(reply.substr(nl + 1));  // unterminated: to the end
    return trim(reply.substr(nl + 1, close - nl - 1));
  };
  // ```python / ```py / ```Python at the start of a line.
  for (size_t pos = reply.find("```"); pos != std::string::npos; pos = reply.find("```", pos + 3)) {
    if (pos > 0 && reply[pos - 1] != '\n') continue;
    size_t eol = reply.find('\n', pos);
    std::string tag = trim(reply.substr(pos + 3, (eol == std::string::npos ? reply.size() : eol) - pos - 3));
    std::transform(tag.begin(), tag.end(), tag.begin(), [](unsigned char c) { return std::tolower(c); });
    if (tag == "python" || tag == "py" || tag == "python3") return block_at(pos);
  }
  // Any fenced block (an opening fence: at a line start).
  size_t pos = reply.find("```");
  while (pos != std::string::npos && pos > 0 && reply[pos - 1] != '\n') pos = reply.find("```", pos + 3);
  if (pos != std::string::npos) {
    std::string code = block_at(pos);
    if (!code.empty()) return code;
  }
  return trim(reply);
}

}  // namespace kiln::prompt
