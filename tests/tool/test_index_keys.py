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
        # a stable-ABI classic wheel names no torch, behind the project's own label
        ("lab1.cu130.sm90", ("cu130-sm90", "sm_90", "")),
        ("pt214.sm90", None),
        ("pt214.cu130", None),
        ("pt214.cu130.foo", None),
        # host wheels (no GPU code): always another project's, tied to a torch or (the stable
        # ABI alone, or no torch ABI) to none: CPU code then says cpu.host (+cpu is prebuild's)
        ("cpu.host", ("cpu", "", "")),
        ("lab1.cpu.host", ("cpu", "", "")),
        ("cpu.host.sm90", None),
        ("pt214.cu130.host", ("pt214-cu130-host", "", "")),
        ("pt214.cpu", ("pt214-cpu", "", "")),
        ("lab1.pt214.cpu", ("pt214-cpu", "", "")),
        ("cu130.host", ("cu130-host", "", "")),
        ("lab1.cu130.host", ("cu130-host", "", "")),
        ("pt214.cu130.host.sm90", None),
        ("pt214.cpu.sm90", None),
        ("pt214.cu130.sm90.host", None),
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


def test_host_keys_serve_every_index_of_their_torch_and_cuda():
    cuda_host, cpu = parse_index_key("pt214.cu130.host"), parse_index_key("pt214.cpu")
    assert cuda_host.host and cpu.host and not parse_index_key("pt214.cu130.sm90").host
    assert (cuda_host.cuda_version, cpu.cuda_version) == ("13.0", None)
    serves = {
        local: (cuda_host.serves(parse_index_key(local)), cpu.serves(parse_index_key(local)))
        for local in ("pt214.cu130.sm90", "pt214.cu128.sm80", "pt213.cu130.sm90", "cu130.sm90")
    }
    assert serves == {
        "pt214.cu130.sm90": (True, True),
        "pt214.cu128.sm80": (False, True),  # CPU code needs no CUDA
        "pt213.cu130.sm90": (False, False),  # another torch's C++ ABI
        "cu130.sm90": (False, False),  # prebuild's own stable-ABI wheels' index
    }
    # one that names no torch serves every torch's index of its CUDA (CPU code: every one)
    untied_host, untied_cpu = parse_index_key("cu130.host"), parse_index_key("cpu.host")
    assert [
        (untied_host.serves(parse_index_key(local)), untied_cpu.serves(parse_index_key(local)))
        for local in ("pt214.cu130.sm90", "pt213.cu130.sm90", "cu130.sm90", "pt214.cu128.sm80")
    ] == [(True, True), (True, True), (True, True), (False, True)]
    # a GPU wheel's key serves its own index only
    gpu = parse_index_key("pt214.cu130.sm90")
    assert gpu.serves(gpu) and not gpu.serves(parse_index_key("pt214.cu130.sm80"))
    assert not gpu.serves(cuda_host)
