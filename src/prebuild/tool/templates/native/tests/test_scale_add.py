"""scale_add on the CPU: the CPU kernel against plain PyTorch, the op's registrations with
opcheck and torch.compile, gradients, input errors, and the CUDA kernel's own block body run
on the CPU (the simt library: PREBUILD_SIMT=1 builds)."""

from __future__ import annotations

import pytest
import torch

import ${package}
from ${package}._library import LIBRARY


def inputs(*shape, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(*shape, generator=g, requires_grad=requires_grad),
            torch.randn(*shape, generator=g, requires_grad=requires_grad))


@pytest.mark.parametrize("shape", [(0,), (1,), (1000,), (3, 257, 5)])
def test_matches_plain_pytorch(shape):
    x, y = inputs(*shape)
    torch.testing.assert_close(${package}.scale_add(x, y, 0.5), x + 0.5 * y)


def test_gradients_flow_to_both_inputs():
    x, y = inputs(4, 5, requires_grad=True)
    ${package}.scale_add(x, y, -2.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(4, 5))
    torch.testing.assert_close(y.grad, torch.full((4, 5), -2.0))


def test_opcheck_and_torch_compile():
    x, y = inputs(8, 3)
    torch.library.opcheck(torch.ops.${namespace}.scale_add.default, (x, y, 1.5))
    compiled = torch.compile(lambda a, b: ${package}.scale_add(a, b, 1.5) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), (x + 1.5 * y) * 2)


@pytest.mark.parametrize("args, error, message", [
    ((torch.ones(3), torch.ones(4)), ValueError, "same shape"),
    ((torch.ones(3, dtype=torch.float64), torch.ones(3)), TypeError, "x must be float32"),
    ((torch.ones(3), [1.0, 2.0, 3.0]), TypeError, "y must be a torch.Tensor"),
    ((torch.ones(3), torch.ones(3), "2"), TypeError, "alpha must be a real number"),
])  # fmt: skip
def test_bad_inputs_are_named(args, error, message):
    with pytest.raises(error, match=message):
        ${package}.scale_add(*args)


def test_the_cuda_block_body_on_the_cpu():
    if LIBRARY.manifest.library("simt") is None:
        pytest.skip("no simt library in this install: build with PREBUILD_SIMT=1")
    LIBRARY.load_optional("simt")
    x, y = inputs(1000)  # four blocks of 256 threads, the last one partly idle
    torch.testing.assert_close(torch.ops.${namespace}_simt.scale_add(x, y, 0.25), x + 0.25 * y)
