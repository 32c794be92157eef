"""prebuild.runtime.compat: the rules between a wheel, the running torch and the GPU, with
made-up versions and capabilities (no GPU, no CUDA torch needed)."""

from __future__ import annotations

import pytest

from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.compat import (
    DeviceVerdict,
    cuda_major_error,
    device_verdict,
    load_failure_error,
    no_cuda_kernels_error,
    torch_version_error,
)
from prebuild.runtime.errors import (
    CudaUnavailableError,
    DamagedInstallError,
    LibraryLoadError,
    NoCompiledLibraryError,
    PrebuildError,
    TorchVersionError,
    UnsupportedGPUError,
)
from prebuild.runtime.manifest import Library, Manifest

CPU_LIB = Library("_C.abi3.so", "cpu", "0" * 64)
CUDA_LIB = Library("_C_cuda.abi3.so", "cuda", "1" * 64)


def manifest(sass="sm_80", ptx="", cuda="13.0", target="2.13") -> Manifest:
    return Manifest(
        package_version="0.1.0+test",
        torch_target=target,
        built_with_torch="2.13.0+cpu",
        cuda_version=cuda,
        sass_archs=parse_arch_list(sass),
        ptx_archs=parse_arch_list(ptx),
        libraries=(CPU_LIB, CUDA_LIB) if cuda else (CPU_LIB,),
    )


# --- error classes -----------------------------------------------------------------------


def test_error_hierarchy():
    for cls in (NoCompiledLibraryError, DamagedInstallError, TorchVersionError, LibraryLoadError):
        assert issubclass(cls, PrebuildError) and issubclass(cls, ImportError)
    for cls in (CudaUnavailableError, UnsupportedGPUError):
        assert issubclass(cls, PrebuildError) and not issubclass(cls, ImportError)
    assert issubclass(PrebuildError, RuntimeError)


# --- torch version -----------------------------------------------------------------------


def test_torch_too_old():
    error = torch_version_error(manifest(), "2.12.1")
    assert isinstance(error, TorchVersionError)
    message = str(error)
    assert "2.12.1" in message
    assert "2.13" in message
    assert "pip install 'torch>=2.13'" in message


@pytest.mark.parametrize("old", ["2.12.1", "2.12.0+cu128", "2.9.0", "1.13.1", "2.12.99"])
def test_torch_older_versions_refused(old):
    assert isinstance(torch_version_error(manifest(), old), TorchVersionError)


@pytest.mark.parametrize(
    "version", ["2.13.0", "2.13.0+cpu", "2.14.1+cu130", "2.13.0a0+git123", "2.13.1", "3.0.0"]
)
def test_torch_new_enough(version):
    assert torch_version_error(manifest(), version) is None


def test_torch_version_against_a_different_target():
    assert isinstance(torch_version_error(manifest(target="9.0"), "2.13.0"), TorchVersionError)
    assert torch_version_error(manifest(target="2.10"), "2.13.0") is None


# --- dynamic loader failures -------------------------------------------------------------

UNDEFINED = "/x/_C.abi3.so: undefined symbol: aoti_torch_foo"


def test_undefined_symbol_with_old_torch_is_a_torch_version_error():
    error = load_failure_error(manifest(), "_C.abi3.so", "2.12.1", UNDEFINED)
    assert isinstance(error, TorchVersionError)
    assert "2.12.1" in str(error) and "pip install" in str(error)


def test_undefined_symbol_with_new_enough_torch_is_explained():
    error = load_failure_error(manifest(), "_C.abi3.so", "2.13.0", UNDEFINED)
    assert isinstance(error, LibraryLoadError)
    assert not isinstance(error, TorchVersionError)
    message = str(error)
    assert "_C.abi3.so" in message
    assert "aoti_torch_foo" in message  # the loader's own words are kept
    assert "2.13.0+cpu" in message  # the torch it was built against
    assert "2.13.0" in message
    assert "stable ABI" in message
    assert "Reinstall" in message


def test_missing_dependency_is_explained():
    error = load_failure_error(
        manifest(),
        "_C.abi3.so",
        "2.13.0",
        "libtorch_cpu.so: cannot open shared object file: No such file or directory",
    )
    assert isinstance(error, LibraryLoadError)
    assert "is torch installed correctly" in str(error)


def test_a_runtime_older_than_the_build_machine_s_is_explained():
    """A wheel built on a newer machine than this one (its glibc or libstdc++)."""
    said = (
        "/usr/lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by "
        "/venv/lib/python3.11/site-packages/prebuild/_C.abi3.so)"
    )
    error = load_failure_error(manifest(), "_C.abi3.so", "2.13.0", said)
    assert isinstance(error, LibraryLoadError)
    message = str(error)
    assert message.startswith(
        f"cannot load _C.abi3.so: {said}. The wheel is not for this machine: "
    )
    assert "need GLIBCXX_3.4.29 of the C++ runtime (GCC 11's or newer)" in message
    assert "`prebuild wheel` in prebuild's source" in message


def test_other_load_failure_keeps_message():
    error = load_failure_error(manifest(), "_C.abi3.so", "2.13.0", "invalid ELF header")
    assert isinstance(error, LibraryLoadError)
    assert "cannot load _C.abi3.so: invalid ELF header" in str(error)


# --- CUDA major --------------------------------------------------------------------------


@pytest.mark.parametrize("torch_cuda", ["13.0", "13.2", "13.0.1"])
def test_same_cuda_major_ok(torch_cuda):
    assert cuda_major_error(manifest(cuda="13.0"), torch_cuda) is None


