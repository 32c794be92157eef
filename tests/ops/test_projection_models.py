"""Camera models, batch dimensions, viewmat gradients, ``proj`` and the packed layout of the
projection ops, against gsplat 1.5.3's plain-PyTorch oracle (float64 autograd).

Each check runs on the CPU library and on the CUDA block bodies run by the SIMT launcher
(prebuild.testing.simt, marked simt, smaller scenes).
"""

from __future__ import annotations

import math

import pytest
import torch
from compiled import assert_compiled_matches_eager
from gsplat_oracle import torch_impl
from projection_scenes import (
    ALPHA_THRESHOLD,
    HEIGHT,
    RTOL,
    WIDTH,
    cameras,
    covar_matrix,
    gaussians,
    gsplat_radii,
    proj_scene,
)

from prebuild.ops.projection import CAMERA_MODELS, fully_fused_projection, proj
from prebuild.testing import simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]
ORACLE_PROJ = {
    "pinhole": torch_impl._persp_proj,
    "ortho": torch_impl._ortho_proj,
    "fisheye": torch_impl._fisheye_proj,
}


def batch_scene(B: int, C: int, N: int, seed: int = 0):
    """B different scenes of N Gaussians and C cameras, stacked: (means, quats, scales,
    covars, viewmats, Ks) with leading dimension B."""
    parts = []
    for b in range(B):
        viewmats, Ks = cameras(C)
        means, quats, scales, covars = gaussians(N, seed=seed + b, spread=3.0)
        parts.append((means, quats, scales, covars, viewmats, Ks))
    return [torch.stack(ts) for ts in zip(*parts)]


def oracle(means, covars6, quats, scales, viewmats, Ks, camera_model, comp=True):
    """gsplat's _fully_fused_projection in the inputs' dtype (batch dimensions allowed)."""
    if covars6 is not None:
        full = covar_matrix(covars6.reshape(-1, 6)).reshape(*covars6.shape[:-1], 3, 3)
    else:
        full, _ = torch_impl._quat_scale_to_covar_preci(quats, scales, True, False, False)
    return torch_impl._fully_fused_projection(
        means,
        full,
        viewmats,
        Ks,
        WIDTH,
        HEIGHT,
        calc_compensations=comp,
        camera_model=camera_model,
    )


def close(got, want, name, rtol=RTOL):
    torch.testing.assert_close(
        got.double(), want, rtol=rtol, atol=rtol * max(want.abs().max().item(), 1e-12), msg=name
    )


def sizes(backend):
    return (2, 2, 30) if backend is simt else (2, 3, 200)


# ------------------------------------------------------- fully fused: models and batches


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("camera_model", CAMERA_MODELS)
@pytest.mark.parametrize("path", ["quats", "covars"])
def test_models_match_the_oracle_values_and_gradients(backend, camera_model, path):
    B, C, N = sizes(backend)
    means, quats, scales, covars, viewmats, Ks = batch_scene(B, C, N, seed=3)
    gaussian = (covars, None, None) if path == "covars" else (None, quats, scales)
    model = CAMERA_MODELS.index(camera_model)
    *floats, radii = backend.fully_fused_projection_forward(
        means, *gaussian, None, viewmats, Ks, WIDTH, HEIGHT, 0.3, 0.01, 1e10, 0.0, True, model
    )
    assert radii.shape == (B, C, N, 2) and floats[0].shape == (B, C, N, 2)

    leaves = [
        t.double().requires_grad_(True)
        for t in (means, *(g for g in gaussian if g is not None), viewmats)
    ]
    m64, *g64, V64 = leaves
    cov64 = g64[0] if path == "covars" else None
    q64, s64 = (None, None) if path == "covars" else g64
    ref = oracle(m64, cov64, q64, s64, V64, Ks.double(), camera_model)
    visible = (radii > 0).all(-1)
    assert torch.equal(visible, (ref[0] > 0).all(-1)), "the visible pairs differ"
    assert visible.any() and (~visible).any()
    assert torch.equal(radii[visible], ref[0][visible])
    for name, got, want in zip(("means2d", "depths", "conics", "compensations"), floats, ref[1:]):
        close(got[visible], want[visible].detach(), name)
        assert (got[~visible] == 0).all(), name

    gen = torch.Generator().manual_seed(4)
    v = [torch.randn(t.shape, generator=gen) for t in floats]
    grads = backend.fully_fused_projection_backward(
        means,
        *gaussian,
        viewmats,
        Ks,
        WIDTH,
        HEIGHT,
        0.3,
        model,
        radii,
        floats[2],
        floats[3],
        *v,
        True,
    )
    loss = sum((r[visible] * g[visible].double()).sum() for r, g in zip(ref[1:], v))
    want = torch.autograd.grad(loss, leaves)
    got = [grads[0]] + ([grads[1]] if path == "covars" else [grads[2], grads[3]]) + [grads[4]]
    names = ["means"] + ([path] if path == "covars" else ["quats", "scales"]) + ["viewmats"]
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        close(g, w, name, rtol=2e-3 if camera_model == "fisheye" else RTOL)


