"""The CUDA fat binary format: which SASS and PTX archs a ``.nv_fatbin`` section holds.

Pure: bytes in, entries out (no file, no process), so the parser is unit-tested with fatbins
made up in the tests. ``prebuild.tool.inspection`` reads the section out of an ELF library.

Layout (little-endian), as nvcc's ``fatbinary`` writes it and ``cuobjdump`` reads it:

* a section holds one or more *containers*, one after another;
* a container is a 16-byte header -- magic ``0xBA55ED50``, version ``1`` (u16), header size
  (u16, 16), size of what follows (u64) -- then its entries;
* an entry is a header -- kind (u16: 1 PTX, 2 ELF), version (u16), header size (u32),
  payload size (u64), compressed size (u32), u32, code version minor/major (u16 each),
  arch (u32, ``80`` for sm_80), name offset and length (u32 each, relative to the entry;
  the source file the code came from, 0 when none), flags (u64), ... -- then its payload
  (possibly compressed; never needed here: the arch is in the header);
* flags: 0x1 64-bit, 0x10 Linux, 0x8000 compressed, 0x100000 arch-specific code
  (``sm_90a``), 0x200000 family-specific code (``sm_100f``).

Entries without a name come from statically linked libraries (the CUDA runtime embeds a few
kernels of its own), not from our sources: they are reported apart as ``linked_sass``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from prebuild.runtime.arch import Arch, ArchError

MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of entries
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")  # kind .. flags: the first 56 bytes of an entry

KIND_PTX = 1
KIND_ELF = 2
FLAG_COMPRESSED = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # "a": runs only on exactly this capability
FLAG_FAMILY_SPECIFIC = 0x200000  # "f": this major, minor >= ours


class FatbinError(ValueError):
    """The bytes are not a well-formed fat binary."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "sass" or "ptx"
    arch: Arch
    name: str  # the source file the code came from; "" for linked libraries' code
    compressed: bool
    offset: int  # of the entry header within the section

    @property
    def label(self) -> str:
        return self.arch.sm if self.kind == "sass" else self.arch.compute


@dataclass(frozen=True)
class EmbeddedCode:
    """Archs with code in a library: ``sass``/``ptx`` are our kernels'; ``linked_sass`` is
    code that came with statically linked libraries (no source name in its entry)."""

    sass: tuple[Arch, ...] = ()
    ptx: tuple[Arch, ...] = ()
    linked_sass: tuple[Arch, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.sass or self.ptx or self.linked_sass)


def _arch(number: int, flags: int, offset: int) -> Arch:
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY_SPECIFIC else ""
    try:
        return Arch(number // 10, number % 10, suffix)
    except ArchError as exc:
        raise FatbinError(f"entry at {offset:#x} names no CUDA arch ({number})") from exc


def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    """Every entry of every container in a ``.nv_fatbin`` section, in order.

    Zero bytes between containers (alignment) are skipped; anything else that is not a
    container, or a container or entry running past its end, raises FatbinError.
    """
    entries: list[FatbinEntry] = []
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if view[pos] == 0:  # padding between containers
            pos += 1
            continue
        if pos + _CONTAINER.size > len(view):
            raise FatbinError(f"truncated container header at {pos:#x}")
        magic, _version, header_size, size = _CONTAINER.unpack_from(view, pos)
        if magic != MAGIC:
            raise FatbinError(f"no fat binary magic at {pos:#x} (found {magic:#010x})")
        if header_size < _CONTAINER.size:
            raise FatbinError(f"container at {pos:#x} has header size {header_size}")
        end = pos + header_size + size
        if end > len(view):
            raise FatbinError(f"container at {pos:#x} runs past the section ({end} > {len(view)})")
        entry = pos + header_size
        while entry < end:
            entries.append(_parse_entry(view, entry, end))
            entry_header, payload = struct.unpack_from("<IQ", view, entry + 4)
            entry += entry_header + payload
        pos = end
    return entries


def _parse_entry(view: memoryview, pos: int, end: int) -> FatbinEntry:
    if pos + _ENTRY.size > end:
        raise FatbinError(f"truncated entry header at {pos:#x}")
    (
        kind,
        _version,
        header_size,
        payload_size,
        _csize,
        _x,
        _minor,
        _major,
        arch,
        name_offset,
        name_size,
        flags,
    ) = _ENTRY.unpack_from(view, pos)
    if header_size < _ENTRY.size or pos + header_size + payload_size > end:
        raise FatbinError(f"entry at {pos:#x} runs past its container")
    if kind not in (KIND_PTX, KIND_ELF):
        raise FatbinError(f"entry at {pos:#x} has unknown kind {kind}")
    name = ""
    if name_size:
        if name_offset + name_size > header_size:
            raise FatbinError(f"entry at {pos:#x} has its name outside its header")
        raw = bytes(view[pos + name_offset : pos + name_offset + name_size])
        name = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
    return FatbinEntry(
        kind="ptx" if kind == KIND_PTX else "sass",
        arch=_arch(arch, flags, pos),
        name=name,
        compressed=bool(flags & FLAG_COMPRESSED),
        offset=pos,
    )


def embedded_code(entries: list[FatbinEntry]) -> EmbeddedCode:
    """The distinct archs of our code (named entries) and of linked libraries' code."""
    if not isinstance(entries, list) or not all(isinstance(e, FatbinEntry) for e in entries):
        raise TypeError("embedded_code takes a list of FatbinEntry")
    sass = {e.arch for e in entries if e.kind == "sass" and e.name}
    ptx = {e.arch for e in entries if e.kind == "ptx"}
    linked = {e.arch for e in entries if e.kind == "sass" and not e.name}
    return EmbeddedCode(tuple(sorted(sass)), tuple(sorted(ptx)), tuple(sorted(linked)))


# --- writing: only to make fatbins for tests (nvcc's fatbinary makes the real ones) --------


def build_entry(
    kind: str, arch: Arch, name: str = "", payload: bytes = b"\x7fELF", *, compressed: bool = False
) -> bytes:
    """One entry (header + payload) in the layout parse_fatbin reads."""
    raw_name = name.encode() + b"\0" if name else b""
    header_size = 64 + (len(raw_name) + 7) // 8 * 8
    flags = 0x11 | (FLAG_COMPRESSED if compressed else 0)
    flags |= {"a": FLAG_ARCH_SPECIFIC, "f": FLAG_FAMILY_SPECIFIC}.get(arch.suffix, 0)
    padded = payload + b"\0" * (-len(payload) % 8)
    head = _ENTRY.pack(
        KIND_PTX if kind == "ptx" else KIND_ELF,
        0x101,
        header_size,
        len(padded),
        len(payload),
        0,
        0,
        1,
        arch.major * 10 + arch.minor,
        64 if raw_name else 0,
        len(raw_name),
        flags,
    )
    head = head.ljust(64, b"\0") + raw_name.ljust(header_size - 64, b"\0")
    return head + padded


def build_container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return _CONTAINER.pack(MAGIC, 1, _CONTAINER.size, len(body)) + body
