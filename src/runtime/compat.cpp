#include "compat.h"

#include <cctype>

#include "error.h"
#include "dtype.h"

namespace kiln::rt {

namespace {

bool is_cuda_arch(const std::string& a) { return a.rfind("sm_", 0) == 0; }

// Per-lane VGPR budget (VGPRs + AGPRs): 512 on CDNA2/3 (unified file), else 256.
int amd_max_vgprs(const std::string& gfx) {
  return (gfx == "gfx90a" || gfx == "gfx940" || gfx == "gfx941" || gfx == "gfx942" || gfx == "gfx950") ? 512 : 256;
}
int64_t amd_default_lds(const std::string& gfx) { return gfx == "gfx950" ? 163840 : 65536; }
int amd_default_wave(const std::string& gfx) { return gfx.rfind("gfx1", 0) == 0 && gfx.size() >= 7 ? 32 : 64; }

void parse_sm(const std::string& arch, int& major, int& minor) {
  // "sm_90", "sm_90a", "sm_100a", "90"
  std::string digits;
  for (char c : arch)
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  int n = digits.empty() ? 0 : std::stoi(digits);
  major = n / 10;
  minor = n % 10;
}
int64_t cuda_default_shared(int major, int minor) {
  int cc = major * 10 + minor;
  if (cc == 90 || cc == 100 || cc == 103) return 232448;
  if (cc == 80 || cc == 87) return 166912;
  if (cc == 86 || cc == 89 || cc == 120) return 101376;
  return 49152;
}

std::string base_arch(const std::string& a) {
  if (is_cuda_arch(a)) return a.back() == 'a' || a.back() == 'f' ? a.substr(0, a.size() - 1) : a;
  return TargetId::parse(a).processor;
}

}  // namespace

std::string TargetLimits::arch() const {
  return backend == "cuda" ? "sm_" + std::to_string(cc_major * 10 + cc_minor) : amd.processor;
}

TargetLimits limits_from_device(const DeviceProps& d) {
  return TargetLimits{.backend = d.backend,
                      .label = d.target_id + " (" + d.name + ")",
                      .amd = d.backend == "hip" ? TargetId::parse(d.target_id) : TargetId{},
                      .cc_major = d.cc_major,
                      .cc_minor = d.cc_minor,
                      .warp_size = d.warp_size,
                      .compute_units = d.compute_units,
                      .max_shared_per_block = d.max_shared_per_block,
                      .max_regs_per_block = d.max_regs_per_block};
}

TargetLimits limits_from_id(const std::string& id) {
  TargetLimits l;
  if (is_cuda_arch(id)) {
    l.backend = "cuda";
    parse_sm(id, l.cc_major, l.cc_minor);
    l.warp_size = 32;
    l.max_shared_per_block = cuda_default_shared(l.cc_major, l.cc_minor);
    l.max_regs_per_block = 65536;
    l.label = id;
    return l;
  }
  l.backend = "hip";
  l.amd = TargetId::parse(id);
  if (l.amd.processor.rfind("gfx", 0) != 0)
    throw Error(KILN_E_USAGE, "target '" + id + "' is neither a gfx target id nor sm_XX nor a target name in the manifest");
  l.warp_size = amd_default_wave(l.amd.processor);
  l.max_shared_per_block = amd_default_lds(l.amd.processor);
  l.label = l.amd.str();
  return l;
}

TargetLimits limits_from_target(const TargetSpec& t) {
  TargetLimits l = limits_from_id(!t.target_id.empty() ? t.target_id : t.arch);
  if (t.warp_size) l.warp_size = t.warp_size;
  if (t.compute_units) l.compute_units = t.compute_units;
  if (t.max_shared_per_block) l.max_shared_per_block = t.max_shared_per_block;
  l.label = t.name + " (" + (t.target_id.empty() ? t.arch : t.target_id) + ")";
  return l;
}

bool same_arch(const TargetSpec& t, const TargetLimits& l) {
  if ((t.backend == "cuda") != (l.backend == "cuda")) return false;
  if (l.backend == "cuda") {
    int ma, mi;
    parse_sm(t.arch, ma, mi);
    return ma == l.cc_major && mi == l.cc_minor;
  }
  return base_arch(t.arch) == l.amd.processor;
}

std::vector<std::string> check_static(const Variant& v, const TargetSpec& t, const CodeObject& co,
                                      const std::string& file) {
  std::vector<std::string> out;
  std::string tname = t.name + " (" + t.arch + ")";
  if (co.kind == CodeObject::Cuda) {
    if (t.backend != "cuda") {
      out.push_back(file + ": a cubin (" + co.sm_name() + ") labelled for " + tname);
      return out;
    }
    int ma, mi;
    parse_sm(t.arch, ma, mi);
    if (co.sm != ma * 10 + mi)
      out.push_back(file + ": wrong architecture: code object is " + co.sm_name() + ", the manifest labels it for " + tname);
  } else {
    if (t.backend == "cuda") {
      out.push_back(file + ": an AMD code object (" + co.gfx + ") labelled for " + tname);
      return out;
    }
    std::string want = base_arch(t.arch);
    if (co.gfx != want) {
      out.push_back(file + ": wrong architecture: code object is " + co.gfx + " (" + co.target_id +
                    "), the manifest labels it for " + tname);
      return out;
    }
    if (!co.note_target.empty() && TargetId::parse(co.note_target).processor != co.gfx)
      out.push_back(file + ": metadata note says " + co.note_target + " but the ELF header says " + co.gfx);
    if (!t.target_id.empty()) {
      std::string why = amd_mismatch(TargetId::parse(co.target_id), TargetId::parse(t.target_id));
      if (!why.empty()) out.push_back(file + ": " + why + " (manifest target " + t.name + ")");
    }
    if (v.code_object_version && co.code_object_version != v.code_object_version)
      out.push_back(file + ": code object version " + std::to_string(co.code_object_version) +
                    ", the manifest says " + std::to_string(v.code_object_version));
    const AmdKernelMeta* k = co.find(v.kernel_name);
    if (!k && co.metadata_unread) return out;
    if (!k) {
      std::string names;
      for (const auto& m : co.kernels) names += (names.empty() ? "" : ", ") + m.name;
      out.push_back(file + ": no kernel " + v.kernel_name + " in the code object (it has: " + names + ")");
      return out;
    }
    // the manifest's argument list against the kernel's own (count and sizes)
    if (!k->args.empty() || k->kernarg_segment_size == 0) {
      // a TMA descriptor's size in the code object is the backend's business: not compared
      auto type_bytes = [](const std::string& ty) -> int64_t {
        const int n = ty == "nvTmaDesc" ? 0 : arg_size(ty);
        return n > 0 ? n : -1;
      };
      if (k->args.size() != v.args.size()) {
        out.push_back(file + ": the manifest lists " + std::to_string(v.args.size()) + " arguments for " +
                      v.kernel_name + ", its code object takes " + std::to_string(k->args.size()));
      } else {
        for (size_t i = 0; i < v.args.size(); ++i) {
          int64_t want = type_bytes(v.args[i].type);
          // i1 is passed widened by some compilers: only a larger-than-stated size is an error
          if (want > 0 && k->args[i].size != want && !(v.args[i].type == "i1" && k->args[i].size <= 4)) {
            out.push_back(file + ": argument " + std::to_string(i) + " (" + v.args[i].name + ") is " + v.args[i].type +
                          " in the manifest, " + std::to_string(k->args[i].size) + " bytes in the code object");
            break;
          }
        }
      }
    }
    int ws = v.warp_size ? v.warp_size : t.warp_size;
    if (ws && k->wavefront_size && k->wavefront_size != ws)
      out.push_back(file + ": kernel " + v.kernel_name + " is wave" + std::to_string(k->wavefront_size) +
                    ", the manifest says warp_size " + std::to_string(ws));
  }
  std::string why = check_against(v, co, limits_from_target(t), file);
  if (!why.empty()) out.push_back(why);
  return out;
}

std::string check_against(const Variant& v, const CodeObject& co, const TargetLimits& l, const std::string& file) {
  int64_t threads = v.block[0] * v.block[1] * v.block[2];
  if (co.kind == CodeObject::Cuda) {
    if (l.backend != "cuda") return file + ": a cubin (" + co.sm_name() + ") cannot run on " + l.label;
    int cma = co.sm / 10, cmi = co.sm % 10;
    bool ok = co.sm_arch_specific ? (l.cc_major == cma && l.cc_minor == cmi)
                                  : (l.cc_major == cma && l.cc_minor >= cmi);
    if (!ok)
      return file + ": code object is " + co.sm_name() + ", device is sm_" +
             std::to_string(l.cc_major * 10 + l.cc_minor) + " " + l.label +
             (co.sm_arch_specific ? " (an sm_XXa object runs only on exactly that compute capability)"
                                  : " (SASS runs only within its major version, on an equal or newer minor)");
    if (l.max_shared_per_block && v.shared_bytes > l.max_shared_per_block)
      return file + ": kernel " + v.kernel_name + " needs " + std::to_string(v.shared_bytes) +
             " bytes of shared memory, " + l.label + " allows " + std::to_string(l.max_shared_per_block) + " per block";
    if (v.registers > 255)
      return file + ": kernel " + v.kernel_name + " uses " + std::to_string(v.registers) + " registers per thread (max 255)";
    if (l.max_regs_per_block && v.registers * threads > l.max_regs_per_block)
      return file + ": kernel " + v.kernel_name + " needs " + std::to_string(v.registers * threads) +
             " registers per block, " + l.label + " has " + std::to_string(l.max_regs_per_block);
  } else {
    if (l.backend != "hip") return file + ": an AMD code object (" + co.target_id + ") cannot run on " + l.label;
    std::string why = amd_mismatch(TargetId::parse(co.target_id), l.amd);
    if (!why.empty()) return file + ": " + why;
    const AmdKernelMeta* k = co.find(v.kernel_name);
    if (!k && co.metadata_unread) return {};
    if (!k) return file + ": no kernel " + v.kernel_name + " in the code object";
    if (l.warp_size && k->wavefront_size && k->wavefront_size != l.warp_size)
      return file + ": kernel " + v.kernel_name + " is wave" + std::to_string(k->wavefront_size) + ", " + l.label +
             " runs wave" + std::to_string(l.warp_size);
    int64_t lds = k->group_segment_fixed_size + v.shared_bytes;
    // Triton's AMD objects state their LDS statically; shared_bytes is then the same figure
    if (k->group_segment_fixed_size && v.shared_bytes == k->group_segment_fixed_size) lds = k->group_segment_fixed_size;
    if (l.max_shared_per_block && lds > l.max_shared_per_block)
      return file + ": kernel " + v.kernel_name + " needs " + std::to_string(lds) + " bytes of LDS, " + l.label +
             " has " + std::to_string(l.max_shared_per_block);
    int vmax = amd_max_vgprs(co.gfx);
    if (k->vgpr_count + k->agpr_count > vmax)
      return file + ": kernel " + v.kernel_name + " uses " + std::to_string(k->vgpr_count + k->agpr_count) +
             " VGPRs+AGPRs, " + co.gfx + " has " + std::to_string(vmax);
    if (k->max_flat_workgroup_size && threads > k->max_flat_workgroup_size)
      return file + ": kernel " + v.kernel_name + " launches " + std::to_string(threads) +
             " threads per block, its code object allows " + std::to_string(k->max_flat_workgroup_size);
  }
  // a persistent grid sized to the CU/SM count of the tuning device
  if (l.compute_units && v.config.is_object()) {
    for (const char* key : {"NUM_SMS", "num_sms", "NUM_CUS", "num_cus"}) {
      if (v.config.contains(key) && v.config[key].is_number_integer() &&
          v.config[key].get<int64_t>() != l.compute_units)
        return file + ": kernel " + v.kernel_name + " was built for " + std::to_string(v.config[key].get<int64_t>()) +
               " CUs/SMs (config " + key + "), " + l.label + " has " + std::to_string(l.compute_units);
    }
  }
  return {};
}

}  // namespace kiln::rt
