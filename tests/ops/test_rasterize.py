"""Tests of prebuild.rasterize_to_pixels and its custom ops (CPU backend and the CUDA kernels'
block bodies run by the simt launcher) against the plain-PyTorch dense reference
(raster_reference.py). Tile lists come from gsplat 1.5.3's own torch implementation
(_isect_tiles + _isect_offset_encode)."""

from __future__ import annotations

import math

import pytest
import torch
from gsplat_oracle import torch_impl
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


def make_scene(C=2, N=60, W=37, H=23, D=3, tile_size=16, seed=0, background=False,
               overlap=0, cull=0.1, indefinite=0, opacity_shape="CN"):
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
        conics[:, :indefinite, 1] = 3.0 * conics[:, :indefinite, 0].abs().sqrt() * (
            conics[:, :indefinite, 2].abs().sqrt()
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
    return dict(means2d=means.float().contiguous(), conics=conics.float().contiguous(),
                colors=colors.contiguous(), opacities=opac.contiguous(), image_width=W,
                image_height=H, tile_size=tile_size, isect_offsets=isect_offsets.int(),
                flatten_ids=flatten_ids.int().contiguous(), backgrounds=bg)


ARG_ORDER = ["means2d", "conics", "colors", "opacities", "backgrounds", "image_width",
             "image_height", "tile_size", "isect_offsets", "flatten_ids"]
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
        s["means2d"], s["conics"], s["colors"], s["opacities"], s["image_width"],
        s["image_height"], s["tile_size"], s["isect_offsets"], s["flatten_ids"],
        s["backgrounds"], return_stopped=return_stopped,
    )
    return out, leaves


def backend_grads(ops, scene, v_colors, v_alphas):
    """Forward and all input gradients through a backend's raw ops."""
    args = op_args(scene)
    colors, alphas, last_ids = ops.rasterize_to_pixels_forward(*args)
    v_means, v_conics, v_cols, v_opac = ops.rasterize_to_pixels_backward(
        *args, alphas, last_ids, v_colors, v_alphas
    )
    grads = dict(means2d=v_means, conics=v_conics, colors=v_cols, opacities=v_opac)
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
        torch.testing.assert_close(g.double(), w, rtol=1e-3, atol=2e-4 * max(scale, 1e-3),
                                   msg=lambda m, name=name: f"{name}: {m}")


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
    "tile4_overlap_batches": dict(C=2, N=20, W=13, H=11, D=3, tile_size=4, overlap=30,
                                  background=True),
    # 400 threads per block, batches of 256: some threads load nothing.
    "tile20_overlap_batches": dict(C=1, N=20, W=27, H=21, D=2, tile_size=20, overlap=300),
}
SIMT_SCENES = ["odd_37x23_rgb_bg", "gray_tile8", "d32_overlap", "d40_chunks", "indefinite",
               "overlap_stop", "tile4_d5", "tile4_overlap_batches", "tile20_overlap_batches"]


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


# --------------------------------------------------------------------- gradients


@pytest.mark.parametrize("ops,name", list(scene_cases()))
def test_gradients_match_reference_autograd(ops, name):
    scene = make_scene(**SCENES[name], seed=7)
    C, H, W, D = scene["colors"].shape[0], scene["image_height"], scene["image_width"], scene["colors"].shape[2]
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
    scene = make_scene(C=3, N=40, W=29, H=18, D=3, tile_size=16, background=True,
                       opacity_shape="N", seed=17)
    leaves = {k: scene[k].clone().requires_grad_(True) for k in DIFF}
    s = {**scene, **leaves}
    colors, alphas = rasterize_to_pixels(
        s["means2d"], s["conics"], s["colors"], s["opacities"], s["image_width"],
        s["image_height"], s["tile_size"], s["isect_offsets"], s["flatten_ids"],
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
    _, alphas = rasterize_to_pixels(m, *[scene[k] for k in ARG_ORDER[1:4]],
                                    *[scene[k] for k in ARG_ORDER[5:]],
                                    backgrounds=scene["backgrounds"])
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
    grads = ops.rasterize_to_pixels_backward(*op_args(scene), alphas, last_ids, v,
                                             torch.randn(C, H, W, 1))
    for gr in grads:
        assert torch.equal(gr, torch.zeros_like(gr))
    scene["backgrounds"] = None
    colors, _, _ = ops.rasterize_to_pixels_forward(*op_args(scene))
    assert torch.equal(colors, torch.zeros(C, H, W, D))


def test_empty_scene_background_gradient():
    scene = make_scene(C=1, N=0, W=5, H=4, D=2, tile_size=4, background=True)
    bg = scene["backgrounds"].clone().requires_grad_(True)
    colors, _ = rasterize_to_pixels(*[scene[k] for k in ARG_ORDER if k != "backgrounds"],
                                    backgrounds=bg)
    colors.sum().backward()
    assert torch.equal(bg.grad, torch.full((1, 2), 20.0))


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
    args = (*op_args(scene), alphas, last_ids, torch.randn(2, 13, 19, 3), torch.randn(2, 13, 19, 1))
    torch.library.opcheck(CPU.rasterize_to_pixels_backward.default, args)


def test_torch_compile_fullgraph_with_backward():
    torch._dynamo.reset()
    try:
        scene = make_scene(C=2, N=30, W=26, H=17, D=3, tile_size=16, background=True, seed=37)

        def loss_fn(means2d, conics, colors, opacities, backgrounds):
            c, a = prebuild.rasterize_to_pixels(
                means2d, conics, colors, opacities, scene["image_width"], scene["image_height"],
                scene["tile_size"], scene["isect_offsets"], scene["flatten_ids"],
                backgrounds=backgrounds,
            )
            return (c * c).sum() + a.sum()

        compiled = torch.compile(loss_fn, fullgraph=True)
        eager_leaves = [scene[k].clone().requires_grad_(True) for k in DIFF]
        comp_leaves = [scene[k].clone().requires_grad_(True) for k in DIFF]
        loss = compiled(*comp_leaves)
        loss.backward()
        eloss = loss_fn(*eager_leaves)
        eloss.backward()
        torch.testing.assert_close(loss.detach(), eloss.detach(), rtol=1e-6, atol=1e-5)
        for c, e in zip(comp_leaves, eager_leaves):
            torch.testing.assert_close(c.grad, e.grad, rtol=1e-5, atol=1e-6)
            assert c.grad.abs().max() > 0
    finally:
        torch._dynamo.reset()


def test_meta_tensors_shape_propagation():
    scene = make_scene(C=2, N=10, W=19, H=13, D=4, tile_size=8, background=True)
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in scene.items()}
    c, a, l = CPU.rasterize_to_pixels_forward(*op_args(meta))
    assert c.shape == (2, 13, 19, 4) and a.shape == (2, 13, 19, 1) and l.dtype == torch.int32


