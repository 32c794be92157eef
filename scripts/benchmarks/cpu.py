"""Section 4, CPU kernels: fused_ssim forward + backward against pytorch-msssim and a plain
conv2d SSIM, rasterization forward + backward against a plain-PyTorch chain; the work models and
the shares of this machine's measured peaks. Its rows, scenes and peers are also section 6's
(``cuda``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import ROOT
from .stats import time_fn


def machine_peaks(quick: bool, repeats: int) -> dict:
    """Peak float32 FLOP/s (a large matmul: 2 n^3 FLOP), memory bandwidth (a large copy:
    read + write = 2 x bytes) and exps per second (torch.exp), each the best of the repeats
    (a peak, not a typical value)."""
    import torch

    n = 256 if quick else 2048
    a, b = torch.rand(n, n), torch.rand(n, n)
    mm = time_fn(lambda: torch.mm(a, b), repeats)
    size = (8 if quick else 512) << 20
    src = torch.empty(size // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    cp = time_fn(lambda: dst.copy_(src), repeats)
    # exp at its best here: torch's vectorised exp over a cache-friendly 1 MiB, many times.
    e_in, e_out = torch.randn(1 << 18), torch.empty(1 << 18)
    ex = time_fn(lambda: [torch.exp(e_in, out=e_out) for _ in range(16)], repeats)
    return {
        "flops": 2 * n**3 / mm["min"],
        "bandwidth": 2 * size / cp["min"],
        "matmul_n": n,
        "copy_bytes": size,
        "matmul": mm,
        "copy": cp,
        "exps": 16 * e_in.numel() / ex["min"],
        "exp": ex,
    }


# Work models. SSIM, per pixel and channel, forward + backward, as the issue that set the
# goals counted it: the forward's 5 moments x 11 taps x 2 FLOP x 2 separable passes (220) and
# ~40 for the SSIM formula and its derivatives, the backward's 3 maps x 11 x 2 x 2 (132) and
# ~20: 412 (img1's gradient: the benchmark's img2 needs none). Bytes, what the training call
# must read and write (prebuild.ops.ssim: the gradients come out of the forward's own pass):
# x, y (8), the map (4) and the mean reading it (4), img1's gradient (4), the backward
# scaling it by dL/dloss (read + write: 8): 28.
SSIM_FLOP_PER_PIXEL = 412
SSIM_BYTES_PER_PIXEL = 28
# What the two-pass kernel (horizontal pass through memory) moved: the yardstick the CPU goals
# were set with. Reported as an effective bandwidth: the same work over the measured time.
SSIM_TWO_PASS_BYTES_PER_PIXEL = 108
# Rasterization, per (pixel, Gaussian) pair. Every pair a pixel evaluates (each pass): its
# exponent, ~10 FLOP. Every pair that may reach the pixel (sigma at most skip_sigma): one exp
# per pass, at the machine's measured exp rate. Every pair composited: alpha, transmittance
# and 3 colour channels ~12 FLOP forward, the backward's ~45 (alpha's VJP, the conic's and
# the mean's, 3 colour gradients).
RASTER_FLOP_PER_EVALUATED_PAIR = 10
RASTER_FLOP_PER_COMPOSITED_PAIR = 57


def plain_conv2d_ssim(x, y):
    """The plain-PyTorch SSIM users write: five depthwise 11x11 conv2d blurs (float32)."""
    from reference import C1, C2, _blur

    mu_x, mu_y = _blur(x), _blur(y)
    s_xx = _blur(x * x) - mu_x * mu_x
    s_yy = _blur(y * y) - mu_y * mu_y
    s_xy = _blur(x * y) - mu_x * mu_y
    num = (2 * mu_x * mu_y + C1) * (2 * s_xy + C2)
    return (num / ((mu_x * mu_x + mu_y * mu_y + C1) * (s_xx + s_yy + C2))).mean()


OURS_SSIM = "prebuild.fused_ssim"
OURS_RASTER = "prebuild.rasterization"


def ssim_rows(
    cfg, peaks: dict, impls: dict, repeats: int, device="cpu", sync=None, profile=None, warmup=1
) -> list[dict]:
    """fused_ssim forward + backward at the bench's sizes against each of ``impls`` (name ->
    ``fn(x, y)``, ours first): times, the peers' times over ours, shares of the peaks; with
    ``profile`` (``profile(step) -> dict``: where a step's time goes), each one's profile."""
    import torch

    sizes = [(32, 32)] if cfg.quick else [(256, 256), (512, 512), (1080, 1920)]
    batches = [1] if cfg.quick else [1, 4]
    rows = []
    for h, w in sizes:
        for b in batches:
            gen = torch.Generator().manual_seed(0)
            x = torch.rand(b, 3, h, w, generator=gen).to(device).requires_grad_()
            y = torch.rand(b, 3, h, w, generator=gen).to(device)
            times, profiles = {}, {}
            for name, fn in impls.items():

                def step(fn=fn, x=x, y=y):
                    x.grad = None
                    fn(x, y).backward()

                times[name] = time_fn(step, repeats, warmup, sync=sync)
                if profile is not None:
                    profiles[name] = profile(step)
            pixels = b * 3 * h * w
            t = times[OURS_SSIM]["median"]
            flop_t = pixels * SSIM_FLOP_PER_PIXEL / peaks["flops"]
            byte_t = pixels * SSIM_BYTES_PER_PIXEL / peaks["bandwidth"]
            rows.append(
                {
                    "size": f"{h}x{w}",
                    "batch": b,
                    "times": times,
                    "profiles": profiles,
                    "ratios": {
                        name: v["median"] / t for name, v in times.items() if name != OURS_SSIM
                    },
                    "bytes_per_pixel": SSIM_BYTES_PER_PIXEL,
                    "bound": "memory" if byte_t > flop_t else "compute",
                    "flop_share": flop_t / t,
                    "bandwidth_share": byte_t / t,
                    "two_pass_share": pixels
                    * SSIM_TWO_PASS_BYTES_PER_PIXEL
                    / peaks["bandwidth"]
                    / t,
                    "peak_share": max(flop_t, byte_t) / t,
                }
            )
    return rows


def raster_scene(n: int, size: int, seed: int = 0, device="cpu"):
    """n Gaussians in front of one camera, spread over the image, a few pixels to a few tiles wide
    (drawn on the CPU, so every device gets the same scene)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    means = torch.cat(
        [(torch.rand(n, 2, generator=gen) * 2 - 1) * 1.2, 3 + torch.rand(n, 1, generator=gen)], 1
    )
    quats = torch.randn(n, 4, generator=gen)
    scales = torch.exp(torch.randn(n, 3, generator=gen) * 0.3) * (0.6 / n**0.5 + 0.005)
    opacities = 0.2 + 0.7 * torch.rand(n, generator=gen)
    colors = torch.rand(n, 3, generator=gen)
    K = torch.tensor([[size * 1.2, 0.0, size / 2], [0.0, size * 1.2, size / 2], [0.0, 0.0, 1.0]])
    scene = dict(
        means=means,
        quats=quats,
        scales=scales,
        opacities=opacities,
        colors=colors,
        viewmats=torch.eye(4)[None],
        Ks=K[None],
    )
    return {k: v.to(device) for k, v in scene.items()}


def plain_rasterization(s, size, tile=16):
    """The plain-PyTorch chain: gsplat 1.5.3's _torch_impl projection and tile intersection,
    then the tests' dense per-tile compositing reference; differentiable by autograd."""
    import math

    import torch
    from gsplat_oracle import torch_impl
    from raster_reference import rasterize_reference

    covars, _ = torch_impl._quat_scale_to_covar_preci(s["quats"], s["scales"], True, False, False)
    radii, means2d, depths, conics, _ = torch_impl._fully_fused_projection(
        s["means"], covars, s["viewmats"], s["Ks"], size, size, 0.3, 0.01, 1e10, False
    )
    tiles = math.ceil(size / tile)
    with torch.no_grad():
        _, isect_ids, flatten_ids = torch_impl._isect_tiles(
            means2d, radii, depths, tile, tiles, tiles
        )
        offsets = torch_impl._isect_offset_encode(isect_ids, 1, tiles, tiles)
    colors, _ = rasterize_reference(
        means2d,
        conics,
        s["colors"][None],
        s["opacities"][None],
        size,
        size,
        tile,
        offsets,
        flatten_ids.int(),
    )
    return colors


def raster_work(s: dict, meta: dict, size: int) -> dict:
    """The (pixel, Gaussian) pairs the CPU compositing passes work through for this scene,
    counted with the kernels' rules in plain PyTorch: pairs evaluated (the forward up to each
    pixel's early stop, the backward from its last composited entry down), those of them
    that may reach the pixel (sigma at most skip_sigma: an exp each), and pairs composited."""
    import torch

    means, conics, opac = (
        meta["means2d"].detach(),
        meta["conics"].detach(),
        meta["opacities"].detach(),
    )
    ids, tile = meta["flatten_ids"].long(), meta["tile_size"]
    offsets = meta["isect_offsets"].flatten().tolist() + [ids.numel()]
    tiles_x = meta["tile_width"]
    counts = {"evaluated": 0, "reaching": 0, "composited": 0}
    on = means.device
    ys, xs = torch.meshgrid(
        torch.arange(tile, device=on), torch.arange(tile, device=on), indexing="ij"
    )
    for t, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        if b <= a:
            continue
        px = (xs + (t % tiles_x) * tile).flatten().float() + 0.5
        py = (ys + (t // tiles_x) * tile).flatten().float() + 0.5
        inside = (px < size) & (py < size)
        g = ids[a:b]
        dx, dy = means[g, 0:1] - px, means[g, 1:2] - py  # [entries, pixels]
        ca, cb, cc = conics[g, 0:1], conics[g, 1:2], conics[g, 2:3]
        sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
        o = opac[g][:, None]
        skip = torch.where(o > 0, torch.log(255 * o) + 0.01, torch.full_like(o, float("inf")))
        raw = o * torch.exp(-sigma)
        passing = (sigma >= 0) & (raw >= 1 / 255)
        one_minus = torch.where(passing, 1 - raw.clamp(max=0.999), torch.ones_like(raw)).double()
        T_after = torch.cumprod(one_minus, 0)
        stop = passing & (T_after <= 1e-4)  # the first such entry ends the pixel's loop
        any_stop = stop.any(0)
        first_stop = torch.where(
            any_stop, stop.double().argmax(0), torch.full_like(any_stop, b - a, dtype=torch.long)
        )
        order = torch.arange(b - a, device=on)[:, None]
        evaluated_fwd = order <= first_stop  # the stopping entry is evaluated, not composited
        composited = passing & (order < first_stop)
        last = torch.where(composited, order, torch.full_like(order, -1)).amax(0)
        evaluated_bwd = order <= last
        reaching = ~(sigma > skip)
        for name, mask in (
            ("evaluated", evaluated_fwd.int() + evaluated_bwd.int()),
            ("reaching", (reaching & evaluated_fwd).int() + (reaching & evaluated_bwd).int()),
            ("composited", composited.int()),
        ):
            counts[name] += int((mask * inside).sum())
    return counts


def raster_bound(work: dict, peaks: dict) -> dict:
    """The time the compositing work would take at this machine's peaks (FLOPs at the matmul
    rate, exps at torch's vectorised rate), and which part of it is what."""
    flop = (
        work["evaluated"] * RASTER_FLOP_PER_EVALUATED_PAIR
        + work["composited"] * RASTER_FLOP_PER_COMPOSITED_PAIR
    )
    flop_t, exp_t = flop / peaks["flops"], work["reaching"] / peaks["exps"]
    return {"seconds": flop_t + exp_t, "flop_seconds": flop_t, "exp_seconds": exp_t}


def raster_rows(
    cfg,
    peaks: dict,
    impls: dict,
    counts: list[int],
    size: int,
    repeats: dict,
    device="cpu",
    sync=None,
    profile=None,
) -> list[dict]:
    """Rasterization forward + backward of ``counts`` Gaussians against each of ``impls`` (name
    -> ``fn(scene, size)`` returning the image, ours first; ``repeats``: name -> (runs, warm-up
    runs)); the work ours did, counted from its meta, and its share of the bound."""
    import prebuild

    rows = []
    for n in counts:
        s = raster_scene(n, size, device=device)
        leaves = {
            k: s[k].requires_grad_() for k in ("means", "quats", "scales", "opacities", "colors")
        }
        times, profiles = {}, {}
        for name, fn in impls.items():

            def step(fn=fn, s=s, leaves=leaves):
                for v in leaves.values():
                    v.grad = None
                fn(s, size).sum().backward()

            times[name] = time_fn(step, *repeats[name], sync=sync)
            if profile is not None:
                profiles[name] = profile(step)
        _, _, meta = prebuild.rasterization(**s, width=size, height=size)
        work = raster_work(s, meta, size)
        bound = raster_bound(work, peaks)
        t = times[OURS_RASTER]["median"]
        rows.append(
            {
                "gaussians": n,
                "image": f"{size}x{size}",
                "intersections": meta["flatten_ids"].numel(),
                "times": times,
                "profiles": profiles,
                "ratios": {k: v["median"] / t for k, v in times.items() if k != OURS_RASTER},
                "work": work,
                "bound": bound,
                "exp_part": bound["exp_seconds"] / bound["seconds"],
                "peak_share": bound["seconds"] / t,
            }
        )
    return rows


def ours_rasterization(s: dict, size: int):
    import prebuild

    return prebuild.rasterization(**s, width=size, height=size)[0]


def section_cpu(cfg: argparse.Namespace, work: Path) -> dict:
    import torch
    from pytorch_msssim import ssim as msssim

    import prebuild

    sys.path.insert(0, str(ROOT / "tests" / "ops"))  # the tests' plain-PyTorch references
    peaks = machine_peaks(cfg.quick, cfg.repeats)
    ssim = ssim_rows(
        cfg,
        peaks,
        {
            OURS_SSIM: prebuild.fused_ssim,
            "pytorch_msssim.ssim": lambda x, y: msssim(x, y, data_range=1.0, size_average=True),
            "plain conv2d": plain_conv2d_ssim,
        },
        cfg.repeats,
    )
    for r in ssim:  # the keys the report (and earlier runs' JSON) use
        r["ratio_msssim"], r["ratio_conv2d"] = (
            r["ratios"]["pytorch_msssim.ssim"],
            r["ratios"]["plain conv2d"],
        )
    raster = raster_rows(
        cfg,
        peaks,
        {OURS_RASTER: ours_rasterization, "plain PyTorch": plain_rasterization},
        [100] if cfg.quick else [1_000, 10_000, 100_000],
        32 if cfg.quick else 256,
        {OURS_RASTER: (cfg.repeats, 1), "plain PyTorch": (cfg.raster_plain_repeats, 0)},
    )
    for r in raster:
        r["ratio"] = r["ratios"]["plain PyTorch"]
    return {"threads": torch.get_num_threads(), "peaks": peaks, "ssim": ssim, "raster": raster}