@pytest.mark.simt
def test_viewmat_sums_agree_when_blocks_span_cameras_or_not():
    """The CUDA backward sums a block's viewmat gradients before adding them when the block
    lies within one camera (N >= 256 pairs here) and adds each pair's own otherwise (N < 256):
    both equal the CPU's ordered sums."""
    for N in (300, 40):
        means, quats, scales, _, viewmats, Ks = batch_scene(1, 3, N, seed=5)
        *floats, radii = CPU.fully_fused_projection_forward(
            means,
            None,
            quats,
            scales,
            None,
            viewmats,
            Ks,
            WIDTH,
            HEIGHT,
            0.3,
            0.01,
            1e10,
            0.0,
            True,
            0,
        )
        v = [torch.randn_like(t) for t in floats]
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
            0,
            radii,
            floats[2],
            floats[3],
            *v,
            True,
        )
        cpu, sim = (
            CPU.fully_fused_projection_backward(*args),
            simt.fully_fused_projection_backward(*args),
        )
        assert cpu[4].abs().sum() > 0
        for a, b in zip(cpu, sim):
            assert a.shape == b.shape
            if a.numel():
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * a.abs().max().item())


def test_public_function_batch_dimensions_equal_one_call_per_batch():
    means, quats, scales, _, viewmats, Ks = batch_scene(2, 3, 60, seed=6)
    shape = (1, 2)
    args = [t.reshape(*shape, *t.shape[1:]) for t in (means, quats, scales, viewmats, Ks)]
    out = fully_fused_projection(
        args[0],
        None,
        args[1],
        args[2],
        args[3],
        args[4],
        WIDTH,
        HEIGHT,
        calc_compensations=True,
        camera_model="fisheye",
    )
    assert out[0].shape == (1, 2, 3, 60, 2) and out[4].shape == (1, 2, 3, 60)
    for b in range(2):
        one = fully_fused_projection(
            means[b],
            None,
            quats[b],
            scales[b],
            viewmats[b],
            Ks[b],
            WIDTH,
            HEIGHT,
            calc_compensations=True,
            camera_model="fisheye",
        )
        for a, o in zip(out, one):
            assert torch.equal(a[0, b], o)


def test_public_function_gradients_with_expanded_inputs():
    """gsplat's tests expand one scene over batch dimensions (stride 0): gradients sum over
    the batch like the oracle's."""
    means, quats, scales, _, viewmats, Ks = (t[0] for t in batch_scene(1, 2, 50, seed=7))
    leaves = [t.clone().requires_grad_(True) for t in (means, quats, scales, viewmats)]
    m, q, s, V = (t.expand(2, *t.shape) for t in leaves)
    out = fully_fused_projection(
        m, None, q, s, V, Ks.expand(2, 2, 3, 3), WIDTH, HEIGHT, camera_model="ortho"
    )
    visible = (out[0] > 0).all(-1)
    (out[1].sum() + out[2].sum() + out[3].sum()).backward()
    ref_leaves = [t.detach().double().requires_grad_(True) for t in leaves]
    rm, rq, rs, rV = (t.expand(2, *t.shape) for t in ref_leaves)
    ref = oracle(rm, None, rq, rs, rV, Ks.double().expand(2, 2, 3, 3), "ortho", comp=False)
    loss = sum(r[visible].sum() for r in ref[1:4])
    for name, leaf, want in zip(
        ("means", "quats", "scales", "viewmats"), leaves, torch.autograd.grad(loss, ref_leaves)
    ):
        close(leaf.grad, want, name)


