"""prebuild.tool.index_keys: the index key a wheel's name says (``cu130-sm90``)."""

from __future__ import annotations

import pytest

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.index_keys import parse_index_key


@pytest.mark.parametrize(
    "local, expected",
    [
        ("cu130.sm90", ("cu130-sm90", "sm_90", "")),
        ("cu130.sm120.ptx120", ("cu130-sm120", "sm_120", "compute_120")),
        ("cu128.sm80.sm90.ptx90", ("cu128-sm80-sm90", "sm_80,sm_90", "compute_90")),
        ("cu130.sm90a", ("cu130-sm90a", "sm_90a", "")),
        ("cpu", None),
        (None, None),
        ("cu130", None),
        ("cu130.sm9x", None),
        ("cu130.foo", None),
        ("cuda.sm80", None),
        ("pt214.cu130.sm90", ("pt214-cu130-sm90", "sm_90", "")),
        (
            "lab1.pt214.cu130.sm80.sm90.ptx90",
            ("pt214-cu130-sm80-sm90", "sm_80,sm_90", "compute_90"),
        ),
        ("lab1.cu130.sm90", None),
        ("pt214.sm90", None),
        ("pt214.cu130", None),
        ("pt214.cu130.foo", None),
    ],
)
def test_parse_index_key(local, expected):
    v = parse_index_key(local)
    if expected is None:
        assert v is None
    else:
        assert (v.name, v.sass, v.ptx) == (
            expected[0],
            parse_arch_list(expected[1]),
            parse_arch_list(expected[2]),
        )
