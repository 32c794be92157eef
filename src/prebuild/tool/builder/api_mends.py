"""Mends for a classic project's own code where a failed build's log shows it meeting a removal
that has an exact replacement: `tensor.type()` passed to a dispatch macro (the conversion torch
2.10 dropped did what `tensor.scalar_type()` does), AT_CHECK and c10's CHECK_EQ-style checks
(TORCH_CHECK, TORCH_CHECK_EQ: the same macros renamed), a standard header a file uses without
including it (older standard libraries included it for them), TH/THC where all the project
uses of it has a one-to-one successor (its headers, THCudaCheck, THCCeilDiv, THCState's
stream, THCudaMalloc: the ATen and c10 that THC itself called by torch 1.10), what CUDA 13's
CUB removed: its operators (cub::Sum, cub::Equality: libcu++'s functors that do the same) and
its thread utilities (cub::CTA_SYNC(), cub::LaneId(): what they called), the warp functions
CUDA 9 replaced (__shfl_down(v, d): __shfl_down_sync with every lane's mask), an AT_ASSERT missing
its `;`, and a lerp of the project's own that C++20's std::lerp meets (renamed). The code then
does what it did with the torch and CUDA its authors built against.

Each mend is made in prebuild's copy of the project only, where the log shows its break (and,
once a build runs again for one, where the sources show a break that is certain), then the
build runs again (classic.py); every change is said and recorded in the wheel's manifest.
Pure functions over the sources' text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from prebuild.tool.builder.api_breaks import (
    AT_CHECK_BREAK,
    COMMENT,
    CUB_OPS_BREAK,
    CUB_SYNC_BREAK,
    CUB_SYNC_SUCCESSORS,
    LEGACY_WARP,
    LERP_BREAK,
    OWN_LERP,
    RENAMED_CHECKS,
    SEMICOLON_BREAK,
    STATEMENT_MACROS,
    TH_ARG_CHECK,
    TH_BREAK,
    TH_INCLUDE,
    THC_SUCCESSORS,
    TYPE_BREAK,
    WARP_BREAK,
    ApiBreak,
    api_breaks,
    missing_includes,
    th_names,
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
_RENAMED_CHECK = re.compile(rf"\b(?:{'|'.join(RENAMED_CHECKS)})\b(?=\s*\()")
_DEFINED = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
_GLOG = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]glog/", re.M)


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


def mend_renamed_checks(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with AT_CHECK( written TORCH_CHECK(, CHECK_EQ( TORCH_CHECK_EQ( and the
    like (RENAMED_CHECKS), and the changes; a name the file defines is left as it is, and so is
    a file that includes glog (whose CHECK_EQ it means)."""
    if _GLOG.search(text):
        return text, []
    own = set(_DEFINED.findall(text))
    changes: list[SourceChange] = []

    def rename(m: re.Match[str]) -> str:
        if m[0] in own:
            return m[0]
        changes.append(
            SourceChange(file, _line(text, m.start()), f"{m[0]} -> {RENAMED_CHECKS[m[0]]}")
        )
        return RENAMED_CHECKS[m[0]]

    return _RENAMED_CHECK.sub(rename, text), changes


_STATEMENT_MACRO = re.compile(rf"\b(?:{'|'.join(STATEMENT_MACROS)})(?=\s*\()")
_SPACE_AND_COMMENTS = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)


def _in_define(text: str, offset: int) -> bool:
    """Pure: whether ``offset`` lies in a ``#define`` (its first line or one continued by
    ``\\``), where a macro's body is not a statement of its own."""
    start = text.rfind("\n", 0, offset) + 1
    while start > 1 and text[start - 2] == "\\":  # the line before continues into this one
        start = text.rfind("\n", 0, start - 1) + 1
    return text[start:].lstrip().startswith("#")


