#include "manifest.h"

#include <algorithm>

#include "error.h"

namespace kiln::rt {

using nlohmann::json;

namespace {

struct Ctx {
  std::string what;
  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    throw Error(KILN_E_FORMAT, what + ": " + path + ": " + why);
  }
  const json& need(const json& o, const char* key, const std::string& path) const {
    if (!o.is_object() || !o.contains(key)) fail(path, std::string("missing \"") + key + "\"");
    return o.at(key);
  }
  std::string str(const json& o, const char* key, const std::string& path, bool required = true) const {
    if (!o.contains(key) || o.at(key).is_null()) {
      if (required) fail(path, std::string("missing \"") + key + "\"");
      return {};
    }
    if (!o.at(key).is_string()) fail(path + "." + key, "expected a string");
    std::string s = o.at(key).get<std::string>();
    // Names, files and labels only: a control character (ESC...) would reach
    // the terminal through kiln-rt's output, and a huge value its messages.
    if (s.size() > 4096) fail(path + "." + key, "longer than 4096 bytes");
    for (unsigned char ch : s)
      if (ch < 0x20 || ch == 0x7f) fail(path + "." + key, "contains a control character");
    return s;
  }
  int64_t integer(const json& o, const char* key, const std::string& path, int64_t dflt,
                  bool required = false) const {
    if (!o.contains(key) || o.at(key).is_null()) {
      if (required) fail(path, std::string("missing \"") + key + "\"");
      return dflt;
    }
    const json& v = o.at(key);
    if (!v.is_number_integer()) fail(path + "." + key, "expected an integer");
    return v.get<int64_t>();
  }
  double number(const json& o, const char* key, const std::string& path, double dflt) const {
    if (!o.contains(key) || o.at(key).is_null()) return dflt;
    if (!o.at(key).is_number()) fail(path + "." + key, "expected a number");
    return o.at(key).get<double>();
  }
  // Calls f(element, its path "path[i]") for each element of the array `a`
  // at `path`; anything but an array fails.
  template <class F>
  void each(const json& a, const std::string& path, F f) const {
    if (!a.is_array()) fail(path, "expected an array");
    for (size_t i = 0; i < a.size(); ++i) f(a[i], path + "[" + std::to_string(i) + "]");
  }
  Expr expr(const json& v, const std::string& path) const {
    std::string text;
    if (v.is_number_integer()) text = std::to_string(v.get<int64_t>());
    else if (v.is_string()) text = v.get<std::string>();
    else fail(path, "expected an expression (string or integer)");
    try {
      return Expr::parse(text);
    } catch (const ExprError& e) {
      fail(path, e.what());
    }
  }
};

Bind parse_bind(const Ctx& c, const json& b, const std::string& path) {
  Bind r;
  if (!b.is_object() || b.size() != 1) c.fail(path, "expected one of tensor|expr|value|scratch|tma");
  if (b.contains("tensor")) {
    r.kind = Bind::Tensor;
    r.tensor = static_cast<int>(c.integer(b, "tensor", path, -1, true));
  } else if (b.contains("expr")) {
    r.kind = Bind::Scalar;
    r.expr = c.expr(b.at("expr"), path + ".expr");
  } else if (b.contains("value")) {
    r.kind = Bind::Value;
    if (!b.at("value").is_number()) c.fail(path + ".value", "expected a number");
    r.value = b.at("value").get<double>();
  } else if (b.contains("scratch")) {
    r.kind = Bind::Scratch;
    std::string s = c.str(b, "scratch", path);
    if (s != "global" && s != "profile") c.fail(path + ".scratch", "expected \"global\" or \"profile\"");
    r.global_scratch = s == "global";
  } else if (b.contains("tma")) {
    r.kind = Bind::Tma;
    const json& t = b.at("tma");
    std::string tp = path + ".tma";
    r.tma.tensor = static_cast<int>(c.integer(t, "tensor", tp, -1, true));
    const json& dims = c.need(t, "dims", tp);
    const json& strides = c.need(t, "strides_bytes", tp);
    const json& box = c.need(t, "box", tp);
    if (!dims.is_array() || !strides.is_array() || !box.is_array() || dims.empty() ||
        strides.size() + 1 != dims.size() || box.size() != dims.size())
      c.fail(tp, "dims, strides_bytes (one fewer) and box must be arrays of matching rank");
    for (size_t i = 0; i < dims.size(); ++i) r.tma.dims.push_back(c.expr(dims[i], tp + ".dims[" + std::to_string(i) + "]"));
    for (size_t i = 0; i < strides.size(); ++i)
      r.tma.strides_bytes.push_back(c.expr(strides[i], tp + ".strides_bytes[" + std::to_string(i) + "]"));
    for (const auto& x : box) {
      if (!x.is_number_integer()) c.fail(tp + ".box", "expected integers");
      r.tma.box.push_back(x.get<int64_t>());
    }
    r.tma.elem = c.str(t, "elem", tp);
    r.tma.swizzle_bytes = static_cast<int>(c.integer(t, "swizzle_bytes", tp, 0));
  } else {
    c.fail(path, "unknown bind " + b.dump());
  }
  return r;
}

Variant parse_variant(const Ctx& c, const json& v, const std::string& p) {
  Variant r;
  r.target = c.str(v, "target", p);
  r.rank = static_cast<int>(c.integer(v, "rank", p, 0));
  r.file = c.str(v, "file", p);
  r.bundle_entry = c.str(v, "bundle_entry", p, false);
  r.sha256 = c.str(v, "sha256", p, false);
  r.size = c.integer(v, "size", p, -1);
  if (v.contains("size") && !v.at("size").is_null() &&
      (r.size < 0 || (v.at("size").is_number_unsigned() && v.at("size").get<uint64_t>() > uint64_t(INT64_MAX))))
    c.fail(p + ".size", "must be a non-negative byte count, not " + v.at("size").dump());
  r.kernel_name = c.str(v, "kernel_name", p);
  r.code_object_version = static_cast<int>(c.integer(v, "code_object_version", p, 0));
  r.num_warps = static_cast<int>(c.integer(v, "num_warps", p, 0));
  r.num_stages = static_cast<int>(c.integer(v, "num_stages", p, 0));
  r.warp_size = static_cast<int>(c.integer(v, "warp_size", p, 0));
  if (v.contains("block")) {
    const json& b = v.at("block");
    if (!b.is_array() || b.empty() || b.size() > 3) c.fail(p + ".block", "expected 1-3 integers");
    for (size_t i = 0; i < b.size(); ++i) {
      if (!b[i].is_number_integer()) c.fail(p + ".block", "expected integers");
      r.block[i] = b[i].get<int64_t>();
    }
  } else {
    r.block = {int64_t(r.num_warps) * std::max(r.warp_size, 1), 1, 1};
  }
  r.shared_bytes = c.integer(v, "shared_bytes", p, 0);
  r.registers = c.integer(v, "registers", p, 0);
  r.sgprs = c.integer(v, "sgprs", p, 0);
  r.spills = c.integer(v, "spills", p, 0);
  r.scratch_bytes = c.integer(v, "scratch_bytes", p, 0);
  r.global_scratch_size = c.integer(v, "global_scratch_size", p, 0);
  r.global_scratch_align = std::max<int64_t>(1, c.integer(v, "global_scratch_align", p, 1));
  r.profile_scratch_size = c.integer(v, "profile_scratch_size", p, 0);
  r.profile_scratch_align = std::max<int64_t>(1, c.integer(v, "profile_scratch_align", p, 1));
  const json& grid = c.need(v, "grid", p);
  if (!grid.is_array() || grid.empty() || grid.size() > 3) c.fail(p + ".grid", "expected 1-3 expressions");
  for (size_t i = 0; i < 3; ++i)
    r.grid.push_back(i < grid.size() ? c.expr(grid[i], p + ".grid[" + std::to_string(i) + "]") : Expr::parse("1"));
  c.each(c.need(v, "args", p), p + ".args", [&](const json& arg, const std::string& ap) {
    ArgSpec a;
    a.name = c.str(arg, "name", ap, false);
    a.type = c.str(arg, "type", ap);
    a.hidden = arg.value("hidden", false);
    a.bind = parse_bind(c, c.need(arg, "bind", ap), ap + ".bind");
    r.args.push_back(std::move(a));
  });
  if (v.contains("zero_before_launch") && !v.at("zero_before_launch").is_null())
    c.each(v.at("zero_before_launch"), p + ".zero_before_launch", [&](const json& z, const std::string& zp) {
      if (!z.is_string()) c.fail(zp, "expected an argument name");
      const std::string name = z.get<std::string>();
      auto a = std::find_if(r.args.begin(), r.args.end(), [&](const ArgSpec& x) { return x.name == name; });
      if (a == r.args.end() || a->bind.kind != Bind::Tensor)
        c.fail(zp, "\"" + (name.size() <= 64 ? name : name.substr(0, 64) + "...") +
                       "\" is not a pointer argument bound to a tensor");
      if (std::find(r.zero_tensors.begin(), r.zero_tensors.end(), a->bind.tensor) != r.zero_tensors.end())
        c.fail(zp, "names tensor " + std::to_string(a->bind.tensor) + " twice");
      r.zero_before_launch.push_back(name);
      r.zero_tensors.push_back(a->bind.tensor);
    });
  if (v.contains("assume"))
    c.each(v.at("assume"), p + ".assume", [&](const json& as, const std::string& ap) {
      Assume a{c.expr(c.need(as, "expr", ap), ap + ".expr"), c.integer(as, "multiple_of", ap, 1)};
      if (a.multiple_of <= 0) c.fail(ap, "multiple_of must be positive");
      r.assumes.push_back(std::move(a));
    });
  if (v.contains("range") && v.at("range").is_object()) {
    const json& rg = v.at("range");
    r.range_exact = rg.value("exact", false) || !rg.contains("dims");
    if (rg.contains("dims"))
      c.each(rg.at("dims"), p + ".range.dims", [&](const json& dim, const std::string& dp) {
        DimRange d;
        d.min = c.integer(dim, "min", dp, 1);
        d.max = c.integer(dim, "max", dp, INT64_MAX);
        d.multiple_of = std::max<int64_t>(1, c.integer(dim, "multiple_of", dp, 1));
        r.dims.push_back(d);
      });
    if (rg.contains("verified_shapes") && rg.at("verified_shapes").is_array())
      for (const auto& s : rg.at("verified_shapes")) r.verified_shapes.push_back(s.get<std::vector<int64_t>>());
  }
  r.candidate_id = c.integer(v, "candidate_id", p, -1);
  r.basis = c.str(v, "basis", p, false);
  r.value_ms = c.number(v, "value_ms", p, 0);
  if (v.contains("confirmed") && v.at("confirmed").is_object()) {
    const json& conf = v.at("confirmed");
    if (conf.contains("median_ms") && conf.at("median_ms").is_number())
      r.confirmed_median_ms = conf.at("median_ms").get<double>();
    if (conf.contains("flush_bytes")) {
      const auto& fb = conf.at("flush_bytes");
      if (!fb.is_number_integer() || fb.get<int64_t>() <= 0) c.fail(p + ".confirmed.flush_bytes", "expected a positive integer");
      r.confirmed_flush_bytes = fb.get<int64_t>();
    }
    if (conf.contains("sm_clock_mhz")) {
      const auto& mhz = conf.at("sm_clock_mhz");
      if (!mhz.is_number() || !(mhz.get<double>() > 0)) c.fail(p + ".confirmed.sm_clock_mhz", "expected a positive number");
      r.confirmed_sm_clock_mhz = mhz.get<double>();
    }
    if (conf.contains("power_limited")) {
      const auto& pl = conf.at("power_limited");
      if (!pl.is_boolean()) c.fail(p + ".confirmed.power_limited", "expected true or false");
      r.confirmed_power_limited = pl.get<bool>();
    }
  }
  r.device = c.str(v, "device", p, false);
  r.driver = c.str(v, "driver", p, false);
  r.verify = c.str(v, "verify", p, false);
  if (v.contains("config")) r.config = v.at("config");
  return r;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

std::string KernelSpec::label() const { return op + " " + shape_str(shape) + " " + dtype; }

const TargetSpec* Manifest::target(const std::string& name) const {
  for (const auto& t : targets)
    if (t.name == name) return &t;
  return nullptr;
}

Manifest Manifest::parse(const std::string& text, const std::string& what) {
  Ctx c{what};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // The position only: the content is not quoted (a link could name any file).
    throw Error(KILN_E_FORMAT, what + ": not JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  } catch (const json::exception&) {  // 1e400: out of range
    throw Error(KILN_E_FORMAT, what + ": not JSON (a number out of range)");
  }
  if (!j.is_object()) c.fail("$", "expected an object");
  Manifest m;
  m.format = j.contains("format") && j["format"].is_string() ? j["format"].get<std::string>() : "";
  if (m.format != kPackageFormat) {
    // Quoted only when it looks like a format name (no control characters, short).
    const bool name = m.format.size() <= 40 && std::all_of(m.format.begin(), m.format.end(), [](char ch) {
                        return (unsigned char)ch >= 0x20 && ch != 0x7f;
                      });
    if (!name) m.format = "(not a format name)";
    throw Error(KILN_E_FORMAT, what + ": format is \"" + (m.format.empty() ? "(none)" : m.format) +
                                   "\", this runtime reads \"" + kPackageFormat +
                                   "\": re-package with a kiln that writes " + kPackageFormat);
  }
  if (j.contains("toolchain")) m.toolchain = j["toolchain"];
  c.each(c.need(j, "targets", "$"), "targets", [&](const json& t, const std::string& p) {
    TargetSpec s;
    s.name = c.str(t, "name", p);
    s.arch = c.str(t, "arch", p);
    s.backend = c.str(t, "backend", p, false);
    s.vendor = c.str(t, "vendor", p, false);
    s.target_id = c.str(t, "target_id", p, false);
    s.warp_size = static_cast<int>(c.integer(t, "warp_size", p, 0));
    s.compute_units = static_cast<int>(c.integer(t, "compute_units", p, 0));
    s.max_shared_per_block = c.integer(t, "max_shared_per_block", p, 0);
    if (t.contains("measured_on")) s.measured_on = t["measured_on"];
    if (s.backend.empty()) s.backend = s.arch.rfind("sm_", 0) == 0 ? "cuda" : "hip";
    m.targets.push_back(std::move(s));
  });
  c.each(c.need(j, "kernels", "$"), "kernels", [&](const json& k, const std::string& p) {
    KernelSpec s;
    s.op = c.str(k, "operator", p);
    s.dtype = c.str(k, "dtype", p);
    s.job_key = c.str(k, "job_key", p, false);
    if (k.contains("params") && !k.at("params").is_null()) {
      if (!k.at("params").is_object()) c.fail(p + ".params", "expected an object");
      s.params = k.at("params");
    }
    const json& shape = c.need(k, "shape", p);
    if (!shape.is_array()) c.fail(p + ".shape", "expected an array of integers");
    for (const auto& d : shape) {
      if (!d.is_number_integer()) c.fail(p + ".shape", "expected an array of integers");
      if (d.is_number_unsigned() ? d.get<uint64_t>() > uint64_t(INT64_MAX) : d.get<int64_t>() < 0)
        c.fail(p + ".shape", "dimension " + d.dump() + " is negative or does not fit int64");
      s.shape.push_back(d.get<int64_t>());
    }
    c.each(c.need(k, "tensors", p), p + ".tensors", [&](const json& t, const std::string& tp) {
      TensorSpec ts;
      ts.name = c.str(t, "name", tp, false);
      ts.role = c.str(t, "role", tp);
      ts.dtype = c.str(t, "dtype", tp);
      c.each(c.need(t, "shape", tp), tp + ".shape",
             [&](const json& d, const std::string& dp) { ts.shape.push_back(c.expr(d, dp)); });
      s.tensors.push_back(std::move(ts));
    });
    c.each(c.need(k, "variants", p), p + ".variants", [&](const json& v, const std::string& vp) {
      Variant var = parse_variant(c, v, vp);
      if (!m.target(var.target)) c.fail(vp, "target \"" + var.target + "\" is not in targets[]");
      for (const auto& a : var.args) {
        if ((a.bind.kind == Bind::Tensor && (a.bind.tensor < 0 || a.bind.tensor >= int(s.tensors.size()))) ||
            (a.bind.kind == Bind::Tma && (a.bind.tma.tensor < 0 || a.bind.tma.tensor >= int(s.tensors.size()))))
          c.fail(vp, "argument " + a.name + " binds a tensor index out of range");
      }
      s.variants.push_back(std::move(var));
    });
    m.kernels.push_back(std::move(s));
  });
  return m;
}

}  // namespace kiln::rt
