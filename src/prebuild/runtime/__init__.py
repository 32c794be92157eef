"""The runtime loader: loads prebuilt libraries, explains misfits, never compiles.

Reusable by any package that ships libraries with a ``_manifest.json`` written by
``prebuild.tool.builder``: ``load_package(Path(__file__).parent)``. Self-contained (relative
imports only), so it can be carried inside another package.
"""

# Not typing.TYPE_CHECKING: importing typing costs ~10 ms, at every start-up of a guarded Python.
TYPE_CHECKING = False

# Nothing is imported until asked for: a classic wheel's guard imports this package at every
# Python start-up (its .pth), and the loader imports torch. name -> the module defining it.
_LAZY = {
    "LoadedPackage": "loader",
    "load_package": "loader",
    **{
        name: "errors"
        for name in (
            "CudaUnavailableError",
            "DamagedInstallError",
            "JitRefusedError",
            "JitWarning",
            "LibraryLoadError",
            "NoCompiledLibraryError",
            "PrebuildError",
            "PTXJitWarning",
            "TorchVersionError",
            "UnsupportedGPUError",
            "WheelMisfitError",
        )
    },
}

if TYPE_CHECKING:
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
    from .loader import LoadedPackage, load_package


def source_files() -> list[str]:
    """The paths of the runtime's own modules: what a wheel carries as its copy of it (a native
    project's ``_prebuild_runtime/``, a classic wheel's guard)."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(os.path.join(here, n) for n in os.listdir(here) if n.endswith(".py"))


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
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
