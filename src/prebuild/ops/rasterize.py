"""Tile-based Gaussian rasterization: ``rasterize_to_pixels`` (gsplat 1.5.3 compatible).

The kernels are ``torch.ops.prebuild.rasterize_to_pixels_forward`` / ``_backward``
(csrc/gsplat/rasterize*.h); autograd and fake kernels are registered here. The kernels see
I images: the wrapper flattens gsplat's leading dimensions (batch dimensions and cameras)
into I and reshapes the results back.
"""

from __future__ import annotations

import math

import torch

from prebuild.ops._checks import (
    TILE_GRID_MISMATCH,
    check_bool,
    check_dtype,
    check_float32,
    check_int,
    check_same_devices,
    check_tensor,
    shape_error,
    tile_grid,
)
from prebuild.ops._library import LIBRARY
from prebuild.ops._registration import call, register_ops

_NAME = "rasterize_to_pixels"
# Set on the tensor the op received when it is a reshaped copy or view of the caller's
# means2d: the caller's tensor, which gets the ``absgrad`` attribute (as gsplat's).
_ABSGRAD_TARGET = "_prebuild_absgrad_target"


def _check_inputs(
    means2d,
    conics,
    colors,
    opacities,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
    backgrounds,
    masks,
    packed,
    absgrad,
):
    """Validates the arguments; returns the images' leading dimensions."""
    check_bool(_NAME, "packed", packed)
    check_bool(_NAME, "absgrad", absgrad)
    means2d = check_tensor(_NAME, "means2d", means2d, torch.float32)
    conics = check_tensor(_NAME, "conics", conics, torch.float32)
    colors = check_tensor(_NAME, "colors", colors, torch.float32)
    opacities = check_tensor(_NAME, "opacities", opacities, torch.float32)
    W = check_int(_NAME, "image_width", image_width)
    H = check_int(_NAME, "image_height", image_height)
    tile = check_int(_NAME, "tile_size", tile_size)
    isect_offsets = check_tensor(_NAME, "isect_offsets", isect_offsets, torch.int32)
    if packed:
        if means2d.dim() != 2 or means2d.shape[1] != 2:
            raise shape_error(_NAME, "means2d", "[nnz, 2] (packed)", means2d)
        rows, N = tuple(means2d.shape[:1]), None
        if isect_offsets.dim() < 2:
            raise shape_error(
                _NAME, "isect_offsets", "[..., tile_height, tile_width]", isect_offsets
            )
        image_dims = tuple(isect_offsets.shape[:-2])
        lead = "nnz"
    else:
        if means2d.dim() < 2 or means2d.shape[-1] != 2:
            raise shape_error(_NAME, "means2d", "[..., N, 2]", means2d)
        rows, N = tuple(means2d.shape[:-1]), means2d.shape[-2]
        image_dims = tuple(means2d.shape[:-2])
        lead = "..., N"
    if tuple(conics.shape) != (*rows, 3):
        raise shape_error(_NAME, "conics", f"[{lead}, 3] = {[*rows, 3]}", conics)
    if colors.dim() != len(rows) + 1 or tuple(colors.shape[:-1]) != rows:
        raise shape_error(_NAME, "colors", f"[{lead}, D] = {[*rows, 'D']}", colors)
    D = colors.shape[-1]
    if D < 1:
        raise ValueError(f"{_NAME}: colors must have at least one channel (D >= 1), got D = 0")
    if tuple(opacities.shape) != rows and (packed or tuple(opacities.shape) != (N,)):
        expected = f"[{lead}] = {list(rows)}" + ("" if packed else f" or [N] = [{N}]")
        raise shape_error(_NAME, "opacities", expected, opacities)
    grid = tile_grid(math.prod(image_dims), H, W, tile)[1:]
    if tuple(isect_offsets.shape) != (*image_dims, *grid):
        raise ValueError(
            f"{_NAME}: {TILE_GRID_MISMATCH}: expected shape [..., ceil(H / tile_size), "
            f"ceil(W / tile_size)] = {[*image_dims, *grid]} for tile_size={tile}, got "
            f"{list(isect_offsets.shape)}"
        )
    flatten_ids = check_tensor(_NAME, "flatten_ids", flatten_ids, torch.int32)
    if flatten_ids.dim() != 1:
        raise shape_error(_NAME, "flatten_ids", "[M] (1-D)", flatten_ids)
    tensors = {
        "means2d": means2d,
        "conics": conics,
        "colors": colors,
        "opacities": opacities,
        "isect_offsets": isect_offsets,
        "flatten_ids": flatten_ids,
    }
    if backgrounds is not None:
        backgrounds = check_tensor(_NAME, "backgrounds", backgrounds, torch.float32)
        if tuple(backgrounds.shape) != (*image_dims, D):
            raise shape_error(_NAME, "backgrounds", f"[..., D] = {[*image_dims, D]}", backgrounds)
        tensors["backgrounds"] = backgrounds
    if masks is not None:
        masks = check_tensor(_NAME, "masks", masks, torch.bool)
        if masks.shape != isect_offsets.shape:
            raise shape_error(
                _NAME,
                "masks",
                f"[..., tile_height, tile_width] = {list(isect_offsets.shape)} like isect_offsets",
                masks,
            )
        tensors["masks"] = masks
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
    return image_dims


