"""Typed, actionable errors of the runtime loader. Each message says what is wrong with this
install and the command that fixes it; none of them is ever answered by compiling."""

from __future__ import annotations


class PrebuildError(RuntimeError):
    """Base class: this install of a prebuild-packaged library cannot run as asked."""


class NoCompiledLibraryError(PrebuildError, ImportError):
    """The package has no compiled library (a source tree or a pure-Python install)."""


class DamagedInstallError(PrebuildError, ImportError):
    """The compiled library or its manifest is missing, truncated or does not match."""


class TorchVersionError(PrebuildError, ImportError):
    """The installed torch is older than the stable-ABI version the wheel was built for."""


class LibraryLoadError(PrebuildError, ImportError):
    """The dynamic loader refused the library for a reason other than the above."""


class CudaUnavailableError(PrebuildError):
    """CUDA tensors were given, but this install has no usable CUDA kernels for them
    (a CPU-only wheel, or a wheel whose CUDA major differs from torch's)."""


class UnsupportedGPUError(PrebuildError):
    """The GPU's compute capability is not covered by the code inside the wheel."""


class WheelMisfitError(PrebuildError, ImportError):
    """A classic wheel's import-time check: this torch or these GPUs cannot run what it holds."""


class JitRefusedError(PrebuildError):
    """A classic wheel's project tried to compile at run time what the wheel holds prebuilt."""


class JitWarning(UserWarning):
    """A classic wheel's project compiles an op at run time that the wheel does not hold."""


class PTXJitWarning(UserWarning):
    """The GPU runs the wheel's PTX through the driver's JIT (slower first call)."""
