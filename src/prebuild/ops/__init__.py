"""The public ops: a thin Python wrapper per op family over ``torch.ops.prebuild.*``, with
input validation, autograd and fake (meta) kernels.

Each family's module is imported on first use of one of its ops (``prebuild.fused_ssim``
imports ``prebuild.ops.ssim`` only): importing a module loads the libraries once
(``prebuild.ops._library``) and registers that family's Python kernels.
``from prebuild.ops import *`` imports every family.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The one list of the public ops: each name and the module that defines it (``prebuild`` and
# ``prebuild doctor`` read it from here).
OPS = {
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

# What type checkers and editors see of OPS (tests/ops/test_public_ops.py holds them equal).
if TYPE_CHECKING:
    from prebuild.ops.covariance import quat_scale_to_covar_preci as quat_scale_to_covar_preci
    from prebuild.ops.intersect import (
        isect_offset_encode as isect_offset_encode,
    )
    from prebuild.ops.intersect import (
        isect_tiles as isect_tiles,
    )
    from prebuild.ops.projection import (
        fully_fused_projection as fully_fused_projection,
    )
    from prebuild.ops.projection import (
        proj as proj,
    )
    from prebuild.ops.rasterize import rasterize_to_pixels as rasterize_to_pixels
    from prebuild.ops.relocation import compute_relocation as compute_relocation
    from prebuild.ops.rendering import rasterization as rasterization
    from prebuild.ops.sh import spherical_harmonics as spherical_harmonics
    from prebuild.ops.ssim import fused_ssim as fused_ssim

__all__ = sorted(OPS)


def __getattr__(name: str) -> Any:
    if name in OPS:
        return getattr(importlib.import_module(OPS[name]), name)
    raise AttributeError(f"module 'prebuild.ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *OPS])
