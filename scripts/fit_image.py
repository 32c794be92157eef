#!/usr/bin/env python3
"""Fit a small image with 3D Gaussians on the CPU, with prebuild's ops, as a 3DGS trainer does.

The end-to-end check that the rasterizer, the spherical harmonics and the SSIM loss train
together: every step renders the Gaussians with ``prebuild.rasterization`` (colours from
spherical harmonics, the degree raised every ``--sh-every`` steps up to ``--sh-degree``) and
backpropagates ``0.8 * L1 + 0.2 * (1 - prebuild.fused_ssim)`` into means, scales,
rotations, opacities and SH coefficients. With ``--densify default``, gsplat's own
``DefaultStrategy`` clones, splits and prunes Gaussians from the 2D-mean gradients
``prebuild.rasterization`` returns; with ``--densify mcmc``, gsplat's ``MCMCStrategy``
relocates low-opacity Gaussians and adds new ones (prebuild's ``compute_relocation``). gsplat
is then needed (``pip install --no-deps gsplat``; prebuild.gsplat_compat points it at
prebuild's kernels). The target is a synthetic
image made here (disks on a gradient), so nothing is downloaded.

    .venv/bin/python scripts/fit_image.py --steps 300 --save fit.ppm
    .venv/bin/python scripts/fit_image.py --steps 300 --densify default --absgrad
    .venv/bin/python scripts/fit_image.py --steps 300 --densify mcmc
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

import prebuild


def target_image(size: int) -> torch.Tensor:
    """[size, size, 3] in [0, 1]: a diagonal gradient with three coloured disks."""
    ys, xs = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    image = torch.stack([0.2 + 0.3 * xs, 0.2 + 0.3 * ys, 0.4 * torch.ones_like(xs)], dim=-1)
    for (cx, cy, r), color in (
        ((0.3, 0.35, 0.18), (0.9, 0.2, 0.1)),
        ((0.7, 0.6, 0.22), (0.1, 0.7, 0.3)),
        ((0.45, 0.8, 0.12), (0.95, 0.9, 0.2)),
    ):
        inside = ((xs - cx) ** 2 + (ys - cy) ** 2) < r * r
        image[inside] = torch.tensor(color)
    return image


def camera(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One pinhole camera at the origin looking along +z; z = 2 spans x, y in [-1, 1]."""
    focal = size  # at depth 2, one world unit is size/2 pixels
    K = torch.tensor([[focal, 0.0, size / 2], [0.0, focal, size / 2], [0.0, 0.0, 1.0]])
    return torch.eye(4)[None], K[None]


def init_gaussians(n: int, seed: int, sh_degree: int) -> dict[str, torch.Tensor]:
    """Parameters under gsplat's trainer names: log-scales, opacity logits, SH coefficients
    split into the DC term (sh0) and the rest (shN)."""
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * 2 - 1
    z = 2.0 + 0.05 * torch.rand(n, 1, generator=gen)
    return {
        "means": torch.cat([xy, z], dim=1),
        "scales": torch.full((n, 3), math.log(0.04)),
        "quats": torch.randn(n, 4, generator=gen),
        "opacities": torch.zeros(n),
        "sh0": torch.zeros(n, 1, 3),
        "shN": torch.zeros(n, (sh_degree + 1) ** 2 - 1, 3),
    }


LEARNING_RATES = {
    "means": 2e-3,
    "scales": 1e-2,
    "quats": 1e-2,
    "opacities": 5e-2,
    "sh0": 5e-2,
    "shN": 2.5e-3,
}


