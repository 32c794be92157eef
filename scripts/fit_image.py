#!/usr/bin/env python3
"""Fit a small image with a few hundred 3D Gaussians, on the CPU, with prebuild's ops.

The end-to-end check that the rasterizer and the SSIM loss train together: every step
renders the Gaussians with ``prebuild.rasterization`` and backpropagates
``0.8 * L1 + 0.2 * (1 - prebuild.fused_ssim)`` through it into means, scales, rotations,
opacities and colors. The target is a synthetic image made here (disks on a gradient), so
nothing is downloaded.

    .venv/bin/python scripts/fit_image.py --steps 300 --save fit.ppm
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


def init_gaussians(n: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * 2 - 1
    z = 2.0 + 0.05 * torch.rand(n, 1, generator=gen)
    return {
        "means": torch.cat([xy, z], dim=1),
        "log_scales": torch.full((n, 3), math.log(0.04)),
        "quats": torch.randn(n, 4, generator=gen),
        "opacity_logits": torch.zeros(n),
        "color_logits": torch.zeros(n, 3),
    }


def fit(size: int = 64, n: int = 300, steps: int = 300, seed: int = 0, log_every: int = 25):
    torch.manual_seed(seed)
    target = target_image(size)
    viewmats, Ks = camera(size)
    params = {k: v.requires_grad_() for k, v in init_gaussians(n, seed).items()}
    optimizer = torch.optim.Adam(
        [
            {"params": [params["means"]], "lr": 2e-3},
            {"params": [params["log_scales"]], "lr": 1e-2},
            {"params": [params["quats"]], "lr": 1e-2},
            {"params": [params["opacity_logits"]], "lr": 5e-2},
            {"params": [params["color_logits"]], "lr": 5e-2},
        ]
    )

    def render() -> torch.Tensor:
        colors, _, _ = prebuild.rasterization(
            params["means"], params["quats"], params["log_scales"].exp(),
            torch.sigmoid(params["opacity_logits"]), torch.sigmoid(params["color_logits"]),
            viewmats, Ks, size, size,
        )  # fmt: skip
        return colors[0]

    def loss_of(image: torch.Tensor) -> torch.Tensor:
        l1 = (image - target).abs().mean()
        ssim = prebuild.fused_ssim(image.permute(2, 0, 1)[None], target.permute(2, 0, 1)[None])
        return 0.8 * l1 + 0.2 * (1 - ssim)

    history = []
    start = time.monotonic()
    for step in range(steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(render())
        history.append(loss.item())
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}  {time.monotonic() - start:6.1f} s", file=sys.stderr)
        if step < steps:
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        final_image = render()
    return history, target, final_image, time.monotonic() - start


def write_ppm(path: Path, images: list[torch.Tensor]) -> None:
    """Images side by side as a binary PPM (no imaging library needed)."""
    row = torch.cat([im.clamp(0, 1) for im in images], dim=1)
    data = (row * 255).round().to(torch.uint8).contiguous()
    path.write_bytes(f"P6 {data.shape[1]} {data.shape[0]} 255\n".encode() + bytes(data.flatten().tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--gaussians", type=int, default=300)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", type=Path, help="write target | fit side by side as a PPM")
    args = parser.parse_args()
    history, target, final_image, seconds = fit(args.size, args.gaussians, args.steps, args.seed)
    if args.save:
        write_ppm(args.save, [target, final_image])
    print(json.dumps({"initial_loss": history[0], "final_loss": history[-1],
                      "steps": args.steps, "seconds": round(seconds, 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
