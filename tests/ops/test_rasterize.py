"""Tests of prebuild.rasterize_to_pixels and its custom ops (CPU backend and the CUDA kernels'
block bodies run by the simt launcher) against the plain-PyTorch dense reference
(raster_reference.py). Tile lists come from gsplat 1.5.3's own torch implementation
(_isect_tiles + _isect_offset_encode). gsplat's own oracle, _torch_impl._rasterize_to_pixels,
cannot run here: it calls gsplat's CUDA rasterize_to_indices_in_range and nerfacc."""

from __future__ import annotations

import math

import pytest
import torch
from compiled import assert_compiled_matches_eager
from gsplat_oracle import torch_impl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raster_reference import rasterize_reference

import prebuild
from prebuild.ops.rasterize import rasterize_to_pixels
from prebuild.testing import simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]


# ----------------------------------------------------------------------------- scenes


def make_scene(
    C=2,
    N=60,
    W=37,
    H=23,
    D=3,
    tile_size=16,
    seed=0,
    background=False,
    overlap=0,
    cull=0.1,
    indefinite=0,
    opacity_shape="CN",
):
    """Random Gaussians in and around a W x H image with gsplat's tile lists.

    overlap: that many extra large, nearly opaque Gaussians stacked at the image centre
    (pixels there reach the early stop). cull: fraction with radii 0 (no tiles).
    indefinite: that many Gaussians with an indefinite conic (sigma < 0 at some pixels)."""
    g = torch.Generator().manual_seed(seed)
    total = N + overlap
    means = torch.rand(C, total, 2, generator=g) * torch.tensor([W + 16.0, H + 16.0]) - 8.0
    theta = torch.rand(C, total, generator=g) * math.pi
    s = 1.0 + 5.0 * torch.rand(C, total, 2, generator=g)
    opac = 0.05 + 0.95 * torch.rand(C, total, generator=g)
    if overlap:
        means[:, N:] = torch.tensor([W / 2, H / 2]) + 2.0 * torch.randn(C, overlap, 2, generator=g)
        s[:, N:] = 6.0 + 4.0 * torch.rand(C, overlap, 2, generator=g)
        opac[:, N:] = 0.9 + 0.09 * torch.rand(C, overlap, generator=g)
    cos, sin = torch.cos(theta), torch.sin(theta)
    R = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    cov = R @ torch.diag_embed(s * s) @ R.transpose(-1, -2)
    inv = torch.linalg.inv(cov)
    conics = torch.stack([inv[..., 0, 0], inv[..., 0, 1], inv[..., 1, 1]], -1)
    if indefinite:
        conics[:, :indefinite, 1] = (
            3.0 * conics[:, :indefinite, 0].abs().sqrt() * (conics[:, :indefinite, 2].abs().sqrt())
        )
    radii = torch.ceil(3.0 * torch.sqrt(torch.diagonal(cov, dim1=-2, dim2=-1))).int()
    radii[torch.rand(C, total, generator=g) < cull] = 0
    depths = 0.1 + 10.0 * torch.rand(C, total, generator=g)
    colors = torch.rand(C, total, D, generator=g)
    tiles_x, tiles_y = -(-W // tile_size), -(-H // tile_size)
    _, isect_ids, flatten_ids = torch_impl._isect_tiles(
        means, radii, depths, tile_size, tiles_x, tiles_y
    )
    isect_offsets = torch_impl._isect_offset_encode(isect_ids, C, tiles_x, tiles_y)
    if opacity_shape == "N":
        opac = opac[0]
    bg = torch.rand(C, D, generator=g) if background else None
    return dict(
        means2d=means.float().contiguous(),
        conics=conics.float().contiguous(),
        colors=colors.contiguous(),
        opacities=opac.contiguous(),
        image_width=W,
        image_height=H,
        tile_size=tile_size,
        isect_offsets=isect_offsets.int(),
        flatten_ids=flatten_ids.int().contiguous(),
        backgrounds=bg,
    )


ARG_ORDER = [
    "means2d",
    "conics",
    "colors",
    "opacities",
    "backgrounds",
    "image_width",
    "image_height",
    "tile_size",
    "isect_offsets",
    "flatten_ids",
]
DIFF = ["means2d", "conics", "colors", "opacities", "backgrounds"]


def op_args(scene):
    return [scene[k] for k in ARG_ORDER]


def reference(scene, dtype=torch.float64, requires_grad=False, return_stopped=False):
    s = dict(scene)
    leaves = {}
    for k in DIFF:
        if s[k] is not None:
            s[k] = s[k].to(dtype).detach().requires_grad_(requires_grad)
            leaves[k] = s[k]
    out = rasterize_reference(
        s["means2d"],
        s["conics"],
        s["colors"],
        s["opacities"],
        s["image_width"],
        s["image_height"],
        s["tile_size"],
        s["isect_offsets"],
        s["flatten_ids"],
        s["backgrounds"],
        return_stopped=return_stopped,
    )
    return out, leaves


def backend_grads(ops, scene, v_colors, v_alphas, masks=None, absgrad=False):
    """Forward and all input gradients through a backend's raw ops (with absgrad, also
    means2d's as "absgrad")."""
    args = op_args(scene)
    colors, alphas, last_ids = ops.rasterize_to_pixels_forward(*args, masks)
    v_means, v_conics, v_cols, v_opac, v_abs = ops.rasterize_to_pixels_backward(
        *args, masks, alphas, last_ids, v_colors, v_alphas, absgrad
    )
    grads = dict(means2d=v_means, conics=v_conics, colors=v_cols, opacities=v_opac)
    if absgrad:
        grads["absgrad"] = v_abs
    else:
        assert v_abs.shape == (0,)
    if scene["backgrounds"] is not None:
        grads["backgrounds"] = (v_colors * (1.0 - alphas)).sum(dim=(1, 2))
    return colors, alphas, last_ids, grads


def reference_grads(scene, v_colors, v_alphas):
    (colors, alphas), leaves = reference(scene, requires_grad=True)
    names = list(leaves)
    gs = torch.autograd.grad(
        (colors * v_colors.double()).sum() + (alphas * v_alphas.double()).sum(),
        [leaves[n] for n in names],
    )
    return colors.detach(), alphas.detach(), dict(zip(names, gs))


def assert_values_close(got, want):
    """1e-4 relative (to the value's scale) agreement of rendered images."""
    assert got.shape == want.shape and got.dtype == torch.float32
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-4 * scale)


def assert_grads_close(got, want):
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        # float32 kernels vs float64 autograd: transmittance recovered by division loses a few
        # ulps per step, so compare against the gradient's scale.
        scale = w.abs().max().item()
        torch.testing.assert_close(
            g.double(),
            w,
            rtol=1e-3,
            atol=2e-4 * max(scale, 1e-3),
            msg=lambda m, name=name: f"{name}: {m}",
        )


