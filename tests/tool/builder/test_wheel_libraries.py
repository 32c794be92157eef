"""prebuild.tool.builder.wheel_libraries: a built wheel's libraries read back, their archs
checked against the request (an arch-specific variant counted as its arch, a device link's
lost PTX explained), and the CUDA libraries they link."""

from __future__ import annotations

import pytest

from prebuild.runtime.arch import parse_arch, parse_arch_list
from prebuild.runtime.manifest import BuiltLibrary, CompilerCall
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.wheel_libraries import check_archs

A = parse_arch_list


def lib(file, sass=(), ptx=()):
    return BuiltLibrary(
        file, "0" * 64, 1, tuple(parse_arch(a) for a in sass), tuple(parse_arch(a) for a in ptx)
    )


def test_check_archs_accepts_exactly_the_request_and_cpu_only_libraries():
    check_archs("x.whl", [lib("ext.so", ["sm_90"]), lib("cpu_helper.so")], A("sm_90"), ())
    check_archs(
        "x.whl",
        [lib("ext.so", ["sm_80", "sm_90"], ["compute_90"])],
        A("sm_80,sm_90"),
        A("compute_90"),
    )


@pytest.mark.parametrize(
    "libraries, fragment",
    [
        (
            [lib("fused_ssim_cuda.so", ["sm_75", "sm_80", "sm_89"])],
            "fused_ssim_cuda.so: SASS sm_75, sm_80, sm_89",
        ),
        ([lib("a.so", ["sm_90"]), lib("b.so", ["sm_80"])], "b.so: SASS sm_80"),
        ([lib("a.so", ["sm_90"], ["compute_90"])], "PTX compute_90"),
        ([lib("cpu_only.so")], "cpu_only.so: SASS none, PTX none"),
        ([], "no shared library at all"),
    ],
)
def test_check_archs_refuses_anything_else_naming_each_library(libraries, fragment):
    with pytest.raises(BuildError, match="No wheel was written") as info:
        check_archs("x.whl", libraries, A("sm_90"), ())
    assert fragment in str(info.value)


def test_an_arch_specific_variant_the_project_compiled_counts_as_its_arch_and_is_recorded():
    """A kernel compiled for sm_90a where sm_90 was asked (nvcc_shim.keep_specific) fits the
    request; the manifest records sm_90a, so that the guard holds GPUs to its rule."""
    from prebuild.tool.builder.wheel_libraries import as_asked, recorded_sass

    hopper = lib("ext.so", ["sm_80", "sm_90a"])
    check_archs("x.whl", [hopper], A("sm_80,sm_90"), ())
    assert as_asked(hopper.sass, A("sm_80,sm_90")) == A("sm_80,sm_90")
    assert as_asked(hopper.sass, A("sm_80")) == A("sm_80,sm_90a")  # not asked: itself
    assert recorded_sass((hopper,), A("sm_80,sm_90")) == A("sm_80,sm_90a")
    both = (lib("a.so", ["sm_90"]), lib("b.so", ["sm_90", "sm_90a"]))
    assert recorded_sass(both, A("sm_90")) == A("sm_90")  # every library holds sm_90 itself
    assert recorded_sass((*both, lib("c.so", ["sm_90a"])), A("sm_90")) == A("sm_90a")
    with pytest.raises(BuildError, match="SASS sm_90a"):
        check_archs("x.whl", [lib("ext.so", ["sm_90a"])], A("sm_80,sm_90"), ())


def test_ptx_a_device_link_cannot_keep_is_explained():
    """Relocatable device code (dlink=True, -rdc=true) is device-linked, which keeps SASS only:
    a wheel asked to carry PTX is refused saying why, and only where that is the cause."""
    from prebuild.tool.builder.shim_calls import is_device_linked

    calls = [
        CompilerCall(("-rdc=true", "-c", "a.cu"), ()),
        CompilerCall(("a.o", "-o", "dlink.o", "-dlink", "-dlto"), ()),
    ]
    assert is_device_linked(calls) and not is_device_linked(calls[:1])
    sass_only = [lib("ext.so", ["sm_80", "sm_90"])]
    with pytest.raises(BuildError, match="a device link keeps the SASS of each arch, never PTX"):
        check_archs("x.whl", sass_only, A("sm_80,sm_90"), A("compute_90"), device_linked=True)
    for libraries, device_linked in ((sass_only, False), ([lib("ext.so", ["sm_80"])], True)):
        with pytest.raises(BuildError) as info:
            check_archs("x.whl", libraries, A("sm_80,sm_90"), A("compute_90"), device_linked)
        assert "device-linked" not in str(info.value)


def test_host_code_that_calls_cuda_is_told_apart_from_cpu_code():
    """torch_memory_saver 0.0.10 calls the driver's memory API from C++ and has no kernels: its
    libraries link libcuda and libcudart, so its one wheel is CUDA host code (for every GPU of
    its CUDA major); a library linking no CUDA library is CPU code."""
    from prebuild.runtime.manifest import CPU_CODE, CUDA_HOST_CODE
    from prebuild.tool.builder.classic_messages import host_wheel_note
    from prebuild.tool.builder.wheel_libraries import cuda_links, host_code

    needed = {
        "tms_preload_cu13.abi3.so": ("libcuda.so.1", "libcudart.so.13", "libstdc++.so.6"),
        "tms_torch_cu13.abi3.so": ("libcudart.so.13", "libc.so.6"),
    }
    assert cuda_links(needed) == ["libcuda.so.1", "libcudart.so.13"]
    cpu_build = {"fused_adam_op.so": ("libc10.so", "libtorch.so", "libtorch_cpu.so")}
    assert cuda_links(cpu_build) == []
    assert cuda_links({"x.so": ("libtorch_cuda.so", "libc10_cuda.so")}) == [
        "libtorch_cuda.so",
        "libc10_cuda.so",
    ]
    assert host_code(cuda_links(needed)) == CUDA_HOST_CODE
    assert host_code(cuda_links(cpu_build)) == CPU_CODE
    note = host_wheel_note(CUDA_HOST_CODE, cuda_links(needed), "2.14", "13.0")
    assert "CUDA host code (it links libcuda.so.1, libcudart.so.13)" in note
    assert "every GPU, with torch 2.14 for CUDA 13" in note
    note = host_wheel_note(CPU_CODE, [], "2.14", "13.0")
    assert "CPU code only" in note and "any build of torch 2.14" in note
    # one not tied to its torch says so (ProjectManifest.torch_needed)
    note = host_wheel_note(CUDA_HOST_CODE, ["libcuda.so.1"], "of any release", "13.0")
    assert "every GPU, with torch of any release for CUDA 13" in note
