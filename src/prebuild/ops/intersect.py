"""Tile intersection of projected Gaussians, as gsplat 1.5.3's ``isect_tiles`` and
``isect_offset_encode`` (pinhole, non-packed: ``[C, N]`` layouts).

The kernels are ``torch.ops.prebuild.isect_tiles`` / ``isect_offset_encode``
(csrc/gsplat/intersect*.{h,cpp,cu}); fake kernels are registered here. The outputs are
integers, so the ops are not differentiable: inputs that require grad are detached.
"""

from __future__ import annotations

import torch

from prebuild.ops._checks import (
    check_bool,
    check_dtype,
    check_float32,
    check_int,
    check_same_devices,
    check_tensor,
)
from prebuild.ops._library import LIBRARY

_DEPTH_BITS = 32


def _tile_bits(tile_width: int, tile_height: int) -> int:
    return (tile_width * tile_height).bit_length()


def _check_grid(op: str, n_cameras: int, tile_width: int, tile_height: int) -> None:
    tile_bits = _tile_bits(tile_width, tile_height)
    camera_bits = n_cameras.bit_length()
    if camera_bits + tile_bits + _DEPTH_BITS > 64:
        raise ValueError(
            f"{op}: {n_cameras} cameras ({camera_bits} bits) and {tile_width}x{tile_height} "
            f"tiles ({tile_bits} bits) do not fit in a 64-bit isect_id with 32 depth bits"
        )


def _check_tile_inputs(means2d, radii, depths, tile_size, tile_width, tile_height, sort):
    op = "isect_tiles"
    m = check_tensor(op, "means2d", means2d, torch.float32)
    r = check_tensor(op, "radii", radii, torch.int32)
    d = check_tensor(op, "depths", depths, torch.float32)
    if m.dim() != 3 or m.shape[2] != 2:
        raise ValueError(f"{op}: means2d must have shape [C, N, 2], got {tuple(m.shape)}")
    if r.shape != m.shape:
        raise ValueError(
            f"{op}: radii must have shape [C, N, 2] like means2d {tuple(m.shape)}, "
            f"got {tuple(r.shape)}"
        )
    if d.shape != m.shape[:2]:
        raise ValueError(
            f"{op}: depths must have shape [C, N] = {tuple(m.shape[:2])}, got {tuple(d.shape)}"
        )
    if not (m.device == r.device == d.device):
        raise ValueError(
            f"{op}: means2d, radii and depths must be on the same device, got {m.device}, "
            f"{r.device} and {d.device}"
        )
    for name, value in (("tile_size", tile_size), ("tile_width", tile_width),
                        ("tile_height", tile_height)):  # fmt: skip
        check_int(op, name, value, 1)
    check_bool(op, "sort", sort)
    _check_grid(op, m.shape[0], tile_width, tile_height)
    if m.shape[0] * m.shape[1] >= 2**31:
        raise ValueError(f"{op}: C * N must fit in int32 (flatten_ids are int32)")


