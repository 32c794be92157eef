"""A plain-PyTorch dense reference of rasterize_to_pixels (gsplat 1.5.3 rules), written for
these tests: per pixel, the Gaussians of its tile's run of flatten_ids in sorted order,
composited with the skip and stop rules, differentiable by autograd.

The discrete decisions (skip: sigma < 0 or alpha < 1/255; stop: the next transmittance
would be <= 1e-4) are made in float32, like the kernels, so a float64 evaluation (for
accurate reference gradients) composites exactly the same Gaussians. Given those decisions,
  weight_i = alpha_i prod_{j<i} (1 - alpha_j)   over the composited Gaussians,
  color = sum_i weight_i color_i + T_final background,  alpha = 1 - T_final.
"""

from __future__ import annotations

import torch

ALPHA_THRESHOLD = 1.0 / 255.0
MAX_ALPHA = 0.999
MIN_TRANSMITTANCE = 1e-4


def _sigma_alpha(means, conics, opacities, px, py):
    """sigma and alpha of L Gaussians at P pixel centres: [P, L] each."""
    dx = means[None, :, 0] - px[:, None]
    dy = means[None, :, 1] - py[:, None]
    sigma = 0.5 * (conics[None, :, 0] * dx * dx + conics[None, :, 2] * dy * dy) + (
        conics[None, :, 1] * dx * dy
    )
    alpha = torch.clamp(opacities[None, :] * torch.exp(-sigma), max=MAX_ALPHA)
    return sigma, alpha


def _composited(means, conics, opacities, px, py):
    """[P, L] bool: which Gaussians each pixel composites; [P] bool: pixels that stopped."""
    with torch.no_grad():
        sigma, alpha = _sigma_alpha(
            means.float(), conics.float(), opacities.float(), px.float(), py.float()
        )
        valid = (sigma >= 0) & (alpha >= ALPHA_THRESHOLD)
        a = torch.where(valid, alpha, torch.zeros_like(alpha))
        # Sequential float32 products, as the kernels' T *= (1 - alpha).
        t_after = torch.cumprod(1.0 - a, dim=1)
        composited = valid & (t_after > MIN_TRANSMITTANCE)
        stopped = (valid & ~composited).any(dim=1)
    return composited, stopped


def rasterize_reference(
    means2d,
    conics,
    colors,
    opacities,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
    backgrounds=None,
    return_stopped=False,
):
    """(render_colors [C, H, W, D], render_alphas [C, H, W, 1]) in the inputs' dtype;
    with return_stopped, also the number of pixels where the early stop happened."""
    C, N = means2d.shape[:2]
    D = colors.shape[-1]
    dtype = means2d.dtype
    if opacities.dim() == 1:
        opacities = opacities.unsqueeze(0).expand(C, N)
    flat_means = means2d.reshape(C * N, 2)
    flat_conics = conics.reshape(C * N, 3)
    flat_colors = colors.reshape(C * N, D)
    flat_opacities = opacities.reshape(C * N)
    tiles_y, tiles_x = isect_offsets.shape[1:]
    offsets = isect_offsets.flatten().tolist() + [flatten_ids.numel()]
    stopped_pixels = 0
    images, alphas = [], []
    for cam in range(C):
        rows_c, rows_a = [], []
        for ty in range(tiles_y):
            tiles_c, tiles_a = [], []
            for tx in range(tiles_x):
                flat_tile = (cam * tiles_y + ty) * tiles_x + tx
                ids = flatten_ids[offsets[flat_tile] : offsets[flat_tile + 1]].long()
                y0, x0 = ty * tile_size, tx * tile_size
                ys = torch.arange(y0, min(y0 + tile_size, image_height), dtype=dtype)
                xs = torch.arange(x0, min(x0 + tile_size, image_width), dtype=dtype)
                gy, gx = torch.meshgrid(ys, xs, indexing="ij")
                px, py = gx.flatten() + 0.5, gy.flatten() + 0.5
                P = px.numel()
                if ids.numel() == 0:
                    color = torch.zeros(P, D, dtype=dtype)
                    t_final = torch.ones(P, dtype=dtype)
                else:
                    m, c, o = flat_means[ids], flat_conics[ids], flat_opacities[ids]
                    composited, stopped = _composited(m, c, o, px, py)
                    stopped_pixels += int(stopped.sum())
                    _, alpha = _sigma_alpha(m, c, o, px, py)
                    a = torch.where(composited, alpha, torch.zeros_like(alpha))
                    t_after = torch.cumprod(1.0 - a, dim=1)
                    t_before = torch.cat([torch.ones(P, 1, dtype=dtype), t_after[:, :-1]], dim=1)
                    color = (a * t_before) @ flat_colors[ids]
                    t_final = t_after[:, -1]
                if backgrounds is not None:
                    color = color + t_final[:, None] * backgrounds[cam][None, :]
                h, w = ys.numel(), xs.numel()
                tiles_c.append(color.reshape(h, w, D))
                tiles_a.append((1.0 - t_final).reshape(h, w, 1))
            rows_c.append(torch.cat(tiles_c, dim=1))
            rows_a.append(torch.cat(tiles_a, dim=1))
        images.append(torch.cat(rows_c, dim=0))
        alphas.append(torch.cat(rows_a, dim=0))
    out = torch.stack(images), torch.stack(alphas)
    return (*out, stopped_pixels) if return_stopped else out
