"""prebuild: fused CUDA kernels compiled ahead of time, loaded without JIT compilation.

``import prebuild`` is cheap: it imports neither torch nor the compiled libraries. The first
use of an op (``prebuild.fused_ssim`` or ``from prebuild import fused_ssim``) loads the
packaged libraries through ``prebuild.runtime`` and raises a typed ``prebuild.runtime``
error if this install cannot run them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prebuild.ops import *  # noqa: F403 - the ops, for type checkers and editors


def _ops() -> dict[str, str]:
    """The one list of the ops, ``prebuild.ops.OPS``, read when first needed: ``import prebuild``
    alone imports nothing more."""
    return importlib.import_module("prebuild.ops").OPS


def __getattr__(name: str) -> Any:
    if name == "__all__":  # `from prebuild import *`
        return [*sorted(_ops()), "__version__"]
    if name == "__version__":
        return _version()
    ops = (
        {} if name.startswith("__") else _ops()
    )  # a tool probing __wrapped__ & co. imports nothing
    if name in ops:
        return getattr(importlib.import_module(ops[name]), name)
    raise AttributeError(f"module 'prebuild' has no attribute {name!r}")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prebuild")
    except PackageNotFoundError:  # a checkout on sys.path: the version it was built as
        from pathlib import Path

        from prebuild.runtime.manifest import ManifestError, read_manifest

        try:
            return read_manifest(Path(__file__).parent).package_version
        except ManifestError:
            return "0+unknown"


def __dir__() -> list[str]:
    return sorted([*globals(), *_ops(), "__version__"])
