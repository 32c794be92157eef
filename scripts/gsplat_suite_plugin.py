"""pytest plugin: gsplat 1.5.3's own tests with prebuild's ops in place of gsplat's CUDA ones.

Loaded by scripts/gsplat_suite.py (``pytest -p gsplat_suite_plugin``). At import it

* points gsplat at prebuild's kernels (prebuild.gsplat_compat.use_prebuild_kernels): where
  gsplat's tests import ``gsplat.cuda._wrapper.<op>`` or ``gsplat.rendering.rasterization``
  they get prebuild's, and every other gsplat CUDA call fails loudly (no JIT build is ever
  attempted);
* gives gsplat's plain-PyTorch oracle the CPU pieces it borrows from elsewhere:
  ``_rasterize_to_pixels`` calls gsplat's CUDA ``rasterize_to_indices_in_range`` and
  nerfacc's CUDA-only packed volume rendering, so both are replaced by the plain-PyTorch
  equivalents below (same selection rules, same sums); ``_rasterization`` (the oracle of
  ``rasterization()``) gets gsplat's plain-PyTorch ``_spherical_harmonics``, and keeps the tile
  intersection it takes from the CUDA wrapper (prebuild's here, as gsplat's CUDA one on a GPU:
  gsplat's ``_isect_tiles`` is a Python loop over every Gaussian, and ``test_isect`` checks
  prebuild's against it exactly);
* with ``PREBUILD_GSPLAT_BACKEND=simt``, runs prebuild's ops on the simt backend (the CUDA
  kernels' block bodies on the CPU) instead of the CPU kernels; with ``cuda``, the tests run on
  the GPU as written, with prebuild's CUDA kernels;
* records each test's outcome and writes them as JSON to ``PREBUILD_GSPLAT_REPORT``.

Nothing in gsplat's test files changes but their device (CPU) and their CUDA skip markers,
which scripts/gsplat_suite.py rewrites.
"""

from __future__ import annotations

import json
import math
import os
import sys
import types

import torch

from prebuild.gsplat_compat import use_prebuild_kernels

ALPHA_THRESHOLD = 1.0 / 255.0
TRANSMITTANCE_STOP = 1e-4


# ------------------------------------------------------------ the oracle's CPU pieces


