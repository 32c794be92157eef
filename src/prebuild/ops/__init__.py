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

from prebuild import _OPS

if TYPE_CHECKING:
    from prebuild.ops.covariance import quat_scale_to_covar_preci
    from prebuild.ops.intersect import isect_offset_encode, isect_tiles
    from prebuild.ops.projection import fully_fused_projection, proj
    from prebuild.ops.relocation import compute_relocation
    from prebuild.ops.rendering import rasterization
    from prebuild.ops.sh import spherical_harmonics
    from prebuild.ops.rasterize import rasterize_to_pixels
    from prebuild.ops.ssim import fused_ssim

__all__ = sorted(_OPS)


def __getattr__(name: str) -> Any:
    if name in _OPS:
        return getattr(importlib.import_module(_OPS[name]), name)
    raise AttributeError(f"module 'prebuild.ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_OPS])
