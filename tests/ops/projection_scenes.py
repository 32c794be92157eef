"""Scenes for the projection tests (cameras, Gaussians, special cases) and the gsplat 1.5.3
plain-PyTorch oracle for them. gsplat is imported by the oracle only: the scenes also serve
tests/cuda on GPU machines that have no gsplat."""

from __future__ import annotations

import math

import torch

# Image sizes: odd on purpose (the frustum limits and the box test use width, height).
WIDTH, HEIGHT = 67, 45


def look_at(eye, target=(0.0, 0.0, 0.0), roll=0.0) -> torch.Tensor:
    """World-to-camera 4x4 (OpenCV convention: +z forward, +y down) for a camera at `eye`
    looking at `target`, rolled by `roll` radians about its axis."""
    eye = torch.tensor(eye, dtype=torch.float64)
    forward = torch.tensor(target, dtype=torch.float64) - eye
    forward = forward / forward.norm()
    up = torch.tensor([0.0, -1.0, 0.0], dtype=torch.float64)
    right = torch.linalg.cross(forward, up)
    right = right / right.norm()
    down = torch.linalg.cross(forward, right)
    R = torch.stack([right, down, forward])  # rows: camera axes in world coordinates
    c, s = math.cos(roll), math.sin(roll)
    R = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64) @ R
    V = torch.eye(4, dtype=torch.float64)
    V[:3, :3] = R
    V[:3, 3] = -R @ eye
    return V


def cameras(C: int = 3, width: int = WIDTH, height: int = HEIGHT):
    """C rotated cameras around the origin (float32 viewmats and Ks), off-centre principal
    points and fx != fy."""
    eyes = [(0.3, -0.2, -4.0), (3.5, 0.5, -2.0), (-2.5, -1.0, 3.0), (0.5, 3.8, 0.5)]
    views = [look_at(eyes[i % len(eyes)], roll=0.3 * i) for i in range(C)]
    Ks = []
    for i in range(C):
        fx = 0.9 * width + 7.0 * i
        Ks.append(
            torch.tensor(
                [[fx, 0.0, 0.47 * width + i], [0.0, 1.1 * fx, 0.53 * height - i], [0.0, 0.0, 1.0]],
                dtype=torch.float64,
            )
        )
    return torch.stack(views).float(), torch.stack(Ks).float()


def gaussians(N: int, seed: int = 0, spread: float = 1.2):
    """Random Gaussians around the origin: means, quats (unnormalised), scales, and covars
    (upper triangles of well-conditioned random SPD matrices)."""
    gen = torch.Generator().manual_seed(seed)
    means = (torch.rand(N, 3, generator=gen) * 2 - 1) * spread
    quats = torch.randn(N, 4, generator=gen)
    scales = torch.exp(torch.randn(N, 3, generator=gen) * 0.4 - 2.3)
    A = torch.randn(N, 3, 3, generator=gen) * 0.08
    full = A @ A.transpose(1, 2) + 0.004 * torch.eye(3)
    covars = full[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]].contiguous()
    return means, quats, scales, covars


def identity_camera(width: int = WIDTH, height: int = HEIGHT, f: float = 60.0):
    V = torch.eye(4)[None]
    K = torch.tensor([[[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]]])
    return V, K


def special_gaussians(width: int = WIDTH, height: int = HEIGHT, f: float = 60.0):
    """Gaussians for `identity_camera`, one per case, and what the forward must say of each:
    (means, quats, scales, expected_visible)."""
    cx = width / 2
    lim_x = (width - cx) / f + 0.3 * 0.5 * width / f  # the Jacobian clamp's limit of x/z
    cases = [
        ((0.0, 0.0, -3.0), 0.1, False),  # behind the camera
        ((0.0, 0.0, 0.005), 0.001, False),  # in front of the camera but before the near plane
        ((0.0, 0.0, 3.0e10), 1.0, False),  # beyond the far plane
        ((0.1, -0.05, 3.0), 0.05, True),  # plainly visible
        ((30.0, 0.0, 3.0), 0.05, False),  # far outside the image, small
        ((0.0, -40.0, 3.0), 0.05, False),  # far above the image, small
        ((2.0 * (lim_x + 0.5), 0.0, 2.0), 0.6, True),  # clamped Jacobian, box reaches the image
        ((-1.6, 0.3, 2.0), 0.5, True),  # clamped on the other side, still visible
        ((0.2, -1.4, 1.5), 0.4, True),  # clamped in y
        ((2.0 * (lim_x + 0.5), 0.0, 2.0), 0.05, False),  # clamped and outside the image
    ]
    means = torch.tensor([c[0] for c in cases])
    scales = torch.tensor([[c[1], 0.7 * c[1], 1.2 * c[1]] for c in cases])
    quats = torch.tensor([[1.0, 0.2, -0.1, 0.3]]).repeat(len(cases), 1)
    visible = torch.tensor([c[2] for c in cases])
    return means, quats, scales, visible


def covar_matrix(covars6: torch.Tensor) -> torch.Tensor:
    """(N, 6) upper triangles to (N, 3, 3), differentiably (off-diagonals used twice)."""
    return covars6[:, [0, 1, 2, 1, 3, 4, 2, 4, 5]].reshape(-1, 3, 3)