SCENES = {
    "odd_37x23_rgb": dict(C=2, N=60, W=37, H=23, D=3, tile_size=16),
    "odd_37x23_rgb_bg": dict(C=2, N=60, W=37, H=23, D=3, tile_size=16, background=True),
    "gray_tile8": dict(C=3, N=40, W=21, H=19, D=1, tile_size=8, background=True),
    "d32_overlap": dict(C=1, N=30, W=20, H=17, D=32, tile_size=8, overlap=25, background=True),
    "overlap_stop": dict(C=2, N=20, W=33, H=29, D=3, tile_size=16, overlap=40),
    "d40_chunks": dict(C=1, N=30, W=18, H=13, D=40, tile_size=8, background=True),
    "indefinite": dict(C=1, N=40, W=24, H=24, D=2, tile_size=8, indefinite=10),
    "tile4_d5": dict(C=2, N=30, W=13, H=11, D=5, tile_size=4, background=True),
    # Tile runs longer than a batch (16 and 256 Gaussians) with the early stop: several
    # shared-memory batches, the forward's all-done exit and the backward's batch skip.
    "tile4_overlap_batches": dict(
        C=2, N=20, W=13, H=11, D=3, tile_size=4, overlap=30, background=True
    ),
    # 400 threads per block, batches of 256: some threads load nothing.
    "tile20_overlap_batches": dict(C=1, N=20, W=27, H=21, D=2, tile_size=20, overlap=300),
}
SIMT_SCENES = [
    "odd_37x23_rgb_bg",
    "gray_tile8",
    "d32_overlap",
    "d40_chunks",
    "indefinite",
    "overlap_stop",
    "tile4_d5",
    "tile4_overlap_batches",
    "tile20_overlap_batches",
]


def max_run(scene):
    offsets = scene["isect_offsets"].flatten().tolist() + [scene["flatten_ids"].numel()]
    return max(b - a for a, b in zip(offsets[:-1], offsets[1:]))


def scene_cases():
    for name, kw in SCENES.items():
        yield pytest.param(CPU, name, id=f"cpu-{name}")
        if name in SIMT_SCENES:
            yield pytest.param(simt, name, id=f"simt-{name}", marks=pytest.mark.simt)


# ------------------------------------------------------------------------ values


@pytest.mark.parametrize("ops,name", list(scene_cases()))
def test_forward_matches_reference(ops, name):
    scene = make_scene(**SCENES[name], seed=3)
    colors, alphas, last_ids = ops.rasterize_to_pixels_forward(*op_args(scene))
    (ref_c, ref_a, stopped), _ = reference(scene, return_stopped=True)
    assert_values_close(colors, ref_c)
    assert_values_close(alphas, ref_a)
    C, H, W = alphas.shape[:3]
    assert last_ids.shape == (C, H, W) and last_ids.dtype == torch.int32
    assert scene["flatten_ids"].numel() > 0
    if "overlap" in name:
        assert stopped > 0  # the early stop is exercised
        assert alphas.max().item() > 0.999
    if "batches" in name:
        assert max_run(scene) > min(256, scene["tile_size"] ** 2)  # several batches


@pytest.mark.parametrize("name", SIMT_SCENES)
@pytest.mark.simt
def test_simt_forward_equals_cpu(name):
    """Same per-pixel math in the same order: identical results, including last_ids."""
    scene = make_scene(**SCENES[name], seed=5)
    got = simt.rasterize_to_pixels_forward(*op_args(scene))
    want = CPU.rasterize_to_pixels_forward(*op_args(scene))
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.simt
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log_opacity=st.floats(-30.0, 60.0),
    margins=st.lists(st.floats(-0.03, 0.03), min_size=1, max_size=64),
    seed=st.integers(0, 2**16),
)
def test_far_gaussians_are_skipped_exactly_where_the_full_test_skips_them(
    log_opacity, margins, seed
):
    """The CPU skips the exp of a Gaussian once sigma > ln(255 opacity) + 0.01 (skip_sigma);
    the CUDA kernels never do. Gaussians placed so that sigma at one pixel centre sits
    around that bound and around the 1/255 threshold itself (margins of +-0.03) must get the
    very same decisions and bits on both."""
    g = torch.Generator().manual_seed(seed)
    n = len(margins)
    opacity = math.exp(log_opacity)
    sigma = torch.tensor([math.log(255.0 * opacity) + m for m in margins], dtype=torch.float64)
    px = torch.randint(0, 16, (n,), generator=g).double() + 0.5
    py = torch.randint(0, 16, (n,), generator=g).double() + 0.5
    dx = torch.rand(n, generator=g, dtype=torch.float64) * 3 + 0.5
    # sigma = 0.5 a dx^2 at the pixel (mean offset along x only, b = 0).
    a = (2 * sigma.clamp(min=1e-3) / dx**2).float()
    means2d = torch.stack([px + dx, py], -1).float()[None]
    conics = torch.stack([a, torch.zeros(n), torch.full((n,), 50.0)], -1)[None]
    args = [
        means2d,
        conics,
        torch.rand(1, n, 1, generator=g),
        torch.full((1, n), opacity, dtype=torch.float32),
        None,
        16,
        16,
        16,
        torch.zeros(1, 1, 1, dtype=torch.int32),
        torch.arange(n, dtype=torch.int32),
        None,
        False,
    ]
    for got, want in zip(
        CPU.rasterize_to_pixels_forward(*args), simt.rasterize_to_pixels_forward(*args)
    ):
        assert torch.equal(got, want)


# --------------------------------------------------------------------- gradients


@pytest.mark.parametrize("ops,name", list(scene_cases()))
def test_gradients_match_reference_autograd(ops, name):
    scene = make_scene(**SCENES[name], seed=7)
    C, H, W, D = (
        scene["colors"].shape[0],
        scene["image_height"],
        scene["image_width"],
        scene["colors"].shape[2],
    )
    g = torch.Generator().manual_seed(11)
    v_colors = torch.randn(C, H, W, D, generator=g)
    v_alphas = torch.randn(C, H, W, 1, generator=g)
    colors, alphas, _, grads = backend_grads(ops, scene, v_colors, v_alphas)
    ref_c, ref_a, ref_grads = reference_grads(scene, v_colors, v_alphas)
    assert_values_close(colors, ref_c)
    assert_values_close(alphas, ref_a)
    assert set(grads) == set(ref_grads)
    assert_grads_close(grads, ref_grads)
    # Every gradient is exercised (not trivially zero).
    for name_, gr in grads.items():
        assert gr.abs().max() > 0, name_


@pytest.mark.simt
def test_simt_backward_close_to_cpu():
    scene = make_scene(**SCENES["odd_37x23_rgb_bg"], seed=9)
    v_colors = torch.randn(2, 23, 37, 3)
    v_alphas = torch.randn(2, 23, 37, 1)
    _, _, _, a = backend_grads(simt, scene, v_colors, v_alphas)
    _, _, _, b = backend_grads(CPU, scene, v_colors, v_alphas)
    for k in a:
        # Same terms, summed in another order (atomics per pixel vs per-entry rows).
        scale = b[k].abs().max().item()
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.simt
@pytest.mark.parametrize("name", SIMT_SCENES)
def test_simt_backward_with_absgrad_close_to_cpu(name):
    """Every simt scene (full and partial warps: tiles of 4, 8, 16 and 20 pixels; several
    channel chunks; early stops): the warp sums the kernel adds per Gaussian are the CPU's
    terms in another order."""
    kw = SCENES[name]
    scene = make_scene(**kw, seed=17)
    I, H, W, D = scene["isect_offsets"].shape[0], kw["H"], kw["W"], kw["D"]
    g = torch.Generator().manual_seed(8)
    v_colors, v_alphas = torch.randn(I, H, W, D, generator=g), torch.randn(I, H, W, 1, generator=g)
    _, _, _, a = backend_grads(simt, scene, v_colors, v_alphas, absgrad=True)
    _, _, _, b = backend_grads(CPU, scene, v_colors, v_alphas, absgrad=True)
    for k in a:
        scale = b[k].abs().max().item()
        torch.testing.assert_close(
            a[k], b[k], rtol=1e-5, atol=1e-5 * scale, msg=lambda m, k=k: f"{k}: {m}"
        )
        assert scale > 0, k


