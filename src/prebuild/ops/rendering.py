"""``rasterization``: 3D Gaussians to images in one differentiable call.

Chains the three op families like gsplat 1.5.3's function of the same name (pinhole
cameras, "classic" or "antialiased" mode, colors given per Gaussian rather than as
spherical harmonics): ``fully_fused_projection`` -> ``isect_tiles`` ->
``isect_offset_encode`` -> ``rasterize_to_pixels``. Gradients reach means, quats, scales
(or covars), opacities, colors and backgrounds.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from prebuild.ops._checks import check_int
from prebuild.ops.intersect import isect_offset_encode, isect_tiles
from prebuild.ops.projection import fully_fused_projection
from prebuild.ops.rasterize import rasterize_to_pixels

RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")
RASTERIZE_MODES = ("classic", "antialiased")


def rasterization(
    means: torch.Tensor,
    quats: torch.Tensor | None,
    scales: torch.Tensor | None,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    viewmats: torch.Tensor,
    Ks: torch.Tensor,
    width: int,
    height: int,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    radius_clip: float = 0.0,
    eps2d: float = 0.3,
    tile_size: int = 16,
    backgrounds: torch.Tensor | None = None,
    render_mode: str = "RGB",
    rasterize_mode: str = "classic",
    covars: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Render N Gaussians into C pinhole cameras.

    Args:
        means: [N, 3] centres. quats [N, 4] (wxyz, need not be normalised) and scales
            [N, 3], or covars [N, 6] (upper triangle of each 3x3 covariance) instead.
        opacities: [N] in [0, 1]. colors: [N, D] or [C, N, D], D from 1 to 32.
        viewmats: [C, 4, 4] world-to-camera. Ks: [C, 3, 3] intrinsics. width, height: pixels.
        backgrounds: optional [C, D] colour behind the Gaussians.
        render_mode: "RGB" (the colors), "D" (accumulated depth), "ED" (expected depth:
            accumulated depth / alpha), or "RGB+D" / "RGB+ED" (depth as a last channel).
        rasterize_mode: "classic", or "antialiased" (opacities scaled by the projection's
            compensation factor, as gsplat's antialiased mode).

    Returns:
        ``(render_colors [C, H, W, D'], render_alphas [C, H, W, 1], meta)`` where meta holds
        the intermediate results (radii, means2d, depths, conics, tiles, intersections).
        The images are channels-last, as gsplat's: ``fused_ssim`` wants (B, C, H, W), so pass
        ``render_colors.permute(0, 3, 1, 2)``.
    """
    if render_mode not in RENDER_MODES:
        raise ValueError(f"rasterization: render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
    if rasterize_mode not in RASTERIZE_MODES:
        raise ValueError(
            f"rasterization: rasterize_mode must be one of {RASTERIZE_MODES}, got {rasterize_mode!r}"
        )
    check_int("rasterization", "tile_size", tile_size)
    if not isinstance(opacities, torch.Tensor) or opacities.dim() != 1:
        shape = tuple(opacities.shape) if isinstance(opacities, torch.Tensor) else type(opacities)
        raise ValueError(f"rasterization: opacities must be a [N] tensor, got {shape}")
    if not isinstance(colors, torch.Tensor) or colors.dim() not in (2, 3):
        shape = tuple(colors.shape) if isinstance(colors, torch.Tensor) else type(colors)
        raise ValueError(f"rasterization: colors must be [N, D] or [C, N, D], got {shape}")

    radii, means2d, depths, conics, compensations = fully_fused_projection(
        means, covars, quats, scales, viewmats, Ks, width, height,
        eps2d=eps2d, near_plane=near_plane, far_plane=far_plane, radius_clip=radius_clip,
        calc_compensations=rasterize_mode == "antialiased",
    )  # fmt: skip
    n_cameras = radii.shape[0]  # the projection has checked viewmats and Ks
    opacities_c = opacities.unsqueeze(0).expand(n_cameras, -1)
    if compensations is not None:
        opacities_c = opacities_c * compensations

    if colors.dim() == 2:
        colors = colors.unsqueeze(0).expand(n_cameras, -1, -1)
    if render_mode in ("D", "ED"):
        colors = depths.unsqueeze(-1)
        if backgrounds is not None:  # depth has no background (as gsplat)
            backgrounds = backgrounds.new_zeros(n_cameras, 1)
    elif render_mode in ("RGB+D", "RGB+ED"):
        colors = torch.cat([colors, depths.unsqueeze(-1)], dim=-1)
        if backgrounds is not None:  # no background behind the depth channel
            backgrounds = torch.cat([backgrounds, backgrounds.new_zeros(n_cameras, 1)], dim=-1)

    tile_width = math.ceil(width / tile_size)
    tile_height = math.ceil(height / tile_size)
    tiles_per_gauss, isect_ids, flatten_ids = isect_tiles(
        means2d, radii, depths, tile_size, tile_width, tile_height
    )
    isect_offsets = isect_offset_encode(isect_ids, n_cameras, tile_width, tile_height)
    render_colors, render_alphas = rasterize_to_pixels(
        means2d, conics, colors.contiguous(), opacities_c.contiguous(), width, height,
        tile_size, isect_offsets, flatten_ids, backgrounds=backgrounds,
    )  # fmt: skip
    if render_mode in ("ED", "RGB+ED"):
        # Expected depth: the accumulated depth normalised by the accumulated opacity.
        depth = render_colors[..., -1:] / render_alphas.clamp(min=1e-10)
        render_colors = torch.cat([render_colors[..., :-1], depth], dim=-1)

    meta = {
        "radii": radii, "means2d": means2d, "depths": depths, "conics": conics,
        "opacities": opacities_c, "compensations": compensations,
        "tile_size": tile_size, "tile_width": tile_width, "tile_height": tile_height,
        "tiles_per_gauss": tiles_per_gauss, "isect_ids": isect_ids, "flatten_ids": flatten_ids,
        "isect_offsets": isect_offsets, "width": width, "height": height, "n_cameras": n_cameras,
    }  # fmt: skip
    return render_colors, render_alphas, meta