# ------------------------------------------------------------------------- packed


@pytest.mark.parametrize("batch", [(), (2,), (1, 2)])
def test_packed_is_the_dense_visible_pairs(batch):
    B = math.prod(batch)
    means, quats, scales, _, viewmats, Ks = batch_scene(B, 3, 80, seed=8)
    flat = [t.reshape(*batch, *t.shape[1:]) for t in (means, quats, scales, viewmats, Ks)]
    dense_leaves = [t.clone().requires_grad_(True) for t in flat[:4]]
    packed_leaves = [t.clone().requires_grad_(True) for t in flat[:4]]
    dense = fully_fused_projection(
        dense_leaves[0], None, *dense_leaves[1:], flat[4], WIDTH, HEIGHT, calc_compensations=True
    )
    packed = fully_fused_projection(
        packed_leaves[0],
        None,
        *packed_leaves[1:],
        flat[4],
        WIDTH,
        HEIGHT,
        calc_compensations=True,
        packed=True,
    )
    batch_ids, camera_ids, gaussian_ids = packed[:3]
    assert batch_ids.dtype == camera_ids.dtype == gaussian_ids.dtype == torch.int64
    visible = (dense[0] > 0).all(-1).reshape(B, 3, 80)
    assert len(gaussian_ids) == int(visible.sum()) > 0
    # (batch, camera, Gaussian) order, as the visible mask's row-major order.
    key = (batch_ids * 3 + camera_ids) * 80 + gaussian_ids
    assert torch.equal(key, visible.flatten().nonzero().flatten())
    for d, p in zip(dense, packed[3:]):
        assert torch.equal(
            d.reshape(B, 3, 80, *d.shape[len(batch) + 2 :])[batch_ids, camera_ids, gaussian_ids], p
        )

    gen = torch.Generator().manual_seed(9)
    v = [torch.randn(p.shape, generator=gen) for p in packed[4:]]
    sum(((p * g).sum() for p, g in zip(packed[4:], v))).backward()
    dense_v = []
    for p, g in zip(dense[1:], v):
        full = torch.zeros((B, 3, 80, *p.shape[len(batch) + 2 :]))
        full[batch_ids, camera_ids, gaussian_ids] = g
        dense_v.append(full.reshape(p.shape))
    sum(((p * g).sum() for p, g in zip(dense[1:], dense_v))).backward()
    for name, a, b in zip(("means", "quats", "scales", "viewmats"), packed_leaves, dense_leaves):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-6, msg=name)


