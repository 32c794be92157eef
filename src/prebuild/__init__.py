"""prebuild: fused CUDA kernels compiled ahead of time, loaded without JIT compilation.

``import prebuild`` is cheap: it imports neither torch nor the compiled libraries. The first
use of an op (``prebuild.fused_ssim`` or ``from prebuild import fused_ssim``) loads the
packaged libraries through ``prebuild.runtime`` and raises a typed ``prebuild.runtime``
error if this install cannot run them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prebuild.ops.covariance import quat_scale_to_covar_preci
    from prebuild.ops.intersect import isect_offset_encode, isect_tiles
    from prebuild.ops.projection import fully_fused_projection, proj
    from prebuild.ops.rasterize import rasterize_to_pixels
    from prebuild.ops.relocation import compute_relocation
    from prebuild.ops.rendering import rasterization
    from prebuild.ops.sh import spherical_harmonics
    from prebuild.ops.ssim import fused_ssim

# The public ops and the module that defines each one.
_OPS = {
    "fully_fused_projection": "prebuild.ops.projection",
    "proj": "prebuild.ops.projection",
    "fused_ssim": "prebuild.ops.ssim",
    "isect_tiles": "prebuild.ops.intersect",
    "isect_offset_encode": "prebuild.ops.intersect",
    "rasterize_to_pixels": "prebuild.ops.rasterize",
    "rasterization": "prebuild.ops.rendering",
    "spherical_harmonics": "prebuild.ops.sh",
    "quat_scale_to_covar_preci": "prebuild.ops.covariance",
    "compute_relocation": "prebuild.ops.relocation",
}

__all__ = [*sorted(_OPS), "__version__"]


def __getattr__(name: str) -> Any:
    if name in _OPS:
        import importlib

        return getattr(importlib.import_module(_OPS[name]), name)
    if name == "__version__":
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
    raise AttributeError(f"module 'prebuild' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_OPS, "__version__"])
