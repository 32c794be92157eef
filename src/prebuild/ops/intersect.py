"""Tile intersection of projected Gaussians, as gsplat 1.5.3's ``isect_tiles`` and
``isect_offset_encode``: dense inputs with any leading batch dimensions (``[..., N]``,
flattened into I images) or packed ones (``[nnz]`` with an image id each).

The kernels are ``torch.ops.prebuild.isect_tiles`` / ``isect_offset_encode``
(csrc/gsplat/intersect*.{h,cpp,cu}); fake kernels are registered here. The outputs are
integers, so the ops are not differentiable: inputs that require grad are detached.
"""

from __future__ import annotations

import math

import torch

from prebuild.ops._checks import (
    check_bool,
    check_dtype,
    check_float32,
    check_int,
    check_same_devices,
    check_tensor,
    shape_error,
)
from prebuild.ops._library import LIBRARY, kernels
from prebuild.ops._registration import register_ops

_DEPTH_BITS = 32
_INDEX_DTYPES = (torch.int32, torch.int64)


def _tile_bits(tile_width: int, tile_height: int) -> int:
    return (tile_width * tile_height).bit_length()


def check_grid(op: str, n_images: int, tile_width: int, tile_height: int) -> None:
    tile_bits = _tile_bits(tile_width, tile_height)
    image_bits = n_images.bit_length()
    if image_bits + tile_bits + _DEPTH_BITS > 64:
        raise ValueError(
            f"{op}: {n_images} images ({image_bits} bits) and {tile_width}x{tile_height} "
            f"tiles ({tile_bits} bits) do not fit in a 64-bit isect_id with 32 depth bits"
        )


def _check_index_tensor(op: str, name: str, t: object, nnz: int) -> torch.Tensor:
    t = check_tensor(op, name, t)
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{op}: {name} must be int64 (or int32), got {t.dtype}")
    if tuple(t.shape) != (nnz,):
        raise shape_error(op, name, f"[nnz] = [{nnz}] (packed)", t)
    return t


def _check_tile_inputs(
    means2d,
    radii,
    depths,
    tile_size,
    tile_width,
    tile_height,
    sort,
    segmented,
    packed,
    n_images,
    image_ids,
    gaussian_ids,
) -> int:
    """Validates isect_tiles' arguments; returns the number of images I."""
    op = "isect_tiles"
    m = check_tensor(op, "means2d", means2d, torch.float32)
    r = check_tensor(op, "radii", radii, torch.int32)
    d = check_tensor(op, "depths", depths, torch.float32)
    for name, value in (("sort", sort), ("segmented", segmented), ("packed", packed)):
        check_bool(op, name, value)
    tensors = {"means2d": m, "radii": r, "depths": d}
    if packed:
        if m.dim() != 2 or m.shape[1] != 2:
            raise shape_error(op, "means2d", "[nnz, 2] (packed)", m)
        nnz = m.shape[0]
        if r.shape != m.shape:
            raise shape_error(op, "radii", f"[nnz, 2] = [{nnz}, 2] like means2d (packed)", r)
        if tuple(d.shape) != (nnz,):
            raise shape_error(op, "depths", f"[nnz] = [{nnz}] (packed)", d)
        if image_ids is None or gaussian_ids is None or n_images is None:
            raise ValueError(f"{op}: packed=True needs n_images, image_ids and gaussian_ids")
        tensors["image_ids"] = _check_index_tensor(op, "image_ids", image_ids, nnz)
        tensors["gaussian_ids"] = _check_index_tensor(op, "gaussian_ids", gaussian_ids, nnz)
        I = check_int(op, "n_images", n_images, 0)
    else:
        if m.dim() < 2 or m.shape[-1] != 2:
            raise shape_error(op, "means2d", "[..., N, 2]", m)
        if r.shape != m.shape:
            raise shape_error(op, "radii", f"[..., N, 2] = {list(m.shape)} like means2d", r)
        if d.shape != m.shape[:-1]:
            raise shape_error(op, "depths", f"[..., N] = {list(m.shape[:-1])}", d)
        if image_ids is not None or gaussian_ids is not None:
            raise ValueError(f"{op}: image_ids and gaussian_ids are for packed=True only")
        I = math.prod(m.shape[:-2])
        if n_images is not None and check_int(op, "n_images", n_images, 0) != I:
            raise ValueError(
                f"{op}: n_images ({n_images}) must be {I}, the number of images of means2d "
                f"[..., N, 2] = {list(m.shape)}"
            )
    devices = {t.device for t in tensors.values()}
    if len(devices) != 1:
        raise ValueError(
            f"{op}: {', '.join(tensors)} must be on the same device, got "
            + ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        )
    for name, value in (
        ("tile_size", tile_size),
        ("tile_width", tile_width),
        ("tile_height", tile_height),
    ):
        check_int(op, name, value, 1)
    check_grid(op, I, tile_width, tile_height)
    if d.numel() >= 2**31:
        raise ValueError(
            f"{op}: the number of Gaussians (I * N, or nnz) must fit in int32 (flatten_ids "
            "are int32)"
        )
    return I