def isect_tiles(
    means2d: torch.Tensor,
    radii: torch.Tensor,
    depths: torch.Tensor,
    tile_size: int,
    tile_width: int,
    tile_height: int,
    sort: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which tiles every projected Gaussian touches, as gsplat 1.5.3's ``isect_tiles``.

    A Gaussian with both radii > 0 touches the tiles
    ``[floor((mean - radius) / tile_size), ceil((mean + radius) / tile_size))`` per axis,
    clamped to the ``tile_width x tile_height`` grid; each (Gaussian, tile) pair is one entry.

    Args:
        means2d: [C, N, 2] float32 projected centres (pixels).
        radii: [C, N, 2] int32 per-axis radii (pixels); a Gaussian with a radius <= 0 is culled.
        depths: [C, N] float32 camera-space depths.
        tile_size: tile edge in pixels; tile_width, tile_height: the grid in tiles.
        sort: sort the entries by isect_id (a stable sort: equal ids keep Gaussian order).

    Returns:
        tiles_per_gauss: [C, N] int32 number of tiles of each Gaussian.
        isect_ids: [M] int64 ``camera << (32 + tile_bits) | tile_id << 32 | bits(depth)``
            with ``tile_id = ty * tile_width + tx`` and
            ``tile_bits = (tile_width * tile_height).bit_length()``; sorting them orders
            entries by camera, then tile, then depth (for depths >= 0).
        flatten_ids: [M] int32 ``camera * N + gaussian`` of each entry.
        Unsorted, entries come Gaussian by Gaussian (camera-major), tiles row by row.

    M depends on the data. Under ``torch.compile(fullgraph=True)`` the op traces with an
    unbacked size for M (its fake kernel calls ``new_dynamic_size``); this needs no config
    flag (``torch._dynamo.config.capture_dynamic_output_shape_ops`` is only for built-in ops
    such as ``nonzero``). Code after the op that branches on M's value, e.g.
    ``if isect_ids.numel() == 0``, breaks the graph like any data-dependent branch.
    """
    _check_tile_inputs(means2d, radii, depths, tile_size, tile_width, tile_height, sort)
    if means2d.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(means2d.device)
    return torch.ops.prebuild.isect_tiles(
        means2d.detach().contiguous(),
        radii.contiguous(),
        depths.detach().contiguous(),
        tile_size,
        tile_width,
        tile_height,
        sort,
    )


def isect_offset_encode(
    isect_ids: torch.Tensor, n_cameras: int, tile_width: int, tile_height: int
) -> torch.Tensor:
    """Start of every tile's run of entries in sorted ``isect_ids``, as gsplat 1.5.3's
    ``isect_offset_encode``.

    Args:
        isect_ids: [M] int64 ids from ``isect_tiles(..., sort=True)``.
        n_cameras, tile_width, tile_height: the values given to ``isect_tiles`` (C and grid).

    Returns:
        [n_cameras, tile_height, tile_width] int32: the index in ``isect_ids`` of the first
        entry of each (camera, tile); a tile without entries holds the start of the next
        non-empty one (M after the last). The run of tile k ends where tile k + 1 starts.
        On the CPU, unsorted ids or ids of other cameras/tiles are refused; on CUDA they are
        not checked (that would synchronise) and give meaningless offsets.
    """
    op = "isect_offset_encode"
    ids = check_tensor(op, "isect_ids", isect_ids, torch.int64)
    if ids.dim() != 1:
        raise ValueError(f"{op}: isect_ids must be 1-D [M], got shape {tuple(ids.shape)}")
    check_int(op, "n_cameras", n_cameras, 0)
    check_int(op, "tile_width", tile_width, 1)
    check_int(op, "tile_height", tile_height, 1)
    _check_grid(op, n_cameras, tile_width, tile_height)
    if ids.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(ids.device)
    return torch.ops.prebuild.isect_offset_encode(
        ids.contiguous(), n_cameras, tile_width, tile_height
    )


@torch.library.register_fake("prebuild::isect_tiles")
def _isect_tiles_fake(means2d, radii, depths, tile_size, tile_width, tile_height, sort=True):
    op = "prebuild::isect_tiles"
    torch._check(
        means2d.dim() == 3 and means2d.shape[2] == 2,
        lambda: f"{op}: means2d must have shape [C, N, 2]",
    )
    torch._check(radii.shape == means2d.shape, lambda: f"{op}: means2d and radii must have the same shape")
    torch._check(depths.shape == means2d.shape[:2], lambda: f"{op}: depths must have shape [C, N] matching means2d [C, N, 2]")
    check_same_devices(op, means2d=means2d, radii=radii, depths=depths)
    check_float32(op, means2d=means2d, depths=depths)
    check_dtype(op, torch.int32, radii=radii)
    torch._check(tile_size > 0, lambda: f"{op}: tile_size must be positive, got {tile_size}")
    torch._check(
        tile_width > 0 and tile_height > 0,
        lambda: f"{op}: tile_width and tile_height must be positive, got {tile_width} and {tile_height}",
    )
    C, N = means2d.shape[0], means2d.shape[1]
    M = torch.library.get_ctx().new_dynamic_size()
    return (
        means2d.new_empty((C, N), dtype=torch.int32),
        means2d.new_empty((M,), dtype=torch.int64),
        means2d.new_empty((M,), dtype=torch.int32),
    )


@torch.library.register_fake("prebuild::isect_offset_encode")
def _isect_offset_encode_fake(isect_ids, n_cameras, tile_width, tile_height):
    op = "prebuild::isect_offset_encode"
    torch._check(isect_ids.dim() == 1, lambda: f"{op}: isect_ids must have 1 dimensions, got {isect_ids.dim()}")
    check_dtype(op, torch.int64, isect_ids=isect_ids)
    torch._check(n_cameras >= 0, lambda: f"{op}: n_cameras must be non-negative, got {n_cameras}")
    torch._check(
        tile_width > 0 and tile_height > 0,
        lambda: f"{op}: tile_width and tile_height must be positive, got {tile_width} and {tile_height}",
    )
    return isect_ids.new_empty((n_cameras, tile_height, tile_width), dtype=torch.int32)
