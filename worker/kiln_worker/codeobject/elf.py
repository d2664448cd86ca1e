"""Minimal ELF64 reader for GPU code objects (AMD .hsaco and NVIDIA .cubin).

Only what the resource report needs: the header, section headers and names, the
symbol table and notes. Pure Python, no dependencies. Both code-object kinds are
little-endian ELF64; big-endian and ELF32 are read too for robustness.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

EM_AMDGPU = 224
EM_CUDA = 190
SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
PT_NOTE = 4
NT_AMDGPU_METADATA = 32
ELFOSABI_AMDGPU_HSA = 64

# e_flags & EF_AMDGPU_MACH (0xff): the gfx processor (LLVM's ELF.h).
AMDGPU_MACH = {
    0x20: "gfx600", 0x21: "gfx601", 0x22: "gfx700", 0x23: "gfx701", 0x24: "gfx702",
    0x25: "gfx703", 0x26: "gfx704", 0x28: "gfx801", 0x29: "gfx802", 0x2a: "gfx803",
    0x2b: "gfx810", 0x2c: "gfx900", 0x2d: "gfx902", 0x2e: "gfx904", 0x2f: "gfx906",
    0x30: "gfx908", 0x31: "gfx909", 0x32: "gfx90c", 0x33: "gfx1010", 0x34: "gfx1011",
    0x35: "gfx1012", 0x36: "gfx1030", 0x37: "gfx1031", 0x38: "gfx1032", 0x39: "gfx1033",
    0x3a: "gfx602", 0x3b: "gfx705", 0x3c: "gfx805", 0x3d: "gfx1035", 0x3e: "gfx1034",
    0x3f: "gfx90a", 0x40: "gfx940", 0x41: "gfx1100", 0x42: "gfx1013", 0x43: "gfx1150",
    0x44: "gfx1103", 0x45: "gfx1036", 0x46: "gfx1101", 0x47: "gfx1102", 0x48: "gfx1200",
    0x4a: "gfx1151", 0x4b: "gfx941", 0x4c: "gfx942", 0x4e: "gfx1201", 0x4f: "gfx950",
    0x51: "gfx9-generic", 0x52: "gfx10-1-generic", 0x53: "gfx10-3-generic",
    0x54: "gfx11-generic", 0x55: "gfx1152", 0x58: "gfx1153", 0x59: "gfx12-generic",
    0x5f: "gfx9-4-generic",
}


class ElfError(ValueError):
    pass


@dataclass
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int
    data: bytes = field(repr=False, default=b"")


@dataclass
class Symbol:
    index: int
    name: str
    value: int
    size: int
    info: int
    other: int
    shndx: int

    @property
    def type(self) -> int:
        return self.info & 0xF


@dataclass
class Note:
    name: str
    type: int
    desc: bytes = field(repr=False)


class Elf:
    def __init__(self, data: bytes):
        data = bytes(data)
        if len(data) < 16 or data[:4] != b"\x7fELF":
            raise ElfError("not an ELF file (bad magic)")
        self.data = data
        self.ei_class = data[4]
        self.ei_data = data[5]
        if self.ei_class not in (1, 2):
            raise ElfError(f"unknown ELF class {self.ei_class}")
        if self.ei_data not in (1, 2):
            raise ElfError(f"unknown ELF data encoding {self.ei_data}")
        self.is64 = self.ei_class == 2
        self.endian = "<" if self.ei_data == 1 else ">"
        self.osabi = data[7]
        self.abiversion = data[8]
        e = self.endian
        try:
            if self.is64:
                (self.type, self.machine, self.version, self.entry, self.phoff, self.shoff,
                 self.flags, _ehsize, self.phentsize, self.phnum, self.shentsize, self.shnum,
                 self.shstrndx) = struct.unpack_from(e + "HHIQQQIHHHHHH", data, 16)
            else:
                (self.type, self.machine, self.version, self.entry, self.phoff, self.shoff,
                 self.flags, _ehsize, self.phentsize, self.phnum, self.shentsize, self.shnum,
                 self.shstrndx) = struct.unpack_from(e + "HHIIIIIHHHHHH", data, 16)
        except struct.error as exc:
            raise ElfError(f"truncated ELF header: {exc}") from None
        self.sections = self._read_sections()
        self._symbols: list[Symbol] | None = None

    # -- sections -------------------------------------------------------
    def _read_sections(self) -> list[Section]:
        if self.shoff == 0 or self.shnum == 0:
            return []
        fmt = self.endian + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")
        raw = []
        for i in range(self.shnum):
            off = self.shoff + i * self.shentsize
            if off + struct.calcsize(fmt) > len(self.data):
                raise ElfError(f"section header {i} lies outside the file")
            (name, typ, flags, _addr, offset, size, link, info, _align,
             entsize) = struct.unpack_from(fmt, self.data, off)
            raw.append((name, typ, flags, offset, size, link, info, entsize))
        out = []
        for i, (name, typ, flags, offset, size, link, info, entsize) in enumerate(raw):
            if typ == SHT_NOBITS:
                body = b""
            else:
                if offset + size > len(self.data):
                    raise ElfError(f"section {i} lies outside the file")
                body = self.data[offset:offset + size]
            out.append(Section(i, "", typ, flags, offset, size, link, info, entsize, body))
        if 0 <= self.shstrndx < len(out):
            strtab = out[self.shstrndx].data
            for s, r in zip(out, raw):
                s.name = _cstr(strtab, r[0])
        return out

    def section(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def sections_by_type(self, typ: int) -> list[Section]:
        return [s for s in self.sections if s.type == typ]

    # -- symbols --------------------------------------------------------
    @property
    def symbols(self) -> list[Symbol]:
        if self._symbols is None:
            self._symbols = []
            for sec in self.sections_by_type(SHT_SYMTAB):
                strtab = self.sections[sec.link].data if sec.link < len(self.sections) else b""
                fmt = self.endian + ("IBBHQQ" if self.is64 else "IIIBBH")
                size = struct.calcsize(fmt)
                for i in range(len(sec.data) // size):
                    if self.is64:
                        name, info, other, shndx, value, sz = struct.unpack_from(fmt, sec.data, i * size)
                    else:
                        name, value, sz, info, other, shndx = struct.unpack_from(fmt, sec.data, i * size)
                    self._symbols.append(Symbol(i, _cstr(strtab, name), value, sz, info, other, shndx))
        return self._symbols

    # -- notes ----------------------------------------------------------
    def notes(self) -> list[Note]:
        """Notes from SHT_NOTE sections, else from PT_NOTE program headers."""
        out: list[Note] = []
        for sec in self.sections_by_type(SHT_NOTE):
            out.extend(parse_notes(sec.data, self.endian))
        if out or not self.phoff:
            return out
        fmt = self.endian + ("IIQQQQQQ" if self.is64 else "IIIIIIII")
        for i in range(self.phnum):
            off = self.phoff + i * self.phentsize
            if off + struct.calcsize(fmt) > len(self.data):
                break
            fields = struct.unpack_from(fmt, self.data, off)
            if self.is64:
                ptype, _flags, offset, _va, _pa, filesz = fields[:6]
            else:
                ptype, offset, _va, _pa, filesz = fields[:5]
            if ptype == PT_NOTE:
                out.extend(parse_notes(self.data[offset:offset + filesz], self.endian))
        return out


def parse_notes(data: bytes, endian: str = "<") -> list[Note]:
    out = []
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, typ = struct.unpack_from(endian + "III", data, pos)
        pos += 12
        name = data[pos:pos + namesz].rstrip(b"\0").decode("ascii", errors="replace")
        pos += _align4(namesz)
        desc = data[pos:pos + descsz]
        if len(desc) != descsz:
            raise ElfError("truncated ELF note")
        pos += _align4(descsz)
        out.append(Note(name, typ, desc))
    return out


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _cstr(table: bytes, off: int) -> str:
    if off >= len(table):
        return ""
    end = table.find(b"\0", off)
    if end < 0:
        end = len(table)
    return table[off:end].decode("utf-8", errors="replace")