def isect_tiles(
    means2d: torch.Tensor,
    radii: torch.Tensor,
    depths: torch.Tensor,
    tile_size: int,
    tile_width: int,
    tile_height: int,
    sort: bool = True,
    segmented: bool = False,
    packed: bool = False,
    n_images: int | None = None,
    image_ids: torch.Tensor | None = None,
    gaussian_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which tiles every projected Gaussian touches, as gsplat 1.5.3's ``isect_tiles``.

    A Gaussian with both radii > 0 touches the tiles
    ``[floor((mean - radius) / tile_size), ceil((mean + radius) / tile_size))`` per axis,
    clamped to the ``tile_width x tile_height`` grid; each (Gaussian, tile) pair is one entry.

    Args:
        means2d: [..., N, 2] float32 projected centres (pixels); the leading dimensions
            (gsplat's batch dimensions and cameras) flatten into I images. [nnz, 2] if packed.
        radii: int32 per-axis radii (pixels), shaped like means2d; a Gaussian with a radius
            <= 0 is culled.
        depths: [..., N] (or [nnz]) float32 camera-space depths.
        tile_size: tile edge in pixels; tile_width, tile_height: the grid in tiles.
        sort: sort the entries by isect_id (a stable sort: equal ids keep Gaussian order).
        segmented: accepted for gsplat compatibility and ignored. gsplat sorts each image's
            entries separately (a segmented radix sort) when it is set; entries are grouped
            by image already, so that gives the order of the full stable sort used here.
        packed: inputs are [nnz, ...] lists of (image, Gaussian) pairs instead of [..., N].
        n_images: the number of images I (required when packed; otherwise, if given, it
            must equal the product of means2d's leading dimensions).
        image_ids: [nnz] int64 (or int32) image of each packed entry, in [0, n_images).
        gaussian_ids: [nnz] Gaussian of each packed entry: required, as gsplat, but not used
            (the entries' flatten_ids index the packed list).

    Returns:
        tiles_per_gauss: [..., N] (or [nnz]) int32 number of tiles of each Gaussian.
        isect_ids: [M] int64 ``image << (32 + tile_bits) | tile_id << 32 | bits(depth)``
            with ``tile_id = ty * tile_width + tx`` and
            ``tile_bits = (tile_width * tile_height).bit_length()``; sorting them orders
            entries by image, then tile, then depth (for depths >= 0). The image index runs
            over the flattened leading dimensions (row-major), or is image_ids[i] if packed.
        flatten_ids: [M] int32 ``image * N + gaussian`` of each entry (its index into the
            flattened [I * N] Gaussians), or its index in [nnz] if packed.
        Unsorted, entries come Gaussian by Gaussian (image-major, or in packed order), tiles
        row by row.

    On the CPU, packed image_ids outside [0, n_images) are refused; on CUDA they are not
    checked (that would synchronise) and give meaningless ids.

    M depends on the data. Under ``torch.compile(fullgraph=True)`` the op traces with an
    unbacked size for M (its fake kernel calls ``new_dynamic_size``); this needs no config
    flag (``torch._dynamo.config.capture_dynamic_output_shape_ops`` is only for built-in ops
    such as ``nonzero``). Code after the op that branches on M's value, e.g.
    ``if isect_ids.numel() == 0``, breaks the graph like any data-dependent branch.
    """
    I = _check_tile_inputs(
        means2d,
        radii,
        depths,
        tile_size,
        tile_width,
        tile_height,
        sort,
        segmented,
        packed,
        n_images,
        image_ids,
        gaussian_ids,
    )
    if means2d.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(means2d.device)
    if packed:
        image_ids = image_ids.long().contiguous()
    tiles_per_gauss, isect_ids, flatten_ids = intersect(
        means2d, radii, depths, tile_size, tile_width, tile_height, sort, I, image_ids
    )
    return tiles_per_gauss.reshape(depths.shape), isect_ids, flatten_ids


def intersect(
    means2d, radii, depths, tile_size, tile_width, tile_height, sort, n_images, image_ids
):
    """``isect_tiles`` of arguments its checks (or ``rasterization``'s) passed: dense
    ``[..., N]`` inputs flattened into ``n_images`` images, or packed ones with int64
    ``image_ids``; tiles_per_gauss comes back [I, N] (or [nnz])."""
    if image_ids is not None:
        return kernels().isect_tiles(
            means2d.detach().contiguous(),
            radii.contiguous(),
            depths.detach().contiguous(),
            tile_size,
            tile_width,
            tile_height,
            sort,
            image_ids,
            n_images,
        )
    N = means2d.shape[-2]
    return kernels().isect_tiles(
        means2d.detach().reshape(n_images, N, 2).contiguous(),
        radii.reshape(n_images, N, 2).contiguous(),
        depths.detach().reshape(n_images, N).contiguous(),
        tile_size,
        tile_width,
        tile_height,
        sort,
    )


def isect_offset_encode(
    isect_ids: torch.Tensor, n_images: int, tile_width: int, tile_height: int
) -> torch.Tensor:
    """Start of every tile's run of entries in sorted ``isect_ids``, as gsplat 1.5.3's
    ``isect_offset_encode``.

    Args:
        isect_ids: [M] int64 ids from ``isect_tiles(..., sort=True)``.
        n_images: the number of images I (the product of the leading dimensions of
            isect_tiles' means2d, or its n_images when packed).
        tile_width, tile_height: the grid given to ``isect_tiles``.

    Returns:
        [n_images, tile_height, tile_width] int32: the index in ``isect_ids`` of the first
        entry of each (image, tile); a tile without entries holds the start of the next
        non-empty one (M after the last). The run of tile k ends where tile k + 1 starts.
        Reshape it to ``[..., tile_height, tile_width]`` for batch dimensions (as gsplat).
        On the CPU, unsorted ids or ids of other images/tiles are refused; on CUDA they are
        not checked (that would synchronise) and give meaningless offsets.
    """
    op = "isect_offset_encode"
    ids = check_tensor(op, "isect_ids", isect_ids, torch.int64)
    if ids.dim() != 1:
        raise ValueError(f"{op}: isect_ids must be 1-D [M], got shape {tuple(ids.shape)}")
    check_int(op, "n_images", n_images, 0)
    check_int(op, "tile_width", tile_width, 1)
    check_int(op, "tile_height", tile_height, 1)
    check_grid(op, n_images, tile_width, tile_height)
    if ids.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(ids.device)
    return kernels().isect_offset_encode(ids.contiguous(), n_images, tile_width, tile_height)


def _isect_tiles_fake(
    means2d,
    radii,
    depths,
    tile_size,
    tile_width,
    tile_height,
    sort=True,
    image_ids=None,
    n_images=None,
):
    op = "prebuild::isect_tiles"
    tensors = dict(means2d=means2d, radii=radii, depths=depths)
    if image_ids is None:
        torch._check(
            means2d.dim() == 3 and means2d.shape[2] == 2,
            lambda: f"{op}: means2d must have shape [I, N, 2]",
        )
        torch._check(
            depths.shape == means2d.shape[:2],
            lambda: f"{op}: depths must have shape [I, N] matching means2d [I, N, 2]",
        )
        torch._check(
            n_images is None or n_images == means2d.shape[0],
            lambda: f"{op}: n_images must be means2d's I without image_ids",
        )
    else:
        torch._check(
            means2d.dim() == 2 and means2d.shape[1] == 2,
            lambda: f"{op}: means2d must have shape [nnz, 2] (packed)",
        )
        torch._check(
            depths.shape == means2d.shape[:1],
            lambda: f"{op}: depths must have shape [nnz] matching means2d [nnz, 2]",
        )
        torch._check(
            image_ids.shape == means2d.shape[:1],
            lambda: f"{op}: image_ids must have shape [nnz] matching means2d [nnz, 2]",
        )
        check_dtype(op, torch.int64, image_ids=image_ids)
        torch._check(
            n_images is not None, lambda: f"{op}: n_images is required with image_ids (packed)"
        )
        torch._check(n_images >= 0, lambda: f"{op}: n_images must be non-negative, got {n_images}")
        tensors["image_ids"] = image_ids
    torch._check(
        radii.shape == means2d.shape, lambda: f"{op}: means2d and radii must have the same shape"
    )
    check_same_devices(op, **tensors)
    check_float32(op, means2d=means2d, depths=depths)
    check_dtype(op, torch.int32, radii=radii)
    torch._check(tile_size > 0, lambda: f"{op}: tile_size must be positive, got {tile_size}")
    torch._check(
        tile_width > 0 and tile_height > 0,
        lambda: (
            f"{op}: tile_width and tile_height must be positive, got {tile_width} and {tile_height}"
        ),
    )
    M = torch.library.get_ctx().new_dynamic_size()
    return (
        depths.new_empty(depths.shape, dtype=torch.int32),
        means2d.new_empty((M,), dtype=torch.int64),
        means2d.new_empty((M,), dtype=torch.int32),
    )


def _isect_offset_encode_fake(isect_ids, n_images, tile_width, tile_height):
    op = "prebuild::isect_offset_encode"
    torch._check(
        isect_ids.dim() == 1,
        lambda: f"{op}: isect_ids must have 1 dimensions, got {isect_ids.dim()}",
    )
    check_dtype(op, torch.int64, isect_ids=isect_ids)
    torch._check(n_images >= 0, lambda: f"{op}: n_images must be non-negative, got {n_images}")
    torch._check(
        tile_width > 0 and tile_height > 0,
        lambda: (
            f"{op}: tile_width and tile_height must be positive, got {tile_width} and {tile_height}"
        ),
    )
    return isect_ids.new_empty((n_images, tile_height, tile_width), dtype=torch.int32)


register_ops(
    fakes={"isect_tiles": _isect_tiles_fake, "isect_offset_encode": _isect_offset_encode_fake}
)
