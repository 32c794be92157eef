"""Mends for a classic project's own code where a failed build's log shows it meeting a removal
that has an exact replacement: `tensor.type()` passed to a dispatch macro (the conversion torch
2.10 dropped did what `tensor.scalar_type()` does), AT_CHECK (TORCH_CHECK, the same macro
renamed), a standard header a file uses without including it (older standard libraries
included it for them), TH/THC headers where the project uses nothing else of TH (the ATen
headers that took their place), and CUB's cub::Sum, cub::Max and cub::Min, which CUDA 13's CUB
removed (libcu++'s functors that do the same). The code then does what it did with the torch
and CUDA its authors built against.

Each mend is made in prebuild's copy of the project only, where the log shows its break, then
the build runs again (classic.py); every change is said and recorded in the wheel's manifest.
Pure functions over the sources' text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from prebuild.tool.builder.api_breaks import (
    AT_CHECK_BREAK,
    CUB_OPS_BREAK,
    TH_BREAK,
    TH_INCLUDE,
    TYPE_BREAK,
    api_breaks,
    missing_includes,
    th_uses,
)
from prebuild.tool.builder.classic_messages import counted


@dataclass(frozen=True)
class SourceChange:
    """One change a mend made: in ``file`` (relative to the project), at ``line``."""

    file: str
    line: int
    what: str  # "rays_o.type() -> rays_o.scalar_type()"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


# A dispatch macro's call: torch's AT_DISPATCH_*, or a project's own built on them (lietorch's
# DISPATCH_GROUP_AND_FLOATING_TYPES). Its arguments before the op's name (a string literal)
# are where a scalar type goes.
_DISPATCH_CALL = re.compile(r"\b\w*DISPATCH\w*\s*\(")
# `x.type()` (or `p->type()`), not `x.type().scalarType()`, which still compiles.
_TYPE_CALL = re.compile(r"(?P<expr>[\w\])]+)(?P<op>\.|->)type\(\)(?!\s*\.)")
_AT_CHECK = re.compile(r"\bAT_CHECK\b(?=\s*\()")
_DEFINES_AT_CHECK = re.compile(r"^[ \t]*#[ \t]*define[ \t]+AT_CHECK\b", re.M)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def mend_dispatch_types(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with each `x.type()` among a dispatch macro's arguments before its op name
    written `x.scalar_type()`, and the changes."""
    changes: list[SourceChange] = []
    pieces: list[str] = []
    done = 0
    for call in _DISPATCH_CALL.finditer(text):
        if call.end() < done:
            continue
        ends = [i for i in (text.find('"', call.end()), text.find(";", call.end())) if i >= 0]
        span_end = min(ends) if ends else len(text)
        span = text[call.end() : span_end]
        mended = _TYPE_CALL.sub(lambda m: f"{m['expr']}{m['op']}scalar_type()", span)
        if mended == span:
            continue
        for m in _TYPE_CALL.finditer(span):
            changes.append(
                SourceChange(
                    file,
                    _line(text, call.end() + m.start()),
                    f"{m[0]} -> {m['expr']}{m['op']}scalar_type()",
                )
            )
        pieces += [text[done : call.end()], mended]
        done = span_end
    return "".join(pieces) + text[done:], changes


