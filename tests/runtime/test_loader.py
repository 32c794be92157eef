"""prebuild.runtime.loader: load_package on fake package directories (a copy of the real CPU
library plus a hand-written manifest), and LoadedPackage.ensure_device with a faked GPU.

Every call that might load a library runs in a fresh interpreter: a library that registers
the ``prebuild`` namespace can be loaded once per process only, and the point of several
tests is to show that a refused package registered no op at all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import prebuild
from prebuild.runtime import (
    CudaUnavailableError,
    DamagedInstallError,
    LoadedPackage,
    NoCompiledLibraryError,
    PTXJitWarning,
    UnsupportedGPUError,
    load_package,
)
from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.loader import STRICT_ENV
from prebuild.runtime.manifest import MANIFEST_NAME, Library, Manifest, sha256_file

REAL_LIBRARY = Path(prebuild.__file__).resolve().parent / "_C.abi3.so"
LIB = "_C.abi3.so"

pytestmark = pytest.mark.skipif(not REAL_LIBRARY.is_file(), reason="the CPU library is not built")


def cpu_manifest(sha256: str, **overrides) -> Manifest:
    fields = dict(
        package_version="0.1.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        libraries=(Library(LIB, "cpu", sha256),),
    )
    fields.update(overrides)
    return Manifest(**fields)


@pytest.fixture
def package(tmp_path) -> Path:
    """A complete CPU-only package directory: the real library and a matching manifest."""
    directory = tmp_path / "pkg"
    directory.mkdir()
    shutil.copyfile(REAL_LIBRARY, directory / LIB)
    cpu_manifest(sha256_file(directory / LIB)).write(directory)
    return directory


@pytest.fixture
def no_loading(monkeypatch):
    """For in-process calls that must refuse before loading: loading would fail the test
    (instead of registering a second copy of the namespace in the test process)."""

    def refuse(path):
        raise AssertionError(f"load_package loaded {path} although it should have refused")

    monkeypatch.setattr(torch.ops, "load_library", refuse)


# The child loads `directory` and reports what happened and which prebuild ops exist.
CHILD = r"""
import json, sys
import torch
from prebuild.runtime import load_package

def prebuild_ops():
    names = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("prebuild::"))
    try:
        torch.ops.prebuild.fused_ssim_forward
        attribute = True
    except (AttributeError, RuntimeError):
        attribute = False
    return names, attribute

result = {"ops_before": prebuild_ops()[0]}
try:
    package = load_package(sys.argv[1])
except Exception as exc:
    result["error"] = type(exc).__name__
    result["mro"] = [c.__name__ for c in type(exc).__mro__]
    result["message"] = str(exc)
else:
    result["error"] = None
    result["directory"] = str(package.directory)
    package.ensure_device(torch.device("cpu"))
    try:
        package.ensure_device(torch.device("cuda", 0))
    except Exception as exc:
        result["cuda_error"] = type(exc).__name__
        result["cuda_message"] = str(exc)
    x = torch.rand(1, 1, 16, 16)
    ssim_map, _ = torch.ops.prebuild.fused_ssim_forward(x, x, False)
    result["ssim_of_itself"] = ssim_map.mean().item()
    result["cuda_initialized"] = torch.cuda.is_initialized()
result["ops"], result["op_attribute"] = prebuild_ops()
print(json.dumps(result))
"""


def load_in_child(directory: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def installed_ops() -> list[str]:
    """The ops of the installed package's library, loaded in this process."""
    import prebuild.ops._library  # noqa: F401 - loads the installed libraries

    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("prebuild::"))


def assert_nothing_loaded(result: dict) -> None:
    assert result["ops_before"] == []
    assert result["ops"] == [], "a refused package registered ops"
    assert result["op_attribute"] is False


# --- a good package ----------------------------------------------------------------------


