"""The runtime loader: loads prebuilt libraries, explains misfits, never compiles.

Reusable by any package that ships libraries with a ``_manifest.json`` written by
``prebuild.build``: ``load_package(Path(__file__).parent)``.
"""

from prebuild.runtime.errors import (
    CudaUnavailableError,
    DamagedInstallError,
    LibraryLoadError,
    NoCompiledLibraryError,
    PrebuildError,
    PTXJitWarning,
    TorchVersionError,
    UnsupportedGPUError,
)
from prebuild.runtime.loader import LoadedPackage, load_package

__all__ = [
    "CudaUnavailableError",
    "DamagedInstallError",
    "LibraryLoadError",
    "LoadedPackage",
    "NoCompiledLibraryError",
    "PTXJitWarning",
    "PrebuildError",
    "TorchVersionError",
    "UnsupportedGPUError",
    "load_package",
]
