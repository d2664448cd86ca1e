#include "package/code_object.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>

namespace kiln {

namespace {

template <typename T>
bool read_at(std::string_view b, size_t off, T& out) {
  // Never `off + sizeof(T)`: a file's offset near 2^64 wraps it past the check
  // (a read before the buffer; found by fuzz_pkg_code_object).
  if (off > b.size() || sizeof(T) > b.size() - off) return false;
  std::memcpy(&out, b.data() + off, sizeof(T));
  return true;
}

// EF_AMDGPU_MACH values (LLVM's ELF.h) for the targets Kiln knows.
std::string gfx_from_flags(uint32_t flags) {
  static const std::map<uint32_t, std::string> mach = {
      {0x2c, "gfx906"}, {0x30, "gfx908"}, {0x36, "gfx1030"}, {0x3f, "gfx90a"},
      {0x41, "gfx1100"}, {0x42, "gfx1101"}, {0x43, "gfx1102"}, {0x4c, "gfx942"},
      {0x4f, "gfx950"}, {0x4e, "gfx1201"}, {0x4d, "gfx1200"}};
  auto it = mach.find(flags & 0xff);
  return it == mach.end() ? "" : it->second;
}

}  // namespace

std::string CodeObjectInfo::summary() const {
  if (!is_elf) return "not an ELF file";
  std::string s = "ELF " + machine;
  if (!flags_gfx.empty()) s += " " + flags_gfx;
  if (!sm.empty()) s += " " + sm;
  if (!note_target.empty()) s += ", note " + note_target;
  return s;
}

CodeObjectInfo inspect_code_object(std::string_view b) {
  CodeObjectInfo info;
  if (b.size() < 64 || b.substr(0, 4) != "\x7f" "ELF" || b[4] != 2 /* 64-bit */) return info;
  info.is_elf = true;
  uint16_t machine = 0, shentsize = 0, shnum = 0;
  uint32_t flags = 0;
  uint64_t shoff = 0;
  read_at(b, 18, machine);
  read_at(b, 48, flags);
  read_at(b, 40, shoff);
  read_at(b, 58, shentsize);
  read_at(b, 60, shnum);
  info.e_machine = machine;
  if (machine == 224) {
    info.machine = "AMDGPU";
    info.flags_gfx = gfx_from_flags(flags);
  } else if (machine == 190) {
    info.machine = "CUDA";
    // Newer cubins (EI_ABIVERSION 8) put the SM in bits 8-15 of e_flags and
    // mark arch-specific code (sm_90a) with 0x8; older ones (7) use the low
    // byte and 0x800 (EF_CUDA_ACCELERATORS).
    const unsigned abi = static_cast<unsigned char>(b[8]);
    uint32_t sm = (flags >> 8) & 0xff;
    if (abi < 8 || sm < 30) sm = flags & 0xff;
    const bool arch_specific = abi >= 8 ? (flags & 0x8) != 0 : (flags & 0x800) != 0;
    info.sm = "sm_" + std::to_string(sm) + (arch_specific ? "a" : "");
  } else {
    info.machine = "other";
  }
  // Walk SHT_NOTE sections for the AMDGPU metadata note (type 32, name "AMDGPU"):
  // its descriptor is MessagePack holding amdhsa.target as a plain string.
  for (uint16_t i = 0; i < shnum && shentsize >= 64; ++i) {
    if (shoff > b.size()) break;
    const size_t sh = shoff + size_t(i) * shentsize;  // < 2^17 past the file: no wrap
    uint32_t type = 0;
    uint64_t off = 0, size = 0;
    if (!read_at(b, sh + 4, type) || !read_at(b, sh + 24, off) || !read_at(b, sh + 32, size)) break;
    if (type != 7 /* SHT_NOTE */ || off > b.size() || size > b.size() - off) continue;
    size_t p = off;
    while (p + 12 <= off + size) {
      uint32_t namesz = 0, descsz = 0, ntype = 0;
      read_at(b, p, namesz);
      read_at(b, p + 4, descsz);
      read_at(b, p + 8, ntype);
      const size_t name_off = p + 12, desc_off = name_off + ((namesz + 3) & ~3u);
      if (desc_off + descsz > b.size()) break;
      const std::string_view name = b.substr(name_off, namesz ? namesz - 1 : 0);
      if (ntype == 32 && name == "AMDGPU") {
        const std::string_view desc = b.substr(desc_off, descsz);
        const size_t at = desc.find("amdgcn-amd-amdhsa--");
        if (at != std::string_view::npos) {
          size_t end = at;
          while (end < desc.size() && (std::isalnum(static_cast<unsigned char>(desc[end])) ||
                                       desc[end] == '-' || desc[end] == '_' || desc[end] == ':' ||
                                       desc[end] == '+'))
            ++end;
          info.note_target = std::string(desc.substr(at, end - at));
        }
      }
      p = desc_off + ((descsz + 3) & ~3u);
    }
  }
  return info;
}

}  // namespace kiln
