#!/usr/bin/env python3
"""Keeps what elfcore reads of a core file: the ELF header, the program headers and the note
segments. Every PT_LOAD keeps its address and memory size but holds no bytes in the file
(p_offset = p_filesz = 0), so a 7 MB createdump mini dump becomes a few KB.

usage: strip_core.py CORE OUT
"""
import struct
import sys

src, out = sys.argv[1], sys.argv[2]
data = bytearray(open(src, "rb").read())
assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "a 64-bit little-endian ELF"
phoff, = struct.unpack_from("<Q", data, 32)
phentsize, phnum = struct.unpack_from("<HH", data, 54)
end = phoff + phentsize * phnum
for i in range(phnum):
    at = phoff + i * phentsize
    kind, = struct.unpack_from("<I", data, at)
    offset, = struct.unpack_from("<Q", data, at + 8)
    filesz, = struct.unpack_from("<Q", data, at + 32)
    if kind == 1:  # PT_LOAD
        struct.pack_into("<Q", data, at + 8, 0)
        struct.pack_into("<Q", data, at + 32, 0)
    elif kind == 4:  # PT_NOTE
        end = max(end, offset + filesz)
open(out, "wb").write(bytes(data[:end]))
