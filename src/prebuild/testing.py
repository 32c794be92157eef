"""Test-only access to the simt backend: the CUDA kernels' own block bodies, executed on the
CPU by the SIMT launcher (prebuild/simt_launcher.h).

``prebuild.testing.simt`` is ``torch.ops.prebuild_simt``: the same op schemas as
``torch.ops.prebuild``, implemented by running the CUDA kernel source on CPU tensors. It
exists only in installs built with ``PREBUILD_SIMT=1`` (scripts/bootstrap.sh does this);
release wheels do not carry it.
"""

from __future__ import annotations

import torch

from prebuild.ops import *  # noqa: F403 - the library and every family's Python registrations
from prebuild.ops._library import LIBRARY

LIBRARY.load_optional("simt")

simt = torch.ops.prebuild_simt

__all__ = ["simt"]