def test_cpu_only_package_loads(package):
    result = load_in_child(package)
    assert result["error"] is None
    assert result["directory"] == str(package.resolve())
    # Every op of the installed library (each op family adds its own), SSIM's among them.
    assert result["ops"] == installed_ops()
    assert {"prebuild::fused_ssim_backward", "prebuild::fused_ssim_forward"} <= set(result["ops"])
    assert result["op_attribute"] is True
    assert result["ssim_of_itself"] == pytest.approx(1.0, abs=1e-5)
    # a CPU-only install: CUDA tensors get a typed error; CPU ones pass
    assert result["cuda_error"] == "CudaUnavailableError"
    assert "no CUDA kernels" in result["cuda_message"]
    assert "prebuild wheel --arch" in result["cuda_message"]
    assert result["cuda_initialized"] is False


# --- packages that must be refused before anything is loaded -----------------------------


def test_no_manifest(tmp_path, no_loading):
    shutil.copyfile(REAL_LIBRARY, tmp_path / LIB)
    with pytest.raises(NoCompiledLibraryError) as info:
        load_package(tmp_path)  # no manifest: nothing can be loaded, safe in-process
    message = str(info.value)
    assert MANIFEST_NAME in message
    assert "JIT is disabled" in message
    assert "prebuild wheel --arch" in message
    assert "pip install --no-build-isolation -e ." in message
    assert isinstance(info.value, ImportError)


def test_no_manifest_loads_nothing(tmp_path):
    shutil.copyfile(REAL_LIBRARY, tmp_path / LIB)
    result = load_in_child(tmp_path)
    assert result["error"] == "NoCompiledLibraryError"
    assert_nothing_loaded(result)


def _missing_library(d: Path) -> None:
    (d / LIB).unlink()