def test_cpu_backward_is_deterministic_across_thread_counts():
    scene = make_scene(**SCENES["overlap_stop"], seed=13)
    v_colors = torch.randn(2, 29, 33, 3)
    v_alphas = torch.randn(2, 29, 33, 1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, _, _, one = backend_grads(CPU, scene, v_colors, v_alphas)
        torch.set_num_threads(max(2, threads))
        _, _, _, many = backend_grads(CPU, scene, v_colors, v_alphas)
    finally:
        torch.set_num_threads(threads)
    for k in one:
        assert torch.equal(one[k], many[k]), k


def test_public_function_autograd_with_shared_opacities():
    """opacities [N] are broadcast over the cameras; their gradient is summed back."""
    scene = make_scene(
        C=3, N=40, W=29, H=18, D=3, tile_size=16, background=True, opacity_shape="N", seed=17
    )
    leaves = {k: scene[k].clone().requires_grad_(True) for k in DIFF}
    s = {**scene, **leaves}
    colors, alphas = rasterize_to_pixels(
        s["means2d"],
        s["conics"],
        s["colors"],
        s["opacities"],
        s["image_width"],
        s["image_height"],
        s["tile_size"],
        s["isect_offsets"],
        s["flatten_ids"],
        backgrounds=s["backgrounds"],
    )
    assert leaves["opacities"].shape == (40,)
    v_colors, v_alphas = torch.randn_like(colors), torch.randn_like(alphas)
    ((colors * v_colors).sum() + (alphas * v_alphas).sum()).backward()
    ref_c, ref_a, ref_grads = reference_grads(scene, v_colors, v_alphas)
    assert_values_close(colors.detach(), ref_c)
    assert_values_close(alphas.detach(), ref_a)
    assert_grads_close({k: v.grad for k, v in leaves.items()}, ref_grads)


def test_public_function_matches_op_and_reference_without_background():
    scene = make_scene(**SCENES["tile4_d5"], seed=19)
    scene["backgrounds"] = None
    colors, alphas = prebuild.rasterize_to_pixels(
        *[scene[k] for k in ARG_ORDER if k != "backgrounds"]
    )
    (ref_c, ref_a), _ = reference(scene)
    assert_values_close(colors, ref_c)
    assert_values_close(alphas, ref_a)


def test_only_alpha_used_gives_gradients():
    scene = make_scene(**SCENES["gray_tile8"], seed=23)
    m = scene["means2d"].clone().requires_grad_(True)
    _, alphas = rasterize_to_pixels(
        m,
        *[scene[k] for k in ARG_ORDER[1:4]],
        *[scene[k] for k in ARG_ORDER[5:]],
        backgrounds=scene["backgrounds"],
    )
    alphas.sum().backward()
    s = dict(scene)
    (_, ref_a), leaves = reference(s, requires_grad=True)
    (ref_g,) = torch.autograd.grad(ref_a.sum(), [leaves["means2d"]])
    assert_grads_close({"means2d": m.grad}, {"means2d": ref_g})


# --------------------------------------------------------------------- empty scenes


@pytest.mark.parametrize("ops", BACKENDS)
@pytest.mark.parametrize("N", [0, 5])
def test_empty_scene_renders_background(ops, N):
    C, H, W, D = 2, 9, 20, 3
    scene = make_scene(C=C, N=N, W=W, H=H, D=D, tile_size=8, background=True, cull=1.1)
    assert scene["flatten_ids"].numel() == 0
    colors, alphas, last_ids = ops.rasterize_to_pixels_forward(*op_args(scene))
    torch.testing.assert_close(colors, scene["backgrounds"][:, None, None, :].expand(C, H, W, D))
    assert torch.equal(alphas, torch.zeros(C, H, W, 1))
    assert torch.equal(last_ids, torch.full((C, H, W), -1, dtype=torch.int32))
    v = torch.randn(C, H, W, D)
    grads = ops.rasterize_to_pixels_backward(
        *op_args(scene), None, alphas, last_ids, v, torch.randn(C, H, W, 1), True
    )
    for gr in grads:
        assert torch.equal(gr, torch.zeros_like(gr))
    assert grads[4].shape == scene["means2d"].shape  # absgrad
    scene["backgrounds"] = None
    colors, _, _ = ops.rasterize_to_pixels_forward(*op_args(scene))
    assert torch.equal(colors, torch.zeros(C, H, W, D))


def test_empty_scene_background_gradient():
    scene = make_scene(C=1, N=0, W=5, H=4, D=2, tile_size=4, background=True)
    bg = scene["backgrounds"].clone().requires_grad_(True)
    colors, _ = rasterize_to_pixels(
        *[scene[k] for k in ARG_ORDER if k != "backgrounds"], backgrounds=bg
    )
    colors.sum().backward()
    assert torch.equal(bg.grad, torch.full((1, 2), 20.0))


# -------------------------------------- batch dimensions, channels, packed, masks, absgrad


def batched(scene, lead):
    """The scene's I images as leading dimensions `lead` (prod(lead) = I)."""
    out = dict(scene)
    for k in ("means2d", "conics", "colors", "opacities", "isect_offsets", "backgrounds"):
        if out[k] is not None:
            out[k] = out[k].reshape(*lead, *out[k].shape[1:])
    return out


def packed(scene, seed=0):
    """gsplat's packed layout of a dense scene: the (image, Gaussian) rows its flatten_ids
    use plus some unused ones (image-major, as gsplat's packed projection), and flatten_ids
    renumbered into them. Returns (packed scene, keep [I, N] bool)."""
    I, N = scene["opacities"].shape
    keep = torch.rand(I, N, generator=torch.Generator().manual_seed(seed)) < 0.3
    keep.view(-1)[scene["flatten_ids"].long()] = True
    renumber = torch.full((I * N,), -1, dtype=torch.int32)
    renumber[keep.flatten()] = torch.arange(int(keep.sum()), dtype=torch.int32)
    out = dict(scene, flatten_ids=renumber[scene["flatten_ids"].long()])
    for k in ("means2d", "conics", "colors", "opacities"):
        out[k] = scene[k][keep].contiguous()
    assert (~keep).any()  # some rows are dropped (scenes with culled Gaussians)
    return out, keep


def masked(scene, masks):
    """The scene with the entries of masked-out tiles removed from the tile lists: what a
    masked tile renders (the background, alpha 0) and its gradients (none)."""
    offsets = scene["isect_offsets"].flatten().tolist() + [scene["flatten_ids"].numel()]
    runs = [
        scene["flatten_ids"][a:b]
        for a, b, keep in zip(offsets[:-1], offsets[1:], masks.flatten().tolist())
        if keep
    ]
    lengths = torch.tensor(
        [0]
        + [
            int(keep) * (b - a)
            for a, b, keep in zip(offsets[:-1], offsets[1:], masks.flatten().tolist())
        ]
    )
    starts = torch.cumsum(lengths, 0)[:-1].int().reshape(scene["isect_offsets"].shape)
    ids = torch.cat(runs) if runs else scene["flatten_ids"][:0]
    return dict(scene, isect_offsets=starts.contiguous(), flatten_ids=ids.contiguous())


def public_call(scene, leaves=None, **kwargs):
    s = {**scene, **(leaves or {})}
    return rasterize_to_pixels(
        s["means2d"],
        s["conics"],
        s["colors"],
        s["opacities"],
        s["image_width"],
        s["image_height"],
        s["tile_size"],
        s["isect_offsets"],
        s["flatten_ids"],
        backgrounds=s["backgrounds"],
        **kwargs,
    )


def gsplat_close(got, want, name):
    """gsplat's tolerances (tests/test_basic.py::test_rasterize_to_pixels): default float32
    ones for values, its per-gradient ones for gradients, applied to gradients divided by
    their scale when that exceeds 1 (these scenes' conic gradients reach 1e3, where float32
    rounding alone exceeds an absolute 1e-3), against the float64 reference."""
    tol = dict(
        means2d=(5e-3, 5e-3),
        conics=(1e-3, 1e-3),
        colors=(1e-3, 1e-3),
        opacities=(8e-3, 6e-3),
        backgrounds=(1e-3, 1e-3),
    ).get(name)
    want = want.to(got.dtype)
    if tol is None:
        torch.testing.assert_close(got, want, msg=lambda m: f"{name}: {m}")
        return
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(
        got / scale,
        want / scale,
        rtol=tol[0],
        atol=tol[1],
        msg=lambda m: f"{name} (/{scale:.3g}): {m}",
    )


@pytest.mark.parametrize("batch_dims", [(), (2,), (1, 2)], ids=str)
@pytest.mark.parametrize("D,tile_size", [(3, 16), (32, 16), (128, 16), (3, 4), (32, 4), (128, 4)])
def test_batch_dims_and_channels_as_gsplat(batch_dims, D, tile_size):
    # gsplat's test_rasterize_to_pixels: [..., C, N] inputs with backgrounds, values and all
    # gradients with its tolerances; opacities broadcast over the batch as there.
    C = 2
    I = math.prod(batch_dims) * C
    scene = make_scene(
        C=I,
        N=25,
        W=19,
        H=14,
        D=D,
        tile_size=tile_size,
        background=True,
        overlap=5,
        seed=D + tile_size + len(batch_dims),
    )
    lead = (*batch_dims, C)
    s = batched(scene, lead)
    leaves = {k: s[k].clone().requires_grad_(True) for k in DIFF}
    colors, alphas = public_call(s, leaves)
    assert colors.shape == (*lead, 14, 19, D) and alphas.shape == (*lead, 14, 19, 1)
    v_colors, v_alphas = torch.randn_like(colors), torch.randn_like(alphas)
    ((colors * v_colors).sum() + (alphas * v_alphas).sum()).backward()
    ref_c, ref_a, ref_grads = reference_grads(
        scene, v_colors.reshape(I, 14, 19, D), v_alphas.reshape(I, 14, 19, 1)
    )
    gsplat_close(colors.detach(), ref_c.reshape(colors.shape), "render_colors")
    gsplat_close(alphas.detach(), ref_a.reshape(alphas.shape), "render_alphas")
    for name, leaf in leaves.items():
        assert leaf.grad.shape == leaf.shape
        gsplat_close(leaf.grad, ref_grads[name].reshape(leaf.shape), name)
        assert leaf.grad.abs().max() > 0, name


@pytest.mark.simt
@pytest.mark.parametrize("D,tile_size", [(3, 16), (32, 16), (128, 16), (3, 4), (32, 4), (128, 4)])
def test_simt_channels_as_gsplat(D, tile_size):
    # The channel counts and tile sizes of gsplat's test on the CUDA block bodies (several
    # channel chunks for D = 32 and 128), values and gradients with gsplat's tolerances.
    scene = make_scene(
        C=2,
        N=20,
        W=19,
        H=14,
        D=D,
        tile_size=tile_size,
        background=True,
        overlap=5,
        seed=D * tile_size,
    )
    g = torch.Generator().manual_seed(8)
    v_colors, v_alphas = (
        torch.randn(2, 14, 19, D, generator=g),
        torch.randn(2, 14, 19, 1, generator=g),
    )
    colors, alphas, _, grads = backend_grads(simt, scene, v_colors, v_alphas)
    ref_c, ref_a, ref_grads = reference_grads(scene, v_colors, v_alphas)
    gsplat_close(colors, ref_c, "render_colors")
    gsplat_close(alphas, ref_a, "render_alphas")
    for name, grad in grads.items():
        gsplat_close(grad, ref_grads[name], name)


def test_batch_dims_with_expanded_inputs_and_shared_opacities():
    # gsplat's test expands [C, N, ...] inputs over the batch dimensions (stride 0); the
    # gradients reach the tensors they were expanded from, summed over the batch.
    scene = make_scene(
        C=2, N=20, W=13, H=11, D=3, tile_size=8, background=True, opacity_shape="N", seed=3
    )
    batch = 3
    offsets, ids = isect_offsets_for_batch(scene, batch)
    base = {k: scene[k].clone().requires_grad_(True) for k in DIFF}
    expanded = {k: v.expand(batch, *v.shape) for k, v in base.items()}
    expanded["opacities"] = base["opacities"]  # [N]: shared by every image
    colors, _ = public_call({**scene, "isect_offsets": offsets, "flatten_ids": ids}, expanded)
    assert colors.shape == (batch, 2, 11, 13, 3)
    colors.sum().backward()
    single = {k: scene[k].clone().requires_grad_(True) for k in DIFF}
    one_c, _ = public_call(scene, single)
    one_c.sum().backward()
    for i in range(batch):
        assert torch.equal(colors[i].detach(), one_c.detach())
    for k in DIFF:
        torch.testing.assert_close(base[k].grad, batch * single[k].grad)


def isect_offsets_for_batch(scene, batch):
    """Tile lists of `batch` copies of the scene's C images, one copy after the other:
    (isect_offsets [batch, C, th, tw], flatten_ids)."""
    C, N = scene["means2d"].shape[:2]
    M = scene["flatten_ids"].numel()
    offsets = torch.stack([scene["isect_offsets"] + b * M for b in range(batch)])
    ids = torch.cat([scene["flatten_ids"] + b * C * N for b in range(batch)])
    return offsets.int(), ids.int()


PACKED_CASES = [
    pytest.param(CPU, dict(C=2, N=40, W=21, H=13, D=3, tile_size=8, background=True), id="cpu-rgb"),
    pytest.param(CPU, dict(C=3, N=20, W=13, H=9, D=40, tile_size=4, overlap=10), id="cpu-d40"),
    pytest.param(
        simt,
        dict(C=2, N=40, W=21, H=13, D=3, tile_size=8, background=True),
        id="simt-rgb",
        marks=pytest.mark.simt,
    ),
    pytest.param(
        simt,
        dict(C=1, N=20, W=13, H=9, D=40, tile_size=4, overlap=10),
        id="simt-d40",
        marks=pytest.mark.simt,
    ),
]


@pytest.mark.parametrize("ops,kw", PACKED_CASES)
def test_packed_equals_dense(ops, kw):
    dense = make_scene(**kw, seed=71)
    pscene, keep = packed(dense)
    I, H, W, D = dense["isect_offsets"].shape[0], kw["H"], kw["W"], kw["D"]
    g = torch.Generator().manual_seed(5)
    v_colors, v_alphas = torch.randn(I, H, W, D, generator=g), torch.randn(I, H, W, 1, generator=g)
    d_out = backend_grads(ops, dense, v_colors, v_alphas, absgrad=True)
    p_out = backend_grads(ops, pscene, v_colors, v_alphas, absgrad=True)
    for a, b in zip(p_out[:3], d_out[:3]):  # the same Gaussians in the same order per tile
        assert torch.equal(a, b)
    for name, grad in d_out[3].items():
        if name == "backgrounds":
            assert torch.equal(p_out[3][name], grad)
            continue
        want = grad[keep]
        assert p_out[3][name].shape == want.shape
        # CPU: the same sums in the same order; simt: the same atomics, in block order.
        torch.testing.assert_close(p_out[3][name], want, rtol=1e-6, atol=1e-7 * want.abs().max())
        assert want.abs().max() > 0
    (ref_c, _), _ = reference(dense)
    assert_values_close(p_out[0], ref_c)


def test_packed_public_function_gradients():
    # Packed rows with isect_offsets and backgrounds carrying batch dimensions (1, 2).
    dense = make_scene(C=2, N=30, W=17, H=12, D=4, tile_size=8, background=True, seed=73)
    pscene, keep = packed(dense)
    leaves = {k: pscene[k].clone().requires_grad_(True) for k in DIFF}
    s = dict(pscene, isect_offsets=pscene["isect_offsets"].reshape(1, 2, 2, 3))
    colors, alphas = public_call(
        s, {**leaves, "backgrounds": leaves["backgrounds"].reshape(1, 2, 4)}, packed=True
    )
    assert colors.shape == (1, 2, 12, 17, 4) and alphas.shape == (1, 2, 12, 17, 1)
    v_colors, v_alphas = torch.randn_like(colors), torch.randn_like(alphas)
    ((colors * v_colors).sum() + (alphas * v_alphas).sum()).backward()
    ref_c, ref_a, ref_grads = reference_grads(dense, v_colors[0], v_alphas[0])
    assert_values_close(colors[0].detach(), ref_c)
    assert_values_close(alphas[0].detach(), ref_a)
    want = {k: (g if k == "backgrounds" else g[keep]) for k, g in ref_grads.items()}
    assert_grads_close({k: v.grad for k, v in leaves.items()}, want)


MASK_CASES = [
    pytest.param(CPU, dict(C=2, N=40, W=21, H=13, D=3, tile_size=8, background=True), id="cpu"),
    pytest.param(CPU, dict(C=1, N=20, W=13, H=9, D=20, tile_size=4, background=True), id="cpu-d20"),
    pytest.param(
        simt,
        dict(C=2, N=40, W=21, H=13, D=3, tile_size=8, background=True),
        id="simt",
        marks=pytest.mark.simt,
    ),
    pytest.param(
        simt,
        dict(C=1, N=20, W=13, H=9, D=20, tile_size=4, background=True),
        id="simt-d20",
        marks=pytest.mark.simt,
    ),
]


@pytest.mark.parametrize("ops,kw", MASK_CASES)
def test_masked_tiles_render_background(ops, kw):
    scene = make_scene(**kw, overlap=8, seed=79)
    offsets = scene["isect_offsets"]
    masks = torch.rand(offsets.shape, generator=torch.Generator().manual_seed(2)) < 0.6
    masks.view(-1)[0] = False
    I, H, W, D = offsets.shape[0], kw["H"], kw["W"], kw["D"]
    g = torch.Generator().manual_seed(6)
    v_colors, v_alphas = torch.randn(I, H, W, D, generator=g), torch.randn(I, H, W, 1, generator=g)
    colors, alphas, last_ids, grads = backend_grads(ops, scene, v_colors, v_alphas, masks, True)
    ref = masked(scene, masks)
    ref_c, ref_a, ref_grads = reference_grads(ref, v_colors, v_alphas)
    assert_values_close(colors, ref_c)
    assert_values_close(alphas, ref_a)
    assert_grads_close({k: v for k, v in grads.items() if k != "absgrad"}, ref_grads)
    ts = kw["tile_size"]
    pixel_masks = masks.repeat_interleave(ts, 1).repeat_interleave(ts, 2)[:, :H, :W]
    assert torch.equal(
        colors[~pixel_masks], scene["backgrounds"][:, None, None].expand(I, H, W, D)[~pixel_masks]
    )
    assert (alphas[~pixel_masks] == 0).all() and (last_ids[~pixel_masks] == -1).all()
    assert (alphas[pixel_masks] > 0).any()
    # The same tiles unmasked render as without masks.
    full = ops.rasterize_to_pixels_forward(*op_args(scene))
    assert torch.equal(colors[pixel_masks], full[0][pixel_masks])


def test_masks_public_function_with_batch_dims():
    scene = make_scene(C=4, N=30, W=19, H=13, D=3, tile_size=8, background=True, seed=83)
    masks = (
        torch.rand(scene["isect_offsets"].shape, generator=torch.Generator().manual_seed(3)) < 0.5
    )
    s = batched(scene, (2, 2))
    leaves = {k: s[k].clone().requires_grad_(True) for k in DIFF}
    colors, alphas = public_call(s, leaves, masks=masks.reshape(2, 2, *masks.shape[1:]))
    colors.square().sum().backward()
    ref = masked(scene, masks)
    (ref_c, ref_a), ref_leaves = reference(ref, requires_grad=True)
    ref_c.square().sum().backward()
    assert_values_close(colors.detach().reshape(ref_c.shape), ref_c.detach())
    assert_values_close(alphas.detach().reshape(ref_a.shape), ref_a.detach())
    assert_grads_close(
        {k: v.grad.reshape(ref_leaves[k].shape) for k, v in leaves.items()},
        {k: v.grad for k, v in ref_leaves.items()},
    )


def absgrad_reference(scene, v_colors, v_alphas):
    """gsplat's absgrad from its definition, independently of the kernels: per pixel p the
    gradient of L_p = v_colors[p] . colors[p] + v_alphas[p] alphas[p] with respect to every
    Gaussian's mean (float64 autograd of the dense reference), absolute values summed over
    the pixels."""
    (colors, alphas), leaves = reference(scene, requires_grad=True)
    per_pixel = (
        (colors * v_colors.double()).sum(-1) + (alphas * v_alphas.double()).sum(-1)
    ).flatten()
    one_hot = torch.eye(per_pixel.numel(), dtype=per_pixel.dtype)  # one pixel per batch entry
    (jacobian,) = torch.autograd.grad(per_pixel, leaves["means2d"], one_hot, is_grads_batched=True)
    return jacobian.abs().sum(0)


ABSGRAD_CASES = [
    pytest.param(ops, kw, id=f"{name}-{label}", marks=[pytest.mark.simt] if ops is simt else [])
    for name, ops in (("cpu", CPU), ("simt", simt))
    for label, kw in (
        ("rgb_bg", dict(C=2, N=12, W=11, H=9, D=3, tile_size=4, background=True)),
        ("d40_chunks", dict(C=1, N=10, W=9, H=7, D=40, tile_size=4, overlap=4)),
    )
]


@pytest.mark.parametrize("ops,kw", ABSGRAD_CASES)
def test_absgrad_matches_per_pixel_autograd(ops, kw):
    # D = 40 takes three channel chunks in the backward: the sum of absolute values must be
    # over whole-pixel contributions, not over chunks.
    scene = make_scene(**kw, seed=89)
    I, H, W, D = scene["isect_offsets"].shape[0], kw["H"], kw["W"], kw["D"]
    g = torch.Generator().manual_seed(7)
    v_colors, v_alphas = torch.randn(I, H, W, D, generator=g), torch.randn(I, H, W, 1, generator=g)
    _, _, _, grads = backend_grads(ops, scene, v_colors, v_alphas, absgrad=True)
    want = absgrad_reference(scene, v_colors, v_alphas)
    assert_grads_close({"absgrad": grads["absgrad"]}, {"absgrad": want})
    assert (grads["absgrad"] >= grads["means2d"].abs() - 1e-6).all()
    # Pixels pull a Gaussian different ways: the sum of |.| exceeds |sum| somewhere.
    assert (want > grads["means2d"].abs().double() * 1.5 + 1e-3).any()
    without = backend_grads(ops, scene, v_colors, v_alphas)[3]
    for k, v in without.items():
        assert torch.equal(v, grads[k]), k


def test_absgrad_attribute_on_the_tensor_passed_in():
    scene = make_scene(C=2, N=20, W=13, H=10, D=3, tile_size=8, background=True, seed=97)
    v_colors = torch.randn(2, 10, 13, 3)
    _, _, _, want = backend_grads(CPU, scene, v_colors, torch.zeros(2, 10, 13, 1), absgrad=True)

    def run(means2d, s=scene, **kwargs):
        colors, _ = public_call(s, {"means2d": means2d}, absgrad=True, **kwargs)
        (colors * v_colors.reshape(colors.shape)).sum().backward()

    leaf = scene["means2d"].clone().requires_grad_(True)  # a leaf, passed as is
    run(leaf)
    assert torch.equal(leaf.absgrad, want["absgrad"])
    base = scene["means2d"].clone().requires_grad_(True)  # a non-leaf
    non_leaf = base * 1.0
    run(non_leaf)
    assert torch.equal(non_leaf.absgrad, want["absgrad"]) and not hasattr(base, "absgrad")
    torch.testing.assert_close(base.grad, want["means2d"])
    batch = scene["means2d"].reshape(1, 2, 20, 2).clone().requires_grad_(True)  # reshaped
    run(batch, batched(scene, (1, 2)))
    assert torch.equal(batch.absgrad, want["absgrad"].reshape(1, 2, 20, 2))
    strided = torch.cat([scene["means2d"], scene["means2d"]], -1)[..., :2]  # copied
    strided.requires_grad_(True)
    run(strided)
    assert torch.equal(strided.absgrad, want["absgrad"])
    plain = scene["means2d"].clone().requires_grad_(True)
    colors, _ = public_call(scene, {"means2d": plain})
    colors.sum().backward()
    assert not hasattr(plain, "absgrad")


def test_absgrad_packed():
    dense = make_scene(C=2, N=20, W=13, H=10, D=3, tile_size=8, cull=0.5, seed=101)
    pscene, keep = packed(dense)
    v_colors = torch.randn(2, 10, 13, 3)
    _, _, _, want = backend_grads(CPU, dense, v_colors, torch.zeros(2, 10, 13, 1), absgrad=True)
    means2d = pscene["means2d"].clone().requires_grad_(True)
    colors, _ = public_call(pscene, {"means2d": means2d}, packed=True, absgrad=True)
    (colors * v_colors).sum().backward()
    assert torch.equal(means2d.absgrad, want["absgrad"][keep])


def test_absgrad_under_torch_compile_runs_eagerly():
    scene = make_scene(C=2, N=20, W=13, H=10, D=3, tile_size=8, seed=103)
    _, _, _, want = backend_grads(
        CPU, scene, torch.ones(2, 10, 13, 3), torch.zeros(2, 10, 13, 1), absgrad=True
    )

    def loss_fn(means2d):
        colors, _ = public_call(scene, {"means2d": means2d}, absgrad=True)
        return colors.sum()

    torch._dynamo.reset()
    try:
        means2d = scene["means2d"].clone().requires_grad_(True)
        torch.compile(loss_fn)(means2d).backward()
        torch.testing.assert_close(means2d.absgrad, want["absgrad"])
    finally:
        torch._dynamo.reset()


# --------------------------------------------------------------------- opcheck / compile


@pytest.mark.parametrize("background", [False, True])
def test_opcheck_forward(background):
    scene = make_scene(C=2, N=20, W=19, H=13, D=3, tile_size=8, background=background, seed=29)
    for k in DIFF:
        if scene[k] is not None:
            scene[k].requires_grad_(True)
    torch.library.opcheck(CPU.rasterize_to_pixels_forward.default, tuple(op_args(scene)))


def test_opcheck_backward():
    scene = make_scene(C=2, N=20, W=19, H=13, D=3, tile_size=8, background=True, seed=31)
    _, alphas, last_ids = CPU.rasterize_to_pixels_forward(*op_args(scene))
    args = (
        *op_args(scene),
        None,
        alphas,
        last_ids,
        torch.randn(2, 13, 19, 3),
        torch.randn(2, 13, 19, 1),
    )
    torch.library.opcheck(CPU.rasterize_to_pixels_backward.default, args)
    torch.library.opcheck(CPU.rasterize_to_pixels_backward.default, (*args[:-1], None))


@pytest.mark.parametrize("ops", BACKENDS)
def test_backward_without_v_render_alphas_is_the_backward_with_zeros(ops):
    """A loss that does not use render_alphas passes None (no zero image written and read),
    with the zeros' result bit for bit."""
    scene = make_scene(C=2, N=20, W=19, H=13, D=3, tile_size=8, background=True, seed=33)
    _, alphas, last_ids = ops.rasterize_to_pixels_forward(*op_args(scene))
    args = (*op_args(scene), None, alphas, last_ids, torch.randn(2, 13, 19, 3))
    with_zeros = ops.rasterize_to_pixels_backward(*args, torch.zeros(2, 13, 19, 1))
    without = ops.rasterize_to_pixels_backward(*args, None)
    assert any(g.abs().max() > 0 for g in with_zeros[:4])
    for a, b in zip(without, with_zeros):
        assert torch.equal(a, b)


def test_torch_compile_fullgraph_with_backward():
    scene = make_scene(C=2, N=30, W=26, H=17, D=3, tile_size=16, background=True, seed=37)

    def loss_fn(means2d, conics, colors, opacities, backgrounds):
        c, a = prebuild.rasterize_to_pixels(
            means2d,
            conics,
            colors,
            opacities,
            scene["image_width"],
            scene["image_height"],
            scene["tile_size"],
            scene["isect_offsets"],
            scene["flatten_ids"],
            backgrounds=backgrounds,
        )
        return (c * c).sum() + a.sum()

    assert_compiled_matches_eager(
        loss_fn, *(scene[k] for k in DIFF), rtol=1e-5, atol=1e-6, loss_atol=1e-5, grads_nonzero=True
    )


def test_opcheck_masks_absgrad_and_packed():
    scene = make_scene(C=2, N=20, W=19, H=13, D=3, tile_size=8, background=True, seed=29)
    masks = (
        torch.rand(scene["isect_offsets"].shape, generator=torch.Generator().manual_seed(4)) < 0.5
    )
    pscene, _ = packed(make_scene(C=2, N=20, W=19, H=13, D=3, tile_size=8, cull=0.5, seed=31))
    for s in (scene, pscene):
        leaves = {
            k: (s[k].clone().requires_grad_(True) if s[k] is not None else None) for k in DIFF
        }
        args = op_args({**s, **leaves})
        for m, absgrad in ((masks, True), (None, True), (masks, False)):
            torch.library.opcheck(CPU.rasterize_to_pixels_forward.default, (*args, m, absgrad))
        _, alphas, last_ids = CPU.rasterize_to_pixels_forward(*op_args(s), masks)
        back = (
            *op_args(s),
            masks,
            alphas,
            last_ids,
            torch.randn(2, 13, 19, 3),
            torch.randn(2, 13, 19, 1),
        )
        for absgrad in (True, False):
            torch.library.opcheck(CPU.rasterize_to_pixels_backward.default, (*back, absgrad))


def test_torch_compile_fullgraph_batch_dims_masks_and_packed():
    scene = make_scene(C=2, N=30, W=26, H=17, D=3, tile_size=8, background=True, cull=0.4, seed=37)
    masks = (
        torch.rand(scene["isect_offsets"].shape, generator=torch.Generator().manual_seed(5)) < 0.7
    )
    pscene, _ = packed(scene)
    cases = [
        (batched(scene, (1, 2)), dict(masks=masks.reshape(1, 2, 3, 4))),
        (dict(pscene, isect_offsets=pscene["isect_offsets"]), dict(packed=True, masks=masks)),
    ]
    for s, kwargs in cases:

        def loss_fn(means2d, conics, colors, opacities, backgrounds, s=s, kwargs=kwargs):
            leaves = dict(
                means2d=means2d,
                conics=conics,
                colors=colors,
                opacities=opacities,
                backgrounds=backgrounds,
            )
            c, a = public_call(s, leaves, **kwargs)
            return (c * c).sum() + a.sum()

        assert_compiled_matches_eager(
            loss_fn, *(s[k] for k in DIFF), rtol=1e-5, atol=1e-6, loss_atol=1e-5, grads_nonzero=True
        )


def test_meta_tensors_shape_propagation():
    scene = make_scene(C=2, N=10, W=19, H=13, D=4, tile_size=8, background=True)
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in scene.items()}
    c, a, l = CPU.rasterize_to_pixels_forward(*op_args(meta))
    assert c.shape == (2, 13, 19, 4) and a.shape == (2, 13, 19, 1) and l.dtype == torch.int32
    # Packed rows: I from isect_offsets; the gradients take the rows' shapes.
    rows = {
        k: meta[k].reshape(-1, *meta[k].shape[2:])
        for k in ("means2d", "conics", "colors", "opacities")
    }
    p = {**meta, **rows}
    masks = torch.ones(2, 2, 3, dtype=torch.bool, device="meta")
    c, a, l = CPU.rasterize_to_pixels_forward(*op_args(p), masks, True)
    assert c.shape == (2, 13, 19, 4)
    grads = CPU.rasterize_to_pixels_backward(*op_args(p), masks, a, l, c, a, True)
    assert [g.shape for g in grads] == [(20, 2), (20, 3), (20, 4), (20,), (20, 2)]
    assert CPU.rasterize_to_pixels_backward(*op_args(p), None, a, l, c, a)[4].shape == (0,)


