"""Plain-PyTorch reference SSIM, written from the formula (float64, zero padding).

SSIM at a pixel, with G the 11x11 separable Gaussian window (sigma 1.5) and zero padding:
    mu_x = G*x, mu_y = G*y,
    s_xx = G*(x^2) - mu_x^2, s_yy = G*(y^2) - mu_y^2, s_xy = G*(xy) - mu_x mu_y,
    S = (2 mu_x mu_y + C1)(2 s_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(s_xx + s_yy + C2)),
with C1 = 0.01^2 and C2 = 0.03^2. "same" averages S over every pixel; "valid" averages the
map cropped by 5 pixels on each side.

Also `textured`, a deterministic test-image generator shared by the tests.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

WINDOW = 11
RADIUS = WINDOW // 2
SIGMA = 1.5
C1 = 0.01**2
C2 = 0.03**2


def gaussian_1d(dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """Normalised 1-D weights exp(-(k-5)^2 / (2 sigma^2)) / sum, k = 0..10."""
    w = [math.exp(-((k - RADIUS) ** 2) / (2 * SIGMA**2)) for k in range(WINDOW)]
    s = sum(w)
    return torch.tensor([v / s for v in w], dtype=dtype, device=device)


def _blur(t: torch.Tensor) -> torch.Tensor:
    """Depthwise 11x11 Gaussian filter with zero padding 5 (output has the input's shape)."""
    channels = t.shape[1]
    g = gaussian_1d(t.dtype, t.device)
    window = torch.outer(g, g).expand(channels, 1, WINDOW, WINDOW).contiguous()
    return F.conv2d(t, window, padding=RADIUS, groups=channels)


def ssim_map_reference(img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
    """Per-pixel SSIM map ("same" zero padding), computed in float64."""
    x = img1.to(torch.float64)
    y = img2.to(torch.float64)
    mu_x = _blur(x)
    mu_y = _blur(y)
    s_xx = _blur(x * x) - mu_x * mu_x
    s_yy = _blur(y * y) - mu_y * mu_y
    s_xy = _blur(x * y) - mu_x * mu_y
    num = (2 * mu_x * mu_y + C1) * (2 * s_xy + C2)
    den = (mu_x * mu_x + mu_y * mu_y + C1) * (s_xx + s_yy + C2)
    return num / den


def ssim_reference(img1: torch.Tensor, img2: torch.Tensor, padding: str = "same") -> torch.Tensor:
    """Mean SSIM (float64 scalar); differentiable with respect to both images."""
    ssim_map = ssim_map_reference(img1, img2)
    if padding == "valid":
        ssim_map = ssim_map[:, :, RADIUS:-RADIUS, RADIUS:-RADIUS]
    elif padding != "same":
        raise ValueError(padding)
    return ssim_map.mean()


def textured(shape, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Deterministic smooth-plus-noise texture in [0, 1] with a different pattern per plane."""
    gen = torch.Generator().manual_seed(seed)
    B, C, H, W = shape
    ii = torch.arange(H, dtype=torch.float64).view(1, 1, H, 1)
    jj = torch.arange(W, dtype=torch.float64).view(1, 1, 1, W)
    fi = 0.2 + torch.rand(B, C, 1, 1, generator=gen, dtype=torch.float64)
    fj = 0.2 + torch.rand(B, C, 1, 1, generator=gen, dtype=torch.float64)
    base = 0.5 + 0.3 * torch.sin(fi * ii) * torch.cos(fj * jj)
    noise = 0.1 * torch.rand(shape, generator=gen, dtype=torch.float64)
    return (base + noise).clamp(0, 1).to(dtype)
