"""The runtime loader: loads prebuilt libraries, explains misfits, never compiles.

Reusable by any package that ships libraries with a ``_manifest.json`` written by
``prebuild.tool.builder``: ``load_package(Path(__file__).parent)``. Self-contained (relative
imports only), so it can be carried inside another package.
"""

from .errors import (
    CudaUnavailableError,
    DamagedInstallError,
    JitRefusedError,
    JitWarning,
    LibraryLoadError,
    NoCompiledLibraryError,
    PrebuildError,
    PTXJitWarning,
    TorchVersionError,
    UnsupportedGPUError,
    WheelMisfitError,
)

# The loader imports torch: only on first use, so that the tool's imports of
# ``prebuild.runtime.arch`` and ``prebuild.runtime.manifest`` stay light.
_LAZY = {"LoadedPackage", "load_package"}


def source_files() -> list[str]:
    """The paths of the runtime's own modules: what a wheel carries as its copy of it (a native
    project's ``_prebuild_runtime/``, a classic wheel's guard)."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(os.path.join(here, n) for n in os.listdir(here) if n.endswith(".py"))


def __getattr__(name: str):
    if name in _LAZY:
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CudaUnavailableError",
    "DamagedInstallError",
    "JitRefusedError",
    "JitWarning",
    "LibraryLoadError",
    "LoadedPackage",
    "NoCompiledLibraryError",
    "PTXJitWarning",
    "PrebuildError",
    "TorchVersionError",
    "UnsupportedGPUError",
    "WheelMisfitError",
    "load_package",
]