def test_double_backward_is_refused():
    scene = make_scene(C=1, N=10, W=9, H=9, D=1, tile_size=8, seed=41)
    m = scene["means2d"].clone().requires_grad_(True)
    c, _ = rasterize_to_pixels(
        m, *[scene[k] for k in ARG_ORDER[1:4]], *[scene[k] for k in ARG_ORDER[5:]]
    )
    (g,) = torch.autograd.grad(c.sum(), m, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        g.sum().backward()


# --------------------------------------------------------------------- bad inputs


def _public_args(**override):
    scene = make_scene(C=2, N=8, W=19, H=13, D=3, tile_size=8, background=True, seed=43)
    scene.update(override)
    return [scene[k] for k in ARG_ORDER if k != "backgrounds"], scene["backgrounds"]


@pytest.mark.parametrize(
    "override,exc,fragment",
    [
        (dict(tile_size=16), ValueError, "tile_size does not match the tile grid of isect_offsets"),
        (dict(image_width=30), ValueError, "tile_size does not match the tile grid"),
        (dict(tile_size=0), ValueError, "tile_size must be positive"),
        (dict(tile_size=8.0), TypeError, "tile_size must be an int"),
        (dict(image_height=-1), ValueError, "image_height must be positive"),
        (
            dict(flatten_ids=torch.zeros(3, 1, dtype=torch.int32)),
            ValueError,
            r"flatten_ids must have shape \[M\]",
        ),
        (
            dict(flatten_ids=torch.zeros(3, dtype=torch.int64)),
            TypeError,
            "flatten_ids must be int32",
        ),
        (
            dict(isect_offsets=torch.zeros(2, 2, 3, dtype=torch.int64)),
            TypeError,
            "isect_offsets must be int32",
        ),
        (
            dict(means2d=torch.zeros(2, 8, 3)),
            ValueError,
            r"means2d must have shape \[\.\.\., N, 2\]",
        ),
        (dict(conics=torch.zeros(2, 8, 2)), ValueError, "conics must have shape"),
        (dict(colors=torch.zeros(2, 8, 0)), ValueError, r"at least one channel \(D >= 1\)"),
        (dict(colors=torch.zeros(2, 7, 3)), ValueError, "colors must have shape"),
        (
            dict(colors=torch.zeros(2, 8, 3, dtype=torch.float64)),
            TypeError,
            "colors must be float32",
        ),
        (dict(opacities=torch.zeros(3, 8)), ValueError, "opacities must have shape"),
        (
            dict(backgrounds=torch.zeros(2, 4)),
            ValueError,
            r"backgrounds must have shape \[\.\.\., D\]",
        ),
        (dict(backgrounds=torch.zeros(2, 3).to("meta")), ValueError, "same device"),
        (dict(means2d=[[0.0, 0.0]]), TypeError, "means2d must be a torch.Tensor"),
        (
            dict(isect_offsets=torch.zeros(1, 2, 2, 3, dtype=torch.int32)),
            ValueError,
            r"expected shape \[\.\.\., ceil\(H / tile_size\), ceil\(W / tile_size\)\] = \[2, 2, 3\]",
        ),
    ],
)
def test_bad_inputs_raise(override, exc, fragment):
    args, bg = _public_args(**override)
    with pytest.raises(exc, match=fragment):
        rasterize_to_pixels(*args, backgrounds=bg)


@pytest.mark.parametrize(
    "kwargs,exc,fragment",
    [
        (dict(masks=torch.ones(2, 2, 3)), TypeError, "masks must be bool"),
        (
            dict(masks=torch.ones(2, 3, 2, dtype=torch.bool)),
            ValueError,
            r"masks must have shape \[\.\.\., tile_height, tile_width\] = \[2, 2, 3\]",
        ),
        (dict(absgrad=1), TypeError, "absgrad must be a bool"),
        (dict(packed="yes"), TypeError, "packed must be a bool"),
        (dict(packed=True), ValueError, r"means2d must have shape \[nnz, 2\] \(packed\)"),
    ],
)
def test_bad_new_arguments_raise(kwargs, exc, fragment):
    args, bg = _public_args()
    with pytest.raises(exc, match=fragment):
        rasterize_to_pixels(*args, backgrounds=bg, **kwargs)


def test_bad_packed_and_batched_inputs_raise():
    scene = make_scene(C=2, N=8, W=19, H=13, D=3, tile_size=8, background=True, seed=43)
    rows = {
        k: scene[k].reshape(-1, *scene[k].shape[2:])
        for k in ("means2d", "conics", "colors", "opacities")
    }
    p = {**scene, **rows}
    cases = [
        (dict(conics=rows["conics"][:5]), r"conics must have shape \[nnz, 3\] = \[16, 3\]"),
        (dict(colors=rows["colors"][None]), r"colors must have shape \[nnz, D\]"),
        (dict(opacities=rows["opacities"][:8]), r"opacities must have shape \[nnz\] = \[16\], got"),
        (
            dict(backgrounds=scene["backgrounds"][0]),
            r"backgrounds must have shape \[\.\.\., D\] = \[2, 3\]",
        ),
    ]
    for override, fragment in cases:
        with pytest.raises(ValueError, match=fragment):
            public_call({**p, **override}, packed=True)
    with pytest.raises(ValueError, match=TILE_GRID):
        public_call({**p, "isect_offsets": scene["isect_offsets"][0, :1]}, packed=True)
    with pytest.raises(
        ValueError, match=r"isect_offsets must have shape \[\.\.\., tile_height, tile_width\]"
    ):
        public_call({**p, "isect_offsets": scene["isect_offsets"][0, 0]}, packed=True)
    b = batched(scene, (1, 2))
    with pytest.raises(
        ValueError, match=r"conics must have shape \[\.\.\., N, 3\] = \[1, 2, 8, 3\]"
    ):
        public_call({**b, "conics": scene["conics"]})
    with pytest.raises(ValueError, match=TILE_GRID):
        public_call({**b, "isect_offsets": scene["isect_offsets"]})
    with pytest.raises(
        ValueError, match=r"opacities must have shape \[\.\.\., N\] = \[1, 2, 8\] or \[N\] = \[8\]"
    ):
        public_call({**b, "opacities": scene["opacities"]})


TILE_GRID = "tile_size does not match the tile grid of isect_offsets"


@pytest.mark.parametrize("ops", BACKENDS)
def test_direct_ops_refuse_bad_inputs(ops):
    scene = make_scene(C=2, N=8, W=19, H=13, D=3, tile_size=8, background=True, seed=47)
    fwd = ops.rasterize_to_pixels_forward

    def call(**o):
        return fwd(*op_args({**scene, **o}))

    with pytest.raises(
        RuntimeError, match="tile_size does not match the tile grid of isect_offsets"
    ):
        call(tile_size=4)
    with pytest.raises(RuntimeError, match="tile_size must be positive"):
        call(tile_size=0)
    with pytest.raises(RuntimeError, match="flatten_ids must be 1-D"):
        call(flatten_ids=scene["flatten_ids"].reshape(1, -1))
    with pytest.raises(RuntimeError, match="flatten_ids must be int32"):
        call(flatten_ids=scene["flatten_ids"].long())
    with pytest.raises(RuntimeError, match="colors must be float32"):
        call(colors=scene["colors"].double())
    with pytest.raises(RuntimeError, match="at least one channel"):
        call(colors=torch.zeros(2, 8, 0))
    with pytest.raises(RuntimeError, match=r"backgrounds must have shape \[I, D\]"):
        call(backgrounds=torch.zeros(2, 2))
    with pytest.raises(RuntimeError, match=r"opacities must have shape \[I, N\] or \[nnz\]"):
        call(opacities=scene["opacities"][0])
    with pytest.raises(RuntimeError, match=r"means2d \[I, N, 2\] must have I = 1 images"):
        call(isect_offsets=scene["isect_offsets"][:1])
    with pytest.raises(RuntimeError, match="masks must be bool"):
        fwd(*op_args(scene), torch.ones_like(scene["isect_offsets"]))
    with pytest.raises(RuntimeError, match=r"masks must have shape \[I, tiles_y, tiles_x\]"):
        fwd(*op_args(scene), torch.ones(2, 1, 1, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="means2d must be contiguous"):
        call(means2d=scene["means2d"].transpose(0, 1).contiguous().transpose(0, 1))
    _, alphas, last_ids = fwd(*op_args(scene))
    with pytest.raises(RuntimeError, match=r"v_render_colors must have shape \[I, H, W, D\]"):
        ops.rasterize_to_pixels_backward(
            *op_args(scene),
            None,
            alphas,
            last_ids,
            torch.zeros(2, 13, 19, 2),
            torch.zeros(2, 13, 19, 1),
        )
    with pytest.raises(RuntimeError, match="last_ids must be int32"):
        ops.rasterize_to_pixels_backward(
            *op_args(scene),
            None,
            alphas,
            last_ids.float(),
            torch.zeros(2, 13, 19, 3),
            torch.zeros(2, 13, 19, 1),
        )


@pytest.mark.simt
def test_simt_refuses_blocks_over_1024_threads():
    scene = make_scene(C=1, N=4, W=40, H=40, D=1, tile_size=33, seed=53)
    with pytest.raises(RuntimeError, match="tile_size must be at most 32"):
        simt.rasterize_to_pixels_forward(*op_args(scene))
    # The CPU backend has no block: any tile size works.
    colors, _, _ = CPU.rasterize_to_pixels_forward(*op_args(scene))
    (ref_c, _), _ = reference(scene)
    assert_values_close(colors, ref_c)


def test_cpu_refuses_malformed_index_values():
    scene = make_scene(C=2, N=20, W=19, H=13, D=3, tile_size=8, seed=59)
    M = scene["flatten_ids"].numel()
    assert M > 2
    bad_ids = scene["flatten_ids"].clone()
    bad_ids[1] = 2 * 20
    with pytest.raises(
        RuntimeError,
        match=r"flatten_ids must index the Gaussians, in \[0, I \* N or nnz\) = \[0, 40\)",
    ):
        CPU.rasterize_to_pixels_forward(*op_args({**scene, "flatten_ids": bad_ids}))
    bad_off = scene["isect_offsets"].clone()
    bad_off.view(-1)[-1] = M + 1
    with pytest.raises(RuntimeError, match="isect_offsets must be non-decreasing"):
        CPU.rasterize_to_pixels_forward(*op_args({**scene, "isect_offsets": bad_off}))
    bad_off = scene["isect_offsets"].clone()
    bad_off.view(-1)[0] = M
    with pytest.raises(RuntimeError, match="isect_offsets must be non-decreasing"):
        CPU.rasterize_to_pixels_forward(*op_args({**scene, "isect_offsets": bad_off}))


@pytest.mark.simt
def test_simt_kernels_stay_in_bounds_with_malformed_indices():
    """The kernels clamp tile runs and skip out-of-range flatten ids (no CPU-side value
    check exists on the device path); out-of-range ids render as invisible."""
    scene = make_scene(C=1, N=20, W=16, H=16, D=1, tile_size=8, seed=61)
    ids = scene["flatten_ids"].clone()
    ids[:] = 10_000
    off = scene["isect_offsets"].clone()
    off.view(-1)[1] = 1_000_000
    colors, alphas, last_ids = simt.rasterize_to_pixels_forward(
        *op_args({**scene, "flatten_ids": ids, "isect_offsets": off})
    )
    assert torch.equal(alphas, torch.zeros_like(alphas))
    grads = simt.rasterize_to_pixels_backward(
        *op_args({**scene, "flatten_ids": ids, "isect_offsets": off}),
        None,
        alphas,
        torch.full_like(last_ids, 1_000_000),
        torch.ones(1, 16, 16, 1),
        torch.ones(1, 16, 16, 1),
        True,
    )
    for g in grads:
        assert torch.equal(g, torch.zeros_like(g))


def test_non_contiguous_inputs_give_the_same_result():
    scene = make_scene(C=2, N=30, W=21, H=14, D=3, tile_size=8, background=True, seed=67)
    views = {
        "means2d": torch.cat([scene["means2d"], torch.zeros(2, 30, 2)], -1)[..., :2],
        "conics": scene["conics"].transpose(0, 1).contiguous().transpose(0, 1),
        "colors": torch.cat([scene["colors"], scene["colors"]], -1)[..., :3],
        "opacities": scene["opacities"].t().contiguous().t(),
        "backgrounds": scene["backgrounds"].t().contiguous().t(),
    }
    assert not any(v.is_contiguous() for v in views.values())

    def run(s):
        leaves = {
            k: s[k].detach().clone().requires_grad_(True)
            if s[k].is_contiguous()
            else s[k].detach().requires_grad_(True)
            for k in DIFF
        }
        c, a = rasterize_to_pixels(
            *[leaves[k] for k in ARG_ORDER[:4]],
            *[s[k] for k in ARG_ORDER[5:]],
            backgrounds=leaves["backgrounds"],
        )
        ((c * c).sum() + a.sum()).backward()
        return c, a, {k: v.grad for k, v in leaves.items()}

    c1, a1, g1 = run(scene)
    c2, a2, g2 = run({**scene, **views})
    assert torch.equal(c1, c2) and torch.equal(a1, a2)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k