def test_cpu_torch_or_cpu_wheel_has_no_cuda_major_error():
    assert cuda_major_error(manifest(cuda="13.0"), None) is None
    assert cuda_major_error(manifest(cuda=None, sass=""), "12.8") is None


def test_different_cuda_major():
    error = cuda_major_error(manifest(cuda="13.0"), "12.8")
    assert isinstance(error, CudaUnavailableError)
    message = str(error)
    assert "13.0" in message and "12.8" in message
    assert "CUDA 12" in message  # which wheel to get
    assert "CPU ops are unaffected" in message


@pytest.mark.parametrize("ours, theirs", [("thirteen", "12.8"), ("13.0", "unknown")])
def test_unparseable_cuda_version_gives_a_typed_error(ours, theirs):
    error = cuda_major_error(manifest(cuda=ours), theirs)
    assert isinstance(error, CudaUnavailableError)  # cannot be shown to match: refuse
    assert ours in str(error) and theirs in str(error)


def test_no_cuda_kernels_error():
    error = no_cuda_kernels_error(manifest(cuda=None, sass=""))
    assert isinstance(error, CudaUnavailableError)
    assert "prebuild wheel --arch sm_XY" in str(error)
    assert "never compiled at run time" in str(error)


# --- one GPU -----------------------------------------------------------------------------


def test_native_code_ok():
    assert device_verdict(manifest("sm_80"), 0, "A10", (8, 6), strict=False) == DeviceVerdict()
    assert device_verdict(manifest("sm_80"), 0, "A100", (8, 0), strict=True) == DeviceVerdict()


def test_uncovered_gpu_is_an_error_with_the_fix():
    verdict = device_verdict(manifest("sm_80"), 1, "NVIDIA H100 80GB HBM3", (9, 0), strict=False)
    assert verdict.warning is None
    error = verdict.error
    assert isinstance(error, UnsupportedGPUError)
    message = str(error)
    assert "cuda:1" in message
    assert "NVIDIA H100 80GB HBM3" in message
    assert "9.0" in message
    assert "sm_80" in message
    assert "prebuild wheel --arch sm_90" in message
    assert "0.1.0+test" in message


def test_uncovered_gpu_names_all_archs_of_the_wheel():
    verdict = device_verdict(manifest("sm_80,sm_86", "compute_86"), 0, "T4", (7, 5), False)
    message = str(verdict.error)
    assert "sm_80, sm_86, compute_86" in message
    assert "prebuild wheel --arch sm_75" in message


def test_wheel_without_gpu_code():
    verdict = device_verdict(manifest(sass="", cuda=None), 0, "A100", (8, 0), strict=False)
    assert isinstance(verdict.error, UnsupportedGPUError)
    assert "no GPU arch" in str(verdict.error)


def test_ptx_only_is_a_warning():
    verdict = device_verdict(manifest("sm_80", "compute_80"), 0, "RTX 5090", (12, 0), False)
    assert verdict.error is None
    warning = verdict.warning
    assert warning is not None
    assert "PTX" in warning and "JIT" in warning
    assert "compute_80" in warning
    assert "cuda:0 (RTX 5090, compute capability 12.0)" in warning
    assert "prebuild wheel --arch sm_120" in warning


def test_ptx_only_strict_is_an_error():
    verdict = device_verdict(manifest("sm_80", "compute_80"), 0, "RTX 5090", (12, 0), True)
    assert verdict.warning is None
    assert isinstance(verdict.error, UnsupportedGPUError)
    message = str(verdict.error)
    assert "PREBUILD_STRICT" in message
    assert "PTX" in message and "JIT" in message


def test_strict_does_not_change_an_error():
    verdict = device_verdict(manifest("sm_80"), 0, "H100", (9, 0), True)
    assert isinstance(verdict.error, UnsupportedGPUError)
    assert "PREBUILD_STRICT" not in str(verdict.error)


def test_arch_specific_sass_only_on_its_gpu():
    m = manifest("sm_90a")
    assert device_verdict(m, 0, "H100", (9, 0), False) == DeviceVerdict()
    assert isinstance(device_verdict(m, 0, "GH?", (9, 1), False).error, UnsupportedGPUError)


def test_every_error_names_the_package_the_wheel_belongs_to():
    """A native project's wheel carries this loader: its errors name that package (and the
    `prebuild wheel` command that fixes them), not prebuild."""
    from dataclasses import replace

    demo = replace(manifest(sass="sm_80"), package="demo", package_version="0.3.0+cu130.sm80")
    messages = [
        str(device_verdict(demo, 0, "T4", (7, 5), strict=True).error),  # no SASS, no PTX for it
        str(torch_version_error(replace(demo, torch_target="2.14"), "2.13.0")),
        str(cuda_major_error(demo, "12.8")),
        str(no_cuda_kernels_error(replace(demo, cuda_version=None, libraries=(CPU_LIB,)))),
        str(load_failure_error(demo, "_C.abi3.so", "2.13.0", "undefined symbol: aoti_x")),
    ]
    for message in messages:
        assert (
            "demo" in message
            and "prebuild 0." not in message
            and "prebuild wheel built" not in message
        ), message
    assert "demo 0.3.0+cu130.sm80 cannot run on cuda:0 (T4" in messages[0]
    assert "prebuild wheel --arch sm_75" in messages[0]
    assert Manifest.from_json(demo.to_json()).package == "demo"