@pytest.mark.parametrize("batch", [(2,), (1, 2)])
def test_opacities_with_batch_dimensions_packed_and_gradients(batch):
    """Each batch's opacities bound its own radii (gsplat's rule, gsplat_radii), in dense and
    packed mode alike (gsplat's packed kernel reads the first batch's for every batch);
    opacities get no gradient, and the others are the oracle's over the visible pairs."""
    B, C, N = math.prod(batch), 3, 80
    means, quats, scales, _, viewmats, Ks = batch_scene(B, C, N, seed=11)
    gen = torch.Generator().manual_seed(12)
    opacities = torch.rand(B, N, generator=gen) ** 2
    opacities[:, ::7] = ALPHA_THRESHOLD * torch.rand(B, len(range(0, N, 7)), generator=gen)
    flat = [t.reshape(*batch, *t.shape[1:]) for t in (means, quats, scales, opacities)]
    V, K = (t.reshape(*batch, *t.shape[1:]) for t in (viewmats, Ks))
    leaves = [t.clone().requires_grad_(True) for t in flat]
    m, q, s, o = leaves
    dense = fully_fused_projection(
        m, None, q, s, V, K, WIDTH, HEIGHT, calc_compensations=True, opacities=o
    )
    assert dense[0].shape == (*batch, C, N, 2)
    want = gsplat_radii(
        means.double(),
        None,
        quats.double(),
        scales.double(),
        viewmats.double(),
        Ks.double(),
        WIDTH,
        HEIGHT,
        opacities.double(),
        calc_compensations=True,
    )
    assert torch.equal(dense[0].reshape(B, C, N, 2), want)
    for b in range(B):  # one call per batch, its own opacities
        one = fully_fused_projection(
            means[b],
            None,
            quats[b],
            scales[b],
            viewmats[b],
            Ks[b],
            WIDTH,
            HEIGHT,
            calc_compensations=True,
            opacities=opacities[b],
        )
        for a, e in zip(dense, one):
            assert torch.equal(a.reshape(B, *e.shape)[b], e)
    packed = fully_fused_projection(
        flat[0],
        None,
        flat[1],
        flat[2],
        V,
        K,
        WIDTH,
        HEIGHT,
        calc_compensations=True,
        packed=True,
        opacities=flat[3],
    )
    batch_ids, camera_ids, gaussian_ids = packed[:3]
    visible = (want > 0).all(-1)
    assert len(gaussian_ids) == int(visible.sum()) > 0
    for d, p in zip(dense, packed[3:]):
        assert torch.equal(
            d.reshape(B, C, N, *d.shape[len(batch) + 2 :])[batch_ids, camera_ids, gaussian_ids], p
        )

    gen = torch.Generator().manual_seed(13)
    v = [torch.randn(t.shape, generator=gen) for t in dense[1:]]
    sum((t * g).sum() for t, g in zip(dense[1:], v)).backward()
    assert o.grad is None
    ref_leaves = [t.detach().double().requires_grad_(True) for t in (means, quats, scales)]
    ref = oracle(ref_leaves[0], None, *ref_leaves[1:], viewmats.double(), Ks.double(), "pinhole")
    loss = sum(
        (r[visible] * g.reshape(r.shape)[visible].double()).sum() for r, g in zip(ref[1:], v)
    )
    for name, leaf, w in zip(
        ("means", "quats", "scales"), leaves, torch.autograd.grad(loss, ref_leaves)
    ):
        close(leaf.grad.reshape(w.shape), w, name)


def test_sparse_grad_gives_sparse_rows_equal_to_the_dense_gradient():
    means, quats, scales, _, viewmats, Ks = (t[0] for t in batch_scene(1, 2, 60, seed=10))
    sparse = [t.clone().requires_grad_(True) for t in (means, quats, scales)]
    dense = [t.clone().requires_grad_(True) for t in (means, quats, scales)]
    for leaves, sparse_grad in ((sparse, True), (dense, False)):
        out = fully_fused_projection(
            leaves[0],
            None,
            leaves[1],
            leaves[2],
            viewmats,
            Ks,
            WIDTH,
            HEIGHT,
            packed=True,
            sparse_grad=sparse_grad,
        )
        (out[4].sum() + out[6].sum()).backward()
    visible_rows = set(out[2].tolist())
    for name, s, d in zip(("means", "quats", "scales"), sparse, dense):
        assert s.grad.layout == torch.sparse_coo, name
        rows = s.grad.coalesce().indices()[0].tolist()
        assert set(rows) <= visible_rows and len(rows) > 0, name
        torch.testing.assert_close(s.grad.to_dense(), d.grad, msg=name)


