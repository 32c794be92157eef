"""prebuild.rasterization: projection -> tile intersection -> rasterization in one
differentiable call, against the same chain built from the references (gsplat 1.5.3's
plain-PyTorch projection and intersection, and the dense compositing reference), plus the
end-to-end example scripts/fit_image.py."""

from __future__ import annotations

import collections
import importlib.util
import math
from functools import partial
from pathlib import Path

import pytest
import torch
from gsplat_oracle import torch_impl
from projection_scenes import ALPHA_THRESHOLD, cameras, gaussians, gsplat_radii, oracle
from raster_reference import rasterize_reference
from torch.utils._python_dispatch import TorchDispatchMode

import prebuild

ROOT = Path(__file__).resolve().parents[2]
W, H, TILE = 37, 29, 16


def scene(C=2, N=80, D=3, seed=0):
    means, quats, scales, _ = gaussians(N, seed=seed, spread=0.8)
    gen = torch.Generator().manual_seed(seed + 1)
    opacities = 0.2 + 0.75 * torch.rand(N, generator=gen)
    colors = torch.rand(C, N, D, generator=gen)
    viewmats, Ks = cameras(C, W, H)
    backgrounds = torch.rand(C, D, generator=gen)
    return dict(
        means=means,
        quats=quats,
        scales=scales * 2.5,
        opacities=opacities,
        colors=colors,
        viewmats=viewmats,
        Ks=Ks,
        backgrounds=backgrounds,
    )


def reference_tiles(s, antialiased=False, opacity_radii=True):
    """The references' discrete decisions, in float32: (radii, isect_ids, flatten_ids,
    isect_offsets). The radii are gsplat's (gsplat_radii: bounded by the opacities, as
    gsplat's rasterization passes them), or with ``opacity_radii=False`` the fixed 3.33 sigma
    ones of its plain-PyTorch oracle."""
    with torch.no_grad():
        inputs = [s[k].float() for k in ("means", "quats", "scales", "viewmats", "Ks")]
        means, quats, scales, viewmats, Ks = inputs
        _, means2d32, depths32, _, _ = oracle(means, None, quats, scales, viewmats, Ks, W, H)
        radii = gsplat_radii(
            means,
            None,
            quats,
            scales,
            viewmats,
            Ks,
            W,
            H,
            s["opacities"].float() if opacity_radii else None,
            calc_compensations=antialiased,
        )
        tw, th = math.ceil(W / TILE), math.ceil(H / TILE)
        _, isect_ids, flatten_ids = torch_impl._isect_tiles(
            means2d32, radii, depths32, TILE, tw, th
        )
        offsets = torch_impl._isect_offset_encode(isect_ids, len(s["viewmats"]), tw, th)
    return radii, isect_ids, flatten_ids, offsets


def reference_render(s, dtype=torch.float64, antialiased=False, opacity_radii=True):
    """The chain from the references; discrete decisions (radii, tiles) from float32."""
    _, _, flatten_ids, offsets = reference_tiles(s, antialiased, opacity_radii)
    _, means2d, _, conics, comp = oracle(
        s["means"].to(dtype),
        None,
        s["quats"].to(dtype),
        s["scales"].to(dtype),
        s["viewmats"].to(dtype),
        s["Ks"].to(dtype),
        W,
        H,
        calc_compensations=antialiased,
    )
    opacities = s["opacities"].to(dtype).expand(len(s["viewmats"]), -1)
    if antialiased:
        opacities = opacities * comp
    return rasterize_reference(
        means2d,
        conics,
        s["colors"].to(dtype),
        opacities,
        W,
        H,
        TILE,
        offsets,
        flatten_ids.int(),
        backgrounds=s["backgrounds"].to(dtype),
    )


