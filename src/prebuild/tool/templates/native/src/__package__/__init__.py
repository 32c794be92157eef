"""${name}: CUDA and CPU kernels built ahead of time with prebuild.

``import ${package}`` is cheap; the first use of an op loads the prebuilt libraries (never
compiling anything) and raises a typed error naming the fix if this install cannot run them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["scale_add"]


def __getattr__(name: str) -> Any:
    if name == "scale_add":
        from ${package}.ops import scale_add

        return scale_add
    raise AttributeError(f"module '${package}' has no attribute {name!r}")