def fit(
    size: int = 64,
    n: int = 300,
    steps: int = 300,
    seed: int = 0,
    log_every: int = 25,
    sh_degree: int = 3,
    sh_every: int = 50,
    densify: str | None = None,
    absgrad: bool = False,
):
    """Returns (loss history, target, final image, seconds, Gaussian count history)."""
    torch.manual_seed(seed)
    target = target_image(size)
    viewmats, Ks = camera(size)
    params = torch.nn.ParameterDict(
        {k: torch.nn.Parameter(v) for k, v in init_gaussians(n, seed, sh_degree).items()}
    )
    # One optimizer per parameter: the layout gsplat's strategies edit when they add or
    # remove Gaussians.
    optimizers = {k: torch.optim.Adam([params[k]], lr=lr) for k, lr in LEARNING_RATES.items()}
    strategy = state = None
    if densify is not None:
        from prebuild.gsplat_compat import use_prebuild_kernels

        use_prebuild_kernels()
        from gsplat.strategy import DefaultStrategy, MCMCStrategy

        every = max(steps // 10, 1)
        if densify == "default":
            strategy = DefaultStrategy(
                refine_start_iter=every,
                refine_stop_iter=steps * 3 // 4,
                refine_every=every,
                reset_every=10 * steps,
                absgrad=absgrad,
                grow_grad2d=0.002 if not absgrad else 0.006,  # gsplat: 0.0002, for larger images
            )
            state = strategy.initialize_state(scene_scale=1.0)
        elif densify == "mcmc":
            strategy = MCMCStrategy(
                cap_max=4 * n,
                refine_start_iter=every,
                refine_stop_iter=steps * 3 // 4,
                refine_every=every,
            )
            state = strategy.initialize_state()
        else:
            raise ValueError(f"densify must be None, 'default' or 'mcmc', got {densify!r}")
        strategy.check_sanity(params, optimizers)

    def render(step: int):
        colors = torch.cat([params["sh0"], params["shN"]], dim=1)
        image, _, info = prebuild.rasterization(
            params["means"],
            params["quats"],
            params["scales"].exp(),
            torch.sigmoid(params["opacities"]),
            colors,
            viewmats,
            Ks,
            size,
            size,
            sh_degree=min(step // sh_every, sh_degree),
            absgrad=absgrad,
        )
        return image[0], info

    def loss_of(image: torch.Tensor) -> torch.Tensor:
        l1 = (image - target).abs().mean()
        ssim = prebuild.fused_ssim(image.permute(2, 0, 1)[None], target.permute(2, 0, 1)[None])
        return 0.8 * l1 + 0.2 * (1 - ssim)

    history, counts = [], []
    start = time.monotonic()
    for step in range(steps + 1):
        image, info = render(step)
        loss = loss_of(image)
        history.append(loss.item())
        counts.append(len(params["means"]))
        if log_every and step % log_every == 0:
            print(
                f"step {step:4d}  loss {loss.item():.4f}  gaussians {counts[-1]:5d}  "
                f"{time.monotonic() - start:6.1f} s",
                file=sys.stderr,
            )
        if step == steps:
            break
        if densify == "default":
            strategy.step_pre_backward(params, optimizers, state, step, info)
        loss.backward()
        for optimizer in optimizers.values():
            optimizer.step()
        if densify == "default":
            strategy.step_post_backward(params, optimizers, state, step, info, packed=True)
        elif densify == "mcmc":
            strategy.step_post_backward(
                params, optimizers, state, step, info, lr=LEARNING_RATES["means"]
            )
        for optimizer in optimizers.values():
            optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        final_image, _ = render(steps)
    return history, target, final_image, time.monotonic() - start, counts


def write_ppm(path: Path, images: list[torch.Tensor]) -> None:
    """Images side by side as a binary PPM (no imaging library needed)."""
    row = torch.cat([im.clamp(0, 1) for im in images], dim=1)
    data = (row * 255).round().to(torch.uint8).contiguous()
    path.write_bytes(
        f"P6 {data.shape[1]} {data.shape[0]} 255\n".encode() + bytes(data.flatten().tolist())
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--gaussians", type=int, default=300, help="Gaussians at the start")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sh-degree", type=int, default=3, choices=range(5), help="final SH degree"
    )
    parser.add_argument("--sh-every", type=int, default=50, help="steps per SH degree increase")
    parser.add_argument(
        "--densify",
        choices=("default", "mcmc"),
        help="gsplat's DefaultStrategy or MCMCStrategy (needs gsplat)",
    )
    parser.add_argument(
        "--absgrad", action="store_true", help="DefaultStrategy: absolute 2D-mean gradients"
    )
    parser.add_argument("--save", type=Path, help="write target | fit side by side as a PPM")
    args = parser.parse_args()
    history, target, final_image, seconds, counts = fit(
        args.size,
        args.gaussians,
        args.steps,
        args.seed,
        sh_degree=args.sh_degree,
        sh_every=args.sh_every,
        densify=args.densify,
        absgrad=args.absgrad,
    )
    if args.save:
        write_ppm(args.save, [target, final_image])
    print(
        json.dumps(
            {
                "initial_loss": history[0],
                "final_loss": history[-1],
                "steps": args.steps,
                "gaussians": [counts[0], counts[-1]],
                "seconds": round(seconds, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
