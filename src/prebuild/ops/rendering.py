"""``rasterization``: 3D Gaussians to images in one differentiable call (gsplat 1.5.3).

Chains the op families like gsplat's function of the same name: ``fully_fused_projection``
-> (``spherical_harmonics`` when colours are SH coefficients) -> ``isect_tiles`` ->
``isect_offset_encode`` -> ``rasterize_to_pixels``, with leading batch dimensions, the
packed or dense layout, pinhole, orthographic and fisheye cameras, "classic" or
"antialiased" mode, ``absgrad`` and ``sparse_grad``. The returned ``meta`` holds what
gsplat's densification strategies read (``means2d``, ``radii``, ``gaussian_ids``,
``width``, ``height``, ``n_cameras``, ...).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from prebuild.ops._checks import check_bool, check_float_input, check_int, shape_error
from prebuild.ops._library import kernels
from prebuild.ops.intersect import check_grid, intersect
from prebuild.ops.pack import pack
from prebuild.ops.projection import check_projection, project
from prebuild.ops.rasterize import rasterize
from prebuild.ops.sh import evaluate

_NAME = "rasterization"
RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")
RASTERIZE_MODES = ("classic", "antialiased")
# gsplat's arguments for what prebuild leaves out, and their only accepted value.
_UNSUPPORTED = {
    "distributed": False,
    "with_ut": False,
    "with_eval3d": False,
    "radial_coeffs": None,
    "tangential_coeffs": None,
    "thin_prism_coeffs": None,
    "ftheta_coeffs": None,
    "viewmats_rs": None,
}


def _shape_of(t: object) -> object:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


def _check_colors(colors: object, batch: tuple[int, ...], C: int, N: int, sh_degree) -> bool:
    """Validates colors; returns whether they are per camera."""
    if not isinstance(colors, torch.Tensor):
        raise TypeError(f"{_NAME}: colors must be a torch.Tensor, got {type(colors).__name__}")
    nb = len(batch)
    if sh_degree is None:
        shared = colors.dim() == nb + 2 and tuple(colors.shape[:-1]) == (*batch, N)
        per_camera = colors.dim() == nb + 3 and tuple(colors.shape[:-1]) == (*batch, C, N)
        if not (shared or per_camera):
            raise shape_error(
                _NAME,
                "colors",
                f"[..., N, D] or [..., C, N, D] with [...] = {batch}, C = {C}, N = {N}",
                colors,
            )
        return per_camera
    check_int(_NAME, "sh_degree", sh_degree, minimum=0)
    shared = colors.dim() == nb + 3 and tuple(colors.shape[:-2]) == (*batch, N)
    per_camera = colors.dim() == nb + 4 and tuple(colors.shape[:-2]) == (*batch, C, N)
    if not (shared or per_camera) or colors.shape[-1] != 3:
        raise shape_error(
            _NAME,
            "colors",
            f"[..., N, K, 3] or [..., C, N, K, 3] SH coefficients with [...] = {batch}, C = {C}, N = {N}",
            colors,
        )
    if (sh_degree + 1) ** 2 > colors.shape[-2]:
        raise ValueError(
            f"{_NAME}: sh_degree {sh_degree} needs {(sh_degree + 1) ** 2} SH coefficients per "
            f"Gaussian, colors has {colors.shape[-2]}"
        )
    return per_camera


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
    sh_degree: int | None = None,
    packed: bool = True,
    tile_size: int = 16,
    backgrounds: torch.Tensor | None = None,
    render_mode: str = "RGB",
    sparse_grad: bool = False,
    absgrad: bool = False,
    rasterize_mode: str = "classic",
    channel_chunk: int = 32,
    distributed: bool = False,
    camera_model: str = "pinhole",
    segmented: bool = False,
    covars: torch.Tensor | None = None,
    with_ut: bool = False,
    with_eval3d: bool = False,
    radial_coeffs: torch.Tensor | None = None,
    tangential_coeffs: torch.Tensor | None = None,
    thin_prism_coeffs: torch.Tensor | None = None,
    ftheta_coeffs: Any = None,
    rolling_shutter: Any = None,
    viewmats_rs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Render N Gaussians into C cameras (gsplat 1.5.3's ``rasterization``).

    Args:
        means: [..., N, 3] centres; ``...`` are batch dimensions shared by every tensor.
            quats [..., N, 4] (wxyz, need not be normalised) and scales [..., N, 3], or
            covars [..., N, 6] (upper triangle of each 3x3 covariance) instead.
        opacities: [..., N] in [0, 1]; they also bound each Gaussian's screen-space radii
            (gsplat's opacity-aware extent: see ``fully_fused_projection``).
        colors: [..., N, D] or [..., C, N, D] colours (any D >= 1), or with ``sh_degree``
            spherical-harmonics coefficients [..., N, K, 3] or [..., C, N, K, 3]; the
            colour is then ``max(SH(view direction) + 0.5, 0)`` as gsplat's.
        viewmats: [..., C, 4, 4] world-to-camera. Ks: [..., C, 3, 3] intrinsics.
        width, height: image size in pixels.
        near_plane, far_plane, radius_clip, eps2d: the projection's culling and blur.
        sh_degree: SH degree to evaluate (0-4), or None when colors are colours.
        packed: project into gsplat's packed layout (meta gets batch_ids, camera_ids and
            gaussian_ids); the images are the same either way.
        tile_size: tile edge in pixels.
        backgrounds: optional [..., C, D] colour behind the Gaussians.
        render_mode: "RGB" (the colors), "D" (accumulated depth), "ED" (expected depth:
            accumulated depth / alpha), or "RGB+D" / "RGB+ED" (depth as a last channel).
        sparse_grad: with ``packed``, sparse COO gradients for means, quats and scales.
        absgrad: after backward, ``meta["means2d"].absgrad`` holds the absolute 2D-mean
            gradients (gsplat's densification criterion).
        rasterize_mode: "classic", or "antialiased" (opacities scaled by the projection's
            compensation factor, as gsplat's antialiased mode).
        channel_chunk: accepted for gsplat compatibility; the kernels take any channel
            count in one call.
        camera_model: "pinhole", "ortho" or "fisheye".
        segmented: accepted for gsplat compatibility (the tile sort is a full sort).
        distributed, with_ut, with_eval3d, distortion, rolling shutter: not supported;
            anything but their defaults raises NotImplementedError.

    Returns:
        ``(render_colors [..., C, H, W, D'], render_alphas [..., C, H, W, 1], meta)``: meta
        holds the intermediate results under gsplat's keys (batch_ids, camera_ids,
        gaussian_ids, radii, means2d, depths, conics, opacities, tile_width, tile_height,
        tiles_per_gauss, isect_ids, flatten_ids, isect_offsets, width, height, tile_size,
        n_batches, n_cameras) plus compensations. The images are channels-last, as gsplat's:
        ``fused_ssim`` wants (B, C, H, W), so pass ``render_colors.permute(0, 3, 1, 2)``.
    """
    given = {
        "distributed": distributed,
        "with_ut": with_ut,
        "with_eval3d": with_eval3d,
        "radial_coeffs": radial_coeffs,
        "tangential_coeffs": tangential_coeffs,
        "thin_prism_coeffs": thin_prism_coeffs,
        "ftheta_coeffs": ftheta_coeffs,
        "viewmats_rs": viewmats_rs,
    }
    for name, default in _UNSUPPORTED.items():
        value = given[name]
        if (value is not None) if default is None else (value is not default):
            raise NotImplementedError(f"{_NAME}: {name} is not supported (gsplat's {name})")
    if (
        rolling_shutter is not None
        and getattr(rolling_shutter, "name", rolling_shutter) != "GLOBAL"
    ):
        raise NotImplementedError(
            f"{_NAME}: rolling_shutter is not supported (global shutter only)"
        )
    if render_mode not in RENDER_MODES:
        raise ValueError(f"{_NAME}: render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
    if rasterize_mode not in RASTERIZE_MODES:
        raise ValueError(
            f"{_NAME}: rasterize_mode must be one of {RASTERIZE_MODES}, got {rasterize_mode!r}"
        )
    for name, value in (
        ("packed", packed),
        ("sparse_grad", sparse_grad),
        ("absgrad", absgrad),
        ("segmented", segmented),
    ):
        check_bool(_NAME, name, value)
    check_int(_NAME, "tile_size", tile_size)
    check_int(_NAME, "channel_chunk", channel_chunk)
    if not isinstance(means, torch.Tensor) or means.dim() < 2:
        raise ValueError(f"{_NAME}: means must be a [..., N, 3] tensor, got {_shape_of(means)}")
    if not isinstance(viewmats, torch.Tensor) or viewmats.dim() < 3:
        raise ValueError(
            f"{_NAME}: viewmats must be a [..., C, 4, 4] tensor, got {_shape_of(viewmats)}"
        )
    batch, N, C = tuple(means.shape[:-2]), means.shape[-2], viewmats.shape[-3]
    if not isinstance(opacities, torch.Tensor) or tuple(opacities.shape) != (*batch, N):
        raise ValueError(
            f"{_NAME}: opacities must be a {[*batch, 'N']} tensor with N = {N}, got {_shape_of(opacities)}"
        )
    per_camera_colors = _check_colors(colors, batch, C, N, sh_degree)
    antialiased = rasterize_mode == "antialiased"
    # The whole chain's arguments are checked here, once: the ops below get only what these
    # checks passed (and the kernels' own C++ checks).
    checked = check_projection(
        means=means,
        covars=covars,
        quats=quats,
        scales=scales,
        viewmats=viewmats,
        Ks=Ks,
        width=width,
        height=height,
        eps2d=eps2d,
        near_plane=near_plane,
        far_plane=far_plane,
        radius_clip=radius_clip,
        packed=packed,
        sparse_grad=sparse_grad,
        calc_compensations=antialiased,
        camera_model=camera_model,
        opacities=None,  # checked with the colours (above and in _check_rest)
    )
    B = math.prod(batch)
    n_images = B * C
    tile_width = math.ceil(width / tile_size)
    tile_height = math.ceil(height / tile_size)
    D = 3 if sh_degree is not None else colors.shape[-1]
    opacities, colors, backgrounds = _check_rest(
        opacities, colors, backgrounds, means, batch, C, D, render_mode, tile_size
    )
    check_grid(_NAME, n_images, tile_width, tile_height)
    if n_images * N >= 2**31:
        raise ValueError(
            f"{_NAME}: the number of (image, Gaussian) pairs must fit in int32 (flatten_ids "
            "are int32)"
        )

    # opacities bound the radii, as gsplat's rasterization passes them (dense and packed).
    radii, means2d, depths, conics, compensations = project(
        dataclasses.replace(checked, opacities=opacities)
    )
    packed_colors = None
    if packed:
        # The pairs' opacities, and their colours when shared by the cameras, gathered by
        # pack_visible itself (one op each way instead of a gather and its backward each).
        shared = sh_degree is None and not per_camera_colors
        (
            batch_ids,
            camera_ids,
            gaussian_ids,
            image_ids,
            radii,
            means2d,
            depths,
            conics,
            compensations,
            opacities,
            packed_colors,
        ) = pack(
            radii,
            means2d,
            depths,
            conics,
            compensations,
            opacities.reshape(B, N).contiguous(),
            colors.reshape(B, N, D).contiguous() if shared else None,
        )
    else:
        radii, means2d, depths, conics, compensations = (
            None if t is None else t.view(*batch, *t.shape[1:])
            for t in (radii, means2d, depths, conics, compensations)
        )
        opacities = torch.broadcast_to(opacities[..., None, :], (*batch, C, N))
        batch_ids = camera_ids = gaussian_ids = image_ids = None
    if compensations is not None:
        opacities = opacities * compensations

    colors = (
        packed_colors
        if packed_colors is not None
        else _view_colors(
            colors,
            per_camera_colors,
            sh_degree,
            means,
            viewmats,
            radii,
            batch,
            C,
            N,
            None if image_ids is None else _PackedPairs(batch_ids, image_ids, gaussian_ids),
        )
    )
    if render_mode in ("RGB+D", "RGB+ED"):
        colors = torch.cat((colors, depths[..., None]), dim=-1)
        if backgrounds is not None:  # no background behind the depth channel
            backgrounds = torch.cat([backgrounds, backgrounds.new_zeros((*batch, C, 1))], dim=-1)
    elif render_mode in ("D", "ED"):
        colors = depths[..., None]
        if backgrounds is not None:  # depth has no background (as gsplat)
            backgrounds = backgrounds.new_zeros((*batch, C, 1))

    tiles_per_gauss, isect_ids, flatten_ids = intersect(
        means2d, radii, depths, tile_size, tile_width, tile_height, True, n_images, image_ids
    )
    if not packed:
        tiles_per_gauss = tiles_per_gauss.view(depths.shape)
    isect_offsets = kernels().isect_offset_encode(isect_ids, n_images, tile_width, tile_height)
    if isect_offsets.dim() != len(batch) + 3:
        isect_offsets = isect_offsets.view(*batch, C, tile_height, tile_width)
    render_colors, render_alphas = rasterize(
        means2d,
        conics,
        colors,
        opacities,
        width,
        height,
        tile_size,
        isect_offsets,
        flatten_ids,
        backgrounds,
        None,
        packed,
        absgrad,
        (*batch, C),
    )
    if render_mode in ("ED", "RGB+ED"):
        # Expected depth: the accumulated depth normalised by the accumulated opacity.
        depth = render_colors[..., -1:] / render_alphas.clamp(min=1e-10)
        render_colors = torch.cat([render_colors[..., :-1], depth], dim=-1)

    meta = {
        "batch_ids": batch_ids,
        "camera_ids": camera_ids,
        "gaussian_ids": gaussian_ids,
        "radii": radii,
        "means2d": means2d,
        "depths": depths,
        "conics": conics,
        "opacities": opacities,
        "compensations": compensations,
        "tile_width": tile_width,
        "tile_height": tile_height,
        "tiles_per_gauss": tiles_per_gauss,
        "isect_ids": isect_ids,
        "flatten_ids": flatten_ids,
        "isect_offsets": isect_offsets,
        "width": width,
        "height": height,
        "tile_size": tile_size,
        "n_batches": B,
        "n_cameras": C,
    }
    return render_colors, render_alphas, meta


def _check_rest(opacities, colors, backgrounds, means, batch, C, D, render_mode, tile_size):
    """Checks what the projection's checks do not see (opacities, colors, backgrounds, the
    tile size on CUDA); returns opacities, colors and backgrounds in float32 (the compute
    type: other floating dtypes are converted, and their gradients flow back converted)."""
    tensors = {"opacities": opacities, "colors": colors}
    if backgrounds is not None:
        tensors["backgrounds"] = backgrounds
    for name, t in tensors.items():
        check_float_input(_NAME, name, t)
        if t.device != means.device:
            raise ValueError(
                f"{_NAME}: {name} is on {t.device} but means is on {means.device}; all tensors "
                "must be on the same device"
            )
    if (
        backgrounds is not None
        and render_mode not in ("D", "ED")  # there the background is not used (as gsplat)
        and tuple(backgrounds.shape) != (*batch, C, D)
    ):
        raise shape_error(_NAME, "backgrounds", f"[..., C, D] = {[*batch, C, D]}", backgrounds)
    if means.is_cuda and tile_size > 32:
        raise ValueError(
            f"{_NAME}: tile_size must be at most 32 on CUDA (one thread per pixel of a tile, "
            f"tile_size^2 <= 1024), got {tile_size}"
        )
    return tuple(
        t if t is None or t.dtype == torch.float32 else t.to(torch.float32)
        for t in (opacities, colors, backgrounds)
    )


class _PackedPairs(NamedTuple):
    """The packed pairs' ids ``_view_colors`` gathers by."""

    batch_ids: torch.Tensor
    image_ids: torch.Tensor  # batch * C + camera
    gaussian_ids: torch.Tensor  # the Gaussian within its batch


def _view_colors(
    colors,
    per_camera,
    sh_degree,
    means,
    viewmats,
    radii,
    batch,
    C,
    N,
    pairs: _PackedPairs | None,
):
    """The per-(camera, Gaussian) colours the rasterizer composites: [..., C, N, D], or
    [nnz, D] for the packed ``pairs``, but for packed colours shared by the cameras without
    SH, which pack_visible gathers."""
    B = math.prod(batch)
    packed = pairs is not None
    if packed:
        batch_ids, image_ids, gaussian_ids = pairs
    D = colors.shape[-1]
    if sh_degree is None:
        if packed:  # per-camera colours (pack_visible gathers colours the cameras share)
            return colors.reshape(B * C * N, D).index_select(0, image_ids * N + gaussian_ids)
        return (
            colors
            if per_camera
            else torch.broadcast_to(colors[..., None, :, :], (*batch, C, N, colors.shape[-1]))
        )
    # SH: evaluated in the direction from each camera's centre to the Gaussian. inv_ex, not
    # inverse: the latter checks for singular matrices, which waits for the GPU.
    campos = torch.linalg.inv_ex(viewmats).inverse[..., :3, 3]  # [..., C, 3]
    K = colors.shape[-2]
    if packed:
        # Each pair's Gaussian in the flattened [B * N] inputs.
        gaussian_rows = gaussian_ids if B == 1 else batch_ids * N + gaussian_ids
        dirs = means.reshape(B * N, 3).index_select(0, gaussian_rows) - campos.reshape(
            B * C, 3
        ).index_select(0, image_ids)
        if per_camera:
            shs = colors.reshape(B * C * N, K, 3).index_select(0, image_ids * N + gaussian_ids)
        else:
            shs = colors.reshape(B * N, K, 3).index_select(0, gaussian_rows)
        masks = None  # every packed pair is visible
    else:
        dirs = means[..., None, :, :] - campos[..., None, :]  # [..., C, N, 3]
        shs = (
            colors
            if per_camera
            else torch.broadcast_to(colors[..., None, :, :, :], (*batch, C, N, K, 3))
        )
        masks = (radii > 0).all(dim=-1)
    return torch.clamp_min(evaluate(sh_degree, dirs, shs, masks) + 0.5, 0.0)