def test_double_backward_is_refused():
    scene = make_scene(C=1, N=10, W=9, H=9, D=1, tile_size=8, seed=41)
    m = scene["means2d"].clone().requires_grad_(True)
    c, _ = rasterize_to_pixels(m, *[scene[k] for k in ARG_ORDER[1:4]],
                               *[scene[k] for k in ARG_ORDER[5:]])
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
        (dict(flatten_ids=torch.zeros(3, 1, dtype=torch.int32)), ValueError, r"flatten_ids must have shape \[M\]"),
        (dict(flatten_ids=torch.zeros(3, dtype=torch.int64)), TypeError, "flatten_ids must be int32"),
        (dict(isect_offsets=torch.zeros(2, 2, 3, dtype=torch.int64)), TypeError, "isect_offsets must be int32"),
        (dict(means2d=torch.zeros(2, 8, 3)), ValueError, r"means2d must have shape \[C, N, 2\]"),
        (dict(conics=torch.zeros(2, 8, 2)), ValueError, "conics must have shape"),
        (dict(colors=torch.zeros(2, 8, 0)), ValueError, r"at least one channel \(D >= 1\)"),
        (dict(colors=torch.zeros(2, 7, 3)), ValueError, "colors must have shape"),
        (dict(colors=torch.zeros(2, 8, 3, dtype=torch.float64)), TypeError, "colors must be float32"),
        (dict(opacities=torch.zeros(3, 8)), ValueError, "opacities must have shape"),
        (dict(backgrounds=torch.zeros(2, 4)), ValueError, r"backgrounds must have shape \[C, D\]"),
        (dict(backgrounds=torch.zeros(2, 3).to("meta")), ValueError, "same device"),
        (dict(means2d=[[0.0, 0.0]]), TypeError, "means2d must be a torch.Tensor"),
    ],
)
def test_bad_inputs_raise(override, exc, fragment):
    args, bg = _public_args(**override)
    with pytest.raises(exc, match=fragment):
        rasterize_to_pixels(*args, backgrounds=bg)


@pytest.mark.parametrize("ops", BACKENDS)
def test_direct_ops_refuse_bad_inputs(ops):
    scene = make_scene(C=2, N=8, W=19, H=13, D=3, tile_size=8, background=True, seed=47)
    fwd = ops.rasterize_to_pixels_forward

    def call(**o):
        return fwd(*op_args({**scene, **o}))

    with pytest.raises(RuntimeError, match="tile_size does not match the tile grid of isect_offsets"):
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
    with pytest.raises(RuntimeError, match=r"backgrounds must have shape \[C, D\]"):
        call(backgrounds=torch.zeros(2, 2))
    with pytest.raises(RuntimeError, match=r"opacities must have shape \[C, N\]"):
        call(opacities=scene["opacities"][0])
    with pytest.raises(RuntimeError, match="means2d must be contiguous"):
        call(means2d=scene["means2d"].transpose(0, 1).contiguous().transpose(0, 1))
    _, alphas, last_ids = fwd(*op_args(scene))
    with pytest.raises(RuntimeError, match=r"v_render_colors must have shape \[C, H, W, D\]"):
        ops.rasterize_to_pixels_backward(*op_args(scene), alphas, last_ids,
                                         torch.zeros(2, 13, 19, 2), torch.zeros(2, 13, 19, 1))
    with pytest.raises(RuntimeError, match="last_ids must be int32"):
        ops.rasterize_to_pixels_backward(*op_args(scene), alphas, last_ids.float(),
                                         torch.zeros(2, 13, 19, 3), torch.zeros(2, 13, 19, 1))


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
    with pytest.raises(RuntimeError, match=r"flatten_ids must be in \[0, C \* N\)"):
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
        *op_args({**scene, "flatten_ids": ids, "isect_offsets": off}), alphas,
        torch.full_like(last_ids, 1_000_000), torch.ones(1, 16, 16, 1), torch.ones(1, 16, 16, 1)
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
        leaves = {k: s[k].detach().clone().requires_grad_(True) if s[k].is_contiguous()
                  else s[k].detach().requires_grad_(True) for k in DIFF}
        c, a = rasterize_to_pixels(*[leaves[k] for k in ARG_ORDER[:4]],
                                   *[s[k] for k in ARG_ORDER[5:]], backgrounds=leaves["backgrounds"])
        ((c * c).sum() + a.sum()).backward()
        return c, a, {k: v.grad for k, v in leaves.items()}

    c1, a1, g1 = run(scene)
    c2, a2, g2 = run({**scene, **views})
    assert torch.equal(c1, c2) and torch.equal(a1, a2)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k