def render(s, **kwargs):
    colors, alphas, meta = prebuild.rasterization(
        s["means"],
        s["quats"],
        s["scales"],
        s["opacities"],
        s["colors"],
        s["viewmats"],
        s["Ks"],
        W,
        H,
        **{"tile_size": TILE, "backgrounds": s["backgrounds"], "packed": False, **kwargs},
    )
    return colors, alphas, meta


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_values_and_gradients_match_the_reference_chain(mode):
    s = scene()
    leaves = ("means", "quats", "scales", "opacities", "colors", "backgrounds")
    ours = {k: v.clone().requires_grad_(k in leaves) for k, v in s.items()}
    ref = {k: v.double().requires_grad_(k in leaves) for k, v in s.items()}
    colors, alphas, meta = render(ours, rasterize_mode=mode)
    ref_colors, ref_alphas = reference_render(ref, antialiased=mode == "antialiased")

    assert colors.shape == (2, H, W, 3) and alphas.shape == (2, H, W, 1)
    assert meta["isect_ids"].numel() > 0 and (alphas > 0.5).any()  # a scene, not a blank
    torch.testing.assert_close(colors.double(), ref_colors.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(alphas.double(), ref_alphas.detach(), rtol=1e-4, atol=1e-4)

    gen = torch.Generator().manual_seed(5)
    v_colors, v_alphas = (
        torch.randn(colors.shape, generator=gen),
        torch.randn(alphas.shape, generator=gen),
    )
    grads = torch.autograd.grad(
        (colors * v_colors).sum() + (alphas * v_alphas).sum(), [ours[k] for k in leaves]
    )
    ref_grads = torch.autograd.grad(
        (ref_colors * v_colors.double()).sum() + (ref_alphas * v_alphas.double()).sum(),
        [ref[k] for k in leaves],
    )
    for name, got, want in zip(leaves, grads, ref_grads):
        scale = max(1.0, want.abs().max().item())
        torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=2e-4 * scale, msg=name)


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_radii_and_intersections_are_gsplats(mode, packed):
    """rasterization passes the opacities to the projection, as gsplat 1.5.3's does: its
    radii and tile intersections are gsplat's (the references' with gsplat_radii), fewer
    than with the fixed 3.33 sigma extent, and the images those of the 3.33 sigma chain
    (the pixels the tighter boxes leave out had alpha below 1/255)."""
    s = scene()
    s["opacities"][::9] = ALPHA_THRESHOLD / 2  # culled by their opacity alone
    antialiased = mode == "antialiased"
    colors, alphas, meta = render(s, rasterize_mode=mode, packed=packed)
    radii, isect_ids, flatten_ids, _ = reference_tiles(s, antialiased)
    wide_radii, wide_ids, _, _ = reference_tiles(s, antialiased, opacity_radii=False)
    visible = (radii > 0).all(-1)
    if packed:
        dense = torch.zeros_like(radii)
        dense[meta["camera_ids"], meta["gaussian_ids"]] = meta["radii"]
        assert len(meta["gaussian_ids"]) == int(visible.sum())
    else:
        dense = meta["radii"]
        assert torch.equal(meta["tiles_per_gauss"].sum(), torch.tensor(len(isect_ids)))
    assert torch.equal(dense, radii)
    # The same (image, tile) runs; depths (the low bits, hence the order within a run) may
    # differ from the oracle's float32 ones in the last bit.
    assert torch.equal(meta["isect_ids"] >> 32, isect_ids >> 32)
    # The same (camera, Gaussian) pairs in each tile; packed flatten_ids index the packed
    # pairs, the reference's the dense ones.
    flat = meta["flatten_ids"].long()
    if packed:
        flat = (meta["camera_ids"] * len(s["means"]) + meta["gaussian_ids"])[flat]

    def pairs(ids, flat):
        return torch.sort((ids >> 32 << 32) | flat).values

    assert torch.equal(pairs(meta["isect_ids"], flat), pairs(isect_ids, flatten_ids.long()))
    assert (radii <= wide_radii).all() and (~visible & (wide_radii > 0).all(-1)).any()
    assert 0 < len(isect_ids) < len(wide_ids)
    ref_colors, ref_alphas = reference_render(s, antialiased=antialiased, opacity_radii=False)
    torch.testing.assert_close(colors.double(), ref_colors, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(alphas.double(), ref_alphas, rtol=1e-4, atol=1e-4)


def test_depth_render_modes_agree():
    s = scene(D=3)
    rgb, alphas, meta = render(s)
    depth, _, _ = render(s, render_mode="D")
    rgbd, _, _ = render(s, render_mode="RGB+D")
    expected, _, _ = render(s, render_mode="ED")
    rgbed, _, _ = render(s, render_mode="RGB+ED")
    assert depth.shape == (2, H, W, 1) and rgbd.shape == (2, H, W, 4)
    torch.testing.assert_close(rgbd[..., :3], rgb)
    # No background behind the depth channel, with or without colour channels in front.
    torch.testing.assert_close(rgbd[..., 3:], depth)
    torch.testing.assert_close(expected, rgbed[..., 3:])
    covered = alphas > 0.05
    torch.testing.assert_close(expected[covered], (rgbd[..., 3:] / alphas)[covered])
    # expected depth lies between the nearest and farthest visible Gaussian
    visible = meta["radii"].gt(0).all(-1)
    depths = meta["depths"][visible]
    assert (
        depths.min() - 1e-4
        <= expected[covered].min()
        <= expected[covered].max()
        <= depths.max() + 1e-4
    )


def test_colors_shared_by_cameras_equal_per_camera_colors():
    s = scene()
    shared = dict(s, colors=s["colors"][0])
    per_camera = dict(s, colors=s["colors"][0].expand(2, -1, -1))
    torch.testing.assert_close(render(shared)[0], render(per_camera)[0])


@pytest.mark.parametrize("case", ["no gaussians", "all behind the camera"])
def test_empty_scenes_render_the_background(case):
    s = scene()
    if case == "no gaussians":
        for k in ("means", "quats", "scales", "opacities"):
            s[k] = s[k][:0]
        s["colors"] = s["colors"][:, :0]
    else:
        s["viewmats"] = s["viewmats"].clone()
        s["viewmats"][:, 2, 3] -= 100.0  # everything is far behind both cameras
    colors, alphas, meta = render(s)
    assert meta["isect_ids"].numel() == 0
    torch.testing.assert_close(alphas, torch.zeros_like(alphas))
    torch.testing.assert_close(colors, s["backgrounds"][:, None, None, :].expand_as(colors))


@pytest.mark.parametrize(
    "override, error, fragment",
    [
        (dict(render_mode="RGBD"), ValueError, "render_mode"),
        (dict(rasterize_mode="fancy"), ValueError, "rasterize_mode"),
        (dict(tile_size=0), ValueError, "tile_size"),
    ],
)
def test_bad_arguments_are_named(override, error, fragment):
    with pytest.raises(error, match=fragment):
        render(scene(), **override)


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("opacities", torch.rand(80, 1), "opacities"),
        ("colors", torch.rand(80), "colors"),
        ("means", torch.rand(80, 2), "means"),
    ],
)
def test_bad_shapes_are_named(field, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        render(dict(scene(), **{field: value}))


@pytest.mark.parametrize(
    "override",
    [
        dict(with_ut=True),
        dict(distributed=True),
        dict(with_eval3d=True),
        dict(radial_coeffs=torch.zeros(2, 6)),
        dict(camera_model="ftheta"),
    ],
)
def test_what_prebuild_leaves_out_is_refused_by_name(override):
    name = next(iter(override))
    with pytest.raises(NotImplementedError, match="ftheta" if name == "camera_model" else name):
        render(scene(), **override)


def _leaves(s, names=("means", "quats", "scales", "opacities", "colors", "viewmats")):
    return {k: (v.clone().requires_grad_(True) if k in names else v) for k, v in s.items()}


def _grads(s, out, names=("means", "quats", "scales", "opacities", "colors", "viewmats")):
    gen = torch.Generator().manual_seed(3)
    loss = sum((t * torch.randn(t.shape, generator=gen)).sum() for t in out[:2])
    return torch.autograd.grad(loss, [s[k] for k in names])


def sh_scene(degree=2, C=2, N=80, seed=0):
    s = scene(C=C, N=N, seed=seed)
    gen = torch.Generator().manual_seed(seed + 5)
    s["colors"] = torch.randn(N, (degree + 1) ** 2, 3, generator=gen) * 0.3
    return s


@pytest.mark.parametrize("per_camera", [False, True])
def test_sh_colours_are_gsplats_sh_from_the_camera_centres(per_camera):
    """sh_degree: each Gaussian's colour is max(SH(mean - camera centre) + 0.5, 0) with
    gsplat's plain-PyTorch SH as the oracle (values and gradients through the colours)."""
    s = sh_scene()
    if per_camera:
        s["colors"] = s["colors"].expand(2, -1, -1, -1) + 0.1 * torch.randn(2, 80, 9, 3)
    ours = _leaves(s, ("colors", "means"))
    got = render(ours, sh_degree=2)
    campos = torch.inverse(s["viewmats"])[:, :3, 3]
    ref = _leaves(s, ("colors", "means"))
    dirs = ref["means"][None] - campos[:, None]
    coeffs = ref["colors"] if per_camera else ref["colors"].expand(2, -1, -1, -1)
    rgb = torch.clamp_min(torch_impl._spherical_harmonics(2, dirs, coeffs) + 0.5, 0.0)
    want = render(dict(ref, colors=rgb))
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(ours, got, ("colors", "means")), _grads(ref, want, ("colors", "means"))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sh_degree", [None, 1])
def test_packed_and_dense_render_the_same_values_and_gradients(sh_degree):
    s = sh_scene(degree=1) if sh_degree is not None else scene()
    dense, packed = _leaves(s), _leaves(s)
    d = render(dense, sh_degree=sh_degree, packed=False)
    p = render(packed, sh_degree=sh_degree, packed=True)
    torch.testing.assert_close(d[0], p[0])
    torch.testing.assert_close(d[1], p[1])
    for a, b in zip(_grads(dense, d), _grads(packed, p)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    meta = p[2]
    nnz = len(meta["gaussian_ids"])
    assert meta["radii"].shape == (nnz, 2) and meta["means2d"].shape == (nnz, 2)
    assert torch.equal(meta["radii"], d[2]["radii"][meta["camera_ids"], meta["gaussian_ids"]])


@pytest.mark.parametrize("sh_degree", [None, 1])
def test_batch_dimensions_render_like_one_call_per_batch(sh_degree):
    """With SH, packed pairs find their Gaussian's row in the flattened batches."""
    make = scene if sh_degree is None else partial(sh_scene, degree=sh_degree)
    scenes = [make(seed=seed) for seed in (0, 1)]
    batched = {k: torch.stack([sc[k] for sc in scenes]) for k in scenes[0]}
    colors, alphas, meta = render(batched, packed=True, sh_degree=sh_degree)
    assert colors.shape == (2, 2, H, W, 3) and meta["n_batches"] == 2 and meta["n_cameras"] == 2
    for b, sc in enumerate(scenes):
        one = render(sc, sh_degree=sh_degree)
        torch.testing.assert_close(colors[b], one[0])
        torch.testing.assert_close(alphas[b], one[1])


@pytest.mark.parametrize("camera_model", ["ortho", "fisheye"])
def test_camera_models_chain_the_public_ops(camera_model):
    """rasterization(camera_model=...) is the public ops chained by hand."""
    s = scene()
    if camera_model == "ortho":  # an orthographic camera sees x, y in world units
        s["Ks"] = s["Ks"].clone()
        s["Ks"][:, 0, 0] = s["Ks"][:, 1, 1] = 8.0
    colors, alphas, _ = render(s, camera_model=camera_model)
    radii, means2d, depths, conics, _ = prebuild.fully_fused_projection(
        s["means"],
        None,
        s["quats"],
        s["scales"],
        s["viewmats"],
        s["Ks"],
        W,
        H,
        camera_model=camera_model,
    )
    tw, th = math.ceil(W / TILE), math.ceil(H / TILE)
    _, isect_ids, flatten_ids = prebuild.isect_tiles(means2d, radii, depths, TILE, tw, th)
    offsets = prebuild.isect_offset_encode(isect_ids, 2, tw, th)
    want = prebuild.rasterize_to_pixels(
        means2d,
        conics,
        s["colors"],
        s["opacities"].expand(2, -1),
        W,
        H,
        TILE,
        offsets,
        flatten_ids,
        backgrounds=s["backgrounds"],
    )
    assert (alphas > 0.3).any()
    torch.testing.assert_close(colors, want[0])
    torch.testing.assert_close(alphas, want[1])


@pytest.mark.parametrize("packed", [False, True])
def test_meta_carries_what_gsplats_strategies_read(packed):
    s = _leaves(scene())
    colors, alphas, meta = render(s, packed=packed, absgrad=True)
    meta["means2d"].retain_grad()
    (colors.sum() + alphas.sum()).backward()
    for key in (
        "means2d",
        "radii",
        "width",
        "height",
        "n_cameras",
        "tile_size",
        "depths",
        "conics",
        "opacities",
        "isect_offsets",
        "flatten_ids",
    ):
        assert key in meta, key
    assert (meta["width"], meta["height"], meta["n_cameras"]) == (W, H, 2)
    grad, absgrad = meta["means2d"].grad, meta["means2d"].absgrad
    assert grad.shape == absgrad.shape == meta["means2d"].shape
    assert (absgrad >= grad.abs() - 1e-6).all() and absgrad.sum() > 0
    if packed:
        assert meta["gaussian_ids"].shape == (len(meta["means2d"]),)
    else:
        assert meta["gaussian_ids"] is None


class _RecordOps(torch.utils._python_dispatch.TorchDispatchMode):
    """The names of the ops dispatched inside the block (namespace.op.overload)."""

    def __enter__(self):
        self.names = set()
        super().__enter__()
        return self.names

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.simt
def test_simt_backend_renders_like_the_cpu():
    """prebuild.testing.use_simt() runs the whole chain on the CUDA kernels' code."""
    from prebuild.testing import use_simt

    s = sh_scene(degree=1, N=40)
    cpu, sim = _leaves(s), _leaves(s)
    c = render(cpu, sh_degree=1)
    with use_simt(), _RecordOps() as called:
        g = render(sim, sh_degree=1)
        g_grads = _grads(sim, g)
    ours = {name for name in called if name.startswith("prebuild")}
    assert {n.split(".")[0] for n in ours} == {"prebuild_simt"}, ours
    assert {n.split(".")[1] for n in ours} >= {
        "fully_fused_projection_forward",
        "fully_fused_projection_backward",
        "spherical_harmonics_forward",
        "spherical_harmonics_backward",
        "isect_tiles",
        "isect_offset_encode",
        "rasterize_to_pixels_forward",
        "rasterize_to_pixels_backward",
    }
    torch.testing.assert_close(c[0], g[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(cpu, c), g_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def load_fit_image():
    spec = importlib.util.spec_from_file_location("fit_image", ROOT / "scripts" / "fit_image.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fit_image_example_learns():
    """The example fits a 32x32 image with 150 Gaussians coloured by spherical harmonics (degree
    raised to 2 along the way); in 60 steps of Adam the loss (0.8 L1 + 0.2 (1 - SSIM)) must
    fall at least 4-fold."""
    fit_image = load_fit_image()
    history, target, image, _, counts = fit_image.fit(
        size=32, n=150, steps=60, seed=0, log_every=0, sh_degree=2, sh_every=20
    )
    assert image.shape == target.shape == (32, 32, 3)
    assert all(math.isfinite(v) for v in history)
    assert history[-1] < history[0] / 4, history[:: len(history) // 6]
    assert set(counts) == {150}  # no densification asked for


@pytest.mark.parametrize(
    "strategy, absgrad", [("default", False), ("default", True), ("mcmc", False)]
)
def test_fit_image_densifies_with_gsplats_strategies(strategy, absgrad):
    """gsplat's own DefaultStrategy drives densification from prebuild.rasterization's meta
    (means2d gradients or absgrad, radii, gaussian_ids, width, height, n_cameras), and its
    MCMCStrategy relocates and adds Gaussians with prebuild's compute_relocation: the
    Gaussian count changes and the loss still falls."""
    fit_image = load_fit_image()
    history, _, _, _, counts = fit_image.fit(
        size=32,
        n=60,
        steps=60,
        seed=1,
        log_every=0,
        sh_degree=1,
        sh_every=20,
        densify=strategy,
        absgrad=absgrad,
    )
    assert all(math.isfinite(v) for v in history)
    assert counts[0] == 60 and len(set(counts)) > 1, sorted(set(counts))
    assert history[-1] < history[0] / 2, history[:: len(history) // 6]


def test_other_float_dtypes_are_computed_in_float32():
    """float32 is the compute type of the whole chain: float64 (or float16) opacities,
    colours and backgrounds are converted, and their gradients come back in their dtype."""
    s = _leaves(scene())
    s64 = _leaves({k: v.double() for k, v in scene().items()})
    got, want = render(s64), render(s)
    torch.testing.assert_close(got[0], want[0])
    for a, b in zip(_grads(s64, got), _grads(s, want)):
        assert a.dtype == torch.float64
        torch.testing.assert_close(a.float(), b)


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
@pytest.mark.parametrize("sh", [False, True], ids=["rgb", "sh"])
def test_a_step_dispatches_no_needless_ops(packed, sh):
    """The host path of a forward + backward: inputs validated once, in Python; no dtype
    copies of float32 inputs, no advanced indexing (packed pairs are gathered with
    index_select, whose backward is an index_add, not a sort-based index_put), no
    inverse (its singularity check waits for a GPU), and the packed pairs formed by one op
    each way (pack_visible: its count is packed mode's one host sync) instead of a nonzero
    and a gather per output; it also gathers the opacities and, without SH, the colours, so
    an RGB step gathers nothing else."""
    s = _leaves(sh_scene() if sh else scene())
    with _CountOps() as counter:
        out = render(s, packed=packed, sh_degree=2 if sh else None)
        _grads(s, out)
    ops = counter.ops
    for name in ("_to_copy", "index", "index_put", "index_put_", "linalg_inv_ex", "isfinite"):
        assert name not in ops or name == "linalg_inv_ex" and sh, (name, ops)
    assert ops["nonzero"] == 0
    assert ops["pack_visible"] == ops["pack_visible_backward"] == (1 if packed else 0)
    if not sh:  # this scene's colours are per camera: one gather of them when packed
        assert ops["index_select"] == ops["index_add"] == (1 if packed else 0), ops


def test_a_packed_rgb_step_with_shared_colours_gathers_nothing_else():
    """pack_visible gathers the opacities and the colours the cameras share: no gather, and
    no index_add in the backward, besides its own two ops."""
    s = scene()
    s["colors"] = s["colors"][0]  # [N, D]: shared by the cameras
    s = _leaves(s)
    with _CountOps() as counter:
        out = render(s, packed=True)
        _grads(s, out)
    ops = counter.ops
    assert ops["pack_visible"] == ops["pack_visible_backward"] == 1
    assert ops["index_select"] == ops["index_add"] == 0, ops
    assert "_linalg_check_errors" not in ops
