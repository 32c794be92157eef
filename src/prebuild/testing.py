"""Test-only access to the simt backend: the CUDA kernels' own block bodies, executed on the
CPU by the SIMT launcher (prebuild/simt_launcher.h).

``prebuild.testing.simt`` is ``torch.ops.prebuild_simt``: the same op schemas as
``torch.ops.prebuild``, implemented by running the CUDA kernel source on CPU tensors, with
the same fake and autograd kernels. ``use_simt()`` makes the public functions
(``prebuild.rasterization`` and the rest) launch them instead of the CPU kernels::

    with prebuild.testing.use_simt():
        colors, alphas, meta = prebuild.rasterization(...)   # the CUDA kernels' code
        colors.sum().backward()                              # (the backward follows its forward)

The simt library exists only in installs built with ``PREBUILD_SIMT=1``
(scripts/bootstrap.sh does this); release wheels do not carry it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from prebuild.ops import *  # noqa: F403 - the library and every family's Python registrations
from prebuild.ops._library import SIMT, load_simt, pop_namespace, push_namespace

load_simt()

simt = torch.ops.prebuild_simt


@contextlib.contextmanager
def use_simt() -> Iterator[None]:
    """Within the block, the public functions launch the simt kernels (this thread and the
    others alike: it is a test switch, not a per-call option)."""
    push_namespace(SIMT)
    try:
        yield
    finally:
        pop_namespace()


__all__ = ["simt", "use_simt"]
