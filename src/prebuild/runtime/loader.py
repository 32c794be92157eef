"""Loading a package's prebuilt libraries: load only, never compile.

``load_package(directory)`` reads the package's manifest, checks each library against it,
and loads the libraries with ``torch.ops.load_library`` by absolute path from that directory
alone. It spawns no process, writes no file, starts no thread, takes no lock, initialises no
CUDA and never touches torch's JIT extension builder, ``TORCH_EXTENSIONS_DIR`` or a cache.
The GPU is checked lazily, by ``ensure_device``, the first time each device is used.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import compat
from .errors import (
    DamagedInstallError,
    LibraryLoadError,
    NoCompiledLibraryError,
    PrebuildError,
    PTXJitWarning,
)
from .manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    check_libraries,
    library_path,
    read_manifest,
)

STRICT_ENV = "PREBUILD_STRICT"

_REINSTALL = (
    "Reinstall the wheel (pip install --force-reinstall --no-deps <the .whl file>) or, in a "
    "checkout, rebuild in place (pip install --no-build-isolation -e .)."
)


@dataclass
class LoadedPackage:
    """A package whose libraries are loaded; checks devices on first use."""

    directory: Path
    manifest: Manifest
    cuda_error: PrebuildError | None  # why CUDA tensors cannot run, if they cannot
    _checked_devices: set[int] = field(default_factory=set)

    def load_optional(self, kind: str) -> None:
        """Load a library kind this install may lack (``"simt"``: the test library built
        with PREBUILD_SIMT=1). Loading it twice is a no-op."""
        if self.manifest.library(kind) is None:
            raise NoCompiledLibraryError(
                f"this install of {self.manifest.package} {self.manifest.package_version} in {self.directory} "
                f"has no {kind} library. Rebuild it in place with it: "
                f"PREBUILD_SIMT=1 pip install --no-build-isolation -e ."
            )
        _load(self.directory, self.manifest, kind)

    def ensure_device(self, device: torch.device) -> None:
        """Raise a typed error if this install cannot run kernels on ``device``.

        Called before each launch on a CUDA device; the first call per device index reads
        its capability (by then the caller's tensors live there, so CUDA is already up).
        """
        if device.type != "cuda":
            return
        if self.cuda_error is not None:
            raise self.cuda_error
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index in self._checked_devices:
            return
        verdict = compat.device_verdict(
            self.manifest,
            index,
            torch.cuda.get_device_name(index),
            torch.cuda.get_device_capability(index),
            strict=os.environ.get(STRICT_ENV, "") == "1",
        )
        if verdict.error is not None:
            raise verdict.error
        if verdict.warning is not None:
            warnings.warn(verdict.warning, PTXJitWarning, stacklevel=3)
        self._checked_devices.add(index)


def _read_verified_manifest(directory: Path) -> Manifest:
    if not (directory / MANIFEST_NAME).exists():
        raise NoCompiledLibraryError(
            f"{directory} holds no compiled library ({MANIFEST_NAME} is missing): this is a "
            "source tree or a pure-Python install. Its kernels are never compiled at run time "
            "(prebuild's loader: JIT is disabled by design). Install a built wheel (build one with "
            "`prebuild wheel --arch sm_XY` in its source), or in a checkout run: "
            "pip install --no-build-isolation -e ."
        )
    try:
        manifest = read_manifest(directory)
        check_libraries(directory, manifest)  # sizes: cheap; sha256 is prebuild doctor's job
    except ManifestError as exc:
        raise DamagedInstallError(
            f"the install in {directory} is damaged: {exc}. {_REINSTALL}"
        ) from exc
    if manifest.library("cpu") is None:
        raise DamagedInstallError(f"the manifest in {directory} lists no CPU library. {_REINSTALL}")
    return manifest


def _check_namespace_free(directory: Path, manifest: Manifest) -> None:
    """Registering an op namespace a second time from another file crashes the process
    inside the dispatcher, so refuse it first: loading the *same* files again is harmless
    (the dynamic loader returns the library already loaded), loading another copy is not."""
    cpu = manifest.library("cpu")
    assert cpu is not None
    path = str(library_path(directory, cpu).resolve())
    if path in torch.ops.loaded_libraries:
        return
    prefix = manifest.op_namespace + "::"
    if any(name.startswith(prefix) for name in torch._C._dispatch_get_all_op_names()):
        others = sorted(p for p in torch.ops.loaded_libraries if p != path)
        raise LibraryLoadError(
            f"cannot load {path}: the op namespace '{manifest.op_namespace}' is already "
            f"registered in this process (by {', '.join(others) or 'another library'}). "
            "Two copies of the package are being loaded; import only one (check sys.path and "
            "`pip list` for a second install)."
        )


def _load(directory: Path, manifest: Manifest, kind: str) -> None:
    library = manifest.library(kind)
    assert library is not None
    path = library_path(directory, library).resolve()
    try:
        torch.ops.load_library(str(path))
    except OSError as exc:
        raise compat.load_failure_error(manifest, path.name, torch.__version__, str(exc)) from exc


def load_package(directory: str | os.PathLike[str]) -> LoadedPackage:
    """Load the libraries listed in ``directory/_manifest.json`` (see ``prebuild.runtime.manifest``).

    The CPU library (schemas and CPU kernels) is always loaded; the CUDA library only when
    torch is a CUDA build of the same CUDA major. Everything is checked before anything is
    loaded, so a damaged install raises without registering half of its ops.
    """
    directory = Path(directory).resolve()
    manifest = _read_verified_manifest(directory)
    too_old = compat.torch_version_error(manifest, torch.__version__)
    if too_old is not None:
        raise too_old

    cuda_error = None
    if not manifest.has_cuda:
        cuda_error = compat.no_cuda_kernels_error(manifest)
    elif torch.version.cuda is not None:
        cuda_error = compat.cuda_major_error(manifest, torch.version.cuda)

    _check_namespace_free(directory, manifest)
    _load(directory, manifest, "cpu")
    # On a CPU-only torch no CUDA tensor can exist, so the CUDA library is not loaded there.
    if manifest.has_cuda and torch.version.cuda is not None and cuda_error is None:
        _load(directory, manifest, "cuda")
    return LoadedPackage(directory, manifest, cuda_error)
