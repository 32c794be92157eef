"""The public ops: a thin Python wrapper per op over ``torch.ops.prebuild.*``, with input
validation, autograd and fake (meta) kernels. Importing this package loads the libraries."""

from prebuild.ops.projection import fully_fused_projection
from prebuild.ops.ssim import fused_ssim

__all__ = ["fully_fused_projection", "fused_ssim"]
