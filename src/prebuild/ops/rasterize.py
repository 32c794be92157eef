"""Tile-based Gaussian rasterization: ``rasterize_to_pixels`` (gsplat 1.5.3 compatible).

The kernels are ``torch.ops.prebuild.rasterize_to_pixels_forward`` / ``_backward``
(csrc/gsplat/rasterize*.h); autograd and fake kernels are registered here.
"""

from __future__ import annotations

import torch

from prebuild.ops._checks import (
    TILE_GRID_MISMATCH,
    check_dtype,
    check_float32,
    check_int,
    check_same_devices,
    check_tensor,
    shape_error,
    tile_grid,
)
from prebuild.ops._library import LIBRARY

_NAME = "rasterize_to_pixels"


def _check_inputs(means2d, conics, colors, opacities, image_width, image_height, tile_size,
                  isect_offsets, flatten_ids, backgrounds) -> None:
    means2d = check_tensor(_NAME, "means2d", means2d, torch.float32)
    if means2d.dim() != 3 or means2d.shape[2] != 2:
        raise shape_error(_NAME, "means2d", "[C, N, 2]", means2d)
    C, N = means2d.shape[:2]
    conics = check_tensor(_NAME, "conics", conics, torch.float32)
    if tuple(conics.shape) != (C, N, 3):
        raise shape_error(_NAME, "conics", f"[C, N, 3] = [{C}, {N}, 3]", conics)
    colors = check_tensor(_NAME, "colors", colors, torch.float32)
    if colors.dim() != 3 or tuple(colors.shape[:2]) != (C, N):
        raise shape_error(_NAME, "colors", f"[C, N, D] = [{C}, {N}, D]", colors)
    D = colors.shape[2]
    if D < 1:
        raise ValueError(f"{_NAME}: colors must have at least one channel (D >= 1), got D = 0")
    opacities = check_tensor(_NAME, "opacities", opacities, torch.float32)
    if tuple(opacities.shape) not in ((C, N), (N,)):
        raise shape_error(_NAME, "opacities", f"[C, N] = [{C}, {N}] or [N] = [{N}]", opacities)
    W = check_int(_NAME, "image_width", image_width)
    H = check_int(_NAME, "image_height", image_height)
    tile = check_int(_NAME, "tile_size", tile_size)
    isect_offsets = check_tensor(_NAME, "isect_offsets", isect_offsets, torch.int32)
    grid = tile_grid(C, H, W, tile)
    if tuple(isect_offsets.shape) != grid:
        raise ValueError(
            f"{_NAME}: {TILE_GRID_MISMATCH}: expected shape "
            f"[C, ceil(H / tile_size), ceil(W / tile_size)] = {list(grid)} for tile_size={tile}, "
            f"got {list(isect_offsets.shape)}"
        )
    flatten_ids = check_tensor(_NAME, "flatten_ids", flatten_ids, torch.int32)
    if flatten_ids.dim() != 1:
        raise shape_error(_NAME, "flatten_ids", "[M] (1-D)", flatten_ids)
    tensors = {"means2d": means2d, "conics": conics, "colors": colors, "opacities": opacities,
               "isect_offsets": isect_offsets, "flatten_ids": flatten_ids}
    if backgrounds is not None:
        backgrounds = check_tensor(_NAME, "backgrounds", backgrounds, torch.float32)
        if tuple(backgrounds.shape) != (C, D):
            raise shape_error(_NAME, "backgrounds", f"[C, D] = [{C}, {D}]", backgrounds)
        tensors["backgrounds"] = backgrounds
    devices = {t.device for t in tensors.values()}
    if len(devices) != 1:
        raise ValueError(
            f"{_NAME}: all tensors must be on the same device, got "
            + ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        )
    if means2d.is_cuda and tile * tile > 1024:
        raise ValueError(
            f"{_NAME}: tile_size must be at most 32 on CUDA (one thread per pixel of a tile, "
            f"tile_size^2 <= 1024), got {tile}"
        )


