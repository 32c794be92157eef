"""The public ops: a thin Python wrapper per op over ``torch.ops.prebuild.*``, with input
validation, autograd and fake (meta) kernels. Importing this package loads the libraries."""

from prebuild.ops.intersect import isect_offset_encode, isect_tiles
from prebuild.ops.projection import fully_fused_projection
from prebuild.ops.rasterization import rasterization
from prebuild.ops.rasterize import rasterize_to_pixels
from prebuild.ops.ssim import fused_ssim

__all__ = [
    "fully_fused_projection",
    "fused_ssim",
    "isect_offset_encode",
    "isect_tiles",
    "rasterization",
    "rasterize_to_pixels",
]