# --------------------------------------------------------------------------- proj


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("camera_model", CAMERA_MODELS)
def test_proj_matches_the_oracle(backend, camera_model):
    I, N = (2, 20) if backend is simt else (3, 200)
    means, covars, Ks = proj_scene(I, N, seed=11)
    covars = covars + 0.01 * torch.randn(covars.shape)  # proj takes any 3x3, not only symmetric
    model = CAMERA_MODELS.index(camera_model)
    means2d, covars2d = backend.proj_forward(means, covars, Ks, WIDTH, HEIGHT, model)
    m64 = means.double().requires_grad_(True)
    c64 = covars.double().requires_grad_(True)
    r_means2d, r_covars2d = ORACLE_PROJ[camera_model](m64, c64, Ks.double(), WIDTH, HEIGHT)
    close(means2d, r_means2d.detach(), "means2d")
    close(covars2d, r_covars2d.detach(), "covars2d")
    gen = torch.Generator().manual_seed(12)
    v_m, v_c = torch.randn(means2d.shape, generator=gen), torch.randn(covars2d.shape, generator=gen)
    v_means, v_covars = backend.proj_backward(means, covars, Ks, WIDTH, HEIGHT, model, v_m, v_c)
    want = torch.autograd.grad((r_means2d * v_m).sum() + (r_covars2d * v_c).sum(), (m64, c64))
    close(v_means, want[0], "means", rtol=1e-3)
    close(v_covars, want[1], "covars", rtol=1e-3)


def test_proj_public_function_batch_dimensions_dtypes_and_gradients():
    means, covars, Ks = proj_scene(2, 30, seed=13)
    m = means.double().reshape(1, 2, 30, 3).requires_grad_(True)
    c = covars.double().reshape(1, 2, 30, 3, 3).requires_grad_(True)
    means2d, covars2d = proj(m, c, Ks.reshape(1, 2, 3, 3), WIDTH, HEIGHT, "fisheye")
    assert means2d.shape == (1, 2, 30, 2) and covars2d.shape == (1, 2, 30, 2, 2)
    assert means2d.dtype == torch.float32
    (means2d.sum() + covars2d.sum()).backward()
    assert m.grad.dtype == torch.float64 and m.grad.shape == m.shape and c.grad.shape == c.shape
    raw = CPU.proj_backward(
        means, covars, Ks, WIDTH, HEIGHT, 2, torch.ones(2, 30, 2), torch.ones(2, 30, 2, 2)
    )
    torch.testing.assert_close(m.grad.reshape(2, 30, 3).float(), raw[0])


@pytest.mark.parametrize(
    "changes, exc, fragment",
    [
        ({"means": torch.zeros(2, 5, 2)}, ValueError, r"means must have shape \(\.\.\., C, N, 3\)"),
        ({"covars": torch.zeros(2, 5, 6)}, ValueError, r"covars must have shape \(2, 5, 3, 3\)"),
        ({"Ks": torch.zeros(3, 3, 3)}, ValueError, r"Ks must have shape \(2, 3, 3\)"),
        ({"camera_model": "ftheta"}, NotImplementedError, "ftheta"),
        ({"camera_model": "orthographic"}, ValueError, "camera_model must be one of"),
        ({"width": 0}, ValueError, "width must be positive"),
        (
            {"Ks": torch.full((2, 3, 3), float("nan"))},
            ValueError,
            r"Ks\[0\] \(camera 0\) is not finite",
        ),
    ],
)
def test_proj_bad_inputs_raise(changes, exc, fragment):
    kwargs = dict(
        means=torch.zeros(2, 5, 3),
        covars=torch.zeros(2, 5, 3, 3),
        Ks=cameras(2)[1],
        width=WIDTH,
        height=HEIGHT,
    )
    kwargs.update(changes)
    with pytest.raises(exc, match=fragment):
        proj(**kwargs)


def test_torch_compile_fullgraph_models_and_batches():
    means, quats, scales, _, viewmats, Ks = batch_scene(2, 2, 40, seed=14)

    def loss_fn(m, q, s, V):
        _, means2d, depths, conics, comps = fully_fused_projection(
            m, None, q, s, V, Ks, WIDTH, HEIGHT, calc_compensations=True, camera_model="fisheye"
        )
        return means2d.square().sum() * 1e-3 + depths.sum() + conics.sum() + comps.sum()

    assert_compiled_matches_eager(loss_fn, means, quats, scales, viewmats, loss_atol=1e-4)