def rasterize_to_pixels(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    image_width: int,
    image_height: int,
    tile_size: int,
    isect_offsets: torch.Tensor,
    flatten_ids: torch.Tensor,
    backgrounds: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alpha-composites depth-sorted 2D Gaussians per tile, as gsplat 1.5.3's function.

    Args:
        means2d: [C, N, 2] projected means (pixels). conics: [C, N, 3] inverse 2D covariances
            (a, b, c). colors: [C, N, D], any D >= 1. opacities: [C, N], or [N] shared by
            the cameras. All float32.
        image_width, image_height, tile_size: positive ints (tile_size <= 32 on CUDA).
        isect_offsets: [C, ceil(H / tile_size), ceil(W / tile_size)] int32, the start of each
            tile's run in flatten_ids. flatten_ids: [M] int32, camera_id * N + gaussian_id,
            sorted by (camera, tile, depth) (gsplat's isect_tiles + isect_offset_encode).
        backgrounds: optional [C, D] float32, added as (1 - alpha) * background.

    Returns:
        (render_colors [C, H, W, D], render_alphas [C, H, W, 1]). Differentiable with respect
        to means2d, conics, colors, opacities and backgrounds.
    """
    _check_inputs(means2d, conics, colors, opacities, image_width, image_height, tile_size,
                  isect_offsets, flatten_ids, backgrounds)
    if means2d.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(means2d.device)
    C, N = means2d.shape[:2]
    if opacities.dim() == 1:  # shared by the cameras; autograd sums the gradient back
        opacities = opacities.unsqueeze(0).expand(C, N)
    render_colors, render_alphas, _ = torch.ops.prebuild.rasterize_to_pixels_forward(
        means2d.contiguous(), conics.contiguous(), colors.contiguous(), opacities.contiguous(),
        None if backgrounds is None else backgrounds.contiguous(), image_width, image_height,
        tile_size, isect_offsets.contiguous(), flatten_ids.contiguous(),
    )
    return render_colors, render_alphas


def _fake_checks(op, means2d, conics, colors, opacities, backgrounds, image_width,
                 image_height, tile_size, isect_offsets, flatten_ids):
    torch._check(means2d.dim() == 3 and means2d.shape[2] == 2,
                 lambda: f"{op}: means2d must have shape [C, N, 2]")
    C, N = means2d.shape[:2]
    torch._check(conics.shape == (C, N, 3), lambda: f"{op}: conics must have shape [C, N, 3]")
    torch._check(colors.dim() == 3 and colors.shape[:2] == (C, N),
                 lambda: f"{op}: colors must have shape [C, N, D]")
    D = colors.shape[2]
    torch._check(D >= 1, lambda: f"{op}: colors must have at least one channel (D >= 1)")
    torch._check(opacities.shape == (C, N), lambda: f"{op}: opacities must have shape [C, N]")
    torch._check(tile_size >= 1, lambda: f"{op}: tile_size must be positive")
    torch._check(image_width >= 1 and image_height >= 1,
                 lambda: f"{op}: image_width and image_height must be positive")
    grid = tile_grid(C, image_height, image_width, tile_size)
    torch._check(isect_offsets.shape == grid, lambda: f"{op}: {TILE_GRID_MISMATCH}")
    torch._check(flatten_ids.dim() == 1, lambda: f"{op}: flatten_ids must be 1-D")
    tensors = dict(means2d=means2d, conics=conics, colors=colors, opacities=opacities)
    if backgrounds is not None:
        torch._check(backgrounds.shape == (C, D), lambda: f"{op}: backgrounds must have shape [C, D]")
        tensors["backgrounds"] = backgrounds
    check_float32(op, **tensors)
    check_dtype(op, torch.int32, isect_offsets=isect_offsets, flatten_ids=flatten_ids)
    check_same_devices(op, **tensors, isect_offsets=isect_offsets, flatten_ids=flatten_ids)
    return C, N, D


@torch.library.register_fake("prebuild::rasterize_to_pixels_forward")
def _forward_fake(means2d, conics, colors, opacities, backgrounds, image_width, image_height,
                  tile_size, isect_offsets, flatten_ids):
    C, _, D = _fake_checks("prebuild::rasterize_to_pixels_forward", means2d, conics, colors,
                           opacities, backgrounds, image_width, image_height, tile_size,
                           isect_offsets, flatten_ids)
    H, W = image_height, image_width
    return (means2d.new_empty((C, H, W, D)), means2d.new_empty((C, H, W, 1)),
            means2d.new_empty((C, H, W), dtype=torch.int32))


@torch.library.register_fake("prebuild::rasterize_to_pixels_backward")
def _backward_fake(means2d, conics, colors, opacities, backgrounds, image_width, image_height,
                   tile_size, isect_offsets, flatten_ids, render_alphas, last_ids,
                   v_render_colors, v_render_alphas):
    op = "prebuild::rasterize_to_pixels_backward"
    C, N, D = _fake_checks(op, means2d, conics, colors, opacities, backgrounds, image_width,
                           image_height, tile_size, isect_offsets, flatten_ids)
    H, W = image_height, image_width
    torch._check(render_alphas.shape == (C, H, W, 1), lambda: f"{op}: render_alphas must have shape [C, H, W, 1]")
    torch._check(last_ids.shape == (C, H, W), lambda: f"{op}: last_ids must have shape [C, H, W]")
    torch._check(v_render_colors.shape == (C, H, W, D), lambda: f"{op}: v_render_colors must have shape [C, H, W, D]")
    torch._check(v_render_alphas.shape == (C, H, W, 1), lambda: f"{op}: v_render_alphas must have shape [C, H, W, 1]")
    check_float32(op, render_alphas=render_alphas, v_render_colors=v_render_colors,
                  v_render_alphas=v_render_alphas)
    check_dtype(op, torch.int32, last_ids=last_ids)
    check_same_devices(op, means2d=means2d, render_alphas=render_alphas, last_ids=last_ids,
                       v_render_colors=v_render_colors, v_render_alphas=v_render_alphas)
    return (means2d.new_empty((C, N, 2)), means2d.new_empty((C, N, 3)),
            means2d.new_empty((C, N, D)), means2d.new_empty((C, N)))


def _setup_context(ctx, inputs, output) -> None:
    (means2d, conics, colors, opacities, backgrounds, width, height, tile_size, isect_offsets,
     flatten_ids) = inputs
    _, render_alphas, last_ids = output
    ctx.save_for_backward(means2d, conics, colors, opacities, backgrounds, isect_offsets,
                          flatten_ids, render_alphas, last_ids)
    ctx.sizes = (width, height, tile_size)
    ctx.mark_non_differentiable(last_ids)


def _backward(ctx, v_render_colors, v_render_alphas, _v_last_ids):
    (means2d, conics, colors, opacities, backgrounds, isect_offsets, flatten_ids,
     render_alphas, last_ids) = ctx.saved_tensors
    width, height, tile_size = ctx.sizes
    C, N, D = colors.shape
    if v_render_colors is None:
        v_render_colors = colors.new_zeros((C, height, width, D))
    if v_render_alphas is None:
        v_render_alphas = colors.new_zeros((C, height, width, 1))
    v_render_colors = v_render_colors.contiguous()
    v_means2d, v_conics, v_colors, v_opacities = torch.ops.prebuild.rasterize_to_pixels_backward(
        means2d, conics, colors, opacities, backgrounds, width, height, tile_size,
        isect_offsets, flatten_ids, render_alphas, last_ids, v_render_colors,
        v_render_alphas.contiguous(),
    )
    v_backgrounds = None
    if backgrounds is not None and ctx.needs_input_grad[4]:
        v_backgrounds = (v_render_colors * (1.0 - render_alphas)).sum(dim=(1, 2))
    return (v_means2d, v_conics, v_colors, v_opacities, v_backgrounds,
            None, None, None, None, None)


def _no_double_backward(ctx, *grads):
    raise NotImplementedError(
        "rasterize_to_pixels does not support double backward (second derivatives)"
    )


torch.library.register_autograd(
    "prebuild::rasterize_to_pixels_forward", _backward, setup_context=_setup_context
)
torch.library.register_autograd(
    "prebuild::rasterize_to_pixels_backward", _no_double_backward,
    setup_context=lambda ctx, inputs, output: None,
)
