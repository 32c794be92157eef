"""prebuild.fully_fused_projection and its ops against gsplat 1.5.3's plain-PyTorch oracle.

Both backends run the same checks: the CPU library (torch.ops.prebuild) and the CUDA block
bodies run by the SIMT launcher (prebuild.testing.simt, marked simt, smaller scenes).
The oracle computes every (camera, Gaussian) pair and then zeroes the radii of culled ones;
the kernels write zeros to every output of a culled pair, so outputs are compared on the
visible pairs, and the two must agree on which pairs are visible. Radii are compared
exactly: both sides take ceil(3.33 sqrt(cov2d_ii)) of the same value up to float rounding,
and no scene here has it within rounding of an integer (the test would say if one did).
"""

from __future__ import annotations

import pytest
import torch
from compiled import assert_compiled_matches_eager
from gsplat_oracle import torch_impl
from projection_scenes import (
    ALPHA_THRESHOLD,
    HEIGHT,
    RTOL,
    WIDTH,
    assert_matches_oracle,
    cameras,
    gaussians,
    gsplat_radii,
    identity_camera,
    oracle,
    proj_scene,
    special_gaussians,
)

import prebuild
from prebuild.ops.projection import fully_fused_projection
from prebuild.testing import simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]


def sizes(backend):
    """(C, N) of the random scenes: the simt launcher runs a fiber per thread."""
    return (3, 40) if backend is simt else (4, 300)


def batched(*tensors):
    """The ops' batch-of-one layout of (N, k) Gaussians and (C, r, r) cameras."""
    return [None if t is None else t.unsqueeze(0) for t in tensors]


def forward(
    backend,
    means,
    covars,
    quats,
    scales,
    viewmats,
    Ks,
    width=WIDTH,
    height=HEIGHT,
    eps2d=0.3,
    near_plane=0.01,
    far_plane=1e10,
    radius_clip=0.0,
    comp=False,
    camera_model=0,
    opacities=None,
):
    """The forward op's outputs for one batch in gsplat's order (radii first; the op returns it
    last), without the batch dimension."""
    *floats, radii = backend.fully_fused_projection_forward(
        *batched(means, covars, quats, scales, opacities, viewmats, Ks),
        width,
        height,
        eps2d,
        near_plane,
        far_plane,
        radius_clip,
        comp,
        camera_model,
    )
    return tuple(t[0] if t.dim() > 1 else t for t in (radii, *floats))


def backward(
    backend,
    means,
    covars,
    quats,
    scales,
    viewmats,
    Ks,
    width,
    height,
    eps2d,
    radii,
    conics,
    compensations,
    v_means2d,
    v_depths,
    v_conics,
    v_compensations,
    camera_model=0,
    viewmats_grad=False,
):
    """The backward op for one batch: (v_means, v_covars, v_quats, v_scales, v_viewmats)
    without the batch dimension (unused ones have shape (0,))."""

    def pair(t):  # (C, N[, k]) -> (1, C, N[, k]); an empty (0,) stays as it is
        return t.unsqueeze(0) if t.dim() > 1 else t

    grads = backend.fully_fused_projection_backward(
        *batched(means, covars, quats, scales, viewmats, Ks),
        width,
        height,
        eps2d,
        camera_model,
        pair(radii),
        pair(conics),
        pair(compensations),
        pair(v_means2d),
        pair(v_depths),
        pair(v_conics),
        pair(v_compensations),
        viewmats_grad,
    )
    return tuple(g[0] if g.dim() > 1 else g for g in grads)


def path_args(path, quats, scales, covars):
    """(covars, quats, scales) for the "quats" or "covars" path."""
    return (None, quats, scales) if path == "quats" else (covars, None, None)


def f64(t):
    return None if t is None else t.double()


