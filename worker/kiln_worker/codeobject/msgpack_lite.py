"""A small, dependency-free MessagePack decoder.

Enough of the format for the AMDGPU code-object metadata note (NT_AMDGPU_METADATA,
which the LLVM AMDGPU backend writes as MessagePack) and then some: nil, bool,
all int widths, float32/64, str, bin, array, map and ext (returned as an
``ExtType``-like tuple). ``unpackb`` uses the ``msgpack`` package when it is
installed and ``prefer_package`` is true; ``decode`` is always this module's own
implementation (the tests compare the two).
"""
from __future__ import annotations

import struct
from typing import Any, NamedTuple


class ExtType(NamedTuple):
    code: int
    data: bytes


class MsgPackError(ValueError):
    pass


# The type bytes after the fix* ranges: constants, fixed-size scalars (their
# struct format), and the sized kinds (the format of their length or count).
_CONSTANTS = {0xC0: None, 0xC2: False, 0xC3: True}
_SCALARS = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
            0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
_SIZED = {0xC4: ("bin", ">B"), 0xC5: ("bin", ">H"), 0xC6: ("bin", ">I"),
          0xD9: ("str", ">B"), 0xDA: ("str", ">H"), 0xDB: ("str", ">I"),
          0xDC: ("array", ">H"), 0xDD: ("array", ">I"), 0xDE: ("map", ">H"), 0xDF: ("map", ">I")}
_EXT_SIZE = {0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}
_FIXEXT_SIZE = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


class _Reader:
    __slots__ = ("buf", "pos", "raw")

    def __init__(self, buf: bytes, raw: bool):
        self.buf = memoryview(buf)
        self.pos = 0
        self.raw = raw

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise MsgPackError(f"truncated MessagePack data at offset {self.pos} (need {n} bytes)")
        out = bytes(self.buf[self.pos:end])
        self.pos = end
        return out

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def string(self, n: int) -> Any:
        data = self.take(n)
        if self.raw:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("utf-8", errors="surrogateescape")

    def value(self, depth: int = 0) -> Any:
        if depth > 512:
            raise MsgPackError("MessagePack data nested too deeply")
        b = self.take(1)[0]
        if b <= 0x7F:  # positive fixint
            return b
        if b >= 0xE0:  # negative fixint
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if 0x90 <= b <= 0x9F:
            return self.array(b & 0x0F, depth)
        if 0xA0 <= b <= 0xBF:
            return self.string(b & 0x1F)
        if b in _CONSTANTS:
            return _CONSTANTS[b]
        if b in _SCALARS:
            return self.unpack(_SCALARS[b])
        if b in _SIZED:
            kind, fmt = _SIZED[b]
            n = self.unpack(fmt)
            if kind == "bin":
                return self.take(n)
            if kind == "str":
                return self.string(n)
            return self.array(n, depth) if kind == "array" else self.map(n, depth)
        if b in _EXT_SIZE or b in _FIXEXT_SIZE:
            n = self.unpack(_EXT_SIZE[b]) if b in _EXT_SIZE else _FIXEXT_SIZE[b]
            code = self.unpack(">b")
            return ExtType(code, self.take(n))
        raise MsgPackError(f"invalid MessagePack type byte 0x{b:02x} at offset {self.pos - 1}")

    def array(self, n: int, depth: int) -> list:
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n: int, depth: int) -> dict:
        out = {}
        for _ in range(n):
            k = self.value(depth + 1)
            if isinstance(k, list):
                k = tuple(k)
            out[k] = self.value(depth + 1)
        return out


def decode(data: bytes, raw: bool = False) -> Any:
    """Decodes exactly one MessagePack object; trailing bytes are an error."""
    r = _Reader(bytes(data), raw)
    v = r.value()
    if r.pos != len(r.buf):
        raise MsgPackError(f"{len(r.buf) - r.pos} trailing bytes after the MessagePack object")
    return v


def decode_prefix(data: bytes, raw: bool = False) -> tuple[Any, int]:
    """Decodes one object from the start of data; returns (object, bytes used)."""
    r = _Reader(bytes(data), raw)
    v = r.value()
    return v, r.pos


def unpackb(data: bytes, prefer_package: bool = True) -> Any:
    """The msgpack package when present (and asked for), else this decoder."""
    if prefer_package:
        try:
            import msgpack  # type: ignore
        except ImportError:
            pass
        else:
            return msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
    return decode(data)
