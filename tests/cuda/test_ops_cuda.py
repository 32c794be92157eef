"""prebuild's CUDA kernels against its CPU kernels, on a GPU. For every public op, the CUDA
result on the same inputs as the CPU kernel's: values and every gradient, within the
tolerances of cuda_support.TOLERANCES (where each is explained); integer outputs (radii,
tile ids, offsets) exactly. The same calls also run:

- on every visible GPU, with the inputs made on cuda:i while cuda:0 stays the current
  device (a launch without a device guard would run on, or crash, the wrong GPU);
- on a side stream: inputs produced there and the ops called under it, compared once the
  device is synchronised (a kernel on another stream would race with both);
- under torch.compile(fullgraph=True) (fused_ssim with its backward, rasterization's forward);
- with non-contiguous (sliced or permuted) inputs, which must give the contiguous results;
- on an SSIM image of more than 2^31 elements, when the GPU has the memory, and on one
  taller than the CUDA grid allows, which must be refused with a clear error;
- with inputs spread over two GPUs, which must be refused with a clear error.

Inputs are small and deterministic (seeded generators), built here: tests/ops' projection
and rasterization scene builders import gsplat's plain-PyTorch oracle when imported, and the
GPU machines have no gsplat. The SSIM images are tests/ops/reference.py's ``textured``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from cuda_support import DEVICE_INDICES, TOLERANCES, Tolerance, assert_matches, visible_devices
from projection_scenes import cameras, gaussians
from reference import textured

import prebuild

CAMERA_MODELS = ("pinhole", "ortho", "fisheye")
W, H = 67, 45  # projection image: odd sizes, so culling at the edges and partial tiles happen
RW, RH = 37, 29  # rasterization() image: three by two 16-pixel tiles, the last ones partial
EXACT = Tolerance(rtol=0.0, atol=0.0)  # the same bytes into the same deterministic kernel


# ------------------------------------------------------------------------------ running


@dataclass
class Result:
    outputs: tuple  # what the call returned, tensors copied to the CPU (None kept)
    grads: dict  # input name -> its gradient on the CPU (None where autograd gave none)
    raw: tuple  # the outputs as returned (absgrad is an attribute of one of them)
    leaves: dict  # the inputs as the call got them


def run(call: Callable, inputs: dict, grad_names=(), device="cpu", seed=0) -> Result:
    """``call(**inputs)`` with the tensors on ``device`` (those named in ``grad_names`` as
    leaves requiring grad), then the gradients of sum_k <output_k, w_k> over the outputs that
    require grad, the weights w_k random from ``seed`` (drawn on the CPU: the same for every
    device). On CUDA, checks that the outputs are on ``device`` and cuda:0 is still current."""
    device = torch.device(device)
    leaves = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().to(device)
            if name in grad_names:
                value.requires_grad_(True)
        leaves[name] = value
    raw = call(**leaves)
    raw = raw if isinstance(raw, tuple) else (raw,)
    if device.type == "cuda":
        check_device(raw, device)
    grads = {}
    if grad_names:
        gen = torch.Generator().manual_seed(seed)
        differentiable = [o for o in raw if isinstance(o, torch.Tensor) and o.requires_grad]
        assert differentiable, "no output requires grad"
        loss = sum(
            (o * torch.randn(o.shape, generator=gen).to(device)).sum() for o in differentiable
        )
        got = torch.autograd.grad(loss, [leaves[n] for n in grad_names], allow_unused=True)
        grads = {n: None if g is None else g.detach().cpu() for n, g in zip(grad_names, got)}
        if device.type == "cuda":
            check_device((), device)
    outputs = tuple(o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in raw)
    return Result(outputs, grads, raw, leaves)


def check_device(outputs, device: torch.device) -> None:
    current = torch.cuda.current_device()
    assert current == 0, (
        f"the op left cuda:{current} current; the caller's cuda:0 must stay current"
    )
    for o in outputs:
        if isinstance(o, torch.Tensor):
            assert o.device == device, f"an output is on {o.device}, the inputs on {device}"


def assert_same(
    got: Result,
    want: Result,
    values: str | None,
    grads: str | None = None,
    names=(),
    row_dims: int = 0,
    grad_row_dims: int = 0,
    values_tol: Tolerance | None = None,
) -> None:
    """Every output and gradient of ``got`` (CUDA) against ``want`` (CPU)."""
    tol = values_tol or (TOLERANCES[values] if values else None)
    assert len(got.outputs) == len(want.outputs)
    for i, (g, w) in enumerate(zip(got.outputs, want.outputs)):
        assert_matches(g, w, tol, names[i] if i < len(names) else f"output {i}", row_dims)
    assert got.grads.keys() == want.grads.keys()
    for name, w in want.grads.items():
        assert_matches(
            got.grads[name],
            w,
            TOLERANCES[grads] if grads else None,
            f"gradient of {name}",
            grad_row_dims,
        )


@pytest.fixture(params=DEVICE_INDICES, ids=lambda i: f"cuda{i}")
def device(request) -> torch.device:
    """cuda:i, never made current: the ops must work there while cuda:0 is current."""
    return torch.device("cuda", request.param)


# ------------------------------------------------------------------------------- inputs


def ssim_images(shape, seed=0) -> dict:
    img1 = textured(shape, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    img2 = (img1 + 0.1 * torch.randn(shape, generator=gen)).clamp(0, 1)
    return {"img1": img1, "img2": img2}


def projection_inputs(path="quats", C=3, N=60, seed=3, batch=(), opacities=False) -> dict:
    """Inputs of fully_fused_projection: the Gaussians either by quats and scales or by
    covars (the other None), with batch dimensions ``batch`` (each its own Gaussians). The
    last 6 are 20 times farther out: behind some cameras, outside the others' images. With
    ``opacities``, opacities too: squares of uniform ones (many small), every fifth below
    1/255."""
    B = math.prod(batch)
    parts = [gaussians(N, seed + b) for b in range(B)]
    means, quats, scales, covars = (torch.stack(ts).reshape(*batch, N, -1) for ts in zip(*parts))
    means[..., -6:, :] *= 20.0
    viewmats, Ks = cameras(C)
    inputs = {
        "means": means,
        "quats": quats if path == "quats" else None,
        "scales": scales if path == "quats" else None,
        "covars": covars if path == "covars" else None,
        "viewmats": viewmats.expand(*batch, C, 4, 4).contiguous(),
        "Ks": Ks.expand(*batch, C, 3, 3).contiguous(),
    }
    if opacities:
        gen = torch.Generator().manual_seed(seed + 100)
        o = torch.rand(*batch, N, generator=gen) ** 2
        o[..., ::5] = 0.9 / 255
        inputs["opacities"] = o
    return inputs


def project(packed=False, calc_compensations=False, camera_model="pinhole"):
    def call(means, quats, scales, covars, viewmats, Ks, opacities=None):
        return prebuild.fully_fused_projection(
            means,
            covars,
            quats,
            scales,
            viewmats,
            Ks,
            W,
            H,
            packed=packed,
            calc_compensations=calc_compensations,
            camera_model=camera_model,
            opacities=opacities,
        )

    return call


def projection_grad_names(path: str) -> tuple:
    return ("means", *(("covars",) if path == "covars" else ("quats", "scales")), "viewmats")


def proj_inputs(I=3, N=40, seed=2) -> dict:
    """Camera-space Gaussians for proj: means in front of each camera (inside and outside its
    view), full SPD covariances, and Ks (tests/ops/projection_scenes.py's proj_scene)."""
    gen = torch.Generator().manual_seed(seed)
    z = 1.0 + 3.0 * torch.rand(I, N, 1, generator=gen)
    xy = (torch.rand(I, N, 2, generator=gen) * 2 - 1) * z * 0.9
    A = torch.randn(I, N, 3, 3, generator=gen) * 0.08
    covars = A @ A.transpose(-1, -2) + 0.004 * torch.eye(3)
    return {"means": torch.cat([xy, z], dim=-1), "covars": covars, "Ks": cameras(I)[1]}


def covariance_inputs(seed=12) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {
        "quats": torch.randn(2, 40, 4, generator=gen),
        "scales": torch.exp(torch.randn(2, 40, 3, generator=gen) * 0.4 - 2.3),
    }


def sh_inputs(masked: bool, seed=8) -> dict:
    """Directions [3, 50] of any length and 25 coefficients each (degree 4's count, so the
    lower degrees must ignore the rest); masks drop about 30 %."""
    gen = torch.Generator().manual_seed(seed)
    return {
        "dirs": torch.randn(3, 50, 3, generator=gen),
        "coeffs": 0.5 * torch.randn(3, 50, 25, 3, generator=gen),
        "masks": torch.rand(3, 50, generator=gen) < 0.7 if masked else None,
    }


def tile_inputs(packed: bool, seed=14) -> tuple[dict, int]:
    """isect_tiles' inputs from the CPU projection of 2 batches x 3 cameras: (inputs, number
    of images). Packed: the visible pairs with their image and Gaussian ids."""
    p = projection_inputs("quats", seed=seed, batch=(2,))
    out = prebuild.fully_fused_projection(
        p["means"], None, p["quats"], p["scales"], p["viewmats"], p["Ks"], W, H, packed=packed
    )
    if not packed:
        radii, means2d, depths, _, _ = out
        return {"means2d": means2d, "radii": radii, "depths": depths}, 6
    batch_ids, camera_ids, gaussian_ids, radii, means2d, depths, _, _ = out
    return {
        "means2d": means2d,
        "radii": radii,
        "depths": depths,
        "image_ids": batch_ids * 3 + camera_ids,
        "gaussian_ids": gaussian_ids,
    }, 6


def intersect(tile_size: int, n_images: int, sort=True, packed=False, offsets=True):
    tiles_x, tiles_y = -(-W // tile_size), -(-H // tile_size)

    def call(means2d, radii, depths, image_ids=None, gaussian_ids=None):
        tiles_per_gauss, isect_ids, flatten_ids = prebuild.isect_tiles(
            means2d,
            radii,
            depths,
            tile_size,
            tiles_x,
            tiles_y,
            sort=sort,
            packed=packed,
            n_images=n_images if packed else None,
            image_ids=image_ids,
            gaussian_ids=gaussian_ids,
        )
        # Offsets need sorted ids (the CPU kernel refuses unsorted ones).
        isect_offsets = (
            prebuild.isect_offset_encode(isect_ids, n_images, tiles_x, tiles_y) if offsets else None
        )
        return tiles_per_gauss, isect_ids, flatten_ids, isect_offsets

    return call


def raster_inputs(
    D=3,
    tile_size=16,
    width=37,
    height=23,
    I=2,
    N=60,
    overlap=8,
    background=False,
    shared_opacities=False,
    masks=False,
    packed=False,
    batch=None,
    seed=0,
):
    """Random 2D Gaussians in and around a width x height image (10 % culled), ``overlap`` of
    them large and nearly opaque at the centre (its pixels stop early), with the tile lists
    of prebuild's CPU isect_tiles. Returns (inputs, options of rasterize())."""
    g = torch.Generator().manual_seed(seed)
    total = N + overlap
    means = torch.rand(I, total, 2, generator=g) * torch.tensor([width + 16.0, height + 16.0]) - 8.0
    theta = torch.rand(I, total, generator=g) * math.pi
    s = 1.0 + 5.0 * torch.rand(I, total, 2, generator=g)
    opacities = 0.05 + 0.95 * torch.rand(I, total, generator=g)
    means[:, N:] = torch.tensor([width / 2, height / 2]) + 2.0 * torch.randn(
        I, overlap, 2, generator=g
    )
    s[:, N:] = 6.0 + 4.0 * torch.rand(I, overlap, 2, generator=g)
    opacities[:, N:] = 0.9 + 0.09 * torch.rand(I, overlap, generator=g)
    cos, sin = torch.cos(theta), torch.sin(theta)
    R = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    cov = R @ torch.diag_embed(s * s) @ R.transpose(-1, -2)
    inv = torch.linalg.inv(cov)
    conics = torch.stack([inv[..., 0, 0], inv[..., 0, 1], inv[..., 1, 1]], -1).contiguous()
    radii = torch.ceil(3.0 * torch.sqrt(torch.diagonal(cov, dim1=-2, dim2=-1))).int()
    radii[torch.rand(I, total, generator=g) < 0.1] = 0
    depths = 0.1 + 10.0 * torch.rand(I, total, generator=g)
    colors = torch.rand(I, total, D, generator=g)
    tiles_x, tiles_y = -(-width // tile_size), -(-height // tile_size)
    if packed:
        keep = (radii > 0).all(-1)
        image_ids, gaussian_ids = keep.nonzero(as_tuple=True)
        means, conics, colors, opacities, radii, depths = (
            t[keep].contiguous() for t in (means, conics, colors, opacities, radii, depths)
        )
        _, isect_ids, flatten_ids = prebuild.isect_tiles(
            means,
            radii,
            depths,
            tile_size,
            tiles_x,
            tiles_y,
            packed=True,
            n_images=I,
            image_ids=image_ids,
            gaussian_ids=gaussian_ids,
        )
    else:
        _, isect_ids, flatten_ids = prebuild.isect_tiles(
            means, radii, depths, tile_size, tiles_x, tiles_y
        )
        if shared_opacities:
            opacities = opacities[0].contiguous()
    offsets = prebuild.isect_offset_encode(isect_ids, I, tiles_x, tiles_y)
    inputs = {
        "means2d": means,
        "conics": conics,
        "colors": colors,
        "opacities": opacities,
        "backgrounds": torch.rand(I, D, generator=g) if background else None,
        "isect_offsets": offsets,
        "flatten_ids": flatten_ids,
        "masks": torch.rand(I, tiles_y, tiles_x, generator=g) < 0.6 if masks else None,
    }
    if masks:
        inputs["masks"].view(-1)[0] = False
        inputs["masks"].view(-1)[-1] = True
    if batch is not None:  # the I images as leading dimensions
        for name in (
            "means2d",
            "conics",
            "colors",
            "opacities",
            "backgrounds",
            "isect_offsets",
            "masks",
        ):
            t = inputs[name]
            if (
                t is not None
                and not (packed and name in ("means2d", "conics", "colors", "opacities"))
                and not (name == "opacities" and shared_opacities)
            ):
                inputs[name] = t.reshape(*batch, *t.shape[1:])
    options = {"width": width, "height": height, "tile_size": tile_size, "packed": packed}
    return inputs, options


def rasterize(width, height, tile_size, packed, absgrad=False):
    def call(means2d, conics, colors, opacities, backgrounds, isect_offsets, flatten_ids, masks):
        return prebuild.rasterize_to_pixels(
            means2d,
            conics,
            colors,
            opacities,
            width,
            height,
            tile_size,
            isect_offsets,
            flatten_ids,
            backgrounds=backgrounds,
            masks=masks,
            packed=packed,
            absgrad=absgrad,
        )

    return call


def raster_grad_names(inputs: dict) -> tuple:
    names = ("means2d", "conics", "colors", "opacities", "backgrounds")
    return tuple(n for n in names if inputs[n] is not None)


def relocation_inputs(ratio_dtype=torch.int64, seed=15) -> dict:
    """Opacities in [0.05, 0.95], ratios -2..11 clamped to [1, 8] by the op (gsplat's table
    for n_max = 8): the well-conditioned range of Equation 9's alternating sum."""
    gen = torch.Generator().manual_seed(seed)
    n_max = 8
    return {
        "opacities": 0.05 + 0.9 * torch.rand(500, generator=gen),
        "scales": torch.exp(torch.randn(500, 3, generator=gen) - 3),
        "ratios": torch.randint(-2, 12, (500,), generator=gen).to(ratio_dtype),
        "binoms": torch.tensor(
            [[math.comb(n, k) for k in range(n_max)] for n in range(n_max)], dtype=torch.float32
        ),
    }


def relocate(opacities, scales, ratios, binoms):
    return prebuild.compute_relocation(opacities, scales, ratios, binoms)


def pipeline_inputs(
    C=2, N=80, D=3, seed=0, sh_degree=None, per_camera=False, background=False, batch=()
) -> dict:
    """rasterization()'s inputs (tests/ops/test_rendering.py's scene): N Gaussians seen by C
    cameras, colours or SH coefficients, shared or per camera, with batch dimensions."""
    B = math.prod(batch)
    parts = [gaussians(N, seed + b, spread=0.8) for b in range(B)]
    means, quats, scales, _ = (torch.stack(ts) for ts in zip(*parts))
    gen = torch.Generator().manual_seed(seed + 1)
    lead = (B, C, N) if per_camera else (B, N)
    if sh_degree is None:
        colors = torch.rand(*lead, D, generator=gen)
    else:
        colors = 0.3 * torch.randn(*lead, (sh_degree + 1) ** 2, 3, generator=gen)
        D = 3
    viewmats, Ks = cameras(C, RW, RH)
    inputs = {
        "means": means,
        "quats": quats,
        "scales": scales * 2.5,
        "opacities": 0.2 + 0.75 * torch.rand(B, N, generator=gen),
        "colors": colors,
        "viewmats": viewmats.expand(B, C, 4, 4),
        "Ks": Ks.expand(B, C, 3, 3),
        "backgrounds": torch.rand(B, C, D, generator=gen) if background else None,
    }
    return {
        k: None if t is None else t.reshape(*batch, *t.shape[1:]).contiguous()
        for k, t in inputs.items()
    }


def render(
    packed=True,
    sh_degree=None,
    camera_model="pinhole",
    rasterize_mode="classic",
    render_mode="RGB",
    absgrad=False,
):
    def call(means, quats, scales, opacities, colors, viewmats, Ks, backgrounds):
        render_colors, render_alphas, meta = prebuild.rasterization(
            means,
            quats,
            scales,
            opacities,
            colors,
            viewmats,
            Ks,
            RW,
            RH,
            sh_degree=sh_degree,
            packed=packed,
            tile_size=16,
            backgrounds=backgrounds,
            render_mode=render_mode,
            absgrad=absgrad,
            rasterize_mode=rasterize_mode,
            camera_model=camera_model,
        )
        # The integer intermediates too; of the tile ids only (image, tile): their low 32 bits
        # are the depth's, from a float that may differ in its last bit.
        return (
            render_colors,
            render_alphas,
            meta["means2d"],
            meta["radii"],
            meta["gaussian_ids"],
            meta["tiles_per_gauss"],
            meta["flatten_ids"],
            meta["isect_ids"] >> 32,
        )

    return call


PIPELINE_OUTPUTS = (
    "render_colors",
    "render_alphas",
    "means2d",
    "radii",
    "gaussian_ids",
    "tiles_per_gauss",
    "flatten_ids",
    "isect_ids >> 32",
)


def pipeline_grad_names(inputs: dict) -> tuple:
    names = ("means", "quats", "scales", "opacities", "colors", "viewmats", "backgrounds")
    return tuple(n for n in names if inputs[n] is not None)


# ----------------------------------------------------------------------- fused_ssim


SSIM_SHAPES = {
    "2x3x37x53": (2, 3, 37, 53),
    "1x1x11x11": (1, 1, 11, 11),
    "3x2x64x48": (3, 2, 64, 48),
}


@pytest.mark.parametrize("shape", SSIM_SHAPES.values(), ids=SSIM_SHAPES)
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("wanted", [("img1", "img2"), ("img1",)], ids=["grad_both", "grad_img1"])
def test_fused_ssim_matches_cpu(device, shape, padding, train, wanted):
    """train=False with a backward anyway: the CUDA backward recomputes the derivatives the
    forward did not store; a gradient for img1 only skips img2's."""

    def call(img1, img2):
        return prebuild.fused_ssim(img1, img2, padding=padding, train=train)

    want = run(call, ssim_images(shape), wanted)
    got = run(call, ssim_images(shape), wanted, device)
    assert 0.0 < want.outputs[0].item() < 1.0
    assert_same(got, want, "ssim", "ssim_grad", ["mean SSIM"])
    assert all(g.abs().max() > 0 for g in want.grads.values())


def test_fused_ssim_raw_kernels_match_cpu(device):
    """Each kernel alone: the forward's map and stored derivatives dS; the backward from the
    same dS and a dL/dmap that is not a mean's (one value per pixel); forward_backward."""
    images = ssim_images((2, 3, 37, 53), seed=4)
    x, y = images["img1"], images["img2"]
    xd, yd = x.to(device), y.to(device)
    ops = torch.ops.prebuild
    cpu_map, cpu_dS = ops.fused_ssim_forward(x, y, True)
    cuda_map, cuda_dS = ops.fused_ssim_forward(xd, yd, True)
    assert_matches(cuda_map, cpu_map, TOLERANCES["ssim"], "ssim_map")
    assert_matches(cuda_dS, cpu_dS, TOLERANCES["ssim_grad"], "dS")

    grad_map = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    cpu_grads = ops.fused_ssim_backward(grad_map, x, y, cpu_dS, True)
    cuda_grads = ops.fused_ssim_backward(grad_map.to(device), xd, yd, cpu_dS.to(device), True)
    for name, got, want in zip(("grad_img1", "grad_img2"), cuda_grads, cpu_grads):
        assert_matches(got, want, TOLERANCES["ssim_grad"], name)

    # img1's gradient alone: the forward stores its three maps, the backward reads them
    cpu_dS3 = ops.fused_ssim_forward(x, y, True, False)[1]
    cuda_dS3 = ops.fused_ssim_forward(xd, yd, True, False)[1]
    assert cuda_dS3.shape == (3, *x.shape)
    assert_matches(cuda_dS3, cpu_dS3, TOLERANCES["ssim_grad"], "dS of img1")
    for g in (grad_map, torch.tensor(0.25).expand(x.shape)):  # per pixel, one broadcast value
        cpu_g1 = ops.fused_ssim_backward(g, x, y, cpu_dS3, False)[0]
        cuda_g1, cuda_g2 = ops.fused_ssim_backward(g.to(device), xd, yd, cpu_dS3.to(device), False)
        assert_matches(cuda_g1, cpu_g1, TOLERANCES["ssim_grad"], "grad_img1 from 3 maps")
        assert cuda_g2.shape == (0,)

    cpu_fb = ops.fused_ssim_forward_backward(x, y, False)
    cuda_fb = ops.fused_ssim_forward_backward(xd, yd, False)
    assert_matches(cuda_fb[0], cpu_fb[0], TOLERANCES["ssim"], "forward_backward map")
    assert_matches(cuda_fb[1], cpu_fb[1], TOLERANCES["ssim_grad"], "forward_backward grad_img1")
    assert cuda_fb[2].shape == (0,)  # grad_img2=False: not computed
    check_device((cuda_map, cuda_dS, *cuda_grads, *cuda_fb), device)


def test_fused_ssim_with_more_planes_than_the_grid_matches_cpu(device):
    """70000 planes (B x C) of 5x6 pixels: more than CUDA's 65535 blocks along grid.z, so
    blocks stride over planes."""
    wanted = ("img1", "img2")
    want = run(prebuild.fused_ssim, ssim_images((700, 100, 5, 6), seed=6), wanted)
    got = run(prebuild.fused_ssim, ssim_images((700, 100, 5, 6), seed=6), wanted, device)
    assert_same(got, want, "ssim", "ssim_grad", ["mean SSIM"])


def test_fused_ssim_on_more_than_2_31_elements():
    """33 planes of 8192 x 8192: 2^31 + 2^26 elements, the last plane starting at element
    2^31 (32-bit indexing would wrap there). Each plane's map depends on that plane alone,
    so the planes on both sides of 2^31 and the first are checked against the CPU kernel on
    that plane; the mean against the map's. Needs 3x the memory of two images and the map."""
    device = torch.device("cuda", 0)
    planes, side = 33, 8192
    shape = (1, planes, side, side)
    numel = planes * side * side
    assert numel > 2**31
    needed = 3 * 4 * numel  # img1, img2 and the map, float32
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    if free < 3 * needed:
        pytest.skip(
            f"fused_ssim on {numel} elements needs {needed / 2**30:.1f} GiB (two images and the "
            f"map); this test asks for 3x that free, and cuda:0 has {free / 2**30:.1f} GiB free "
            f"of {total / 2**30:.1f} GiB"
        )
    gen = torch.Generator(device=device).manual_seed(17)
    img1 = torch.rand(shape, device=device, generator=gen)
    img2 = img1.clone()
    for p in range(planes):  # a plane at a time: no image-sized temporary
        img2[0, p].add_(torch.randn((side, side), device=device, generator=gen), alpha=0.1).clamp_(
            0, 1
        )
    ssim_map, _ = torch.ops.prebuild.fused_ssim_forward(img1, img2, False)
    for p in (0, planes - 2, planes - 1):
        want, _ = torch.ops.prebuild.fused_ssim_forward(
            img1[:, p : p + 1].cpu(), img2[:, p : p + 1].cpu(), False
        )
        assert_matches(ssim_map[:, p : p + 1], want, TOLERANCES["ssim"], f"plane {p} of the map")
    expected = sum(ssim_map[0, p].double().sum().item() for p in range(planes)) / numel
    del ssim_map
    value = prebuild.fused_ssim(img1, img2)
    assert_matches(
        value, torch.tensor(expected, dtype=torch.float32), TOLERANCES["ssim"], "mean SSIM"
    )


def test_fused_ssim_training_step_launches_a_fixed_list_and_never_syncs():
    """A training step on the GPU: the forward storing img1's three maps, the mean, the seed
    and the mean's scale, the backward kernel reading that scale in place; no host sync
    (torch's sync debug mode raises on one). The CPU path's list: tests/ops/test_ssim.py."""
    from dispatch_count import DispatchedOps

    x = torch.rand(2, 3, 64, 80, device="cuda:0", requires_grad=True)
    y = torch.rand(2, 3, 64, 80, device="cuda:0")
    prebuild.fused_ssim(x, y).backward()  # the first call checks the device once
    x.grad = None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with DispatchedOps() as step:
            prebuild.fused_ssim(x, y).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert step.ops == [
        "prebuild::fused_ssim_forward",
        "aten::sum",
        "aten::div",
        "aten::ones_like",
        "aten::div",
        "aten::expand",
        "prebuild::fused_ssim_backward",
        "aten::detach",
    ]


def test_fused_ssim_refuses_an_image_taller_than_the_cuda_grid():
    """The tiled kernels put rows of tiles along grid.y (at most 65535 blocks; the shortest
    tile is 24 rows): a taller image is refused by name, not launched with a truncated grid."""
    x = torch.rand(1, 1, 65535 * 24 + 24, 2, device="cuda:0")
    with pytest.raises(RuntimeError, match="image height must be at most 1572840 pixels"):
        prebuild.fused_ssim(x, x)


# ----------------------------------------------------------------------- projection


@pytest.mark.parametrize("camera_model", CAMERA_MODELS)
@pytest.mark.parametrize("path", ["quats", "covars"])
@pytest.mark.parametrize("calc_compensations", [False, True], ids=["", "compensations"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_fully_fused_projection_matches_cpu(device, camera_model, path, calc_compensations, packed):
    inputs = projection_inputs(path, seed=3)
    call = project(packed, calc_compensations, camera_model)
    names = projection_grad_names(path)
    want = run(call, inputs, names)
    got = run(call, inputs, names, device)
    radii = want.outputs[3 if packed else 0]
    visible = (radii > 0).all(-1)
    assert visible.any() and (packed or (~visible).any()), (
        "the scene must have visible and culled pairs"
    )
    outputs = (("batch_ids", "camera_ids", "gaussian_ids") if packed else ()) + (
        "radii",
        "means2d",
        "depths",
        "conics",
        "compensations",
    )
    grads = "fisheye_grad" if camera_model == "fisheye" else "projection_grad"
    assert_same(got, want, "projection", grads, outputs)
    assert want.grads["viewmats"].abs().max() > 0


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_fully_fused_projection_batch_dimensions_match_cpu(device, packed):
    inputs = projection_inputs("quats", seed=7, batch=(2,))
    call = project(packed, calc_compensations=True)
    names = projection_grad_names("quats")
    assert_same(
        run(call, inputs, names, device), run(call, inputs, names), "projection", "projection_grad"
    )


@pytest.mark.parametrize("camera_model", CAMERA_MODELS)
@pytest.mark.parametrize("calc_compensations", [False, True], ids=["", "compensations"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_fully_fused_projection_with_opacities_matches_cpu(
    device, camera_model, calc_compensations, packed
):
    """gsplat's opacity-aware radii (opacities given): CUDA's radii equal the CPU kernel's,
    with batch dimensions, and are tighter than without opacities."""
    inputs = projection_inputs("quats", seed=5, batch=(2,), opacities=True)
    call = project(packed, calc_compensations, camera_model)
    names = projection_grad_names("quats")
    want = run(call, inputs, names)
    got = run(call, inputs, names, device)
    outputs = (("batch_ids", "camera_ids", "gaussian_ids") if packed else ()) + (
        "radii",
        "means2d",
        "depths",
        "conics",
        "compensations",
    )
    grads = "fisheye_grad" if camera_model == "fisheye" else "projection_grad"
    assert_same(got, want, "projection", grads, outputs)
    plain = run(call, {k: v for k, v in inputs.items() if k != "opacities"})
    radii, wide = want.outputs[3 if packed else 0], plain.outputs[3 if packed else 0]
    assert 0 < len(radii) < len(wide) if packed else (radii <= wide).all()
    assert radii.sum() < wide.sum()


@pytest.mark.parametrize("camera_model", CAMERA_MODELS)
def test_proj_matches_cpu(device, camera_model):
    def call(means, covars, Ks):
        return prebuild.proj(means, covars, Ks, W, H, camera_model)

    inputs = proj_inputs(seed=2)
    want = run(call, inputs, ("means", "covars"))
    got = run(call, inputs, ("means", "covars"), device)
    grads = "fisheye_grad" if camera_model == "fisheye" else "projection_grad"
    assert_same(got, want, "projection", grads, ["means2d", "covars2d"])


# ---------------------------------------------------------------------- covariances


@pytest.mark.parametrize(
    "compute_covar, compute_preci", [(True, True), (True, False), (False, True)]
)
@pytest.mark.parametrize("triu", [False, True], ids=["matrices", "triu"])
def test_quat_scale_to_covar_preci_matches_cpu(device, compute_covar, compute_preci, triu):
    def call(quats, scales):
        return prebuild.quat_scale_to_covar_preci(quats, scales, compute_covar, compute_preci, triu)

    inputs = covariance_inputs(seed=12)
    want = run(call, inputs, ("quats", "scales"))
    got = run(call, inputs, ("quats", "scales"), device)
    # Compared per Gaussian: its matrix (or upper triangle), its quat, its scales.
    assert_same(
        got,
        want,
        "covariance",
        "covariance_grad",
        ["covars", "precis"],
        row_dims=1 if triu else 2,
        grad_row_dims=1,
    )


# -------------------------------------------------------------- spherical harmonics


@pytest.mark.parametrize("degree", range(5))
@pytest.mark.parametrize("masked", [False, True], ids=["", "masks"])
def test_spherical_harmonics_matches_cpu(device, degree, masked):
    def call(dirs, coeffs, masks):
        return prebuild.spherical_harmonics(degree, dirs, coeffs, masks)

    inputs = sh_inputs(masked, seed=8 + degree)
    want = run(call, inputs, ("dirs", "coeffs"))
    got = run(call, inputs, ("dirs", "coeffs"), device)
    assert_same(got, want, "sh", "sh", ["colors"])
    used = (degree + 1) ** 2
    assert (got.grads["coeffs"][..., used:, :] == 0).all(), (
        "coefficients past the degree's count are used"
    )
    if degree > 0:
        assert want.grads["dirs"].abs().max() > 0


# ------------------------------------------------------------------ tile intersection


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
@pytest.mark.parametrize("tile_size", [8, 16])
@pytest.mark.parametrize("sort", [True, False], ids=["sorted", "unsorted"])
def test_isect_tiles_and_offsets_equal_cpu(device, packed, tile_size, sort):
    """Integers: the ids, their order (CUB's radix sort on the GPU, a stable LSD radix sort on
    the CPU, both stable) and the offsets must be exactly the CPU's."""
    inputs, n_images = tile_inputs(packed)
    call = intersect(tile_size, n_images, sort=sort, packed=packed, offsets=sort)
    want = run(call, inputs)
    got = run(call, inputs, device=device)
    assert want.outputs[1].numel() > 0
    assert_same(
        got, want, None, None, ["tiles_per_gauss", "isect_ids", "flatten_ids", "isect_offsets"]
    )


# ---------------------------------------------------------------- rasterize_to_pixels


RASTER_CASES = {
    "rgb": dict(D=3),
    "rgb_background": dict(D=3, background=True),
    "gray_tile8": dict(D=1, tile_size=8, background=True),
    "5_channels": dict(D=5),
    # forward chunks of 32 + 8 channels, backward 16 + 16 + 8 (csrc/gsplat/rasterize.h)
    "40_channels": dict(D=40, background=True),
    "tile32": dict(D=3, tile_size=32, width=70, height=41),  # 1024 threads per block
    # Blocks ending in a partial warp (400 threads: 12 warps and one of 16 lanes; 16 threads:
    # one warp of 16): the backward's warp sums over the lanes that exist.
    "tile20_partial_warp": dict(D=3, tile_size=20, width=45, height=33, absgrad=True),
    "tile4_partial_warp": dict(D=5, tile_size=4, background=True),
    "shared_opacities": dict(D=3, shared_opacities=True),
    "masks": dict(D=3, background=True, masks=True),
    "packed": dict(D=3, background=True, packed=True),
    "absgrad": dict(D=3, absgrad=True),
    "packed_masks_absgrad": dict(D=4, packed=True, masks=True, absgrad=True),
    "batch_dims": dict(D=3, I=4, background=True, masks=True, batch=(2, 2)),
}


@pytest.mark.parametrize("case", RASTER_CASES.values(), ids=RASTER_CASES)
def test_rasterize_to_pixels_matches_cpu(device, case):
    case = dict(case)
    absgrad = case.pop("absgrad", False)
    inputs, options = raster_inputs(**case)
    call = rasterize(**options, absgrad=absgrad)
    names = raster_grad_names(inputs)
    want = run(call, inputs, names)
    got = run(call, inputs, names, device)
    alphas = want.outputs[1]
    assert (alphas > 0.5).any() and (alphas < 0.5).any(), (
        "the scene must have covered and open pixels"
    )
    assert_same(got, want, "raster", "raster_grad", ["render_colors", "render_alphas"])
    if absgrad:
        cpu_abs, cuda_abs = want.leaves["means2d"].absgrad, got.leaves["means2d"].absgrad
        assert cpu_abs.abs().max() > 0
        assert_matches(cuda_abs, cpu_abs, TOLERANCES["raster_grad"], "means2d.absgrad")


# -------------------------------------------------------------------- relocation


@pytest.mark.parametrize("ratio_dtype", [torch.int32, torch.int64])
def test_compute_relocation_matches_cpu(device, ratio_dtype):
    inputs = relocation_inputs(ratio_dtype)
    want = run(relocate, inputs)
    got = run(relocate, inputs, device=device)
    assert_same(got, want, "relocation", None, ["new_opacities", "new_scales"])
    # Ratio 1 (and the ratios below 1, clamped to it) returns the inputs bit for bit.
    one = inputs["ratios"] <= 1
    assert one.any() and torch.equal(got.outputs[0][one], inputs["opacities"][one])
    assert torch.equal(got.outputs[1][one], inputs["scales"][one])


# ------------------------------------------------------------------ pack_visible


def test_pack_visible_matches_cpu(device):
    """The packed pairs, their ids and the dense pairs' gradients back are copies: the CPU's
    bytes. The per-Gaussian gradients add a Gaussian's rows (three cameras) with atomics, in
    any order: within float32 rounding (tests/ops/test_pack.py checks the CPU kernel against
    gsplat's chain of ops)."""
    from pack_scenes import dense_outputs, gaussian_inputs

    B, C, N = 2, 3, 5000
    inputs = (*dense_outputs(B, C, N, seed=17), *gaussian_inputs(B, N, F=3, seed=17))
    want = torch.ops.prebuild.pack_visible(*inputs)
    got = torch.ops.prebuild.pack_visible(*(t.to(device) for t in inputs))
    for a, b in zip(got, want):
        assert a.device == device and torch.equal(a.cpu(), b)
    grads = [torch.randn(t.shape) for t in want[5:]]
    grads[1] = None  # an absent gradient
    want_back = torch.ops.prebuild.pack_visible_backward(want[3], want[2], *grads, B, C, N)
    got_back = torch.ops.prebuild.pack_visible_backward(
        got[3], got[2], *(None if g is None else g.to(device) for g in grads), B, C, N
    )
    for k, (a, b) in enumerate(zip(got_back, want_back)):
        if k < 4:
            assert torch.equal(a.cpu(), b)
        else:
            torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ rasterization()


PIPELINE_CASES = {
    "dense_background": dict(inputs=dict(background=True), render=dict(packed=False)),
    "packed": dict(inputs=dict(), render=dict(packed=True)),
    "antialiased": dict(inputs=dict(), render=dict(rasterize_mode="antialiased")),
    "sh3_packed": dict(inputs=dict(sh_degree=3, background=True), render=dict(sh_degree=3)),
    "sh2_dense_per_camera": dict(
        inputs=dict(sh_degree=2, per_camera=True), render=dict(packed=False, sh_degree=2)
    ),
    "ortho": dict(inputs=dict(background=True), render=dict(packed=False, camera_model="ortho")),
    "fisheye": dict(inputs=dict(), render=dict(camera_model="fisheye")),
    "rgb_expected_depth": dict(inputs=dict(background=True), render=dict(render_mode="RGB+ED")),
    "depth": dict(inputs=dict(), render=dict(packed=False, render_mode="D")),
    "batch_dims": dict(inputs=dict(batch=(2,), background=True), render=dict()),
    "absgrad": dict(inputs=dict(), render=dict(absgrad=True)),
}


@pytest.mark.parametrize("case", PIPELINE_CASES.values(), ids=PIPELINE_CASES)
def test_rasterization_matches_cpu(device, case):
    """The whole chain (projection, SH, tile intersection, rasterization) and every gradient
    it gives the Gaussians, cameras and backgrounds."""
    inputs = pipeline_inputs(**case["inputs"])
    call = render(**case["render"])
    names = pipeline_grad_names(inputs)
    want = run(call, inputs, names)
    got = run(call, inputs, names, device)
    assert want.outputs[1].max() > 0.5, "the scene must cover pixels"
    fisheye = case["render"].get("camera_model") == "fisheye"
    assert_same(got, want, "raster", "fisheye_grad" if fisheye else "raster_grad", PIPELINE_OUTPUTS)
    if case["render"].get("absgrad"):
        cpu_abs, cuda_abs = want.raw[2].absgrad, got.raw[2].absgrad
        assert cpu_abs.abs().max() > 0
        assert_matches(cuda_abs, cpu_abs, TOLERANCES["raster_grad"], "meta['means2d'].absgrad")


# --------------------------------------------------------- torch.compile(fullgraph=True)


def compiled_and_eager(call, inputs, grad_names, device) -> tuple[Result, Result]:
    torch._dynamo.reset()  # no graph of another test reused, none left for the next
    try:
        compiled = run(torch.compile(call, fullgraph=True), inputs, grad_names, device)
    finally:
        torch._dynamo.reset()
    return compiled, run(call, inputs, grad_names, device)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_fused_ssim_compiled_matches_eager(padding):
    fused_ssim = prebuild.fused_ssim  # resolved here: dynamo traces a plain function

    def loss(img1, img2):
        return 1 - fused_ssim(img1, img2, padding=padding)

    compiled, eager = compiled_and_eager(
        loss, ssim_images((2, 3, 40, 36), seed=16), ("img1", "img2"), torch.device("cuda", 0)
    )
    assert_same(compiled, eager, "compiled", "compiled", ["loss"])
    assert all(g.abs().max() > 0 for g in compiled.grads.values())


def test_rasterization_forward_compiled_matches_eager():
    """Dense (packed's nonzero would need dynamo's capture_dynamic_output_shape_ops), with
    isect_tiles' data-dependent entry count traced as an unbacked size."""
    rasterization = prebuild.rasterization  # resolved here: dynamo traces a plain function

    def forward(means, quats, scales, opacities, colors, viewmats, Ks, backgrounds):
        render_colors, render_alphas, _ = rasterization(
            means,
            quats,
            scales,
            opacities,
            colors,
            viewmats,
            Ks,
            RW,
            RH,
            packed=False,
            tile_size=16,
            backgrounds=backgrounds,
        )
        return render_colors, render_alphas

    compiled, eager = compiled_and_eager(
        forward, pipeline_inputs(background=True), (), torch.device("cuda", 0)
    )
    assert eager.outputs[1].max() > 0.5
    assert_same(compiled, eager, "compiled", None, ["render_colors", "render_alphas"])


# --------------------------------------- streams, strides, devices: every op, one call each


@dataclass(frozen=True)
class Workload:
    """One call of a public op: its inputs (CPU tensors), the call, the inputs that get
    gradients, and its TOLERANCES entries."""

    inputs: Callable[[], dict]
    call: Callable[..., Any]
    grad_names: tuple
    values: str | None
    grads: str | None
    other_device_input: str  # put on cuda:1 in the two-device test
    deterministic_forward: bool = True  # only prebuild's kernels: the same bits every run


# The calls name prebuild's functions only when they run: looking one up loads prebuild's
# libraries, which must not happen while pytest collects (a GPU machine whose torch is too
# old for the build would then report a collection error instead of the conftest's skip).
WORKLOADS = {
    "fused_ssim": Workload(
        lambda: ssim_images((2, 3, 37, 53), seed=9),
        lambda img1, img2: prebuild.fused_ssim(img1, img2),
        ("img1", "img2"),
        "ssim",
        "ssim_grad",
        "img2",
    ),
    "fully_fused_projection": Workload(
        lambda: projection_inputs("quats", seed=10),
        project(calc_compensations=True),
        projection_grad_names("quats"),
        "projection",
        "projection_grad",
        "viewmats",
    ),
    "proj": Workload(
        lambda: proj_inputs(seed=11),
        lambda means, covars, Ks: prebuild.proj(means, covars, Ks, W, H),
        ("means", "covars"),
        "projection",
        "projection_grad",
        "Ks",
    ),
    "quat_scale_to_covar_preci": Workload(
        lambda: covariance_inputs(seed=12),
        lambda quats, scales: prebuild.quat_scale_to_covar_preci(quats, scales),
        ("quats", "scales"),
        "covariance",
        "covariance_grad",
        "scales",
    ),
    "spherical_harmonics": Workload(
        lambda: sh_inputs(masked=True, seed=13),
        lambda dirs, coeffs, masks: prebuild.spherical_harmonics(3, dirs, coeffs, masks),
        ("dirs", "coeffs"),
        "sh",
        "sh",
        "masks",
    ),
    "isect_tiles": Workload(
        lambda: tile_inputs(packed=False)[0], intersect(16, 6), (), None, None, "depths"
    ),
    "rasterize_to_pixels": Workload(
        lambda: raster_inputs(D=3, background=True, masks=True)[0],
        rasterize(37, 23, 16, False),
        ("means2d", "conics", "colors", "opacities", "backgrounds"),
        "raster",
        "raster_grad",
        "colors",
    ),
    "compute_relocation": Workload(relocation_inputs, relocate, (), "relocation", None, "ratios"),
    # The SH directions come from torch.inverse(viewmats): torch's own solver, not prebuild's.
    "rasterization": Workload(
        lambda: pipeline_inputs(sh_degree=3, background=True),
        render(sh_degree=3),
        ("means", "quats", "scales", "opacities", "colors", "viewmats", "backgrounds"),
        "raster",
        "raster_grad",
        "viewmats",
        deterministic_forward=False,
    ),
}


def strided(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A non-contiguous tensor holding ``t``'s values: "sliced", every other element (from
    the second) of a tensor twice as wide in the last dimension; "permuted", stored with the
    dimensions in reverse order (1-D tensors are sliced)."""
    if layout == "permuted" and t.dim() >= 2:
        order = list(reversed(range(t.dim())))
        out = t.permute(order).contiguous().permute(order)
    else:
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1] + 1, dtype=t.dtype, device=t.device)
        wide[..., 1::2] = t
        out = wide[..., 1::2]
    assert torch.equal(out, t) and not out.is_contiguous(), (layout, tuple(t.shape))
    return out


@pytest.mark.parametrize("layout", ["sliced", "permuted"])
@pytest.mark.parametrize("name", WORKLOADS)
def test_noncontiguous_inputs_give_the_contiguous_results(name, layout):
    """The wrappers make contiguous float32 copies, so the kernels see the same bytes: the
    same forward, bit for bit (gradients: the backward kernels' atomics may sum in another
    order, so within the op's gradient tolerance)."""
    w = WORKLOADS[name]
    device = torch.device("cuda", 0)
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in w.inputs().items()}
    contiguous = run(w.call, inputs, w.grad_names, device)
    strided_inputs = {
        k: strided(v, layout) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()
    }
    result = run(w.call, strided_inputs, w.grad_names, device)
    assert all(not t.is_contiguous() for t in result.leaves.values() if isinstance(t, torch.Tensor))
    assert_same(
        result, contiguous, w.values, w.grads, values_tol=EXACT if w.deterministic_forward else None
    )


SPIN_CYCLES = 200_000_000  # about 0.1 s of GPU clock: a kernel on a wrong stream runs meanwhile


@pytest.mark.parametrize("name", WORKLOADS)
def test_ops_use_the_current_stream(name):
    """Under ``torch.cuda.stream(side)``: the inputs are written on the side stream only after
    a spin kernel, into buffers that hold NaN (integers: -1) until then; the op and its
    backward are called there, and their results read there. A kernel launched on any other
    stream would read the NaN inputs; one on the default stream (held busy twice as long)
    would leave its outputs unwritten (they get memory that was just filled with NaN on the
    side stream) when the side stream reads them. Compared with the CPU once synchronised."""
    w = WORKLOADS[name]
    device = torch.device("cuda", 0)
    cpu_inputs = w.inputs()
    want = run(w.call, cpu_inputs, w.grad_names)
    sources = {k: v.to(device) for k, v in cpu_inputs.items() if isinstance(v, torch.Tensor)}
    torch.cuda.synchronize(device)
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(torch.cuda.default_stream(device)):
        torch.cuda._sleep(2 * SPIN_CYCLES)
    with torch.cuda.stream(side):
        torch.cuda._sleep(SPIN_CYCLES)
        # Freed on this stream, these blocks (filled after the spin) are what the op's
        # outputs are carved from.
        poison = [
            torch.full((n,), float("nan"), device=device)
            for n in (1 << 10, 1 << 14, 1 << 18, 1 << 22)
            for _ in range(4)
        ]
        del poison
        inputs = {}
        for k, v in cpu_inputs.items():
            if isinstance(v, torch.Tensor):
                fill = (
                    float("nan")
                    if v.dtype.is_floating_point
                    else (True if v.dtype == torch.bool else -1)
                )
                inputs[k] = torch.full_like(sources[k], fill).copy_(sources[k])
            else:
                inputs[k] = v
        got = run(w.call, inputs, w.grad_names, device)
    torch.cuda.synchronize(device)
    assert_same(got, want, w.values, w.grads)


@pytest.mark.parametrize("name", WORKLOADS)
def test_inputs_on_two_devices_are_refused(name):
    """One input on cuda:1, the rest on cuda:0: a ValueError saying so, before any launch."""
    if visible_devices() < 2:
        pytest.skip(f"needs two GPUs; {visible_devices()} visible")
    w = WORKLOADS[name]
    inputs = {
        k: v.to("cuda:1" if k == w.other_device_input else "cuda:0")
        if isinstance(v, torch.Tensor)
        else v
        for k, v in w.inputs().items()
    }
    assert inputs[w.other_device_input].device == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="same device"):
        w.call(**inputs)