# ------------------------------------------------------------------------ 1. forward


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", ["quats", "covars"])
@pytest.mark.parametrize("calc_compensations", [True, False])
def test_forward_matches_oracle(backend, path, calc_compensations):
    C, N = sizes(backend)
    viewmats, Ks = cameras(C)
    means, quats, scales, covars = gaussians(N, seed=1)
    cov, q, s = path_args(path, quats, scales, covars)
    out = forward(backend, means, cov, q, s, viewmats, Ks, comp=calc_compensations)
    assert out[0].dtype == torch.int32 and out[0].shape == (C, N, 2)
    assert out[1].shape == (C, N, 2) and out[2].shape == (C, N) and out[3].shape == (C, N, 3)
    ref = oracle(
        means.double(),
        f64(cov),
        f64(q),
        f64(s),
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
        calc_compensations=calc_compensations,
    )
    visible = assert_matches_oracle(out, ref, calc_compensations)
    # The scene has visible and culled pairs in every camera.
    assert visible.any(1).all() and (~visible).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_gaussians(backend):
    """Behind the camera, before near, beyond far, outside the image, and the Jacobian clamp
    at the widened frustum's edge (visible and not)."""
    viewmats, Ks = identity_camera()
    means, quats, scales, expected = special_gaussians()
    out = forward(backend, means, None, quats, scales, viewmats, Ks, comp=True)
    visible = (out[0][0] > 0).all(-1)
    assert visible.tolist() == expected.tolist()
    ref = oracle(
        means.double(),
        None,
        quats.double(),
        scales.double(),
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
        calc_compensations=True,
    )
    assert_matches_oracle(out, ref, True)


