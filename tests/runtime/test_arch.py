"""prebuild.runtime.arch: parsing arch spellings, checking them against nvcc, and which code runs
on which GPU (all with made-up compute capabilities: no GPU needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prebuild.runtime.arch import (
    Arch,
    ArchError,
    CodeChoice,
    CodeKind,
    arch_for_capability,
    check_supported,
    format_capability,
    parse_arch,
    parse_arch_list,
    ptx_runs_on,
    sass_runs_on,
    select_code,
)

# --- parse_arch --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("sm_80", Arch(8, 0)),
        ("sm80", Arch(8, 0)),
        ("80", Arch(8, 0)),
        ("8.0", Arch(8, 0)),
        ("sm_90a", Arch(9, 0, "a")),
        ("compute_90", Arch(9, 0)),
        ("compute_120", Arch(12, 0)),
        ("9.0a", Arch(9, 0, "a")),
        ("100f", Arch(10, 0, "f")),
        ("sm_100f", Arch(10, 0, "f")),
        ("SM_86", Arch(8, 6)),
        ("SM_90A", Arch(9, 0, "a")),
        ("  sm_89\t", Arch(8, 9)),
        ("\n120\n", Arch(12, 0)),
        ("12.1", Arch(12, 1)),
    ],
)
def test_parse_arch_accepts_spellings(text, expected):
    assert parse_arch(text) == expected


@pytest.mark.parametrize(
    "text", ["sm_8", "abc", "", "   ", "sm_80b", "8.10", "sm_", "8", "sm_8000"]
)
def test_parse_arch_rejects_garbage_with_helpful_message(text):
    with pytest.raises(ArchError) as info:
        parse_arch(text)
    message = str(info.value)
    assert repr(text) in message  # names what was given
    assert "sm_80" in message and "8.0" in message  # and how to write it


def test_arch_error_is_a_value_error():
    assert issubclass(ArchError, ValueError)


def test_arch_names():
    a = Arch(9, 0, "a")
    assert (a.number, a.sm, a.compute, a.tag, str(a)) == (
        "90a",
        "sm_90a",
        "compute_90a",
        "sm90a",
        "sm_90a",
    )
    assert a.capability == (9, 0)
    assert Arch(12, 0).sm == "sm_120"


@pytest.mark.parametrize("args", [(0, 0, ""), (8, 10, ""), (8, -1, ""), (9, 0, "b")])
def test_arch_constructor_refuses_impossible_values(args):
    with pytest.raises(ArchError):
        Arch(*args)


# --- parse_arch_list ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["sm_80,sm_90", "sm_80;sm_90", "sm_80 sm_90", " sm_90 , 80 ;8.0  sm_80\t9.0 ", "90,80,,"],
)
def test_parse_arch_list_separators_dedupe_and_sort(text):
    assert parse_arch_list(text) == (Arch(8, 0), Arch(9, 0))


def test_parse_arch_list_sorted_with_suffixes():
    assert parse_arch_list("sm_120,sm_90a,sm_75,sm_90,100f") == (
        Arch(7, 5),
        Arch(9, 0),
        Arch(9, 0, "a"),
        Arch(10, 0, "f"),
        Arch(12, 0),
    )


def test_parse_arch_list_from_iterable():
    assert parse_arch_list(["sm_90", "80", "sm_80", " "]) == (Arch(8, 0), Arch(9, 0))


@pytest.mark.parametrize("text", ["", "  ", ",;"])
def test_parse_arch_list_empty_means_cpu_only(text):
    assert parse_arch_list(text) == ()


def test_parse_arch_list_rejects_a_bad_item():
    with pytest.raises(ArchError, match="sm_8'"):
        parse_arch_list("sm_80,sm_8")


# --- check_supported ---------------------------------------------------------------------

NVCC_13 = parse_arch_list(
    "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_110 sm_103 sm_120 sm_121"
)


def test_check_supported_accepts_valid_list():
    check_supported(parse_arch_list("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120"), NVCC_13)
    check_supported((), NVCC_13)


@pytest.mark.parametrize("bad", ["sm_70", "sm_95"])
def test_check_supported_refuses_unknown_arch_and_lists_valid_ones(bad):
    with pytest.raises(ArchError) as info:
        check_supported(parse_arch_list(f"sm_80,{bad}"), NVCC_13)
    message = str(info.value)
    assert bad in message
    assert "sm_80," not in message.split("It builds")[0]  # only the bad one is blamed
    valid = message.split("It builds:")[1]
    for arch in NVCC_13:
        assert arch.sm in valid
    # listed in order
    positions = [valid.index(a.sm + ("," if a != NVCC_13[-1] else "")) for a in NVCC_13]
    assert positions == sorted(positions)


def test_check_supported_names_every_bad_arch():
    with pytest.raises(ArchError) as info:
        check_supported(parse_arch_list("sm_70,sm_95,sm_80"), NVCC_13)
    assert "sm_70, sm_95" in str(info.value)


@pytest.mark.parametrize("ok", ["sm_90a", "sm_100a", "sm_100f", "sm_120f", "sm_120a"])
def test_check_supported_suffixes_allowed(ok):
    check_supported([parse_arch(ok)], NVCC_13)


@pytest.mark.parametrize("bad", ["sm_80a", "sm_90f", "sm_86a", "sm_95a", "sm_130f"])
def test_check_supported_suffixes_refused(bad):
    with pytest.raises(ArchError, match=bad):
        check_supported([parse_arch(bad)], NVCC_13)


def test_check_supported_ignores_suffix_of_supported_list():
    # nvcc lists plain archs; a suffixed entry still counts for its base.
    check_supported([Arch(9, 0)], [Arch(9, 0, "a")])


# --- which code runs where ---------------------------------------------------------------


@pytest.mark.parametrize(
    "arch, capability, runs",
    [
        ("sm_80", (8, 0), True),
        ("sm_80", (8, 6), True),
        ("sm_80", (8, 9), True),
        ("sm_80", (9, 0), False),
        ("sm_80", (7, 5), False),
        ("sm_86", (8, 0), False),
        ("sm_86", (8, 6), True),
        ("sm_86", (8, 9), True),
        ("sm_90a", (9, 0), True),
        ("sm_90a", (9, 1), False),
        ("sm_90a", (10, 0), False),
        ("sm_90a", (8, 9), False),
        ("sm_100f", (10, 3), True),
        ("sm_100f", (10, 0), True),
        ("sm_100f", (11, 0), False),
        ("sm_120", (12, 1), True),
        ("sm_120", (10, 0), False),
    ],
)
def test_sass_runs_on(arch, capability, runs):
    assert sass_runs_on(parse_arch(arch), capability) is runs


@pytest.mark.parametrize(
    "arch, capability, runs",
    [
        ("compute_80", (8, 0), True),
        ("compute_80", (8, 6), True),
        ("compute_80", (9, 0), True),
        ("compute_80", (12, 0), True),
        ("compute_80", (7, 5), False),
        ("compute_90a", (9, 0), True),
        ("compute_90a", (9, 1), False),
        ("compute_90a", (10, 0), False),
        ("compute_90a", (12, 0), False),
        ("compute_100f", (10, 3), True),
        ("compute_100f", (12, 0), False),
        ("compute_100f", (9, 0), False),
    ],
)
def test_ptx_runs_on(arch, capability, runs):
    assert ptx_runs_on(parse_arch(arch), capability) is runs


def _sel(capability, sass, ptx=""):
    return select_code(capability, parse_arch_list(sass), parse_arch_list(ptx))


def test_select_code_prefers_sass_over_ptx():
    assert _sel((8, 0), "sm_80", "compute_80") == CodeChoice(CodeKind.SASS, Arch(8, 0))


def test_select_code_picks_newest_matching_sass():
    assert _sel((8, 9), "sm_80,sm_86,sm_90") == CodeChoice(CodeKind.SASS, Arch(8, 6))
    assert _sel((8, 6), "sm_80,sm_86,sm_89") == CodeChoice(CodeKind.SASS, Arch(8, 6))
    assert _sel((8, 0), "sm_80,sm_86") == CodeChoice(CodeKind.SASS, Arch(8, 0))


def test_select_code_falls_back_to_newest_fitting_ptx():
    assert _sel((12, 0), "sm_80,sm_90", "compute_80,compute_90") == CodeChoice(
        CodeKind.PTX, Arch(9, 0)
    )
    # PTX newer than the GPU does not run there.
    assert _sel((8, 6), "sm_90", "compute_80,compute_90") == CodeChoice(CodeKind.PTX, Arch(8, 0))


def test_select_code_none():
    assert _sel((7, 5), "sm_80,sm_90", "compute_90") == CodeChoice(CodeKind.NONE, None)
    assert _sel((9, 0), "sm_80", "") == CodeChoice(CodeKind.NONE, None)
    assert _sel((8, 6), "", "") == CodeChoice(CodeKind.NONE, None)
    assert _sel((9, 1), "sm_90a", "compute_90a") == CodeChoice(CodeKind.NONE, None)


def test_capability_helpers():
    assert format_capability((12, 0)) == "12.0"
    assert arch_for_capability((8, 6)) == Arch(8, 6)
    assert arch_for_capability((9, 0)).sm == "sm_90"


# --- properties --------------------------------------------------------------------------

# parse_arch reads up to three digits (major < 100): every real CUDA arch.
archs = st.builds(
    Arch,
    major=st.integers(1, 99),
    minor=st.integers(0, 9),
    suffix=st.sampled_from(["", "a", "f"]),
)
capabilities = st.tuples(st.integers(1, 20), st.integers(0, 9))


@given(archs)
def test_parse_round_trips_every_name(a):
    assert parse_arch(a.sm) == a
    assert parse_arch(a.compute) == a
    assert parse_arch(a.number) == a
    assert parse_arch(a.sm.upper()) == a
    assert parse_arch(f"{a.major}.{a.minor}{a.suffix}") == a


@given(st.lists(archs, max_size=6))
def test_parse_arch_list_round_trip(items):
    joined = ",".join(a.sm for a in items)
    assert parse_arch_list(joined) == tuple(sorted(set(items)))


@given(capabilities, st.lists(archs, max_size=5), st.lists(archs, max_size=5))
def test_select_code_is_consistent(capability, sass, ptx):
    choice = select_code(capability, sass, ptx)
    if choice.kind is CodeKind.SASS:
        assert choice.arch in sass
        assert sass_runs_on(choice.arch, capability)
        assert all(a <= choice.arch for a in sass if sass_runs_on(a, capability))
    elif choice.kind is CodeKind.PTX:
        assert choice.arch in ptx
        assert ptx_runs_on(choice.arch, capability)
        assert not any(sass_runs_on(a, capability) for a in sass)
    else:
        assert choice.arch is None
        assert not any(sass_runs_on(a, capability) for a in sass)
        assert not any(ptx_runs_on(a, capability) for a in ptx)


@given(archs, capabilities)
def test_sass_never_runs_on_other_major_or_older_gpu(a, capability):
    if sass_runs_on(a, capability):
        assert capability[0] == a.major and capability >= a.capability
        # and PTX of the same arch runs wherever its SASS does
        assert ptx_runs_on(a, capability)
