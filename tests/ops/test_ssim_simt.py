"""The fused SSIM CUDA kernels' own block bodies (csrc/ssim/ssim_kernels.h), executed on the
CPU by the SIMT launcher, against the plain CPU implementation and the PyTorch reference.
Sizes cover partial tiles, images smaller than one tile, and B, C > 1."""

from __future__ import annotations

import pytest
import torch
from reference import ssim_map_reference, textured

from prebuild.testing import simt

pytestmark = pytest.mark.simt

CPU = torch.ops.prebuild
# Tiles: 32 wide; 32 rows (the forward, img1's backward) or 24 (the backward of both).
SHAPES = [
    (1, 1, 1, 1),  # one pixel: the whole window is halo
    (1, 1, 5, 7),  # smaller than one tile
    (2, 3, 17, 23),  # partial tiles on both axes, B and C > 1
    (3, 2, 32, 32),  # exactly one forward tile
    (1, 2, 33, 40),  # 2x2 tiles, the last ones partial
    (2, 1, 75, 11),  # tall and narrow: three and four tile rows
    (1, 1, 48, 70),  # two 24-row tiles exactly, three columns of tiles
]


def images(shape, seed=0):
    x = textured(shape, seed=seed)
    gen = torch.Generator().manual_seed(seed + 7)
    return x, (x + 0.1 * torch.randn(shape, generator=gen)).clamp(0, 1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("train", [True, False])
def test_forward_matches_cpu_and_reference(shape, train):
    x, y = images(shape)
    ssim_map, dS = simt.fused_ssim_forward(x, y, train)
    cpu_map, cpu_dS = CPU.fused_ssim_forward(x, y, train)
    torch.testing.assert_close(ssim_map, cpu_map, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dS, cpu_dS, rtol=1e-5, atol=1e-5)
    assert dS.shape == ((4, *shape) if train else (0,))
    torch.testing.assert_close(ssim_map.double(), ssim_map_reference(x, y), rtol=0, atol=1e-4)


@pytest.mark.parametrize("shape", SHAPES)
def test_cpu_kernels_equal_the_cuda_kernels_bit_for_bit(shape):
    """The CPU passes sum every window tap in the CUDA kernels' order (zero padding included):
    SSIM map, dS and both image gradients are the same floats on both backends."""
    x, y = images(shape, seed=3)
    cpu, gpu = CPU.fused_ssim_forward(x, y, True), simt.fused_ssim_forward(x, y, True)
    assert torch.equal(cpu[0], gpu[0]) and torch.equal(cpu[1], gpu[1])
    grad = torch.rand(shape, generator=torch.Generator().manual_seed(4))
    for a, b in zip(
        CPU.fused_ssim_backward(grad, x, y, cpu[1]), simt.fused_ssim_backward(grad, x, y, gpu[1])
    ):
        assert torch.equal(a, b)


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_backward_is_both_kernels_back_to_back(shape):
    """The tiled fused_ssim_forward_backward: the forward's map, and the backward of
    dL/dmap = 1 at every pixel; the CPU's one-pass version gives the same bits."""
    x, y = images(shape, seed=5)
    m, g1, g2 = simt.fused_ssim_forward_backward(x, y)
    fm, dS = simt.fused_ssim_forward(x, y, True)
    b1, b2 = simt.fused_ssim_backward(torch.ones(shape), x, y, dS)
    torch.testing.assert_close(g1, b1, rtol=1e-5, atol=1e-6)
    assert torch.equal(m, fm) and torch.equal(
        g2, simt.fused_ssim_backward(torch.tensor(1.0).expand(shape), x, y, dS)[1]
    )
    for a, b in zip(CPU.fused_ssim_forward_backward(x, y), (m, g1, g2)):
        assert torch.equal(a, b)
    _, h1, h2 = simt.fused_ssim_forward_backward(x, y, False)
    assert torch.equal(h1, g1) and h2.shape == (0,)


@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_cpu_and_reference(shape):
    x, y = images(shape, seed=3)
    grad_map = torch.rand(shape)
    _, dS = simt.fused_ssim_forward(x, y, True)
    g1, g2 = simt.fused_ssim_backward(grad_map, x, y, dS)
    c1, c2 = CPU.fused_ssim_backward(grad_map, x, y, dS)
    torch.testing.assert_close(g1, c1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g2, c2, rtol=1e-5, atol=1e-6)

    xr = x.double().requires_grad_(True)
    yr = y.double().requires_grad_(True)
    r1, r2 = torch.autograd.grad(ssim_map_reference(xr, yr), (xr, yr), grad_map.double())
    for got, want in ((g1, r1), (g2, r2)):
        torch.testing.assert_close(
            got.double(), want, rtol=1e-4, atol=1e-5 * max(1.0, want.abs().max().item())
        )


@pytest.mark.parametrize("shape", SHAPES)
def test_img1_alone_stores_three_maps_and_gets_the_same_gradient(shape):
    """grad_img2=False: the forward stores img1's three maps (the first three of the four),
    and the backward from them gives img1's gradient, the same bits as from all four."""
    x, y = images(shape, seed=9)
    grad_map = torch.rand(shape, generator=torch.Generator().manual_seed(10))
    m4, dS4 = simt.fused_ssim_forward(x, y, True)
    m3, dS3 = simt.fused_ssim_forward(x, y, True, False)
    assert dS3.shape == (3, *shape) and torch.equal(m3, m4) and torch.equal(dS3, dS4[:3])
    for g in (grad_map, torch.tensor(0.5).expand(shape)):  # per pixel, and one broadcast value
        g1, g2 = simt.fused_ssim_backward(g, x, y, dS3, False)
        want, _ = simt.fused_ssim_backward(g, x, y, dS4, False)
        cpu, _ = CPU.fused_ssim_backward(g, x, y, dS3, False)
        assert g2.shape == (0,) and torch.equal(g1, want) and torch.equal(g1, cpu)
    with pytest.raises(RuntimeError, match="img2's gradient needs the 4 maps"):
        simt.fused_ssim_backward(grad_map, x, y, dS3)


def test_identical_images_give_one_and_zero_gradient():
    x, _ = images((2, 2, 20, 9))
    ssim_map, dS = simt.fused_ssim_forward(x, x, True)
    torch.testing.assert_close(ssim_map, torch.ones_like(ssim_map), rtol=0, atol=1e-6)
    g1, g2 = simt.fused_ssim_backward(torch.ones_like(x), x, x, dS)
    assert g1.abs().max() < 1e-4 and g2.abs().max() < 1e-4


def test_the_cuda_backward_refuses_an_empty_dS():
    """Only the CPU backward recomputes the derivatives; the CUDA kernels need them stored
    (the autograd formula stores them for CUDA tensors)."""
    x, y = images((1, 1, 8, 8))
    _, no_dS = simt.fused_ssim_forward(x, y, False)
    with pytest.raises(RuntimeError, match=r"needs the dS of fused_ssim_forward\(train=True\)"):
        simt.fused_ssim_backward(torch.ones_like(x), x, y, no_dS)


def test_bad_input_is_refused_like_the_real_backends():
    x, y = images((1, 1, 8, 8))
    with pytest.raises(RuntimeError, match="same shape"):
        simt.fused_ssim_forward(x, y[..., :7], True)
    with pytest.raises(RuntimeError, match="float32"):
        simt.fused_ssim_forward(x.double(), y.double(), True)