def _reshaped(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``t`` in ``shape``, contiguous: ``t`` itself when it already is (autograd then saves
    the caller's tensor, which is where absgrad goes)."""
    return (t if tuple(t.shape) == shape else t.reshape(shape)).contiguous()


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
    masks: torch.Tensor | None = None,
    packed: bool = False,
    absgrad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alpha-composites depth-sorted 2D Gaussians per tile, as gsplat 1.5.3's function.

    Args:
        means2d: [..., N, 2] projected means (pixels); the leading dimensions (gsplat's batch
            dimensions and cameras) are the images. conics: [..., N, 3] inverse 2D
            covariances (a, b, c). colors: [..., N, D], any D >= 1. opacities: [..., N], or
            [N] shared by every image. All float32. Packed: [nnz, 2], [nnz, 3], [nnz, D] and
            [nnz], one row per (image, Gaussian) entry (gsplat's packed projection).
        image_width, image_height, tile_size: positive ints (tile_size <= 32 on CUDA).
        isect_offsets: [..., ceil(H / tile_size), ceil(W / tile_size)] int32, the start of
            each tile's run in flatten_ids (``isect_offset_encode``'s [I, th, tw] reshaped to
            the leading dimensions; when packed, its leading dimensions are the images).
            flatten_ids: [M] int32 from ``isect_tiles``: image * N + gaussian (or the packed
            index), sorted by (image, tile, depth).
        backgrounds: optional [..., D] float32, added as (1 - alpha) * background.
        masks: optional [..., tile_height, tile_width] bool, like isect_offsets: a tile whose
            mask is False renders the background (alpha 0) and gives no gradients. (gsplat
            leaves such tiles' alphas unwritten; here they are 0.)
        packed: the per-Gaussian inputs are packed [nnz, ...] lists.
        absgrad: after backward, ``means2d.absgrad`` (shaped like means2d) holds, per
            Gaussian and axis, the sum over pixels of the absolute value of each pixel's
            contribution to the means2d gradient (gsplat's absgrad, used by its densification
            strategies). Set on the tensor passed in, leaf or not, at every backward. Eager
            only: under torch.compile the call runs eagerly (a graph break).

    Returns:
        (render_colors [..., H, W, D], render_alphas [..., H, W, 1]). Differentiable with
        respect to means2d, conics, colors, opacities and backgrounds.
    """
    args = (
        means2d,
        conics,
        colors,
        opacities,
        image_width,
        image_height,
        tile_size,
        isect_offsets,
        flatten_ids,
        backgrounds,
        masks,
        packed,
        absgrad,
    )
    if absgrad is True and torch.compiler.is_compiling():
        return _rasterize_eagerly(*args)
    image_dims = _check_inputs(*args)
    if means2d.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(means2d.device)
    return rasterize(*args, image_dims)


def rasterize(
    means2d,
    conics,
    colors,
    opacities,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
    backgrounds,
    masks,
    packed,
    absgrad,
    image_dims,
):
    """``rasterize_to_pixels`` of arguments its checks (or ``rasterization``'s) passed;
    ``image_dims`` are the leading dimensions of the images."""
    I = math.prod(image_dims)
    grid = tuple(isect_offsets.shape[-2:])
    D = colors.shape[-1]
    if packed:
        rows = (means2d.shape[0],)
    else:
        N = means2d.shape[-2]
        rows = (I, N)
        if opacities.shape != (*image_dims, N):  # [N] shared; autograd sums the gradient back
            opacities = opacities.expand(*image_dims, N)
    m = _reshaped(means2d, (*rows, 2))
    if absgrad and m is not means2d:
        setattr(m, _ABSGRAD_TARGET, means2d)
    render_colors, render_alphas, _ = call(
        "rasterize_to_pixels_forward",
        m,
        _reshaped(conics, (*rows, 3)),
        _reshaped(colors, (*rows, D)),
        _reshaped(opacities, rows),
        None if backgrounds is None else _reshaped(backgrounds, (I, D)),
        image_width,
        image_height,
        tile_size,
        _reshaped(isect_offsets, (I, *grid)),
        flatten_ids.contiguous(),
        None if masks is None else _reshaped(masks, (I, *grid)),
        absgrad,
    )
    H, W = image_height, image_width
    return render_colors.reshape(*image_dims, H, W, D), render_alphas.reshape(*image_dims, H, W, 1)


# absgrad sets an attribute during the backward, which a compiled graph cannot do. Not
# torch.compiler.disable: it imports torch._dynamo at once, and that import writes a probe file
# into the temp directory (a file written by `import prebuild.ops`); torch's own lazy form
# imports it at the first call, which only ever happens under torch.compile.
_rasterize_eagerly = getattr(torch, "_disable_dynamo", torch.compiler.disable)(rasterize_to_pixels)


def _fake_checks(
    op,
    means2d,
    conics,
    colors,
    opacities,
    backgrounds,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
    masks,
):
    torch._check(tile_size >= 1, lambda: f"{op}: tile_size must be positive")
    torch._check(
        image_width >= 1 and image_height >= 1,
        lambda: f"{op}: image_width and image_height must be positive",
    )
    torch._check(isect_offsets.dim() == 3, lambda: f"{op}: {TILE_GRID_MISMATCH}")
    grid = tile_grid(isect_offsets.shape[0], image_height, image_width, tile_size)
    torch._check(isect_offsets.shape == grid, lambda: f"{op}: {TILE_GRID_MISMATCH}")
    I = isect_offsets.shape[0]
    torch._check(
        means2d.dim() in (2, 3) and means2d.shape[-1] == 2,
        lambda: f"{op}: means2d must have shape [I, N, 2] or [nnz, 2] (packed)",
    )
    torch._check(
        means2d.dim() == 2 or means2d.shape[0] == I,
        lambda: f"{op}: means2d [I, N, 2] must have I = {I} images like isect_offsets",
    )
    rows = means2d.shape[:-1]
    torch._check(
        conics.shape == (*rows, 3),
        lambda: f"{op}: conics must have shape [I, N, 3] or [nnz, 3] matching means2d",
    )
    torch._check(
        colors.dim() == means2d.dim() and colors.shape[:-1] == rows,
        lambda: f"{op}: colors must have shape [I, N, D] or [nnz, D] matching means2d",
    )
    D = colors.shape[-1]
    torch._check(D >= 1, lambda: f"{op}: colors must have at least one channel (D >= 1)")
    torch._check(
        opacities.shape == rows,
        lambda: f"{op}: opacities must have shape [I, N] or [nnz] matching means2d",
    )
    torch._check(flatten_ids.dim() == 1, lambda: f"{op}: flatten_ids must be 1-D")
    tensors = dict(means2d=means2d, conics=conics, colors=colors, opacities=opacities)
    if backgrounds is not None:
        torch._check(
            backgrounds.shape == (I, D), lambda: f"{op}: backgrounds must have shape [I, D]"
        )
        tensors["backgrounds"] = backgrounds
    check_float32(op, **tensors)
    check_dtype(op, torch.int32, isect_offsets=isect_offsets, flatten_ids=flatten_ids)
    if masks is not None:
        torch._check(
            masks.shape == isect_offsets.shape,
            lambda: f"{op}: masks must have shape [I, tiles_y, tiles_x] like isect_offsets",
        )
        check_dtype(op, torch.bool, masks=masks)
        tensors["masks"] = masks
    check_same_devices(op, **tensors, isect_offsets=isect_offsets, flatten_ids=flatten_ids)
    return I, D


def _forward_fake(
    means2d,
    conics,
    colors,
    opacities,
    backgrounds,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
    masks=None,
    absgrad=False,
):
    I, D = _fake_checks(
        "prebuild::rasterize_to_pixels_forward",
        means2d,
        conics,
        colors,
        opacities,
        backgrounds,
        image_width,
        image_height,
        tile_size,
        isect_offsets,
        flatten_ids,
        masks,
    )
    H, W = image_height, image_width
    return (
        means2d.new_empty((I, H, W, D)),
        means2d.new_empty((I, H, W, 1)),
        means2d.new_empty((I, H, W), dtype=torch.int32),
    )


def _backward_fake(
    means2d,
    conics,
    colors,
    opacities,
    backgrounds,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
    masks,
    render_alphas,
    last_ids,
    v_render_colors,
    v_render_alphas,
    absgrad=False,
):
    op = "prebuild::rasterize_to_pixels_backward"
    I, D = _fake_checks(
        op,
        means2d,
        conics,
        colors,
        opacities,
        backgrounds,
        image_width,
        image_height,
        tile_size,
        isect_offsets,
        flatten_ids,
        masks,
    )
    H, W = image_height, image_width
    torch._check(
        render_alphas.shape == (I, H, W, 1),
        lambda: f"{op}: render_alphas must have shape [I, H, W, 1]",
    )
    torch._check(last_ids.shape == (I, H, W), lambda: f"{op}: last_ids must have shape [I, H, W]")
    torch._check(
        v_render_colors.shape == (I, H, W, D),
        lambda: f"{op}: v_render_colors must have shape [I, H, W, D]",
    )
    torch._check(
        v_render_alphas is None or v_render_alphas.shape == (I, H, W, 1),
        lambda: f"{op}: v_render_alphas must have shape [I, H, W, 1]",
    )
    check_float32(
        op,
        render_alphas=render_alphas,
        v_render_colors=v_render_colors,
        **({} if v_render_alphas is None else {"v_render_alphas": v_render_alphas}),
    )
    check_dtype(op, torch.int32, last_ids=last_ids)
    check_same_devices(
        op,
        means2d=means2d,
        render_alphas=render_alphas,
        last_ids=last_ids,
        v_render_colors=v_render_colors,
        **({} if v_render_alphas is None else {"v_render_alphas": v_render_alphas}),
    )
    v_means2d_abs = means2d.new_empty(means2d.shape if absgrad else (0,))
    return (
        means2d.new_empty(means2d.shape),
        means2d.new_empty(conics.shape),
        means2d.new_empty(colors.shape),
        means2d.new_empty(opacities.shape),
        v_means2d_abs,
    )


def _setup_context(ctx, inputs, output) -> None:
    (
        means2d,
        conics,
        colors,
        opacities,
        backgrounds,
        width,
        height,
        tile_size,
        isect_offsets,
        flatten_ids,
        masks,
        absgrad,
    ) = inputs
    _, render_alphas, last_ids = output
    ctx.save_for_backward(
        means2d,
        conics,
        colors,
        opacities,
        backgrounds,
        isect_offsets,
        flatten_ids,
        masks,
        render_alphas,
        last_ids,
    )
    ctx.sizes = (width, height, tile_size)
    ctx.absgrad = absgrad
    ctx.mark_non_differentiable(last_ids)
    ctx.set_materialize_grads(False)  # unused outputs: no zeros written (the backward handles None)


def _backward(ops, ctx, v_render_colors, v_render_alphas, _v_last_ids):
    (
        means2d,
        conics,
        colors,
        opacities,
        backgrounds,
        isect_offsets,
        flatten_ids,
        masks,
        render_alphas,
        last_ids,
    ) = ctx.saved_tensors
    width, height, tile_size = ctx.sizes
    I, D = isect_offsets.shape[0], colors.shape[-1]
    if v_render_colors is None:
        v_render_colors = colors.new_zeros((I, height, width, D))
    v_render_colors = v_render_colors.contiguous()  # v_render_alphas None: the op's zeros
    v_means2d, v_conics, v_colors, v_opacities, v_means2d_abs = ops.rasterize_to_pixels_backward(
        means2d,
        conics,
        colors,
        opacities,
        backgrounds,
        width,
        height,
        tile_size,
        isect_offsets,
        flatten_ids,
        masks,
        render_alphas,
        last_ids,
        v_render_colors,
        None if v_render_alphas is None else v_render_alphas.contiguous(),
        ctx.absgrad,
    )
    if ctx.absgrad:
        # The saved means2d is the op's input: the caller's tensor, or a reshaped one that
        # names it (see rasterize_to_pixels).
        target = getattr(means2d, _ABSGRAD_TARGET, means2d)
        target.absgrad = v_means2d_abs.reshape(target.shape)
    v_backgrounds = None
    if backgrounds is not None and ctx.needs_input_grad[4]:
        v_backgrounds = (v_render_colors * (1.0 - render_alphas)).sum(dim=(1, 2))
    return (
        v_means2d,
        v_conics,
        v_colors,
        v_opacities,
        v_backgrounds,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    )


register_ops(
    fakes={
        "rasterize_to_pixels_forward": _forward_fake,
        "rasterize_to_pixels_backward": _backward_fake,
    },
    formulas={"rasterize_to_pixels_forward": (_setup_context, _backward)},
    no_double_backward=("rasterize_to_pixels_backward",),
    double_backward_error="rasterize_to_pixels does not support double backward (second "
    "derivatives)",
    fast=("rasterize_to_pixels_forward",),
)