def oracle(
    means,
    covars,
    quats,
    scales,
    viewmats,
    Ks,
    width,
    height,
    eps2d=0.3,
    near_plane=0.01,
    far_plane=1e10,
    calc_compensations=False,
    camera_model="pinhole",
):
    """gsplat's _fully_fused_projection in whatever dtype the inputs have."""
    from gsplat_oracle import torch_impl

    if covars is not None:
        full = covar_matrix(covars)
    else:
        full, _ = torch_impl._quat_scale_to_covar_preci(quats, scales, True, False, False)
    return torch_impl._fully_fused_projection(
        means,
        full,
        viewmats,
        Ks,
        width,
        height,
        eps2d,
        near_plane,
        far_plane,
        calc_compensations,
        camera_model,
    )


# gsplat's ALPHA_THRESHOLD, 1.f / 255.f, as a float32 value.
ALPHA_THRESHOLD = float(torch.tensor(1 / 255, dtype=torch.float32))


def gsplat_radii(
    means,
    covars,
    quats,
    scales,
    viewmats,
    Ks,
    width,
    height,
    opacities=None,
    eps2d=0.3,
    near_plane=0.01,
    far_plane=1e10,
    radius_clip=0.0,
    calc_compensations=False,
    camera_model="pinhole",
):
    """gsplat 1.5.3's radii [..., C, N, 2] as its CUDA kernel computes them
    (ProjectionEWA3DGSFused.cu), in the inputs' dtype: the oracle's 2D covariances, then the
    kernel's rules, which the oracle leaves out: the extent min(3.33, sqrt(2 ln(o / (1/255))))
    with opacities o [..., N] (times the compensation with calc_compensations; o < 1/255
    culls; a NaN o gives 3.33, as CUDA's fminf), radius_clip, and near/far inclusive."""
    from gsplat_oracle import torch_impl

    if covars is not None:
        full = covar_matrix(covars.reshape(-1, 6)).reshape(*covars.shape[:-1], 3, 3)
    else:
        full, _ = torch_impl._quat_scale_to_covar_preci(quats, scales, True, False, False)
    means_c, covars_c = torch_impl._world_to_cam(means, full, viewmats)
    project = {
        "pinhole": torch_impl._persp_proj,
        "ortho": torch_impl._ortho_proj,
        "fisheye": torch_impl._fisheye_proj,
    }[camera_model]
    means2d, cov2d = project(means_c, covars_c, Ks, width, height)
    b = cov2d[..., 0, 1] * cov2d[..., 1, 0]
    det_orig = cov2d[..., 0, 0] * cov2d[..., 1, 1] - b
    a, c = cov2d[..., 0, 0] + eps2d, cov2d[..., 1, 1] + eps2d
    det = a * c - b
    z = means_c[..., 2]
    keep = (z >= near_plane) & (z <= far_plane) & (det > 0)
    extend = torch.full_like(z, 3.33)
    if opacities is not None:
        o = opacities[..., None, :].expand_as(z)
        if calc_compensations:
            o = o * torch.sqrt(torch.clamp(det_orig / det, min=0.0))
        keep &= ~(o < ALPHA_THRESHOLD)
        extend = torch.fmin(extend, torch.sqrt(2 * torch.log(o / ALPHA_THRESHOLD)))
    rx, ry = torch.ceil(extend * torch.sqrt(a)), torch.ceil(extend * torch.sqrt(c))
    keep &= (rx > radius_clip) | (ry > radius_clip)
    x, y = means2d[..., 0], means2d[..., 1]
    keep &= (x + rx > 0) & (x - rx < width) & (y + ry > 0) & (y - ry < height)
    return torch.where(keep[..., None], torch.stack([rx, ry], dim=-1), 0).int()


RTOL = 1e-4


def assert_matches_oracle(out, ref, calc_compensations, width=WIDTH, height=HEIGHT):
    radii, means2d, depths, conics, comps = out
    r_radii, r_means2d, r_depths, r_conics, r_comps = ref
    visible = (radii > 0).all(-1)
    assert torch.equal(visible, (r_radii > 0).all(-1)), "the visible pairs differ"
    assert torch.equal(radii[visible], r_radii[visible])
    assert (radii[~visible] == 0).all()
    # Culled pairs: zeros in every output (gsplat leaves them uninitialised).
    for t in (means2d, depths, conics):
        assert (t[~visible] == 0).all()
    torch.testing.assert_close(
        means2d[visible].double(), r_means2d[visible], rtol=RTOL, atol=RTOL * max(width, height)
    )
    torch.testing.assert_close(depths[visible].double(), r_depths[visible], rtol=RTOL, atol=0)
    # conic b may be ~0: compare each conic relative to its largest entry.
    scale = r_conics[visible].abs().amax(-1, keepdim=True)
    torch.testing.assert_close(
        conics[visible].double() / scale, r_conics[visible] / scale, rtol=RTOL, atol=RTOL
    )
    if calc_compensations:
        assert comps.shape == depths.shape
        torch.testing.assert_close(comps[visible].double(), r_comps[visible], rtol=RTOL, atol=1e-6)
        assert (comps[~visible] == 0).all()
    else:
        assert comps.shape == (0,)
    return visible


def proj_scene(I: int, N: int, seed: int = 0):
    """Camera-space Gaussians for `proj`: means [I, N, 3] in front of each camera (inside and
    outside its view), full SPD covariances [I, N, 3, 3], and Ks [I, 3, 3]."""
    gen = torch.Generator().manual_seed(seed)
    z = 1.0 + 3.0 * torch.rand(I, N, 1, generator=gen)
    xy = (torch.rand(I, N, 2, generator=gen) * 2 - 1) * z * 0.9
    means = torch.cat([xy, z], dim=-1)
    A = torch.randn(I, N, 3, 3, generator=gen) * 0.08
    covars = A @ A.transpose(-1, -2) + 0.004 * torch.eye(3)
    _, Ks = cameras(I)
    return means, covars, Ks