def _statement_macro_ends(text: str) -> list[tuple[int, str]]:
    """Pure: where a `;` is missing after AT_ASSERT(...), AT_ASSERTM(...) or AT_ERROR(...) in
    ``text``'s code (the offset just past its `)`, and the macro), comments and ``#define``
    bodies aside; none where the file defines the macro itself."""
    comments = [m.span() for m in COMMENT.finditer(text)]
    own = set(_DEFINED.findall(text))
    found = []
    for m in _STATEMENT_MACRO.finditer(text):
        paren = text.index("(", m.end())
        spans = _arguments(text, paren)
        if spans is None or m[0] in own or _within(comments, m.start()):
            continue
        end = (spans[-1][1] if spans else text.index(")", paren)) + 1
        after = _SPACE_AND_COMMENTS.match(text, end).end()
        if not text.startswith(";", after) and not _in_define(text, m.start()):
            found.append((end, m[0]))
    return found


def add_statement_semicolons(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with a `;` after each AT_ASSERT(...), AT_ASSERTM(...) and AT_ERROR(...)
    that lacks one (STATEMENT_MACROS: torch made them statements that need it), and the
    changes."""
    ends = _statement_macro_ends(text)
    changes = [
        SourceChange(file, _line(text, end), f"{name}(...) -> {name}(...);") for end, name in ends
    ]
    return _edited(text, [(end, end, ";") for end, _ in ends]), changes


# A global lerp() the project defines (helper_math.h's `inline __device__ __host__ float
# lerp(float a, float b, float t)`): a return type, then the name, at the start of a line.
_LERP_DEFINED = re.compile(
    r"^[ \t]*(?!(?:return|else|case|throw)\b)(?:[\w:<>]+[ \t*&]+)+lerp[ \t]*\(", re.M
)
# Its name where the code means it: not a member (`.lerp(`, `->lerp(`, torch's `x.lerp_`) nor
# another namespace's (`std::lerp`, `glm::lerp`); `::lerp` is the global one, the project's.
_OWN_LERP_USE = re.compile(r"(?<![\w.])(?<!->)(?<!\w::)\blerp\b(?=\s*\()")


def defines_lerp(text: str) -> bool:
    """Pure: whether ``text``'s code (comments aside) defines a global lerp()."""
    return bool(_LERP_DEFINED.search(COMMENT.sub("", text)))


def rename_own_lerp(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with the project's own lerp (its definitions and calls) named OWN_LERP,
    so that C++20's std::lerp, which <math.h> puts beside it in the global namespace, no
    longer meets it; comments left as they are."""
    comments = [m.span() for m in COMMENT.finditer(text)]
    found = [m for m in _OWN_LERP_USE.finditer(text) if not _within(comments, m.start())]
    changes = [SourceChange(file, _line(text, m.start()), f"lerp -> {OWN_LERP}") for m in found]
    return _edited(text, [(m.start(), m.end(), OWN_LERP) for m in found]), changes


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
    TH/THC (th_mendable)."""
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


_THC_CALL = re.compile(rf"\b(?P<name>{'|'.join(THC_SUCCESSORS)}|{TH_ARG_CHECK})\s*\(")
# `extern THCState *state;`, `THCState *state = at::globalContext().lazyInitCUDA();`: with its
# uses replaced, the variable has nothing left to do (and lazyInitCUDA() returns nothing now).
_STATE_VARIABLE = re.compile(
    r"^[ \t]*(?:extern[ \t]+|static[ \t]+)?THCState[ \t]*\*[ \t]*\w+[ \t]*(?:=[^;\n]*)?;.*$", re.M
)
# A message with no printf conversion in it: THArgCheck's format is TORCH_CHECK's text as it is.
_PLAIN_STRING = re.compile(r'"(?:[^"\\%\n]|\\.)*"(?:\s*"(?:[^"\\%\n]|\\.)*")*')


def _within(spans: list[tuple[int, int]], offset: int) -> bool:
    return any(start <= offset < end for start, end in spans)


def _edited(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Pure: ``text`` with each of ``edits`` (start, end, new text; none overlapping) made."""
    pieces, done = [], 0
    for start, end, new in sorted(edits):
        pieces += [text[done:start], new]
        done = end
    return "".join(pieces) + text[done:]


def _arguments(text: str, paren: int) -> list[tuple[int, int]] | None:
    """Pure: the spans of the top-level arguments of the call whose ``(`` is at ``paren`` (none
    for ``()``); None where the text ends before its ``)``."""
    spans: list[tuple[int, int]] = []
    depth, start, i = 0, paren + 1, paren
    while i < len(text):
        c = text[i]
        if c in "\"'":  # a literal: its brackets and commas are not the call's
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                spans.append((start, i))
                return (
                    [] if spans == [(paren + 1, i)] and not text[paren + 1 : i].strip() else spans
                )
        elif c == "," and depth == 1:
            spans.append((start, i))
            start = i + 1
        i += 1
    return None


def replace_thc_names(file: str, text: str) -> tuple[str, list[str], list[SourceChange]]:
    """Pure: ``text`` with THC's names that have a one-to-one successor (THC_SUCCESSORS)
    written as it, the THCState* argument they took dropped, THArgCheck(cond, arg, "message")
    written TORCH_CHECK with THArgCheck's message, and THCState* variables removed; the headers
    the successors need, and the changes. Calls of another shape (a printf format in
    THArgCheck's message) are left for the caller to see (th_names)."""
    comments = [m.span() for m in COMMENT.finditer(text)]
    edits: list[tuple[int, int, str]] = []  # (start, end, new text), in order
    changes: list[SourceChange] = []
    headers: list[str] = []
    for m in _THC_CALL.finditer(text):
        name = m["name"]
        spans = _arguments(text, m.end() - 1)
        if spans is None or _within(comments, m.start()):
            continue
        line = _line(text, m.start())
        if name == TH_ARG_CHECK:
            if len(spans) != 3 or not _PLAIN_STRING.fullmatch(text[slice(*spans[2])].strip()):
                continue
            arg, message = (text[slice(*span)].strip() for span in spans[1:])
            edits += [
                (m.start(), m.start() + len(name), "TORCH_CHECK"),
                (spans[1][0], spans[2][1], f' "invalid argument ", {arg}, ": " {message}'),
            ]
            changes.append(SourceChange(file, line, f"{name} -> TORCH_CHECK"))
            headers.append("<c10/util/Exception.h>")
            continue
        successor = THC_SUCCESSORS[name]
        if len(spans) != successor.args:
            continue
        edits.append((m.start(), m.start() + len(name), successor.new))
        if successor.drops_state:  # `(state, n)` -> `(n)`, `(state)` -> `()`
            state_end = spans[0][1]
            if len(spans) > 1:  # up to the next argument's first character
                state_end = spans[1][1] - len(text[slice(*spans[1])].lstrip())
            edits.append((spans[0][0], state_end, ""))
        changes.append(SourceChange(file, line, f"{name} -> {successor.new}"))
        headers.append(successor.header)
    for m in _STATE_VARIABLE.finditer(text):
        edits.append((m.start(), m.end(), ""))
        changes.append(SourceChange(file, _line(text, m.start()), f"{m[0].strip()} -> (removed)"))
    return _edited(text, edits), list(dict.fromkeys(headers)), changes


# How a header added for THC's successors is said: the note counts it with THC's changes.
_FOR_THC = "(for THC's successors)"


def mend_thc_names(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: replace_thc_names' ``text``, with the headers its successors need included on
    top (where the file does not include them already); each change names its line in the
    mended file."""
    mended, headers, changes = replace_thc_names(file, text)
    for header in reversed(headers):
        mended, added = add_include(file, mended, header)
        changes = [replace(c, line=c.line + len(added)) for c in changes]
        changes += [replace(c, what=f"{c.what} {_FOR_THC}") for c in added]
    return mended, changes


def th_mendable(sources: Mapping[str, str]) -> bool:
    """Pure: whether ``sources`` (path -> text) include or use TH/THC, and every TH/THC name
    their code uses has a one-to-one successor (replace_thc_names leaves none). Not a project
    that defines a TH name itself (a port's `#define THCudaCheck C10_CUDA_CHECK`): its code is
    not THC's."""
    including, using = th_uses(sources)
    defined = {name for text in sources.values() for name in _DEFINED.findall(text)}
    return (
        bool(including or using)
        and not th_names(" ".join(defined))
        and not any(th_names(replace_thc_names(name, sources[name])[0]) for name in using)
    )


# CUB's operators CCCL 3 removed, and libcu++'s that do the same (transparent functors: their
# call operators deduce the operands' type, as cub::Sum's did).
_CUB_SUCCESSORS = {
    "Sum": "cuda::std::plus<>",
    "Max": "cuda::maximum<>",
    "Min": "cuda::minimum<>",
    "Equality": "cuda::std::equal_to<>",
    "Inequality": "cuda::std::not_equal_to<>",
}
_CUB_OP = re.compile(rf"\bcub::({'|'.join(_CUB_SUCCESSORS)})\b(?!\s*<)")


def replace_cub_ops(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with cub::Sum, cub::Max, cub::Min, cub::Equality and cub::Inequality (as
    types, `cub::Sum sum;`, or objects, `cub::Max()`) written as libcu++'s functors, and
    ``<cuda/functional>`` included."""
    includes = "#include <cuda/functional>\n#include <cuda/std/functional>\n"
    changes = [  # its lines in the mended file, below the two includes
        SourceChange(file, _line(text, m.start()) + 2, f"{m[0]} -> {_CUB_SUCCESSORS[m[1]]}")
        for m in _CUB_OP.finditer(text)
    ]
    if not changes:
        return text, []
    mended = _CUB_OP.sub(lambda m: _CUB_SUCCESSORS[m[1]], text)
    return includes + mended, changes


_CUB_SYNC_CALL = re.compile(rf"\bcub::(?P<name>{'|'.join(CUB_SYNC_SUCCESSORS)})\s*\(")


def replace_cub_sync(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with CUB's thread and warp utilities (cub::CTA_SYNC(), cub::LaneId(),
    cub::WARP_ANY(p, mask), ...) written as what they called (CUB_SYNC_SUCCESSORS), the
    predicate and mask swapped where the intrinsic takes the mask first, and ``<cuda/ptx>``
    included where a libcu++ function is used; a call of another shape is left as it is."""
    comments = [m.span() for m in COMMENT.finditer(text)]
    edits: list[tuple[int, int, str]] = []
    changes: list[SourceChange] = []
    for m in _CUB_SYNC_CALL.finditer(text):
        new, swap = CUB_SYNC_SUCCESSORS[m["name"]]
        spans = _arguments(text, m.end() - 1)
        if spans is None or (swap and len(spans) != 2) or _within(comments, m.start()):
            continue
        edits.append((m.start(), m.end() - 1, new))
        if swap:  # cub::WARP_ANY(p, mask) -> __any_sync(mask, p)
            p, mask = (text[slice(*span)].strip() for span in spans)
            edits.append((spans[0][0], spans[1][1], f"{mask}, {p}"))
        changes.append(SourceChange(file, _line(text, m.start()), f"cub::{m['name']} -> {new}"))
    mended_text = _edited(text, edits)
    if any(c.what.endswith(("get_sreg_laneid", "get_sreg_warpid")) for c in changes):
        mended_text, added = add_include(file, mended_text, "<cuda/ptx>")
        changes = [replace(c, line=c.line + len(added)) for c in changes] + added
    return mended_text, changes


_WARP_CALL = re.compile(rf"\b(?P<name>{'|'.join(LEGACY_WARP)})\s*\(")
WARP_MASK = "0xffffffff"


def replace_legacy_warp(file: str, text: str) -> tuple[str, list[SourceChange]]:
    """Pure: ``text`` with each call of a warp function CUDA 9 replaced (LEGACY_WARP:
    ``__shfl_down(v, d)``) written as its _sync form over every lane of the warp
    (``__shfl_down_sync(0xffffffff, v, d)``): code written for them runs the warp's 32 lanes
    together, which the mask now says. A name the file defines (a macro of its own mapping it)
    and calls in comments are left as they are."""
    comments = [m.span() for m in COMMENT.finditer(text)]
    own = set(_DEFINED.findall(text))
    edits: list[tuple[int, int, str]] = []
    changes: list[SourceChange] = []
    for m in _WARP_CALL.finditer(text):
        if m["name"] in own or _within(comments, m.start()):
            continue
        edits.append((m.start(), m.end(), f"{m['name']}_sync({WARP_MASK}, "))
        changes.append(
            SourceChange(file, _line(text, m.start()), f"{m['name']} -> {m['name']}_sync")
        )
    return _edited(text, edits), changes


def _source_named(logged: str, sources: Mapping[str, str]) -> str | None:
    """The source a log names by a path of its own (the build copy's, absolute or not)."""
    for name in sources:
        if logged == name or logged.endswith("/" + name):
            return name
    return None


def certain_breaks(sources: Mapping[str, str]) -> list[ApiBreak]:
    """Pure: the breaks ``sources`` (path -> text) are sure to meet whatever the log shows:
    TH/THC (no torch that prebuild builds against has any of it), AT_CHECK (in a file that
    does not define it), a `;` left out after a statement macro, and the warp functions CUDA 9
    replaced (sm_70 and later have none). Not `x.type()` in a dispatch macro, which a project's
    own macro may take as it is, nor what differs between toolkits (CUB)."""
    found = []
    if any(th_uses(sources)):
        found.append(TH_BREAK)
    if any(
        re.search(r"\bAT_CHECK\s*\(", COMMENT.sub("", text))
        and "AT_CHECK" not in _DEFINED.findall(text)
        for text in sources.values()
    ):
        found.append(AT_CHECK_BREAK)
    if any(_statement_macro_ends(text) for text in sources.values()):
        found.append(SEMICOLON_BREAK)
    if any(replace_legacy_warp("", text)[1] for text in sources.values()):
        found.append(WARP_BREAK)  # the _sync forms compile for every arch, older ones too
    return found


def mend_sources(
    log: str, cxx_standard: str, sources: Mapping[str, str]
) -> tuple[dict[str, str], list[SourceChange]]:
    """Pure: for the breaks a failed build's ``log`` shows that have an exact replacement, the
    project's files to rewrite (``sources``: path -> text, native_sources') with their new
    text, and the changes, by file and line. A build stops at the first file that fails, so a
    replaced API is replaced in every file; a missing include is added where the log names.
    Where the build runs again for these, what the sources show will break is mended with
    them (certain_breaks), not a build later: maskrcnn-benchmark met `x.type()`, then THC,
    then AT_CHECK."""
    breaks = api_breaks(log, cxx_standard)
    texts, changes = _mended(breaks, log, sources)
    certain = [b for b in certain_breaks(sources) if b not in breaks] if changes else []
    return _mended([*breaks, *certain], log, sources) if certain else (texts, changes)


def _mended(
    breaks: list[ApiBreak], log: str, sources: Mapping[str, str]
) -> tuple[dict[str, str], list[SourceChange]]:
    """Pure: mend_sources' answer for ``breaks``."""
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

    th = TH_BREAK in breaks and th_mendable(sources)
    # the project's lerp is renamed where it defines one: a C++20 project's std::lerp stays
    lerp = any(defines_lerp(text) for text in sources.values())
    for name in sorted(sources):
        if th:
            apply(name, replace_th_includes)
            apply(name, mend_thc_names)
        if TYPE_BREAK in breaks:
            apply(name, mend_dispatch_types)
        if AT_CHECK_BREAK in breaks:
            apply(name, mend_renamed_checks)
        if SEMICOLON_BREAK in breaks:
            apply(name, add_statement_semicolons)
        if LERP_BREAK in breaks and lerp:
            apply(name, rename_own_lerp)
        if CUB_OPS_BREAK in breaks:
            apply(name, replace_cub_ops)
        if CUB_SYNC_BREAK in breaks:
            apply(name, replace_cub_sync)
        if WARP_BREAK in breaks:
            apply(name, replace_legacy_warp)
    for header, (_, files) in missing_includes(log).items():
        for name in dict.fromkeys(filter(None, (_source_named(f, sources) for f in files))):
            apply(name, lambda file, text, header=header: add_include(file, text, header))
    changes.sort(key=lambda c: (c.file, c.line))
    return {n: t for n, t in texts.items() if t != sources[n]}, changes


# -- the record of the mends a build's copy holds: file -> {"source": the sha256 of its text
# before any mend, "text": the mended text, "changes": [[line, what], ...]}. A build that goes
# on from an earlier run's objects makes them again where the file is still that text.


def text_sha(text: str) -> str:
    """Pure: the sha256 a record keeps of a file's text."""
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()


def mends_recorded(
    record: Mapping[str, dict],
    before: Mapping[str, str],
    texts: Mapping[str, str],
    changes: list[SourceChange],
) -> dict[str, dict]:
    """Pure: ``record`` with one round's mends added (mend_sources' ``texts`` and ``changes``;
    ``before``: the texts they were made from): a file mended in an earlier round keeps the
    sha of its text before any mend, and its changes add up."""
    updated = dict(record)
    for name, text in texts.items():
        earlier = record.get(name, {})
        made = [
            *earlier.get("changes", []),
            *([c.line, c.what] for c in changes if c.file == name),
        ]
        source = earlier.get("source", text_sha(before[name]))
        updated[name] = {"source": source, "text": text, "changes": made}
    return updated


def recorded_text(entry: Mapping, text: str) -> str | None:
    """Pure: a record's mended text for a file whose text is ``text``, where that is still the
    text it was made from; None otherwise (the file changed since: the project's own again)."""
    try:
        return str(entry["text"]) if text_sha(text) == entry["source"] else None
    except (KeyError, TypeError):
        return None


def recorded_changes(name: str, entry: Mapping) -> list[SourceChange]:
    """Pure: the changes a record's ``entry`` for file ``name`` holds."""
    return [SourceChange(name, line, what) for line, what in entry.get("changes", [])]


def mended_again(changes: list[SourceChange]) -> str:
    """Pure: what the build says as it runs again for one round of mends."""
    files = len({c.file for c in changes})
    return (
        "its code meets APIs that were removed, each with an exact replacement: "
        f"{counted(len(changes), 'change')} in {counted(files, 'file')} of prebuild's copy "
        "(said with the wheel), built again"
    )


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
    if (
        TH_INCLUDE.match(change.what.partition(" -> ")[0])
        or th_names(change.what.partition(" -> ")[0])
        or change.what.endswith(_FOR_THC)
    ):
        return "TH"
    kind = change.what.rpartition(" -> ")[2]
    return re.sub(r"^[\w\])]+(\.|->)", r"x\1", kind)  # rays_o.scalar_type() -> x.scalar_type()


def _what(kind: str) -> str:
    if kind == "TH":
        return (
            "TH/THC, PyTorch's old backend, is the ATen and c10 that replaced it (its #include "
            "lines, and names each with a one-to-one successor)"
        )
    if kind.endswith("scalar_type()"):
        return f"`{kind.replace('scalar_type', 'type')}` passed to a dispatch macro is `{kind}`"
    if kind == OWN_LERP:
        return f"the project's own `lerp`, which C++20's `std::lerp` meets, is `{OWN_LERP}`"
    if kind.endswith("(...);"):
        return f"`{kind[:-1]}` with no `;` after it (torch's macro is a statement now) is `{kind}`"
    if kind in RENAMED_CHECKS.values():
        return f"{next(o for o, n in RENAMED_CHECKS.items() if n == kind)} is {kind}"
    if kind.removesuffix("_sync") in LEGACY_WARP:
        return (
            f"`{kind.removesuffix('_sync')}(...)` is `{kind}({WARP_MASK}, ...)` (every lane of "
            "the warp, which code written for it runs together)"
        )
    if kind in (sync := {new: old for old, (new, _) in CUB_SYNC_SUCCESSORS.items()}):
        return f"`cub::{sync[kind]}` is `{kind}`"
    if kind in _CUB_SUCCESSORS.values():
        cub = next(name for name, new in _CUB_SUCCESSORS.items() if new == kind)
        return f"`cub::{cub}` is `{kind}`"
    return f"`{kind.removesuffix(' added')}` added"


def _places(made: list[SourceChange]) -> str:
    files = sorted({c.file for c in made})
    shown = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
    return f"{counted(len(made), 'place')} in {shown}"