def rasterize_to_indices_in_range(
    range_start,
    range_end,
    transmittances,
    means2d,
    conics,
    opacities,
    image_width,
    image_height,
    tile_size,
    isect_offsets,
    flatten_ids,
):
    """gsplat's ``rasterize_to_indices_in_range`` in plain PyTorch: for every pixel, the
    Gaussians of its tile's list in batches [range_start, range_end) (a batch is tile_size^2
    list entries) that it composites, starting from ``transmittances``: alpha = min(0.999,
    opacity exp(-sigma)), skipped when sigma < 0 or alpha < 1/255, and the pixel stops before
    the Gaussian that would take its transmittance to 1e-4 or below. Returns (gaussian_ids,
    pixel_ids, image_ids), grouped by pixel in list order, as gsplat's kernel writes them."""
    image_dims = means2d.shape[:-2]
    N = means2d.shape[-2]
    I = math.prod(image_dims)
    H, W = image_height, image_width
    tile_height, tile_width = isect_offsets.shape[-2:]
    device = means2d.device
    with torch.no_grad():
        means2d = means2d.reshape(I * N, 2)
        conics = conics.reshape(I * N, 3)
        opacities = opacities.reshape(I * N)
        starts = isect_offsets.reshape(-1).long()
        ends = torch.cat([starts[1:], torch.tensor([len(flatten_ids)], device=device)])
        ys, xs = torch.meshgrid(
            torch.arange(H, device=device), torch.arange(W, device=device), indexing="ij"
        )
        tile = (ys // tile_size) * tile_width + xs // tile_size
        image = torch.arange(I, device=device)[:, None, None]
        tile_ids = (image * tile_height * tile_width + tile).reshape(-1)  # per pixel, all images
        block = tile_size * tile_size
        lo = starts[tile_ids] + range_start * block
        hi = torch.minimum(ends[tile_ids], starts[tile_ids] + range_end * block)
        pixels = torch.arange(I * H * W, device=device)
        px = (pixels % W).float() + 0.5
        py = ((pixels // W) % H).float() + 0.5
        trans = transmittances.reshape(-1).float().clone()
        active = pixels[lo < hi]
        gaussians, hits, steps = [], [], []
        step = 0
        while len(active):
            idx = lo[active] + step
            live = idx < hi[active]
            active, idx = active[live], idx[live]
            if not len(active):
                break
            g = flatten_ids[idx].long()
            dx = means2d[g, 0] - px[active]
            dy = means2d[g, 1] - py[active]
            c = conics[g]
            sigma = 0.5 * (c[:, 0] * dx * dx + c[:, 2] * dy * dy) + c[:, 1] * dx * dy
            alpha = torch.clamp_max(opacities[g] * torch.exp(-sigma), 0.999)
            used = ~((sigma < 0) | (alpha < ALPHA_THRESHOLD))
            next_trans = trans[active] * (1.0 - alpha)
            finished = used & (next_trans <= TRANSMITTANCE_STOP)
            take = used & ~finished
            gaussians.append(g[take] % N)
            hits.append(active[take])
            steps.append(torch.full((int(take.sum()),), step, device=device))
            trans[active[take]] = next_trans[take]
            active = active[~finished]
            step += 1
        if not gaussians:
            empty = torch.empty(0, dtype=torch.int64, device=device)
            return empty, empty, empty
        gaussian_ids, pixel_ids, step_ids = torch.cat(gaussians), torch.cat(hits), torch.cat(steps)
        order = torch.argsort(pixel_ids * (int(step_ids.max()) + 1) + step_ids)
        gaussian_ids, pixel_ids = gaussian_ids[order], pixel_ids[order]
    return gaussian_ids, pixel_ids % (H * W), pixel_ids // (H * W)


def _render_weight_from_alpha(alphas, ray_indices=None, n_rays=None, **_):
    """nerfacc's ``render_weight_from_alpha`` for samples grouped by ray, in order: weight =
    alpha * exclusive product of (1 - alpha) along the ray. Differentiable."""
    log_keep = torch.log1p(-alphas.double())
    inclusive = torch.cumsum(log_keep, 0)
    exclusive = inclusive - log_keep
    first = torch.ones_like(ray_indices, dtype=torch.bool)
    first[1:] = ray_indices[1:] != ray_indices[:-1]
    group = torch.cumsum(first.long(), 0) - 1
    trans = torch.exp(exclusive - exclusive[first][group])
    return (trans * alphas.double()).to(alphas.dtype), trans.to(alphas.dtype)


def _accumulate_along_rays(weights, values=None, ray_indices=None, n_rays=None, **_):
    """nerfacc's ``accumulate_along_rays``: the weighted sum of each ray's samples."""
    src = weights[:, None] if values is None else weights[:, None] * values
    out = torch.zeros((n_rays, src.shape[-1]), dtype=src.dtype, device=src.device)
    return out.index_add(0, ray_indices, src)


def install_oracle_pieces() -> None:
    nerfacc = types.ModuleType("nerfacc")
    nerfacc.__doc__ = "CPU stand-in for the two nerfacc functions gsplat's oracle uses."
    nerfacc.render_weight_from_alpha = _render_weight_from_alpha
    nerfacc.accumulate_along_rays = _accumulate_along_rays
    sys.modules["nerfacc"] = nerfacc


# ------------------------------------------------------------------ the substitution


def substitute() -> None:
    import gsplat.cuda._torch_impl as torch_impl
    import gsplat.cuda._wrapper as wrapper
    import gsplat.rendering as rendering

    use_prebuild_kernels()
    wrapper.rasterize_to_indices_in_range = rasterize_to_indices_in_range

    def oracle_sh(degrees_to_use, dirs, coeffs, masks=None):
        # gsplat's CUDA SH gives masked-out Gaussians colour 0; its plain-PyTorch one has no masks.
        colors = torch_impl._spherical_harmonics(degrees_to_use, dirs, coeffs)
        return colors if masks is None else colors * masks[..., None]

    # The oracle `_rasterization` looks these up in gsplat.rendering's namespace: gsplat's
    # plain-PyTorch SH, and the tile intersection of the CUDA wrapper (prebuild's now).
    rendering.spherical_harmonics = oracle_sh


install_oracle_pieces()
substitute()
_BACKEND = os.environ.get("PREBUILD_GSPLAT_BACKEND", "cpu")
if _BACKEND == "simt":
    from prebuild.testing import use_simt

    use_simt().__enter__()  # for the whole session
elif _BACKEND not in ("cpu", "cuda"):
    raise SystemExit(f"PREBUILD_GSPLAT_BACKEND must be 'cpu', 'simt' or 'cuda', got {_BACKEND!r}")

_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report):
    """A test's outcome: its call's, unless a phase failed or skipped first (that one stays)."""
    if (report.outcome == "passed" and report.when != "call") or _OUTCOMES.get(
        report.nodeid, "passed"
    ) != "passed":
        return
    outcome = report.outcome
    if outcome == "failed":
        outcome += ": " + report.longreprtext.strip().splitlines()[-1][:300]
    _OUTCOMES[report.nodeid] = outcome


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("PREBUILD_GSPLAT_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"backend": _BACKEND, "outcomes": _OUTCOMES}, f, indent=1)