def test_clamp_changes_the_covariance():
    """Where x/z is clamped, the 2D covariance is that of the clamped Jacobian (not of the
    plain one), as gsplat's: check against the oracle with and without the clamp."""
    viewmats, Ks = identity_camera()
    means, quats, scales, _ = special_gaussians()
    i = 6  # the first clamped, visible case
    out = forward(CPU, means[i : i + 1], None, quats[i : i + 1], scales[i : i + 1], viewmats, Ks)
    ref = oracle(
        means[i : i + 1].double(),
        None,
        quats[i : i + 1].double(),
        scales[i : i + 1].double(),
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
    )
    torch.testing.assert_close(out[3].double(), ref[3], rtol=RTOL, atol=1e-8)
    wide = oracle(
        means[i : i + 1].double(),
        None,
        quats[i : i + 1].double(),
        scales[i : i + 1].double(),
        viewmats.double(),
        Ks.double(),
        10**6,
        10**6,
    )
    assert not torch.allclose(out[3].double(), wide[3], rtol=1e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_near_far_planes_and_radius_clip(backend):
    C, N = sizes(backend)
    viewmats, Ks = cameras(C)
    means, quats, scales, _ = gaussians(N, seed=2)
    base = forward(backend, means, None, quats, scales, viewmats, Ks)
    depths = base[2]
    visible = (base[0] > 0).all(-1)
    d = depths[visible]
    near, far = float(d.quantile(0.3)), float(d.quantile(0.7))
    clipped = forward(
        backend, means, None, quats, scales, viewmats, Ks, near_plane=near, far_plane=far
    )
    cam_z = oracle(
        means.double(),
        None,
        quats.double(),
        scales.double(),
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
    )[2]
    keep = visible & (cam_z >= near) & (cam_z <= far)
    assert torch.equal((clipped[0] > 0).all(-1), keep)
    assert torch.equal(clipped[0][keep], base[0][keep])

    # radius_clip culls the pairs whose radii are both <= radius_clip (gsplat's CUDA rule).
    clip = float(base[0][visible].max(-1).values.float().median())
    out = forward(backend, means, None, quats, scales, viewmats, Ks, radius_clip=clip)
    small = (base[0] <= clip).all(-1)
    assert torch.equal((out[0] > 0).all(-1), visible & ~small)
    assert (visible & small).any() and (visible & ~small).any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", ["quats", "covars"])
def test_no_gaussians_and_no_cameras(backend, path):
    viewmats, Ks = cameras(2)
    means, quats, scales, covars = gaussians(0)
    cov, q, s = path_args(path, quats, scales, covars)
    out = forward(backend, means, cov, q, s, viewmats, Ks, comp=True)
    assert [tuple(t.shape) for t in out] == [(2, 0, 2), (2, 0, 2), (2, 0), (2, 0, 3), (2, 0)]
    means, quats, scales, covars = gaussians(5)
    cov, q, s = path_args(path, quats, scales, covars)
    out = forward(backend, means, cov, q, s, viewmats[:0], Ks[:0])
    assert [tuple(t.shape) for t in out] == [(0, 5, 2), (0, 5, 2), (0, 5), (0, 5, 3), (0,)]
    grads = backward(
        backend,
        means,
        cov,
        q,
        s,
        viewmats[:0],
        Ks[:0],
        WIDTH,
        HEIGHT,
        0.3,
        out[0],
        out[3],
        out[4],
        out[1],
        out[2],
        out[3],
        out[4],
    )
    assert grads[0].shape == (5, 3) and (grads[0] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_behind_the_camera(backend):
    viewmats, Ks = identity_camera()
    means, quats, scales, _ = gaussians(16)
    means[:, 2] = -means[:, 2].abs() - 0.5
    out = forward(backend, means, None, quats, scales, viewmats, Ks, comp=True)
    assert (out[0] == 0).all() and (out[4] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_radii_saturate(backend):
    """A radius beyond int32 saturates (as CUDA's conversion does) instead of overflowing."""
    viewmats, Ks = identity_camera()
    means = torch.tensor([[0.0, 0.0, 3.0], [0.1, 0.0, 3.0]])
    scales = torch.tensor([[1e9, 1e9, 1e9], [0.05, 0.05, 0.05]])
    quats = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(2, 1)
    radii = forward(backend, means, None, quats, scales, viewmats, Ks)[0][0]
    assert radii[0].tolist() == [2147483520, 2147483520]
    assert 0 < radii[1, 0] < 100


# ----------------------------------------------------------------------- 2. backward


def _vis_mask(t, visible):
    return t * (visible[..., None] if t.dim() == 3 else visible)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", ["quats", "covars"])
@pytest.mark.parametrize("calc_compensations", [True, False])
@pytest.mark.parametrize("scene", ["random", "special"])
def test_backward_matches_oracle_autograd(backend, path, calc_compensations, scene):
    """Gradients of means and covars or (quats, scales) from random incoming gradients of
    all four float outputs, against the float64 oracle's autograd."""
    if scene == "random":
        C, N = sizes(backend)
        viewmats, Ks = cameras(C)
        means, quats, scales, covars = gaussians(N, seed=3)
    else:
        viewmats, Ks = identity_camera()
        means, quats, scales, _ = special_gaussians()
        full, _ = torch_impl._quat_scale_to_covar_preci(quats, scales, True, False, False)
        covars = full[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]].contiguous()
    cov, q, s = path_args(path, quats, scales, covars)
    out = forward(backend, means, cov, q, s, viewmats, Ks, comp=calc_compensations)
    visible = (out[0] > 0).all(-1)
    gen = torch.Generator().manual_seed(11)
    v = [torch.randn(t.shape, generator=gen) for t in out[1:]]
    # Gradients arriving at culled pairs must be ignored: send them anyway.
    grads = backward(
        backend, means, cov, q, s, viewmats, Ks, WIDTH, HEIGHT, 0.3, out[0], out[3], out[4], *v
    )

    leaves = [
        t.double().requires_grad_(True) if t is not None else None for t in (means, cov, q, s)
    ]
    ref = oracle(
        *leaves,
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
        calc_compensations=calc_compensations,
    )
    outputs = ref[1:] if calc_compensations else ref[1:4]
    loss = sum((r[visible] * g[visible].double()).sum() for r, g in zip(outputs, v))
    wanted = [t for t in leaves if t is not None]
    ref_grads = torch.autograd.grad(loss, wanted)
    got = [grads[0]] + ([grads[1]] if path == "covars" else [grads[2], grads[3]])
    for name, g, r in zip(["means", path, "scales"], got, ref_grads):
        assert g.shape == r.shape, name
        torch.testing.assert_close(
            g.double(), r, rtol=RTOL, atol=RTOL * r.abs().max().item(), msg=name
        )
    unused = [grads[2], grads[3]] if path == "covars" else [grads[1]]
    assert all(t.shape == (0,) for t in unused)
    if scene == "special":  # culled Gaussians get exactly zero gradient
        culled = ~visible[0]
        assert culled.any() and (grads[0][culled] == 0).all()


@pytest.mark.simt
def test_simt_backward_equals_cpu():
    viewmats, Ks = cameras(3)
    means, quats, scales, _ = gaussians(40, seed=5)
    out = forward(CPU, means, None, quats, scales, viewmats, Ks, comp=True)
    v = [torch.randn_like(t) for t in out[1:]]
    args = (
        means,
        None,
        quats,
        scales,
        viewmats,
        Ks,
        WIDTH,
        HEIGHT,
        0.3,
        out[0],
        out[3],
        out[4],
        *v,
    )
    for a, b in zip(
        backward(CPU, *args, viewmats_grad=True), backward(simt, *args, viewmats_grad=True)
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ 2b. opacity-aware radii


def opacities_for(N, seed):
    """Opacities over the whole range: every tenth below 1/255 (culled), the rest in (0, 1)
    squared (many small ones, whose extent is well below 3.33)."""
    gen = torch.Generator().manual_seed(seed)
    o = torch.rand(N, generator=gen) ** 2
    o[::10] = ALPHA_THRESHOLD * torch.rand(len(o[::10]), generator=gen)
    return o


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", ["quats", "covars"])
@pytest.mark.parametrize("calc_compensations", [True, False])
@pytest.mark.parametrize("camera_model", [0, 1, 2], ids=["pinhole", "ortho", "fisheye"])
def test_opacities_give_gsplats_radii(backend, path, calc_compensations, camera_model):
    """With opacities the radii are gsplat's CUDA kernel's (gsplat_radii, written from its
    code: the oracle has no opacities): tighter than without, and pairs whose opacity (times
    the compensation) is below 1/255 culled; the other outputs of the pairs still visible
    are unchanged."""
    C, N = sizes(backend)
    viewmats, Ks = cameras(C)
    means, quats, scales, covars = gaussians(N, seed=1)
    opacities = opacities_for(N, seed=2)
    cov, q, s = path_args(path, quats, scales, covars)
    kw = dict(comp=calc_compensations, camera_model=camera_model)
    out = forward(backend, means, cov, q, s, viewmats, Ks, opacities=opacities, **kw)
    plain = forward(backend, means, cov, q, s, viewmats, Ks, **kw)
    model = ("pinhole", "ortho", "fisheye")[camera_model]
    args64 = (means.double(), f64(cov), f64(q), f64(s), viewmats.double(), Ks.double())
    common = dict(calc_compensations=calc_compensations, camera_model=model)
    ref = oracle(*args64, WIDTH, HEIGHT, **common)
    # The reference without opacities is the oracle's radii.
    assert torch.equal(gsplat_radii(*args64, WIDTH, HEIGHT, **common), ref[0])
    want = gsplat_radii(*args64, WIDTH, HEIGHT, opacities.double(), **common)
    visible = assert_matches_oracle(out, (want, *ref[1:]), calc_compensations)
    was = (plain[0] > 0).all(-1)
    assert visible.any() and (was & ~visible).any() and not (visible & ~was).any()
    assert (out[0] <= plain[0]).all() and (out[0][visible] < plain[0][visible]).any()
    for a, b in zip(out[1:], plain[1:]):
        if a.numel():
            assert torch.equal(a[visible], b[visible])


@pytest.mark.parametrize("backend", BACKENDS)
def test_opacity_edge_cases(backend):
    """gsplat's rules value by value: exactly 1/255 has a zero extent (culled, even where a
    negative radius_clip keeps zero radii in gsplat), below it culled, just above it a
    radius of 1, NaN the fixed 3.33, 1 the extent sqrt(2 ln 255) = 3.329; with compensations
    the opacity times the compensation decides."""
    viewmats, Ks = identity_camera()
    thr = torch.tensor(ALPHA_THRESHOLD)
    values = [thr, torch.nextafter(thr, torch.tensor(0.0)), thr * 1.001, float("nan"), 1.0, 0.5]
    opacities = torch.tensor([float(v) for v in values])
    n = len(values)
    means = torch.tensor([[0.1, -0.05, 3.0]]).repeat(n, 1)
    quats = torch.tensor([[1.0, 0.2, -0.1, 0.3]]).repeat(n, 1)
    scales = torch.tensor([[0.3, 0.2, 0.4]]).repeat(n, 1)
    plain = forward(backend, means, None, quats, scales, viewmats, Ks)[0][0]
    # float32, as gsplat's kernel: o / (1/255) rounds as it does there.
    want = gsplat_radii(means, None, quats, scales, viewmats, Ks, WIDTH, HEIGHT, opacities)[0]
    for clip in (0.0, -1.0):
        out = forward(
            backend, means, None, quats, scales, viewmats, Ks, radius_clip=clip, opacities=opacities
        )
        radii = out[0][0]
        assert torch.equal(radii, want)  # gsplat's radii, whatever the clip
        assert radii[:2].tolist() == [[0, 0], [0, 0]]
        assert radii[2].tolist() == [1, 1]
        assert torch.equal(radii[3], plain[3]) and (plain[3] > 1).all()
        assert (radii[4] <= plain[4]).all() and (radii[5] < plain[5]).all()
        for t in out[1:4]:  # culled pairs: zeros in every output
            assert (t[0, :2] == 0).all()

    # A tiny Gaussian: its compensation (~1e-3) times 0.5 is below 1/255.
    tiny = torch.tensor([[0.001, 0.001, 0.001]])
    one = (means[:1], None, quats[:1], tiny, viewmats, Ks)
    half = torch.tensor([0.5])
    assert (forward(backend, *one, opacities=half)[0] > 0).all()
    assert (forward(backend, *one, comp=True, opacities=half)[0] == 0).all()


@pytest.mark.simt
@pytest.mark.parametrize("calc_compensations", [True, False])
def test_simt_forward_with_opacities_equals_cpu(calc_compensations):
    """The CUDA block bodies give the CPU kernel's bits with opacities too."""
    C, N = sizes(simt)
    viewmats, Ks = cameras(C)
    means, quats, scales, _ = gaussians(N, seed=4)
    opacities = opacities_for(N, seed=5)
    args = (means, None, quats, scales, viewmats, Ks)
    cpu = forward(CPU, *args, comp=calc_compensations, opacities=opacities)
    sim = forward(simt, *args, comp=calc_compensations, opacities=opacities)
    assert (cpu[0] > 0).any()
    for a, b in zip(cpu, sim):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_op_refuses_bad_opacities(backend):
    viewmats, Ks = cameras(2)
    means, quats, scales, _ = gaussians(6)
    args = (means, None, quats, scales, viewmats, Ks)
    with pytest.raises(RuntimeError, match=r"opacities must have shape \(1, 6\), got \(1, 5\)"):
        forward(backend, *args, opacities=torch.ones(5))
    with pytest.raises(RuntimeError, match=r"opacities \(B, N\) must be float32"):
        forward(backend, *args, opacities=torch.ones(6, dtype=torch.float64))


# ----------------------------------------------------------- 3. the public function


def test_public_function_values_and_gradients():
    viewmats, Ks = cameras(2)
    means, quats, scales, _ = gaussians(50, seed=6)
    m = means.double().requires_grad_(True)
    q = quats.double().requires_grad_(True)
    s = scales.double().requires_grad_(True)
    radii, means2d, depths, conics, comps = fully_fused_projection(
        m, None, q, s, viewmats, Ks, WIDTH, HEIGHT, calc_compensations=True
    )
    assert means2d.dtype == torch.float32 and radii.dtype == torch.int32
    raw = forward(CPU, means, None, quats, scales, viewmats, Ks, comp=True)
    for a, b in zip((radii, means2d, depths, conics, comps), raw):
        assert torch.equal(a, b)
    loss = means2d.sum() + depths.sum() + conics.sum() + comps.sum()
    loss.backward()
    assert m.grad.dtype == torch.float64 and q.grad is not None and s.grad is not None
    leaves = [t.detach().clone().requires_grad_(True) for t in (m, q, s)]
    r = oracle(
        leaves[0],
        None,
        leaves[1],
        leaves[2],
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
        calc_compensations=True,
    )
    visible = (radii > 0).all(-1)
    rl = sum(t[visible].sum() for t in r[1:])
    for got, want in zip((m.grad, q.grad, s.grad), torch.autograd.grad(rl, leaves)):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=RTOL * want.abs().max().item())
    assert prebuild.fully_fused_projection is fully_fused_projection


def test_public_function_without_compensations_and_covars_path():
    viewmats, Ks = cameras(2)
    means, _, _, covars = gaussians(30, seed=7)
    c = covars.clone().requires_grad_(True)
    out = fully_fused_projection(means, c, None, None, viewmats, Ks, WIDTH, HEIGHT)
    assert out[4] is None
    (out[1].sum() + out[3].sum()).backward()
    assert c.grad.shape == (30, 6) and c.grad.abs().sum() > 0


def test_viewmats_get_a_gradient_and_Ks_none():
    viewmats, Ks = cameras(2)
    means, quats, scales, _ = gaussians(20, seed=8)
    V = viewmats.clone().requires_grad_(True)
    K = Ks.clone().requires_grad_(True)
    m = means.clone().requires_grad_(True)
    out = fully_fused_projection(m, None, quats, scales, V, K, WIDTH, HEIGHT)
    out[1].sum().backward()
    assert K.grad is None and m.grad is not None
    assert V.grad.shape == (2, 4, 4) and V.grad[:, :3].abs().sum() > 0
    assert (V.grad[:, 3] == 0).all()  # the bottom row is constant


def test_float16_and_float64_inputs_are_converted():
    viewmats, Ks = cameras(2)
    means, quats, scales, _ = gaussians(20, seed=9)
    ref = fully_fused_projection(means, None, quats, scales, viewmats, Ks, WIDTH, HEIGHT)
    out = fully_fused_projection(
        means.double(),
        None,
        quats.double(),
        scales.double(),
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
    )
    for a, b in zip(out[:4], ref[:4]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    half = fully_fused_projection(
        means.half(), None, quats.half(), scales.half(), viewmats, Ks, WIDTH, HEIGHT
    )
    assert half[1].dtype == torch.float32


def test_meta_tensors_give_shapes():
    viewmats, Ks = cameras(3)
    means, quats, scales, _ = gaussians(7)
    meta = [t.to("meta") for t in (means, quats, scales, viewmats, Ks)]
    out = fully_fused_projection(
        meta[0], None, meta[1], meta[2], meta[3], meta[4], 10, 10, calc_compensations=True
    )
    assert [tuple(t.shape) for t in out] == [(3, 7, 2), (3, 7, 2), (3, 7), (3, 7, 3), (3, 7)]
    assert out[0].dtype == torch.int32 and out[0].device.type == "meta"


# ----------------------------------------------------------- 4. opcheck, torch.compile


def _small_scene(path, batch=2):
    """(means, covars, quats, scales, viewmats, Ks) of `batch` scenes of 12 Gaussians and 2
    cameras, in the ops' (B, ...) layout."""
    scenes = []
    for b in range(batch):
        viewmats, Ks = cameras(2)
        means, quats, scales, covars = gaussians(12, seed=10 + b)
        scenes.append((means, *path_args(path, quats, scales, covars), viewmats, Ks))
    return tuple(None if ts[0] is None else torch.stack(ts) for ts in zip(*scenes))


OPCHECK_CASES = pytest.mark.parametrize(
    "path, calc_compensations, camera_model",
    [("quats", True, 0), ("covars", False, 0), ("quats", False, 1), ("covars", True, 2)],
)


@OPCHECK_CASES
@pytest.mark.parametrize("with_opacities", [False, True], ids=["", "opacities"])
def test_opcheck_forward(path, calc_compensations, camera_model, with_opacities):
    scene = _small_scene(path)
    for t in scene[:5]:
        if t is not None:
            t.requires_grad_(True)
    gen = torch.Generator().manual_seed(14)
    opacities = torch.rand(2, 12, generator=gen).requires_grad_(True) if with_opacities else None
    args = (
        *scene[:4],
        opacities,
        *scene[4:],
        WIDTH,
        HEIGHT,
        0.3,
        0.01,
        1e10,
        0.0,
        calc_compensations,
        camera_model,
    )
    torch.library.opcheck(CPU.fully_fused_projection_forward.default, args)


@OPCHECK_CASES
def test_opcheck_backward(path, calc_compensations, camera_model):
    scene = _small_scene(path)
    *floats, radii = CPU.fully_fused_projection_forward(
        *scene[:4],
        None,
        *scene[4:],
        WIDTH,
        HEIGHT,
        0.3,
        0.01,
        1e10,
        0.0,
        calc_compensations,
        camera_model,
    )
    v = [torch.randn_like(t) for t in floats]
    for viewmats_grad in (True, False):
        torch.library.opcheck(
            CPU.fully_fused_projection_backward.default,
            (
                *scene,
                WIDTH,
                HEIGHT,
                0.3,
                camera_model,
                radii,
                floats[2],
                floats[3],
                *v,
                viewmats_grad,
            ),
        )


@pytest.mark.parametrize("backend", [CPU, pytest.param(simt, marks=pytest.mark.simt)])
@pytest.mark.parametrize("path", ["quats", "covars"])
def test_backward_without_v_depths_is_the_backward_with_zeros(backend, path):
    """v_depths of shape (0,) (a loss that does not use the depths) is zeros, bit for bit,
    without a zero tensor written; opcheck takes it too."""
    scene = _small_scene(path)
    *floats, radii = backend.fully_fused_projection_forward(
        *scene[:4], None, *scene[4:], WIDTH, HEIGHT, 0.3, 0.01, 1e10, 0.0, True, 0
    )
    v = [torch.randn_like(t) for t in floats]
    head = (*scene, WIDTH, HEIGHT, 0.3, 0, radii, floats[2], floats[3], v[0])
    tail = (v[2], v[3], True)
    with_zeros = backend.fully_fused_projection_backward(*head, torch.zeros_like(v[1]), *tail)
    without = backend.fully_fused_projection_backward(*head, torch.empty(0), *tail)
    assert with_zeros[0].abs().max() > 0
    for a, b in zip(without, with_zeros):
        assert torch.equal(a, b)
    if backend is CPU:
        torch.library.opcheck(
            CPU.fully_fused_projection_backward.default, (*head, torch.empty(0), *tail)
        )


@pytest.mark.parametrize("camera_model", [0, 1, 2])
def test_opcheck_proj(camera_model):
    means, covars, Ks = proj_scene(3, 10)
    means.requires_grad_(True)
    covars.requires_grad_(True)
    args = (means, covars, Ks, WIDTH, HEIGHT, camera_model)
    torch.library.opcheck(CPU.proj_forward.default, args)
    m2, c2 = CPU.proj_forward(*args)
    plain = (means.detach(), covars.detach(), *args[2:])
    torch.library.opcheck(
        CPU.proj_backward.default, (*plain, torch.randn_like(m2), torch.randn_like(c2))
    )


def test_torch_compile_fullgraph_with_backward():
    viewmats, Ks = cameras(2)
    means, quats, scales, _ = gaussians(40, seed=12)

    def loss_fn(m, q, s):
        _, means2d, depths, conics, comps = fully_fused_projection(
            m, None, q, s, viewmats, Ks, WIDTH, HEIGHT, calc_compensations=True
        )
        return means2d.square().sum() * 1e-3 + depths.sum() + conics.sum() + comps.sum()

    assert_compiled_matches_eager(loss_fn, means, quats, scales)


def test_double_backward_is_refused():
    viewmats, Ks = cameras(1)
    means, quats, scales, _ = gaussians(5, seed=13)
    m = means.clone().requires_grad_(True)
    out = fully_fused_projection(m, None, quats, scales, viewmats, Ks, WIDTH, HEIGHT)
    (g,) = torch.autograd.grad(out[1].square().sum(), m, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        g.sum().backward()


# ----------------------------------------------------------------------- 5. bad input


def _good():
    viewmats, Ks = cameras(2)
    means, quats, scales, covars = gaussians(6)
    return dict(
        means=means,
        covars=None,
        quats=quats,
        scales=scales,
        viewmats=viewmats,
        Ks=Ks,
        width=WIDTH,
        height=HEIGHT,
    ), covars


def _call(**changes):
    kwargs, _ = _good()
    kwargs.update(changes)
    return fully_fused_projection(**kwargs)


def _nan_camera(name, camera):
    kwargs, _ = _good()
    t = kwargs[name].clone()
    t[camera, 1, 1] = float("nan") if name == "Ks" else float("inf")
    return t


@pytest.mark.parametrize(
    "changes, exc, fragment",
    [
        ({"means": torch.zeros(6, 2)}, ValueError, r"means must have shape \(\.\.\., N, 3\)"),
        ({"means": torch.zeros(1, 6, 3)}, ValueError, r"quats must have shape \(1, 6, 4\)"),
        ({"means": [[0.0, 0.0, 1.0]]}, TypeError, "means must be a torch.Tensor"),
        ({"means": torch.zeros(6, 3, dtype=torch.int64)}, TypeError, "floating point"),
        ({"quats": torch.zeros(5, 4)}, ValueError, r"quats must have shape \(6, 4\)"),
        ({"scales": torch.zeros(6, 4)}, ValueError, r"scales must have shape \(6, 3\)"),
        ({"quats": None}, ValueError, "either covars"),
        ({"quats": None, "scales": None}, ValueError, "either covars"),
        ({"covars": torch.zeros(6, 6)}, ValueError, "not both"),
        (
            {"covars": torch.zeros(6, 3, 3), "quats": None, "scales": None},
            ValueError,
            r"covars must have shape \(6, 6\)",
        ),
        ({"viewmats": torch.zeros(2, 3, 4)}, ValueError, r"viewmats must have shape \(C, 4, 4\)"),
        ({"Ks": torch.zeros(3, 3, 3)}, ValueError, "viewmats has 2 cameras but Ks has 3"),
        ({"Ks": torch.zeros(2, 3, 3, dtype=torch.int32)}, TypeError, "Ks has dtype"),
        ({"viewmats": "eye"}, TypeError, "viewmats must be a torch.Tensor"),
        ({"width": 0}, ValueError, "width must be positive"),
        ({"height": -3}, ValueError, "height must be positive"),
        ({"width": 64.0}, TypeError, "width must be an int"),
        ({"height": True}, TypeError, "height must be an int"),
        ({"eps2d": "0.3"}, TypeError, "eps2d must be a float"),
        ({"near_plane": float("nan")}, ValueError, "near_plane is NaN"),
        ({"calc_compensations": 1}, TypeError, "calc_compensations must be a bool"),
        ({"sparse_grad": True}, ValueError, "needs packed=True"),
        ({"packed": 1}, TypeError, "packed must be a bool"),
        ({"camera_model": "ftheta"}, NotImplementedError, "ftheta"),
        ({"camera_model": "pinhol"}, ValueError, "camera_model must be one of"),
        ({"opacities": torch.ones(5)}, ValueError, r"opacities must have shape \(6,\)"),
        ({"opacities": torch.ones(6, dtype=torch.int64)}, TypeError, "opacities has dtype"),
        ({"opacities": torch.ones(6, device="meta")}, ValueError, "same device"),
        ({"means": torch.zeros(6, 3, device="meta")}, ValueError, "same device"),
    ],
)
def test_bad_inputs_raise(changes, exc, fragment):
    with pytest.raises(exc, match=fragment):
        _call(**changes)


def test_non_finite_camera_is_named():
    """On the CPU (where it needs no wait for a GPU) a non-finite camera is an error."""
    with pytest.raises(ValueError, match=r"viewmats\[1\] \(camera 1\) is not finite"):
        _call(viewmats=_nan_camera("viewmats", 1))
    with pytest.raises(ValueError, match=r"Ks\[0\] \(camera 0\) is not finite"):
        _call(Ks=_nan_camera("Ks", 0))


# The entries of a camera the projection reads: R and t of the viewmat, fx, fy, cx, cy.
READ_ENTRIES = [("viewmats", i, j) for i in range(3) for j in range(4)] + [
    ("Ks", i, j) for i, j in ((0, 0), (1, 1), (0, 2), (1, 2))
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("camera_model", [0, 1, 2])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_kernels_cull_every_pair_of_a_non_finite_camera(backend, camera_model, value):
    """On CUDA the public functions do not look for non-finite cameras (the answer would make
    the host wait for the GPU): the kernels cull every pair of such a camera instead, whichever
    read entry is not finite, so it renders only the background and gets no gradient."""
    C, N = sizes(backend)
    means, quats, scales, _ = gaussians(N)
    viewmats, Ks = cameras(C)
    args = dict(means=means, quats=quats, scales=scales)
    for name, i, j in READ_ENTRIES:
        bad = {"viewmats": viewmats.clone(), "Ks": Ks.clone()}
        bad[name][1, i, j] = value
        radii, means2d, depths, conics, comp = forward(
            backend,
            args["means"],
            None,
            args["quats"],
            args["scales"],
            bad["viewmats"],
            bad["Ks"],
            comp=True,
            camera_model=camera_model,
        )
        assert not radii[1].any(), (name, i, j)
        assert radii[0].any() and radii[2].any()
        for t in (means2d, depths, conics, comp):
            assert not t[1].any(), (name, i, j)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_ops_refuse_bad_input(backend):
    kwargs, covars = _good()
    m, q, s, V, K = (kwargs[k] for k in ("means", "quats", "scales", "viewmats", "Ks"))
    with pytest.raises(RuntimeError, match="not both and not neither"):
        forward(backend, m, covars, q, s, V, K)
    with pytest.raises(RuntimeError, match="not both and not neither"):
        forward(backend, m, None, None, None, V, K)
    with pytest.raises(RuntimeError, match="quats and scales must be given together"):
        forward(backend, m, None, q, None, V, K)
    with pytest.raises(RuntimeError, match=r"means \(B, N, 3\) must be float32"):
        forward(backend, m.double(), None, q, s, V, K)
    with pytest.raises(RuntimeError, match=r"scales must have shape \(1, 6, 3\), got \(1, 5, 3\)"):
        forward(backend, m, None, q, s[:5], V, K)
    with pytest.raises(RuntimeError, match="quats .* must be contiguous"):
        forward(backend, m, None, q.t().contiguous().t(), s, V, K)
    with pytest.raises(RuntimeError, match="Ks must have shape"):
        forward(backend, m, None, q, s, V, K[:1])
    with pytest.raises(RuntimeError, match="width and height must be positive"):
        forward(backend, m, None, q, s, V, K, width=0)
    out = forward(backend, m, None, q, s, V, K)
    v = [torch.zeros_like(t) for t in out[1:4]]
    with pytest.raises(RuntimeError, match="radii must be int32"):
        backward(
            backend,
            m,
            None,
            q,
            s,
            V,
            K,
            WIDTH,
            HEIGHT,
            0.3,
            out[0].float(),
            out[3],
            out[4],
            *v,
            out[4],
        )
    with pytest.raises(RuntimeError, match="compensations .* needed with v_compensations"):
        backward(
            backend, m, None, q, s, V, K, WIDTH, HEIGHT, 0.3, out[0], out[3], out[4], *v, out[2]
        )
    with pytest.raises(RuntimeError, match="v_conics .* does not match"):
        backward(
            backend,
            m,
            None,
            q,
            s,
            V,
            K,
            WIDTH,
            HEIGHT,
            0.3,
            out[0],
            out[3],
            out[4],
            v[0],
            v[1],
            v[2][:1],
            out[4],
        )
