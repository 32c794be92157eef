"""prebuild.tool.fatbin: the fat binary parser, on fatbins made up here."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prebuild.runtime.arch import Arch, parse_arch
from prebuild.tool.fatbin import (
    EmbeddedCode,
    FatbinError,
    build_container,
    build_entry,
    embedded_code,
    parse_fatbin,
)

SRC = "/src/csrc/ssim/ssim_cuda.cu"


def test_one_container_sass_and_ptx():
    data = build_container(
        build_entry("ptx", parse_arch("80"), SRC, b"// ptx text", compressed=True),
        build_entry("sass", parse_arch("80"), SRC, b"\x7fELF" * 9),
    )
    entries = parse_fatbin(data)
    assert [(e.kind, e.label, e.name, e.compressed) for e in entries] == [
        ("ptx", "compute_80", SRC, True),
        ("sass", "sm_80", SRC, False),
    ]
    assert embedded_code(entries) == EmbeddedCode(sass=(Arch(8, 0),), ptx=(Arch(8, 0),))


@pytest.mark.parametrize("spelling", ["sm_90a", "sm_100f", "sm_120", "sm_75", "sm_100a", "sm_86"])
def test_arch_suffixes_come_from_the_flags(spelling):
    arch = parse_arch(spelling)
    (entry,) = parse_fatbin(build_container(build_entry("sass", arch, SRC)))
    assert entry.arch == arch and entry.label == spelling


def test_linked_library_code_is_reported_apart():
    """The CUDA runtime's own cubin (no source name) is not ours."""
    data = build_container(build_entry("sass", Arch(7, 5))) + build_container(
        build_entry("sass", Arch(9, 0), SRC), build_entry("sass", Arch(8, 0), SRC)
    )
    code = embedded_code(parse_fatbin(data))
    assert code.sass == (Arch(8, 0), Arch(9, 0))
    assert code.linked_sass == (Arch(7, 5),)
    assert code.ptx == ()


def test_padding_between_containers_is_skipped():
    one = build_container(build_entry("sass", Arch(8, 0), SRC))
    data = one + b"\0" * 8 + build_container(build_entry("ptx", Arch(9, 0), SRC)) + b"\0" * 4
    assert [e.label for e in parse_fatbin(data)] == ["sm_80", "compute_90"]


def test_empty_section_has_no_code():
    assert parse_fatbin(b"") == []
    assert embedded_code([]).empty


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda d: b"\x01\x02\x03\x04" + d[4:], "no fat binary magic"),
        (lambda d: d[:10], "truncated container header"),
        (lambda d: d[:-3], "runs past the section"),
        (lambda d: d[:16] + struct.pack("<H", 7) + d[18:], "unknown kind"),
        (lambda d: d[:20] + struct.pack("<I", 4096) + d[24:], "runs past its container"),
        (lambda d: d[:44] + struct.pack("<I", 5) + d[48:], "names no CUDA arch"),
        (lambda d: d[:48] + struct.pack("<II", 60, 200) + d[56:], "name outside its header"),
    ],
)
def test_malformed_fatbins_raise_fatbin_error(mangle, message):
    data = build_container(build_entry("sass", Arch(8, 0), SRC, b"x" * 16))
    parse_fatbin(data)  # the unmangled one parses
    with pytest.raises(FatbinError, match=message):
        parse_fatbin(mangle(data))


archs = st.builds(
    Arch,
    major=st.integers(5, 12),
    minor=st.integers(0, 9),
    suffix=st.sampled_from(["", "a", "f"]),
)
entries = st.tuples(
    st.sampled_from(["sass", "ptx"]),
    archs,
    st.sampled_from(["", SRC, "k.cu"]),
    st.binary(max_size=40),
    st.booleans(),
)


@given(st.lists(st.lists(entries, min_size=1, max_size=4), max_size=4))
def test_every_written_entry_is_read_back(containers):
    data = b"".join(
        build_container(*(build_entry(k, a, n, p, compressed=c) for k, a, n, p, c in c_))
        for c_ in containers
    )
    flat = [e for c_ in containers for e in c_]
    parsed = parse_fatbin(data)
    assert [(e.kind, e.arch, e.name, e.compressed) for e in parsed] == [
        (k, a, n, c) for k, a, n, _, c in flat
    ]
    code = embedded_code(parsed)
    assert set(code.sass) == {a for k, a, n, _, _ in flat if k == "sass" and n}
    assert set(code.linked_sass) == {a for k, a, n, _, _ in flat if k == "sass" and not n}
    assert set(code.ptx) == {a for k, a, _, _, _ in flat if k == "ptx"}
