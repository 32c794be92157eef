"""prebuild's own self-test cases (``prebuild selftest``; declared in pyproject.toml's
``[tool.prebuild] selftest``): each op family on a small seeded input, forward and backward.

Inputs are drawn on the CPU from a seeded generator and then moved, so every device gets the
same values. ``fused_ssim`` and ``quat_scale_to_covar_preci`` have plain-PyTorch references
(float64, written from the formulas); the rest are checked by the CPU kernels themselves (a
GPU against them, the CPU against a second run). Each case takes milliseconds on the CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from prebuild.runtime.selftest import SelftestCase

# --- fused_ssim ------------------------------------------------------------------------------

SSIM_SHAPE = (2, 3, 32, 32)
WINDOW, SIGMA, C1, C2 = 11, 1.5, 0.01**2, 0.03**2  # docs/kernels.md: fused-ssim's constants


def _images(device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two related images in [0, 1] (a texture and a noisy copy): SSIM well inside (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    B, C, H, W = SSIM_SHAPE
    rows = torch.linspace(0, 6, H).view(1, 1, H, 1)
    cols = torch.linspace(0, 6, W).view(1, 1, 1, W)
    phase = torch.rand(B, C, 1, 1, generator=gen) * 3
    base = 0.5 + 0.3 * torch.sin(rows + phase) * torch.cos(cols * 1.3 - phase)
    img1 = (base + 0.1 * torch.rand(SSIM_SHAPE, generator=gen)).clamp(0, 1)
    img2 = (img1 + 0.08 * torch.randn(SSIM_SHAPE, generator=gen)).clamp(0, 1)
    return img1.to(device), img2.to(device)


def ssim_reference(img1: torch.Tensor, img2: torch.Tensor, padding: str = "same") -> torch.Tensor:
    """Mean SSIM from the formula in float64: an 11-tap Gaussian window (sigma 1.5) applied
    with zero padding, C1 = 0.01^2, C2 = 0.03^2; "valid" drops the 5-pixel border."""
    if padding not in ("same", "valid"):
        raise ValueError(f"ssim_reference: padding must be 'same' or 'valid', got {padding!r}")
    if img1.dim() != 4 or img1.shape != img2.shape:
        raise ValueError(
            f"ssim_reference: img1 and img2 must be (B, C, H, W) images of one shape, "
            f"got {tuple(img1.shape)} and {tuple(img2.shape)}"
        )
    x, y = img1.to(torch.float64), img2.to(torch.float64)
    taps = torch.arange(WINDOW, dtype=torch.float64, device=x.device) - WINDOW // 2
    g = torch.exp(-(taps**2) / (2 * SIGMA**2))
    g = g / g.sum()
    window = torch.outer(g, g).expand(x.shape[1], 1, WINDOW, WINDOW)

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, window, padding=WINDOW // 2, groups=t.shape[1])

    mu_x, mu_y = blur(x), blur(y)
    s_xx = blur(x * x) - mu_x * mu_x
    s_yy = blur(y * y) - mu_y * mu_y
    s_xy = blur(x * y) - mu_x * mu_y
    ssim_map = ((2 * mu_x * mu_y + C1) * (2 * s_xy + C2)) / (
        (mu_x**2 + mu_y**2 + C1) * (s_xx + s_yy + C2)
    )
    if padding == "valid":
        ssim_map = ssim_map[:, :, WINDOW // 2 : -(WINDOW // 2), WINDOW // 2 : -(WINDOW // 2)]
    return ssim_map.mean()


def _ssim_outputs(ssim, device: torch.device, padding: str, train: bool) -> dict[str, torch.Tensor]:
    img1, img2 = (t.requires_grad_() for t in _images(device, seed=0))
    value = ssim(img1, img2, padding, train)
    value.backward()
    return {"ssim": value.detach(), "grad_img1": img1.grad, "grad_img2": img2.grad}


def _fused_ssim_case(padding: str, train: bool) -> SelftestCase:
    from prebuild.ops.ssim import fused_ssim

    def run(device: torch.device) -> dict[str, torch.Tensor]:
        return _ssim_outputs(fused_ssim, device, padding, train)

    def reference(device: torch.device) -> dict[str, torch.Tensor]:
        return _ssim_outputs(lambda a, b, p, _t: ssim_reference(a, b, p), device, padding, train)

    # The gradients of a mean over 6144 pixels are at most ~1e-2; the CPU kernels are within
    # 1e-7 of the float64 reference (a fifth of this atol).
    return SelftestCase(
        f"fused_ssim(padding={padding!r}, train={train})",
        run,
        reference=reference,
        atol=5e-7,
        rtol=1e-4,
    )


# --- quat_scale_to_covar_preci ---------------------------------------------------------------

GAUSSIANS = 300


def _quats_scales(device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    quats = torch.randn(GAUSSIANS, 4, generator=gen)  # not normalised: the op normalises
    scales = torch.exp(torch.randn(GAUSSIANS, 3, generator=gen) * 0.4 - 1.5)
    return quats.to(device), scales.to(device)


def covar_preci_reference(
    quats: torch.Tensor, scales: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """R diag(s)^2 R^T and R diag(s)^-2 R^T in float64, R from the normalised (w, x, y, z)."""
    if quats.shape[-1:] != (4,) or scales.shape != (*quats.shape[:-1], 3):
        raise ValueError(
            f"covar_preci_reference: quats must be (..., 4) and scales (..., 3) with the same "
            f"leading dimensions, got {tuple(quats.shape)} and {tuple(scales.shape)}"
        )
    w, x, y, z = F.normalize(quats.to(torch.float64), dim=-1).unbind(-1)
    R = torch.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).reshape(*quats.shape[:-1], 3, 3)
    s = scales.to(torch.float64)
    covars = R @ torch.diag_embed(s**2) @ R.transpose(-1, -2)
    precis = R @ torch.diag_embed(s**-2) @ R.transpose(-1, -2)
    return covars, precis


def _covariance_outputs(covar_preci, device: torch.device) -> dict[str, torch.Tensor]:
    quats, scales = (t.requires_grad_() for t in _quats_scales(device, seed=1))
    covars, precis = covar_preci(quats, scales)
    gen = torch.Generator().manual_seed(2)
    w_covars = torch.randn(GAUSSIANS, 3, 3, generator=gen).to(device)
    w_precis = torch.randn(GAUSSIANS, 3, 3, generator=gen).to(device)
    ((covars * w_covars).sum() + (precis * w_precis).sum() * 1e-2).backward()
    return {
        "covars": covars.detach(),
        "precis": precis.detach(),
        "grad_quats": quats.grad,
        "grad_scales": scales.grad,
    }


def _covariance_case() -> SelftestCase:
    from prebuild.ops.covariance import quat_scale_to_covar_preci

    def run(device: torch.device) -> dict[str, torch.Tensor]:
        return _covariance_outputs(quat_scale_to_covar_preci, device)

    def reference(device: torch.device) -> dict[str, torch.Tensor]:
        return _covariance_outputs(covar_preci_reference, device)

    # Precisions reach ~250 (scales down to ~0.06) and their scales' gradients ~100: their
    # near-zero entries are differences of such terms, so atol is float32's error at ~250.
    return SelftestCase("quat_scale_to_covar_preci", run, reference=reference, atol=1e-4, rtol=1e-3)


# --- spherical_harmonics ---------------------------------------------------------------------

SH_DEGREE = 3


def _sh_case() -> SelftestCase:
    from prebuild.ops.sh import spherical_harmonics

    def run(device: torch.device) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(3)
        dirs = torch.randn(GAUSSIANS, 3, generator=gen).to(device).requires_grad_()
        coeffs = (
            (torch.randn(GAUSSIANS, (SH_DEGREE + 1) ** 2, 3, generator=gen) * 0.3)
            .to(device)
            .requires_grad_()
        )
        weights = torch.randn(GAUSSIANS, 3, generator=gen).to(device)
        colors = spherical_harmonics(SH_DEGREE, dirs, coeffs)
        (colors * weights).sum().backward()
        return {"colors": colors.detach(), "grad_dirs": dirs.grad, "grad_coeffs": coeffs.grad}

    return SelftestCase(f"spherical_harmonics(degree={SH_DEGREE})", run, atol=1e-5, rtol=1e-4)


# --- rasterization ---------------------------------------------------------------------------

WIDTH = HEIGHT = 64
CAMERAS = 2


def _scene(device: torch.device) -> dict[str, torch.Tensor]:
    """GAUSSIANS Gaussians in front of CAMERAS cameras (the second moved and turned a little),
    colours as degree-1 SH coefficients, and the weights of the loss."""
    gen = torch.Generator().manual_seed(4)
    xy = (torch.rand(GAUSSIANS, 2, generator=gen) * 2 - 1) * 1.2
    depth = 3 + 2 * torch.rand(GAUSSIANS, 1, generator=gen)
    turn = 0.15
    viewmats = torch.eye(4).repeat(CAMERAS, 1, 1)
    viewmats[1, :3, :3] = torch.tensor(
        [
            [math.cos(turn), 0.0, math.sin(turn)],
            [0.0, 1.0, 0.0],
            [-math.sin(turn), 0.0, math.cos(turn)],
        ]
    )
    viewmats[1, :3, 3] = torch.tensor([0.3, -0.2, 0.4])
    f = 1.1 * WIDTH
    Ks = torch.tensor([[f, 0.0, WIDTH / 2], [0.0, f, HEIGHT / 2], [0.0, 0.0, 1.0]]).repeat(
        CAMERAS, 1, 1
    )
    scene = {
        "means": torch.cat([xy * depth / 3, depth], dim=1),
        "quats": torch.randn(GAUSSIANS, 4, generator=gen),
        "scales": torch.exp(torch.randn(GAUSSIANS, 3, generator=gen) * 0.3 - 2.8),
        "opacities": 0.3 + 0.6 * torch.rand(GAUSSIANS, generator=gen),
        "colors": torch.randn(GAUSSIANS, 4, 3, generator=gen) * 0.3,
        "viewmats": viewmats,
        "Ks": Ks,
        "backgrounds": torch.rand(CAMERAS, 3, generator=gen),
        "w_colors": torch.randn(CAMERAS, HEIGHT, WIDTH, 3, generator=gen),
        "w_alphas": torch.randn(CAMERAS, HEIGHT, WIDTH, 1, generator=gen),
    }
    return {name: t.to(device) for name, t in scene.items()}


DIFFERENTIABLE = ("means", "quats", "scales", "opacities", "colors")


def _rasterization_case() -> SelftestCase:
    from prebuild.ops.rendering import rasterization

    def run(device: torch.device) -> dict[str, torch.Tensor]:
        s = _scene(device)
        for name in DIFFERENTIABLE:
            s[name].requires_grad_()
        colors, alphas, _ = rasterization(
            s["means"],
            s["quats"],
            s["scales"],
            s["opacities"],
            s["colors"],
            s["viewmats"],
            s["Ks"],
            WIDTH,
            HEIGHT,
            sh_degree=1,
            backgrounds=s["backgrounds"],
        )
        ((colors * s["w_colors"]).sum() + (alphas * s["w_alphas"]).sum()).backward()
        return {
            "colors": colors.detach(),
            "alphas": alphas.detach(),
            **{f"grad_{n}": s[n].grad for n in DIFFERENTIABLE},
        }

    # A GPU's backward sums each Gaussian's gradient over its pixels in another order (atomics):
    # gradients up to ~100 that nearly cancel differ by more than the colours do.
    return SelftestCase(
        f"rasterization({GAUSSIANS} Gaussians, {CAMERAS}x{WIDTH}x{HEIGHT})",
        run,
        atol=1e-3,
        rtol=1e-3,
    )


def cases() -> list[SelftestCase]:
    """prebuild's self-test cases, one per op family (SSIM in both of its kernel paths)."""
    return [
        _fused_ssim_case("same", True),
        _fused_ssim_case("valid", False),
        _covariance_case(),
        _sh_case(),
        _rasterization_case(),
    ]
