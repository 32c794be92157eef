"""Tests of prebuild.isect_tiles / isect_offset_encode and their custom ops, on the CPU
backend and on the simt backend (the CUDA kernel bodies run on the CPU), against gsplat
1.5.3's plain-PyTorch implementation (tests/ops/gsplat_oracle.py)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from gsplat_oracle import torch_impl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prebuild
from prebuild.ops.intersect import isect_offset_encode, isect_tiles
from prebuild.testing import simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]


# ----------------------------------------------------------------------------- helpers


def scene(C, N, tile_size, tile_width, tile_height, seed=0, max_radius=None, culled=0.2):
    """Random means2d in and around the image, integer radii (some culled, some zero on one
    axis only), random positive depths with a few duplicates (ties)."""
    gen = torch.Generator().manual_seed(seed)
    W, H = tile_width * tile_size, tile_height * tile_size
    lo = torch.tensor([-0.3 * W, -0.3 * H])
    span = torch.tensor([1.6 * W, 1.6 * H])
    means2d = lo + span * torch.rand(C, N, 2, generator=gen)
    # A quarter of the means sit exactly on tile borders.
    on_border = torch.rand(C, N, 1, generator=gen) < 0.25
    snapped = (means2d / tile_size).round() * tile_size
    means2d = torch.where(on_border, snapped, means2d).float()
    max_radius = max_radius or 2 * tile_size
    radii = torch.randint(1, max_radius + 1, (C, N, 2), generator=gen, dtype=torch.int32)
    cull = torch.rand(C, N, 2, generator=gen) < culled / 2  # either axis
    radii = torch.where(cull, torch.zeros_like(radii), radii)
    depths = 0.1 + 10 * torch.rand(C, N, generator=gen)
    if N > 1:
        depths[:, 1::3] = depths[:, :1]  # ties with the first Gaussian of the camera
    return means2d, radii, depths.float()


def oracle(means2d, radii, depths, tile_size, tile_width, tile_height, sort):
    """gsplat's reference, with its sort made stable (gsplat's CUDA radix sort is stable;
    its torch reference calls torch.sort, which does not promise stability for ties)."""
    tiles, ids, flat = torch_impl._isect_tiles(
        means2d, radii, depths, tile_size, tile_width, tile_height, sort=False
    )
    if sort:
        ids, order = torch.sort(ids, stable=True)
        flat = flat[order]
    return tiles, ids, flat


def offsets_oracle(ids, C, tile_width, tile_height):
    return torch_impl._isect_offset_encode(ids, C, tile_width, tile_height)


def assert_equal(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.equal(actual, expected)


def check_against_oracle(ops, means2d, radii, depths, tile_size, tw, th, sort=True):
    got = ops.isect_tiles(means2d, radii, depths, tile_size, tw, th, sort)
    want = oracle(means2d, radii, depths, tile_size, tw, th, sort)
    for g, w in zip(got, want):
        assert_equal(g, w)
    if sort:
        C = means2d.shape[0]
        assert_equal(ops.isect_offset_encode(got[1], C, tw, th), offsets_oracle(want[1], C, tw, th))
    return got


# ------------------------------------------------------------------ 1. against gsplat


GRIDS = [(16, 5, 3), (16, 1, 1), (8, 7, 4), (4, 3, 9), (16, 16, 16)]


@pytest.mark.parametrize("ops", BACKENDS)
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"ts{g[0]}_{g[1]}x{g[2]}")
@pytest.mark.parametrize("sort", [True, False])
def test_matches_gsplat(ops, grid, sort):
    tile_size, tw, th = grid
    means2d, radii, depths = scene(3, 25, tile_size, tw, th, seed=tw * 10 + th)
    tiles, ids, _ = check_against_oracle(ops, means2d, radii, depths, tile_size, tw, th, sort)
    assert ids.numel() > 0 and (tiles == 0).any()  # the scene has entries and culled ones


@pytest.mark.parametrize("ops", BACKENDS)
def test_hand_made_borders_edges_and_culling(ops):
    # Tile size 16, 5x3 tiles (80x48 pixels). Each Gaussian pins one rule.
    means = [
        (16.0, 16.0),  # radius 16 on a tile corner: [0, 2) x [0, 2)
        (16.0, 16.0),  # radius 1: [0, 2) x [0, 2) (floor(15/16) = 0, ceil(17/16) = 2)
        (8.0, 8.0),  # radius 8 inside tile 0: exactly [0, 1) x [0, 1)
        (-20.0, 10.0),  # left of the image, reaching in: x range [0, 1)... clamped
        (-40.0, 10.0),  # left of the image, not reaching it: no tiles
        (79.9, 47.9),  # bottom-right pixel
        (200.0, 200.0),  # far outside: no tiles
        (40.0, 24.0),  # culled (radius_x = 0)
        (40.0, 24.0),  # culled (radius_y = 0)
        (40.0, 24.0),  # culled (negative radius)
        (40.0, 24.0),  # huge radius: the whole grid
    ]
    radii = [
        (16, 16),
        (1, 1),
        (8, 8),
        (24, 4),
        (20, 4),
        (1, 1),
        (5, 5),
        (0, 5),
        (5, 0),
        (-3, 4),
        (1000, 1000),
    ]
    means2d = torch.tensor([means, [m[::-1] for m in means]])  # camera 1: transposed means
    radii_t = torch.tensor([radii, radii], dtype=torch.int32)
    depths = torch.arange(22, dtype=torch.float32).reshape(2, 11).flip(1)
    tiles, _, _ = check_against_oracle(ops, means2d, radii_t, depths, 16, 5, 3)
    assert tiles[0].tolist() == [4, 4, 1, 1, 0, 1, 0, 0, 0, 0, 15]


@pytest.mark.parametrize("ops", BACKENDS)
def test_equal_depths_keep_gaussian_order(ops):
    # Every Gaussian has the same depth and covers the same tiles: within each tile the
    # sorted entries must keep the Gaussians' order (a stable sort), as gsplat's CUDA sort.
    C, N = 2, 40
    means2d = torch.full((C, N, 2), 16.0)  # radius 8: tiles [0, 2) x [0, 2)
    radii = torch.full((C, N, 2), 8, dtype=torch.int32)
    depths = torch.full((C, N), 1.5)
    tiles, ids, flat = check_against_oracle(ops, means2d, radii, depths, 16, 5, 3)
    assert (tiles == 4).all()
    runs = flat.reshape(C * 4, N)  # 4 tiles per camera, N entries each
    expected = (torch.arange(C).repeat_interleave(4)[:, None] * N + torch.arange(N)).int()
    assert_equal(runs, expected)


@pytest.mark.parametrize("ops", BACKENDS)
def test_negative_depths_are_zero_extended_bits(ops):
    # gsplat's torch reference cannot store negative depths' bits (its int32 buffer
    # overflows); its CUDA kernel zero-extends them, so they sort after every positive depth
    # of the same tile. Check against the reference run on |depth|: only the low bits differ.
    means2d, radii, depths = scene(2, 20, 16, 5, 3, seed=9)
    depths[:, ::3] = -depths[:, ::3]
    _, ids_u, flat_u = ops.isect_tiles(means2d, radii, depths, 16, 5, 3, False)
    _, want_ids, want_flat = oracle(means2d, radii, depths.abs(), 16, 5, 3, False)
    assert_equal(flat_u, want_flat)
    bits = depths.flatten().view(torch.int32).long() & 0xFFFFFFFF
    assert_equal(ids_u, (want_ids >> 32 << 32) | bits[flat_u.long()])
    assert (ids_u & (1 << 31) != 0).any()
    _, ids, flat = ops.isect_tiles(means2d, radii, depths, 16, 5, 3, True)
    want, order = torch.sort(ids_u, stable=True)
    assert_equal(ids, want)
    assert_equal(flat, flat_u[order])


@pytest.mark.parametrize("ops", BACKENDS)
@pytest.mark.parametrize("sort", [True, False])
def test_no_entries(ops, sort):
    for C, N in ((2, 0), (0, 5), (0, 0)):
        means2d, radii, depths = (
            torch.zeros(C, N, 2),
            torch.zeros(C, N, 2, dtype=torch.int32),
            torch.zeros(C, N),
        )
        tiles, ids, flat = ops.isect_tiles(means2d, radii, depths, 16, 5, 3, sort)
        assert tiles.shape == (C, N) and tiles.dtype == torch.int32
        assert ids.shape == (0,) and ids.dtype == torch.int64
        assert flat.shape == (0,) and flat.dtype == torch.int32
        offsets = ops.isect_offset_encode(ids, C, 5, 3)
        assert_equal(offsets, torch.zeros(C, 3, 5, dtype=torch.int32))
    # All culled (radius 0) or all outside the image: M = 0.
    means2d, radii, depths = scene(2, 10, 16, 5, 3)
    for r in (torch.zeros_like(radii), radii):
        m = means2d if r is not radii else means2d + 1000.0
        tiles, ids, flat = check_against_oracle(ops, m, r, depths, 16, 5, 3, sort)
        assert (tiles == 0).all() and ids.numel() == 0 and flat.numel() == 0


@pytest.mark.parametrize("ops", BACKENDS)
@pytest.mark.parametrize("empty_camera", [0, 1, 2])
def test_offsets_with_a_camera_without_entries(ops, empty_camera):
    means2d, radii, depths = scene(3, 20, 16, 5, 3, seed=empty_camera)
    radii[empty_camera] = 0
    tiles, ids, _ = check_against_oracle(ops, means2d, radii, depths, 16, 5, 3)
    offsets = ops.isect_offset_encode(ids, 3, 5, 3)
    # The empty camera's tiles all hold the start of the next camera's entries.
    first_after = int((ids >> (32 + 4) <= empty_camera).sum())
    assert (offsets[empty_camera] == first_after).all()
    assert int(tiles.sum()) == ids.numel()


def test_offsets_hand_example():
    # gsplat's comment example: keys [1, 1, 1, 3, 3] over 6 tiles -> [0, 0, 3, 3, 5, 5].
    tile_bits = (6).bit_length()
    ids = torch.tensor([1, 1, 1, 3, 3]) << 32
    for ops in (CPU, simt):
        offsets = ops.isect_offset_encode(ids, 1, 3, 2)
        assert offsets.flatten().tolist() == [0, 0, 3, 3, 5, 5]
    assert tile_bits == 3


@pytest.mark.parametrize("ops", BACKENDS)
def test_many_cameras_and_a_large_grid(ops):
    # 60000 tiles (16 bits) and 5 cameras (3 bits): ids use 51 bits, the sort 7 byte passes.
    C, N, tw, th, ts = 5, 30, 300, 200, 4
    means2d, radii, depths = scene(C, N, ts, tw, th, seed=5, max_radius=12)
    check_against_oracle(ops, means2d, radii, depths, ts, tw, th)


def test_simt_matches_cpu_on_a_larger_scene():
    # More than one 256-thread block per kernel, and entries spanning many blocks.
    args = (*scene(3, 300, 16, 9, 5, seed=11), 16, 9, 5)
    for sort in (True, False):
        for a, b in zip(CPU.isect_tiles(*args, sort), simt.isect_tiles(*args, sort)):
            assert_equal(a, b)
    _, ids, _ = CPU.isect_tiles(*args, True)
    assert ids.numel() > 512
    assert_equal(CPU.isect_offset_encode(ids, 3, 9, 5), simt.isect_offset_encode(ids, 3, 9, 5))


def test_cpu_sort_is_a_stable_sort_of_the_unsorted_entries():
    # A scene too large for the Python oracle: the sorted output is the stable sort of the
    # unsorted one (whose fill order the oracle tests pin), and the offsets delimit its runs.
    C, tw, th = 4, 40, 30
    args = (*scene(C, 3000, 8, tw, th, seed=3, max_radius=30), 8, tw, th)
    tiles, ids_u, flat_u = CPU.isect_tiles(*args, False)
    _, ids, flat = CPU.isect_tiles(*args, True)
    want_ids, order = torch.sort(ids_u, stable=True)
    assert_equal(ids, want_ids)
    assert_equal(flat, flat_u[order])
    assert ids.numel() == int(tiles.sum()) > 50_000
    offsets = CPU.isect_offset_encode(ids, C, tw, th).flatten().long()
    keys = (ids >> 32 >> (tw * th).bit_length()) * tw * th + ((ids >> 32) & ((1 << 11) - 1))
    assert_equal(offsets, torch.searchsorted(keys, torch.arange(C * tw * th)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    C=st.integers(1, 3),
    N=st.integers(0, 12),
    tile_size=st.integers(1, 20),
    tw=st.integers(1, 7),
    th=st.integers(1, 7),
    seed=st.integers(0, 10_000),
)
def test_random_scenes_property(C, N, tile_size, tw, th, seed):
    means2d, radii, depths = scene(C, N, tile_size, tw, th, seed=seed, max_radius=3 * tile_size)
    for sort in (True, False):
        check_against_oracle(CPU, means2d, radii, depths, tile_size, tw, th, sort)


# ------------------------------------------------------------- 2. the public functions


def test_public_functions_match_the_ops_and_accept_any_layout():
    means2d, radii, depths = scene(2, 20, 16, 5, 3)
    want = CPU.isect_tiles(means2d, radii, depths, 16, 5, 3, True)
    # Non-contiguous inputs (a transposed copy transposed back) and means requiring grad.
    m = means2d.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(True)
    d = depths.t().contiguous().t()
    assert not m.is_contiguous() and not d.is_contiguous()
    got = prebuild.isect_tiles(m, radii, d, 16, 5, 3)
    for g, w in zip(got, want):
        assert_equal(g, w)
        assert not g.requires_grad
    assert_equal(
        prebuild.isect_offset_encode(got[1], 2, 5, 3), CPU.isect_offset_encode(want[1], 2, 5, 3)
    )
    unsorted = isect_tiles(means2d, radii, depths, 16, 5, 3, sort=False)
    assert_equal(unsorted[2], CPU.isect_tiles(means2d, radii, depths, 16, 5, 3, False)[2])


# ------------------------------------------- 3. batch dimensions and packed inputs


BATCH_DIMS = [(), (2,), (1, 2)]


def packed_from_dense(means2d, radii, depths, keep):
    """gsplat's packed layout of the (image, Gaussian) pairs where `keep` [I, N] is True, in
    image-major order (as gsplat's packed projection): (means2d [nnz, 2], radii [nnz, 2],
    depths [nnz], image_ids [nnz] int64, gaussian_ids [nnz] int64)."""
    image_ids, gaussian_ids = keep.nonzero(as_tuple=True)
    return (
        means2d[keep].contiguous(),
        radii[keep].contiguous(),
        depths[keep].contiguous(),
        image_ids,
        gaussian_ids,
    )


@pytest.mark.parametrize("batch_dims", BATCH_DIMS, ids=str)
def test_batch_dims_match_gsplat(batch_dims):
    # gsplat's test_isect: [..., C, N] inputs (expanded over the batch dimensions, so not
    # contiguous) against its torch implementation, which flattens them into I images.
    C, N, ts, tw, th = 3, 40, 16, 3, 4
    means2d, radii, depths = scene(C, N, ts, tw, th, seed=len(batch_dims))
    I = math.prod(batch_dims) * C
    m, r, d = (t.expand(*batch_dims, *t.shape) for t in (means2d, radii, depths))
    tiles, ids, flat = isect_tiles(m, r, d, ts, tw, th)
    offsets = isect_offset_encode(ids, I, tw, th)
    want = oracle(m, r, d, ts, tw, th, sort=True)
    assert tiles.shape == (*batch_dims, C, N)
    for g, w in zip((tiles, ids, flat), want):
        assert_equal(g, w)
    assert_equal(offsets, offsets_oracle(want[1], I, tw, th))
    assert offsets.shape == (I, th, tw) and ids.numel() > 0
    if batch_dims:  # images past the first C hold the same Gaussians: the image bits differ
        assert int(ids[-1] >> (32 + (tw * th).bit_length())) == I - 1


def test_a_single_image_without_camera_dimension():
    # Non-packed [N, 2]: no leading dimensions, one image (gsplat's prod(()) = 1).
    means2d, radii, depths = scene(1, 30, 8, 5, 4, seed=3)
    tiles, ids, flat = isect_tiles(means2d[0], radii[0], depths[0], 8, 5, 4, n_images=1)
    want = oracle(means2d, radii, depths, 8, 5, 4, sort=True)
    assert_equal(tiles, want[0][0])
    assert_equal(ids, want[1])
    assert_equal(flat, want[2])


@pytest.mark.parametrize("ops", BACKENDS)
@pytest.mark.parametrize("sort", [True, False])
def test_packed_equals_dense(ops, sort):
    # The packed entries of the kept (image, Gaussian) pairs (here those with radii > 0, as
    # gsplat's packed projection keeps): the same isect_ids in the same order, flatten_ids
    # naming the same Gaussians through the packed index.
    C, N, ts, tw, th = 3, 30, 8, 5, 4
    means2d, radii, depths = scene(C, N, ts, tw, th, seed=7)
    keep = (radii > 0).all(-1)
    keep[1, ::4] = False  # and a few visible ones dropped
    radii = torch.where(keep[..., None], radii, torch.zeros_like(radii))
    dense = ops.isect_tiles(means2d, radii, depths, ts, tw, th, sort)
    pm, pr, pd, image_ids, gaussian_ids = packed_from_dense(means2d, radii, depths, keep)
    packed = ops.isect_tiles(pm, pr, pd, ts, tw, th, sort, image_ids, C)
    assert_equal(packed[0], dense[0][keep])
    assert_equal(packed[1], dense[1])
    assert_equal((image_ids * N + gaussian_ids).int()[packed[2].long()], dense[2])
    assert dense[1].numel() > 0 and (~keep).any()
    public = isect_tiles(
        pm,
        pr,
        pd,
        ts,
        tw,
        th,
        sort=sort,
        packed=True,
        n_images=C,
        image_ids=image_ids.int(),
        gaussian_ids=gaussian_ids,
    )
    for g, w in zip(public, packed):
        assert_equal(g, w)
    if sort:
        assert_equal(
            ops.isect_offset_encode(packed[1], C, tw, th),
            offsets_oracle(oracle(means2d, radii, depths, ts, tw, th, True)[1], C, tw, th),
        )


@pytest.mark.parametrize("ops", BACKENDS)
def test_packed_entries_in_any_image_order(ops):
    # Packed lists need not be grouped by image: the sort orders the ids all the same.
    C, N, ts, tw, th = 2, 25, 16, 3, 3
    means2d, radii, depths = scene(C, N, ts, tw, th, seed=8)
    keep = torch.ones(C, N, dtype=torch.bool)
    pm, pr, pd, image_ids, gaussian_ids = packed_from_dense(means2d, radii, depths, keep)
    order = torch.randperm(C * N, generator=torch.Generator().manual_seed(0))
    tiles, ids, flat = ops.isect_tiles(
        pm[order], pr[order], pd[order], ts, tw, th, True, image_ids[order], C
    )
    want_tiles, want_ids, want_flat = oracle(means2d, radii, depths, ts, tw, th, True)
    assert_equal(ids, want_ids)
    assert_equal(tiles, want_tiles.flatten()[order])
    # Ties (equal ids) keep the packed order, so compare the Gaussians per id as sets.
    got = (image_ids * N + gaussian_ids)[order][flat.long()]
    key = ids * (C * N) + got
    assert_equal(key.sort().values, (want_ids * (C * N) + want_flat.long()).sort().values)


@pytest.mark.parametrize("ops", BACKENDS)
def test_packed_ops_refuse_bad_inputs(ops):
    name = "prebuild_simt" if ops is simt else "prebuild"
    m, r, d = (t[0] for t in scene(1, 6, 16, 5, 3))
    ids = torch.zeros(6, dtype=torch.int64)
    cases = [
        ((m, r, d, 16, 5, 3, True, ids, None), r"n_images is required with image_ids \(packed\)"),
        ((m, r, d, 16, 5, 3, True, ids, -1), "n_images must be non-negative"),
        ((m, r, d, 16, 5, 3, True, ids[:5], 2), r"image_ids must have shape \[nnz\]"),
        ((m, r, d, 16, 5, 3, True, ids.int(), 2), "image_ids must be int64"),
        ((m, r, d[:5], 16, 5, 3, True, ids, 2), r"depths must have shape \[nnz\]"),
        ((m[None], r[None], d[None], 16, 5, 3, True, ids, 2), r"means2d \[nnz, 2\] \(packed\)"),
        (
            (m, r, d, 16, 5, 3, True, ids + 2, 2),
            r"image_ids must be in \[0, n_images\) = \[0, 2\), got 2 at 0",
        ),
        (
            (m, r, d, 16, 5, 3, True, ids - 1, 2),
            r"image_ids must be in \[0, n_images\) = \[0, 2\), got -1",
        ),
        (
            (m[None], r[None], d[None], 16, 5, 3, True, None, 2),
            r"n_images \(2\) must be means2d's I \(1\) without image_ids",
        ),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=f"{name}::isect_tiles: {message}"):
            ops.isect_tiles(*args)


def test_packed_wrapper_refuses_bad_inputs():
    m, r, d = (t[0] for t in scene(1, 6, 16, 5, 3))
    ids = torch.zeros(6, dtype=torch.int64)
    good = dict(
        means2d=m,
        radii=r,
        depths=d,
        tile_size=16,
        tile_width=5,
        tile_height=3,
        packed=True,
        n_images=2,
        image_ids=ids,
        gaussian_ids=ids,
    )
    cases = [
        (
            dict(image_ids=None),
            ValueError,
            "packed=True needs n_images, image_ids and gaussian_ids",
        ),
        (dict(gaussian_ids=None), ValueError, "packed=True needs n_images"),
        (dict(n_images=None), ValueError, "packed=True needs n_images"),
        (dict(n_images=-1), ValueError, "n_images must be non-negative"),
        (dict(image_ids=ids.float()), TypeError, "image_ids must be int64 (or int32)"),
        (
            dict(gaussian_ids=ids[:3]),
            ValueError,
            "gaussian_ids must have shape [nnz] = [6] (packed)",
        ),
        (dict(means2d=m[None]), ValueError, "means2d must have shape [nnz, 2] (packed)"),
        (dict(radii=r[:3]), ValueError, "radii must have shape [nnz, 2] = [6, 2]"),
        (dict(depths=d[None]), ValueError, "depths must have shape [nnz] = [6] (packed)"),
        (dict(image_ids=ids.to("meta")), ValueError, "must be on the same device"),
    ]
    for override, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            isect_tiles(**{**good, **override})
    assert isect_tiles(**good)[1].numel() > 0


def test_segmented_sort_gives_the_same_order():
    means2d, radii, depths = scene(3, 30, 8, 5, 4, seed=12)
    for a, b in zip(
        isect_tiles(means2d, radii, depths, 8, 5, 4, segmented=True),
        isect_tiles(means2d, radii, depths, 8, 5, 4),
    ):
        assert_equal(a, b)


# ------------------------------------------------------------------------ 4. bad inputs


def _good():
    return scene(2, 4, 16, 5, 3)


BAD_WRAPPER_CASES = [
    # (description, kwargs override, exception, message)
    ("radii float", dict(radii=torch.ones(2, 4, 2)), TypeError, "radii must be int32"),
    (
        "means2d float64",
        dict(means2d=torch.ones(2, 4, 2, dtype=torch.float64)),
        TypeError,
        "means2d must be float32",
    ),
    (
        "means2d not a tensor",
        dict(means2d=[[1.0, 2.0]]),
        TypeError,
        "means2d must be a torch.Tensor",
    ),
    (
        "means2d 3 coords",
        dict(means2d=torch.ones(2, 4, 3)),
        ValueError,
        "means2d must have shape [..., N, 2]",
    ),
    ("means2d 1-D", dict(means2d=torch.ones(2)), ValueError, "means2d must have shape [..., N, 2]"),
    (
        "radii shape",
        dict(radii=torch.ones(2, 5, 2, dtype=torch.int32)),
        ValueError,
        "radii must have shape [..., N, 2] = [2, 4, 2] like means2d",
    ),
    (
        "depths shape",
        dict(depths=torch.ones(2, 5)),
        ValueError,
        "depths must have shape [..., N] = [2, 4]",
    ),
    (
        "n_images mismatch",
        dict(n_images=3),
        ValueError,
        "n_images (3) must be 2, the number of images",
    ),
    (
        "image_ids dense",
        dict(image_ids=torch.zeros(8, dtype=torch.int64)),
        ValueError,
        "image_ids and gaussian_ids are for packed=True only",
    ),
    ("segmented int", dict(segmented=0), TypeError, "segmented must be a bool"),
    ("packed int", dict(packed=1), TypeError, "packed must be a bool"),
    (
        "devices",
        dict(depths=torch.ones(2, 4, device="meta")),
        ValueError,
        "must be on the same device",
    ),
    ("tile_size 0", dict(tile_size=0), ValueError, "tile_size must be positive"),
    ("tile_width -1", dict(tile_width=-1), ValueError, "tile_width must be positive"),
    ("tile_height float", dict(tile_height=3.0), TypeError, "tile_height must be an int"),
    ("sort int", dict(sort=1), TypeError, "sort must be a bool"),
    (
        "too many bits",
        dict(tile_width=2**16, tile_height=2**15),
        ValueError,
        "do not fit in a 64-bit isect_id",
    ),
]


@pytest.mark.parametrize("case", BAD_WRAPPER_CASES, ids=[c[0] for c in BAD_WRAPPER_CASES])
def test_wrapper_refuses_bad_inputs(case):
    _, override, exc, message = case
    means2d, radii, depths = _good()
    kwargs = dict(
        means2d=means2d,
        radii=radii,
        depths=depths,
        tile_size=16,
        tile_width=5,
        tile_height=3,
        sort=True,
    )
    kwargs.update(override)
    with pytest.raises(exc, match=re.escape(message)):
        isect_tiles(**kwargs)


def test_offset_encode_wrapper_refuses_bad_inputs():
    ids = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(TypeError, match="isect_ids must be int64"):
        isect_offset_encode(ids.int(), 1, 5, 3)
    with pytest.raises(ValueError, match=r"isect_ids must be 1-D \[M\]"):
        isect_offset_encode(ids.reshape(3, 1), 1, 5, 3)
    with pytest.raises(ValueError, match="n_images must be non-negative"):
        isect_offset_encode(ids, -1, 5, 3)
    with pytest.raises(ValueError, match="tile_width must be positive"):
        isect_offset_encode(ids, 1, 0, 3)
    with pytest.raises(ValueError, match="do not fit in a 64-bit isect_id"):
        isect_offset_encode(ids, 2**20, 2**8, 2**8)


@pytest.mark.parametrize("ops", BACKENDS)
def test_ops_refuse_bad_inputs(ops):
    # Direct calls skip the wrapper: the C++ checks must refuse with the op's name.
    name = "prebuild_simt" if ops is simt else "prebuild"
    m, r, d = _good()
    cases = [
        ((m, r.float(), d, 16, 5, 3, True), "radii must be int32"),
        ((m.double(), r, d, 16, 5, 3, True), "means2d must be float32"),
        ((m, r, d.double(), 16, 5, 3, True), "depths must be float32"),
        ((m[..., :1], r[..., :1], d, 16, 5, 3, True), r"means2d must have shape \[I, N, 2\]"),
        ((m, r[:, :3], d, 16, 5, 3, True), "means2d and radii must have the same shape"),
        ((m, r, d[:, :3], 16, 5, 3, True), r"depths must have shape \[I, N\]"),
        ((m, r, d[0], 16, 5, 3, True), "depths .* must have 2 dimensions"),
        (
            (m.transpose(0, 1), r.transpose(0, 1), d.t(), 16, 5, 3, True),
            "means2d must be contiguous",
        ),
        ((m, r, d, 0, 5, 3, True), "tile_size must be positive"),
        ((m, r, d, 16, 0, 3, True), "tile_width and tile_height must be positive"),
        (
            (m, r, d, 16, 2**16, 2**15, True),
            r"2 images \(2 bits\) and 65536x32768 tiles \(32 bits\) do not fit in a 64-bit",
        ),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=f"{name}::isect_tiles: {message}"):
            ops.isect_tiles(*args)

    _, ids, _ = ops.isect_tiles(m, r, d, 16, 5, 3, True)
    assert ids.numel() >= 2
    bad_offsets = [
        ((ids.int(), 2, 5, 3), "isect_ids must be int64"),
        ((ids[None], 2, 5, 3), "isect_ids .* must have 1 dimensions"),
        ((ids, -1, 5, 3), "n_images must be non-negative"),
        ((ids, 2, 5, -3), "tile_width and tile_height must be positive"),
        (
            (ids.flip(0), 2, 5, 3),
            r"isect_ids must be sorted \(as returned by isect_tiles with sort=True\); entry 1 ",
        ),
        (
            (ids, 1, 5, 3),
            r"isect_ids entry \d+ encodes image 1 and tile \d+, outside the 1 images of 15",
        ),
        ((torch.tensor([15 << 32]), 1, 5, 3), "isect_ids entry 0 encodes image 0 and tile 15"),
    ]
    assert int(ids[-1] >> 36) == 1  # camera 1 has entries
    for args, message in bad_offsets:
        with pytest.raises(RuntimeError, match=f"{name}::isect_offset_encode: {message}"):
            ops.isect_offset_encode(*args)


def test_fake_kernels_refuse_what_the_kernels_refuse():
    m, r, d = (t.to("meta") for t in _good())
    with pytest.raises(RuntimeError, match="radii must be int32"):
        CPU.isect_tiles(m, r.float(), d, 16, 5, 3, True)
    with pytest.raises(RuntimeError, match="depths must have shape"):
        CPU.isect_tiles(m, r, d[:, :1], 16, 5, 3, True)
    with pytest.raises(RuntimeError, match="isect_ids must be int64"):
        CPU.isect_offset_encode(torch.zeros(3, dtype=torch.int32, device="meta"), 1, 5, 3)
    p = [t.reshape(-1, *t.shape[2:]) for t in (m, r, d)]  # packed [nnz, ...]
    ids = torch.zeros(8, dtype=torch.int64, device="meta")
    with pytest.raises(RuntimeError, match="image_ids must be int64"):
        CPU.isect_tiles(*p, 16, 5, 3, True, ids.int(), 2)
    with pytest.raises(RuntimeError, match=r"n_images is required with image_ids \(packed\)"):
        CPU.isect_tiles(*p, 16, 5, 3, True, ids, None)
    with pytest.raises(RuntimeError, match=r"means2d must have shape \[I, N, 2\]"):
        CPU.isect_tiles(*p, 16, 5, 3, True, None, None)


# ------------------------------------------------------------ 5. opcheck and compile


@pytest.mark.parametrize("sort", [True, False])
@pytest.mark.parametrize("shape", [(2, 15), (2, 0)])
def test_opcheck(sort, shape):
    means2d, radii, depths = scene(*shape, 16, 5, 3, seed=2)
    torch.library.opcheck(CPU.isect_tiles.default, (means2d, radii, depths, 16, 5, 3, sort))
    _, ids, _ = CPU.isect_tiles(means2d, radii, depths, 16, 5, 3, True)
    torch.library.opcheck(CPU.isect_offset_encode.default, (ids, 2, 5, 3))


def test_opcheck_with_means_requiring_grad():
    means2d, radii, depths = scene(2, 10, 16, 5, 3, seed=4)
    torch.library.opcheck(
        CPU.isect_tiles.default, (means2d.requires_grad_(True), radii, depths, 16, 5, 3, True)
    )


def test_torch_compile_fullgraph():
    def tiles_and_offsets(means2d, radii, depths):
        tiles, ids, flat = prebuild.isect_tiles(means2d, radii, depths, 16, 5, 3)
        offsets = prebuild.isect_offset_encode(ids, means2d.shape[0], 5, 3)
        return tiles, ids, flat, offsets, flat.long().sum()  # uses M-sized outputs in-graph

    torch._dynamo.reset()
    compiled = torch.compile(tiles_and_offsets, fullgraph=True)
    for seed, N in ((0, 20), (1, 33)):  # a second size and a second M
        args = scene(2, N, 16, 5, 3, seed=seed)
        for got, want in zip(compiled(*args), tiles_and_offsets(*args)):
            assert_equal(got, want)


def test_opcheck_packed():
    C, N = 2, 12
    means2d, radii, depths = scene(C, N, 16, 5, 3, seed=6)
    keep = torch.rand(C, N, generator=torch.Generator().manual_seed(1)) < 0.7
    pm, pr, pd, image_ids, _ = packed_from_dense(means2d, radii, depths, keep)
    for sort in (True, False):
        torch.library.opcheck(CPU.isect_tiles.default, (pm, pr, pd, 16, 5, 3, sort, image_ids, C))
    # Dense with n_images given.
    torch.library.opcheck(
        CPU.isect_tiles.default, (means2d, radii, depths, 16, 5, 3, True, None, C)
    )


def test_torch_compile_fullgraph_batch_dims_and_packed():
    def dense(means2d, radii, depths):
        tiles, ids, flat = prebuild.isect_tiles(means2d, radii, depths, 16, 5, 3)
        offsets = prebuild.isect_offset_encode(ids, math.prod(means2d.shape[:-2]), 5, 3)
        return tiles, ids, flat, offsets.reshape(*means2d.shape[:-2], 3, 5)

    def packed(means2d, radii, depths, image_ids, gaussian_ids):
        tiles, ids, flat = prebuild.isect_tiles(
            means2d,
            radii,
            depths,
            16,
            5,
            3,
            packed=True,
            n_images=2,
            image_ids=image_ids,
            gaussian_ids=gaussian_ids,
        )
        return tiles, ids, flat, prebuild.isect_offset_encode(ids, 2, 5, 3)

    torch._dynamo.reset()
    try:
        means2d, radii, depths = scene(2, 20, 16, 5, 3, seed=10)
        batched = [t.expand(2, *t.shape) for t in (means2d, radii, depths)]
        for got, want in zip(torch.compile(dense, fullgraph=True)(*batched), dense(*batched)):
            assert_equal(got, want)
        args = packed_from_dense(means2d, radii, depths, (radii > 0).all(-1))
        for got, want in zip(torch.compile(packed, fullgraph=True)(*args), packed(*args)):
            assert_equal(got, want)
    finally:
        torch._dynamo.reset()