def mend_at_check(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with AT_CHECK( written TORCH_CHECK(, and the changes; as it is where the
    file defines an AT_CHECK of its own."""
    if _DEFINES_AT_CHECK.search(text):
        return text, []
    changes = [
        SourceChange(file, _line(text, m.start()), "AT_CHECK -> TORCH_CHECK")
        for m in _AT_CHECK.finditer(text)
    ]
    return _AT_CHECK.sub("TORCH_CHECK", text), changes


def add_include(file: str, text: str, header: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with ``#include <header>`` as its first line (a standard header: where it
    goes does not matter), unless it includes it already."""
    if re.search(rf"^[ \t]*#[ \t]*include[ \t]*{re.escape(header)}", text, re.M):
        return text, []
    return f"#include {header}\n{text}", [SourceChange(file, 1, f"#include {header} added")]


# Each TH/THC header's successor in ATen, first match first: THC's atomics and device utilities
# have their own; the rest of THC is the CUDA runtime, cuBLAS and the stream (CUDAContext.h).
_TH_SUCCESSORS = (
    ("THCAtomics", "<ATen/cuda/Atomic.cuh>"),
    ("THCDeviceUtils", "<ATen/cuda/DeviceUtils.cuh>"),
    ("THC/", "<ATen/cuda/CUDAContext.h>"),
    ("TH/", "<ATen/ATen.h>"),
)


def replace_th_includes(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with its TH and THC #include lines replaced by the ATen headers that took
    their place (_TH_SUCCESSORS), each once; for a project whose code uses nothing else of
    TH/THC (th_uses)."""
    changes: list[SourceChange] = []
    added: set[str] = set()

    def replace(m: re.Match[str]) -> str:
        header = next(new for old, new in _TH_SUCCESSORS if old in m[0])
        line = m[0].strip()
        if header in added:
            changes.append(SourceChange(file, _line(text, m.start()), f"{line} -> (removed)"))
            return ""
        added.add(header)
        changes.append(SourceChange(file, _line(text, m.start()), f"{line} -> #include {header}"))
        return f"#include {header}"

    return TH_INCLUDE.sub(replace, text), changes


# CUB's operators CCCL 3 removed, and libcu++'s that do the same (transparent functors: their
# call operators deduce the operands' type, as cub::Sum's did).
_CUB_SUCCESSORS = {"Sum": "cuda::std::plus<>", "Max": "cuda::maximum<>", "Min": "cuda::minimum<>"}
_CUB_OP = re.compile(r"\bcub::(Sum|Max|Min)\b(?!\s*<)")


def replace_cub_ops(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with cub::Sum, cub::Max and cub::Min (as types, `cub::Sum sum;`, or
    objects, `cub::Max()`) written as libcu++'s functors, and ``<cuda/functional>`` included."""
    includes = "#include <cuda/functional>\n#include <cuda/std/functional>\n"
    changes = [  # its lines in the mended file, below the two includes
        SourceChange(file, _line(text, m.start()) + 2, f"{m[0]} -> {_CUB_SUCCESSORS[m[1]]}")
        for m in _CUB_OP.finditer(text)
    ]
    if not changes:
        return text, []
    mended = _CUB_OP.sub(lambda m: _CUB_SUCCESSORS[m[1]], text)
    return includes + mended, changes


def _source_named(logged: str, sources: Mapping[str, str]) -> str | None:
    """The source a log names by a path of its own (the build copy's, absolute or not)."""
    for name in sources:
        if logged == name or logged.endswith("/" + name):
            return name
    return None


def mend_sources(
    log: str, cxx_standard: str, sources: Mapping[str, str]
) -> tuple[dict[str, str], list[SourceChange]]:
    """Pure: for the breaks a failed build's ``log`` shows that have an exact replacement, the
    project's files to rewrite (``sources``: path -> text, native_sources') with their new
    text, and the changes, by file and line. A build stops at the first file that fails, so a
    replaced API is replaced in every file; a missing include is added where the log names."""
    breaks = api_breaks(log, cxx_standard)
    texts = dict(sources)
    changes: list[SourceChange] = []

    def apply(name: str, mend) -> None:
        # Mends that add lines add them at the top: the lines the file's changes so far name
        # move down with them (each change names its line in the mended file).
        before = texts[name]
        texts[name], made = mend(name, before)
        if moved := texts[name].count("\n") - before.count("\n"):
            changes[:] = [replace(c, line=c.line + moved) if c.file == name else c for c in changes]
        changes.extend(made)

    including, using = th_uses(sources) if TH_BREAK in breaks else ([], [])
    for name in sorted(sources):
        if including and not using and name in including:
            apply(name, replace_th_includes)
        if TYPE_BREAK in breaks:
            apply(name, mend_dispatch_types)
        if AT_CHECK_BREAK in breaks:
            apply(name, mend_at_check)
        if CUB_OPS_BREAK in breaks:
            apply(name, replace_cub_ops)
    for header, (_, files) in missing_includes(log).items():
        for name in dict.fromkeys(filter(None, (_source_named(f, sources) for f in files))):
            apply(name, lambda file, text, header=header: add_include(file, text, header))
    changes.sort(key=lambda c: (c.file, c.line))
    return {n: t for n, t in texts.items() if t != sources[n]}, changes


def mended_note(changes: list[SourceChange]) -> str:
    """Pure: what the summary says of the changes the mends made (each in prebuild.json)."""
    kinds: dict[str, list[SourceChange]] = {}
    for change in changes:
        kinds.setdefault(_kind(change), []).append(change)
    said = "; ".join(f"{_what(kind)} ({_places(made)})" for kind, made in kinds.items())
    return (
        "The project's code meets APIs that torch, CUDA or the C++ standard library removed, each "
        "with an exact replacement: changed in prebuild's copy of the project (its source is "
        f"untouched): {said}. prebuild.json lists each change; --no-mend builds it as it is."
    )


def _kind(change: SourceChange) -> str:
    """``x.scalar_type()``, ``TORCH_CHECK``, ``#include <memory> added``, ``TH``."""
    if TH_INCLUDE.match(change.what.partition(" -> ")[0]):
        return "TH"
    kind = change.what.rpartition(" -> ")[2]
    return re.sub(r"^[\w\])]+(\.|->)", r"x\1", kind)  # rays_o.scalar_type() -> x.scalar_type()


def _what(kind: str) -> str:
    if kind == "TH":
        return "TH/THC #include lines, all it used of TH, are the ATen headers that replaced them"
    if kind.endswith("scalar_type()"):
        return f"`{kind.replace('scalar_type', 'type')}` passed to a dispatch macro is `{kind}`"
    if kind == "TORCH_CHECK":
        return "AT_CHECK is TORCH_CHECK"
    if kind in _CUB_SUCCESSORS.values():
        cub = next(name for name, new in _CUB_SUCCESSORS.items() if new == kind)
        return f"`cub::{cub}` is `{kind}`"
    return f"`{kind.removesuffix(' added')}` added"


def _places(made: list[SourceChange]) -> str:
    files = sorted({c.file for c in made})
    shown = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
    return f"{counted(len(made), 'place')} in {shown}"