def _truncated_library(d: Path) -> None:
    data = (d / LIB).read_bytes()
    (d / LIB).write_bytes(data[: len(data) // 2])


def _wrong_sha256(d: Path) -> None:
    cpu_manifest("0" * 64).write(d)


def _changed_byte(d: Path) -> None:
    data = bytearray((d / LIB).read_bytes())
    data[-1] ^= 0xFF
    (d / LIB).write_bytes(bytes(data))


def _wrong_size(d: Path) -> None:
    sha = sha256_file(d / LIB)
    cpu_manifest(sha, libraries=(Library(LIB, "cpu", sha, (d / LIB).stat().st_size + 1),)).write(d)


def _malformed_json(d: Path) -> None:
    (d / MANIFEST_NAME).write_text('{"schema": 1, "package_version": ', encoding="utf-8")


def _wrong_schema(d: Path) -> None:
    data = json.loads((d / MANIFEST_NAME).read_text())
    data["schema"] = 99
    (d / MANIFEST_NAME).write_text(json.dumps(data))


def _no_cpu_library(d: Path) -> None:
    sha = sha256_file(d / LIB)
    cpu_manifest(
        sha,
        libraries=(Library(LIB, "cuda", sha),),
        cuda_version="13.0",
        sass_archs=parse_arch_list("sm_80"),
    ).write(d)


def _library_outside(d: Path) -> None:
    shutil.copyfile(d / LIB, d.parent / LIB)
    cpu_manifest(
        sha256_file(d / LIB), libraries=(Library(f"../{LIB}", "cpu", sha256_file(d / LIB)),)
    ).write(d)


def _missing_cuda_library(d: Path) -> None:
    cpu_manifest(
        sha256_file(d / LIB),
        cuda_version="13.0",
        sass_archs=parse_arch_list("sm_80"),
        libraries=(
            Library(LIB, "cpu", sha256_file(d / LIB)),
            Library("_C_cuda.so", "cuda", "1" * 64),
        ),
    ).write(d)


DAMAGES = {
    "missing library": (_missing_library, "missing"),
    "truncated library": (_truncated_library, "does not match"),
    "wrong sha256": (_wrong_sha256, "does not match"),
    "changed byte": (_changed_byte, "does not match"),
    "wrong size": (_wrong_size, "bytes, expected"),
    "malformed json": (_malformed_json, "malformed"),
    "wrong schema": (_wrong_schema, "schema"),
    "no cpu library": (_no_cpu_library, "no CPU library"),
    "library outside the package": (_library_outside, "not a plain file name"),
    "missing cuda library": (_missing_cuda_library, "_C_cuda.so"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_install_is_refused(package, damage, no_loading):
    make_damage, detail = DAMAGES[damage]
    make_damage(package)
    # refused in the manifest checks, before any load: safe in-process
    with pytest.raises(DamagedInstallError) as info:
        load_package(package)
    message = str(info.value)
    assert detail in message
    assert "damaged" in message or "lists no CPU library" in message
    assert "Reinstall" in message
    assert "pip install --force-reinstall" in message
    assert isinstance(info.value, ImportError)


@pytest.mark.parametrize(
    "damage",
    ["missing library", "truncated library", "wrong sha256", "wrong size", "malformed json"],
)
def test_damaged_install_loads_nothing(package, damage):
    DAMAGES[damage][0](package)
    result = load_in_child(package)
    assert result["error"] == "DamagedInstallError"
    assert "Reinstall" in result["message"]
    assert_nothing_loaded(result)


def test_manifest_not_utf8_is_damaged(package, no_loading):
    (package / MANIFEST_NAME).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DamagedInstallError):
        load_package(package)


def test_torch_too_old_is_refused_before_loading(package):
    cpu_manifest(sha256_file(package / LIB), torch_target="9.0").write(package)
    result = load_in_child(package)
    assert result["error"] == "TorchVersionError"
    assert "ImportError" in result["mro"]
    assert "torch >= 9.0" in result["message"]
    assert torch.__version__ in result["message"]
    assert "pip install 'torch>=9.0'" in result["message"]
    assert_nothing_loaded(result)


# --- ensure_device with a faked GPU ------------------------------------------------------


def gpu_manifest(sass: str, ptx: str = "") -> Manifest:
    return Manifest(
        package_version="0.1.0+cu130.test",
        torch_target="2.13",
        built_with_torch="2.13.0+cu130",
        cuda_version="13.0",
        sass_archs=parse_arch_list(sass),
        ptx_archs=parse_arch_list(ptx),
        libraries=(Library(LIB, "cpu", "0" * 64), Library("_C_cuda.abi3.so", "cuda", "1" * 64)),
    )


@pytest.fixture
def fake_gpu(monkeypatch):
    """Pretend torch sees GPUs: ``fake_gpu[index] = (name, capability)``; counts the calls."""
    gpus: dict[int, tuple[str, tuple[int, int]]] = {0: ("Fake H100", (9, 0))}
    calls = {"capability": 0}

    def capability(index=None):
        calls["capability"] += 1
        return gpus[index][1]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: gpus[index][0])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv(STRICT_ENV, raising=False)
    gpus["calls"] = calls  # type: ignore[assignment]
    return gpus


def loaded(manifest: Manifest, tmp_path: Path, cuda_error=None) -> LoadedPackage:
    return LoadedPackage(tmp_path, manifest, cuda_error=cuda_error)


def test_ensure_device_cpu_is_a_no_op(tmp_path, fake_gpu):
    package = loaded(gpu_manifest("sm_80"), tmp_path, cuda_error=CudaUnavailableError("x"))
    package.ensure_device(torch.device("cpu"))
    package.ensure_device(torch.device("meta"))
    assert fake_gpu["calls"]["capability"] == 0


def test_ensure_device_native(tmp_path, fake_gpu):
    package = loaded(gpu_manifest("sm_80,sm_90"), tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        package.ensure_device(torch.device("cuda", 0))
        package.ensure_device(torch.device("cuda"))  # index from current_device()
    assert fake_gpu["calls"]["capability"] == 1  # checked once per device


def test_ensure_device_uncovered_gpu(tmp_path, fake_gpu):
    package = loaded(gpu_manifest("sm_80"), tmp_path)
    with pytest.raises(UnsupportedGPUError) as info:
        package.ensure_device(torch.device("cuda", 0))
    message = str(info.value)
    assert "cuda:0" in message and "Fake H100" in message and "9.0" in message
    assert "prebuild wheel --arch sm_90" in message
    # and it keeps refusing: an error is not cached as a success
    with pytest.raises(UnsupportedGPUError):
        package.ensure_device(torch.device("cuda", 0))


def test_ensure_device_checks_each_device(tmp_path, fake_gpu):
    fake_gpu[1] = ("Fake A100", (8, 0))
    fake_gpu[2] = ("Fake T4", (7, 5))
    package = loaded(gpu_manifest("sm_80,sm_90"), tmp_path)
    package.ensure_device(torch.device("cuda", 0))
    package.ensure_device(torch.device("cuda", 1))
    with pytest.raises(UnsupportedGPUError, match="cuda:2 \\(Fake T4"):
        package.ensure_device(torch.device("cuda", 2))


def test_ensure_device_ptx_warns_once(tmp_path, fake_gpu):
    fake_gpu[0] = ("Fake RTX 5090", (12, 0))
    package = loaded(gpu_manifest("sm_80", "compute_80"), tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # dedup must come from prebuild, not the registry
        package.ensure_device(torch.device("cuda", 0))
        package.ensure_device(torch.device("cuda", 0))
        package.ensure_device(torch.device("cuda"))
    jit = [w for w in caught if issubclass(w.category, PTXJitWarning)]
    assert len(jit) == 1
    text = str(jit[0].message)
    assert "PTX" in text and "JIT" in text and "Fake RTX 5090" in text
    assert "prebuild wheel --arch sm_120" in text


def test_ensure_device_ptx_strict(tmp_path, fake_gpu, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    fake_gpu[0] = ("Fake RTX 5090", (12, 0))
    package = loaded(gpu_manifest("sm_80", "compute_80"), tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnsupportedGPUError, match="PREBUILD_STRICT"):
            package.ensure_device(torch.device("cuda", 0))


@pytest.mark.parametrize("value", ["0", "", "true"])
def test_ensure_device_strict_only_when_1(tmp_path, fake_gpu, monkeypatch, value):
    monkeypatch.setenv(STRICT_ENV, value)
    fake_gpu[0] = ("Fake RTX 5090", (12, 0))
    package = loaded(gpu_manifest("sm_80", "compute_80"), tmp_path)
    with pytest.warns(PTXJitWarning):
        package.ensure_device(torch.device("cuda", 0))


def test_ensure_device_cuda_error_wins(tmp_path, fake_gpu):
    error = CudaUnavailableError("built with CUDA 13.0, torch uses CUDA 12.8")
    package = loaded(gpu_manifest("sm_90"), tmp_path, cuda_error=error)
    with pytest.raises(CudaUnavailableError) as info:
        package.ensure_device(torch.device("cuda", 0))
    assert info.value is error
    assert fake_gpu["calls"]["capability"] == 0


# --- a second copy in one process -------------------------------------------------------

SECOND_COPY = """
import json, sys, torch
import prebuild.ops._library  # the installed copy registers the 'prebuild' namespace
from prebuild.runtime import load_package
try:
    load_package(sys.argv[1])
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"error": None}))
again = load_package(prebuild.ops._library.LIBRARY.directory)  # the same files: harmless
x = torch.rand(1, 1, 12, 12)
print(json.dumps({"again": str(again.directory), "ok": prebuild.fused_ssim(x, x).item()}))
"""


def test_second_copy_in_one_process_is_refused_not_a_crash(package):
    """Registering the op namespace from a second file would crash inside the dispatcher
    (segfault); the loader refuses it with a typed error, and reloading the same files is
    a harmless no-op."""
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_COPY, str(package)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert first["error"] == "LibraryLoadError"
    assert "already registered" in first["message"] and "Two copies" in first["message"]
    assert second["ok"] == pytest.approx(1.0, abs=1e-6)
