#include "code_object.h"

#ifndef KILNRT_NO_MSGPACK
#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>
#endif

#include <cstring>

#include "error.h"

namespace kiln::rt {

namespace {

constexpr uint16_t EM_AMDGPU = 224;
constexpr uint16_t EM_CUDA = 190;
constexpr uint32_t NT_AMDGPU_METADATA = 32;

template <class T>
T rd(std::string_view b, uint64_t off, const std::string& what) {
  if (off + sizeof(T) > b.size() || off + sizeof(T) < off)
    throw Error(KILN_E_FORMAT, what + ": ELF truncated (read at offset " + std::to_string(off) +
                                   " past " + std::to_string(b.size()) + " bytes)");
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

#ifndef KILNRT_NO_MSGPACK
std::string str_of(const msgpack::object& o) {
  if (o.type == msgpack::type::STR) return std::string(o.via.str.ptr, o.via.str.size);
  return {};
}

int64_t int_of(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return static_cast<int64_t>(o.via.u64);
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  return 0;
}

const msgpack::object* get(const msgpack::object& map, std::string_view key) {
  if (map.type != msgpack::type::MAP) return nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR &&
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
      return &kv.val;
  }
  return nullptr;
}

void read_amd_metadata(std::string_view desc, CodeObject& co, const std::string& what) {
  msgpack::object_handle oh;
  try {
    // Every element takes at least one byte, so no array, map, string or
    // binary of a well-formed note is longer than the note. msgpack-c
    // reserves a container's declared size before reading it: without these
    // bounds a note of a few bytes could ask for 256 GiB (fuzz_rt_code_object).
    const size_t n = desc.size();
    const msgpack::unpack_limit limit(/*array=*/n, /*map=*/n, /*str=*/n, /*bin=*/n, /*ext=*/n, /*depth=*/32);
    oh = msgpack::unpack(desc.data(), desc.size(), nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    throw Error(KILN_E_FORMAT, what + ": AMDGPU metadata note is not MessagePack: " + e.what());
  }
  const msgpack::object& root = oh.get();
  if (root.type != msgpack::type::MAP)
    throw Error(KILN_E_FORMAT, what + ": AMDGPU metadata note is not a map");
  if (auto* t = get(root, "amdhsa.target")) co.note_target = str_of(*t);
  if (auto* v = get(root, "amdhsa.version"); v && v->type == msgpack::type::ARRAY && v->via.array.size >= 2) {
    int64_t major = int_of(v->via.array.ptr[0]), minor = int_of(v->via.array.ptr[1]);
    // amdhsa.version [1, N] is code object version N + 3 (1.0 v3, 1.1 v4, 1.2 v5, 1.3 v6)
    if (major == 1) co.code_object_version = static_cast<int>(minor + 3);
  }
  if (auto* ks = get(root, "amdhsa.kernels"); ks && ks->type == msgpack::type::ARRAY) {
    for (uint32_t i = 0; i < ks->via.array.size; ++i) {
      const auto& k = ks->via.array.ptr[i];
      AmdKernelMeta m;
      auto f = [&](const char* key) -> int64_t {
        auto* o = get(k, key);
        return o ? int_of(*o) : 0;
      };
      if (auto* n = get(k, ".name")) m.name = str_of(*n);
      m.kernarg_segment_size = f(".kernarg_segment_size");
      m.group_segment_fixed_size = f(".group_segment_fixed_size");
      m.private_segment_fixed_size = f(".private_segment_fixed_size");
      m.sgpr_count = f(".sgpr_count");
      m.vgpr_count = f(".vgpr_count");
      m.agpr_count = f(".agpr_count");
      m.sgpr_spill_count = f(".sgpr_spill_count");
      m.vgpr_spill_count = f(".vgpr_spill_count");
      m.wavefront_size = f(".wavefront_size");
      m.max_flat_workgroup_size = f(".max_flat_workgroup_size");
      if (auto* as = get(k, ".args"); as && as->type == msgpack::type::ARRAY) {
        for (uint32_t a = 0; a < as->via.array.size; ++a) {
          const auto& ao = as->via.array.ptr[a];
          AmdKernelMeta::Arg arg;
          if (auto* o = get(ao, ".offset")) arg.offset = int_of(*o);
          if (auto* o = get(ao, ".size")) arg.size = int_of(*o);
          if (auto* o = get(ao, ".value_kind")) arg.value_kind = str_of(*o);
          if (arg.value_kind.rfind("hidden_", 0) == 0) continue;  // the runtime supplies these
          m.args.push_back(std::move(arg));
        }
      }
      co.kernels.push_back(std::move(m));
    }
  }
}

#else
void read_amd_metadata(std::string_view, CodeObject& co, const std::string&) {
  co.metadata_unread = true;  // built without msgpack-c: only the ELF header is read
}
#endif

std::string feature(uint32_t v, uint32_t any, uint32_t off, uint32_t on) {
  if (v == on) return "+";
  if (v == off) return "-";
  if (v == any) return "";
  return "unsupported";
}

}  // namespace

std::string gfx_name(unsigned mach) {
  // EF_AMDGPU_MACH_AMDGCN_* (LLVM include/llvm/BinaryFormat/ELF.h)
  switch (mach) {
    case 0x02c: return "gfx900";
    case 0x02f: return "gfx906";
    case 0x030: return "gfx908";
    case 0x031: return "gfx909";
    case 0x032: return "gfx90c";
    case 0x033: return "gfx1010";
    case 0x036: return "gfx1030";
    case 0x03f: return "gfx90a";
    case 0x040: return "gfx940";
    case 0x041: return "gfx1100";
    case 0x044: return "gfx1101";
    case 0x045: return "gfx1102";
    case 0x048: return "gfx1200";
    case 0x04b: return "gfx941";
    case 0x04c: return "gfx942";
    case 0x04e: return "gfx1201";
    case 0x04f: return "gfx950";
    default: return "";
  }
}

std::string CodeObject::sm_name() const {
  return "sm_" + std::to_string(sm) + (sm_arch_specific ? "a" : "");
}

const AmdKernelMeta* CodeObject::find(std::string_view name) const {
  for (const auto& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::string CodeObject::summary() const {
  if (kind == Cuda) return "cubin " + sm_name();
  return "hsaco " + target_id + " (code object v" + std::to_string(code_object_version) + ", " +
         std::to_string(kernels.size()) + " kernel" + (kernels.size() == 1 ? "" : "s") + ")";
}

CodeObject parse_code_object(std::string_view b, const std::string& what) {
  if (b.size() < 64 || b.compare(0, 4, "\x7f" "ELF") != 0)
    throw Error(KILN_E_FORMAT, what + ": not an ELF code object" +
                                   (is_offload_bundle(b) ? " (it is a clang offload bundle)" : ""));
  if (b[4] != 2 || b[5] != 1)
    throw Error(KILN_E_FORMAT, what + ": not a 64-bit little-endian ELF");
  CodeObject co;
  uint16_t machine = rd<uint16_t>(b, 18, what);
  uint32_t flags = rd<uint32_t>(b, 48, what);
  unsigned abi = static_cast<unsigned char>(b[8]);
  if (machine == EM_CUDA) {
    co.kind = CodeObject::Cuda;
    // ELFABIVERSION_CUDA_V1 (7): SM in bits 0-7, EF_CUDA_ACCELERATORS 0x800.
    // V2 (8, CUDA 12.8+ Blackwell-era cubins): SM in bits 8-15, accelerators 0x8.
    if (abi >= 8) {
      co.sm = (flags >> 8) & 0xff;
      co.sm_arch_specific = flags & 0x8;
    } else {
      co.sm = flags & 0xff;
      co.sm_arch_specific = flags & 0x800;
    }
    if (co.sm == 0) throw Error(KILN_E_FORMAT, what + ": cubin e_flags state no sm version");
    uint64_t shoff = rd<uint64_t>(b, 40, what);
    uint16_t shentsize = rd<uint16_t>(b, 58, what), shnum = rd<uint16_t>(b, 60, what);
    if (shoff + uint64_t(shentsize) * shnum > b.size())
      throw Error(KILN_E_FORMAT, what + ": ELF truncated (section headers past the end)");
    return co;
  }
  if (machine != EM_AMDGPU)
    throw Error(KILN_E_FORMAT, what + ": ELF e_machine " + std::to_string(machine) +
                                   " is neither AMDGPU (224) nor CUDA (190)");
  co.kind = CodeObject::Amd;
  co.gfx = gfx_name(flags & 0xff);
  if (co.gfx.empty())
    throw Error(KILN_E_FORMAT, what + ": unknown AMDGPU machine 0x" +
                                   [&] { char s[8]; snprintf(s, sizeof s, "%03x", flags & 0xff); return std::string(s); }());
  // EF_AMDGPU_FEATURE_XNACK_V4 0x300 / SRAMECC_V4 0xc00: unsupported 0, any 1, off 2, on 3
  co.xnack = feature(flags & 0x300, 0x100, 0x200, 0x300);
  co.sramecc = feature(flags & 0xc00, 0x400, 0x800, 0xc00);
  co.target_id = "amdgcn-amd-amdhsa--" + co.gfx;
  if (co.sramecc == "+" || co.sramecc == "-") co.target_id += ":sramecc" + co.sramecc;
  if (co.xnack == "+" || co.xnack == "-") co.target_id += ":xnack" + co.xnack;
  // the metadata note: section headers first, program headers as a fallback
  uint64_t shoff = rd<uint64_t>(b, 40, what);
  uint16_t shentsize = rd<uint16_t>(b, 58, what), shnum = rd<uint16_t>(b, 60, what);
  if (shoff + uint64_t(shentsize) * shnum > b.size())
    throw Error(KILN_E_FORMAT, what + ": ELF truncated (section headers past the end)");
  bool found = false;
  auto scan_notes = [&](uint64_t off, uint64_t size) {
    if (off + size > b.size()) throw Error(KILN_E_FORMAT, what + ": note past the end of the file");
    uint64_t p = off, end = off + size;
    while (p + 12 <= end) {
      uint32_t namesz = rd<uint32_t>(b, p, what), descsz = rd<uint32_t>(b, p + 4, what),
               type = rd<uint32_t>(b, p + 8, what);
      uint64_t name_off = p + 12, desc_off = name_off + ((namesz + 3ull) & ~3ull);
      uint64_t next = desc_off + ((descsz + 3ull) & ~3ull);
      if (desc_off + descsz > end) throw Error(KILN_E_FORMAT, what + ": malformed ELF note");
      std::string_view name = b.substr(name_off, namesz);
      if (type == NT_AMDGPU_METADATA && name.substr(0, 6) == "AMDGPU") {
        read_amd_metadata(b.substr(desc_off, descsz), co, what);
        found = true;
        return;
      }
      p = next;
    }
  };
  for (uint16_t i = 0; i < shnum && !found; ++i) {
    uint64_t sh = shoff + uint64_t(i) * shentsize;
    if (rd<uint32_t>(b, sh + 4, what) == 7 /* SHT_NOTE */)
      scan_notes(rd<uint64_t>(b, sh + 24, what), rd<uint64_t>(b, sh + 32, what));
  }
  if (!found) {
    uint64_t phoff = rd<uint64_t>(b, 32, what);
    uint16_t phentsize = rd<uint16_t>(b, 54, what), phnum = rd<uint16_t>(b, 56, what);
    for (uint16_t i = 0; i < phnum && !found; ++i) {
      uint64_t ph = phoff + uint64_t(i) * phentsize;
      if (rd<uint32_t>(b, ph, what) == 4 /* PT_NOTE */)
        scan_notes(rd<uint64_t>(b, ph + 8, what), rd<uint64_t>(b, ph + 32, what));
    }
  }
  if (!found) throw Error(KILN_E_FORMAT, what + ": no NT_AMDGPU_METADATA note (code object v2/v3?)");
  if (co.code_object_version == 0) co.code_object_version = static_cast<int>(abi) + 2;
  return co;
}

static constexpr std::string_view kBundleMagic = "__CLANG_OFFLOAD_BUNDLE__";

bool is_offload_bundle(std::string_view b) { return b.substr(0, kBundleMagic.size()) == kBundleMagic; }

std::vector<BundleEntry> read_offload_bundle(std::string_view b, const std::string& what) {
  if (!is_offload_bundle(b))
    throw Error(KILN_E_FORMAT, what + ": not a clang offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic" +
                                   (b.substr(0, 4) == "CCOB" ? "; compressed bundles are not supported)" : ")"));
  // magic, u64 count, then per entry: u64 offset, u64 size, u64 id length, id
  uint64_t p = kBundleMagic.size();
  uint64_t n = rd<uint64_t>(b, p, what);
  p += 8;
  if (n > 4096) throw Error(KILN_E_FORMAT, what + ": implausible bundle entry count " + std::to_string(n));
  std::vector<BundleEntry> out;
  for (uint64_t i = 0; i < n; ++i) {
    BundleEntry e;
    e.offset = rd<uint64_t>(b, p, what);
    e.size = rd<uint64_t>(b, p + 8, what);
    uint64_t len = rd<uint64_t>(b, p + 16, what);
    p += 24;
    if (p + len > b.size()) throw Error(KILN_E_FORMAT, what + ": bundle entry id past the end");
    e.id = std::string(b.substr(p, len));
    p += len;
    if (e.offset + e.size > b.size() || e.offset + e.size < e.offset)
      throw Error(KILN_E_FORMAT, what + ": bundle entry " + e.id + " lies past the end (truncated?)");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln::rt
